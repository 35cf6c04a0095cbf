#!/usr/bin/env python3
"""Prints PASSIVATION.md's tables: colo's simulator next to Akka's published
active % for the same trace, strategy and limit, and colo's figures for the
traces Akka published nothing for.

    python3 scripts/passivation_report.py [TRACES_DIR]

TRACES_DIR defaults to ../shared/traces beside the project.
"""
import csv
import io
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "shared", "traces")
STRATEGIES = ["opt", "opt-seen", "lru", "slru", "s4lru", "mru", "lfu", "lfuda", "w-tinylfu", "w-tinylfu-hc",
              "default-strategy", "lirs", "lirs-arc", "lirs-tinylfu", "ensemble", "next-use", "follow-best",
              "default"]
# Not policies: references to measure policies against.
REFERENCES = ["opt-seen"]

# Akka's published figures (shared/traces/README.md).
AKKA = {
    "multi3": ([100, 200, 400, 800, 1600], {
        "opt": [31.20, 38.47, 47.14, 53.53, 64.14],
        "lru": [6.53, 14.38, 27.55, 35.97, 44.23],
        "slru": [9.22, 22.41, 29.94, 37.30, 46.51],
        "s4lru": [8.43, 22.62, 30.10, 37.30, 46.51],
        "mru": [2.41, 4.20, 7.21, 14.11, 26.31],
        "lfu": [8.88, 22.14, 29.85, 37.30, 46.51],
        "lfuda": [10.16, 22.99, 30.50, 37.25, 46.21],
        "w-tinylfu": [25.96, 32.56, 42.64, 46.94, 57.65],
        "w-tinylfu-hc": [24.74, 32.38, 42.63, 47.11, 57.65],
    }),
    "gli": ([250, 500, 1000, 1500], {
        "opt": [17.70, 34.33, 53.14, 57.95],
        "lru": [0.91, 0.95, 11.20, 36.55],
        "slru": [1.38, 1.38, 31.33, 51.85],
        "s4lru": [1.38, 1.38, 19.70, 48.02],
        "mru": [14.78, 31.40, 48.62, 53.37],
        "lfu": [1.38, 1.38, 31.33, 51.85],
        "lfuda": [1.11, 1.25, 16.37, 51.85],
        "w-tinylfu": [13.43, 32.40, 50.83, 53.54],
        "w-tinylfu-hc": [13.43, 32.40, 50.83, 53.54],
    }),
    "ps": ([125, 250, 500, 1000], {
        "opt": [35.16, 53.33, 58.12, 67.69],
        "lru": [12.19, 13.95, 48.55, 48.55],
        "slru": [9.34, 16.80, 52.59, 52.59],
        "s4lru": [9.34, 16.80, 51.95, 52.59],
        "mru": [14.23, 30.84, 45.67, 64.41],
        "lfu": [9.34, 16.80, 52.59, 52.59],
        "lfuda": [12.89, 16.79, 52.58, 52.58],
        "w-tinylfu": [30.64, 52.41, 55.98, 66.56],
        "w-tinylfu-hc": [29.96, 52.38, 55.98, 66.56],
    }),
}

OTHERS = [
    ("loop", "lirs/loop.trace.gz", [], [250, 500, 750, 1000, 1250]),
    ("sprite", "lirs/sprite.trace.gz", [], [100, 200, 400, 800, 1600]),
    ("corda", "corda/trace_vaultservice.gz", ["--format", "corda"], [250, 500, 1000, 2000, 4000]),
    ("zigzag", "lirs/zigzag.trace.gz", [], [500, 1000, 1500]),
    ("scan", "lirs/scan.trace.gz", [], [500, 1000, 1500]),
    ("cs", "lirs/cs.trace.gz", [], [100, 200, 400, 800]),
    ("cpp", "lirs/cpp.trace.gz", [], [100, 200, 400, 800]),
    ("2_pools", "lirs/2_pools.trace.gz", [], [500, 1000, 2000, 4000]),
    ("multi1", "lirs/multi1.trace.gz", [], [100, 200, 400, 800, 1600]),
    ("multi2", "lirs/multi2.trace.gz", [], [100, 200, 400, 800, 1600]),
    ("backf", "lirs/backf.trace.gz", [], [100, 200, 400]),
]


def simulate(path, limits, extra):
    cmd = ["cargo", "run", "-q", "--release", "-p", "colo", "--", "simulate", "--trace", path,
           "--strategy", ",".join(STRATEGIES), "--limits", ",".join(map(str, limits)), "--csv"] + extra
    root = os.path.join(HERE, "..")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=root).stdout
    rows = {}
    for r in csv.DictReader(io.StringIO(out)):
        rows[(r["strategy"], int(r["limit"]))] = float(r["active_percent"])
    shown = ["cargo", "run", "--release", "-p", "colo", "--"] + cmd[7:]
    shown[shown.index("--trace") + 1] = os.path.relpath(path, root)
    return rows, " ".join(shown)


def best_non_opt(akka, i):
    return max(v[i] for k, v in akka.items() if k != "opt")


def published():
    compared = {"colo next-use": "next-use", "colo follow-best": "follow-best",
                "colo opt-seen (reference)": "opt-seen",
                "colo default-strategy (= default)": "default-strategy", "colo lirs": "lirs",
                "colo lirs-arc": "lirs-arc", "colo lirs-tinylfu": "lirs-tinylfu", "colo ensemble": "ensemble"}
    distances = {name: [] for name in compared}
    distances["akka default-strategy"] = []
    for trace, (limits, akka) in AKKA.items():
        rows, cmd = simulate(os.path.join(TRACES, "lirs", f"{trace}.trace.gz"), limits, [])
        print(f"### {trace}\n\n    {cmd}\n")
        print("| strategy | " + " | ".join(str(l) for l in limits) + " |")
        print("|---|" + "---:|" * len(limits))
        for s in STRATEGIES:
            cells = []
            for i, l in enumerate(limits):
                ours = rows[(s, l)]
                if s in REFERENCES:
                    cells.append(f"{ours:.2f}")
                elif s in akka:
                    theirs = akka[s][i]
                    mark = "" if abs(ours - theirs) < 0.005 else f" ({ours - theirs:+.2f})"
                    cells.append(f"{ours:.2f} / {theirs:.2f}{mark}")
                else:
                    best = best_non_opt(akka, i)
                    cells.append(f"**{ours:.2f}** (best Akka {best:.2f})")
            print(f"| {s} | " + " | ".join(cells) + " |")
        for i, l in enumerate(limits):
            for name, s in compared.items():
                distances[name].append(akka["opt"][i] - rows[(s, l)])
            distances["akka default-strategy"].append(akka["opt"][i] - akka["w-tinylfu-hc"][i])
        print()
    for k, v in distances.items():
        print(f"- mean distance to OPT over the {len(v)} published rows, {k}: {sum(v) / len(v):.2f} points")
    print()


def others():
    for name, rel, extra, limits in OTHERS:
        rows, cmd = simulate(os.path.join(TRACES, rel), limits, extra)
        print(f"### {name}\n\n    {cmd}\n")
        print("| strategy | " + " | ".join(str(l) for l in limits) + " |")
        print("|---|" + "---:|" * len(limits))
        for s in STRATEGIES:
            print(f"| {s} | " + " | ".join(f"{rows[(s, l)]:.2f}" for l in limits) + " |")
        print()


if __name__ == "__main__":
    print("## Published rows (colo / Akka, difference when not equal)\n")
    published()
    print("## Other traces (colo only)\n")
    others()
