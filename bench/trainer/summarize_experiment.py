#!/usr/bin/python3
"""Summarize bench/trainer/run_experiment.sh logs: one row per format with the final test accuracy (mean,
sample standard deviation and range over seeds), wall time (mean and range), and bytes sent relative
to fp32. With --at T1,T2,...: a second table with the test accuracy each format had reached by those
wall-clock seconds (the last evaluation at or before T; intermediate evaluations use --eval-samples
test images, the final one all of them), i.e. accuracy per wall time.

    bench/trainer/summarize_experiment.py OUT_DIR [--at 60,120,240]
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
            elif rec.get("event") == "decision":
                decisions.append(rec)
            elif rec.get("event") == "controller_summary":
                summary = rec
    return evals, decisions, summary


def spread(values, scale=1.0, digits=2):
    mean = statistics.mean(values) * scale
    sd = statistics.stdev(values) * scale if len(values) > 1 else 0.0
    return f"{mean:.{digits}f} ± {sd:.{digits}f} ({min(values) * scale:.{digits}f}–{max(values) * scale:.{digits}f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--at", default="", help="comma-separated wall-clock seconds for the accuracy-by-time table")
    args = parser.parse_args()
    rows = {}
    for path in sorted(glob.glob(os.path.join(args.out, "*-seed*.jsonl"))):
        m = re.match(r"(.+)-seed(\d+)\.jsonl$", os.path.basename(path))
        evals, decisions, summary = read_log(path)
        if not evals:
            continue
        last = evals[-1]
        r = rows.setdefault(m.group(1), {"acc": [], "wall": [], "ratio": [], "choices": [], "overhead": [], "runs": []})
        r["acc"].append(last["test_accuracy"])
        r["wall"].append(last["wall_s"])
        r["ratio"].append(last["bytes_sent"] / last["bytes_fp32"] if last["bytes_fp32"] else 1.0)
        r["choices"] += [d["choice"] for d in decisions]
        r["runs"].append(evals)
        if summary:
            r["overhead"].append(summary["overhead_fraction"])
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


if __name__ == "__main__":
    main()
