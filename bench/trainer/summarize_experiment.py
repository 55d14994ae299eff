#!/usr/bin/python3
"""Summarize bench/trainer/run_experiment.sh logs: one row per format with the final test accuracy (mean,
sample standard deviation and range over seeds), wall time (mean and range), and bytes sent relative
to fp32. With --at T1,T2,...: a second table with the test accuracy each format had reached by those
wall-clock seconds (the last evaluation at or before T; intermediate evaluations use --eval-samples
test images, the final one all of them), i.e. accuracy per wall time.

With --regret: issue 19's regret table: fp32's mean final accuracy is the target; per format the
wall time to reach it (the first evaluation at or above it; mean over seeds, or "never" with the count
of runs that did), the best fixed format's time (an oracle no user has), and for each adaptive variant
its time over the oracle's (goal <= 1.10), whether its final accuracy is within fp32's seed spread
(mean >= fp32 mean - fp32 sd) and its controller overhead (goal <= 10 % where no format is faster than
fp32). With --plot PNG: test accuracy against wall time, every run, one colour per format, and the
regret's target as a dotted line when fp32 ran.

With --target-from DIR: fp32's final accuracies (the target and its spread) from DIR's fp32 runs
instead of OUT_DIR's: fp32's accuracy per seed is the same on every link, so a slow regime can take
it from a run on shared memory.

    bench/trainer/summarize_experiment.py OUT_DIR [--at 60,120,240] [--regret] [--plot PNG] [--target-from DIR]
"""
import argparse
import glob
import json
import os
import re
import statistics


def read_log(path):
    evals, decisions, summary = [], [], None
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("event") == "eval":
                evals.append(rec)
            elif rec.get("event") in ("decision", "speculation_skipped"):  # skipped: pruning left fp32 alone
                decisions.append(rec)
            elif rec.get("event") == "controller_summary":
                summary = rec
    return evals, decisions, summary


def spread(values, scale=1.0, digits=2):
    mean = statistics.mean(values) * scale
    sd = statistics.stdev(values) * scale if len(values) > 1 else 0.0
    return f"{mean:.{digits}f} ± {sd:.{digits}f} ({min(values) * scale:.{digits}f}–{max(values) * scale:.{digits}f})"


def read_rows(out):
    """Per format: final accuracies, wall times, byte ratios, choices, overheads and evaluations of its runs."""
    rows = {}
    for path in sorted(glob.glob(os.path.join(out, "*-seed*.jsonl"))):
        m = re.match(r"(.+)-seed(\d+)\.jsonl$", os.path.basename(path))
        evals, decisions, summary = read_log(path)
        if not evals:
            continue
        last = evals[-1]
        r = rows.setdefault(m.group(1), {"acc": [], "wall": [], "ratio": [], "choices": [], "overhead": [], "runs": []})
        r["acc"].append(last["test_accuracy"])
        r["wall"].append(last["wall_s"])
        r["ratio"].append(last["bytes_sent"] / last["bytes_fp32"] if last["bytes_fp32"] else 1.0)
        r["choices"] += [d["choice"] + (" (skipped)" if d["event"] == "speculation_skipped" else "")
                         for d in decisions]
        r["runs"].append(evals)
        if summary:
            r["overhead"].append(summary["overhead_fraction"])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--at", default="", help="comma-separated wall-clock seconds for the accuracy-by-time table")
    parser.add_argument("--regret", action="store_true", help="the regret table against the best fixed format")
    parser.add_argument("--plot", default="", help="write accuracy against wall time to this PNG")
    parser.add_argument("--target-from", default="", help="take fp32's final accuracies (the target) from this "
                                                          "directory's runs")
    args = parser.parse_args()
    rows = read_rows(args.out)
    fp32 = read_rows(args.target_from).get("fp32", {}).get("acc", []) if args.target_from else None
    order = ["fp32", "fp8", "fp8s", "table4", "table2", "table1", "table1+ef", "fastest", "adaptive", "adaptive-risk",
             "adaptive-fixed"]
    names = sorted(rows, key=lambda n: (order.index(n) if n in order else len(order), n))
    print("| format | seeds | test accuracy % mean ± sd (min–max) | wall s mean ± sd (min–max) | bytes vs fp32 | notes |")
    print("|---|---|---|---|---|---|")
    for n in names:
        r = rows[n]
        note = ""
        if r["choices"]:
            counts = {c: r["choices"].count(c) for c in sorted(set(r["choices"]))}
            note = "choices " + ", ".join(f"{c}×{k}" for c, k in counts.items())
            if r["overhead"]:
                note += f"; controller overhead {100 * statistics.mean(r['overhead']):.0f}% of wall time"
        print(f"| {n} | {len(r['acc'])} | {spread(r['acc'], 100)} | {spread(r['wall'], 1, 0)} | "
              f"{statistics.mean(r['ratio']):.3f} | {note} |")
    if args.at:
        times = [float(t) for t in args.at.split(",")]
        print()
        print("| format | " + " | ".join(f"accuracy % by {t:g} s" for t in times) + " |")
        print("|---|" + "---|" * len(times))
        for n in names:
            cells = []
            for t in times:
                # Accuracy reached by t: the last evaluation at or before t (none yet: not reached).
                reached = [next((e["test_accuracy"] for e in reversed(run) if e["wall_s"] <= t), None)
                           for run in rows[n]["runs"]]
                done = [a for a in reached if a is not None]
                cells.append(f"{100 * statistics.mean(done):.1f}" + (f" ({len(done)}/{len(reached)} runs)" if len(done) < len(reached) else "")
                             if done else "–")
            print(f"| {n} | " + " | ".join(cells) + " |")
    if args.regret:
        regret_table(rows, names, fp32)
    if args.plot:
        plot(rows, names, args.plot, os.path.basename(os.path.normpath(args.out)), fp32)


def time_to_reach(run, target):
    return next((e["wall_s"] for e in run if e["test_accuracy"] >= target), None)


def fp32_finals(rows, fp32):
    """fp32's final accuracies: `fp32` when given (--target-from), else the runs' own fp32 rows."""
    if fp32 is not None:
        return fp32
    return rows["fp32"]["acc"] if "fp32" in rows else []


def fp32_target(rows, fp32=None):
    """The regret's target: fp32's mean final test accuracy (None without fp32 runs)."""
    finals = fp32_finals(rows, fp32)
    return statistics.mean(finals) if finals else None


def regret_table(rows, names, fp32=None):
    target = fp32_target(rows, fp32)
    if target is None:
        print("\nregret: no fp32 runs")
        return
    finals = fp32_finals(rows, fp32)
    fp32_sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
    times = {}
    print()
    print(f"Target: fp32's mean final test accuracy {100 * target:.2f}% (sd {100 * fp32_sd:.2f} over "
          f"{len(finals)} seeds{'' if fp32 is None else ', from --target-from'}).")
    print()
    print("| format | time to target s (mean over seeds) | runs that reached it |")
    print("|---|---:|---|")
    for n in names:
        reached = [time_to_reach(run, target) for run in rows[n]["runs"]]
        done = [t for t in reached if t is not None]
        if len(done) == len(reached):
            times[n] = statistics.mean(done)
        cell = f"{times[n]:.0f}" if n in times else "never"
        print(f"| {n} | {cell} | {len(done)}/{len(reached)} |")
    fixed = {n: t for n, t in times.items() if not n.startswith("adaptive")}
    if not fixed:
        return
    oracle = min(fixed, key=fixed.get)
    print()
    print(f"Best fixed format (the oracle): {oracle}, {fixed[oracle]:.0f} s.")
    print()
    print("| adaptive | time / oracle's (goal <= 1.10) | final accuracy within fp32's spread | controller overhead |")
    print("|---|---:|---|---:|")
    for n in names:
        if not n.startswith("adaptive"):
            continue
        r = rows[n]
        ratio = f"{times[n] / fixed[oracle]:.2f}" if n in times else "never"
        within = statistics.mean(r["acc"]) >= target - fp32_sd
        overhead = f"{100 * statistics.mean(r['overhead']):.0f}%" if r["overhead"] else "-"
        print(f"| {n} | {ratio} | {'yes' if within else 'no'} ({100 * statistics.mean(r['acc']):.2f}%) | {overhead} |")


def plot(rows, names, path, title, fp32=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, n in enumerate(names):
        for k, run in enumerate(rows[n]["runs"]):
            ax.plot([e["wall_s"] for e in run], [100 * e["test_accuracy"] for e in run],
                    color=colours[i % len(colours)], alpha=0.8, lw=1.2, label=n if k == 0 else None,
                    ls="--" if n.startswith("adaptive") else "-")
    target = fp32_target(rows, fp32)
    if target is not None:  # what --regret's time to target is read against
        ax.axhline(100 * target, color="black", lw=0.8, ls=":", label=f"target {100 * target:.2f}% (fp32's mean)")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
