#!/usr/bin/env python3
"""Message-pattern probe: how fast the network moves the same bytes per rank in the patterns of the
allreduce algorithms, without any codec work (docs/algorithms.md, twoshot's schedule).

  tools/vcluster run --nodes 4 --rate 1gbit -- /usr/bin/python3 bench/allreduce/message_pattern_probe.py \
      [BYTES_PER_PEER] [MESSAGE_BYTES] [PATTERNS]

Patterns (each sends (p-1) * BYTES_PER_PEER per rank, in messages of MESSAGE_BYTES):
  ring      to r+1, from r-1 (one reduce-scatter's traffic of the ring)
  alltoall  to every peer at once, everything posted up front
  lagged    to every peer, segment k posted after segment k-2 arrived (a step ahead of the receives)
  rounds    shifted rounds: round d to r+d only
  twoshot   twoshot's dependency pattern, twice the bytes: all reduce-scatter sends up front; the
            allgather message k to every peer once reduce-scatter message k arrived from every peer
Prints, per pattern, the median over 3 runs of the slowest rank's time.
"""
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
r, p = comm.rank, comm.size
chunk = int(sys.argv[1]) if len(sys.argv) > 1 else 4 << 20
seg = int(sys.argv[2]) if len(sys.argv) > 2 else 512 << 10
nseg = chunk // seg
send, recv = np.ones(chunk * (p - 1), np.uint8), np.empty(chunk * (p - 1), np.uint8)
gsend, grecv = np.ones_like(send), np.empty_like(send)


def piece(buf, d, k):
    o = ((d - 1) * nseg + k) * seg
    return buf[o:o + seg]


def ring():
    reqs = []
    for d in range(1, p):
        for k in range(nseg):
            reqs.append(comm.Irecv(piece(recv, d, k), (r - 1) % p, tag=d))
            reqs.append(comm.Isend(piece(send, d, k), (r + 1) % p, tag=d))
    MPI.Request.Waitall(reqs)


def alltoall():
    reqs = []
    for k in range(nseg):
        for d in range(1, p):
            reqs.append(comm.Irecv(piece(recv, d, k), (r - d) % p, tag=d))
            reqs.append(comm.Isend(piece(send, d, k), (r + d) % p, tag=d))
    MPI.Request.Waitall(reqs)


def lagged():
    recvs = {(d, k): comm.Irecv(piece(recv, d, k), (r - d) % p, tag=d) for k in range(nseg) for d in range(1, p)}
    sends = []
    for k in range(nseg + 1):
        if k < nseg:
            sends += [comm.Isend(piece(send, d, k), (r + d) % p, tag=d) for d in range(1, p)]
        if k >= 1:
            for d in range(1, p):
                recvs[(d, k - 1)].Wait()
    MPI.Request.Waitall(sends)


def rounds():
    for d in range(1, p):
        reqs = []
        for k in range(nseg):
            reqs.append(comm.Irecv(piece(recv, d, k), (r - d) % p, tag=d))
            reqs.append(comm.Isend(piece(send, d, k), (r + d) % p, tag=d))
        MPI.Request.Waitall(reqs)


def twoshot():
    recvs = {(d, k): comm.Irecv(piece(recv, d, k), (r - d) % p, tag=d) for k in range(nseg) for d in range(1, p)}
    gathers = [comm.Irecv(piece(grecv, d, k), (r - d) % p, tag=p + d) for k in range(nseg) for d in range(1, p)]
    sends = [comm.Isend(piece(send, d, k), (r + d) % p, tag=d) for k in range(nseg) for d in range(1, p)]
    for k in range(nseg):
        for d in range(1, p):
            recvs[(d, k)].Wait()
        sends += [comm.Isend(piece(gsend, d, k), (r + d) % p, tag=p + d) for d in range(1, p)]
    MPI.Request.Waitall(gathers)
    MPI.Request.Waitall(sends)


patterns = sys.argv[3].split(",") if len(sys.argv) > 3 else ["ring", "alltoall", "lagged", "rounds", "twoshot"]
for name in patterns:
    run = globals()[name]
    run()  # warm-up: connections up
    times = []
    for _ in range(3):
        comm.Barrier()
        start = time.perf_counter()
        run()
        times.append(comm.allreduce(time.perf_counter() - start, MPI.MAX))
    mib = (2 if name == "twoshot" else 1) * chunk * (p - 1) / 2**20
    if r == 0:
        print(f"{name:9s} {mib:4.0f} MiB per rank in {seg >> 10} KiB messages: median {sorted(times)[1] * 1e3:7.1f} ms",
              flush=True)
