"""PyTorch DistributedDataParallel with AdaPrec: the one-line hook, and a steps-per-second benchmark
of it against DDP's own gloo allreduce and PyTorch's fp16 compression hook.

    mpirun -np 4 python3 examples/ddp_train.py --hook adaprec --format fp8s
    mpirun -np 4 python3 examples/ddp_train.py --hook none          # DDP's default allreduce (gloo)
    mpirun -np 4 python3 examples/ddp_train.py --hook torch-fp16    # PyTorch's fp16_compress_hook

The model is an MLP whose parameters sit in large fully connected layers (the shape where gradient
communication dominates); data is Fashion-MNIST when present, else a fixed random teacher problem.
Rank 0 prints one JSON line: steps per second over the timed steps, losses, bytes.
"""

import argparse
import gzip
import json
import os
import struct
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from mpi4py import MPI
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import adaprec.torch


def fashion_mnist(directory, rank, size):
    def read(name):
        with gzip.open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        dims = data[3]
        shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
        return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)

    x = read("train-images-idx3-ubyte.gz").reshape(-1, 784)[rank::size].float() / 255
    y = read("train-labels-idx1-ubyte.gz")[rank::size].long()
    return x, y


def teacher_problem(rank, examples=8192):
    g = torch.Generator().manual_seed(7)
    teacher = torch.randn(784, 10, generator=g)
    g.manual_seed(1000 + rank)
    x = torch.randn(examples, 784, generator=g)
    return x, (x @ teacher).argmax(dim=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hook", choices=["adaprec", "none", "torch-fp16"], default="adaprec")
    parser.add_argument("--format", default="fp8s", help="AdaPrec format spec for --hook adaprec")
    parser.add_argument("--algo", default="auto", help="AdaPrec algorithm for --hook adaprec")
    parser.add_argument("--steps", type=int, default=60, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (bucket rebuild)")
    parser.add_argument("--batch", type=int, default=64, help="per rank")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    adaprec.torch.init_process_group()  # gloo, rank and size from MPI
    rank, size = dist.get_rank(), dist.get_world_size()
    have_data = os.path.exists(os.path.join(args.data, "train-images-idx3-ubyte.gz"))
    x_all, y_all = fashion_mnist(args.data, rank, size) if have_data else teacher_problem(rank)

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(784, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden),
                        nn.ReLU(), nn.Linear(args.hidden, 10))
    model = nn.parallel.DistributedDataParallel(net)
    state = None
    if args.hook == "adaprec":
        state = adaprec.torch.HookState(format=args.format, algo=args.algo)
        state.register(model)  # the one line: model.register_comm_hook(state, adaprec.torch.hook)
    elif args.hook == "torch-fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    g = torch.Generator().manual_seed(rank)
    losses = []
    start = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        idx = torch.randint(0, len(x_all), (args.batch,), generator=g)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x_all[idx]), y_all[idx])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    dist.barrier()
    seconds = time.perf_counter() - start
    seconds = MPI.COMM_WORLD.allreduce(seconds, op=MPI.MAX)
    parameters = sum(p.numel() for p in net.parameters())
    if rank == 0:
        record = {
            "hook": args.hook, "format": args.format if args.hook == "adaprec" else None,
            "algo": args.algo if args.hook == "adaprec" else None, "ranks": size,
            "parameters": parameters, "data": "fashion-mnist" if have_data else "teacher",
            "steps": args.steps, "seconds": round(seconds, 4),
            "steps_per_second": round(args.steps / seconds, 3),
            "loss_first": round(sum(losses[:5]) / 5, 4), "loss_last": round(sum(losses[-5:]) / 5, 4),
        }
        if state is not None:
            record["compression"] = round(state.fp32_bytes / max(state.wire_bytes, 1), 3)
            record["ran"] = state.algorithms  # with --algo auto, "native" buckets were sent in fp32
        print(json.dumps(record), flush=True)
    dist.destroy_process_group()


main()
