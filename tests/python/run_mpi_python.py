"""Runs Python checks under mpirun for meson: exits 77 (skipped) when python3-mpi4py (or torch, when
asked for) is missing, otherwise with the program's status.

Usage: run_mpi_python.py [--needs-torch] [--before PROGRAM ARGS... --] MPIRUN NP SCRIPT ARGS... -- MPIRUN_ARGS...
--before runs PROGRAM under mpirun with the same NP first (the C++ reference)."""

import importlib.util
import os
import subprocess
import sys
import tempfile

args = sys.argv[1:]
needs = ["mpi4py", "numpy"]
if args and args[0] == "--needs-torch":
    needs.append("torch")
    args = args[1:]
before = []
if args and args[0] == "--before":
    end = args.index("--")
    before, args = args[1:end], args[end + 1:]
end = args.index("--")
(mpirun, np, script, *script_args), mpirun_args = args[:end], args[end + 1:]
missing = [m for m in needs if importlib.util.find_spec(m) is None]
if missing:
    print(f"SKIP: python3 module(s) {', '.join(missing)} missing")
    sys.exit(77)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           PYTHONUNBUFFERED="1")
with tempfile.TemporaryDirectory() as scratch:
    launch = [mpirun, *mpirun_args, "-np", np]
    if before:
        status = subprocess.run(launch + before + [scratch], env=env, timeout=300).returncode
        if status != 0:
            sys.exit(status)
    command = launch + [sys.executable, script, *script_args]
    if before:
        command.append(scratch)
    sys.exit(subprocess.run(command, env=env, timeout=600).returncode)
