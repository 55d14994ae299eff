#!/usr/bin/python3
"""The scripts tools/demo ends with, on constructed logs (seconds, no training): compare_runs.py's table
(final accuracy, wall time, the reference's accuracy at that time, time to reach the reference's final accuracy or "not reached", bytes, the
decisions), plot_training.py's two figures and plot_timeline.py on a timeline with a decision instant.
Exit 77 (skipped) without matplotlib.

    demo_scripts_check.py SOURCE_ROOT
"""
import json
import os
import subprocess
import sys
import tempfile


def write_log(path, evals, decisions, bytes_per_step=1000000):
    with open(path, "w") as f:
        for step, wall, acc in evals:
            f.write(json.dumps({"event": "eval", "step": step, "wall_s": wall, "test_accuracy": acc,
                                "bytes_sent": bytes_per_step * step, "bytes_fp32": 1000000 * step}) + "\n")
        for phase, step, wall, choice in decisions:
            cands = [{"name": n, "curve": [[step, 0.7], [step + 5, 0.72 + 0.01 * i], [step + 10, 0.74 + 0.01 * i]],
                      "predicted_mean": 0.8 + 0.01 * i, "predicted_sd": 0.03, "predicted_step": step + 85}
                     for i, n in enumerate(["fp16", "fp8s", "table4"])]
            f.write(json.dumps({"event": "decision", "phase": phase, "step": step, "wall_s": wall, "phase_s": 10.0,
                                "choice": choice, "candidates": cands}) + "\n")


def run(args):
    r = subprocess.run([sys.executable] + args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def main():
    root = sys.argv[1]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib missing: skipped")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        fp32, adaptive, slow = (os.path.join(d, n) for n in ("fp32.jsonl", "adaptive.jsonl", "slow.jsonl"))
        write_log(fp32, [(40, 40.0, 0.74), (80, 80.0, 0.80), (120, 120.0, 0.84)], [])
        write_log(adaptive, [(40, 30.0, 0.75), (80, 50.0, 0.845), (120, 70.0, 0.85)],
                  [(1, 25, 20.0, "fp8s"), (2, 110, 60.0, "table4")], bytes_per_step=250000)
        write_log(slow, [(40, 50.0, 0.70), (120, 150.0, 0.83)], [])
        table = run([os.path.join(root, "tools/train/compare_runs.py"), fp32, adaptive, slow]).splitlines()
        rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in table[2:]}
        expect = {"fp32": ["84.00%", "120 s", "84.00%", "120 s", "120 MB (1.00 of fp32's)", "-"],
                  "adaptive": ["85.00%", "70 s", "74.00%", "50 s", "30 MB (0.25 of fp32's)", "25: fp8s, 110: table4"],
                  "slow": ["83.00%", "150 s", "84.00%", "not reached", "120 MB (1.00 of fp32's)", "-"]}
        if "time to 84.00%" not in table[0] or rows != expect:
            sys.exit(f"FAIL: compare_runs.py printed\n" + "\n".join(table))
        for args in ([fp32, adaptive, "--wall-time"], [adaptive]):
            out = os.path.join(d, "figure.png")
            run([os.path.join(root, "tools/train/plot_training.py")] + args + ["-o", out])
            with open(out, "rb") as f:
                if f.read(8) != b"\x89PNG\r\n\x1a\n":
                    sys.exit(f"FAIL: plot_training.py {args} wrote no PNG")
            os.remove(out)
        # Several logs without --wall-time: refused (the controller figure is one run's).
        r = subprocess.run([sys.executable, os.path.join(root, "tools/train/plot_training.py"), fp32, adaptive, "-o",
                            os.path.join(d, "x.png")], capture_output=True, text=True)
        if r.returncode == 0:
            sys.exit("FAIL: plot_training.py drew a controller figure of two logs")
        timeline = os.path.join(d, "tl.rank0.json")
        with open(timeline, "w") as f:  # unterminated, as a running or killed rank leaves it
            f.write('[\n{"name":"allreduce","ph":"X","pid":0,"tid":0,"ts":0,"dur":1000,"args":{"format":"fp32"}}\n'
                    ',{"name":"decision","ph":"i","s":"t","pid":0,"tid":0,"ts":2000,"args":{"phase":1,"choice":"fp8s"}}\n'
                    ',{"name":"allreduce","ph":"X","pid":0,"tid":0,"ts":3000,"dur":200,"args":{"format":"fp8s"}}\n')
        run([os.path.join(root, "tools/plot_timeline.py"), timeline, "-o", os.path.join(d, "tl.png")])
        if not os.path.getsize(os.path.join(d, "tl.png")):
            sys.exit("FAIL: plot_timeline.py wrote nothing")
    print("demo scripts: ok")


if __name__ == "__main__":
    main()
