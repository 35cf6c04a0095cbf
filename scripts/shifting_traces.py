#!/usr/bin/env python3
"""Writes two synthetic traces whose popular ids change over time, in the
lirs format (one decimal id per line), for checking passivation policies
where recency matters more than long-term frequency:

- shift.trace: 400,000 accesses drawn from Zipf(0.9) over 20,000 ranks; every
  20,000 accesses the ids behind the ranks are reshuffled at random, so the
  popular set changes all at once.
- drift.trace: 600,000 accesses drawn from Zipf(0.8) over 50,000 ranks; rank
  r is id (r + t / 200) mod 50,000 at access t, so the popular set slides
  slowly onto new ids.

    python3 scripts/shifting_traces.py OUT_DIR

Fixed seeds: the same files on every run.
"""
import bisect
import itertools
import os
import random
import sys


def zipf_sampler(ranks, skew, rng):
    cum = list(itertools.accumulate(1 / (r + 1) ** skew for r in range(ranks)))
    total = cum[-1]
    return lambda: bisect.bisect_left(cum, rng.random() * total)


def shift(path):
    rng = random.Random(7)
    draw = zipf_sampler(20000, 0.9, rng)
    ids = list(range(20000))
    with open(path, "w") as out:
        for i in range(400000):
            if i % 20000 == 0:
                rng.shuffle(ids)
            out.write(f"{ids[draw()]}\n")


def drift(path):
    rng = random.Random(11)
    draw = zipf_sampler(50000, 0.8, rng)
    with open(path, "w") as out:
        for i in range(600000):
            out.write(f"{(draw() + i // 200) % 50000}\n")


if __name__ == "__main__":
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    shift(os.path.join(out_dir, "shift.trace"))
    drift(os.path.join(out_dir, "drift.trace"))
