#!/usr/bin/env python3
"""Issue 22's goals from an adaprec-bench JSON (-J): per size and format, auto's share of the best
algorithm within the error budget (best time / auto time; native, i.e. MPI_Allreduce in fp32, is in
every format's budget: auto may pass any format through uncompressed), the best two-quantization algorithm against ring, the speedup over
the engine's fp32 ring as a share of the ideal 32/bits, the fastest row's own codec time (encode + decode,
the slowest rank's, from the bench's encode_us/decode_us) against that ideal time (a row can be no faster
than its codec: above 1 / goal the share-of-ideal goal is out of that run's reach), and the cost model's
error on every row; then
how many rows meet each of issue 22's goals (0.95, 0.95, 90 % / 75 % of ideal, +-25 %).
Each row's quantizations per value is the bench's "quantizations" field, which the bench takes from the
library's algorithm table (docs/algorithms.md, column Q); the default budget is the library's, 2.
Usage: auto_goals.py RESULTS.json [--max-quantizations 2]"""
import argparse
import json
from collections import defaultdict

BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "fp8s": 8, "e4m3": 8, "table8": 8, "table4": 4,
        "table2": 2, "table1": 1}


def human(size):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--max-quantizations", type=int, default=2)
    args = ap.parse_args()
    rows = json.load(open(args.results))
    by = defaultdict(dict)
    for r in rows:
        by[(r["size"], r["format"])][r["algo"]] = r
    ring32 = {size: fr.get("ring", {}).get("time") for (size, fmt), fr in by.items() if fmt == "fp32"}
    native = {size: fr["MPI_Allreduce"] for (size, fmt), fr in by.items()
              if fmt == "fp32" and "MPI_Allreduce" in fr}
    tally = defaultdict(lambda: [0, 0])  # goal -> [met, rows]

    def count(goal, met):
        tally[goal][0] += bool(met)
        tally[goal][1] += 1

    print("| size | format | auto took | auto's share of best in budget | best 2-quant / ring | best vs fp32 ring | % of ideal 32/bits | codec / ideal time | model error range |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---|")
    for (size, fmt), algos in sorted(by.items(), key=lambda kv: (kv[0][0], BITS.get(kv[0][1], 0) * -1)):
        auto = next((r for a, r in algos.items() if a.startswith("auto")), None)
        engine = {a: r for a, r in algos.items() if not a.startswith("auto") and a != "MPI_Allreduce"}
        budget = {a: r for a, r in engine.items()
                  if r["quantizations"] <= args.max_quantizations}
        if size in native:
            budget["native"] = native[size]
        best = min(budget.values(), key=lambda r: r["time"]) if budget else None
        two = [r for r in engine.values() if fmt != "fp32" and r["quantizations"] <= 2]
        best2 = min(two, key=lambda r: r["time"]) if two else None
        fastest = min(engine.values(), key=lambda r: r["time"]) if engine else None
        ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
        vs32 = ring32.get(size) / fastest["time"] if fastest and ring32.get(size) else None
        errs = [r["model_error"] for r in algos.values() if "model_error" in r]
        # Runs without --model have no model error; runs without a ring row no share of ideal.
        err_text = f"{min(errs):+.0%} .. {max(errs):+.0%}" if errs else "-"
        ideal_text = f"{vs32:.2f} | {100 * vs32 / (32 / BITS[fmt]):.0f}%" if vs32 else "- | -"
        # The fastest row's codec seconds (the slowest rank's encode + decode) over the ideal time.
        codec_us = (fastest or {}).get("encode_us", 0) + (fastest or {}).get("decode_us", 0)
        ideal_us = ring32.get(size) / (32 / BITS[fmt]) if ring32.get(size) and fmt != "fp32" else None
        codec_text = f"{codec_us / ideal_us:.2f}" if ideal_us and codec_us else "-"
        if auto and best:
            count("auto >= 0.95 x best in budget", best["time"] / auto["time"] >= 0.95)
        if best2 and "ring" in algos:
            count("best two-quantization >= 0.95 x ring", algos["ring"]["time"] / best2["time"] >= 0.95)
        if vs32 and fmt != "fp32":
            goal = 0.75 if fmt.startswith("table") else 0.90
            count(f"share of ideal 32/bits >= {goal:.0%}", vs32 / (32 / BITS[fmt]) >= goal)
        for e in errs:
            count("model error within +-25 % (rows of every algorithm)", abs(e) <= 0.25)
        print(f"| {human(size)} | {fmt} | {auto['algo'] if auto else '-'} | "
              f"{ratio(best['time'], auto['time']) if auto and best else '-'} | "
              f"{ratio(algos['ring']['time'], best2['time']) if best2 and 'ring' in algos else '-'} | "
              f"{ideal_text} | {codec_text} | {err_text} |")
    # The goals, counted over the table (each row of a goal once).
    print()
    for goal, (met, total) in tally.items():
        print(f"{goal}: {met} of {total}")


if __name__ == "__main__":
    main()
