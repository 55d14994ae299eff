#!/usr/bin/python3
"""adaprec.controller in a loop that is not PyTorch's: imported with torch and mpi4py unavailable, it
runs a whole phase (pruning, branches, decision, record) and reads the library's schedules.

    ADAPREC_LIBRARY=build/lib/libadaprec.so PYTHONPATH=python controller_check.py

Exit 0 when every check passes, 1 otherwise.
"""
import math
import sys

# A JAX, TensorFlow or numpy user may have neither: importing either now raises ImportError.
sys.modules["torch"] = None
sys.modules["mpi4py"] = None

import adaprec  # noqa: E402
from adaprec.controller import (  # noqa: E402
    Controller, controller_default, default_candidates, schedule_rates, schedule_zero_from)

failures = []


def check(ok, what):
    print(f"{what:80s} {'ok' if ok else 'FAIL'}", flush=True)
    if not ok:
        failures.append(what)


# fp16 is not shown 10 % faster than fp32 (it stands in for fp32 otherwise); table4 and table2 are.
# Identical branches, so the faster gains more per second; table2 is pruned as not faster than table4.
controller = Controller(["fp32", "fp16", "table4", "table2"], total_steps=2000, validation_images=1000,
                        max_overhead=1)
controller.begin_phase(100)
controller.set_learning_rates(schedule_rates("cosine:2000", 100, 1901))
for name, seconds in (("fp32", 0.100), ("fp16", 0.098), ("table4", 0.060), ("table2", 0.059)):
    controller.report_step_samples(name, [seconds, seconds * 1.01, seconds * 0.99])
speculated = [c for c in controller.candidates if controller.should_speculate(c)]
check(speculated == ["fp32", "table4"], f"speculated {speculated}: fp32 and table4")
check(controller.pruning_reason("table2") == "not_faster", "table2 pruned as not faster than table4")
for name, seconds in (("fp32", 0.100), ("table4", 0.060)):
    for k, step in enumerate(range(100, 121, 5)):
        controller.report(name, step, 0.60 + 0.02 * math.sqrt(k), seconds)
decision = controller.decide()
check(decision["format"] == "table4", f"decision {decision['format']}: table4, as fast again and learning alike")
check(decision["continuation_steps"] >= 1 and 0.6 <= decision["predicted_mean"] <= 1,
      f"decision fields {decision}")
record = controller.record()
check(record.get("event") == "decision" and record.get("choice") == "table4", "record: the decision line")
controller.close()

# The branch order, as adaprec-train's (1 Gbit/s): table2 (the fastest) first, then most bits first with
# fp16 before fp32. table2 and fp16 learn alike per step, so fp8s, bounded by fp16's curve at its speed,
# is not run, and fp32 is stood in for.
four = ["fp32", "fp16", "fp8s", "table2"]
controller = Controller(four, total_steps=400, validation_images=1000)
controller.begin_phase(0)
steps = {"fp32": 0.100, "fp16": 0.073, "fp8s": 0.060, "table2": 0.053}
for name in four:
    controller.report_step_samples(name, [steps[name]] * 3)
order = sorted(four, key=controller.branch_rank)
check(order == ["table2", "fp16", "fp32", "fp8s"], f"branch order {order}")
for name in ("table2", "fp16"):
    check(controller.should_speculate(name), f"{name} speculated")
    for step in range(0, 31, 10):
        controller.report(name, step, 0.1 + 0.8 * (1 - math.exp(-step / 400)), steps[name])
check(not controller.should_speculate("fp32") and controller.pruning_reason("fp32") == "stood_in", "fp32 stood in")
check(not controller.should_speculate("fp8s") and controller.pruning_reason("fp8s") == "bounded",
      "fp8s bounded by fp16's branch")
check(controller.decide()["format"] == "table2", "table2 chosen")
check(controller.record()["candidates"][2].get("bounded_by") == "fp16", "record: fp8s bounded_by fp16")
controller.close()

# total_steps in epochs (30) with phases at optimizer steps: refused, not decided on a collapsed horizon.
controller = Controller(["fp32", "fp16"], total_steps=30)
try:
    controller.begin_phase(100)
    check(False, "a phase past total_steps accepted")
except adaprec.InvalidArgumentError as error:
    check("at or past the end of training (total steps 30)" in str(error), "a phase past total_steps refused")
controller.close()

check(schedule_rates("poly:10:1", 0, 3) == [1.0, 0.9, 0.8], "schedule_rates: poly:10:1 at steps 0..2")
try:
    schedule_rates("cosine:0", 0, 1)
    check(False, "schedule_rates: cosine:0 accepted")
except adaprec.InvalidArgumentError as error:
    check("TOTAL must be a number > 0" in str(error), "schedule_rates: cosine:0 refused with one line")
check(schedule_zero_from("cosine:2000") == 2000 and schedule_zero_from("step:0.5:10") == math.inf,
      "schedule_zero_from: cosine:2000 at 2000, step: never")
try:
    schedule_zero_from("poly:10:1\0x")
    check(False, "schedule_zero_from: a spec with a NUL accepted")
except adaprec.InvalidArgumentError as error:
    check("NUL" in str(error), "schedule_zero_from: a NUL refused")

# The library's defaults, which AdaptivePrecision takes for its arguments left at None.
candidates = default_candidates()
check(isinstance(candidates, list) and "fp32" in candidates and len(set(candidates)) == len(candidates),
      f"default_candidates: {candidates}")
spec_steps, eval_points = controller_default("speculative_steps"), controller_default("eval_points")
probe_steps = controller_default("probe_steps")
check(isinstance(spec_steps, int) and isinstance(eval_points, int) and 1 <= probe_steps <= spec_steps // eval_points,
      f"controller_default: {spec_steps} steps, {eval_points} evaluations, {probe_steps} probe steps")
check(controller_default("contested_probe_steps") >= probe_steps, "controller_default: contested >= probe steps")
defaults = Controller(candidates)
check(controller_default("continuation_steps") == defaults.continuation_steps
      and controller_default("max_overhead") == defaults.max_overhead,
      "controller_default: the options' defaults as Controller takes them")
defaults.close()
try:
    controller_default("spec_steps")
    check(False, "controller_default: an unknown name accepted")
except adaprec.InvalidArgumentError as error:
    check("no controller default named 'spec_steps'" in str(error) and "speculative_steps" in str(error),
          "controller_default: an unknown name refused, the valid ones listed")

check("torch" not in sys.modules or sys.modules["torch"] is None, "torch was not imported")
print(f"controller_check: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
