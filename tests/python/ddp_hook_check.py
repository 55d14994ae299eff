"""Under mpirun: the AdaPrec DDP communication hook (adaprec.torch) in real DistributedDataParallel.

1. fp32 through the hook (reducing on its worker thread, overlapped with backward) gives exactly DDP's default (gloo) training trajectory (at 2 ranks any sum
   order gives the same float; at more ranks the two libraries add in different orders, so there the
   check is float-rounding closeness).
2. fp16, fp8s and table4 (compressed on the wire) still train: the loss falls, bytes sent shrink, and
   every rank's parameters stay bit-identical.
3. Error-feedback residuals survive DDP's bucket rebuild: the model registers its layers in another
   order than it uses them, so the rebuilt buckets group and order the parameters differently; each
   parameter's residuals must reappear unchanged at its new place.
4. Errors in the hook reach backward() with their class and message on every rank; 5. sparse
   gradients are refused.
6. A state kept across folds (a new model each) gives each fold's first step the gradients a fresh
   state gives: the residuals of a model that is gone never reach a new one whose parameters got
   the same id() (CPython reuses the freed memory, and the hook keyed residuals by id).
7. DDP on a process subgroup: a state registered with register(model) over COMM_WORLD is refused on
   every rank (it averaged over every group, silently); one over an MPI communicator of DDP's ranks
   gives DDP's own gradients.
8. fp8+ef after a sum that overflows: the next step's gradient is exact again (the ranks whose own
   encode was finite kept their residual, and the next gradient was 1280 where it was 1.25).
9. close() without a wait still has its worker thread joined by the exit handler.
"""

import copy
import faulthandler
import gc
import hashlib
import sys
import time

import torch
import torch.nn as nn
from mpi4py import MPI

import adaprec.torch as adaprec_torch

world = MPI.COMM_WORLD
rank, size = world.rank, world.size
failures = []
STEPS = 30


def check(condition, what):
    if not condition:
        failures.append(f"rank {rank}: {what}")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(64, 10)   # registered first, used last: the rebuild reorders buckets
        self.body = nn.Linear(128, 64)
        self.stem = nn.Linear(32, 128)

    def forward(self, x):
        return self.head(torch.relu(self.body(torch.relu(self.stem(x)))))


def batches():
    """This rank's shard of a fixed teacher problem (same on every run)."""
    g = torch.Generator().manual_seed(1234)
    teacher = torch.randn(32, 10, generator=g)
    g.manual_seed(100 + rank)
    for _ in range(STEPS):
        x = torch.randn(32, 32, generator=g)
        yield x, (x @ teacher).argmax(dim=1)


def train(state=None, hook=None, bucket_cap_mb=0.05):
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(Net(), bucket_cap_mb=bucket_cap_mb)
    if hook is not None:
        model.register_comm_hook(state, hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    losses = []
    for x, y in batches():
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(world.allreduce(loss.item()) / size)
    return torch.cat([p.detach().flatten() for p in model.parameters()]), losses


def same_on_every_rank(params):
    digest = hashlib.sha256(params.numpy().tobytes()).hexdigest()
    return len(set(world.allgather(digest))) == 1


def main():
    faulthandler.dump_traceback_later(240, exit=True)  # a hang fails the test with a traceback
    adaprec_torch.init_process_group()

    # 1. fp32 through the hook = DDP's own allreduce.
    reference, reference_losses = train()
    state = adaprec_torch.HookState(format="fp32")
    params, _ = train(state, adaprec_torch.hook)
    difference = (params - reference).abs().max().item()
    if size == 2:
        check(torch.equal(params, reference), f"fp32 hook differs from DDP's default by {difference}")
    else:
        check(difference <= 1e-5, f"fp32 hook differs from DDP's default by {difference}")
    check(state.calls >= STEPS and state.wire_bytes == state.fp32_bytes, f"fp32 hook stats {vars(state)}")
    if rank == 0:
        print(f"fp32 hook vs DDP default: max |difference| {difference:g} over {params.numel()} parameters")

    # 2. Compressed formats train and keep the ranks identical (twoshot: compressed even for the small
    #    buckets that auto would send in plain fp32).
    fp32_last = sum(reference_losses[-3:]) / 3
    for spec, background in (("fp16", True), ("fp8s", True), ("fp8s", False), ("table4", True),
                             ("table4+ef", True)):
        state = adaprec_torch.HookState(format=spec, algo="twoshot", background=background)
        params, losses = train(state, adaprec_torch.hook)
        first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
        check(last < 0.75 * first, f"{spec}: loss did not fall ({first:.4f} -> {last:.4f})")
        check(last < 1.1 * fp32_last, f"{spec}: final loss {last:.4f}, fp32's {fp32_last:.4f}")
        check(same_on_every_rank(params), f"{spec}: parameters differ across ranks")
        check(state.wire_bytes < state.fp32_bytes, f"{spec}: sent {state.wire_bytes} of {state.fp32_bytes} bytes")
        check(state.algorithms == {"twoshot": state.calls}, f"{spec}: algorithms that ran {state.algorithms}")
        check("+ef" not in spec or state.migrations == 1,
              f"{spec}: {state.migrations} residual migrations in DDP's bucket rebuild (expected 1)")
        if rank == 0:
            print(f"{spec}{'' if background else ' (in the hook thread)'}: loss {first:.4f} -> {last:.4f} (fp32 DDP {fp32_last:.4f}), "
                  f"compression {state.fp32_bytes / state.wire_bytes:.2f}x")

    # 3. Residuals move with their parameters when DDP rebuilds its buckets.
    # (background=False: the watcher reads the communicator in the hook's thread.)
    state = adaprec_torch.HookState(format="fp8s+ef", algo="twoshot", background=False)
    moved_parameters = []

    def watching_hook(state, bucket):
        parameters = bucket.parameters()
        if tuple(id(p) for p in parameters) not in state._keys:
            before = {}
            for p in parameters:
                place = state._places.get(id(p))
                saved = state.communicator.feedback(place[0]) if place else None
                if saved is not None:
                    before[id(p)] = [s[place[1]:place[1] + place[2]].copy() for s in saved[1]]
            key = state.key_for(bucket)
            after = state.communicator.feedback(key)
            for p, offset in zip(parameters, adaprec_torch._offsets(bucket)):
                if id(p) in before:
                    now = [s[offset:offset + p.numel()] for s in after[1]]
                    check(all(a.tobytes() == b.tobytes() for a, b in zip(before[id(p)], now))
                          and any(a.any() for a in now),
                          f"residuals of a {tuple(p.shape)} parameter changed in the rebuild")
                    moved_parameters.append(tuple(p.shape))
        return adaprec_torch.hook(state, bucket)

    train(state, watching_hook, bucket_cap_mb=0.02)
    check(state.migrations >= 1 and len(moved_parameters) == 6,
          f"bucket rebuild: {state.migrations} migrations, moved {moved_parameters}")
    if rank == 0:
        print(f"bucket rebuild: {state.migrations} new layouts took over the residuals of "
              f"{len(moved_parameters)} parameters")

    # 4. Errors in the hook reach backward() with their AdaPrec class and message (not "Unable to
    #    cast ... to Tensor"), on every rank, in both hook modes; the default state checks agreement,
    #    and the unchecked path fails loudly too.
    import adaprec

    check(adaprec_torch.HookState().check is True, "HookState checks agreement by default")
    bad = 1 % size
    cases = [
        ("formats differ", dict(format="fp16" if rank == 0 else "fp8s", algo="twoshot"),
         lambda r: adaprec.MismatchError, "disagree"),
        ("formats differ on the native path, check=False",
         dict(format="fp16" if rank == 0 else "fp32", algo="native", check=False),
         lambda r: adaprec.MismatchError, "disagree"),
        ("format choice raises on one rank",
         dict(format=(lambda index, count: {}["no format"]) if rank == bad else "fp16", algo="twoshot"),
         lambda r: KeyError if r == bad else adaprec.PeerInvalidError, ""),
    ]
    for what, settings, kinds, words in cases:
        for background in (True, False):
            state = adaprec_torch.HookState(background=background, **settings)
            expected = kinds(rank)
            try:
                train(state, adaprec_torch.hook)
                check(False, f"{what} (background={background}): backward() raised nothing")
            except expected as e:
                check(words in str(e), f"{what} (background={background}): message {e}")
            except Exception as e:  # noqa: BLE001 - reported as a failure
                check(False, f"{what} (background={background}): {type(e).__name__}: {e}, "
                             f"expected {expected.__name__}")
            state.close()
            world.Barrier()
    # The hook's future read in Python (a wrapper hook's wait() or then() callback) raises the same
    # error; it raised NameError ("cannot access free variable 'e'") until 2026-12-06.
    failed = torch.futures.Future()

    def refused():
        raise adaprec.MismatchError("ranks disagree")

    adaprec_torch._complete(failed, refused, torch.zeros(2))
    for read in ("wait", "value"):
        try:
            getattr(failed, read)()
            check(False, f"a failed bucket's future.{read}() raised nothing")
        except adaprec.MismatchError as e:
            check("disagree" in str(e), f"future.{read}(): message {e}")
        except Exception as e:  # noqa: BLE001 - reported as a failure
            check(False, f"a failed bucket's future.{read}() raised {type(e).__name__}: {e}")

    # 5. Sparse gradients (nn.Embedding(sparse=True)) are refused on every rank with a line that says
    #    so (it used to tell a DDP user, who passed no tensor, to "pass tensor.to_dense()").
    torch.manual_seed(0)
    sparse = torch.nn.parallel.DistributedDataParallel(nn.Embedding(100, 8, sparse=True))
    state = adaprec_torch.HookState(format="fp16", algo="twoshot")
    sparse.register_comm_hook(state, adaprec_torch.hook)
    try:
        sparse(torch.tensor([[1, 2, 3]])).sum().backward()
        check(False, "sparse gradients: backward() raised nothing")
    except ValueError as e:
        check("sparse=False" in str(e), f"sparse gradients: message {e}")
    except Exception as e:  # noqa: BLE001 - reported as a failure
        check(False, f"sparse gradients: {type(e).__name__}: {e}")
    state.close()
    world.Barrier()

    # 6. A state reused for a new model per fold.
    state = adaprec_torch.HookState(format="fp8s+ef", algo="twoshot", background=False)
    reused_ids = 0
    for fold in range(6):
        torch.manual_seed(fold)
        net = Net()  # made first after the collection: it takes the memory the last fold's model freed
        reused_ids += sum(id(p) in state._places for p in net.parameters())
        fresh = adaprec_torch.HookState(format="fp8s+ef", algo="twoshot", background=False)
        twins = [torch.nn.parallel.DistributedDataParallel(m, bucket_cap_mb=0.02) for m in (net, copy.deepcopy(net))]
        state.register(twins[0])
        fresh.register(twins[1])
        for step, (x, y) in enumerate(batches()):
            for model in twins if step == 0 else twins[:1]:
                model.zero_grad()
                (100.0 * nn.functional.cross_entropy(model(x), y)).backward()
            if step == 0:
                equal = all(torch.equal(a.grad, b.grad) for a, b in zip(twins[0].parameters(), twins[1].parameters()))
                check(equal, f"fold {fold}: the reused state's first gradients differ from a fresh state's")
            if step == 3:
                break
        del twins, net, fresh, model
        gc.collect()
    if rank == 0:
        print(f"a state kept over 6 folds: first gradients equal a fresh state's ({reused_ids} parameters "
              f"had an id of an earlier fold's)")

    # 7. DDP on a process subgroup (one group per rank at np 2, two of two at np 4).
    half = max(1, size // 2)
    groups = [torch.distributed.new_group(list(range(g * half, (g + 1) * half))) for g in range(size // half)]
    group = groups[rank // half]
    subcomm = world.Split(rank // half, rank)
    for comm, refused in ((None, True), (subcomm, False)):
        torch.manual_seed(0)
        plain = torch.nn.parallel.DistributedDataParallel(Net(), process_group=group)
        torch.manual_seed(0)
        hooked = torch.nn.parallel.DistributedDataParallel(Net(), process_group=group)
        state = adaprec_torch.HookState(format="fp32", algo="twoshot", comm=comm)
        state.register(hooked)
        x, y = next(batches())
        try:
            for model in (plain, hooked):
                nn.functional.cross_entropy(model(x), y).backward()
            check(not refused, "a hook over COMM_WORLD under DDP on a subgroup was not refused")
            check(all(torch.allclose(a.grad, b.grad, rtol=0, atol=1e-6)
                      for a, b in zip(plain.parameters(), hooked.parameters())),
                  "a hook over DDP's ranks gives other gradients than DDP's own")
        except ValueError as e:
            check(refused and "process group has" in str(e), f"subgroup: {e}")
        state.close()
        world.Barrier()
    subcomm.Free()

    # 8. fp8+ef after an overflowed sum (rank 0 sends 40000, rank 1 60000: finite alone in fp8).
    one = nn.Linear(4, 1, bias=False)
    one.weight.data.zero_()
    model = torch.nn.parallel.DistributedDataParallel(one)
    state = adaprec_torch.HookState(format="fp8+ef", algo="twoshot")
    state.register(model)
    for step, scale in enumerate((40000.0, 1.0, 1.0)):
        model.zero_grad()
        (scale * model(torch.full((1, 4), 1.0 + 0.5 * (rank % 2))).sum()).backward()
        grad = one.weight.grad.flatten()
        if step == 0:
            check(bool(torch.isinf(grad).all()), f"fp8+ef: the overflowing step gave {grad.tolist()}")
        else:
            expected = sum(1.0 + 0.5 * (r % 2) for r in range(size)) / size
            check(torch.equal(grad, torch.full_like(grad, expected)),
                  f"fp8+ef step {step} after an overflow: gradient {grad.tolist()}, expected {expected}")
    state.close()

    # 9. close() without a wait while the worker is busy (a bucket that takes 0.5 s), then the exit
    #    handler: it must join the thread (it did nothing once close() had run).
    state = adaprec_torch.HookState(format="fp32")
    if state._thread is not None:
        state._reduce = lambda *job: time.sleep(0.5)
        state._queue.put((torch.futures.Future(), None, None, None, None))
        state.close()
        adaprec_torch._close_hook_states()
        check(not state._thread.is_alive(), "close() without a wait left a thread the exit handler did not join")

    everyone = world.allgather(failures)
    if rank == 0:
        for rank_failures in everyone:
            for failure in rank_failures:
                print("FAIL:", failure)
        print(f"ddp hook: {sum(len(f) for f in everyone)} failures on {size} ranks")
    sys.exit(1 if any(everyone) else 0)


main()
