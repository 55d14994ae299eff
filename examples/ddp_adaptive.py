"""Adaptive precision in an existing PyTorch DDP training loop: adaprec.torch.AdaptivePrecision runs
AdaPrec's precision controller around the loop (speculative branches in each candidate format, the
learning-curve prediction, continuing in the best format), through the AdaPrec DDP hook.

    mpirun -np 4 python3 examples/ddp_adaptive.py
    mpirun -np 2 python3 examples/ddp_adaptive.py --steps 200 --candidates fp32,fp8s,table2+ef

The lines marked "# adaptive" are all it adds to a plain DDP loop. Data: Fashion-MNIST from Debian's
dataset-fashion-mnist when present, else a fixed random teacher problem. Rank 0 prints each decision,
the final validation accuracy, and the time snapshot and restore cost per branch.
"""

import argparse
import gzip
import json
import os
import struct

import torch
import torch.nn as nn

import adaprec.torch


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def load_data(directory, rank, size):
    """This rank's shard of the training images, and validation images every rank shares."""
    if os.path.exists(os.path.join(directory, "train-images-idx3-ubyte.gz")):
        x = read_idx(os.path.join(directory, "train-images-idx3-ubyte.gz")).reshape(-1, 784).float() / 255
        y = read_idx(os.path.join(directory, "train-labels-idx1-ubyte.gz")).long()
        vx = read_idx(os.path.join(directory, "t10k-images-idx3-ubyte.gz")).reshape(-1, 784).float() / 255
        vy = read_idx(os.path.join(directory, "t10k-labels-idx1-ubyte.gz")).long()
        return x[rank::size], y[rank::size], vx[:2000], vy[:2000], "fashion-mnist"
    g = torch.Generator().manual_seed(7)
    teacher = torch.randn(784, 10, generator=g)
    x = torch.randn(8192 * size + 2000, 784, generator=g)
    y = (x @ teacher).argmax(dim=1)
    return x[2000 + rank::size], y[2000 + rank::size], x[:2000], y[:2000], "teacher"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64, help="per rank")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--candidates", default="fp32,fp16,fp8s,table4,table2+ef")
    parser.add_argument("--spec-steps", type=int, default=20)
    parser.add_argument("--spec-evals", type=int, default=2)
    parser.add_argument("--phase-steps", type=int, default=60)
    parser.add_argument("--max-overhead", type=float, default=0.25)
    parser.add_argument("--algo", default="twoshot", help="AdaPrec algorithm of the hook")
    parser.add_argument("--no-prune", action="store_true",
                        help="speculate every candidate in every phase (on one machine pruning skips most phases)")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    torch.set_num_threads(1)

    adaprec.torch.init_process_group()
    rank, size = torch.distributed.get_rank(), torch.distributed.get_world_size()
    x, y, val_x, val_y, data_name = load_data(args.data, rank, size)

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(784, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                        nn.Linear(args.hidden, 10))
    model = nn.parallel.DistributedDataParallel(net)
    hook_state = adaprec.torch.HookState(format="fp32", algo=args.algo)
    hook_state.register(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)

    def train_step(step):
        # The batch follows from the step number, so every branch of a phase sees the same batches.
        idx = torch.randint(0, len(x), (args.batch,), generator=torch.Generator().manual_seed(step * 7919 + rank))
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        optimizer.step()
        scheduler.step()

    def evaluate():
        with torch.no_grad():
            return (model(val_x).argmax(dim=1) == val_y).float().mean().item()

    driver = adaprec.torch.AdaptivePrecision(                                  # adaptive
        model, optimizer, hook_state, train_step, evaluate, total_steps=args.steps,  # adaptive
        scheduler=scheduler, candidates=args.candidates.split(","),            # adaptive
        speculative_steps=args.spec_steps, eval_points=args.spec_evals,        # adaptive
        continuation_steps=args.phase_steps, max_overhead=args.max_overhead,   # adaptive
        validation_images=len(val_x), lr_schedule="scheduler",                # adaptive: the cosine to the predictor
        prune=not args.no_prune)                                               # adaptive
    for step in driver.steps():  # adaptive: was `for step in range(args.steps)`
        train_step(step)

    accuracy = evaluate()
    if rank == 0:
        for r in driver.records:
            # A pruned candidate has no prediction, only why it was not speculated ("not_faster",
            # "dominated", "bounded", or "stood_in" for fp32 once fp16 was speculated); a phase where pruning
            # left only fp32 is a "speculation_skipped" record.
            print(json.dumps({"step": r["step"], "choice": r["choice"], "event": r.get("event", "decision"),
                              "predicted": {c["name"]: round(c["predicted_mean"], 4) if "predicted_mean" in c
                                            else "pruned: " + c["pruned"] if "pruned" in c
                                            else "goes on (no branch)"
                                            for c in r["candidates"]},
                              "continuation_steps": r.get("continuation_steps")}))
        parameters = sum(p.numel() for p in net.parameters())
        print(json.dumps({
            "ranks": size, "data": data_name, "parameters": parameters, "steps": args.steps,
            "phases": len(driver.records), "decisions": sum(r.get("event", "decision") == "decision" for r in driver.records),
            "final_format": driver.current,
            "validation_accuracy": round(accuracy, 4),
            "snapshot_ms": round(1e3 * driver.snapshot_seconds / max(driver.snapshots, 1), 3),
            "restore_ms": round(1e3 * driver.restore_seconds / max(driver.restores, 1), 3),
            "snapshots": driver.snapshots, "restores": driver.restores}), flush=True)
    hook_state.close()
    torch.distributed.destroy_process_group()


main()
