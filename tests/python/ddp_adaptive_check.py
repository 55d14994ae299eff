"""Under mpirun: adaprec.torch.AdaptivePrecision driving real DDP (gloo, CPU) with the AdaPrec hook.

1. Restore restores: after training a few steps in table2+ef (residuals, momentum, scheduler and RNG
   all moved on), restore(snapshot) gives back the parameters, buffers, optimizer state, scheduler
   state, every RNG state and the hook's residuals bit for bit.
2. No leak between branches: branch A (table2+ef, 5 steps) from a snapshot, restore, branch B (fp8s+ef),
   restore, branch A again: A's end state is bit-identical both times (the model has dropout, so the
   torch RNG must be restored too; residuals and momentum carry over steps).
3. The learning-rate schedule the driver passes to the controller: a spec string (parsed by the
   library), a callable, the older learning_rate= name and "scheduler" (read from the StepLR by stepping
   it ahead) give the same rates, and reading the scheduler leaves it and the optimizer as they were;
   malformed or conflicting arguments raise one-line errors.
   A CyclicLR (its state holds a WeakMethod that copy.deepcopy refuses) snapshots, restores and is read
   ahead.
4. A whole adaptive run (3 candidates, fixed phases, lr_schedule="scheduler"): every rank takes the same
   decisions, ends with bit-identical parameters, and the decision records have adaprec-train's fields
   and say the predictor used the schedule ("lr_schedule": "points:N").
"""

import ctypes
import faulthandler
import hashlib
import math
import random
import sys

import numpy
import torch
import torch.distributed as dist
import torch.nn as nn
from mpi4py import MPI

import adaprec
import adaprec.torch as adaprec_torch

world = MPI.COMM_WORLD
rank, size = world.rank, world.size
failures = []


def check(condition, what):
    if not condition:
        failures.append(f"rank {rank}: {what}")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(32, 128)
        self.drop = nn.Dropout(0.2)  # uses the torch RNG: a branch replay needs it restored
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        return self.head(self.drop(torch.relu(self.stem(x))))


TEACHER = torch.randn(32, 10, generator=torch.Generator().manual_seed(1234))
VALIDATION = torch.randn(256, 32, generator=torch.Generator().manual_seed(99))


def batch(step):
    """This rank's batch of global step `step` (the same whenever the step is replayed)."""
    g = torch.Generator().manual_seed(100000 * step + rank)
    x = torch.randn(32, 32, generator=g)
    return x, (x @ TEACHER).argmax(dim=1)


def setup(make_scheduler=lambda optimizer: torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.7)):
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(Net(), bucket_cap_mb=0.01)
    state = adaprec_torch.HookState(format="fp32", algo="twoshot")  # auto sends small buckets natively
    model.register_comm_hook(state, adaprec_torch.hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = make_scheduler(optimizer)

    def train_step(step):
        x, y = batch(step)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        scheduler.step()
        # numpy and python RNG users in a training loop (augmentation, sampling) must be replayed too
        numpy.random.random()
        random.random()

    def evaluate():
        model.eval()
        with torch.no_grad():
            accuracy = (model(VALIDATION).argmax(1) == (VALIDATION @ TEACHER).argmax(1)).float().mean().item()
        model.train()
        return accuracy

    return model, state, optimizer, scheduler, train_step, evaluate


def tensors_equal(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(tensors_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(tensors_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, numpy.ndarray):
        return numpy.array_equal(a, b)
    return a == b


def states_equal(a, b, what):
    check(tensors_equal(a.model, b.model), f"{what}: model parameters/buffers differ")
    check(tensors_equal(a.optimizer, b.optimizer), f"{what}: optimizer state differs")
    check(tensors_equal(a.scheduler, b.scheduler), f"{what}: scheduler state differs")
    check(tensors_equal(a.rng, b.rng), f"{what}: RNG state differs")
    check(a.residuals == b.residuals, f"{what}: error-feedback residuals differ")
    check(a.hook_layout == b.hook_layout, f"{what}: hook bucket keys differ")


def restore_checks():
    model, state, optimizer, scheduler, train_step, evaluate = setup()
    driver = adaprec_torch.AdaptivePrecision(model, optimizer, state, train_step, evaluate, total_steps=100,
                                             scheduler=scheduler, candidates=["fp32", "table2+ef"])
    state.format = "table2+ef"
    for step in range(6):
        train_step(step)
    snap = driver.snapshot(6)
    check(len(snap.residuals) > 100, "table2+ef left no residuals to snapshot")
    # 1. Training moves everything on; restore brings every piece back.
    for step in range(6, 11):
        train_step(step)
    moved = driver.snapshot(11)
    check(not tensors_equal(moved.model, snap.model) and moved.residuals != snap.residuals
          and not tensors_equal(moved.rng, snap.rng), "training did not change the state (test is vacuous)")
    driver.restore(snap)
    states_equal(driver.snapshot(6), snap, "after restore")

    # 2. A, B, A from the same snapshot: A's two ends are identical.
    def branch(fmt):
        driver.restore(snap)
        state.format = fmt
        for step in range(6, 11):
            train_step(step)
        return driver.snapshot(11)

    a1 = branch("table2+ef")
    b = branch("fp8s+ef")
    a2 = branch("table2+ef")
    check(not tensors_equal(a1.model, b.model), "branches A and B ended equal (test is vacuous)")
    states_equal(a1, a2, "branch A replayed after branch B")
    state.close()


def schedule_checks():
    model, state, optimizer, scheduler, train_step, evaluate = setup()
    for step in range(10):
        train_step(step)

    def driver(**kwargs):
        kwargs.setdefault("total_steps", 100)
        return adaprec_torch.AdaptivePrecision(model, optimizer, state, train_step, evaluate,
                                               scheduler=scheduler, candidates=["fp32", "fp16"], **kwargs)

    def step_lr(s):  # StepLR(step_size=7, gamma=0.7) on lr 0.1
        return 0.1 * 0.7 ** (s // 7)

    expected = [step_lr(s) for s in range(10, 40)]
    before = (scheduler.state_dict(), [dict((k, v) for k, v in g.items() if k != "params")
                                       for g in optimizer.param_groups])
    read = driver(lr_schedule="scheduler").phase_learning_rates(10, 30)
    after = (scheduler.state_dict(), [dict((k, v) for k, v in g.items() if k != "params")
                                      for g in optimizer.param_groups])
    check(before == after, "reading the scheduler's rates changed the scheduler or the optimizer")
    milestones = ",".join(str(7 * k) for k in range(1, 15))
    spec = driver(lr_schedule=f"step:0.7:{milestones}").phase_learning_rates(10, 30)
    called = driver(lr_schedule=step_lr).phase_learning_rates(10, 30)
    older = driver(learning_rate=step_lr).phase_learning_rates(10, 30)
    for name, rates in (("scheduler", read), ("spec x 0.1", [0.1 * r for r in spec]), ("callable", called),
                        ("learning_rate", older)):
        check(len(rates) == 30 and all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(rates, expected)),
              f"lr_schedule {name}: rates {rates[:9]} ... != StepLR's {expected[:9]} ...")
    check(driver().phase_learning_rates(10, 30) is None, "no schedule gave rates")
    # Settings left out are the controller library's defaults, not restated ones; given ones win.
    from adaprec import _capi
    defaults = _capi.ControllerOptions()
    _capi.controller_lib().AdaPrec_ControllerDefaultOptions(ctypes.byref(defaults))
    plain = driver()
    check(plain.continuation_steps == defaults.continuationSteps and plain.prune == bool(defaults.prune),
          f"driver defaults {plain.continuation_steps}, {plain.prune} are not the library's "
          f"{defaults.continuationSteps}, {defaults.prune}")
    given = driver(continuation_steps=7, prune=False)
    check(given.continuation_steps == 7 and given.prune is False, "given settings were not kept")
    for kwargs, says in (({"lr_schedule": "cosine:0"}, "lr schedule 'cosine:0': TOTAL must be a number > 0"),
                         ({"lr_schedule": "cosine:10", "learning_rate": step_lr}, "not both"),
                         ({"lr_schedule": 0.1}, "must be a spec string"),
                         # negative counts wrapped around in the C API (a 30-step run did 6 phases)
                         ({"continuation_steps": -5}, "continuation_steps must be an integer from 1 to 2^64-1"),
                         # and 2^64 wrapped to 0: "continuation steps ... must be >= 1", a misleading line
                         ({"continuation_steps": 2**64}, "continuation_steps must be an integer from 1 to 2^64-1"),
                         ({"total_steps": -10}, "total_steps must be an integer from 0 to 2^64-1")):
        try:
            driver(**kwargs)
            check(False, f"{kwargs} was accepted")
        except adaprec.InvalidArgumentError as error:
            check(says in str(error) and "\n" not in str(error), f"{kwargs}: {error}")
    # schedule_rates: a negative count crashed (segfault), a negative first step wrapped to 2^64 - 5.
    check(adaprec_torch.schedule_rates("cosine:100", 0, 2) == [1.0, 0.5 * (1 + math.cos(math.pi / 100))],
          "schedule_rates cosine:100 at steps 0, 1")
    for args, says in ((("cosine:100", 0, -1), "count must be an integer from 0 to 2^64-1"),
                       (("cosine:100", -5, 3), "first must be an integer from 0 to 2^64-1"),
                       (("constant", 2**64, 1), "first must be an integer from 0 to 2^64-1"),
                       (("cosine:100\0junk", 0, 3), "contains a NUL character")):
        try:
            adaprec_torch.schedule_rates(*args)
            check(False, f"schedule_rates{args} was accepted")
        except adaprec.InvalidArgumentError as error:
            check(says in str(error), f"schedule_rates{args}: {error}")
    state.close()


def cyclic_scheduler_checks():
    """CyclicLR's state holds a WeakMethod that copy.deepcopy cannot copy: snapshot() and reading the
    rates ahead raised TypeError ("cannot pickle 'WeakMethod' object") with it."""
    model, state, optimizer, cyclic, train_step, evaluate = setup(
        lambda optimizer: torch.optim.lr_scheduler.CyclicLR(optimizer, base_lr=0.01, max_lr=0.1, step_size_up=5))
    driver = adaprec_torch.AdaptivePrecision(model, optimizer, state, train_step, evaluate, total_steps=100,
                                             scheduler=cyclic, candidates=["fp32", "fp16"],
                                             lr_schedule="scheduler")
    for step in range(3):
        train_step(step)
    snap = driver.snapshot(3)
    rates = driver.phase_learning_rates(3, 12)
    expected = [0.01 + 0.09 * (1 - abs(s / 5 % 2 - 1)) for s in range(3, 15)]  # triangular, period 10
    check(all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(rates, expected)),
          f"CyclicLR read ahead: {rates} != {expected}")
    for step in range(3, 8):
        train_step(step)
    check(cyclic.last_epoch == 8, "CyclicLR did not move (test is vacuous)")
    driver.restore(snap)
    check(cyclic.last_epoch == 3 and math.isclose(optimizer.param_groups[0]["lr"], expected[0], rel_tol=1e-9),
          f"CyclicLR after restore: epoch {cyclic.last_epoch}, lr {optimizer.param_groups[0]['lr']}")
    states_equal(driver.snapshot(3), snap, "CyclicLR after restore")
    state.close()


def adaptive_run():
    model, state, optimizer, scheduler, train_step, evaluate = setup()
    driver = adaprec_torch.AdaptivePrecision(
        model, optimizer, state, train_step, evaluate, total_steps=60, scheduler=scheduler,
        candidates=["fp32", "fp16", "table2+ef"], speculative_steps=6, eval_points=2,
        continuation_steps=10, max_overhead=1, validation_images=256,
        lr_schedule="scheduler", prune=False)  # every phase decides (pruning: pruned_runs)
    regular = list(driver.steps())  # train_step runs inside steps() for the branches only
    for step in regular:
        train_step(step)
    decisions = [(r["step"], r["choice"], r["continuation_steps"]) for r in driver.records]
    check(len(decisions) >= 3, f"only {len(decisions)} decisions in 60 steps")
    check(all(r["event"] == "decision" and len(r["candidates"]) == 3 and "predicted_mean" in r["candidates"][0]
              for r in driver.records), "decision records lack adaprec-train's fields")
    schedules = [r.get("lr_schedule") for r in driver.records]
    check(all(str(x).startswith("points:") for x in schedules),
          f"the StepLR's rates did not reach the predictor: lr_schedule {schedules}")
    every = world.allgather(decisions)
    check(all(d == every[0] for d in every), f"ranks took different decisions: {every}")
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    digests = world.allgather(digest)
    check(len(set(digests)) == 1, f"parameters differ across ranks: {digests}")
    if rank == 0:
        print(f"decisions: {decisions}; snapshot {driver.snapshot_seconds / driver.snapshots * 1e3:.2f} ms, "
              f"restore {driver.restore_seconds / driver.restores * 1e3:.2f} ms")
    state.close()


def digest_of(model):
    return hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()


def pruned_runs():
    # min_speedup 0.99: every candidate but fp32 is "not faster", so every phase is skipped after the
    # first one's probes; restoring from the probes must leave exactly a plain fp32 run.
    model, state, optimizer, scheduler, train_step, evaluate = setup()
    for step in range(40):
        train_step(step)
    plain = digest_of(model)
    state.close()
    model, state, optimizer, scheduler, train_step, evaluate = setup()
    driver = adaprec_torch.AdaptivePrecision(
        model, optimizer, state, train_step, evaluate, total_steps=40, scheduler=scheduler,
        candidates=["fp32", "fp16", "table2+ef"], speculative_steps=6, eval_points=2,
        continuation_steps=10, validation_images=256, min_speedup=0.99, probe_steps=2)
    for step in driver.steps():
        train_step(step)
    events = [r["event"] for r in driver.records]
    check(events == ["speculation_skipped"] * 4, f"min_speedup 0.99: records {events}")
    check(sorted(driver.step_seconds) == ["fp16", "fp32", "table2+ef"] and min(driver.step_seconds.values()) > 0,
          f"step times {driver.step_seconds}")
    check(digest_of(model) == plain, "skipped phases did not leave a plain fp32 run's parameters")
    state.close()
    # min_speedup 0: which candidates are pruned follows measured times; every phase must be a decision
    # or a skip, taken alike on every rank, and the ranks must end equal.
    model, state, optimizer, scheduler, train_step, evaluate = setup()
    driver = adaprec_torch.AdaptivePrecision(
        model, optimizer, state, train_step, evaluate, total_steps=60, scheduler=scheduler,
        candidates=["fp32", "fp16", "table2+ef"], speculative_steps=6, eval_points=2,
        continuation_steps=10, max_overhead=1, validation_images=256, min_speedup=0, probe_steps=2)
    for step in driver.steps():
        train_step(step)
    phases = [(r["event"], r["step"], r["choice"], [c.get("pruned") for c in r["candidates"]]) for r in driver.records]
    check(len(phases) >= 3 and all(e in ("decision", "speculation_skipped") for e, *_ in phases),
          f"min_speedup 0: phases {phases}")
    for r in driver.records:
        if r["event"] == "decision":
            check(r["speculation_order"] and r["min_speedup"] == 0, f"decision without pruning fields: {r}")
        else:  # a skip leaves one candidate: the choice; fp32 not faster or stood in for by the choice
            for c in r["candidates"]:
                ok = ("pruned" not in c) if c["name"] == r["choice"] else (
                    c["pruned"] == "not_faster" or (c["pruned"] == "stood_in" and c["name"] == "fp32"
                                                    and c.get("stand_in") == r["choice"]))
                check(ok, f"skipped phase with a choice left or a wrong reason: {r}")
    every = world.allgather(phases)
    check(all(p == every[0] for p in every), f"ranks pruned or decided differently: {every}")
    check(len(set(world.allgather(digest_of(model)))) == 1, "parameters differ across ranks after pruning")
    if rank == 0:
        print(f"pruned run: {phases}")
    state.close()


def stand_in_checks():
    # The library's verdicts through the driver's Controller: with fp32 and fp16 left (table2 not 10 %
    # faster than fp16), fp32 is stood in for before any branch, so the driver skips the phase in fp16.
    for table2, left, reasons in ((0.0145, ["fp16"], ["stood_in", "", "not_faster"]),
                                  (0.01, ["fp32", "fp16", "table2"], ["", "", ""])):
        controller = adaprec_torch.Controller(["fp32", "fp16", "table2"], total_steps=400)
        controller.begin_phase(0)
        for name, seconds in (("fp32", 0.02), ("fp16", 0.015), ("table2", table2)):
            controller.report_step_samples(name, [seconds] * 3)
        asked = [c for c in controller.candidates if controller.should_speculate(c)]
        check(asked == left, f"table2 at {table2} s: speculated {asked}, expected {left}")
        got = [controller.pruning_reason(c) for c in controller.candidates]
        check(got == reasons, f"table2 at {table2} s: reasons {got}, expected {reasons}")
        controller.close()


def main():
    faulthandler.dump_traceback_later(240, exit=True)
    adaprec_torch.init_process_group()
    torch.set_num_threads(1)
    restore_checks()
    schedule_checks()
    cyclic_scheduler_checks()
    adaptive_run()
    pruned_runs()
    stand_in_checks()
    all_failures = world.allgather(failures)
    flat = [f for fs in all_failures for f in fs]
    if rank == 0:
        print("\n".join(flat) if flat else f"ddp adaptive checks passed on {size} ranks")
    dist.destroy_process_group()
    sys.exit(1 if flat else 0)


main()
