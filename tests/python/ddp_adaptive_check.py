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
5. Hostile loops (each case failed with its fix taken out): an evaluate() that draws from the RNG or
   leaves eval mode on, a param group held by the loop, gradients accumulated over steps, a
   non-persistent buffer, evaluate() values that differ by rank or are invalid on one rank.
"""

import contextlib
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


def settled_probe_checks():
    """The driver stops a probe once its verdicts are settled, as adaprec-train does: on an emulated slow
    network (fp32 16x and fp16 4x table2+ef's step, by sleeping) fp32 probes one step of probe_steps=3,
    fp16 at most two, table2+ef probes on until the spread is known; every rank probes the same steps.
    The spread comes from table2+ef's two samples alone (one degree of freedom, t = 3.08), so fp32
    settles only where they differ by less than about a fifth: table2+ef's sleep is 30 ms, long
    against the scatter of its compute (with 10 ms and fp16 at 8x, samples of 11.7 and 15.5 ms kept
    fp32 probing in one CI run of many)."""
    import time

    model, state, optimizer, scheduler, train_step, evaluate = setup()
    pace = {"fp32": 0.48, "fp16": 0.12, "table2+ef": 0.03}
    trained = []

    def slow_network(step):
        trained.append(state.format)
        time.sleep(pace[state.format])
        train_step(step)

    driver = adaprec_torch.AdaptivePrecision(
        model, optimizer, state, slow_network, evaluate, total_steps=20, scheduler=scheduler,
        candidates=["fp32", "fp16", "table2+ef"], speculative_steps=6, eval_points=2,
        continuation_steps=100, validation_images=256, probe_steps=3)
    for step in driver.steps():
        slow_network(step)
    first = driver.records[0]
    samples = {c["name"]: len(c.get("pruning_samples_s", c.get("samples_s", []))) for c in first["candidates"]}
    check(samples["fp32"] == 1 and samples["fp16"] <= 2 and samples["table2+ef"] >= 2,
          f"settled probes: samples per candidate {samples} in {first}")
    check(trained[:4] == ["fp32", "fp16", "table2+ef", "table2+ef"], f"probe order {trained[:6]}")
    every = world.allgather(trained)
    check(all(t == every[0] for t in every), "ranks probed different steps")
    state.close()


def contested_probe_checks():
    """Past probe_steps only candidates that can both pay and are not settled against each other probe
    on (AdaPrec_ControllerProbeContested), as adaprec-train's: table2 (36 ms) and table4 (40 ms), both
    far faster than fp32 (300 ms) and exactly minSpeedup apart, probe to contested_probe_steps (6,
    speculative_steps / eval_points); fp32 stops within probe_steps. With contested_probe_steps equal to
    probe_steps no candidate probes past it."""
    import time

    for contested, expected in ((6, 6), (2, 2)):
        model, state, optimizer, scheduler, train_step, evaluate = setup()
        pace = {"fp32": 0.3, "table4": 0.04, "table2": 0.036}

        def slow_network(step):
            time.sleep(pace[state.format])
            train_step(step)

        driver = adaprec_torch.AdaptivePrecision(
            model, optimizer, state, slow_network, evaluate, total_steps=24, scheduler=scheduler,
            candidates=["fp32", "table4", "table2"], speculative_steps=12, eval_points=2,
            continuation_steps=100, validation_images=256, probe_steps=2, contested_probe_steps=contested)
        for step in driver.steps():
            slow_network(step)
        first = driver.records[0]
        samples = {c["name"]: len(c.get("pruning_samples_s", [])) for c in first["candidates"]}
        check(samples["fp32"] <= 2 and samples["table4"] == expected and samples["table2"] == expected,
              f"contested probes (limit {contested}): samples per candidate {samples} in {first}")
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
    # A loop that evaluates each branch's start on its own (a random subset, a state not restored)
    # and gets another value: refused, since each gain is measured from its own start.
    controller = adaprec_torch.Controller(["fp32", "fp16"], total_steps=400)
    controller.begin_phase(0)
    controller.report("fp32", 0, 0.5, 0)
    try:
        controller.report("fp16", 0, 0.3, 0)
        check(False, "a branch start differing from another's was accepted")
    except adaprec.InvalidArgumentError as error:
        check("differs from fp32's" in str(error), f"start mismatch message: {error}")
    controller.close()


def default_checks():
    """Arguments left at None take the controller library's defaults, adaprec-train's (the driver kept
    its own 20 steps and 2 evaluations per branch until 2026-12-08, against the library's 30 and 3)."""
    model, state, optimizer, scheduler, train_step, evaluate = setup()
    driver = adaprec_torch.AdaptivePrecision(model, optimizer, state, train_step, evaluate, total_steps=400,
                                             scheduler=scheduler)
    expected = {name: adaprec_torch.controller_default(name)
                for name in ("speculative_steps", "eval_points", "probe_steps", "contested_probe_steps")}
    got = {name: getattr(driver, name) for name in expected}
    check(got == expected, f"driver defaults {got}: the library's {expected}")
    check(driver.candidates == adaprec_torch.default_candidates(),
          f"driver candidates {driver.candidates}: the library's default")
    check(driver.continuation_steps == adaprec_torch.controller_default("continuation_steps"),
          "driver continuation: the library's default")
    driver.controller.close()


def rng_digest():
    return hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest()[:16]


def grads_digest(model):
    return hashlib.sha256(b"".join(b"none" if p.grad is None else p.grad.numpy().tobytes()
                                   for p in model.parameters())).hexdigest()[:16]


def phase_driver(model, optimizer, state, train_step, evaluate, scheduler=None, **kwargs):
    """One phase at step 0 (continuation 100), every candidate speculated."""
    settings = dict(total_steps=8, candidates=["fp32", "fp16", "table2+ef"], speculative_steps=4, eval_points=2,
                    continuation_steps=100, max_overhead=1, prune=False)
    settings.update(kwargs)
    return adaprec_torch.AdaptivePrecision(model, optimizer, state, train_step, evaluate, scheduler=scheduler,
                                           **settings)


def branch_start_checks():
    """Every branch of a phase starts from the phase's state. An evaluate() that draws from the torch RNG
    (a DataLoader draws its base seed) used to leave the first branch (run right after the phase's base
    evaluation, without a restore) with another RNG state than the later ones: its dropout masks, and so
    its result, depended on the branch order."""
    model, state, optimizer, scheduler, train_step, evaluate = setup()
    starts = []

    def traced(step):
        if step == 0:
            starts.append((state.format, rng_digest(), digest_of(model)))
        train_step(step)

    def drawing_evaluate():
        torch.rand(1)
        return evaluate()

    driver = phase_driver(model, optimizer, state, traced, drawing_evaluate, scheduler)
    for step in driver.steps():
        traced(step)
    check([f for f, *_ in starts] == ["fp32", "fp16", "table2+ef"], f"branches run: {starts}")
    check(len({tuple(s[1:]) for s in starts}) == 1, f"branches started from different states (rng, params): {starts}")
    state.close()


def train_mode_checks():
    """module.training is part of the state: an evaluate() that calls model.eval() and does not switch
    back (the loop calls model.train() once, before it) left every later step in eval mode (dropout off)."""
    model, state, optimizer, scheduler, train_step, evaluate = setup()
    modes = []

    def traced(step):
        modes.append((step, state.format, all(m.training for m in model.modules())))
        train_step(step)

    def leaves_eval_mode():
        model.eval()
        with torch.no_grad():
            return (model(VALIDATION).argmax(1) == (VALIDATION @ TEACHER).argmax(1)).float().mean().item()

    driver = phase_driver(model, optimizer, state, traced, leaves_eval_mode, scheduler, total_steps=10)
    for step in driver.steps():
        traced(step)
    check(len(modes) == 3 * 4 + 6 and all(t for *_, t in modes),
          f"steps in eval mode after evaluate(): {[(s, f) for s, f, t in modes if not t]}")
    snap = driver.snapshot(10)
    model.eval()
    driver.restore(snap)
    check(all(m.training for m in model.modules()), "restore() did not bring back module.training")
    state.close()


def optimizer_reference_checks():
    """restore() keeps the optimizer's own objects: load_state_dict made new param-group dicts, so a loop
    that sets its rates through a group it holds (g = optimizer.param_groups[0]; g["lr"] = ...) no
    longer reached the optimizer after a phase."""
    model, state, optimizer, scheduler, train_step, evaluate = setup()
    driver = phase_driver(model, optimizer, state, train_step, evaluate, scheduler)
    for step in range(3):
        train_step(step)
    first = next(iter(model.parameters()))
    held = (optimizer.param_groups, optimizer.param_groups[0], optimizer.state, optimizer.state[first])
    snap = driver.snapshot(3)
    for step in range(3, 6):
        train_step(step)
    driver.restore(snap)
    now = (optimizer.param_groups, optimizer.param_groups[0], optimizer.state, optimizer.state[first])
    check(all(a is b for a, b in zip(held, now)),
          "restore() replaced the optimizer's param_groups list, a group dict, its state or a parameter's state")
    states_equal(driver.snapshot(3), snap, "optimizer restored in place")
    state.close()

    def manual_lr_run(adaptive):
        model, state, optimizer, scheduler, _, evaluate = setup()
        group = optimizer.param_groups[0]

        def train_step(step):
            group["lr"] = 0.1 * 0.8 ** step
            x, y = batch(step)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()

        steps = range(16)
        if adaptive:  # fp32 alone: the phases must leave exactly a plain run
            steps = phase_driver(model, optimizer, state, train_step, evaluate, total_steps=16,
                                 candidates=["fp32"], continuation_steps=6).steps()
        for step in steps:
            train_step(step)
        state.close()
        return digest_of(model)

    check(manual_lr_run(False) == manual_lr_run(True),
          "a manual rate set through a held param group: the fp32-only adaptive run differs from a plain one")


def grad_and_buffer_checks():
    """Parameters' .grad and non-persistent buffers (not in state_dict) are part of the state: a loop that
    accumulates gradients over steps started a branch with the previous branch's gradients."""
    model, state, optimizer, scheduler, train_step, evaluate = setup()
    model.module.register_buffer("seen", torch.zeros(3), persistent=False)
    seen = model.module.seen
    driver = phase_driver(model, optimizer, state, train_step, evaluate, scheduler)
    for step in range(2):
        train_step(step)
    snap = driver.snapshot(2)
    grads = grads_digest(model)
    seen += 1
    for p in model.parameters():
        p.grad.mul_(3)
    first = next(iter(model.parameters()))
    first.grad = None
    driver.restore(snap)
    check(torch.equal(model.module.seen, torch.zeros(3)) and model.module.seen is seen,
          "restore() did not bring back a non-persistent buffer in place")
    check(grads_digest(model) == grads, "restore() did not bring back the parameters' .grad")
    optimizer.zero_grad(set_to_none=True)
    empty = driver.snapshot(2)
    train_step(2)
    driver.restore(empty)
    check(all(p.grad is None for p in model.parameters()), "restore() of a state without .grad left gradients")
    state.close()

    # restore_grads=False: snapshots hold no .grad and restore() leaves .grad as it is; a train_step that
    # zeroes the gradients first replays a branch bit for bit all the same.
    model, state, optimizer, scheduler, train_step, evaluate = setup()
    light = phase_driver(model, optimizer, state, train_step, evaluate, scheduler, restore_grads=False)
    for step in range(2):
        train_step(step)
    snap = light.snapshot(2)
    check(snap.grads is None, "restore_grads=False: the snapshot holds gradients")
    for step in range(2, 5):
        train_step(step)
    first = (digest_of(model), grads_digest(model))
    for p in model.parameters():
        p.grad.mul_(3)
    scaled = grads_digest(model)
    light.restore(snap)
    check(grads_digest(model) == scaled, "restore_grads=False: restore() changed .grad")
    for step in range(2, 5):
        train_step(step)
    check((digest_of(model), grads_digest(model)) == first,
          "restore_grads=False: a zero-first train_step did not replay its branch exactly")
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        phase_driver(model, optimizer, state, train_step, evaluate, scheduler, total_steps=8, speculative_steps=9)
        phase_driver(model, optimizer, state, train_step, evaluate, scheduler, total_steps=8, speculative_steps=8)
    said = [str(w.message) for w in caught if "makes no decision" in str(w.message)]
    check(len(said) == 1 and "speculative_steps 9 do not fit in total_steps 8" in said[0],
          f"a driver whose branches cannot fit: warnings {said}")
    # A spec whose rate is 0 before total_steps (TOTAL in epochs) is said once; callables, or a spec that
    # ends with the run, are not.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        phase_driver(model, optimizer, state, train_step, evaluate, scheduler, lr_schedule="cosine:2")
        phase_driver(model, optimizer, state, train_step, evaluate, scheduler, lr_schedule="poly:5:1")
        phase_driver(model, optimizer, state, train_step, evaluate, scheduler, lr_schedule="cosine:8")
        phase_driver(model, optimizer, state, train_step, evaluate, scheduler, lr_schedule="cosine:20:2")
        phase_driver(model, optimizer, state, train_step, evaluate, scheduler, lr_schedule=lambda step: 0.0)
    said = [str(w.message) for w in caught if "reaches a rate of 0" in str(w.message)]
    check(len(said) == 2 and "'cosine:2' reaches a rate of 0 at step 2, before total_steps 8" in said[0]
          and "'poly:5:1' reaches a rate of 0 at step 5" in said[1],
          f"lr_schedule at rate 0 before total_steps: warnings {said}")
    try:
        phase_driver(model, optimizer, state, train_step, evaluate, scheduler, restore_grads="no")
        check(False, "restore_grads='no' was accepted")
    except adaprec.InvalidArgumentError:
        pass
    state.close()

    # Two micro-batches per update (no_sync on the first); a branch of 5 steps ends between the two.
    model, state, optimizer, scheduler, _, evaluate = setup()
    starts = []

    def accumulating(step):
        if step == 0:
            starts.append((state.format, grads_digest(model)))
        x, y = batch(step)
        with model.no_sync() if step % 2 == 0 else contextlib.nullcontext():
            nn.functional.cross_entropy(model(x), y).backward()
        if step % 2 == 1:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    driver = phase_driver(model, optimizer, state, accumulating, evaluate, speculative_steps=5, eval_points=1,
                          total_steps=9)
    for step in driver.steps():
        accumulating(step)
    check(len(starts) == 3 and len({g for _, g in starts}) == 1, f"branches started with other gradients: {starts}")
    state.close()


def evaluate_agreement_checks():
    """The ranks decide on the same accuracies: evaluate() values that differ between ranks (a sharded
    evaluation) are averaged, in rank order, on every rank. Each rank used its own: with pruning the
    ranks then ran different branches and hung."""
    model, state, optimizer, scheduler, train_step, evaluate = setup()
    given = []

    def sharded():
        value = evaluate() / (1 + rank)
        given.append(value)
        return value

    driver = phase_driver(model, optimizer, state, train_step, sharded, scheduler, candidates=["fp32", "fp16"])
    for step in driver.steps():
        train_step(step)
    curves = {c["name"]: [a for _, a in c["curve"]] for c in driver.records[0]["candidates"]}
    every = world.allgather(curves)
    check(all(c == every[0] for c in every), f"ranks decided on different accuracies: {every}")
    means = [math.fsum(values) / size for values in zip(*world.allgather(given))]  # base, fp32 x2, fp16 x2
    expected = {"fp32": means[0:3], "fp16": [means[0]] + means[3:5]}
    check(all(math.isclose(a, b, rel_tol=1e-12) for name in expected for a, b in zip(curves[name], expected[name]))
          and len(curves["fp16"]) == 3, f"accuracies {curves} are not the ranks' means {expected}")
    state.close()

    # An invalid value on one rank: the same error on every rank (a rank whose evaluate() raised gets
    # its own exception back, the others PeerInvalidError). The bad rank alone used to raise, the others
    # waited for it forever: without the agreement this part hangs (the shorter watchdog below).
    faulthandler.dump_traceback_later(60, exit=True)
    last = size - 1
    for bad, expected_error in ((float("nan"), "rank {last} returned nan"), (None, "rank {last} returned a value float() rejects"),
                                (150.0, "rank {last} returned 150.0"), ("raise", None)):
        model, state, optimizer, scheduler, train_step, evaluate = setup()
        calls = [0]

        def failing():
            calls[0] += 1
            if rank == last and calls[0] == 2:  # the first branch's point
                if bad == "raise":
                    raise KeyError("no validation set")
                return bad
            return evaluate()

        driver = phase_driver(model, optimizer, state, train_step, failing, scheduler, candidates=["fp32", "fp16"],
                              speculative_steps=2, eval_points=1)
        error = None
        try:
            for step in driver.steps():
                train_step(step)
        except Exception as e:  # noqa: BLE001 - compared below
            error = e
        state.close()
        if bad == "raise":
            ok = isinstance(error, KeyError) if rank == last else (
                isinstance(error, adaprec.PeerInvalidError) and f"raised on rank(s) [{last}]" in str(error))
        else:
            ok = isinstance(error, adaprec.InvalidArgumentError) and expected_error.format(last=last) in str(error)
        check(ok, f"evaluate() returned {bad!r} on rank {last}: {type(error).__name__}: {error}")
        if bad != "raise":
            messages = world.allgather(str(error))
            check(len(set(messages)) == 1, f"ranks raised different errors: {messages}")
    faulthandler.dump_traceback_later(240, exit=True)


def main():
    faulthandler.dump_traceback_later(240, exit=True)
    adaprec_torch.init_process_group()
    torch.set_num_threads(1)
    restore_checks()
    schedule_checks()
    cyclic_scheduler_checks()
    adaptive_run()
    pruned_runs()
    settled_probe_checks()
    contested_probe_checks()
    stand_in_checks()
    default_checks()
    branch_start_checks()
    train_mode_checks()
    optimizer_reference_checks()
    grad_and_buffer_checks()
    evaluate_agreement_checks()
    all_failures = world.allgather(failures)
    flat = [f for fs in all_failures for f in fs]
    if rank == 0:
        print("\n".join(flat) if flat else f"ddp adaptive checks passed on {size} ranks")
    dist.destroy_process_group()
    sys.exit(1 if flat else 0)


main()
