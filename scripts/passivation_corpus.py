#!/usr/bin/env python3
"""Replays the whole trace corpus through every passivation preset and
prints PASSIVATION.md's corpus section; writes every figure to
scripts/passivation_corpus.csv (which a test reads to check the `default`
preset against the rule below).

    python3 scripts/passivation_corpus.py [TRACES_DIR]

TRACES_DIR defaults to ../shared/traces beside the project. Takes about ten
minutes on two cores (two simulations at a time).

Rows: every trace with 1 region and 5 shards, and the LIRS suite also with
Akka's 10 shards, each at limits of 0.5, 1, 2, 5, 10 and 20% of the trace's
distinct ids (at least 2 per shard, so that no shard is left with nothing).

The split: the LIRS suite and corda are where colo's policies were designed
and tuned (the `tune` half); the broader corpus under extra/ was never looked
at before this report (the `report` half). Figures for each are given
separately.

The `default` rule: among colo's policies, the one with the smallest mean gap
to OPT over every row, of those never more than 1 point below the better of
LRU and W-TinyLFU with hill climbing on any row; if none qualifies, Akka's
`default-strategy`.
"""
import concurrent.futures
import csv
import io
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
TRACES = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "traces")
OUT = os.path.join(HERE, "passivation_corpus.csv")

# Every policy preset (`default` and `default-strategy` are aliases, shown
# once under the name of what they stand for), and the two references.
POLICIES = ["lru", "slru", "s4lru", "mru", "lfu", "lfuda", "w-tinylfu", "w-tinylfu-hc", "lirs", "lirs-arc",
            "lirs-tinylfu", "ensemble", "next-use", "follow-best"]
REFERENCES = ["opt", "opt-seen"]
PERCENT = [0.5, 1, 2, 5, 10, 20]
TOLERANCE = 1.0

# name, family, path under TRACES, distinct ids (shared/traces/README.md).
LIRS = ["multi1", "multi2", "multi3", "gli", "ps", "loop", "sprite", "2_pools", "cs", "cpp", "backf", "scan",
        "zigzag"]
LIRS_DISTINCT = {"multi1": 2606, "multi2": 5684, "multi3": 7454, "gli": 2529, "ps": 3083, "loop": 1011,
                 "sprite": 7075, "2_pools": 9939, "cs": 1409, "cpp": 1223, "backf": 751, "scan": 2001,
                 "zigzag": 2001}
TRACE_LIST = [(t, "lirs", f"lirs/{t}.trace.gz", LIRS_DISTINCT[t]) for t in LIRS] + [
    ("corda", "corda", "corda/trace_vaultservice.gz", 90468),
    ("gcc", "address", "extra/address/gcc.trace.gz", 35070),
    ("gzip", "address", "extra/address/gzip.trace.gz", 160167),
    ("mcf", "address", "extra/address/mcf.trace.gz", 719685),
    ("swim", "address", "extra/address/swim.trace.gz", 22605),
    ("twolf", "address", "extra/address/twolf.trace.gz", 7354),
    ("request", "adapt_size", "extra/adapt_size/request.trace.xz", 40240),
    ("orm-night", "cache2k", "extra/cache2k/orm-night.trace.xz", 86466),
    ("scarab-recs", "scarab", "extra/scarab/scarab-recs.trace.xz", 258368),
]


def split_of(family):
    return "tune" if family in ("lirs", "corda") else "report"


def limits_for(distinct, shards):
    out = []
    for p in PERCENT:
        limit = max(round(distinct * p / 100), 2 * shards)
        if limit not in out:
            out.append(limit)
    return out


def simulate(job):
    name, family, rel, distinct, shards = job
    limits = limits_for(distinct, shards)
    cmd = [os.path.join(ROOT, "target", "release", "colo"), "simulate", "--trace", os.path.join(TRACES, rel),
           "--strategy", ",".join(REFERENCES + POLICIES), "--limits", ",".join(map(str, limits)),
           "--shards", str(shards), "--csv"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = []
    for r in csv.DictReader(io.StringIO(out)):
        rows.append({"trace": name, "family": family, "split": split_of(family), "shards": shards,
                     "limit": int(r["limit"]), "strategy": r["strategy"],
                     "active_percent": float(r["active_percent"])})
    return rows


def run_all():
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "colo"], check=True, cwd=ROOT)
    jobs = [(n, f, r, d, 5) for n, f, r, d in TRACE_LIST] + [(n, f, r, d, 10) for n, f, r, d in TRACE_LIST
                                                             if f == "lirs"]
    # The longest first, so that the two workers finish together.
    jobs.sort(key=lambda j: j[1] in ("lirs", "corda"))
    rows = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for result in pool.map(simulate, jobs):
            rows.extend(result)
    rows.sort(key=lambda r: (r["split"] != "tune", r["family"], r["trace"], r["shards"], r["limit"],
                             (REFERENCES + POLICIES).index(r["strategy"])))
    with open(OUT, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["trace", "family", "split", "shards", "limit", "strategy",
                                          "active_percent"])
        w.writeheader()
        for r in rows:
            w.writerow({**r, "active_percent": f"{r['active_percent']:.2f}"})
    return rows


def table(rows):
    """{(trace, shards, limit): {strategy: active %}}"""
    out = {}
    for r in rows:
        out.setdefault((r["trace"], r["family"], r["split"], r["shards"], r["limit"]), {})[r["strategy"]] = \
            r["active_percent"]
    return out


def summary(cells, title):
    families = sorted({k[1] for k in cells}, key=lambda f: (f not in ("lirs", "corda"), f))
    print(f"{title} ({len(cells)} rows)\n")
    print("| policy | " + " | ".join(families) + " | all rows | worst row against max(lru, w-tinylfu-hc) | "
          "rows more than 1 below |")
    print("|---|" + "---:|" * (len(families) + 1) + "---|---:|")
    for p in POLICIES + ["opt-seen"]:
        gaps = {f: [] for f in families}
        worst = None
        below = 0
        for key, v in cells.items():
            gaps[key[1]].append(v["opt"] - v[p])
            margin = v[p] - max(v["lru"], v["w-tinylfu-hc"])
            if worst is None or margin < worst[0]:
                worst = (margin, key)
            if margin < -TOLERANCE:
                below += 1
        every = [g for gs in gaps.values() for g in gs]
        (margin, (trace, _, _, shards, limit)) = worst
        print(f"| {p} | " + " | ".join(f"{sum(g) / len(g):.2f}" for g in gaps.values()) +
              f" | {sum(every) / len(every):.2f} | {margin:+.2f} ({trace}, {shards} shards, {limit}) | {below} |")
    print()


def choose_default(cells):
    best = None
    for p in POLICIES:
        if any(v[p] < max(v["lru"], v["w-tinylfu-hc"]) - TOLERANCE for v in cells.values()):
            continue
        mean = sum(v["opt"] - v[p] for v in cells.values()) / len(cells)
        if best is None or mean < best[1]:
            best = (p, mean)
    return best[0] if best else "default-strategy"


def details(cells):
    traces = []
    for key in cells:
        if (key[0], key[3]) not in traces:
            traces.append((key[0], key[3]))
    for trace, shards in traces:
        keys = [k for k in cells if k[0] == trace and k[3] == shards]
        print(f"#### {trace}, {shards} shards ({keys[0][2]})\n")
        print("| strategy | " + " | ".join(str(k[4]) for k in keys) + " |")
        print("|---|" + "---:|" * len(keys))
        for s in REFERENCES + POLICIES:
            print(f"| {s} | " + " | ".join(f"{cells[k][s]:.2f}" for k in keys) + " |")
        print()


if __name__ == "__main__":
    cells = table(run_all())
    print("Mean gap to OPT in points of active %, per trace family; the worst row is the policy's margin "
          "over the better of LRU and W-TinyLFU with hill climbing on that row.\n")
    summary(cells, "### Whole corpus")
    summary({k: v for k, v in cells.items() if k[2] == "tune"}, "### Tune half: the LIRS suite and corda")
    summary({k: v for k, v in cells.items() if k[2] == "report"}, "### Report half: extra/")
    print(f"`default` by the rule: **{choose_default(cells)}**\n")
    print("### Every row\n")
    details(cells)
