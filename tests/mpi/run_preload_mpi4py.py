#!/usr/bin/python3
"""Preload with a Python program (mpi4py): no code change, compressed float32 sums.

usage: run_preload_mpi4py.py MPIRUN PRELOAD_LIB NP [mpirun args...]
Exit 77 (skipped) when mpi4py or numpy is not installed (Debian: python3-mpi4py python3-numpy).
"""
import os
import re
import subprocess
import sys

try:
    import mpi4py  # noqa: F401
    import numpy  # noqa: F401
except ImportError:
    print("mpi4py/numpy not installed: skipped")
    sys.exit(77)

mpirun, preload, np = sys.argv[1:4]
mpirun_args = sys.argv[4:]
probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "preload_mpi4py_probe.py")
failures = []


def run(env_vars, args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADAPREC_")}
    cmd = [mpirun] + mpirun_args + ["-np", np]
    for k, v in dict(env_vars, LD_PRELOAD=preload).items():
        env[k] = v
        cmd += ["-x", k]
    p = subprocess.run(cmd + ["/usr/bin/python3", probe] + args, env=env, capture_output=True,
                       text=True, timeout=180)
    return p.returncode, p.stdout, p.stderr


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


rc, out, err = run({}, ["0"])
check(rc == 0 and "failures 0" in out, f"default environment: exact, like plain MPI (rc={rc}) {err[-500:]}")

tolerance = (1 + 2**-3) ** 2 - 1  # fp8, twoshot: 2 quantizations (docs/algorithms.md)
rc, out, err = run({"ADAPREC_FORMAT": "fp8", "ADAPREC_ALGO": "twoshot", "ADAPREC_STATS": "1"},
                   [repr(tolerance * 1.0001), "compressed"])
check(rc == 0 and "failures 0" in out, f"fp8: float32 sums compressed, within bound (rc={rc}) {err[-500:]}")
m = re.search(r"intercepted=(\d+) passed_through=(\d+) fp32_bytes=(\d+) sent_bytes=(\d+)", err)
check(m is not None and int(m.group(1)) == 2 * int(np) and int(m.group(4)) < int(m.group(3)),
      f"fp8 stats line: {m.group(0) if m else err[-300:]}")
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
