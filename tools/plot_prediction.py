#!/usr/bin/python3
"""Draw learning-curve predictions. Left: each curve's observed points (its own colour and marker), its
predictive mean and 90% band (edges dashed when there are several), a dotted line at its last observed step. Right: each curve's prediction at
the last predicted step side by side, mean ± one standard deviation, labelled with its name and values,
so that curves whose bands overlap on the left stay readable; --highlight draws one of them larger.

Usage (adaprec-predict --plot out.png runs this for you):
  adaprec-predict --input obs.csv --at $(seq -s, 0 100 3000) > pred.csv
  python3 tools/plot_prediction.py --observed obs.csv --predicted pred.csv --output out.png \
      [--names 0=fp32,1=fp16] [--highlight 1]

observed:  CSV with step,value and optionally curve (any column order, like adaprec-predict's input)
predicted: adaprec-predict's CSV output (curve,step,mean,std,q05,q95)
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MARKERS = "osD^vP*X"


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


def parse_names(text):
    names = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            sys.exit(f"--names: '{item}' is not ID=NAME")
        names[int(key)] = value
    return names


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--observed", required=True)
    p.add_argument("--predicted", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--title", default="Learning-curve prediction (mean, 90% band)")
    p.add_argument("--names", default="", help="curve names: 0=fp32,1=fp16,...")
    p.add_argument("--highlight", type=int, default=None, help="curve id to emphasise (e.g. the chosen one)")
    a = p.parse_args()
    observed = by_curve(read_rows(a.observed), ("step", "value"))
    predicted = by_curve(read_rows(a.predicted), ("step", "mean", "std", "q05", "q95"))
    names = parse_names(a.names)
    curves = sorted(set(observed) | set(predicted))
    fig, (ax, ends) = plt.subplots(1, 2, figsize=(11, 5), dpi=110, gridspec_kw={"width_ratios": [2.2, 1]})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, curve in enumerate(curves):
        colour = colours[i % len(colours)]
        name = names.get(curve, f"curve {curve}")
        bold = curve == a.highlight
        if curve in predicted:
            steps, mean, _, lo, hi = zip(*predicted[curve])
            # Several curves' bands overlap: a light fill with its edges drawn keeps each one traceable.
            ax.fill_between(steps, lo, hi, color=colour, alpha=0.18 if len(curves) == 1 else 0.06, linewidth=0)
            if len(curves) > 1:
                ax.plot(steps, lo, "--", color=colour, linewidth=0.7)
                ax.plot(steps, hi, "--", color=colour, linewidth=0.7)
            ax.plot(steps, mean, color=colour, linewidth=2.6 if bold else 1.4, label=name)
        if curve in observed:
            steps, values = zip(*observed[curve])
            ax.plot(steps, values, MARKERS[i % len(MARKERS)], color=colour, markersize=5 if bold else 3.5,
                    mfc=colour if bold else "white")
            ax.axvline(steps[-1], color=colour, linewidth=0.6, linestyle=":")
        if curve in predicted:
            step, mean, sd, _, _ = predicted[curve][-1]
            ends.errorbar([i], [mean], yerr=[sd], fmt=MARKERS[i % len(MARKERS)], color=colour, capsize=4,
                          ms=10 if bold else 6, lw=2.2 if bold else 1.2, mfc=colour if bold else "white", mec=colour)
            ends.annotate(f"{mean:.3f}\n±{sd:.3f}", (i, mean + sd), xytext=(0, 3), textcoords="offset points",
                          ha="center", va="bottom", fontsize=8, color=colour)
    ax.set_xlabel("step")
    ax.set_ylabel("value (validation accuracy)")
    ax.set_ylim(max(0.0, ax.get_ylim()[0]), min(1.0, ax.get_ylim()[1]))
    ax.set_title(a.title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    last = max((v[-1][0] for v in predicted.values()), default=0)
    ends.set_xticks(range(len(curves)))
    ends.set_xticklabels([names.get(c, f"curve {c}") for c in curves], rotation=45, ha="right", fontsize=8)
    for tick, curve in zip(ends.get_xticklabels(), curves):
        if curve == a.highlight:
            tick.set_fontweight("bold")
    ends.set_xlim(-0.6, len(curves) - 0.4)
    lo, hi = ends.get_ylim()
    ends.set_ylim(lo, hi + 0.12 * (hi - lo))
    ends.set_title(f"predicted at step {last:g}: mean ± sd", fontsize=10)
    ends.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(a.output)


if __name__ == "__main__":
    main()
