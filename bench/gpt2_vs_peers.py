#!/usr/bin/env python3
"""GPT-2 124M training, amp against llm.c's CPU trainer and PyTorch: one run, the same threads.

For each configuration (batch B, context T) it trains, one fresh process per trainer, in turn:
  - llm.c's train_gpt2.c (fp32), from LLMC_DIR (or --llmc-dir; skipped with a note without it):
    a temporary copy patched with sed (B, T, the step count; no validation loss and no sampling
    inside the loop), built with llm.c's Makefile flags for its CPU trainer (-Ofast -march=native
    -fopenmp -DOMP; --llmc-cflags changes them), OMP_NUM_THREADS = --threads. Step times are its own
    "step N: train loss X (took Y ms)" lines. Skipped where its activations and their gradients
    (which it allocates in full, the attention's (B, NH, T, T) twice each) would not fit in memory.
  - PyTorch fp32 and bf16 autocast (torch.set_num_threads): a GPT-2 written here with the
    architecture of llm.c's train_gpt2.py (tied token embedding and head, tanh GELU, causal
    scaled_dot_product_attention), AdamW, step times by time.perf_counter around each step.
  - amp train --model gpt2 --size 124m in fp32, amp-bf16, amp-fp16 and bf16-pure (bf16 parameters),
    and fp32 and amp-bf16 again under AMP_ISA=avx2 (no AVX512-BF16 and no zmm FMA), from the same
    llm.c checkpoint as llm.c (--init-from). amp prints one progress line per step on stderr (when
    the run has fewer than 20 steps and stderr is not a terminal); the script timestamps each line
    as it arrives, and a step's time is the gap between two lines. Gradient statistics are off
    (--grad-stats-every 0: by default amp computes them at steps 1, 2, 4, ..., about a second each
    at this size, which would land in every other timed step).
Every trainer: AdamW lr 1e-4, betas (0.9, 0.999), eps 1e-8, weight decay 0 (llm.c's gpt2_update
arguments), random token ids below 50257 in llm.c's shard format (header 20240520, version 1,
uint16), --warmup untimed steps, then --steps timed ones; s/step is their median.

The inputs are made locally: the shards by this script (numpy), the checkpoint gpt2_124M.bin by
`amp train --model gpt2 --size 124m --context 1024 --steps 1 --lr 0 --save-llmc FILE` (amp's random
initialisation written in llm.c's layout: version 3, fp32).

Also reported: peak RSS of each trainer's process (os.wait4's rusage of that child), the fraction
of the peak, and the ratios amp / llm.c and amp / the faster PyTorch. FLOPs per step are llm.c's
count (gpt2_estimate_mfu in train_gpt2.cu): (6 N + 6 L C T) x B T, N = llm.c's num_parameters
(padded vocabulary 50304, 1024 positions: 124,475,904). The peak: one core's FMA peak as
`amp bench gemm --json` measures it (peak_gflops_per_core, zmm FMA; ymm for the AMP_ISA=avx2
runs; best of three), times --threads; the bf16 runs are also rated against the bf16 peak (the
largest of the FMA's, VDPBF16PS's and AMX's TDPBF16PS's, where amp measures it).

    python3 bench/gpt2_vs_peers.py [--threads N] [--configs 4x64,8x1024] [--steps 4] [--warmup 2]
                                   [--trainers llmc,torch-fp32,...] [--llmc-dir DIR] [--rounds N] [--json [FILE]]
--steps, --warmup and --rounds take one value, or one per configuration (--configs 4x64,8x1024
--rounds 3,1: a B=8 T=1024 step takes 10-50 s here). --rounds N runs the trainers in turn N times (so that load on a shared machine hits all alike) and
pools their timed steps. --json FILE writes the results to FILE; --json alone prints them as one JSON
object on the last line, which `bench/write_benchmarks_md.py record` saves for docs/benchmarks.md:

    LLMC_DIR=DIR python3 bench/write_benchmarks_md.py record -- nice python3 bench/gpt2_vs_peers.py \
        --threads 2 --configs 4x64 --rounds 3 --trainers llmc,torch-fp32,torch-bf16,amp-fp32,amp-bf16,amp-fp16 --json
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpuinfo import cpu_id  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AMP = os.path.join(ROOT, "build", "amp")
LLMC_CFLAGS = "-Ofast -march=native -fopenmp -DOMP"  # llm.c's Makefile for train_gpt2 (gcc, OpenMP found)
L, NH, C, V, VP, MAXT = 12, 12, 768, 50257, 50304, 1024
N_PARAMS = VP * C + MAXT * C + L * (12 * C * C + 13 * C) + 2 * C  # llm.c's num_parameters: 124,475,904
ADAMW = dict(lr=1e-4, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.0)
ALL_TRAINERS = ["llmc", "torch-fp32", "torch-bf16", "amp-fp32", "amp-bf16", "amp-fp16", "amp-bf16-pure",
                "amp-fp32-avx2", "amp-bf16-avx2"]
AMP_PRECISION = {"amp-fp32": "fp32", "amp-bf16": "amp-bf16", "amp-fp16": "amp-fp16", "amp-bf16-pure": "bf16-pure",
                 "amp-fp32-avx2": "fp32", "amp-bf16-avx2": "amp-bf16"}


def flops_per_step(b, t):
    """llm.c's count: 6 N per token for the weight products, 6 L C T per token for attention."""
    return (6 * N_PARAMS + 6 * L * C * t) * b * t


# ---------------------------------------------------------------- the PyTorch side (worker process)


def torch_worker(prec, threads, b, t, warmup, steps, seed):
    """Trains the GPT-2 below for warmup + steps steps and prints one JSON line: the timed steps' seconds."""
    import math
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(seed)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

        def forward(self, x):
            bb, tt, _ = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (z.view(bb, tt, NH, C // NH).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(bb, tt, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.attn = Attention()
            self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(MAXT, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)
            self.lm_head = nn.Linear(C, V, bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as GPT-2 and llm.c
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], dtype=torch.long)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.float().reshape(-1, V), targets.reshape(-1))

    model = GPT2()
    kw = dict(lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"], weight_decay=ADAMW["wd"])
    try:
        opt, optimizer_kind = torch.optim.AdamW(model.parameters(), fused=True, **kw), "fused"
    except (RuntimeError, TypeError):
        opt, optimizer_kind = torch.optim.AdamW(model.parameters(), **kw), "default"
    gen = torch.Generator().manual_seed(seed)
    data = torch.randint(0, V, (warmup + steps, b, t + 1), generator=gen)
    times = []
    for i in range(warmup + steps):
        x, y = data[i, :, :t], data[i, :, 1:]
        t0 = time.perf_counter()
        if prec == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(x, y)
        else:
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
        print(f"step {i}: loss {loss.item():.4f} ({dt * 1000:.1f} ms)", file=sys.stderr, flush=True)
    print(json.dumps({"times": times, "optimizer": optimizer_kind, "torch": torch.__version__}), flush=True)


# ---------------------------------------------------------------- running one trainer


def run_child(cmd, env=None, cwd=None, stamp_stderr=False):
    """Runs cmd to its end in a fresh process; returns (rc, stdout, stderr lines [(seconds, line)], peak RSS MiB).
    The RSS is the child's own (os.wait4), so no earlier trainer's peak leaks into it."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd, text=True, bufsize=1)
    lines = []
    # stderr as it comes (amp's per-step lines), stdout after (the JSON summary: a few lines only)
    for line in p.stderr:
        lines.append((time.perf_counter() - t0, line.rstrip("\n")))
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, out, lines, ru.ru_maxrss / 1024.0


def write_shard(path, n, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, n
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(rng.integers(0, V, size=n, dtype=np.uint16).tobytes())


def make_checkpoint(tmp, shard, threads):
    """gpt2_124M.bin by amp: one step at lr 0 (the random initialisation unchanged), saved in llm.c's layout
    with GPT-2's 1024 positions (amp's wpe has --context rows: the file's maxT)."""
    path = os.path.join(tmp, "gpt2_124M.bin")
    cmd = [AMP, "train", "--model", "gpt2", "--size", "124m", "--data", shard, "--val-data", shard, "--vocab", str(V),
           "--batch", "1", "--context", str(MAXT), "--steps", "1", "--lr", "0", "--optimizer", "adamw", "--no-eval",
           "--quiet", "--threads", str(threads), "--save-llmc", path]
    rc, out, err, _ = run_child(cmd)
    if rc != 0:
        sys.exit("error: could not write the checkpoint: " + " ".join(cmd) + "\n" + out + "\n".join(l for _, l in err))
    return path


def build_llmc(llmc_dir, tmp, b, t, steps, cflags):
    """A patched copy of train_gpt2.c built in tmp/llmc-BxT; returns its directory or None with a note."""
    d = os.path.join(tmp, f"llmc-{b}x{t}")
    os.makedirs(os.path.join(d, "dev", "data", "tinyshakespeare"), exist_ok=True)
    shutil.copy(os.path.join(llmc_dir, "train_gpt2.c"), d)
    shutil.copytree(os.path.join(llmc_dir, "llmc"), os.path.join(d, "llmc"), dirs_exist_ok=True)
    src = os.path.join(d, "train_gpt2.c")
    text = open(src).read()
    patches = [("int B = 4;", f"int B = {b};"), ("int T = 64;", f"int T = {t};"),
               ("for (int step = 0; step <= 40; step++) {", f"for (int step = 0; step < {steps}; step++) {{"),
               ("if (step % 10 == 0) {", "if (0) {"),  # no validation loss
               ("if (step > 0 && step % 20 == 0) {", "if (0) {")]  # no sampling
    for old, new in patches:
        if text.count(old) != 1:
            return None, f"could not patch train_gpt2.c ({old!r})"
        text = text.replace(old, new)
    open(src, "w").write(text)
    cc = os.environ.get("CC", "gcc")
    r = subprocess.run([cc] + cflags.split() + ["train_gpt2.c", "-lm", "-o", "train_gpt2"], cwd=d,
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"{cc} {cflags} failed: {r.stderr.strip().splitlines()[-1:]}"
    return d, None


def llmc_bytes(b, t):
    """What train_gpt2.c allocates: parameters, their gradients and AdamW's two moments (fp32), and its
    activations and their gradients (llm.c's fill_in_activation_sizes, counted twice)."""
    bt = b * t
    acts = (bt * C + L * bt * C * 2 + L * bt * 2 * 2 + L * bt * 3 * C + L * bt * C + L * b * NH * t * t * 2 + L * bt * C * 2
            + L * bt * C + L * bt * 2 * 2 + L * bt * 4 * C * 2 + L * bt * C * 2 + bt * C + bt * 2 + bt * VP * 2 + bt)
    return 4 * (4 * N_PARAMS + 2 * acts)


def available_bytes():
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def run_llmc(d, threads, warmup, ckpt, shard):
    for name in ("gpt2_124M.bin",):
        dst = os.path.join(d, name)
        if not os.path.exists(dst):
            os.symlink(ckpt, dst)
    for split in ("train", "val"):
        dst = os.path.join(d, "dev", "data", "tinyshakespeare", f"tiny_shakespeare_{split}.bin")
        if not os.path.exists(dst):
            os.symlink(shard, dst)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    rc, out, err, rss = run_child(["./train_gpt2"], env=env, cwd=d)
    ms = [float(m.group(2)) for m in re.finditer(r"^step (\d+): train loss \S+ \(took ([0-9.]+) ms\)", out, re.M)]
    if rc != 0 or len(ms) <= warmup:
        return dict(error=f"llm.c exit {rc}: " + (out + "\n".join(l for _, l in err)).strip()[-300:])
    return dict(times=[x / 1000 for x in ms[warmup:]], rss=rss)


def run_torch(prec, threads, b, t, warmup, steps):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", prec, "--threads", str(threads),
           "--configs", f"{b}x{t}", "--warmup", str(warmup), "--steps", str(steps)]
    rc, out, err, rss = run_child(cmd)
    if rc != 0:
        return dict(error=f"PyTorch exit {rc}: " + "\n".join(l for _, l in err)[-300:])
    j = json.loads(out.strip().splitlines()[-1])
    return dict(times=j["times"], rss=rss, note=f"torch {j['torch']}, AdamW {j['optimizer']}")


def run_amp(trainer, threads, b, t, warmup, steps, ckpt, shard):
    env = dict(os.environ)
    if trainer.endswith("-avx2"):
        env["AMP_ISA"] = "avx2"
    cmd = [AMP, "train", "--model", "gpt2", "--size", "124m", "--init-from", ckpt, "--data", shard,
           "--val-data", shard, "--vocab", str(V), "--data-order", "sequential", "--batch", str(b),
           "--context", str(t), "--precision", AMP_PRECISION[trainer], "--optimizer", "adamw",
           "--lr", str(ADAMW["lr"]), "--beta1", str(ADAMW["beta1"]), "--beta2", str(ADAMW["beta2"]),
           "--eps", str(ADAMW["eps"]), "--weight-decay", str(ADAMW["wd"]), "--lr-schedule", "constant",
           "--steps", str(warmup + steps), "--no-eval", "--grad-stats-every", "0", "--threads", str(threads), "--json"]
    if trainer == "amp-fp16":
        cmd += ["--scaler", "dynamic"]
    rc, out, err, rss = run_child(cmd, env=env)
    stamps = [s for s, line in err if re.match(r"epoch \d+/\d+\s+step \d+/\d+", line)]
    if rc != 0 or len(stamps) != warmup + steps:
        return dict(error=f"amp exit {rc}, {len(stamps)} step lines: " + "\n".join(l for _, l in err)[-300:])
    times = [b2 - a2 for a2, b2 in zip(stamps[warmup - 1:], stamps[warmup:])] if warmup else None
    if times is None:
        return dict(error="amp needs --warmup >= 1 (a step's time is the gap between two progress lines)")
    j = json.loads(out.strip().splitlines()[-1])
    # amp's own figure: samples/s over all its steps (warm-up included), for a cross-check
    return dict(times=times, rss=rss, note=f"amp all-steps {j['samples_per_sec']:.3f} samples/s")


def measure_peak(threads, best, tries=3):
    """One core's FMA (zmm, ymm), VDPBF16PS and AMX TDPBF16PS peaks in GFLOP/s, the best of `best` and of `tries` short
    `amp bench gemm` runs (a loaded machine lowers single measurements: the script measures again after
    every trainer and keeps the best)."""
    for _ in range(tries):
        r = subprocess.run([AMP, "bench", "gemm", "--threads", str(threads), "--shape", "64x64x64", "--repeats", "1",
                            "--json"], capture_output=True, text=True)
        if r.returncode != 0:
            continue
        for k, v in json.loads(r.stdout.strip().splitlines()[-1])["peak_gflops_per_core"].items():
            best[k] = max(best.get(k, 0.0), v)
    return best


# ---------------------------------------------------------------- the table


def merge(old, new):
    """Pools the timed steps of the rounds (an error in any round stands); peak RSS: the largest."""
    if old is None or "times" not in old or "times" not in new:
        out = new if old is None or "times" in (old or {}) else old
        if "times" in out:
            out["round_medians"] = [statistics.median(out["times"])]
        return out
    old["times"] += new["times"]
    old["round_medians"].append(statistics.median(new["times"]))
    old["rss"] = max(old["rss"], new["rss"])
    return old


def fmt_rss(x):
    return f"{x:.0f} MiB" if x else "-"


def table(cfg, rows, peak, threads):
    b, t = cfg
    fl = flops_per_step(b, t)
    ok = {k: r for k, r in rows.items() if "times" in r}
    for r in ok.values():
        r["s_per_step"] = statistics.median(r["times"])
        r["tokens_per_s"] = b * t / r["s_per_step"]
        r["gflops"] = fl / r["s_per_step"] / 1e9
    fma = peak.get("fma_zmm", 0.0) * threads
    fma_avx2 = peak.get("fma_ymm", 0.0) * threads
    bf16 = max(peak.get("vdpbf16ps_zmm", 0.0), peak.get("fma_zmm", 0.0), peak.get("tdpbf16ps", 0.0)) * threads
    torch_best = max((ok[k]["tokens_per_s"] for k in ("torch-fp32", "torch-bf16") if k in ok), default=0)
    llmc = ok.get("llmc", {}).get("tokens_per_s", 0)
    print(f"\n### B={b} T={t} ({b * t} tokens/step, {fl / 1e9:.1f} GFLOP/step by llm.c's count), {threads} threads\n")
    print("| trainer | s/step | tokens/s | peak RSS | % of FMA peak | % of bf16 peak | amp / llm.c | amp / PyTorch best |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for k, r in rows.items():
        if "times" not in r:
            print(f"| {k} | {r.get('error', r.get('skip', '?'))[:120]} | | | | | | |")
            continue
        pk = fma_avx2 if k.endswith("-avx2") else fma
        r["frac_fma_peak"] = r["gflops"] / pk if pk else None
        isbf16 = "bf16" in k
        r["frac_bf16_peak"] = r["gflops"] / (fma_avx2 if k.endswith("-avx2") else bf16) if isbf16 and bf16 else None
        amp = k.startswith("amp")
        r["vs_llmc"] = r["tokens_per_s"] / llmc if amp and llmc else None
        r["vs_torch_best"] = r["tokens_per_s"] / torch_best if amp and torch_best else None

        def pct(x):
            return f"{100 * x:.1f}%" if x is not None else ""

        def ratio(x):
            return f"{x:.2f}x" if x is not None else ""

        print(f"| {k} | {r['s_per_step']:.3f} | {r['tokens_per_s']:.0f} | {fmt_rss(r.get('rss'))} | "
              f"{pct(r['frac_fma_peak'])} | {pct(r['frac_bf16_peak'])} | {ratio(r['vs_llmc'])} | {ratio(r['vs_torch_best'])} |")
    print()
    for k, r in rows.items():
        if "times" in r:
            rm = " ".join(f"{x:.3f}" for x in r["round_medians"])
            print(f"  {k}: steps {' '.join(f'{x:.3f}' for x in r['times'])} s; round medians {rm} s"
                  + (f"; {r['note']}" if r.get("note") else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--configs", default="4x64", help="BxT,... (e.g. 4x64,8x1024)")
    ap.add_argument("--steps", default="4", help="timed steps per trainer (N, or N,M,... per configuration)")
    ap.add_argument("--warmup", default="2", help="untimed steps before them, >= 1 (N, or one per configuration)")
    ap.add_argument("--trainers", default=",".join(ALL_TRAINERS))
    ap.add_argument("--llmc-dir", default=os.environ.get("LLMC_DIR", ""))
    ap.add_argument("--llmc-cflags", default=LLMC_CFLAGS)
    ap.add_argument("--json", nargs="?", const="-", help="write the results to this file (alone: to stdout, last line)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", default="1", help="run every trainer this many times, interleaved (N, or one per "
                    "configuration)")
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    configs = [tuple(int(x) for x in c.split("x")) for c in args.configs.split(",")]
    # per configuration: a list shorter than --configs repeats its last value
    per = {k: [int(x) for x in getattr(args, k).split(",")] for k in ("steps", "warmup", "rounds")}
    plan = {c: {k: v[min(i, len(v) - 1)] for k, v in per.items()} for i, c in enumerate(configs)}
    if args.torch_worker:
        b, t = configs[0]
        torch_worker(args.torch_worker, args.threads, b, t, plan[(b, t)]["warmup"], plan[(b, t)]["steps"], args.seed)
        return
    trainers = args.trainers.split(",")
    bad = [k for k in trainers if k not in ALL_TRAINERS]
    if bad or min(per["warmup"]) < 1 or min(per["steps"]) < 1 or min(per["rounds"]) < 1:
        sys.exit(f"error: unknown trainers {bad} (known: {','.join(ALL_TRAINERS)}), or --steps/--warmup < 1")
    if not os.access(AMP, os.X_OK):
        sys.exit(f"error: {AMP} not found (run make)")
    cpu = cpu_id()
    try:
        from write_benchmarks_md import cpu_kind_of  # the CPU kind, as docs/benchmarks.md names it
        kind = cpu_kind_of({"cpu_id": cpu, "cpu": cpu.get("model name")})
    except Exception:
        kind = cpu.get("model name", "?")
    load_start = os.getloadavg()[0]
    print(f"CPU: {kind} ({cpu.get('model name', '?')}; {', '.join(cpu.get('isa', []))}), {args.threads} threads, "
          f"load average {load_start:.2f} at start")
    peak = measure_peak(args.threads, {}, 10)
    print("one core's peak at the start, GFLOP/s (amp bench gemm): " + ", ".join(f"{k} {v:.1f}" for k, v in peak.items()))
    llmc_ok = args.llmc_dir and os.path.isfile(os.path.join(args.llmc_dir, "train_gpt2.c"))
    if "llmc" in trainers and not llmc_ok:
        print("note: llm.c skipped (set LLMC_DIR or --llmc-dir to a checkout of karpathy/llm.c)")
    results = dict(bench="gpt2_vs_peers", date=time.strftime("%Y-%m-%d", time.gmtime()), cpu=cpu.get("model name"),
                   cpu_id=cpu, cpu_kind=kind, threads=args.threads, peak_gflops_per_core=peak, n_params=N_PARAMS,
                   llmc_cflags=args.llmc_cflags, configs={},
                   plan={f"{b}x{t}": p for (b, t), p in plan.items()})
    with tempfile.TemporaryDirectory(prefix="gpt2-vs-peers-") as tmp:
        need = max((plan[c]["warmup"] + plan[c]["steps"] + 2) * c[0] * c[1] + 1 for c in configs)
        shard = os.path.join(tmp, "tokens.bin")
        write_shard(shard, max(need, 1 << 16), args.seed)
        ckpt = make_checkpoint(tmp, shard, args.threads)
        for b, t in configs:
            rows = {}
            warmup, steps = plan[(b, t)]["warmup"], plan[(b, t)]["steps"]
            for rnd in range(plan[(b, t)]["rounds"]):
                for k in trainers:
                    t0 = time.perf_counter()
                    if k == "llmc":
                        if not llmc_ok:
                            continue
                        if llmc_bytes(b, t) > 0.9 * available_bytes():
                            rows[k] = dict(skip=f"skipped: needs {llmc_bytes(b, t) / 2**30:.1f} GiB, "
                                                f"{available_bytes() / 2**30:.1f} GiB available")
                            continue
                        if rnd == 0:
                            llmc_build, err = build_llmc(args.llmc_dir, tmp, b, t, warmup + steps, args.llmc_cflags)
                        r = run_llmc(llmc_build, args.threads, warmup, ckpt, shard) if llmc_build else dict(error=err)
                    elif k.startswith("torch"):
                        r = run_torch(k.split("-")[1], args.threads, b, t, warmup, steps)
                    else:
                        r = run_amp(k, args.threads, b, t, warmup, steps, ckpt, shard)
                    rows[k] = merge(rows.get(k), r)
                    print(f"  round {rnd + 1}: ran {k} B={b} T={t} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
                    measure_peak(args.threads, peak, 2)
            results["configs"][f"{b}x{t}"] = rows
    # the tables once every trainer has run: each fraction over the best peak of the whole run
    for b, t in configs:
        table((b, t), results["configs"][f"{b}x{t}"], peak, args.threads)
    print("one core's peak, best of the run, GFLOP/s: " + ", ".join(f"{k} {v:.1f}" for k, v in peak.items()))
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end; llm.c built with {args.llmc_cflags}; "
          f"FLOPs: llm.c's (6 N + 6 L C T) x B T, N = {N_PARAMS}")
    results["peak_gflops_per_core"] = peak  # the best of the whole run, which the tables used
    results["load_average"] = [round(load_start, 2), round(os.getloadavg()[0], 2)]  # at the start and the end
    if args.json == "-":
        print(json.dumps(results))
    elif args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
