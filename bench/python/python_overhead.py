"""Overhead of the Python path over the library call it wraps, for one DDP-sized bucket.

Run under mpirun (from the repository root, after building):
    PYTHONPATH=python ADAPREC_LIBRARY=build/lib/libadaprec.so \\
        mpirun -np 4 python3 bench/python/python_overhead.py [--mbytes 25] [--iterations 30]

For each format it times, interleaved iteration by iteration so that machine noise hits all alike:
  direct   AdaPrec_CommAllreduce called straight through ctypes, no checks (what a C/C++ caller pays:
           the C API is Communicator::allreduce plus parsing the format and algorithm names)
  numpy    adaprec.allreduce(numpy array) with its defaults (argument checks + the agreement round)
  torch    adaprec.allreduce(torch tensor), same
  hook     adaprec.torch.hook on a stand-in bucket (what DDP calls per bucket; its agreement round is on
           by default since HookState(check=True))
Each time is the max over ranks of one call; the table gives medians and overhead = median / direct - 1.
"""

import argparse
import ctypes
import statistics
import time

import numpy as np
from mpi4py import MPI

import adaprec
from adaprec import _capi

world = MPI.COMM_WORLD


def timed(call):
    world.Barrier()
    start = time.perf_counter()
    call()
    return world.allreduce(time.perf_counter() - start, op=MPI.MAX)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mbytes", type=float, default=25.0, help="bucket size in MB (10^6 bytes)")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--formats", default="fp32,fp16,fp8s,table4")
    parser.add_argument("--algo", default="twoshot")
    args = parser.parse_args()
    count = int(args.mbytes * 1e6) // 4
    rng = np.random.default_rng(world.rank)
    data = rng.standard_normal(count).astype(np.float32)
    buffer = data.copy()
    comm = adaprec.communicator()
    try:
        import torch

        import adaprec.torch as adaprec_torch
    except ImportError:
        torch = None
    tensor = torch.from_numpy(buffer) if torch is not None else None

    class Bucket:  # what the hook reads from DDP's GradBucket
        def buffer(self):
            return tensor

        def index(self):
            return 0

    rows = []
    for fmt in args.formats.split(","):
        spec, algo = fmt.encode(), args.algo.encode()
        stats = _capi.CallStats()

        def direct():
            code = _capi.lib.AdaPrec_CommAllreduce(comm._handle, None, ctypes.c_void_p(buffer.ctypes.data),
                                                   count, spec, algo, 1, None, 0, ctypes.byref(stats))
            assert code == 0, _capi.lib.AdaPrec_LastError()

        paths = {"direct": direct,
                 "numpy": lambda: adaprec.allreduce(buffer, format=fmt, algo=args.algo, average=True)}
        if torch is not None:
            state = adaprec_torch.HookState(format=fmt, algo=args.algo)
            paths["torch"] = lambda: adaprec.allreduce(tensor, format=fmt, algo=args.algo, average=True)
            paths["hook"] = lambda: adaprec_torch.hook(state, Bucket()).wait()
        times = {name: [] for name in paths}
        for iteration in range(args.iterations + 2):
            for name, call in paths.items():
                buffer[:] = data  # same input every time (sums would grow otherwise)
                seconds = timed(call)
                if iteration >= 2:  # the first two warm up caches and workspaces
                    times[name].append(seconds)
        base = statistics.median(times["direct"])
        for name, values in times.items():
            median = statistics.median(values)
            rows.append((fmt, name, median, median / base - 1))
    if world.rank == 0:
        print(f"# {world.size} ranks, bucket {count * 4 / 1e6:.1f} MB ({count} floats), algo {args.algo}, "
              f"{args.iterations} iterations, medians of max-over-ranks")
        print(f"{'format':8} {'path':7} {'ms':>9} {'overhead':>9}")
        for fmt, name, median, overhead in rows:
            print(f"{fmt:8} {name:7} {median * 1e3:9.3f} {overhead * 100:8.2f}%")


main()
