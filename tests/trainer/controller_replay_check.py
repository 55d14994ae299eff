"""adaprec-train and the controller's C API make the same decision: a short adaptive run (mpirun -np
2, fixed phases), then every "event":"decision" record of its log replayed through
AdaPrec_Controller* (ctypes, adaprec._capi) from the record's own curves and step times must give
the logged choice, predicted mean, sd, score and continuation bit for bit, and a record with the same
fields. Exits 77 (skipped) without the Fashion-MNIST data.

With --lr-schedule SPEC the run trains under that schedule (adaprec-train --lr-schedule), every
record must say the predictor used it ("lr_schedule": "points:N", N rates from the phase's start to
the end of training), and the replay passes the same rates (the peak times
AdaPrec_ControllerScheduleRates, the library's parser) through AdaPrec_ControllerSetLearningRates.

With --prune the run prunes (docs/trainer.md, "Pruning"; with --min-speedup 0, so that on shared
memory only candidates measured slower than fp32 are pruned as not faster and most phases still
decide): the replay reports every candidate's step time, asks AdaPrec_ControllerShouldSpeculate in
the record's speculation_order, which must answer as adaprec-train pruned, and reports only the
speculated branches. Without it the run speculates every candidate (--no-prune).

Usage: controller_replay_check.py [--lr-schedule SPEC] [--prune] ADAPREC_TRAIN MPIRUN [MPIRUN ARGS...]
(PYTHONPATH=python/ and ADAPREC_LIBRARY=libadaprec.so, as meson sets them.)"""

import ctypes
import json
import os
import subprocess
import sys
import tempfile

from adaprec import _capi

arguments = sys.argv[1:]
schedule = None
if arguments[:1] == ["--lr-schedule"]:
    schedule, arguments = arguments[1], arguments[2:]
prune = arguments[:1] == ["--prune"]
if prune:
    arguments = arguments[1:]
train, mpirun, *mpirun_args = arguments
if not os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
    print("SKIP: Fashion-MNIST (dataset-fashion-mnist) missing")
    sys.exit(77)
lib = _capi.controller_lib()
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


def ok(code):
    if code != _capi.OK:
        raise RuntimeError(lib.AdaPrec_ControllerLastError().decode())


with tempfile.TemporaryDirectory() as scratch:
    log = os.path.join(scratch, "run.jsonl")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    subprocess.run([mpirun, *mpirun_args, "-np", "2", train, "--model", "mlp", "--format", "adaptive",
                    "--batch", "32", "--lr", "0.01", "--epochs", "1", "--train-limit", "6000",
                    "--eval-samples", "500", "--spec-steps", "10", "--spec-evals", "2", "--phase-steps", "20",
                    "--max-overhead", "1", "--val-images", "500", "--holdout", "2000", "--seed", "7", "--log", log, "--no-progress"]
                   + (["--min-speedup", "0"] if prune else ["--no-prune"])
                   + (["--lr-schedule", schedule] if schedule else []),
                   check=True, env=env)
    records = [json.loads(line) for line in open(log) if '"event":"decision"' in line]
    skipped = [json.loads(line) for line in open(log) if '"event":"speculation_skipped"' in line]
    # The step training ends at (the final evaluation's): predictions are capped there.
    total_steps = max(json.loads(line)["step"] for line in open(log) if '"event":"eval"' in line)

# Pruning may skip a phase where every candidate measured slower than fp32 (shared memory).
check(len(records) + (len(skipped) if prune else 0) >= 2, f"only {len(records)} decisions logged")
check(prune or not skipped, f"{len(skipped)} phases skipped without pruning")
for r in records:
    names = [c["name"] for c in r["candidates"]]
    options = _capi.ControllerOptions()
    lib.AdaPrec_ControllerDefaultOptions(ctypes.byref(options))
    options.continuationSteps = r["continuation_steps"]
    options.totalSteps = total_steps
    options.maxOverhead = r["max_overhead"]  # 1: continuations do not depend on branch seconds
    options.validationImages = r["validation_images"]
    options.rule = _capi.RULE_RISK if r["rule"] == "risk" else _capi.RULE_GAIN
    options.minSpeedup = r.get("min_speedup", options.minSpeedup)
    handle = ctypes.c_void_p()
    ok(lib.AdaPrec_ControllerCreate((ctypes.c_char_p * len(names))(*[n.encode() for n in names]), len(names),
                                    ctypes.byref(options), ctypes.byref(handle)))
    ok(lib.AdaPrec_ControllerBeginPhase(handle, r["step"]))
    if schedule:  # before any branch: pruning's verdicts fit the curves under the schedule too
        # adaprec-train's rates: the peak (--lr 0.01 x global batch 64 / --lr-batch, 0: per-rank batch 32)
        # times lr(step) / peak of the schedule, from the phase's start to the end of training.
        check(r["lr_schedule"].startswith("points:"), f"step {r['step']}: lr_schedule {r['lr_schedule']}")
        count = int(r["lr_schedule"].split(":")[1]) if r["lr_schedule"].startswith("points:") else 0
        relative = (ctypes.c_double * max(count, 1))()
        ok(lib.AdaPrec_ControllerScheduleRates(schedule.encode(), r["step"], count, relative))
        rates = (ctypes.c_double * max(count, 1))(*[0.01 * 64 / 32 * x for x in relative[:count]])
        ok(lib.AdaPrec_ControllerSetLearningRates(handle, rates, count))

    def report_branch(c):
        for i, (step, accuracy) in enumerate(c["curve"]):
            ok(lib.AdaPrec_ControllerReportPoint(handle, c["name"].encode(), step, accuracy, c["step_s"] if i else 0.0))

    check(prune == ("speculation_order" in r), f"step {r['step']}: speculation_order present: {not prune}")
    if "speculation_order" in r:
        by_name = {c["name"]: c for c in r["candidates"]}
        for c in r["candidates"]:  # the samples the verdicts weighed (their median is pruning_step_s)
            samples = c["pruning_samples_s"]
            ok(lib.AdaPrec_ControllerReportStepSamples(handle, c["name"].encode(),
                                                       (ctypes.c_double * len(samples))(*samples), len(samples)))
        for name in r["speculation_order"]:
            speculate = ctypes.c_int(-1)
            ok(lib.AdaPrec_ControllerShouldSpeculate(handle, name.encode(), ctypes.byref(speculate)))
            check(bool(speculate.value) == ("pruned" not in by_name[name]),
                  f"step {r['step']}, {name}: C API speculate={speculate.value}, adaprec-train pruned "
                  f"{by_name[name].get('pruned')}")
            if speculate.value:
                report_branch(by_name[name])
    else:
        for c in r["candidates"]:
            report_branch(c)
    d = _capi.Decision()
    ok(lib.AdaPrec_ControllerDecide(handle, ctypes.byref(d)))
    size = ctypes.c_size_t()
    ok(lib.AdaPrec_ControllerDecisionRecord(handle, None, 0, ctypes.byref(size)))
    text = ctypes.create_string_buffer(size.value + 1)
    ok(lib.AdaPrec_ControllerDecisionRecord(handle, text, size.value + 1, ctypes.byref(size)))
    replay = json.loads(text.value.decode())
    ok(lib.AdaPrec_ControllerFree(handle))
    at = f"decision at step {r['step']}"
    check(d.format.decode() == r["choice"], f"{at}: C API chose {d.format.decode()}, adaprec-train {r['choice']}")
    check(d.continuationSteps == r["continuation_steps"], f"{at}: continuation {d.continuationSteps}")
    check(set(replay) == set(r), f"{at}: record fields differ: {sorted(set(replay) ^ set(r))}")
    check(replay.get("lr_schedule") == r.get("lr_schedule"),
          f"{at}: lr_schedule {replay.get('lr_schedule')} != adaprec-train's {r.get('lr_schedule')}")
    check(r.get("speculation_order") == replay.get("speculation_order"), f"{at}: speculation order differs")
    for logged, again in zip(r["candidates"], replay["candidates"]):
        fields = ("pruned", "step_s", "pruning_step_s") if "pruned" in logged else (
            "curve", "step_s", "predicted_mean", "predicted_sd", "predicted_step", "gain", "score", "p_beats_baseline")
        if prune:
            check(set(logged) - {"branch_s"} == set(again) - {"branch_s"}, f"{at}, {logged['name']}: fields differ")
        for field in fields:
            check(logged.get(field) == again.get(field),
                  f"{at}, {logged['name']}: {field} {again.get(field)} != adaprec-train's {logged.get(field)}")
pruned = sum("pruned" in c for r in records for c in r["candidates"])
print("\n".join(failures) if failures else
      f"controller replay: {len(records)} decisions identical ({pruned} pruned candidates, {len(skipped)} phases skipped)")
sys.exit(1 if failures else 0)
