#!/usr/bin/python3
"""ADAPREC_TIMELINE under mpirun: the preload probe (preload_probe.c) run with libadaprec-preload.so,
ADAPREC_FORMAT=fp16, ADAPREC_ALGO=ring and
ADAPREC_TIMELINE=DIR/run leaves one Chrome trace per rank, DIR/run.rank<N>.json,
closed at exit (plain JSON), holding complete events on the rank's track; tools/timeline_summary.py
prints its table for them. Then mismatch_probe.c, whose second float sum passes a different count on
every rank: the engine's agreement check fails, MPI's fatal error handler aborts the job, and the
files still hold the good call and the "allreduce error" event (they lost everything before
2026-11-29: events were written only every 4096, at exit or when a Communicator was destroyed).

usage: run_timeline.py MPIRUN PROBE MISMATCH_PROBE PRELOAD_LIB SUMMARY_SCRIPT NP [mpirun args...]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

mpirun, probe, mismatch_probe, preload, summary, np = sys.argv[1:7]
mpirun_args = sys.argv[7:]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


tmp = tempfile.mkdtemp(prefix="adaprec-timeline-mpi-")
try:
    prefix = os.path.join(tmp, "run")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADAPREC_")}
    env.update({"LD_PRELOAD": preload, "ADAPREC_FORMAT": "fp16", "ADAPREC_ALGO": "ring",
                "ADAPREC_TIMELINE": prefix})
    cmd = [mpirun] + mpirun_args + ["-np", np]
    for k in ("LD_PRELOAD", "ADAPREC_FORMAT", "ADAPREC_ALGO", "ADAPREC_TIMELINE"):
        cmd += ["-x", k]
    cmd += [probe, "0.01"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"probe with ADAPREC_TIMELINE (rc={p.returncode}) {p.stderr[-800:]}")
    files = sorted(os.listdir(tmp))
    expected = sorted(f"run.rank{r}.json" for r in range(int(np)))
    check(files == expected, f"one file per rank: {files}")
    for r in range(int(np)):
        path = f"{prefix}.rank{r}.json"
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            events = json.load(f)  # closed at exit: strict JSON
        calls = [e for e in events if e["name"] == "allreduce"]
        check(all(e["ph"] == "X" and e["pid"] == r and e["dur"] >= 0 for e in events),
              f"rank {r}: {len(events)} complete events on track {r}")
        check(any(c["args"]["format"] == "fp16" and c["args"]["algorithm"] == "ring" for c in calls),
              f"rank {r}: {len(calls)} allreduce calls, fp16 ring among them")
        check(any(e["name"] == "encode" for e in events) and any(e["name"] == "wait" for e in events),
              f"rank {r}: encode and wait spans")
    s = subprocess.run(["/usr/bin/python3", summary] + [f"{prefix}.rank{r}.json" for r in range(int(np))],
                       capture_output=True, text=True, timeout=60)
    print(s.stdout)
    lines = s.stdout.splitlines()
    check(s.returncode == 0 and len(lines) >= 3 and lines[1].split()[:2] == ["format", "algorithm"]
          and any(l.split()[0] == "fp16" for l in lines[2:]), f"timeline_summary.py table {s.stderr[-300:]}")

    # The aborted job. Each rank that reached its own error wrote it; mpirun may kill a rank before
    # that, so at least one file must show it, and each file that does holds the good call before it.
    prefix = os.path.join(tmp, "aborted")
    env["ADAPREC_TIMELINE"] = prefix
    cmd = [mpirun] + mpirun_args + ["-np", np]
    for k in ("LD_PRELOAD", "ADAPREC_FORMAT", "ADAPREC_ALGO", "ADAPREC_TIMELINE"):
        cmd += ["-x", k]
    p = subprocess.run(cmd + [mismatch_probe], env=env, capture_output=True, text=True, timeout=120)
    check(p.returncode != 0 and "erroneous call returned" not in p.stdout,
          f"counts that differ across ranks abort the job (rc={p.returncode})")
    with_error = 0
    for r in range(int(np)):
        path = f"{prefix}.rank{r}.json"
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read().rstrip()
        events = json.loads(text if text.endswith("]") else text + "\n]")  # aborted: maybe unclosed
        names = [e["name"] for e in events if e["name"] in ("allreduce", "allreduce error")]
        errors = [e for e in events if e["name"] == "allreduce error"]
        if not errors:
            continue
        with_error += 1
        a = errors[0]["args"]
        check(names == ["allreduce", "allreduce error"] and a["code"] == "mismatch" and a["count"] == 100000 + r
              and "adaprec:" in a["message"], f"rank {r}: the good call, then the error {a}")
    check(with_error >= 1, f"at least one rank's file holds the error ({with_error} of {np})")
    s = subprocess.run(["/usr/bin/python3", summary] + [f"{prefix}.rank{r}.json" for r in range(int(np))
                                                        if os.path.exists(f"{prefix}.rank{r}.json")],
                       capture_output=True, text=True, timeout=60)
    print(s.stdout)
    check(s.returncode == 0 and "failed call(s):" in s.stdout and "mismatch" in s.stdout,
          f"timeline_summary.py lists the failed calls {s.stderr[-300:]}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
