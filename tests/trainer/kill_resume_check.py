#!/usr/bin/python3
"""Kill-and-resume of adaprec-train with a real SIGKILL.

    kill_resume_check.py ADAPREC_TRAIN MPIRUN [MPIRUN_ARGS...]

1. An uninterrupted reference run: `mpirun -np 2 adaprec-train ... --checkpoint REF`.
2. The same command with --checkpoint DIR is started; once LATEST names a checkpoint, one rank process
   (a child of mpirun found through /proc, its rank read from OMPI_COMM_WORLD_RANK in its environment;
   never mpirun itself) gets SIGKILL, and mpirun tears the job down. The LATEST checkpoint is then
   checked by reading every rank's file independently of the C++ reader (magic, version, length,
   CRC-32, step). The command is re-run with --resume, killed again (the other rank this time) a few
   checkpoints later, checked again, and finally resumed to the end.
3. The final checkpoint's weights, momentum, RNG state and error-feedback residuals, and every
   evaluation in the JSON-lines log (wall and communication seconds aside), must equal the reference
   run's bit for bit; the resumed runs must report resuming from the step LATEST named.
The format is table2+ef, so the residuals must survive the kills too. Exit 0 on success, 1 on failure,
77 (skip) when there is no /proc.
"""
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib

SEED = 7
RANKS = 2
CHECKPOINT_EVERY = 10
# 2000 synthetic images, batch 16 per rank, 2 ranks: 62 steps per epoch, 124 in all.
TRAIN_ARGS = ["--model", "mlp", "--synthetic", "2000", "--batch", "16", "--epochs", "2", "--lr", "0.05",
              "--warmup", "0.5", "--schedule", "poly", "--format", "table2+ef", "--algo", "twoshot",
              "--eval-every", "20", "--eval-samples", "200", "--checkpoint-every", str(CHECKPOINT_EVERY),
              "--hash-every", "50", "--seed", str(SEED), "--no-progress"]
# Measured times, and what --reduction auto chose from them: the only fields allowed to differ.
VOLATILE = {"wall_s", "comm_s", "exposed_comm_s", "step_s", "reduction", "reduction_ratio",
            "reduction_ratio_bound"}


def fail(message):
    print("FAIL: " + message, flush=True)
    sys.exit(1)


def read_checkpoint(path):
    """Parses one rank's checkpoint file (layout in lib/trainer/checkpoint.hpp); fails on any defect."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24 or data[:8] != b"ADAPRCKP":
        fail(f"{path}: not a checkpoint ({len(data)} bytes)")
    version, payload_bytes = struct.unpack_from("<IQ", data, 8)
    if version != 3 or len(data) != 20 + payload_bytes + 4:
        fail(f"{path}: version {version}, {len(data)} bytes for a {payload_bytes}-byte payload (half-written?)")
    payload = data[20:20 + payload_bytes]
    (stored_crc,) = struct.unpack_from("<I", data, 20 + payload_bytes)
    if zlib.crc32(payload) != stored_crc:
        fail(f"{path}: CRC mismatch")
    sections, at = {}, 0
    while at < len(payload):
        (name_len,) = struct.unpack_from("<I", payload, at)
        name = payload[at + 4:at + 4 + name_len].decode()
        (n,) = struct.unpack_from("<Q", payload, at + 4 + name_len)
        start = at + 12 + name_len
        sections[name] = payload[start:start + n]
        at = start + n
    for name in ("step", "fingerprint", "identity", "parameters", "velocity", "rng", "reducer", "controller",
                 "counters", "pending"):
        if name not in sections:
            fail(f"{path}: section {name} missing")
    sections["step"] = struct.unpack("<Q", sections["step"])[0]
    return sections


def check_latest(directory):
    """LATEST and every rank's file of that generation must be complete; returns the step."""
    with open(os.path.join(directory, "LATEST")) as f:
        step, ranks = (int(x) for x in f.read().split())
    if ranks != RANKS:
        fail(f"LATEST names {ranks} ranks")
    for rank in range(RANKS):
        path = os.path.join(directory, f"step-{step:010d}.rank-{rank}.ckpt")
        if read_checkpoint(path)["step"] != step:
            fail(f"{path} does not hold step {step}")
    return step


def latest_step(directory):
    try:
        with open(os.path.join(directory, "LATEST")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def rank_processes(root_pid, exe):
    """{rank: pid} of the adaprec-train processes below root_pid (mpirun), from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, stack = {}, [root_pid]
    while stack:
        for pid in children.get(stack.pop(), []):
            stack.append(pid)
            try:
                if os.path.realpath(f"/proc/{pid}/exe") != exe:
                    continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
                found[int(env[b"OMPI_COMM_WORLD_RANK"])] = pid
            except (OSError, KeyError, ValueError):
                continue
    return found


def launch(command, stderr_path):
    with open(stderr_path, "w") as err:
        return subprocess.Popen(command, stdout=err, stderr=subprocess.STDOUT, start_new_session=True)


def run_and_kill(command, directory, exe, victim_rank, after_step, stderr_path):
    """Starts command, SIGKILLs rank victim_rank once LATEST >= after_step, waits for mpirun to end."""
    proc = launch(command, stderr_path)
    deadline = time.monotonic() + 40
    killed = None
    while proc.poll() is None and time.monotonic() < deadline:
        step = latest_step(directory)
        if step is not None and step >= after_step:
            ranks = rank_processes(proc.pid, exe)
            if victim_rank in ranks:
                os.kill(ranks[victim_rank], signal.SIGKILL)
                killed = (ranks[victim_rank], step)
                break
        time.sleep(0.005)
    if killed is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        fail(f"no rank {victim_rank} to kill after checkpoint {after_step} (run ended with {proc.returncode} "
             f"or timed out); see {stderr_path}")
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        fail("mpirun did not end within 30 s of the SIGKILL of a rank")
    if rc == 0:
        fail("mpirun reported success although a rank was killed")
    print(f"killed rank {victim_rank} (pid {killed[0]}) after LATEST named step {killed[1]}; mpirun exit {rc}",
          flush=True)


def eval_records(log_path):
    records = []
    with open(log_path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("event") == "eval":
                records.append({k: v for k, v in rec.items() if k not in VOLATILE})
    return records


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    if not os.path.isdir("/proc/self"):
        print("no /proc: cannot find the rank processes; skipped")
        return 77
    exe = os.path.realpath(sys.argv[1])
    mpirun = sys.argv[2:] + ["-np", str(RANKS)]
    print(f"seed {SEED}, {RANKS} ranks, checkpoint every {CHECKPOINT_EVERY} steps", flush=True)
    work = tempfile.mkdtemp(prefix="adaprec-kill-resume-")
    try:
        ref_dir, dir_ = os.path.join(work, "ref"), os.path.join(work, "ckpt")
        ref_log, log = os.path.join(work, "ref.jsonl"), os.path.join(work, "run.jsonl")
        base = mpirun + [exe] + TRAIN_ARGS
        ref = subprocess.run(base + ["--checkpoint", ref_dir, "--log", ref_log], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        if ref.returncode != 0:
            fail("reference run failed:\n" + ref.stdout[-3000:])
        total = check_latest(ref_dir)  # the last step is always checkpointed
        command = base + ["--checkpoint", dir_, "--log", log]

        run_and_kill(command, dir_, exe, 1, CHECKPOINT_EVERY, os.path.join(work, "run1.txt"))
        resumes = []
        step = check_latest(dir_)
        resumes.append(step)
        # A --log that is not this run's (a longer file of other records) is appended to, never cut to
        # the checkpoint's byte count (before: cut mid-line, a record glued to the cut). On a copy of
        # the mid-run checkpoint, so that the resume has steps to redo and would cut its own log.
        foreign_dir, other = os.path.join(work, "foreign"), os.path.join(work, "other.txt")
        shutil.copytree(dir_, foreign_dir)
        with open(other, "w") as f:
            f.write("".join(f"{i}\n" for i in range(1, 30001)))
        with open(other, "rb") as f:
            other_bytes = f.read()
        foreign = subprocess.run(base + ["--checkpoint", foreign_dir, "--log", other, "--resume"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        with open(other, "rb") as f:
            kept = f.read()
        if foreign.returncode != 0 or "is not the checkpointed run's (the checkpointed run logged to" not in \
                foreign.stdout or not kept.startswith(other_bytes) or len(kept) == len(other_bytes):
            fail(f"a foreign --log was cut, not appended to, or the resume failed:\n{foreign.stdout[-2000:]}")
        run_and_kill(command + ["--resume"], dir_, exe, 0, step + 3 * CHECKPOINT_EVERY, os.path.join(work, "run2.txt"))
        with open(os.path.join(work, "run2.txt")) as f:
            text = f.read()
        if f"resumed from {dir_} at step {step}\n" not in text:
            fail(f"the first resume did not report step {step}:\n{text[-2000:]}")
        step = check_latest(dir_)
        resumes.append(step)
        if not 0 < resumes[0] < resumes[1] < total:
            fail(f"the kills did not fall inside the run: LATEST steps {resumes}")
        # What a kill during a write leaves (each rank's temporary of a checkpoint it never renamed): the
        # next checkpoint of the rank removes them (they piled up over restarts); another file stays.
        leftovers = [os.path.join(dir_, f"step-{step + 1:010d}.rank-{r}.ckpt.tmp") for r in range(RANKS)]
        keep = os.path.join(dir_, "notes.tmp")
        for path in leftovers + [keep]:
            with open(path, "wb") as f:
                f.write(b"half a checkpoint")
        final = subprocess.run(command + ["--resume"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if final.returncode != 0 or f"resumed from {dir_} at step {step}\n" not in final.stdout:
            fail(f"the final resume failed or did not start at step {step}:\n{final.stdout[-3000:]}")
        if any(os.path.exists(path) for path in leftovers) or not os.path.exists(keep):
            fail(f"temporaries of killed writes left behind, or another file removed: {sorted(os.listdir(dir_))}")

        if check_latest(dir_) != total:
            fail(f"the resumed run's last checkpoint is not step {total}")
        for rank in range(RANKS):
            a = read_checkpoint(os.path.join(ref_dir, f"step-{total:010d}.rank-{rank}.ckpt"))
            b = read_checkpoint(os.path.join(dir_, f"step-{total:010d}.rank-{rank}.ckpt"))
            for name in ("parameters", "velocity", "rng", "reducer"):
                if a[name] != b[name]:
                    fail(f"rank {rank}: final {name} differ from the uninterrupted run")
            if len(a["reducer"]) == 0:
                fail(f"rank {rank}: no error-feedback residuals in the checkpoint (table2+ef)")
        ref_evals, evals = eval_records(ref_log), eval_records(log)
        if [r["step"] for r in evals] != [r["step"] for r in ref_evals]:
            fail(f"evaluated steps differ: {[r['step'] for r in evals]} vs {[r['step'] for r in ref_evals]}")
        for a, b in zip(ref_evals, evals):
            if a != b:
                fail(f"evaluation at step {a['step']} differs:\n  {a}\n  {b}")
        # Resuming the finished run changes nothing: before, it appended a second final evaluation (and
        # adaptive runs a controller summary with none of their decisions).
        with open(log, "rb") as f:
            finished_log = f.read()
        again = subprocess.run(command + ["--resume"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        with open(log, "rb") as f:
            if again.returncode != 0 or "nothing left to train" not in again.stdout or f.read() != finished_log:
                fail(f"resuming the finished run changed its log or failed:\n{again.stdout[-2000:]}")
        print(f"resumed at steps {resumes[0]} and {resumes[1]} of {total}: final weights, momentum, RNG, "
              f"residuals and all {len(evals)} logged evaluations (last test accuracy "
              f"{evals[-1]['test_accuracy']:.4f}) equal the uninterrupted run's", flush=True)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
