#!/usr/bin/python3
"""Summarize bench/trainer/run_experiment.sh logs: one row per format with the final test accuracy (mean,
sample standard deviation and range over seeds), wall time, and bytes sent relative to fp32.

    bench/trainer/summarize_experiment.py OUT_DIR [--markdown]
"""
import glob
import json
import os
import re
import statistics
import sys


def final_record(path):
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
    return (evals[-1] if evals else None), decisions, summary


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    rows = {}
    for path in sorted(glob.glob(os.path.join(out, "*-seed*.jsonl"))):
        m = re.match(r"(.+)-seed(\d+)\.jsonl$", os.path.basename(path))
        last, decisions, summary = final_record(path)
        if last is None:
            continue
        r = rows.setdefault(m.group(1), {"acc": [], "wall": [], "ratio": [], "choices": [], "overhead": []})
        r["acc"].append(last["test_accuracy"])
        r["wall"].append(last["wall_s"])
        r["ratio"].append(last["bytes_sent"] / last["bytes_fp32"] if last["bytes_fp32"] else 1.0)
        r["choices"] += [d["choice"] for d in decisions]
        if summary:
            r["overhead"].append(summary["overhead_fraction"])
    order = ["fp32", "fp8", "fp8s", "table1", "table1+ef", "fastest", "adaptive"]
    names = sorted(rows, key=lambda n: order.index(n) if n in order else len(order))
    print("| format | seeds | test accuracy mean ± sd (min–max) | wall s (mean) | bytes vs fp32 | notes |")
    print("|---|---|---|---|---|---|")
    for n in names:
        r = rows[n]
        acc = r["acc"]
        sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
        note = ""
        if r["choices"]:
            counts = {c: r["choices"].count(c) for c in sorted(set(r["choices"]))}
            note = "choices " + ", ".join(f"{c}×{k}" for c, k in counts.items())
            if r["overhead"]:
                note += f"; controller overhead {100 * statistics.mean(r['overhead']):.0f}% of wall time"
        print(f"| {n} | {len(acc)} | {100 * statistics.mean(acc):.2f}% ± {100 * sd:.2f} "
              f"({100 * min(acc):.2f}–{100 * max(acc):.2f}) | {statistics.mean(r['wall']):.0f} | "
              f"{statistics.mean(r['ratio']):.3f} | {note} |")


if __name__ == "__main__":
    main()
