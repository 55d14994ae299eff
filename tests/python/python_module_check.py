"""Under mpirun: the adaprec Python module against the C++ API and its error handling.

Usage: mpirun -np N python3 python_module_check.py CASES_FILE REFERENCE_DIR
REFERENCE_DIR holds what cpp_reference wrote for the same cases (the C++ Communicator's results)."""

import faulthandler
import sys

import numpy as np
from mpi4py import MPI

import adaprec

COUNT = 100003
world = MPI.COMM_WORLD
rank, size = world.rank, world.size
failures = []


def check(condition, what):
    if not condition:
        failures.append(f"rank {rank}: {what}")


def reference_input(r):
    """The formula of cpp_reference.cpp: exactly representable float32 values."""
    i = np.arange(COUNT, dtype=np.uint64)
    v = (i * np.uint64(2654435761) + np.uint64(r) * np.uint64(40503)) % np.uint64(65536)
    unit = (v.astype(np.int64) - 32768).astype(np.float32) / np.float32(32768)
    return unit * np.ldexp(np.float32(1), (i % np.uint64(13)).astype(np.int32) - 6).astype(np.float32)


def read_cases(path):
    cases = []
    for line in open(path):
        if line.strip() and not line.startswith("#"):
            fmt, algo, average, calls = line.split()
            cases.append((fmt, algo, average == "1", int(calls)))
    return cases


def expect_error(kinds_by_rank, what, call):
    """call() must raise, on this rank, an exception of kinds_by_rank(rank)."""
    expected = kinds_by_rank(rank)
    try:
        call()
    except expected as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - reported as a failure
        check(False, f"{what}: expected {expected.__name__}, got {type(e).__name__}: {e}")
        return None
    check(False, f"{what}: no exception (expected {expected.__name__})")
    return None


def expect_cuda_error(kinds, what, call, bad):
    """call() must raise one of `kinds` on rank `bad` (returns its message) and PeerInvalidError on
    the others."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the class is checked below
        ok = isinstance(e, kinds) if rank == bad else isinstance(e, adaprec.PeerInvalidError)
        check(ok, f"{what}: got {type(e).__name__}: {e}")
        return str(e) if ok and rank == bad else None
    check(False, f"{what}: no exception")
    return None


def check_cuda_tensors(torch, bad):
    """CUDA tensors: a subclass that reports cuda:0 (this torch is CPU-only, its data is host memory).
    A build without CUDA refuses it saying how to build with CUDA; a CUDA build hands it to the
    library's device entry (AdaPrec_CommAllreduceDevice) once torch.cuda can give a stream (stubbed
    below), where the CUDA runtime refuses it: no usable device here, or on a machine with a GPU not
    device memory. Each error reaches every rank through the agreement round."""
    import types

    class FakeCuda(torch.Tensor):
        @property
        def device(self):
            return torch.device("cuda", 0)

    cuda = torch.Tensor._make_subclass(FakeCuda, torch.ones(1000))
    built = adaprec.built_with_cuda()
    check(built == bool(adaprec._capi.lib.AdaPrec_HasCuda()), "built_with_cuda() is AdaPrec_HasCuda()")
    message = expect_cuda_error(adaprec.UnsupportedError if not built else adaprec.AdaPrecError,
                                "CUDA tensor on one rank",
                                lambda: adaprec.allreduce(cuda if rank == bad else torch.ones(1000)), bad)
    if rank == bad and message is not None:
        if built:  # a CPU-only torch has no stream to give (or, with a GPU, host memory is refused)
            check("CUDA" in message or "cuda" in message, f"CUDA tensor message (CUDA build): {message}")
        else:
            check("-Dcuda=enabled" in message and "-Csetup-args=-Dcuda=enabled" in message
                  and ".cpu()" in message, f"CUDA tensor message (build without CUDA): {message}")
    # Mixed devices are refused before the round (a build without CUDA refuses the CUDA one).
    message = expect_cuda_error(ValueError if built else adaprec.UnsupportedError, "tensor on the CPU, out on CUDA",
                                lambda: adaprec.allreduce(torch.ones(1000), out=cuda if rank == bad
                                                          else torch.ones(1000)), bad)
    if rank == bad and built and message is not None:
        check("same device" in message, f"mixed-device message: {message}")
    # torch.cuda stubbed as a CUDA torch would answer: the call reaches the library's device entry.
    saved = torch.cuda.current_stream, torch.cuda.current_device
    torch.cuda.current_stream = lambda device=None: types.SimpleNamespace(cuda_stream=0)
    torch.cuda.current_device = lambda: 0
    try:
        kinds = (adaprec.CudaError, adaprec.InvalidArgumentError) if built else adaprec.UnsupportedError
        message = expect_cuda_error(kinds, "CUDA tensor through the device entry",
                                    lambda: adaprec.allreduce(cuda if rank == bad else torch.ones(1000)), bad)
        if rank == bad and message is not None:
            check("AdaPrec_CommAllreduceDevice" in message if built else "-Dcuda=enabled" in message,
                  f"device entry message: {message}")
            print(f"rank {rank}: a CUDA tensor here gives: {message}", flush=True)
    finally:
        torch.cuda.current_stream, torch.cuda.current_device = saved
    # The communicator is in step afterwards.
    t = torch.ones(1000) * (rank + 1)
    adaprec.allreduce(t, format="fp16", algo="ring")
    check(bool(torch.all(t == size * (size + 1) / 2)), "allreduce after the CUDA-tensor errors")


def main():
    faulthandler.dump_traceback_later(120, exit=True)  # a hang fails the test with a traceback
    cases_path, reference_dir = sys.argv[1], sys.argv[2]
    comm = adaprec.communicator()
    check(comm.rank == rank and comm.size == size, "rank/size of the Communicator")

    # 1. Bit for bit the C++ API, case by case (same keys, so error feedback matches too).
    for index, (fmt, algo, average, calls) in enumerate(read_cases(cases_path)):
        x = reference_input(rank)
        for _ in range(calls):
            stats = adaprec.allreduce(x, format=fmt, algo=algo, average=average, key=f"case{index}")
        expected = np.fromfile(f"{reference_dir}/{index}.rank{rank}.f32", dtype=np.float32)
        same = expected.shape == x.shape and expected.tobytes() == x.tobytes()
        check(same, f"case {index} ({fmt} {algo} average={average}): differs from the C++ API "
                    f"({np.count_nonzero(expected.view(np.uint32) != x.view(np.uint32))} elements)")
        check(stats.count == COUNT, f"case {index}: stats.count {stats.count}")
        if size > 1 and not fmt.startswith("fp32") and algo != "auto":
            check(stats.wire_bytes < stats.fp32_bytes and stats.format == fmt.split("+")[0],
                  f"case {index}: stats {stats}")

    # 2. Out of place leaves the input alone and gives the in-place result; torch tensors too.
    x = reference_input(rank)
    out = np.empty_like(x)
    adaprec.allreduce(x, format="fp8s", algo="twoshot", out=out)
    check(x.tobytes() == reference_input(rank).tobytes(), "out-of-place modified its input")
    adaprec.allreduce(x, format="fp8s", algo="twoshot")
    check(x.tobytes() == out.tobytes(), "out-of-place result differs from in-place")
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        t = torch.from_numpy(reference_input(rank))
        adaprec.allreduce(t, format="table4", algo="ring")
        y = reference_input(rank)
        adaprec.allreduce(y, format="table4", algo="ring")
        check(t.numpy().tobytes() == y.tobytes(), "torch tensor result differs from numpy's")

    # 3. Bad input raises on every rank instead of hanging, and the communicator keeps working.
    bad = 1 % size  # the rank that passes the bad argument
    own_or_peer = lambda own: (lambda r: own if r == bad else adaprec.PeerInvalidError)  # noqa: E731
    ones = lambda n=1000, dtype=np.float32: np.ones(n, dtype=dtype)  # noqa: E731
    # An intercommunicator is refused on every rank (it crashed inside MPI_Comm_split_type).
    if size >= 2:
        half = world.Split(rank % 2, rank)
        inter = half.Create_intercomm(0, world, 1 - rank % 2, 77)
        message = expect_error(lambda r: adaprec.InvalidArgumentError, "an intercommunicator",
                               lambda: adaprec.allreduce(np.ones(8, dtype=np.float32), comm=inter))
        check(message is None or "intercommunicator" in message, f"intercommunicator message: {message}")
        inter.Free()
        half.Free()
    expect_error(own_or_peer(TypeError), "float64 on one rank",
                 lambda: adaprec.allreduce(ones(dtype=np.float64) if rank == bad else ones()))
    expect_error(own_or_peer(TypeError), "a list on one rank",
                 lambda: adaprec.allreduce([1.0] * 1000 if rank == bad else ones()))
    expect_error(own_or_peer(ValueError), "non-contiguous on one rank",
                 lambda: adaprec.allreduce(ones(2000)[::2] if rank == bad else ones()))
    expect_error(own_or_peer(ValueError), "read-only on one rank",
                 lambda: adaprec.allreduce(np.broadcast_to(np.float32(1), (1000,)) if rank == bad
                                           else ones()))
    expect_error(own_or_peer(ValueError), "out of another size on one rank",
                 lambda: adaprec.allreduce(ones(), out=ones(999) if rank == bad else ones()))
    expect_error(own_or_peer(TypeError), "format not a str on one rank",
                 lambda: adaprec.allreduce(ones(), format=8 if rank == bad else "fp8"))
    if torch is not None:
        expect_error(own_or_peer(ValueError), "non-contiguous tensor on one rank",
                     lambda: adaprec.allreduce(torch.ones(40, 50).t() if rank == bad
                                               else torch.ones(2000)))
        expect_error(own_or_peer(TypeError), "float16 tensor on one rank",
                     lambda: adaprec.allreduce(torch.ones(1000, dtype=torch.float16) if rank == bad
                                               else torch.ones(1000)))
        # Whatever examining an argument raises goes through the agreement round (no hang).
        sparse = torch.ones(1000).to_sparse()
        expect_error(own_or_peer(ValueError), "sparse tensor on one rank",
                     lambda: adaprec.allreduce(sparse if rank == bad else torch.ones(1000)))
        expect_error(own_or_peer(ValueError), "meta tensor on one rank",
                     lambda: adaprec.allreduce(torch.ones(1000, device="meta") if rank == bad
                                               else torch.ones(1000)))
        check_cuda_tensors(torch, bad)
        quantized = torch.quantize_per_tensor(torch.ones(1000), 0.1, 0, torch.qint8)
        expect_error(own_or_peer(TypeError), "quantized tensor on one rank",
                     lambda: adaprec.allreduce(quantized if rank == bad else torch.ones(1000)))
        whole = torch.ones(2000)
        expect_error(own_or_peer(ValueError), "out overlapping the tensor on one rank",
                     lambda: adaprec.allreduce(whole[:1000], out=whole[500:1500]) if rank == bad
                     else adaprec.allreduce(torch.ones(1000), out=torch.ones(1000)))
        empty = torch.ones(0)
        adaprec.allreduce(empty, format="fp8s", algo="twoshot")
        adaprec.allreduce(np.ones(0, dtype=np.float32))

    class Hostile:  # every attribute access raises, even isinstance's look at __class__
        def __getattribute__(self, name):
            raise KeyError(f"no attribute {name} here")

    expect_error(own_or_peer(KeyError), "an object whose attribute access raises, on one rank",
                 lambda: adaprec.allreduce(Hostile() if rank == bad else ones()))

    class Unanswerable:
        def __bool__(self):
            raise ZeroDivisionError("no truth value")

    expect_error(own_or_peer(ZeroDivisionError), "average without a truth value, on one rank",
                 lambda: adaprec.allreduce(ones(), average=Unanswerable() if rank == bad else False))
    expect_error(own_or_peer(ValueError), "format with a NUL character, on one rank",
                 lambda: adaprec.allreduce(ones(), format="fp8\0s" if rank == bad else "fp8"))
    if size > 1:
        # check=False still ends in MismatchError on every rank, never in a crash or garbage: the
        # native path (one MPI_Allreduce of each rank's own count) gets the library's agreement check.
        for algo in ("native", "auto"):
            expect_error(lambda r: adaprec.MismatchError, f"check=False, sizes differ ({algo})",
                         lambda: adaprec.allreduce(ones(66536 if rank == bad else 65536), algo=algo,
                                                   check=False))
        expect_error(lambda r: adaprec.MismatchError, "check=False, fp16 and fp32 on the native path",
                     lambda: adaprec.allreduce(ones(65536), format="fp16" if rank == bad else "fp32",
                                               algo="native", check=False))
        expect_error(lambda r: adaprec.MismatchError, "check=False, native path against twoshot",
                     lambda: adaprec.allreduce(ones(65536), format="fp8s" if rank == bad else "fp32",
                                               algo="twoshot" if rank == bad else "auto", check=False))
        expect_error(lambda r: adaprec.MismatchError, "check=False, averaging differs (native)",
                     lambda: adaprec.allreduce(ones(65536), average=rank == bad, check=False))
        z = ones() * (rank + 1)
        adaprec.allreduce(z, check=False)
        check(np.all(z == size * (size + 1) / 2), "check=False allreduce after the mismatches")
        for algo in ("auto", "twoshot"):
            message = expect_error(lambda r: adaprec.MismatchError, f"sizes differ across ranks ({algo})",
                                   lambda: adaprec.allreduce(ones(1000 + rank), format="fp8", algo=algo))
            check(message is None or "disagree" in message, f"mismatch message: {message}")
        expect_error(lambda r: adaprec.MismatchError, "formats differ across ranks",
                     lambda: adaprec.allreduce(ones(), format="fp16" if rank == bad else "fp32"))
    message = expect_error(lambda r: adaprec.InvalidArgumentError, "unknown format",
                           lambda: adaprec.allreduce(ones(), format="fp9"))
    check(message is None or "valid:" in message, f"unknown-format message lists valid names: {message}")
    expect_error(lambda r: adaprec.InvalidArgumentError, "+ef without a key",
                 lambda: adaprec.allreduce(ones(), format="fp8+ef"))
    expect_error(lambda r: adaprec.InvalidArgumentError, "unknown algorithm",
                 lambda: adaprec.allreduce(ones(), algo="tree"))
    expect_error(lambda r: TypeError, "comm not an mpi4py communicator",
                 lambda: adaprec.allreduce(ones(), comm="world"))
    z = ones() * (rank + 1)
    adaprec.allreduce(z, format="fp16", algo="ring")
    check(np.all(z == size * (size + 1) / 2), "allreduce after the errors")

    # 4. Error-feedback state: save/load round trip, per-key access, malformed blobs rejected.
    blob = comm.save_feedback()
    other = adaprec.Communicator(world)
    other.load_feedback(blob)
    check(other.save_feedback() == blob, "feedback save/load round trip")
    state = comm.feedback("case9")
    check(state is not None and state[0] == "twoshot" and len(state[1]) >= 1
          and state[1][0].shape == (COUNT,) and np.any(state[1][0] != 0), "feedback('case9')")
    check(comm.feedback("no such key") is None, "feedback of an unknown key")
    if state is not None:
        other.set_feedback("moved", state[0], state[1])
        moved = other.feedback("moved")
        check(moved is not None and all(a.tobytes() == b.tobytes() for a, b in zip(moved[1], state[1])),
              "set_feedback then feedback")
    # A key with a NUL is refused by every feedback function, as by allreduce (C would read the key
    # cut at the NUL: another tensor's residuals); numbers instead of arrays are no slots.
    for what, call in (("feedback", lambda: other.feedback("moved\0x")),
                       ("reset_feedback", lambda: other.reset_feedback("moved\0x")),
                       ("set_feedback", lambda: other.set_feedback("moved\0x", "ring", [np.ones(4, np.float32)]))):
        expect_error(lambda r: ValueError, f"{what} with a NUL in the key", call)
    check(other.feedback("moved") is not None, "a key with a NUL left the key before the NUL alone")
    expect_error(lambda r: ValueError, "set_feedback with numbers for slots",
                 lambda: other.set_feedback("s", "ring", [1.0, 2.0]))
    expect_error(lambda r: adaprec.InvalidArgumentError, "malformed feedback blob",
                 lambda: other.load_feedback(blob[:-3]))
    other.free()
    expect_error(lambda r: ValueError, "use after free", lambda: other.allreduce(ones()))

    everyone = world.allgather(failures)
    if rank == 0:
        for rank_failures in everyone:
            for failure in rank_failures:
                print("FAIL:", failure)
        total = sum(len(f) for f in everyone)
        print(f"python module: {total} failures on {size} ranks")
    sys.exit(1 if any(everyone) else 0)


main()
