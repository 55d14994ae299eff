"""Under mpirun (4 ranks): the module's per-communicator cache follows the MPI communicator's life,
and AdaPrec used after MPI.Finalize() raises instead of aborting the process.

1. A communicator freed after use, then a new one that MPI gives the same handle: the new one must get
   its own AdaPrec communicator (a cache keyed by the handle handed it the old, 4-rank one: every rank
   summed over all 4 ranks). Dup/Free and Split/Free loops: each freed communicator frees its AdaPrec
   communicator.
2. After MPI.Finalize(): the module raises TransportError; the C API returns ADAPREC_ERR_TRANSPORT
   (no MPI call, so no MPI abort); the cached COMM_WORLD communicator was freed at finalize.
"""

import ctypes
import faulthandler
import sys

import numpy as np
from mpi4py import MPI

import adaprec
from adaprec import _capi

world = MPI.COMM_WORLD
rank, size = world.rank, world.size
failures = []


def check(condition, what):
    if not condition:
        failures.append(f"rank {rank}: {what}")


def freed(communicator):
    return not communicator._handle


def raises(kind, call):
    try:
        call()
    except kind as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - reported as a failure
        return f"wrong exception {type(e).__name__}: {e}"
    return "no exception"


def main():
    faulthandler.dump_traceback_later(120, exit=True)
    x = np.full(1000, rank + 1, dtype=np.float32)

    # 1. The hostile tester's sequence, exactly.
    c1 = world.Dup()
    adaprec.allreduce(x.copy(), comm=c1)
    old = adaprec.communicator(c1)
    c1.Free()
    check(freed(old), "freeing the MPI communicator did not free its AdaPrec communicator")
    c2 = world.Split(rank % 2, rank)
    y = x.copy()
    adaprec.allreduce(y, comm=c2, format="fp16", algo="twoshot")
    expected = sum(r + 1 for r in range(size) if r % 2 == rank % 2)
    check(np.all(y == expected), f"Split after Dup/Free: sum {y[0]}, expected {expected}")
    check(adaprec.communicator(c2).size == c2.size, "cached communicator has the wrong size")
    c2.Free()

    # Dup/Free and Split/Free loops, alternating, so handles are reused across kinds.
    for i in range(24):
        comm = world.Dup() if i % 2 == 0 else world.Split(rank % (2 + i % 3), rank)
        y = x.copy()
        adaprec.allreduce(y, comm=comm, format="fp8s" if i % 4 == 1 else "fp32",
                          algo="twoshot" if i % 4 == 1 else "auto")
        members = [r for r in range(size) if i % 2 == 0 or r % (2 + i % 3) == rank % (2 + i % 3)]
        check(np.all(y == sum(r + 1 for r in members)),
              f"loop {i}: sum {y[0]} over {comm.size} ranks, expected {sum(r + 1 for r in members)}")
        cached = adaprec.communicator(comm)
        check(cached is adaprec.communicator(comm) and cached.size == comm.size, f"loop {i}: cache")
        comm.Free()
        check(freed(cached), f"loop {i}: AdaPrec communicator not freed with its MPI communicator")
    left = len(getattr(adaprec, "_cached", ()))
    check(left == 0, f"{left} cached communicators left after the loops")

    # A Communicator freed by hand is replaced on the next use; COMM_WORLD's stays the same object.
    comm = world.Dup()
    first = adaprec.communicator(comm)
    first.free()
    second = adaprec.communicator(comm)
    check(second is not first and not freed(second), "a freed cached Communicator was not replaced")
    comm.Free()
    check(freed(second), "replacement not freed with its MPI communicator")
    check(adaprec.communicator() is adaprec.communicator(world), "COMM_WORLD's cache")
    check("COMM_NULL" in raises(adaprec.InvalidArgumentError,
                                lambda: adaprec.communicator(MPI.COMM_NULL)), "COMM_NULL")

    everyone = world.allgather(failures)
    del failures[:]
    world_cached = adaprec.communicator()
    own = adaprec.Communicator(world)
    handle = own._handle

    # 2. After MPI.Finalize().
    MPI.Finalize()
    check(freed(world_cached), "COMM_WORLD's cached communicator not freed at MPI.Finalize()")
    for what, call in (("allreduce", lambda: adaprec.allreduce(np.ones(10, dtype=np.float32))),
                       ("Communicator()", lambda: adaprec.Communicator()),
                       ("Communicator.allreduce", lambda: own.allreduce(np.ones(10, dtype=np.float32)))):
        message = raises(adaprec.TransportError, call)
        check("finalized" in message, f"{what} after MPI.Finalize(): {message}")
    # The C API itself, past the module's check: an error code, not an MPI abort.
    values = np.ones(10, dtype=np.float32)
    code = _capi.lib.AdaPrec_CommAllreduce(handle, None, ctypes.c_void_p(values.ctypes.data), 10, b"fp32",
                                           b"auto", 0, None, _capi.CHECK_AGREEMENT, None)
    check(code == _capi.ERR_TRANSPORT and b"finalized" in _capi.lib.AdaPrec_LastError(),
          f"AdaPrec_CommAllreduce after MPI_Finalize: {code} {_capi.lib.AdaPrec_LastError()}")
    created = ctypes.c_void_p()
    code = _capi.lib.AdaPrec_CommCreate(ctypes.c_void_p(MPI._handleof(MPI.COMM_SELF)),
                                        ctypes.byref(created))
    check(code == _capi.ERR_TRANSPORT and not created.value,
          f"AdaPrec_CommCreate after MPI_Finalize: {code} {_capi.lib.AdaPrec_LastError()}")
    own.free()  # after finalize: releases memory only
    check(freed(own), "free after MPI.Finalize()")

    if rank == 0:
        for rank_failures in everyone:
            for failure in rank_failures:
                print("FAIL:", failure)
        print(f"python lifecycle (before finalize): {sum(len(f) for f in everyone)} failures on {size} ranks")
    for failure in failures:
        print("FAIL:", failure)
    print(f"rank {rank}: {len(failures)} failures after MPI.Finalize()")
    sys.exit(1 if any(everyone) or failures else 0)


main()
