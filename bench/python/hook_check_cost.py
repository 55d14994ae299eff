"""Cost of the DDP hook's agreement check (HookState(check=True), the default) per bucket.

Run under mpirun (from the repository root, after building):
    PYTHONPATH=python ADAPREC_LIBRARY=build/lib/libadaprec.so \\
        mpirun -np 4 python3 bench/python/hook_check_cost.py [--iterations 20]

For 1 MiB and 25 MiB buckets (25 MiB: DDP's default bucket_cap_mb) and fp32/fp16/fp8s, times what the
hook's worker does per bucket (HookState._reduce: average=True, algo twoshot for the compressed
formats so that they are compressed here on one node, auto for fp32) with check=True and with
check=False, interleaved iteration by iteration. Each time is the max over ranks of one call; prints
medians and the ratio checked / unchecked, then the agreement round alone (an empty bucket). With
check=False the library still checks agreement itself (before compressed algorithms, and the C API
before the native path), so check=True adds exactly one 3-word allreduce to the compressed formats.
"""

import argparse
import statistics
import time

import torch
from mpi4py import MPI

import adaprec.torch as adaprec_torch

world = MPI.COMM_WORLD


def timed(call):
    world.Barrier()
    start = time.perf_counter()
    call()
    return world.allreduce(time.perf_counter() - start, op=MPI.MAX)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if world.rank == 0:
        print(f"{world.size} ranks, medians of {args.iterations}")
        print("| bucket | format | algo | check=False (ms) | check=True (ms) | ratio |")
        print("|---|---|---|---|---|---|")
    for mib in (1, 25):
        bucket = torch.rand(mib * (1 << 20) // 4)
        for spec, algo in (("fp32", "auto"), ("fp16", "twoshot"), ("fp8s", "twoshot")):
            states = {check: adaprec_torch.HookState(format=spec, algo=algo, check=check, background=False)
                      for check in (False, True)}
            times = {False: [], True: []}
            for i in range(args.iterations + 2):
                for check in ((False, True) if i % 2 == 0 else (True, False)):
                    t = timed(lambda: states[check]._reduce(bucket, spec, None))
                    if i >= 2:
                        times[check].append(t)
            off, on = (statistics.median(times[c]) * 1e3 for c in (False, True))
            if world.rank == 0:
                print(f"| {mib} MiB | {spec} | {algo} | {off:.3f} | {on:.3f} | {on / off:.3f} |", flush=True)
    # The agreement round alone: an empty compressed allreduce with and without it (the library's own
    # check runs in both), many times; the difference is what check=True adds to any bucket.
    empty = torch.empty(0)
    states = {check: adaprec_torch.HookState(format="fp8s", algo="twoshot", check=check, background=False)
              for check in (False, True)}
    times = {False: [], True: []}
    for i in range(20 * args.iterations):
        for check in ((False, True) if i % 2 == 0 else (True, False)):
            times[check].append(timed(lambda: states[check]._reduce(empty, "fp8s", None)))
    off, on = (statistics.median(times[c]) * 1e6 for c in (False, True))
    if world.rank == 0:
        # A difference below zero is the machine's noise (the checked call does strictly more work).
        print(f"empty bucket: {off:.1f} us unchecked, {on:.1f} us checked: the round costs "
              f"{max(on - off, 0.0):.1f} us" + (" (checked was faster: noise)" if on < off else ""))


main()
