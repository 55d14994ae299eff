#!/usr/bin/python3
"""Single-rank training throughput: adaprec-train's Eigen layers vs PyTorch on CPU, side by side.

Same model (mlp: 784-512-512-10; cnn: conv5x5(16)-relu-pool-conv5x5(32)-relu-pool-fc(1568->512)-relu-fc(10)),
same batch, same thread count (1: ranks are the unit of parallelism in adaprec-train), momentum SGD with
weight decay, random images. The two are run alternately, `--rounds` times each, and the median
images/s of each is reported with their ratio (adaprec / pytorch; >= 1.0 means AdaPrec is as fast).

    bench/trainer/compare_pytorch.py --bench build/bench/trainer/adaprec-trainer-bench
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def torch_model(name):
    import torch.nn as nn
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(32 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, 10))


def torch_images_per_s(name, batch, steps, warmup):
    import torch
    torch.manual_seed(1)
    model = torch_model(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, 1, 28, 28)
    y = torch.arange(batch) % 10

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * batch / (time.perf_counter() - start)


def adaprec_images_per_s(bench, name, batch, steps, warmup):
    out = subprocess.run([bench, "--model", name, "--batch", str(batch), "--steps", str(steps),
                          "--warmup", str(warmup)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["images_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="path to adaprec-trainer-bench")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="rough time per measurement")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("compare_pytorch.py: PyTorch is missing (apt-get install python3-torch)")
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    print(f"# torch {torch.__version__}, {args.threads} thread(s), batch {args.batch}, median of {args.rounds} rounds")
    print(f"{'model':>6} {'adaprec img/s':>14} {'pytorch img/s':>14} {'ratio':>7}")
    for name in args.models.split(","):
        # Size the step count so one measurement takes about --seconds.
        probe = torch_images_per_s(name, args.batch, 3, 1)
        steps = max(5, int(args.seconds * probe / args.batch))
        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(adaprec_images_per_s(args.bench, name, args.batch, steps, 3))
            theirs.append(torch_images_per_s(name, args.batch, steps, 3))
        a, t = statistics.median(ours), statistics.median(theirs)
        print(f"{name:>6} {a:14.1f} {t:14.1f} {a / t:7.2f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
