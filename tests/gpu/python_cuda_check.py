"""Under mpirun -np 2 on a machine with an NVIDIA GPU (tools/gpu-check): the Python CUDA-tensor path
(docs/python.md, "CUDA tensors"), which suite python, on a CPU-only torch, runs only up to the C call.

1. adaprec.allreduce of a CUDA tensor whose data is still queued on a non-default stream (a sleep
   kernel, then the upload): each format and algorithm gives bit for bit what the same call gives on
   the tensor's CPU copy (the host path), fp32 the exact sum, and the stream has drained on return.
2. DDP on the GPU with the AdaPrec hook (nccl, one GPU per rank; gloo when the ranks share one GPU,
   which nccl refuses): fp32 through the hook gives DDP's own allreduce bit for bit (2 ranks: any sum
   order gives the same float), table4+ef trains, and every rank ends with the same parameters.
Exits 77 (one line per rank) without a usable GPU or with a library built without CUDA, 1 on a
mismatch. Environment as suite python: PYTHONPATH=python ADAPREC_LIBRARY=BUILD/lib/libadaprec.so.
"""

import faulthandler
import hashlib
import os
import sys
import traceback

# cuBLAS is deterministic only with a fixed workspace (set before torch makes its handle): the DDP
# comparison below needs two runs of the same model to give the same gradients.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

NAME = "python_cuda_check"
try:
    from mpi4py import MPI
except ImportError:  # nothing to coordinate with: every rank says so and skips
    print(f"{NAME}: rank {os.environ.get('OMPI_COMM_WORLD_RANK', '?')}: skipped: no mpi4py for "
          f"{sys.executable}", flush=True)
    sys.exit(77)

try:
    import torch  # noqa: E402 - after CUBLAS_WORKSPACE_CONFIG
except ImportError:  # skipped below, on every rank
    torch = None
import adaprec  # noqa: E402 - fails here when PYTHONPATH or ADAPREC_LIBRARY is wrong

world = MPI.COMM_WORLD
rank, size = world.rank, world.size
FORMATS = ("fp32", "bf16", "fp8s", "table4")
ALGOS = ("auto", "ring", "twoshot")
SIZES = (1000, (1 << 20) + 3)   # one segment; several 2^18-element segments per chunk, a ragged end
failures = []


def check(condition, what):
    if not condition:
        failures.append(f"rank {rank}: {what}")


def skip_reason():
    """Why this rank cannot run the check, or None."""
    if torch is None:
        return f"no torch for {sys.executable}"
    if not torch.cuda.is_available():
        built = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return f"torch.cuda.is_available() is False (torch {torch.__version__}, {built})"
    if not adaprec.built_with_cuda():
        return (f"{os.environ.get('ADAPREC_LIBRARY', 'libadaprec')} was built without CUDA "
                f"(rebuild with -Dcuda=enabled)")
    return None


def make_input(r, n):
    """Rank r's data: k * 2^e with |k| < 2^20 and e depending on the position only, so the fp32 sum of
    up to 16 ranks is exact whatever the order; magnitudes vary within each fp8s scale block."""
    g = torch.Generator().manual_seed(1000 + r)
    k = torch.randint(-(1 << 20), 1 << 20, (n,), generator=g, dtype=torch.int64).double()
    e = (torch.arange(n) % 13 - 10).double()
    return (k * torch.pow(2.0, e)).float()


def same_bits(a, b):
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


def check_allreduce(device):
    stream = torch.cuda.Stream(device)
    sleep = getattr(torch.cuda, "_sleep", None)
    for n in SIZES:
        host_input = make_input(rank, n)
        exact = sum(make_input(r, n).double() for r in range(size)).float()
        pinned = host_input.pin_memory()
        for fmt in FORMATS:
            for algo in ALGOS:
                what = f"{fmt} {algo} n={n}"
                with torch.cuda.stream(stream):
                    # NaN first, then a busy stream, then the upload: a reduction not ordered after
                    # the upload on this stream reads NaN or stale memory.
                    t = torch.full((n,), float("nan"), device=device)
                    if sleep is not None:
                        sleep(20_000_000)  # ~10 ms of GPU clock
                    t.copy_(pinned, non_blocking=True)
                    if n == SIZES[-1]:  # the implicit stream: torch.cuda.current_stream (the hook's way)
                        stats = adaprec.allreduce(t, format=fmt, algo=algo)
                if n != SIZES[-1]:      # the explicit one, from outside the stream context
                    stats = adaprec.allreduce(t, format=fmt, algo=algo, stream=stream)
                check(stream.query(), f"{what}: the stream had not drained when allreduce returned")
                got = t.cpu()
                # The host path with what ran (auto resolved: small buffers may go native in fp32),
                # on the same input.
                want = host_input.clone()
                host_stats = adaprec.allreduce(want, format=stats.format, algo=stats.algorithm)
                ran = f"{stats.format} {stats.algorithm}"
                check(algo == "auto" or ran == f"{fmt} {algo}", f"{what}: ran {ran}")
                check(f"{host_stats.format} {host_stats.algorithm}" == ran,
                      f"{what}: host ran {host_stats.format} {host_stats.algorithm}, device {ran}")
                if not same_bits(got, want):
                    bad = (got.view(torch.int32) != want.view(torch.int32)).nonzero()
                    i = bad[0].item()
                    check(False, f"{what} (ran {ran}): {bad.numel()} of {n} elements differ from the "
                                 f"host path, first [{i}] {got[i].item()!r} vs {want[i].item()!r}")
                if fmt == "fp32":
                    check(same_bits(got, exact), f"{what}: fp32 result is not the exact sum")


def check_ddp(device):
    import torch.distributed as dist
    import torch.nn as nn

    import adaprec.torch as adaprec_torch

    # nccl refuses two ranks on one GPU; gloo reduces CUDA tensors too, and the hook replaces its
    # allreduce anyway (DDP keeps the process group for its broadcasts).
    backend = "nccl" if torch.cuda.device_count() >= size else "gloo"
    # Rank and size from MPI; one node, so loopback unless MASTER_ADDR says otherwise (a host name
    # may resolve to an address a firewall closes); MASTER_PORT, else a free port rank 0 picks.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    adaprec_torch.init_process_group(backend)
    torch.use_deterministic_algorithms(True, warn_only=True)

    def train(state=None, steps=5):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 8)).to(device)
        model = nn.parallel.DistributedDataParallel(net, device_ids=[device.index], bucket_cap_mb=0.01)
        if state is not None:
            model.register_comm_hook(state, adaprec_torch.hook)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(100 + rank)   # each rank its own batches
        teacher = torch.linspace(-1, 1, 32 * 8).reshape(32, 8)
        losses = []
        for _ in range(steps):
            x = torch.randn(64, 32, generator=g)
            x, y = x.to(device), (x @ teacher).to(device)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return torch.cat([p.detach().flatten() for p in model.parameters()]).cpu(), losses

    def same_on_every_rank(params):
        digest = hashlib.sha256(params.numpy().tobytes()).hexdigest()
        return len(set(world.allgather(digest))) == 1

    reference, _ = train()
    state = adaprec_torch.HookState(format="fp32")
    params, _ = train(state)
    state.close()
    check(state.calls > 0, "DDP fp32: the hook was never called")
    check(same_on_every_rank(params), "DDP fp32 hook: parameters differ across ranks")
    check(same_bits(params, reference), f"DDP fp32 hook differs from DDP's own {backend} allreduce by "
                                        f"{(params - reference).abs().max().item():g}")
    # twoshot: compressed even for buckets that auto would send in fp32.
    state = adaprec_torch.HookState(format="table4+ef", algo="twoshot")
    params, losses = train(state, steps=10)
    state.close()
    check(same_on_every_rank(params), "DDP table4+ef: parameters differ across ranks")
    check(torch.isfinite(params).all().item() and losses[-1] < losses[0],
          f"DDP table4+ef: loss {losses[0]:.4g} -> {losses[-1]:.4g}")
    check(0 < state.wire_bytes < state.fp32_bytes,
          f"DDP table4+ef: sent {state.wire_bytes} of {state.fp32_bytes} fp32 bytes")
    dist.destroy_process_group()
    return backend


def main():
    faulthandler.dump_traceback_later(300, exit=True)  # a hang fails with a traceback
    reason = skip_reason()
    reasons = world.allgather(reason)
    if any(reasons):  # every rank skips together, so none waits in a collective alone
        others = [r for r, why in enumerate(reasons) if why]
        print(f"{NAME}: rank {rank}: skipped: {reason or f'rank(s) {others} cannot run'}", flush=True)
        return 77
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    check_allreduce(device)
    backend = check_ddp(device)
    failures_everywhere = [f for fs in world.allgather(failures) for f in fs]
    if rank == 0:
        for f in failures_everywhere:
            print(f"{NAME}: FAIL {f}", flush=True)
        verdict = "FAILED" if failures_everywhere else "passed"
        print(f"{NAME}: {verdict}: {size} ranks on {torch.cuda.device_count()} GPU(s) "
              f"({torch.cuda.get_device_name(device)}); allreduce {len(FORMATS)} formats x "
              f"{len(ALGOS)} algorithms x {len(SIZES)} sizes vs the host path; DDP over {backend} "
              f"with the hook: {len(failures_everywhere)} failed check(s)", flush=True)
    return 1 if failures_everywhere else 0


if __name__ == "__main__":
    try:
        status = main()
    except Exception:  # noqa: BLE001 - one rank failing must not leave the other in a collective
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        world.Abort(1)
    sys.exit(status)
