#!/usr/bin/python3
"""Draw timeline files (ADAPREC_TIMELINE, docs/timeline.md) as a picture: one row per rank, every
allreduce call a bar from its start to its end coloured by wire format, and the controller's decisions
(instant events) as vertical lines labelled with the choice, and a failed call ("allreduce error") as a red
cross on its rank's row, labelled with the error's code. Read with the tolerant rule, so files of a
run still going or of a killed rank work too. Timestamps count from each process's own origin, so ranks
of different processes are only roughly aligned.

    tools/plot_timeline.py out/demo/timeline.rank*.json -o timeline.png [--title TEXT]
"""
import argparse
import json
import re


def read_events(path):
    text = open(path).read().rstrip()
    if text.endswith("]"):
        return json.loads(text)
    try:
        return json.loads(text + "\n]")
    except json.JSONDecodeError:
        return json.loads(text[:text.rfind("\n")] + "\n]")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", default="allreduce calls per rank, by wire format, and the controller's decisions")
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = sorted(args.files, key=lambda p: int(re.search(r"rank(\d+)", p).group(1)) if re.search(r"rank(\d+)", p) else 0)
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.7 * len(ranks)))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colours = {}
    origin = None
    for row, path in enumerate(ranks):
        events = read_events(path)
        calls = [e for e in events if e.get("name") == "allreduce" and e.get("ph") == "X"]
        if origin is None:
            origin = min((e["ts"] for e in events), default=0)
        by_format = {}
        for c in calls:
            by_format.setdefault(c["args"]["format"], []).append(((c["ts"] - origin) / 1e6, c["dur"] / 1e6))
        for fmt, bars in sorted(by_format.items()):
            colour = colours.setdefault(fmt, palette[len(colours) % len(palette)])
            # An edge as wide as a line keeps calls shorter than a pixel visible.
            ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=colour, edgecolors=colour, linewidth=0.6,
                           label=fmt if row == 0 else None)
        for e in events:
            if e.get("ph") == "i" and e.get("name") == "allreduce error":
                t = (e["ts"] - origin) / 1e6
                ax.plot([t], [row], marker="X", color="red", markersize=10, zorder=3)
                ax.annotate(f"error: {e.get('args', {}).get('code', '?')}", (t, row), xytext=(6, -4),
                            textcoords="offset points", fontsize=9, color="red")
        if row == 0:
            for e in events:
                if e.get("ph") == "i" and e.get("name") == "decision":
                    t = (e["ts"] - origin) / 1e6
                    ax.axvline(t, color="black", lw=1, ls="--")
                    ax.annotate(f"decision {e['args']['phase']}: {e['args']['choice']}", (t, -0.5),
                                xytext=(3, 2), textcoords="offset points", fontsize=9, va="bottom")
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"rank {i}" for i in range(len(ranks))])
    ax.set_ylim(len(ranks) - 0.4, -0.95)  # rank 0 on top, room above it for the decisions' labels
    ax.set_xlabel("seconds (rank 0's clock)")
    ax.set_title(args.title, fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25 - 0.2 / len(ranks)), ncol=len(colours), fontsize=9,
              title="wire format of the allreduce call")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
