#!/usr/bin/python3
"""Plots adaprec-bench JSON output (-J FILE): busbw vs size and speedup vs size, one line per format.

    tools/plot_bench.py results.json --out plots/shm4 [--algo auto] [--title "4 ranks, shared memory"]
    tools/plot_bench.py results.json --table [--algo auto]
    tools/plot_bench.py results.json --goals
    tools/plot_bench.py results.json --matrix speedup [--algo auto]

The first writes plots/shm4-busbw.png and plots/shm4-speedup.png; --table prints the rows as a
Markdown table instead (the tables of docs/benchmarks.md); --goals prints, per size and format, the
speedup of auto and of the fastest algorithm against the issue's goals and the bandwidth-bound ideal
32/bits, and (when the run has an fp32 ring row) the fastest time against AdaPrec's own fp32 ring,
which separates the gain of compression from the baseline's choice of algorithm. --matrix KEY prints
one line per (size, algorithm) and one column per format holding that column's value (e.g. speedup),
with the baseline's time. Rows are grouped by (format, algo); --algo
keeps the rows whose algo column equals it or starts with "<it>:" (e.g. "auto" keeps "auto:ring").
The native baseline is drawn as a dashed black line in both plots. Needs Debian's python3-matplotlib.
"""
import argparse
import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

BASELINES = ("MPI_Allreduce", "loopback_native")


def load_rows(paths):
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, list):
            sys.exit(f"plot_bench: {path}: expected a JSON list of rows (adaprec-bench -J)")
        rows.extend(data)
    if not rows:
        sys.exit("plot_bench: no rows")
    return rows


def keep(row, algo):
    if row["algo"] in BASELINES or algo is None:
        return True
    return row["algo"] == algo or row["algo"].startswith(algo + ":")


def series(rows, algo, key):
    """{label: ([size...], [value...])} sorted by size; baseline rows labelled by their algo."""
    grouped = defaultdict(dict)
    for row in rows:
        if not keep(row, algo) or row.get(key) is None:
            continue
        if row["algo"] in BASELINES:
            label = f"{row['algo']} fp32"
        else:
            # "auto:ring" and "auto:twoshot" at different sizes are one line: the request is the series.
            requested = row["algo"].split(":")[0]
            label = row["format"] if algo else f"{row['format']} {requested}"
        grouped[label][row["size"]] = row[key]
    return {label: tuple(zip(*sorted(points.items()))) for label, points in grouped.items()}


def plot(rows, algo, key, ylabel, title, path, log_y):
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, (sizes, values) in sorted(series(rows, algo, key).items()):
        baseline = label.split()[0] in BASELINES
        ax.plot(sizes, values, "k--" if baseline else "-", marker=None if baseline else "o", markersize=3,
                label=label, linewidth=1.5 if baseline else 1.0)
    ax.set_xscale("log", base=2)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel("size (fp32 bytes)")
    ax.set_ylabel(ylabel)
    ranks = {row.get("ranks") for row in rows}
    nodes = {row.get("nodes") for row in rows}
    ax.set_title(f"{title} ({'/'.join(map(str, sorted(ranks)))} ranks, "
                 f"{'/'.join(map(str, sorted(nodes)))} nodes)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot_bench: wrote {path}")


def fmt(value, spec):
    """N/A for null (not checked); a string as it is ("inf": a result that was not finite)."""
    return "N/A" if value is None else value if isinstance(value, str) else format(value, spec)


def print_table(rows, algo):
    model = any(row.get("predicted") is not None for row in rows)
    columns = ["size", "format", "algo", "time(us)", "busbw", "wirebw", "ratio", "maxerr", "#wrong", "speedup"]
    if model:
        columns += ["pred(us)", "moderr"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "|".join("---:" if c not in ("format", "algo") else "---" for c in columns) + "|")
    for row in rows:
        if not keep(row, algo):
            continue
        cells = [str(row["size"]), row["format"], row["algo"], fmt(row["time"], ".0f"), fmt(row["busbw"], ".3f"),
                 fmt(row["wirebw"], ".3f"), fmt(row["ratio"], ".2f"), fmt(row.get("maxerr"), ".1e"),
                 fmt(row.get("#wrong"), "d"), fmt(row["speedup"], ".2f")]
        if model:
            error = row.get("model_error")
            cells += [fmt(row.get("predicted"), ".0f"), "N/A" if error is None else f"{100 * error:+.0f}%"]
        print("| " + " | ".join(cells) + " |")


# Speedup goals over native fp32 (issue 7, 4 nodes x 1 rank at 1 Gbit/s, 64 MiB).
GOALS = {"bf16": 1.8, "fp16": 1.8, "fp8": 3.5, "fp8s": 3.5, "e4m3": 3.5, "table4": 6, "table2": 10, "table1": 16}
BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "fp8s": 8, "e4m3": 8}


def bits_of(name):
    base = name.split("+")[0].split(":")[0]
    if base.startswith("table"):
        return int(base[5:])
    return BITS.get(base)


def print_goals(rows):
    print("| size | format | bits | ideal 32/bits | goal | speedup auto | fastest algo | speedup fastest | % of ideal "
          "| goal met | vs fp32 ring |")
    print("|---:|---|---:|---:|---:|---:|---|---:|---:|---|---:|")
    for size in sorted({row["size"] for row in rows}):
        formats = []
        for row in rows:
            if row["size"] == size and row["algo"] not in BASELINES and row["format"] not in formats:
                formats.append(row["format"])
        for name in formats:
            mine = [r for r in rows if r["size"] == size and r["format"] == name and r["algo"] not in BASELINES]
            ring32 = [r["time"] for r in rows if r["size"] == size and r["format"] == "fp32" and r["algo"] == "ring"]
            auto = [r["speedup"] for r in mine if r["algo"].startswith("auto")]
            best = max(mine, key=lambda r: r["speedup"])
            bits = bits_of(name)
            ideal = 32 / bits if bits else None
            goal = GOALS.get(name)
            cells = [str(size), name, str(bits or "?"), fmt(ideal, ".1f"), fmt(goal, ".1f"),
                     fmt(auto[0] if auto else None, ".2f"), best["algo"], fmt(best["speedup"], ".2f"),
                     "N/A" if ideal is None else f"{100 * best['speedup'] / ideal:.0f}%",
                     "-" if goal is None else ("yes" if best["speedup"] >= goal else "no"),
                     fmt(ring32[0] / best["time"] if ring32 else None, ".2f")]
            print("| " + " | ".join(cells) + " |")


def print_matrix(rows, algo, key):
    formats, lines, baseline = [], {}, {}
    for row in rows:
        if not keep(row, algo):
            continue
        if row["algo"] in BASELINES:
            baseline[row["size"]] = row["time"]
            continue
        requested = row["algo"].split(":")[0]
        if row["format"] not in formats:
            formats.append(row["format"])
        lines.setdefault((row["size"], requested), {})[row["format"]] = row
    print("| size | algo | baseline time(us) | " + " | ".join(formats) + " |")
    print("|---:|---|---:|" + "---:|" * len(formats))
    for (size, requested), cells in sorted(lines.items(), key=lambda item: item[0]):
        values = []
        for name in formats:
            row = cells.get(name)
            value = None if row is None else row.get(key)
            if value is None:
                values.append("-")
            elif isinstance(value, float):
                resolved = row["algo"].split(":")[1] if ":" in row["algo"] else ""
                values.append(format(value, ".2f" if abs(value) >= 0.01 else ".1e") +
                              (f" ({resolved})" if resolved and requested == "auto" and resolved != "twoshot" else ""))
            else:
                values.append(str(value))
        print(f"| {size} | {requested} | {fmt(baseline.get(size), '.0f')} | " + " | ".join(values) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="+", help="adaprec-bench -J output file(s)")
    parser.add_argument("--out", help="output path prefix (PREFIX-busbw.png, PREFIX-speedup.png)")
    parser.add_argument("--table", action="store_true", help="print a Markdown table instead of plotting")
    parser.add_argument("--goals", action="store_true", help="print speedups against the goals and 32/bits")
    parser.add_argument("--matrix", metavar="KEY", help="print KEY (e.g. speedup) as a size x format table")
    parser.add_argument("--algo", help="only rows of this algorithm (e.g. auto, ring); default: all")
    parser.add_argument("--title", default="adaprec-bench", help="plot title")
    args = parser.parse_args()
    rows = load_rows(args.json)
    if args.table:
        print_table(rows, args.algo)
        return
    if args.goals:
        print_goals(rows)
        return
    if args.matrix:
        print_matrix(rows, args.algo, args.matrix)
        return
    if not args.out:
        parser.error("--out is required unless --table is given")
    plot(rows, args.algo, "busbw", "busbw (GB/s, on fp32 bytes)", f"{args.title}: bus bandwidth",
         f"{args.out}-busbw.png", log_y=True)
    plot(rows, args.algo, "speedup", "speedup over the native fp32 baseline", f"{args.title}: speedup",
         f"{args.out}-speedup.png", log_y=True)


if __name__ == "__main__":
    main()
