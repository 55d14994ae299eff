#!/usr/bin/python3
"""Draw an adaprec-train JSON-lines log: the training curve (test accuracy at every evaluation), and for
--format adaptive every speculative phase: each candidate's branch curve (dotted, validation accuracy),
its predicted accuracy at the end of the continuation phase with ± one standard deviation, and the
choice (filled marker).

    tools/train/plot_training.py run.jsonl -o run.png [--title TEXT]
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", nargs="+", help="JSON-lines logs of adaprec-train (several: one curve each)")
    ap.add_argument("-o", "--output", required=True, help="image file (.png, .pdf, .svg)")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6))
    colors = {}
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def color(name):
        return colors.setdefault(name, palette[len(colors) % len(palette)])

    for path in args.log:
        evals, decisions = [], []
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("event") == "eval":
                    evals.append(rec)
                elif rec.get("event") == "decision":
                    decisions.append(rec)
        if not evals:
            sys.exit(f"plot_training.py: {path} has no evaluations")
        label = path.rsplit("/", 1)[-1].removesuffix(".jsonl")
        ax.plot([e["step"] for e in evals], [e["test_accuracy"] for e in evals], "-", color="black" if len(args.log) == 1 else None,
                lw=2, label=f"{label}: test accuracy")
        for d in decisions:
            for c in d["candidates"]:
                steps = [p[0] for p in c["curve"]]
                accs = [p[1] for p in c["curve"]]
                chosen = c["name"] == d["choice"]
                ax.plot(steps, accs, ":", color=color(c["name"]), lw=1.5)
                ax.errorbar([c["predicted_step"]], [c["predicted_mean"]], yerr=[c["predicted_sd"]],
                            fmt="o" if chosen else "x", color=color(c["name"]), capsize=3, ms=7 if chosen else 5,
                            mfc=color(c["name"]) if chosen else "none")
            ax.axvline(d["step"], color="grey", lw=0.5, alpha=0.5)
            ax.annotate(d["choice"], (d["step"], 0.02), xycoords=("data", "axes fraction"), rotation=90, fontsize=8,
                        color="grey")
    for name, c in colors.items():
        ax.plot([], [], ":", color=c, label=f"{name}: speculative branch / prediction ± sd")
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy (test: solid; validation subset: dotted branches)")
    ax.set_title(args.title or "adaprec-train")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
