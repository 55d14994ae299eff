"""mpi4py program for the preload test: float32 and float64 sums of 100000 elements.

argv[1]: tolerance relative to sum|x| for the float32 sums (0: exact). argv[2]: "compressed" to
require that the float32 sums differ from the exact ones (they went through a lossy format).
Prints "failures N" on rank 0; exit status 0 when every rank passed.
"""
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
tolerance = float(sys.argv[1])
must_differ = len(sys.argv) > 2 and sys.argv[2] == "compressed"
n = 100000
i = np.arange(n)


def values(r):
    return ((i * 7 + r * 13 + 3) % 41 - 20).astype(np.float64)


exact = sum(values(r) for r in range(size))
abs_sum = sum(np.abs(values(r)) for r in range(size))
failures = 0

send32 = values(rank).astype(np.float32)
recv32 = np.empty_like(send32)
comm.Allreduce(send32, recv32, op=MPI.SUM)  # buffer interface: MPI_Allreduce(MPI_FLOAT, MPI_SUM)
inplace32 = values(rank).astype(np.float32)
comm.Allreduce(MPI.IN_PLACE, inplace32, op=MPI.SUM)
for name, got in (("float32", recv32), ("float32-inplace", inplace32)):
    err = np.abs(got.astype(np.float64) - exact)
    if not np.all(err <= tolerance * abs_sum):
        print(f"rank {rank}: FAILED {name}: max error {err.max()}", file=sys.stderr)
        failures += 1
    if must_differ and size > 1 and np.array_equal(got.astype(np.float64), exact):
        print(f"rank {rank}: FAILED {name}: identical to the exact sum, not compressed", file=sys.stderr)
        failures += 1

send64 = values(rank)
recv64 = np.empty_like(send64)
comm.Allreduce(send64, recv64, op=MPI.SUM)
if not np.array_equal(recv64, exact):
    print(f"rank {rank}: FAILED float64 sum not exact", file=sys.stderr)
    failures += 1

total = comm.allreduce(failures, op=MPI.SUM)  # pickled object allreduce: not a float sum
if rank == 0:
    print(f"failures {total}")
sys.exit(0 if total == 0 else 1)
