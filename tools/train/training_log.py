"""Reading adaprec-train's JSON-lines logs (docs/trainer.md, "The log"), shared by compare_runs.py and
plot_training.py."""
import json
import os
import sys


def read_log(path, tool):
    """The log's evaluation and decision records, in order; exits naming `tool` if it has no evaluation."""
    evals, decisions = [], []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("event") == "eval":
                evals.append(rec)
            elif rec.get("event") == "decision":
                decisions.append(rec)
    if not evals:
        sys.exit(f"{tool}: {path} has no evaluations")
    return evals, decisions


def label(path):
    """A run's name in tables and legends: the log's file name without .jsonl."""
    return os.path.basename(path).removesuffix(".jsonl")
