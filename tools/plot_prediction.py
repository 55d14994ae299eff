#!/usr/bin/python3
"""Draw learning-curve predictions: observed points, predictive mean and the 90% band, one colour per curve.

Usage (adaprec-predict --plot out.png runs this for you):
  adaprec-predict --input obs.csv --at $(seq -s, 0 100 3000) > pred.csv
  python3 tools/plot_prediction.py --observed obs.csv --predicted pred.csv --output out.png

observed:  CSV with step,value and optionally curve (any column order, like adaprec-predict's input)
predicted: adaprec-predict's CSV output (curve,step,mean,std,q05,q95)
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_rows(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r and not r[0].lstrip().startswith("#")]
    if not rows:
        sys.exit(f"{path}: empty file")
    header = [h.strip().lower() for h in rows[0]]
    return [dict(zip(header, (v.strip() for v in r))) for r in rows[1:]]


def by_curve(rows, fields):
    out = {}
    for r in rows:
        out.setdefault(int(float(r.get("curve", "0"))), []).append(tuple(float(r[k]) for k in fields))
    for v in out.values():
        v.sort()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--observed", required=True)
    p.add_argument("--predicted", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--title", default="Learning-curve prediction (mean, 90% band)")
    a = p.parse_args()
    observed = by_curve(read_rows(a.observed), ("step", "value"))
    predicted = by_curve(read_rows(a.predicted), ("step", "mean", "q05", "q95"))
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, curve in enumerate(sorted(set(observed) | set(predicted))):
        colour = colours[i % len(colours)]
        if curve in predicted:
            steps, mean, lo, hi = zip(*predicted[curve])
            ax.fill_between(steps, lo, hi, color=colour, alpha=0.18, linewidth=0)
            ax.plot(steps, mean, color=colour, linewidth=1.6, label=f"curve {curve}")
        if curve in observed:
            steps, values = zip(*observed[curve])
            ax.plot(steps, values, "o", color=colour, markersize=3.5)
            ax.axvline(steps[-1], color=colour, linewidth=0.6, linestyle=":")
    ax.set_xlabel("step")
    ax.set_ylabel("validation accuracy")
    ax.set_ylim(max(0.0, ax.get_ylim()[0]), min(1.0, ax.get_ylim()[1]))
    ax.set_title(a.title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(a.output)


if __name__ == "__main__":
    main()
