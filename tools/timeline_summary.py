#!/usr/bin/python3
"""Summarises AdaPrec allreduce timelines (ADAPREC_TIMELINE, docs/timeline.md).

usage: timeline_summary.py FILE...    (e.g. run.rank*.json)

Per format and algorithm, over every rank's file: the calls, their total time summed over ranks, and
that time split into encode, decode (decode and decodeAdd), wait (blocked on transfers) and other (the
rest of the call: agreement check, copies, averaging, posting messages); then every failed call (its
"allreduce error" event: rank, code, message). Files are read with the tolerant rule: a missing closing
bracket is added and a cut last line is dropped.
"""
import bisect
import json
import sys


def read_timeline(path):
    with open(path, encoding="utf-8") as f:
        text = f.read().rstrip()
    if not text:
        return []  # created, then nothing written (a rank killed at once)
    if text.endswith("]"):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass  # a cut line that happens to end in ']': the rules below
    try:
        return json.loads(text + "\n]")
    except json.JSONDecodeError:
        return json.loads(text[: text.rfind("\n")] + "\n]")


PARTS = {"encode": "encode", "decode": "decode", "decodeAdd": "decode", "wait": "wait"}


def summarise(paths):
    rows = {}  # (format, algorithm) -> [calls, total, encode, decode, wait]
    errors = []  # (rank, ts, code, count, message) of every "allreduce error" event
    ranks = set()
    for path in paths:
        events = read_timeline(path)
        calls = sorted((e for e in events if e.get("name") == "allreduce"), key=lambda e: e["ts"])
        # Each thread's calls run one after another (tid numbers a process's threads); a step belongs to
        # the last call of its own thread that began at or before it.
        starts_of = {}  # tid -> [(start, index in calls)]
        for i, c in enumerate(calls):
            starts_of.setdefault(c.get("tid", 0), []).append((c["ts"], i))
        steps = {}
        for e in events:
            if e.get("name") == "allreduce error" and e.get("ph") == "i":
                a = e.get("args", {})
                errors.append((e.get("pid"), e["ts"], a.get("code"), a.get("count"), a.get("message")))
                ranks.add(e.get("pid"))
            part = PARTS.get(e.get("name"))
            if part is None:
                continue
            starts = starts_of.get(e.get("tid", 0), [])
            k = bisect.bisect_right(starts, (e["ts"] + 0.002, len(calls))) - 1
            if k >= 0:
                i = starts[k][1]
                steps.setdefault(i, {}).setdefault(part, 0.0)
                steps[i][part] += e["dur"]
        for i, c in enumerate(calls):
            ranks.add(c.get("pid"))
            key = (c["args"]["format"], c["args"]["algorithm"])
            row = rows.setdefault(key, [0, 0.0, 0.0, 0.0, 0.0])
            row[0] += 1
            row[1] += c["dur"]
            for j, part in enumerate(("encode", "decode", "wait")):
                row[2 + j] += steps.get(i, {}).get(part, 0.0)
    return rows, len(ranks), sorted(errors, key=lambda x: (x[0], x[1]))


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rows, ranks, errors = summarise(argv[1:])
    print(f"{len(argv) - 1} files, {ranks} ranks; times in ms summed over ranks, shares of the call time")
    header = ("format", "algorithm", "calls", "total ms", "encode", "decode", "wait", "other")
    print("{:<10} {:<20} {:>7} {:>11} {:>7} {:>7} {:>7} {:>7}".format(*header))
    for (fmt, algo), (calls, total, enc, dec, wait) in sorted(rows.items()):
        other = max(0.0, total - enc - dec - wait)
        share = (lambda x: f"{100 * x / total:6.1f}%") if total > 0 else (lambda x: "     -")
        print(f"{fmt:<10} {algo:<20} {calls:>7} {total / 1000:>11.3f} {share(enc):>7} {share(dec):>7} "
              f"{share(wait):>7} {share(other):>7}")
    if errors:
        print(f"{len(errors)} failed call(s):")
        for rank, ts, code, count, message in errors:
            print(f"  rank {rank} at {ts / 1e6:.3f} s: {code}, {count} elements: {message}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
