#!/usr/bin/env python3
"""Issue 22's shared-memory goal from an adaprec-bench JSON (-J) of one node: at every size and format,
auto's time <= 1.10 x min(MPI_Allreduce fp32, the format's best engine row within the error budget);
for fp32 every row counts (lossless: any algorithm). Prints the count of cells that meet it and each
miss (size, format, what auto took, auto's time over that minimum).
Usage: shm_goals.py RESULTS.json [--max-quantizations 2] [--limit 1.10]"""
import argparse
import json
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("Usage:")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="adaprec-bench -J output of a one-node run with auto and engine rows")
    ap.add_argument("--max-quantizations", type=int, default=2,
                    help="error budget of lossy formats (default 2, the library's)")
    ap.add_argument("--limit", type=float, default=1.10, help="largest allowed ratio (default 1.10)")
    args = ap.parse_args()
    rows = defaultdict(dict)
    native = {}
    for r in json.load(open(args.results)):
        if r["algo"] == "MPI_Allreduce" and r["format"] == "fp32":
            native[r["size"]] = r["time"]
        rows[(r["size"], r["format"])][r["algo"]] = r
    cells = []
    for (size, fmt), algos in sorted(rows.items()):
        auto = [name for name in algos if name.startswith("auto")]
        if not auto or size not in native:
            continue
        candidates = [("MPI_Allreduce fp32", native[size])] + [
            (name, r["time"]) for name, r in algos.items()
            if not name.startswith("auto") and name != "MPI_Allreduce"
            and (fmt == "fp32" or r["quantizations"] <= args.max_quantizations)]
        best, fastest = min(candidates, key=lambda c: c[1])
        cells.append((size, fmt, auto[0], algos[auto[0]]["time"], best, fastest))
    misses = [c for c in cells if c[3] > args.limit * c[5]]
    print(f"auto <= {args.limit:.2f} x min(native, best in budget): {len(cells) - len(misses)} of {len(cells)}")
    for size, fmt, auto, seconds, best, fastest in misses:
        print(f"  {size} B {fmt}: {auto} {seconds:.1f} us = {seconds / fastest:.2f}x {best} {fastest:.1f} us")


if __name__ == "__main__":
    main()
