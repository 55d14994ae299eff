#!/usr/bin/python3
"""Draw adaprec-train JSON-lines logs.

One log (default): the controller figure. Top: the test accuracy at every evaluation against the step,
the learning-rate warm-up and every decision marked ("decision k: choice"). Below, one pair of panels
per decision: left, every candidate's speculative branch (validation accuracy at the branch's
evaluations; each candidate with its own colour and marker, shifted a little sideways so that curves
that coincide stay visible); right, each candidate's predicted validation accuracy at the end of the
continuation it would get, mean ± one standard deviation, side by side with its name, value and the
step it is predicted for; the chosen candidate is drawn larger and filled, and its name is bold.

--wall-time (one or several logs): test accuracy against wall time for each run (fp32 and adaptive in
tools/demo), the controller's speculation intervals shaded and its decisions labelled, and the first
log's final accuracy drawn across with the moment each other run reaches it.

    tools/train/plot_training.py run.jsonl -o run.png [--title TEXT]
    tools/train/plot_training.py fp32.jsonl adaptive.jsonl --wall-time -o demo.png
"""
import argparse
import math

import training_log

MARKERS = "osD^vP*X"


def read_log(path):
    return training_log.read_log(path, "plot_training.py")


label = training_log.label


class Palette:
    """One colour and marker per candidate name, the same in every panel."""

    def __init__(self, plt):
        self.colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        self.names = {}

    def index(self, name):
        return self.names.setdefault(name, len(self.names))

    def colour(self, name):
        return self.colours[self.index(name) % len(self.colours)]

    def marker(self, name):
        return MARKERS[self.index(name) % len(MARKERS)]


def plot_wall_time(plt, runs, title, output):
    fig, ax = plt.subplots(figsize=(11, 6))
    target = runs[0][1][-1]["test_accuracy"]
    ax.axhline(target, color="grey", ls="--", lw=1)
    ax.annotate(f"{runs[0][0]} final: {100 * target:.2f}%", (0.01, target), xycoords=("axes fraction", "data"),
                xytext=(0, 4), textcoords="offset points", fontsize=9, color="grey")
    colours = ["tab:blue", "tab:red", "tab:green", "tab:purple"]
    low = min(e["test_accuracy"] for _, evals, _ in runs for e in evals)
    for i, (name, evals, decisions) in enumerate(runs):
        colour = colours[i % len(colours)]
        last = evals[-1]
        ax.plot([e["wall_s"] for e in evals], [e["test_accuracy"] for e in evals], "-o", color=colour, lw=2, ms=4,
                label=f"{name}: {100 * last['test_accuracy']:.2f}% in {last['wall_s']:.0f} s")
        if i > 0:
            reached = next((e for e in evals if e["test_accuracy"] >= target), None)
            if reached:
                ax.plot([reached["wall_s"]], [reached["test_accuracy"]], "*", color=colour, ms=16, mec="black")
                ax.annotate(f"reaches {runs[0][0]}'s final accuracy\nat {reached['wall_s']:.0f} s", (reached["wall_s"],
                            reached["test_accuracy"]), xytext=(12, -34), textcoords="offset points", fontsize=9,
                            color=colour, arrowprops=dict(arrowstyle="-", color=colour, lw=0.8))
        for d in decisions:
            end = d["wall_s"]
            ax.axvspan(end - d["phase_s"], end, color=colour, alpha=0.12, lw=0)
            ax.axvline(end, color=colour, lw=1, ls=":")
            ax.annotate(f"decision {d['phase']}: {d['choice']}", (end, 0.03), xycoords=("data", "axes fraction"),
                        rotation=90, fontsize=9, color=colour, ha="right", va="bottom")
    for i, (_, _, decisions) in enumerate(runs):
        if decisions:
            ax.axvspan(0, 0, color=colours[i % len(colours)], alpha=0.12,
                       label="speculation (every candidate's branch), then a decision")
            break
    ax.set_ylim(max(0.0, low - 0.05), min(1.0, max(target, *(e["test_accuracy"] for _, ev, _ in runs for e in ev)) + 0.02))
    ax.set_xlim(left=0)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_title(title or "test accuracy against wall time")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    fig.savefig(output, dpi=110)


def plot_controller(plt, name, evals, decisions, title, output):
    palette = Palette(plt)
    per_row = 3
    rows = max(1, math.ceil(len(decisions) / per_row))
    cols = min(per_row, max(1, len(decisions)))
    fig = plt.figure(figsize=(6.2 * cols + 1, 3.6 + 3.8 * rows))
    grid = fig.add_gridspec(1 + rows, 2 * cols, width_ratios=[1.3, 1.2] * cols, height_ratios=[1.1] + [1.0] * rows,
                            hspace=0.55, wspace=0.45)
    top = fig.add_subplot(grid[0, :])
    top.plot([e["step"] for e in evals], [e["test_accuracy"] for e in evals], "-o", color="black", lw=2, ms=3,
             label=f"{name}: test accuracy")
    for d in decisions:
        top.axvline(d["step"], color=palette.colour(d["choice"]), lw=1.2, ls="--")
        top.annotate(f"decision {d['phase']}\n→ {d['choice']}", (d["step"], 0.96), xycoords=("data", "axes fraction"),
                     xytext=(4, 0), textcoords="offset points", fontsize=9, color=palette.colour(d["choice"]),
                     fontweight="bold", va="top", bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.85))
    top.set_xlim(0, max(e["step"] for e in evals) * 1.02)
    top.set_xlabel("step")
    top.set_ylabel("test accuracy")
    top.grid(alpha=0.3)
    top.set_title(title or f"{name}: training and the controller's decisions")
    top.legend(loc="lower right", fontsize=9)
    if evals[0]["step"] > 0 and decisions:
        top.set_title((title or f"{name}: training and the controller's decisions") +
                      f" (fp32 before step {decisions[0]['step']})")
    for k, d in enumerate(decisions):
        r, c = divmod(k, per_row)
        branches = fig.add_subplot(grid[1 + r, 2 * c])
        predictions = fig.add_subplot(grid[1 + r, 2 * c + 1])
        # Pruned candidates (never speculated: docs/trainer.md, "Pruning") have no branch to draw.
        cands = [c for c in d["candidates"] if "pruned" not in c]
        pruned = [f"{c['name']} ({c['pruned'].replace('_', ' ')})" for c in d["candidates"] if "pruned" in c]
        # Branches share their start and often their values: a small sideways shift per candidate keeps
        # every curve visible without misplacing it (at most ±5% of the branch length).
        width = 0.1 * (cands[0]["curve"][-1][0] - d["step"]) / max(1, len(cands) - 1)
        for i, cand in enumerate(cands):
            shift = (i - (len(cands) - 1) / 2) * width
            steps = [p[0] - d["step"] + shift for p in cand["curve"]]
            chosen = cand["name"] == d["choice"]
            branches.plot(steps, [p[1] for p in cand["curve"]], "-", marker=palette.marker(cand["name"]),
                          color=palette.colour(cand["name"]), lw=2.2 if chosen else 1.2, ms=6 if chosen else 4,
                          label=cand["name"], zorder=3 if chosen else 2)
        branches.set_title(f"decision {d['phase']} at step {d['step']}: branches" +
                           (f"\npruned: {', '.join(pruned)}" if pruned else ""), fontsize=10)
        branches.set_xlabel("steps into the phase")
        branches.set_ylabel("validation accuracy")
        branches.grid(alpha=0.3)
        branches.legend(fontsize=7, loc="best")
        for i, cand in enumerate(cands):
            chosen = cand["name"] == d["choice"]
            colour = palette.colour(cand["name"])
            predictions.errorbar([i], [cand["predicted_mean"]], yerr=[cand["predicted_sd"]], fmt=palette.marker(cand["name"]),
                                 color=colour, capsize=4, lw=2.2 if chosen else 1.2, ms=11 if chosen else 6,
                                 mfc=colour if chosen else "white", mec=colour, zorder=3)
            # Values alternate above and below the bars, so that neighbours' labels do not collide.
            above = i % 2 == 0
            predictions.annotate(f"{cand['predicted_mean']:.3f}\n±{cand['predicted_sd']:.3f}",
                                 (i, cand["predicted_mean"] + (1 if above else -1) * cand["predicted_sd"]),
                                 xytext=(0, 3 if above else -3), textcoords="offset points", ha="center",
                                 va="bottom" if above else "top", fontsize=7.5, color=colour,
                                 fontweight="bold" if chosen else "normal")
        same_horizon = len({c["predicted_step"] for c in cands}) == 1
        predictions.set_xticks(range(len(cands)))
        predictions.set_xticklabels([c["name"] if same_horizon else f"{c['name']}\n@{c['predicted_step']}"
                                     for c in cands], rotation=45 if len(cands) > 4 else 0, fontsize=8)
        for tick, cand in zip(predictions.get_xticklabels(), cands):
            if cand["name"] == d["choice"]:
                tick.set_fontweight("bold")
                tick.set_color(palette.colour(cand["name"]))
        lo = min(c["predicted_mean"] - c["predicted_sd"] for c in cands)
        hi = max(c["predicted_mean"] + c["predicted_sd"] for c in cands)
        pad = max(0.01, 0.25 * (hi - lo))
        predictions.set_ylim(lo - 1.6 * pad, hi + 1.6 * pad)
        predictions.set_xlim(-0.6, len(cands) - 0.4)
        at = f" at step {cands[0]['predicted_step']}" if same_horizon else ""
        predictions.set_title(f"predicted{at} → {d['choice']}", fontsize=10, color=palette.colour(d["choice"]))
        predictions.set_ylabel("validation accuracy, mean ± sd", fontsize=8)
        predictions.grid(alpha=0.3, axis="y")
    fig.savefig(output, dpi=100, bbox_inches="tight")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", nargs="+", help="JSON-lines logs of adaprec-train")
    ap.add_argument("-o", "--output", required=True, help="image file (.png, .pdf, .svg)")
    ap.add_argument("--wall-time", action="store_true", help="test accuracy against wall time, one curve per log")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    if len(args.log) > 1 and not args.wall_time:
        ap.error("several logs need --wall-time (the controller figure draws one run)")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(label(p), *read_log(p)) for p in args.log]
    if args.wall_time:
        plot_wall_time(plt, runs, args.title, args.output)
    else:
        plot_controller(plt, *runs[0], args.title, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
