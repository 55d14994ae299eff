"""An ordinary mpi4py data-parallel trainer (numpy MLP on Fashion-MNIST) that knows nothing of
AdaPrec. Its gradient sum is one comm.Allreduce of float32 values, so AdaPrec compresses it when the
library is preloaded, with no change to this file:

    mpirun -np 4 python3 examples/mpi4py_trainer.py                        # plain MPI
    ADAPREC_FORMAT=fp8s ADAPREC_STATS=1 mpirun -np 4 -x ADAPREC_FORMAT -x ADAPREC_STATS \\
        -x LD_PRELOAD=/usr/local/lib/x86_64-linux-gnu/libadaprec-preload.so \\
        python3 examples/mpi4py_trainer.py                                  # fp8s on the wire

(For the library path of your install: `pkg-config --variable=libdir adaprec`.)
"""

import argparse
import gzip
import os
import struct
import time

import numpy as np
from mpi4py import MPI


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size

    images = read_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz")).reshape(-1, 784)
    labels = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    test_x = read_idx(os.path.join(args.data, "t10k-images-idx3-ubyte.gz")).reshape(-1, 784) / np.float32(255)
    test_y = read_idx(os.path.join(args.data, "t10k-labels-idx1-ubyte.gz"))
    shard = slice(rank, len(images), size)  # every rank its own examples
    x_all, y_all = images[shard].astype(np.float32) / 255, labels[shard]

    rng = np.random.default_rng(0)  # same initial weights on every rank
    shapes = [(784, args.hidden), (args.hidden,), (args.hidden, 10), (10,)]
    flat = np.zeros(sum(int(np.prod(s)) for s in shapes), dtype=np.float32)
    views, at = [], 0
    for s in shapes:
        n = int(np.prod(s))
        views.append(flat[at:at + n].reshape(s))
        at += n
    w1, b1, w2, b2 = views
    w1[:] = rng.standard_normal(w1.shape) * np.sqrt(2 / 784)
    w2[:] = rng.standard_normal(w2.shape) * np.sqrt(2 / args.hidden)
    grad = np.zeros_like(flat)
    g1, gb1, g2, gb2 = [grad[v.ctypes.data - flat.ctypes.data >> 2:][:v.size].reshape(v.shape) for v in views]

    step, start = 0, time.perf_counter()
    for epoch in range(args.epochs):
        order = np.random.default_rng(epoch).permutation(len(x_all))
        for first in range(0, len(order) - args.batch + 1, args.batch):
            idx = order[first:first + args.batch]
            x, y = x_all[idx], y_all[idx]
            h = np.maximum(x @ w1 + b1, 0)
            logits = h @ w2 + b2
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            p[np.arange(len(y)), y] -= 1
            p /= len(y)
            g2[:] = h.T @ p
            gb2[:] = p.sum(axis=0)
            dh = (p @ w2.T) * (h > 0)
            g1[:] = x.T @ dh
            gb1[:] = dh.sum(axis=0)
            comm.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM)  # the one gradient sum per step
            flat -= args.lr / size * grad
            step += 1
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            break
    seconds = time.perf_counter() - start
    correct = np.count_nonzero((np.maximum(test_x @ w1 + b1, 0) @ w2 + b2).argmax(axis=1) == test_y)
    if rank == 0:
        print(f"mpi4py trainer: {size} ranks, {step} steps in {seconds:.2f} s, "
              f"test accuracy {correct / len(test_y):.4f}, weights checksum {float(flat.sum()):.6f}")


main()
