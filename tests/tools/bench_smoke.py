#!/usr/bin/python3
"""Smoke test of adaprec-bench over the loopback transport (3 ranks as threads, no mpirun): every
format x every algorithm at a few sizes. Checks the JSON (-J) and CSV (--csv) outputs: the columns of
docs/benchmarks.md, one baseline row per size, #wrong == 0 everywhere, self-consistent derived columns
(algbw = size/time, busbw = algbw 2(P-1)/P, speedup = baseline time / time), lossless rows exact to
fp32 rounding. Then the same with --interleave (each size's timed calls in rounds over its rows, with
two error-feedback formats, whose rows keep their own residuals): the same rows, the same checks, and every
row but auto's (whose choice may differ) with the same maxerr as the sequential run's, since each row's
result does not depend on when it was timed. Usage: bench_smoke.py ADAPREC_BENCH. Exits 77 when the
benchmark was not built."""
import csv
import json
import os
import subprocess
import sys
import tempfile

COLUMNS = ["size", "count", "format", "algo", "time", "algbw", "busbw", "wirebw", "ratio", "maxerr", "#wrong",
           "speedup", "ranks"]
RANKS = 3
ALL_FORMATS = {"fp32", "bf16", "fp16", "fp8", "fp8s", "e4m3"} | {f"table{n}" for n in range(1, 9)} \
    | {f"table{n}z" for n in range(3, 9)}


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def close(a, b, tolerance=1e-6):
    return abs(a - b) <= tolerance * max(abs(a), abs(b), 1e-30)


def main():
    bench = sys.argv[1]
    if not os.path.exists(bench):
        print(f"SKIP: {bench} not built (-Dbench=false)")
        sys.exit(77)
    sequential = run(bench, ["--formats", "all"], ALL_FORMATS)
    extra = ["table1+ef", "fp8+ef"]
    interleaved = run(bench, ["--formats", ",".join(sorted(ALL_FORMATS) + extra), "--interleave"], ALL_FORMATS | set(extra))
    key = lambda row: (row["size"], row["format"], row["algo"].split(":")[0])
    before = {key(row): row for row in sequential}
    after = {key(row): row for row in interleaved if row["format"] not in extra}
    if sorted(before) != sorted(after):
        fail(f"--interleave ran other rows: {sorted(set(before) ^ set(after))[:5]}")
    for k, row in after.items():
        if not row["algo"].startswith("auto") and row["maxerr"] != before[k]["maxerr"]:
            fail(f"{k}: maxerr {row['maxerr']} interleaved, {before[k]['maxerr']} sequential")
    print(f"PASS: {len(sequential)} rows, {len(interleaved)} interleaved, checked")


def run(bench, args, expected_formats):
    """Runs the sweep with these extra arguments, checks its rows and returns them."""
    with tempfile.TemporaryDirectory() as tmp:
        json_path = os.path.join(tmp, "rows.json")
        csv_path = os.path.join(tmp, "rows.csv")
        command = [bench, "--transport", "loopback", "--ranks", str(RANKS), "-b", "4", "-e", "1M", "-f", "64",
                   "-n", "2", "-w", "1", "--algos", "all", "--seed", "7", "-J", json_path, "--csv", csv_path] + args
        print("running:", " ".join(command), flush=True)
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        print(result.stdout[-4000:])
        if result.returncode != 0:
            fail(f"adaprec-bench exited with {result.returncode}")
        with open(json_path, encoding="utf-8") as f:
            rows = json.load(f)
        with open(csv_path, encoding="utf-8") as f:
            csv_rows = list(csv.DictReader(f))

    if len(csv_rows) != len(rows):
        fail(f"{len(csv_rows)} CSV rows vs {len(rows)} JSON rows")
    sizes = sorted({row["size"] for row in rows})
    if sizes != [4, 256, 16384, 1048576]:
        fail(f"unexpected sizes {sizes}")
    baseline = {}
    for row in rows:
        missing = [c for c in COLUMNS if c not in row]
        if missing:
            fail(f"row {row} lacks {missing}")
        if row["algo"] == "loopback_native":
            if row["size"] in baseline:
                fail(f"two baseline rows for size {row['size']}")
            baseline[row["size"]] = row["time"]
    if sorted(baseline) != sizes:
        fail("a size has no baseline row")
    formats = {row["format"] for row in rows if row["algo"] != "loopback_native"}
    if formats != expected_formats:
        fail(f"expected the {len(expected_formats)} formats {sorted(expected_formats)}, got {sorted(formats)}")
    for row in rows:
        where = f"{row['format']} {row['algo']} size {row['size']}"
        if row["ranks"] != RANKS or row["count"] * 4 != row["size"]:
            fail(f"{where}: ranks/count inconsistent")
        if row["#wrong"] != 0:
            fail(f"{where}: #wrong = {row['#wrong']}")
        if not close(row["algbw"], row["size"] / row["time"] / 1e3, 1e-4):  # time in us, GB/s
            fail(f"{where}: algbw {row['algbw']} != size/time")
        if not close(row["busbw"], row["algbw"] * 2 * (RANKS - 1) / RANKS, 1e-4):
            fail(f"{where}: busbw {row['busbw']} != algbw 2(P-1)/P")
        if not close(row["speedup"], baseline[row["size"]] / row["time"], 1e-4):
            fail(f"{where}: speedup {row['speedup']} != baseline/time")
        if row["format"] == "fp32" and (isinstance(row["maxerr"], str) or row["maxerr"] > RANKS * 2.0 ** -24):
            fail(f"{where}: fp32 maxerr {row['maxerr']} above fp32 summation rounding")
        # Flat compressed algorithms must send fewer bytes (auto may fall back to native for small sizes,
        # hierarchical on one node moves fp32 only).
        flat = row["algo"] in ("ring", "twoshot", "rabenseifner", "recursive_doubling")
        if flat and row["format"].startswith("table") and row["size"] >= 16384 and row["ratio"] <= 1.0:
            fail(f"{where}: compressed format with ratio {row['ratio']}")
    return rows


if __name__ == "__main__":
    main()
