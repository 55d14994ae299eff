#!/usr/bin/python3
"""Writes real learning curves of a small PyTorch MLP under annealing learning-rate schedules for the
schedule-aware predictor evaluation (bench/predictor/schedule_eval.sh, docs/predictor.md).

Each run (--arch mlp, the default): MLP 784-256-10 (ReLU), SGD momentum 0.9, weight decay 5e-4, batch
64, the first 8000 Fashion-MNIST training images (125 steps per epoch), 6 epochs = 750 steps; test
accuracy on the first 2000 test images every 25 steps (30 points, n = 2000).
--arch cnn: conv 3x3 8 - pool - conv 3x3 16 - pool - fc 64 - fc 10 (ReLU), the same optimiser, the
first 6000 training images (94 steps per epoch), 1200 steps (~13 epochs); the same 2000 test images
every 40 steps (30 points). The rate is set every step from the same --lr-schedule SPEC the predictor is
given (last column; it may contain commas: the rest of the line):
  mlp: cosine:750   cosine:750:75 (75 warm-up steps)   step:0.2:300,525   poly:750:2
  cnn: cosine:1200  cosine:1200:120                    step:0.2:480,840   poly:1200:2

  make_schedule_torch_curves.py OUT_CSV --seeds 1 2 --lrs 0.02 0.05 0.1 [--arch mlp|cnn] [--data DIR]
      [--eval-every N]   (evaluate every N steps instead: denser or sparser curves of the same runs)
"""
import argparse, gzip, math, os
import numpy as np
import torch

BATCH, TEST_IMAGES = 64, 2000


def mlp():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def cnn():
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(16 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10))


# arch: (network, training images, steps, evaluation every, schedules)
ARCHS = {
    "mlp": (mlp, 8000, 750, 25, ["cosine:750", "cosine:750:75", "step:0.2:300,525", "poly:750:2"]),
    "cnn": (cnn, 6000, 1200, 40, ["cosine:1200", "cosine:1200:120", "step:0.2:480,840", "poly:1200:2"]),
}


def lr_factor(spec, step):
    """The predictor's definition (docs/predictor.md), written out again here on purpose."""
    parts = spec.split(":")
    if parts[0] == "cosine":
        total = float(parts[1]); warm = float(parts[2]) if len(parts) > 2 else 0.0
        if step < warm:
            return step / warm
        p = min(1.0, (step - warm) / (total - warm))
        return 0.5 * (1 + math.cos(math.pi * p))
    if parts[0] == "step":
        gamma = float(parts[1]); f = 1.0
        for m in parts[2].split(","):
            if step >= float(m):
                f *= gamma
        return f
    if parts[0] == "poly":
        total, power = float(parts[1]), float(parts[2])
        return max(0.0, 1 - step / total) ** power
    raise ValueError(spec)


def idx(path):
    with gzip.open(path) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seeds", type=int, nargs="+", required=True)
    ap.add_argument("--lrs", type=float, nargs="+", required=True)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--first-curve", type=int, default=0)
    ap.add_argument("--arch", choices=sorted(ARCHS), default="mlp")
    ap.add_argument("--eval-every", type=int, default=0, help="steps between evaluations (default: the arch's)")
    a = ap.parse_args()
    net, images, steps, eval_every, schedules = ARCHS[a.arch]
    if a.eval_every < 0:
        ap.error("--eval-every must be >= 1")
    eval_every = a.eval_every or eval_every
    torch.set_num_threads(1)

    def load(kind, n):
        x = idx(os.path.join(a.data, f"{kind}-images-idx3-ubyte.gz"))[:n].reshape(-1, 1, 28, 28) / 255.0
        return (torch.tensor(x, dtype=torch.float32),
                torch.tensor(idx(os.path.join(a.data, f"{kind}-labels-idx1-ubyte.gz"))[:n].astype(np.int64)))
    xs, ys = load("train", images)
    xt, yt = load("t10k", TEST_IMAGES)
    curve = a.first_curve
    with open(a.out, "w") as out:
        out.write("curve,source,model,seed,lr,format,step,value,n,lr_at_step,lr_schedule\n")
        for seed in a.seeds:
            for lr in a.lrs:
                for spec in schedules:
                    torch.manual_seed(seed)
                    model = net()
                    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
                    gen = torch.Generator().manual_seed(seed)
                    perm = torch.randperm(images, generator=gen)
                    pos = 0
                    for step in range(steps):
                        if pos + BATCH > images:
                            perm = torch.randperm(images, generator=gen); pos = 0
                        b = perm[pos:pos + BATCH]; pos += BATCH
                        for g in opt.param_groups:
                            g["lr"] = lr * lr_factor(spec, step)
                        opt.zero_grad()
                        torch.nn.functional.cross_entropy(model(xs[b]), ys[b]).backward()
                        opt.step()
                        if (step + 1) % eval_every == 0:
                            with torch.no_grad():
                                acc = (model(xt).argmax(1) == yt).float().mean().item()
                            out.write(f"{curve},torch,{a.arch},{seed},{lr},fp32,{step + 1},{acc:.4f},{TEST_IMAGES},"
                                      f"{lr * lr_factor(spec, step):.6g},{spec}\n")
                    out.flush()
                    curve += 1


if __name__ == "__main__":
    main()
