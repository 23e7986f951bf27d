#!/usr/bin/env python3
"""Data-parallel scaling of `amp train` from 1 to N ranks on this machine, measured side by side.

For each model, in one run and interleaved (so load from elsewhere hits every configuration alike),
it trains the same global batch for a fixed number of steps as
  - 1 process, 1 thread                      (the baseline)
  - N ranks of 1 thread each (mpirun)        gradients summed in fp32, overlapped with backward
  - N ranks, one gradient bucket             the same with the sums started only after backward
  - N ranks, bf16 on the wire
  - 1 process, N threads                     amp's own threading, for comparison
and prints the median training samples/s (amp's --json samples_per_sec: training time only) and the
scaling efficiency: samples/s with N ranks / (N x samples/s with 1).

    python3 bench/mpi_scaling.py [--amp build/amp] [--ranks 2] [--steps 30] [--repeats 3] [--models mlp,cnn]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

MPIRUN = ["mpirun", "--oversubscribe", "--mca", "btl", "self,vader", "--bind-to", "none"]
if os.geteuid() == 0:
    MPIRUN.insert(1, "--allow-run-as-root")

BATCH = {"mlp": 256, "cnn": 128, "lstm": 32, "gpt": 32}


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--amp", default="build/amp")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--precision", default="amp-bf16")
    a = ap.parse_args()
    n = a.ranks
    print(f"cpu: {cpu_name()}; {os.cpu_count()} logical cpus; load average {os.getloadavg()[0]:.2f} at start")
    print(f"{'model':6} {'precision':10} {'batch':>5}  {'1 proc 1 thr':>12} {f'{n} ranks':>10} {'eff':>6} "
          f"{'1 bucket':>10} {'eff':>6} {'bf16 wire':>10} {'eff':>6} {f'1 proc {n} thr':>12} {'eff':>6}")
    for model in a.models.split(","):
        base = [a.amp, "train", "--model", model, "--precision", a.precision, "--batch", str(BATCH[model]),
                "--steps", str(a.steps), "--no-eval", "--quiet", "--json", "--grad-stats-every", "0"]
        configs = {
            "one": base + ["--threads", "1"],
            "ranks": MPIRUN + ["-np", str(n)] + base + ["--threads", "1"],
            "bucket": MPIRUN + ["-np", str(n)] + base + ["--threads", "1", "--bucket-kb", str(1 << 30 >> 10)],
            "bf16": MPIRUN + ["-np", str(n)] + base + ["--threads", "1", "--allreduce-dtype", "bf16"],
            "threads": base + ["--threads", str(n)],
        }
        sps = {k: [] for k in configs}
        for _ in range(a.repeats):
            for k, cmd in configs.items():
                sps[k].append(run(cmd)["samples_per_sec"])
        med = {k: statistics.median(v) for k, v in sps.items()}
        eff = {k: med[k] / (n * med["one"]) for k in med}
        print(f"{model:6} {a.precision:10} {BATCH[model]:5}  {med['one']:12.0f} {med['ranks']:10.0f} {eff['ranks']:6.0%} "
              f"{med['bucket']:10.0f} {eff['bucket']:6.0%} {med['bf16']:10.0f} {eff['bf16']:6.0%} "
              f"{med['threads']:12.0f} {eff['threads']:6.0%}")
        sys.stdout.flush()
    print(f"load average {os.getloadavg()[0]:.2f} at the end; samples/s are medians of {a.repeats}, "
          f"{a.steps} steps each (training time only)")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
