#!/usr/bin/python3
"""An invalid ADAPREC_* environment under the C API called directly (capi_env_probe.c, no preload).

usage: run_capi_env.py MPIRUN PROBE NP [mpirun args...]

The ranks agree at their first call on a communicator, whichever call it is (an int sum passed
through to MPI, or a float sum): the lowest rank with an invalid value prints one line and the job
stops at once, also when only ranks other than 0 hold it (it used to take 30 s: those ranks waited for
rank 0's report, which never came). Valid settings run through with exact sums.
"""
import os
import subprocess
import sys
import time

mpirun, probe, np = sys.argv[1:4]
mpirun_args = sys.argv[4:]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(first, rest, order):
    """Rank 0 with the variables `first`, ranks 1.. with `rest` (MPMD app contexts)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADAPREC_")}
    cmd = [mpirun] + mpirun_args
    contexts = ((1, first), (int(np) - 1, rest)) if int(np) > 1 else ((1, first),)
    for count, names in contexts:
        cmd += ["-np", str(count)]
        for k, v in names.items():
            cmd += ["-x", f"{k}={v}"]
        cmd += [probe, order, ":"]
    started = time.monotonic()
    try:
        p = subprocess.run(cmd[:-1], env=env, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        return None, "hung (killed after 90 s)", "", 90.0
    return p.returncode, p.stderr, p.stdout, time.monotonic() - started


line = "ADAPREC_FORMAT='fp7' is invalid; valid values:"
# "threads": four threads make their first calls on four communicators at once; still one line.
for order in ("int-first", "float-first", "threads"):
    rc, err, out, _ = run({"ADAPREC_FORMAT": "fp32"}, {"ADAPREC_FORMAT": "fp32"}, order)
    check(rc == 0 and "sum ok" in out, f"{order}, valid everywhere: exact sums (rc={rc}) {err.strip()[-300:]}")
    cases = [({"ADAPREC_FORMAT": "fp7"}, {"ADAPREC_FORMAT": "fp7"}, "every rank")]
    if int(np) > 1:
        cases += [({"ADAPREC_FORMAT": "fp7"}, {"ADAPREC_FORMAT": "fp32"}, "rank 0 only"),
                  ({"ADAPREC_FORMAT": "fp32"}, {"ADAPREC_FORMAT": "fp7"}, "ranks 1.. only")]
    for first, rest, who in cases:
        rc, err, out, seconds = run(first, rest, order)
        check(rc is not None and rc != 0 and err.count(line) == 1 and "sum ok" not in out and seconds < 20,
              f"{order}, invalid on {who}: one line, the job stops in {seconds:.1f} s (< 20; rc={rc}): "
              f"{err.strip()[:300]}")

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
