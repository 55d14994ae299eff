#!/usr/bin/python3
"""adaprec-train --lr-schedule: the predictor's schedule forms drive the trainer's learning rate.

    lr_schedule_check.py ADAPREC_TRAIN

Single-process runs on synthetic data (no mpirun, a few seconds):
  * --lr-schedule cosine:50:5 logs, at every evaluation, lr = --lr x lr(step) with lr(step) the form's
    documented formula (warm-up, then cosine), and its training differs from a constant rate;
  * --lr-schedule constant trains exactly as the default constant rate (the log, times aside, is equal);
  * a run stopped at step 20 with a checkpoint and resumed is bit-identical to the uninterrupted one
    (the schedule is a function of the step);
  * a malformed spec is refused with one line from the predictor's parser, and --lr-schedule together
    with --schedule/--warmup/--milestones is refused.
Exit 0 when every case passes, 1 otherwise.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

train = sys.argv[1]
# 400 synthetic images, batch 16, one rank: 25 steps per epoch, 50 in all.
BASE = ["--model", "mlp", "--synthetic", "400", "--batch", "16", "--epochs", "2", "--lr", "0.05",
        "--eval-every", "5", "--eval-samples", "100", "--seed", "3", "--no-progress"]
VOLATILE = {"wall_s", "comm_s", "exposed_comm_s", "step_s", "reduction", "reduction_ratio",
            "reduction_ratio_bound"}
failures = []


def expect(name, ok, detail=""):
    print(f"{name:78s} {'ok' if ok else 'FAIL'}", flush=True)
    if not ok:
        failures.append(name)
        print("  " + str(detail).strip().replace("\n", "\n  ")[-2000:], flush=True)


def run(args):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run([train] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
                          env=env)
    return proc.returncode, proc.stdout + proc.stderr


def evals(path):
    out = []
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if record.get("event") == "eval":
                out.append({k: v for k, v in record.items() if k not in VOLATILE})
    return out


def error_lines(text):
    """The error's lines, without CLI11's "Run with --help" hint."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("Run with --help")]


def cosine_warmup(step, total, warmup):
    if step < warmup:
        return step / warmup
    progress = min(max((step - warmup) / (total - warmup), 0.0), 1.0)
    return 0.5 * (1 + math.cos(math.pi * progress))


with tempfile.TemporaryDirectory() as scratch:
    def log(name):
        return os.path.join(scratch, name + ".jsonl")

    rc, text = run(BASE + ["--lr-schedule", "cosine:50:5", "--log", log("cosine")])
    expect("--lr-schedule cosine:50:5 runs", rc == 0, text)
    cosine = evals(log("cosine")) if rc == 0 else []
    wrong = [(r["step"], r["lr"]) for r in cosine
             if not math.isclose(r["lr"], 0.05 * cosine_warmup(r["step"], 50, 5), rel_tol=1e-12, abs_tol=1e-15)]
    expect("every evaluation logs lr = --lr x the cosine-with-warm-up formula",
           len(cosine) == 10 and not wrong, f"{len(cosine)} evaluations, wrong: {wrong}")

    rc, text = run(BASE + ["--log", log("default")])
    default = evals(log("default")) if rc == 0 else []
    rc, text = run(BASE + ["--lr-schedule", "constant", "--log", log("constant")])
    expect("--lr-schedule constant trains exactly as the default constant rate",
           rc == 0 and default and evals(log("constant")) == default, text)
    expect("the cosine schedule trains differently from the constant rate",
           default and cosine and [r["train_loss"] for r in cosine] != [r["train_loss"] for r in default])

    ckpt = os.path.join(scratch, "ckpt")
    schedule = ["--lr-schedule", "cosine:50:5", "--checkpoint", ckpt, "--checkpoint-every", "10"]
    rc1, text1 = run(BASE + schedule + ["--max-steps", "20", "--log", log("resumed")])
    rc2, text2 = run(BASE + schedule + ["--resume", "--log", log("resumed")])
    expect("stopped at step 20 and resumed: every evaluation equals the uninterrupted run's",
           rc1 == 0 and rc2 == 0 and "resumed from" in text2 and evals(log("resumed")) == cosine,
           f"exit {rc1}, {rc2}:\n{text1}\n{text2}")

    for spec, says in [("cosine:0", "TOTAL must be a number > 0"), ("linear:10", "unknown form"),
                       ("step:0.1:10,5", "steps must increase, got 10 then 5"),
                       ("file:/nonexistent/lr.csv", "cannot open /nonexistent/lr.csv")]:
        rc, text = run(BASE + ["--lr-schedule", spec])
        lines = error_lines(text)
        expect(f"--lr-schedule {spec} is refused with one line",
               rc != 0 and len(lines) == 1 and says in text and f"lr schedule '{spec}'" in text, f"exit {rc}:\n{text}")
    for extra in (["--schedule", "cosine"], ["--warmup", "1"], ["--milestones", "1"]):
        rc, text = run(BASE + ["--lr-schedule", "cosine:50"] + extra)
        lines = error_lines(text)
        expect(f"--lr-schedule with {' '.join(extra)} is refused with one line",
               rc != 0 and len(lines) == 1 and "--lr-schedule" in text and "excludes" in text, f"exit {rc}:\n{text}")

print("\n".join("FAILED: " + f for f in failures) if failures else "lr schedule: all checks passed")
sys.exit(1 if failures else 0)
