#!/usr/bin/env python3
"""Issue 21's table from bench/trainer/overlap_bench.sh's logs: per rate, model and format, each
reduction mode's time per step split into compute and exposed communication (rank 0's counters of the
last log record: step_s = time inside steps, comm_s = the reductions' own time, exposed_comm_s = the part
of it the training thread waited for), and the goals: exposed communication as a share of the
sequential run's, and the step time against max(compute, communication).

    summarize_overlap.py OUT_DIR
"""
import glob
import json
import os
import sys


def last_record(path):
    records = [json.loads(line) for line in open(path) if line.strip()]
    evals = [r for r in records if r.get("event") == "eval"]
    return evals[-1] if evals else None


def main():
    out = sys.argv[1]
    rows = {}
    for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
        rate, model, fmt, mode = os.path.basename(path)[:-len(".jsonl")].split("-", 3)
        r = last_record(path)
        if r is None or not r.get("step"):
            continue
        n = r["step"]
        step = r["step_s"] / n
        exposed = r["exposed_comm_s"] / n
        rows[(rate, model, fmt, mode)] = {"step": step, "comm": r["comm_s"] / n, "exposed": exposed,
                                          "compute": step - exposed}
    print("| rate | model | format | mode | step ms | compute ms | comm ms | exposed ms | exposed / sequential's "
          "| step / max(compute, comm) |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    for (rate, model, fmt, mode), v in sorted(rows.items()):
        seq = rows.get((rate, model, fmt, "sequential"))
        share = f"{v['exposed'] / seq['exposed']:.2f}" if seq and seq["exposed"] > 0 else "-"
        # The compute a step cannot lose: the sequential run's (overlap adds a thread's work to it).
        compute = seq["compute"] if seq else v["compute"]
        bound = max(compute, seq["comm"] if seq else v["comm"])
        print(f"| {rate} | {model} | {fmt} | {mode} | {1e3 * v['step']:.0f} | {1e3 * v['compute']:.0f} | "
              f"{1e3 * v['comm']:.0f} | {1e3 * v['exposed']:.0f} | {share} | {v['step'] / bound:.2f} |")


if __name__ == "__main__":
    main()
