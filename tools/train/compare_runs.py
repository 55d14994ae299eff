#!/usr/bin/python3
"""Compare adaprec-train runs from their JSON-lines logs, the first being the reference (fp32): one row per
run with the final test accuracy, the wall time, the reference's test accuracy at that wall time (its
last evaluation at or before it: accuracy at equal time), the wall time at which the run first reached the
reference's final accuracy (its first evaluation at or above it; evaluations happen every --eval-every
steps, so this is an upper bound on the moment), the bytes sent by all ranks (speculative branches
included) and their ratio to the reference's, and the controller's
decisions (step: choice). tools/demo prints this table.

    tools/train/compare_runs.py fp32.jsonl adaptive.jsonl
"""
import argparse

import training_log


def read_log(path):
    return training_log.read_log(path, "compare_runs.py")


label = training_log.label


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", nargs="+", help="JSON-lines logs of adaprec-train; the first is the reference")
    args = ap.parse_args()
    runs = [(label(p), *read_log(p)) for p in args.log]
    target = runs[0][1][-1]["test_accuracy"]
    reference, reference_bytes = runs[0][0], runs[0][1][-1]["bytes_sent"]
    print(f"| run | final test accuracy | wall time | {reference} at that time | time to {100 * target:.2f}% | bytes sent | "
          "decisions (step: choice) |")
    print("|---|---|---|---|---|---|---|")
    for name, evals, decisions in runs:
        last = evals[-1]
        reached = next((e["wall_s"] for e in evals if e["test_accuracy"] >= target), None)
        # The reference's accuracy when this run ended: its last evaluation at or before that moment.
        then = next((e["test_accuracy"] for e in reversed(runs[0][1]) if e["wall_s"] <= last["wall_s"]), None)
        sent = last["bytes_sent"]
        ratio = f" ({sent / reference_bytes:.2f} of {reference}'s)" if reference_bytes else ""
        choices = ", ".join(f"{d['step']}: {d['choice']}" for d in decisions) or "-"
        print(f"| {name} | {100 * last['test_accuracy']:.2f}% | {last['wall_s']:.0f} s | "
              f"{f'{100 * then:.2f}%' if then is not None else 'no evaluation yet'} | "
              f"{f'{reached:.0f} s' if reached is not None else 'not reached'} | {sent / 1e6:.0f} MB{ratio} | "
              f"{choices} |")


if __name__ == "__main__":
    main()
