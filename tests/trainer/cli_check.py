#!/usr/bin/python3
"""What adaprec-train says and how it exits when something is wrong.

    cli_check.py ADAPREC_TRAIN MPIRUN [MPIRUN_ARGS...]

Single-process runs (no mpirun; a singleton MPI job):
  * a log that cannot be written (--log /dev/full) fails with one line naming the path and errno's text;
  * a diverging run (huge --lr) exits 3 with one "training diverged" line, not an "[internal error]";
  * numeric options out of range say what is valid (no "1.797...e308"), list options are checked;
  * a layer named twice in --format, and format lists that offer 'adaptive' where it is refused;
  * --format adaptive holds out exactly --val-images training images unless --holdout says otherwise;
    with --holdout-after-limit they come after --train-limit, and all images within it are trained on.
Under `mpirun -np 2`:
  * options that differ between ranks, a command line only one rank cannot use, --resume where the
    ranks see different checkpoint directories: every rank stops with a line saying why, no hang;
  * a fresh run into a directory holding another run's checkpoint replaces it (and says so);
  * swapping rank 0's and rank 1's checkpoint files is refused on resume, naming the file and the rank;
  * a rank file copied in from another run of the same command is refused ("different runs").
Exit 0 when every case passes, 1 otherwise.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

SMALL = ["--model", "mlp", "--synthetic", "400", "--batch", "16", "--epochs", "1", "--no-progress"]
failures = []


def run(command):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def expect(name, ok, detail):
    print(f"{name:70s} {'ok' if ok else 'FAIL'}", flush=True)
    if not ok:
        failures.append(name)
        print("  " + detail.strip().replace("\n", "\n  ")[-2000:], flush=True)


def lines(text):
    return [line for line in text.splitlines() if line.strip()]


def check_single(train):
    rc, _, err = run([train] + SMALL)
    expect("--no-progress still prints the result, one line",
           rc == 0 and len(lines(err)) == 1 and err.startswith("final test accuracy "), f"exit {rc}, stderr:\n{err}")

    rc, _, err = run([train] + SMALL + ["--log", "/dev/full"])
    expect("--log /dev/full fails with one line naming the path and ENOSPC",
           rc != 0 and len(lines(err)) == 1 and "/dev/full" in err and "No space left on device" in err,
           f"exit {rc}, stderr:\n{err}")

    # Rank 0's lines (the final test accuracy) into a full disk: exit 0 with nothing written before.
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            proc = subprocess.run([train] + SMALL, stdout=subprocess.PIPE, stderr=full, text=True, timeout=120,
                                  env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
        expect("2> /dev/full: the lost final line fails the run (exit 1)", proc.returncode == 1,
               f"exit {proc.returncode}")

    rc, _, err = run([train] + SMALL + ["--lr", "1e6"])
    expect("divergence: exit 3, one 'training diverged' line, no internal-error tag",
           rc == 3 and len(lines(err)) == 1 and "training diverged" in err and "internal error" not in err,
           f"exit {rc}, stderr:\n{err}")

    for args, valid in [(["--epochs", "0"], "integer >= 1"), (["--batch", "0"], "integer >= 1"),
                        (["--lr", "-1"], "> 0"), (["--momentum", "1"], "[0, 1)"),
                        (["--max-overhead", "5"], "[0.01, 1]"), (["--milestones", "-1"], "> 0"),
                        (["--milestones", "2,-1"], "> 0"), (["--spec-evals", "0"], "integer >= 1"),
                        (["--eval-every", "-5"], "integer >= 0"), (["--seed", "-1"], "integer >= 0")]:
        rc, out, err = run([train] + SMALL + args)
        text = out + err
        expect(f"{' '.join(args)} is refused saying what is valid",
               rc != 0 and valid in text and args[0] in text and "e+308" not in text and "1797" not in text,
               f"exit {rc}:\n{text}")

    rc, _, err = run([train] + SMALL + ["--schedule", "step", "--milestones", "3,2"])
    expect("--milestones 3,2 (not increasing) is refused", rc != 0 and "--milestones must be increasing" in err,
           f"exit {rc}:\n{err}")

    rc, _, err = run([train] + SMALL + ["--format", "fc1=table4,fc1=fp16"])
    expect("--format naming a layer twice is refused", rc != 0 and "'fc1' more than once" in err, f"exit {rc}:\n{err}")
    rc, _, err = run([train] + SMALL + ["--format", "fp16,fp8"])
    expect("--format with two formats for the unnamed layers is refused", rc != 0 and "two formats" in err,
           f"exit {rc}:\n{err}")

    # Where 'adaptive' is refused, the list of valid values must not offer it.
    for args in (["--format", "fc1=bogus"], ["--format", "fc1=adaptive"],
                 ["--format", "adaptive", "--holdout", "100", "--candidates", "fp16,nope"],
                 ["--format", "adaptive", "--holdout", "100", "--candidates", "fp16,adaptive"]):
        rc, _, err = run([train] + SMALL + args)
        listed = err.split("valid", 1)[1] if "valid" in err else ""
        expect(f"{' '.join(args)}: refused, the valid list omits 'adaptive'",
               rc != 0 and "fastest" in listed and "adaptive" not in listed.replace("--format adaptive", ""),
               f"exit {rc}:\n{err}")
    rc, _, err = run([train] + SMALL + ["--format", "adaptive", "--holdout", "100", "--candidates", "fp16,fp16"])
    expect("--candidates naming a format twice is refused", rc != 0 and "more than once" in err, f"exit {rc}:\n{err}")
    # 400 images, 100 held out, batch 16: 18 steps. A first phase that cannot fit is said, not silent;
    # one that fits says nothing.
    for extra, warned in ((["--spec-start", "10", "--spec-steps", "9"], True), (["--spec-steps", "19"], True),
                          (["--spec-steps", "4", "--spec-evals", "2"], False)):
        rc, _, err = run([train] + SMALL + ["--format", "adaptive", "--holdout", "100"] + extra)
        said = "makes no decision in this run" in err and "end of training at step 18" in err
        expect(f"adaptive {' '.join(extra)}: {'warns' if warned else 'no warning'} that no phase fits",
               rc == 0 and said == warned, f"exit {rc}:\n{err}")
    # 400 images, batch 16: 25 steps. A schedule at rate 0 before the end (TOTAL given in epochs) is
    # said; one that ends with training, or never reaches 0, is not.
    for spec, warned in (("cosine:1", True), ("poly:10:1", True), ("cosine:25", False), ("cosine:40:5", False),
                         ("step:0.1:5", False)):
        rc, _, err = run([train] + SMALL + ["--lr-schedule", spec])
        said = f"--lr-schedule {spec} reaches a rate of 0 at step {spec.split(':')[1]}, before the end of training " \
               "at step 25" in err
        expect(f"--lr-schedule {spec}: {'warns' if warned else 'no warning'} of a rate of 0 before the end",
               rc == 0 and said == warned and ("reaches a rate of 0" in err) == warned, f"exit {rc}:\n{err}")


def trained_steps(train, work, extra):
    """The last step of a short adaptive run (-1 if it failed): one epoch, so it counts the images trained on."""
    log = os.path.join(work, "holdout.jsonl")
    rc, out, err = run([train] + SMALL + ["--format", "adaptive", "--val-images", "48", "--spec-steps", "2",
                                          "--spec-evals", "1", "--phase-steps", "2", "--log", log] + extra)
    if rc != 0:
        print(f"  exit {rc}:\n{out}{err}"[-2000:], flush=True)
        return -1
    steps = [json.loads(line).get("step", -1) for line in open(log) if '"event":"eval"' in line]
    return max(steps, default=-1)


def check_holdout(train, work):
    # 400 synthetic images, batch 16: 352 trained on (22 steps) when 48 are held out, 256 (16) when 144 are.
    default, same, more = (trained_steps(train, work, extra) for extra in ([], ["--holdout", "48"], ["--holdout", "144"]))
    expect("adaptive without --holdout holds out --val-images (48) images: 22 steps",
           default == 22 and same == 22, f"steps {default} (default), {same} (--holdout 48)")
    expect("--holdout 144 trains on 256 images: 16 steps", more == 16, f"steps {more}")
    # --holdout-after-limit: the 48 images after --train-limit 352 validate; all 352 are trained on,
    # as a fixed format with that limit would (22 steps), while the default holds out 48 of the 352.
    after, inside = (trained_steps(train, work, ["--train-limit", "352"] + extra) for extra in (["--holdout-after-limit"], []))
    expect("--holdout-after-limit trains on all --train-limit images: 22 steps (19 without)",
           after == 22 and inside == 19, f"steps {after} (after the limit), {inside} (within it)")
    rc, _, err = run([train] + SMALL + ["--format", "adaptive", "--val-images", "48", "--holdout-after-limit",
                                        "--train-limit", "360"])
    expect("--holdout-after-limit without that many images after the limit is refused",
           rc != 0 and "--holdout-after-limit takes 48 validation images after --train-limit 360" in err,
           f"exit {rc}:\n{err}")


def rank_files(directory):
    return sorted(glob.glob(os.path.join(directory, "step-*.rank-*.ckpt")))


def check_checkpoints(train, mpirun, work):
    base = mpirun + ["-np", "2", train] + SMALL + ["--format", "fp32", "--max-steps", "4", "--checkpoint-every", "4"]
    first, second = os.path.join(work, "first"), os.path.join(work, "second")
    for directory in (first, second):
        rc, out, err = run(base + ["--checkpoint", directory])
        if rc != 0 or len(rank_files(directory)) != 2:
            expect("2-rank runs with checkpoints", False, f"exit {rc}:\n{out}{err}")
            return
    resume = mpirun + ["-np", "2", train] + SMALL + ["--format", "fp32", "--max-steps", "8", "--resume"]

    swapped = os.path.join(work, "swapped")
    shutil.copytree(first, swapped)
    rank0, rank1 = rank_files(swapped)
    os.rename(rank0, rank0 + ".x")
    os.rename(rank1, rank0)
    os.rename(rank0 + ".x", rank1)
    rc, out, err = run(resume + ["--checkpoint", swapped])
    text = out + err
    expect("swapped rank-0/rank-1 checkpoint files are refused on resume",
           rc != 0 and "holds the state of rank 1" in text and "holds the state of rank 0" in text
           and rank0 in text and "resumed from" not in text,
           f"exit {rc}:\n{text}")

    mixed = os.path.join(work, "mixed")
    shutil.copytree(first, mixed)
    shutil.copyfile(rank_files(second)[1], rank_files(mixed)[1])
    rc, out, err = run(resume + ["--checkpoint", mixed])
    text = out + err
    expect("a rank file from another run of the same command is refused on resume",
           rc != 0 and text.count("come from different runs") == 2 and "resumed from" not in text,
           f"exit {rc}:\n{text}")

    rc, out, err = run(resume + ["--checkpoint", first])
    expect("the untouched checkpoint still resumes", rc == 0 and "resumed from" in out + err, f"exit {rc}:\n{out}{err}")


def check_rank_agreement(train, mpirun, work):
    """Ranks given different command lines, or seeing different checkpoint directories: every rank
    stops with a line saying why. Each of these hung the job (a helper's hostile pass, 2026-12-05)."""
    base = [train] + SMALL + ["--format", "fp32"]

    def mpmd(first, second):
        return run(mpirun + ["-np", "1"] + base + first + [":", "-np", "1"] + base + second)

    rc, out, err = mpmd(["--max-steps", "8"], ["--max-steps", "4"])
    text = out + err
    expect("options that differ between ranks: every rank names them (no hang)",
           rc != 0 and "(this rank: 8)" in text and "(this rank: 4)" in text
           and text.count("the ranks were given different options: --max-steps") == 2, f"exit {rc}:\n{text}")
    rc, out, err = mpmd([], ["--epochs", "0"])
    text = out + err
    expect("a command line only rank 1 cannot use stops every rank (no hang)",
           rc != 0 and "--epochs: must be an integer >= 1" in text and "rank 1 could not use its command line" in text,
           f"exit {rc}:\n{text}")
    rc, out, err = mpmd(["--log", os.path.join(work, "a.jsonl")], ["--log", os.path.join(work, "b.jsonl")])
    expect("per-rank options (--log) may differ", rc == 0, f"exit {rc}:\n{out}{err}")

    # A checkpoint directory on each node's own disk: only rank 0's holds LATEST.
    local = [os.path.join(work, f"node{r}") for r in (0, 1)]
    for directory in local:
        os.makedirs(directory)  # rank 0 creates the directory: on a shared file system, every rank's
    steps = ["--max-steps", "4", "--checkpoint-every", "4"]
    rc, out, err = mpmd(steps + ["--checkpoint", local[0]], steps + ["--checkpoint", local[1]])
    if rc != 0:
        expect("2-rank run with node-local checkpoint directories", False, f"exit {rc}:\n{out}{err}")
        return
    rc, out, err = mpmd(["--resume", "--checkpoint", local[0]], ["--resume", "--checkpoint", local[1]])
    text = out + err
    expect("--resume where the ranks see different checkpoint directories is refused on every rank (no hang)",
           rc != 0 and text.count("every rank must see the same --checkpoint directory") == 2
           and "resumed from" not in text, f"exit {rc}:\n{text}")

    # A fresh 2-rank run into a directory holding a 1-rank checkpoint: its checkpoints were refused at
    # the first one ("written by 1 ranks"), the training up to it lost.
    reused = os.path.join(work, "reused")
    rc, out, err = run(base + steps + ["--checkpoint", reused])
    rc, out, err = run(mpirun + ["-np", "2"] + base + steps + ["--checkpoint", reused])
    text = out + err
    expect("a fresh run replaces an earlier run's checkpoint of another rank count, and says so",
           rc == 0 and "holds a checkpoint of an earlier run" in text and len(rank_files(reused)) == 2,
           f"exit {rc}:\n{text}")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    train, mpirun = os.path.realpath(sys.argv[1]), sys.argv[2:]
    work = tempfile.mkdtemp(prefix="adaprec-train-cli-")
    try:
        check_single(train)
        check_holdout(train, work)
        check_checkpoints(train, mpirun, work)
        check_rank_agreement(train, mpirun, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(failures)} case(s) failed" if failures else "all cases passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
