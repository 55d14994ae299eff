#!/usr/bin/python3
"""adaprec-train --reduction: overlap is bit-identical to sequential, double buffering is what it says.

    reduction_modes_check.py ADAPREC_TRAIN MPIRUN [MPIRUN_ARGS...]

4 ranks under mpirun on synthetic data (the MLP, 3 layers; a few seconds per run):
  * overlap == sequential, bit for bit (the final checkpoint's weights, momentum and error-feedback
    residuals, and every logged number but the times), for fp32, fp16, table4+ef and a per-layer mix,
    with one call per layer and with fused buckets: the same calls, made while backward goes on; and
    auto (the default: the two alternated step by step, then the faster) == sequential too, its log
    naming its choice and the measured ratio, rank 0 printing it once; and it decides under
    --format adaptive too;
  * double buffering trains (every rank identical: the trainer's own hash check passes), differs from
    sequential (its updates are one step stale), sends the same bytes, and its final loss is finite;
  * a double-buffered run stopped at step 30 (a checkpoint with the last step's reduced gradients still
    waiting for their update) and resumed ends bit-identical to the uninterrupted run; its checkpoint
    continued with --reduction sequential is refused in one line;
  * --reduction with an unknown mode and --double-buffering together with --reduction are refused.
Exit 0 when every case passes, 1 otherwise.
"""
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kill_resume_check import read_checkpoint  # noqa: E402  (the independent checkpoint reader)

train, mpirun, mpirun_args = sys.argv[1], sys.argv[2], sys.argv[3:]
RANKS = 4
# 2560 synthetic images, batch 16 per rank, 4 ranks: 40 steps per epoch, 60 steps in all. At --lr 0.01
# (peak 0.04) sequential still converges but the one-step-stale updates of double buffering diverge
# (fp32 too: stale gradients with momentum 0.9 lower the stable rate, docs/trainer.md); 0.003 trains both.
BASE = ["--model", "mlp", "--synthetic", "2560", "--batch", "16", "--epochs", "2", "--max-steps", "60",
        "--lr", "0.003", "--eval-every", "20", "--eval-samples", "200", "--seed", "5", "--no-progress",
        "--reducer", "adaprec", "--algo", "twoshot", "--checkpoint-every", "30"]
VOLATILE = {"wall_s", "comm_s", "exposed_comm_s", "step_s", "reduction", "reduction_ratio",
            "reduction_ratio_bound"}
STATE = ("parameters", "velocity", "reducer", "pending")
failures = []


def expect(name, ok, detail=""):
    print(f"{name:86s} {'ok' if ok else 'FAIL'}", flush=True)
    if not ok:
        failures.append(name)
        print("  " + str(detail).strip().replace("\n", "\n  ")[-2000:], flush=True)


def run(args, ranks=RANKS):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run([mpirun] + mpirun_args + ["-np", str(ranks), train] + args, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300, env=env)
    return proc.returncode, proc.stdout


def evals(path):
    with open(path) as f:
        return [{k: v for k, v in r.items() if k not in VOLATILE}
                for r in map(json.loads, f) if r.get("event") == "eval"]


def final_state(directory):
    """Every rank's final checkpoint sections that must be bit-identical, by rank."""
    with open(os.path.join(directory, "LATEST")) as f:
        step = int(f.read().split()[0])
    states = []
    for rank in range(RANKS):
        path = os.path.join(directory, f"step-{step:010d}.rank-{rank}.ckpt")  # CheckpointDirectory::rankFile
        sections = read_checkpoint(path)
        states.append({k: bytes(sections[k]) for k in STATE})
    return step, states


def auto_choice(out, log):
    """A run's last evaluation record (its `reduction` and `reduction_ratio`) and the lines where rank 0
    printed auto's choice."""
    with open(log) as f:
        last = [r for r in map(json.loads, f) if r.get("event") == "eval"][-1]
    return last, [line for line in out.splitlines() if "--reduction auto:" in line]


def train_run(work, name, extra):
    log = os.path.join(work, name + ".jsonl")
    ckpt = os.path.join(work, name)
    code, out = run(BASE + extra + ["--log", log, "--checkpoint", ckpt])
    return code, out, log, ckpt


def main():
    work = tempfile.mkdtemp(prefix="adaprec-reduction-")
    try:
        # Overlap against sequential: per layer (3 calls per step) and fused (1 call, or 2 with a mix).
        for fmt, bucketing in (("fp32", "layer"), ("fp16", "fused"), ("table4+ef", "layer"),
                               ("table4+ef", "fused"), ("fc1=table2+ef,fc2=fp8s+ef,fp16", "fused")):
            results = {}
            outputs = {}
            for mode in ("sequential", "overlap", "auto"):
                name = f"{mode}-{fmt}-{bucketing}".replace("=", "_").replace(",", "_").replace("+", "p")
                code, out, log, ckpt = train_run(work, name, ["--format", fmt, "--bucketing", bucketing,
                                                              "--reduction", mode])
                if code != 0:
                    expect(f"{mode} {fmt} {bucketing} runs", False, out)
                    break
                results[mode] = (evals(log), final_state(ckpt))
                outputs[mode] = (out, log)
            if len(results) == 3:
                for mode in ("overlap", "auto"):
                    expect(f"{mode} == sequential bit for bit: {fmt}, {bucketing}",
                           results[mode] == results["sequential"],
                           f"sequential {results['sequential'][0][-1]}\n{mode} {results[mode][0][-1]}")
                last, said = auto_choice(*outputs["auto"])
                # The least gain overlap must be shown, as rank 0 states it (ReductionTuner::kMinOverlapGain).
                below = re.search(r"overlap only below ([0-9.]+)\)", said[0]) if len(said) == 1 else None
                expect(f"auto names its choice and ratio in the log and once on stderr: {fmt}, {bucketing}",
                       last.get("reduction") in ("auto:overlap", "auto:sequential")
                       and isinstance(last.get("reduction_ratio"), float) and len(said) == 1
                       and isinstance(last.get("reduction_ratio_bound"), float)
                       and last["reduction_ratio_bound"] >= last["reduction_ratio"]
                       and last["reduction"].split(":")[1] in said[0]
                       and below is not None
                       and (last["reduction"] == "auto:overlap") == (last["reduction_ratio_bound"] < float(below.group(1))),
                       f"{last}\n{said}")

        # auto under the controller: its hook pauses the tuner around every step's call, and until
        # 2026-12-07 each pause dropped the pending pair, so an adaptive run never decided (sequential
        # throughout, its log saying "auto"). The pairs (2 warm-up steps, then 8 x 6 steps) come from the
        # first continuation (steps 4-54), the hook's pause around every step among them.
        code, out, log, _ = train_run(work, "auto-adaptive", [
            "--format", "adaptive", "--candidates", "fp32,table4+ef", "--no-prune", "--spec-steps", "4",
            "--spec-evals", "2", "--phase-steps", "50", "--max-overhead", "1", "--val-images", "200",
            "--holdout", "200"])
        last, said = auto_choice(out, log) if code == 0 else ({}, [])
        expect("auto decides under --format adaptive (a phase's pause keeps no pair from forming)",
               code == 0 and last.get("reduction") in ("auto:overlap", "auto:sequential") and len(said) == 1,
               f"{last}\n{out}")

        # Double buffering: trains, stale updates, same bytes, every rank identical (the trainer checks).
        code_s, out_s, log_s, ckpt_s = train_run(work, "db-seq", ["--format", "table4+ef", "--reduction", "sequential"])
        code_d, out_d, log_d, ckpt_d = train_run(work, "db", ["--format", "table4+ef", "--double-buffering"])
        expect("double buffering runs (the trainer's cross-rank hash check included)", code_d == 0 and code_s == 0,
               out_d + out_s)
        if code_d == 0 and code_s == 0:
            seq, dbl = evals(log_s), evals(log_d)
            expect("double buffering differs from sequential (one-step-stale updates)",
                   final_state(ckpt_d)[1][0]["parameters"] != final_state(ckpt_s)[1][0]["parameters"])
            expect("double buffering sends the bytes sequential sends",
                   [r["bytes_sent"] for r in dbl] == [r["bytes_sent"] for r in seq],
                   f"{[r['bytes_sent'] for r in dbl]} vs {[r['bytes_sent'] for r in seq]}")
            expect("double buffering's losses are finite and it learns",
                   all(abs(r["test_loss"]) < 1e3 for r in dbl) and dbl[-1]["test_accuracy"] > 0.5,
                   dbl[-1])
            step, states = final_state(ckpt_d)
            expect("double buffering's checkpoint holds the waiting reduced gradients",
                   all(len(s["pending"]) == len(s["parameters"]) > 0 for s in states))

            # Stop at 30 (the checkpoint there has gradients waiting), resume to 60.
            resumed_log = os.path.join(work, "resumed.jsonl")
            resumed = os.path.join(work, "resumed")
            args = BASE + ["--format", "table4+ef", "--double-buffering", "--log", resumed_log, "--checkpoint", resumed]
            first = run([a if a != "60" else "30" for a in args])
            second = run(args + ["--resume"])
            expect("double-buffered run stopped at 30 and resumed runs", first[0] == 0 and second[0] == 0,
                   first[1] + second[1])
            if first[0] == 0 and second[0] == 0:
                # The stopped run evaluates at its end (step 30) and restarts its training-loss window
                # there: compare the state and the last evaluation's test figures and bytes.
                same_state = final_state(resumed) == final_state(ckpt_d)
                keys = ("step", "test_loss", "test_accuracy", "bytes_sent", "bytes_fp32")
                last_resumed = {k: evals(resumed_log)[-1][k] for k in keys}
                last = {k: dbl[-1][k] for k in keys}
                expect("resumed double-buffered run bit-identical to the uninterrupted one",
                       same_state and last_resumed == last,
                       f"state equal: {same_state}\nresumed {last_resumed}\nuninterrupted {last}")
                refused = run([a for a in args if a != "--double-buffering"] + ["--resume", "--reduction", "sequential"])
            else:
                refused = (0, "")
            refusal = [line for line in refused[1].splitlines() if "double-buffering" in line and "error" in line]
            expect("a double-buffered checkpoint continued sequentially is refused in one line",
                   refused[0] != 0 and len(refusal) >= 1, refused[1])

        # Option errors.
        code, out = run(BASE + ["--reduction", "eventually"], ranks=1)
        expect("--reduction eventually is refused", code != 0 and "eventually" in out, out)
        code, out = run(BASE + ["--reduction", "overlap", "--double-buffering"], ranks=1)
        expect("--double-buffering with --reduction is refused", code != 0 and "excludes" in out, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"reduction modes: {len(failures)} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
