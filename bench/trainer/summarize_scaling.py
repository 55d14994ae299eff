#!/usr/bin/env python3
"""Issue 21's scaling table from bench/trainer/scaling_bench.sh's logs: per format and reduction mode,
images/s on 1, 2 and 4 emulated nodes (rank 0's step time: step_s of the last record over its steps,
times batch x nodes) and the scaling efficiency against 1 node's images/s x nodes. Also prints the
1-node compute time per step that adaprec-scaling-projection takes for the 8..64-node projection.

    summarize_scaling.py OUT_DIR [batch]
"""
import glob
import json
import os
import sys


def last_eval(path):
    records = [json.loads(line) for line in open(path) if line.strip()]
    evals = [r for r in records if r.get("event") == "eval"]
    return evals[-1] if evals else None


def main():
    out = sys.argv[1]
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    rows = {}
    for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
        nodes, fmt, mode = os.path.basename(path)[:-len(".jsonl")].split("-", 2)
        r = last_eval(path)
        if r is None or not r.get("step"):
            continue
        step = r["step_s"] / r["step"]
        rows[(fmt, mode, int(nodes))] = {"step": step, "ips": int(nodes) * batch / step,
                                         "exposed": r["exposed_comm_s"] / r["step"]}
    print("| format | mode | nodes | step ms | exposed comm ms | images/s | efficiency |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (fmt, mode, nodes), v in sorted(rows.items()):
        one = rows.get((fmt, mode, 1))
        eff = f"{v['ips'] / (nodes * one['ips']):.2f}" if one else "-"
        print(f"| {fmt} | {mode} | {nodes} | {v['step'] * 1e3:.1f} | {v['exposed'] * 1e3:.1f} | {v['ips']:.0f} | {eff} |")
    ones = [v["step"] for (f, m, n), v in rows.items() if n == 1]
    if ones:
        print(f"\n1-node compute per step (mean over its runs, no communication at 1 rank): "
              f"{sum(ones) / len(ones) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
