#!/usr/bin/python3
"""A rank that stops answering ends an adaprec-train job under ADAPREC_TIMEOUT instead of hanging it.

    stopped_rank_check.py ADAPREC_TRAIN MPIRUN [MPIRUN_ARGS...]

`mpirun -np 2 -x ADAPREC_TIMEOUT=2 adaprec-train --reducer mpi --eval-every 1 ...`: every collective of
the run is then one of the trainer's own (the plain-MPI gradient sums, the evaluations' sums, the
divergence verdicts), which waited forever before (only the Communicator's allreduce honoured the
variable). Once two evaluations are logged, rank 1 gets SIGSTOP (a swapped-out or stuck process, not a
dead one: mpirun notices a dead one by itself). Rank 0 must fail within seconds with a message naming
ADAPREC_TIMEOUT, and the job must end with a non-zero status. Exit 0 on success, 1 on failure, 77 (skip)
when there is no /proc.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

from kill_resume_check import rank_processes

TIMEOUT_S = 2
TRAIN_ARGS = ["--model", "mlp", "--synthetic", "4000", "--batch", "16", "--epochs", "1", "--reducer", "mpi",
              "--format", "fp32", "--eval-every", "1", "--eval-samples", "200", "--no-progress"]


def fail(message):
    print("FAIL: " + message, flush=True)
    sys.exit(1)


def evaluations(log_path):
    try:
        with open(log_path) as f:
            return sum('"event":"eval"' in line.replace(" ", "") for line in f)
    except OSError:
        return 0


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    if not os.path.isdir("/proc/self"):
        print("no /proc: cannot find the rank processes; skipped")
        return 77
    exe = os.path.realpath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="adaprec-stopped-rank-") as work:
        log, out = os.path.join(work, "run.jsonl"), os.path.join(work, "out.txt")
        command = sys.argv[2:] + ["-np", "2", "-x", f"ADAPREC_TIMEOUT={TIMEOUT_S}", exe] + TRAIN_ARGS + ["--log", log]
        with open(out, "w") as sink:
            proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline, stopped = time.monotonic() + 60, None
            while proc.poll() is None and time.monotonic() < deadline and stopped is None:
                if evaluations(log) >= 2:
                    ranks = rank_processes(proc.pid, exe)
                    if 1 in ranks:
                        os.kill(ranks[1], signal.SIGSTOP)
                        stopped = (ranks[1], time.monotonic())
                time.sleep(0.01)
            if stopped is None:
                fail(f"no rank 1 to stop after two evaluations (mpirun exit {proc.returncode})")
            try:
                rc = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                fail(f"the job still waited 30 s after rank 1 stopped, with ADAPREC_TIMEOUT={TIMEOUT_S}")
            waited = time.monotonic() - stopped[1]
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        with open(out) as f:
            text = f.read()
        expected = f"rank 0: error: timed out after {TIMEOUT_S} s (ADAPREC_TIMEOUT) waiting for the other ranks in"
        if rc == 0 or expected not in text:
            fail(f"mpirun exit {rc}; expected a line with '{expected}':\n{text[-3000:]}")
        line = next(l for l in text.splitlines() if expected in l)
        print(f"rank 1 stopped; the job ended {waited:.1f} s later with exit {rc}: {line.strip()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
