#!/usr/bin/env python3
"""A training step of each fp8 recipe against amp-bf16's, measured in the same run.

Each round trains the default gpt for --steps steps at one thread under every preset in turn
(`amp train --model gpt --steps N --threads 1 --no-eval --quiet --grad-stats-every 0 --precision P`;
the gradient statistics are off: they are a pass of their own, the same for every preset) and reads
the child's user CPU seconds, which a shared machine disturbs less than the wall clock. The figure
per recipe is amp-bf16's time over the recipe's (above 1: the recipe is faster), the median over the
rounds, with each round's ratio beside it.

    python3 bench/fp8_step_ratio.py [--amp build/amp] [--rounds 3] [--steps 30] [--json]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpuinfo import cpu_id  # noqa: E402

PRESETS = ["amp-bf16", "fp8-delayed", "fp8-current", "mxfp8", "fp8-block", "fp8-noscale"]


def user_seconds(cmd):
    """The child's user CPU seconds (RUSAGE_CHILDREN before and after: one child at a time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--amp", default=os.path.join(os.path.dirname(__file__), "..", "build", "amp"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    args = ap.parse_args()
    ident = cpu_id()
    cpu = f"{ident.get('model name', 'unknown CPU')} (family {ident.get('cpu family', '?')}, model " \
          f"{ident.get('model', '?')}; {', '.join(ident.get('isa', []))}), load average at start {os.getloadavg()[0]:.2f}"
    t = {p: [] for p in PRESETS}
    for _ in range(args.rounds):
        for p in PRESETS:
            t[p].append(user_seconds([args.amp, "train", "--model", "gpt", "--steps", str(args.steps), "--threads",
                                      "1", "--no-eval", "--quiet", "--grad-stats-every", "0", "--precision", p]))
    print(f"fp8 step against amp-bf16: {cpu}; gpt, {args.steps} steps, 1 thread, user CPU seconds, "
          f"{args.rounds} rounds")
    print(f"amp-bf16: {' '.join(f'{x:.2f}' for x in t['amp-bf16'])} s")
    out = {}
    for p in PRESETS[1:]:
        ratios = [b / x for b, x in zip(t["amp-bf16"], t[p])]
        out[p] = dict(median=statistics.median(ratios), rounds=ratios, user_s=t[p])
        print(f"{p:12s} {statistics.median(ratios):.3f}   rounds {' '.join(f'{r:.3f}' for r in ratios)}")
    if args.json:
        print(json.dumps(dict(cpu=cpu, steps=args.steps, amp_bf16_user_s=t["amp-bf16"], recipes=out)))


if __name__ == "__main__":
    main()
