"""Under mpirun: the AdaPrec DDP communication hook (adaprec.torch) in real DistributedDataParallel.

1. fp32 through the hook (reducing on its worker thread, overlapped with backward) gives exactly DDP's default (gloo) training trajectory (at 2 ranks any sum
   order gives the same float; at more ranks the two libraries add in different orders, so there the
   check is float-rounding closeness).
2. fp16, fp8s and table4 (compressed on the wire) still train: the loss falls, bytes sent shrink, and
   every rank's parameters stay bit-identical.
3. Error-feedback residuals survive DDP's bucket rebuild: the model registers its layers in another
   order than it uses them, so the rebuilt buckets group and order the parameters differently; each
   parameter's residuals must reappear unchanged at its new place.
"""

import faulthandler
import hashlib
import sys

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

    everyone = world.allgather(failures)
    if rank == 0:
        for rank_failures in everyone:
            for failure in rank_failures:
                print("FAIL:", failure)
        print(f"ddp hook: {sum(len(f) for f in everyone)} failures on {size} ranks")
    sys.exit(1 if any(everyone) else 0)


main()
