#!/usr/bin/env python3
"""Writes docs/benchmarks.md, and the speed tables of README.md, from benchmark results in JSON.

    python3 bench/write_benchmarks_md.py [--check]
        reads bench/results/*.json and writes docs/benchmarks.md and the block of README.md between
        its two "speed tables" markers (--check: writes nothing, exits 1 if either is out of date)

    python3 bench/write_benchmarks_md.py record [--cpu-kind NAME] [--machine TEXT] -- COMMAND...
        runs a benchmark that prints one JSON object on its last line, passes its output through, and
        saves that object with the date, the command, the CPU and amp's commit as
        bench/results/<cpu kind>-<benchmark>[-<threads>t].json (replacing an older run of the same):
            python3 bench/train_vs_pytorch.py --threads 1 --rounds 5 --json
            python3 bench/convert_vs_numpy.py --json
            LLMC_DIR=DIR python3 bench/gpt2_vs_peers.py --threads 2 --rounds 3 --json
            python3 bench/tokenize_vs_tiktoken.py --json
            build/amp bench convert|gemm|unscale [...] --json

A result file is either a benchmark's JSON as printed, or {"cpu_kind", "cpu", "machine", "date",
"command", "amp_commit", "environment", "source", "notes": [...], "result": <the benchmark's JSON>}
as `record` writes it. The CPU kind (a row of docs/benchmarks.md) is "cpu_kind" when given, else
the core named from /proc/cpuinfo's vendor, family and model (`cpu_id`), else the model name; any
number of kinds is fine. The tables are never typed: change this script or rerun the benchmarks.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

from cpuinfo import cpu_id

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
README = os.path.join(ROOT, "README.md")
README_BEGIN = "<!-- speed tables: written by bench/write_benchmarks_md.py from bench/results/*.json -->"
README_END = "<!-- end of speed tables -->"
MODELS = ["mlp", "cnn", "lstm", "gpt"]
PRECISIONS = ["fp32", "bf16", "fp16"]

# (vendor, family, first model, last model) -> the core's name: enough to tell apart the machines
# amp is measured on; anything else falls back to /proc/cpuinfo's model name (or --cpu-kind).
CORES = [
    ("AuthenticAMD", 0x17, 0x00, 0x2F, "AMD Zen / Zen+"),
    ("AuthenticAMD", 0x17, 0x30, 0xFF, "AMD Zen 2"),
    ("AuthenticAMD", 0x19, 0x00, 0x0F, "AMD Zen 3"),
    ("AuthenticAMD", 0x19, 0x10, 0x1F, "AMD Zen 4"),
    ("AuthenticAMD", 0x19, 0x20, 0x5F, "AMD Zen 3"),
    ("AuthenticAMD", 0x19, 0x60, 0xAF, "AMD Zen 4"),
    ("AuthenticAMD", 0x1A, 0x00, 0xFF, "AMD Zen 5"),
    ("GenuineIntel", 6, 0x55, 0x55, "Intel Skylake-SP / Cascade Lake"),
    ("GenuineIntel", 6, 0x6A, 0x6C, "Intel Ice Lake-SP"),
    ("GenuineIntel", 6, 0x8F, 0x8F, "Intel Sapphire Rapids"),
    ("GenuineIntel", 6, 0xCF, 0xCF, "Intel Emerald Rapids"),
    ("GenuineIntel", 6, 0xAD, 0xAE, "Intel Granite Rapids"),
]

METHOD = """\
<!-- Written by bench/write_benchmarks_md.py from bench/results/*.json: change those, not this file. -->

# Benchmarks

amp's speed, measured against the fastest thing to compare it with in the same run: PyTorch's CPU
autocast for training, memcpy and numpy for conversions, the core's own measured peak and OpenBLAS
for the GEMM. This page is written by `bench/write_benchmarks_md.py` from the JSON results in
`bench/results/`; its tables are never typed by hand. The speed tables in the README come from the
same files.

## What is measured

**Training against PyTorch** (`bench/train_vs_pytorch.py`). Each of amp's four default models
(`amp/nn.h`: mlp, cnn, lstm, gpt) is trained in amp (`amp bench train --json`) and in PyTorch (the
same architecture written in the script: `nn.Sequential` for the mlp and the cnn, `nn.LSTM`,
nanoGPT's blocks with `scaled_dot_product_attention`), with the same batch (mlp 256, cnn 128, lstm
and gpt 32), synthetic data of the same shapes, SGD with momentum 0.9 and the same thread count
(`--threads`; `torch.set_num_threads`), in three precisions: fp32; bf16 autocast; fp16 autocast
with a dynamic GradScaler (`torch.autocast("cpu")`, `torch.amp.GradScaler("cpu")`).

- What is timed: a fixed number of steady-state training steps (forward, backward, optimizer),
  after warm-up steps that are not timed (PyTorch's worker process is warmed once and kept alive,
  so its oneDNN set-up is paid once; amp runs untimed steps in each process).
- Ratios from one run: amp's and PyTorch's samples alternate, one of each per round, so load on a
  shared machine hits both alike; each figure is the median of the rounds (`--rounds`), and
  "best / best" compares each side's fastest sample, the least disturbed one.
- "% of peak": amp's samples/s x the FLOPs amp computes per sample, against the threads x one
  core's peak, which amp measures itself in each process with register-only loops of the widest
  FMA (and of VDPBF16PS where the core has AVX512-BF16); bf16 is rated against the larger of the
  two, since amp multiplies bf16 with whichever the core runs faster (`amp info` says which). The
  best peak of the run's processes is the yardstick. FLOPs per sample are 2 x the multiply-adds of
  the matrix products, convolutions and attention, x 3 for forward and backward; the lstm, whose
  embedding amp folds into the input projection, computes 85% of the count PyTorch computes.
- "goal": amp is held to 1.2x PyTorch in fp32 and fp16 and 1.5x in bf16, or 85% of the peak where
  that is less (a model near the hardware's limit cannot be asked for more); fp16 has no such cap.
- Also from the same run: the GradScaler's share of amp's fp16 step, timed inside the step (the
  optimizer phase with the scaler minus the same phase of an interleaved run without it: the
  samples/s of two runs on a shared machine differ by more than the scaler costs); the unscale +
  inf/NaN check against memcpy; activation memory kept for backward in bf16 against fp32; heap
  allocations per steady-state step (`bench/malloc_count.c`, preloaded: the difference between a
  4-step and a 2-step run, halved).
- PyTorch's fp16 autocast on a CPU without AVX512-FP16 runs its matrix products through slow
  fallbacks, and oneDNN refuses its fp16 LSTM (and its bf16 LSTM without AVX512-BF16; the script
  then runs PyTorch's own kernel, as a user would have to): there amp's 16-bit rows read tens of
  times faster, which says more about those fallbacks than about amp.

**GPT-2 124M against llm.c and PyTorch** (`bench/gpt2_vs_peers.py`). GPT-2 124M (12 layers, width
768, GPT-2's vocabulary of 50257) trained at B=4, T=64 (llm.c's CPU shapes) by llm.c's fp32
`train_gpt2.c` (built from a checkout given by `LLMC_DIR`, patched only in B, T, the step count and
no evaluation), by the same GPT-2 written in PyTorch (fp32 and bf16 autocast) and by `amp train --model
gpt2 --size 124m` in fp32, amp-bf16 and amp-fp16, each in a fresh process, the trainers in turn over
several rounds, AdamW with the same settings on the same random tokens; llm.c and amp start from the
same llm.c model file. tokens/s is B x T over the median step; "% of peak" counts llm.c's FLOPs per
token, (6 N + 6 L C T), against the threads x one core's measured FMA peak (bf16 rows: the bf16 peak, the fastest of the FMA,
VDPBF16PS and AMX's TDPBF16PS);
peak RSS is each trainer's process's.

**Tokenizer against tiktoken** (`bench/tokenize_vs_tiktoken.py`): the King James Bible (Debian's
`bible-kjv`) into cl100k_base tokens, the whole `amp tokenize` command against tiktoken's call on the
text already in memory, alternating, medians; amp's tokens are checked equal to tiktoken's.

**Conversions** (`bench/convert_vs_numpy.py`, `amp bench convert`): one thread, 64 MiB of fp32 per
conversion, median of 9. GB/s counts bytes read plus bytes written, for memcpy too, so 100% means
"as fast as memcpy". A conversion can exceed 100%: it writes fewer bytes than it reads, and writes
cost more than reads. numpy is timed on the same data in the same run, with `astype` (allocates its
result each call) and `np.copyto` into a preallocated array; bf16 and fp8 are ml_dtypes' types.

**GEMM** (`amp bench gemm`): amp_gemm on the 1024^3 shape and the models' shapes, as A*B, A^T*B
and A*B^T, for f32, f16 and bf16 inputs (fp32 accumulation), against the core's peak measured in the
same run, and OpenBLAS's `cblas_sgemm` (Debian's `libopenblas0`, loaded at run time) with the same
threads. With N threads "% of peak" is against N x the one-core peak; on a shared virtual machine
the cores running the peak loop together reach less (printed as "threads at once").

**GradScaler unscale** (`amp bench unscale`): the in-place unscale + inf/NaN check over 64 MiB of
gradients, one thread, bytes read + written against memcpy's. An in-place pass writes back lines it
already holds, hence more than 100%.

On a virtual machine whose vCPUs the host shares with its neighbours (those below have 2 vCPUs),
single samples move by tens of percent between runs, which is why every ratio here is taken within
one run, and why a row near its goal can read met in one run and missed in the next.

## How to reproduce

```sh
make && pip install torch numpy ml_dtypes          # torch from PyPI, CPU build
python3 bench/train_vs_pytorch.py --threads 1 --rounds 5
python3 bench/train_vs_pytorch.py --threads 2 --rounds 3
python3 bench/convert_vs_numpy.py
build/amp bench gemm --threads 1
build/amp bench unscale
LLMC_DIR=path/to/llm.c python3 bench/gpt2_vs_peers.py --threads 2 --rounds 3   # a checkout of karpathy/llm.c
python3 bench/tokenize_vs_tiktoken.py                                          # apt-get install bible-kjv
```

To add a machine, or replace its results, record each run and write this page again:

```sh
python3 bench/write_benchmarks_md.py record -- python3 bench/train_vs_pytorch.py --threads 1 --rounds 5 --json
python3 bench/write_benchmarks_md.py record -- build/amp bench gemm --threads 1 --json
LLMC_DIR=path/to/llm.c python3 bench/write_benchmarks_md.py record -- python3 bench/gpt2_vs_peers.py \
    --threads 2 --configs 4x64 --rounds 3 --trainers llmc,torch-fp32,torch-bf16,amp-fp32,amp-bf16,amp-fp16 --json
python3 bench/write_benchmarks_md.py record -- python3 bench/tokenize_vs_tiktoken.py --json
python3 bench/write_benchmarks_md.py     # bench/results/*.json -> docs/benchmarks.md and the README's tables
```

`record` names the CPU from /proc/cpuinfo (`--cpu-kind NAME` overrides it) and keeps one file per
CPU kind, benchmark and thread count: a new run replaces the old one.
"""


# ---------------------------------------------------------------- reading results


def cpu_kind_of(meta):
    if meta.get("cpu_kind"):
        return meta["cpu_kind"]
    cid = meta.get("cpu_id") or {}
    try:
        vendor, family, model = cid["vendor_id"], int(cid["cpu family"]), int(cid["model"])
    except (KeyError, ValueError):
        return meta.get("cpu") or "unknown CPU"
    for v, f, lo, hi, name in CORES:
        if v == vendor and f == family and lo <= model <= hi:
            return name
    return meta.get("cpu") or "unknown CPU"


def load(path):
    with open(path) as f:
        obj = json.load(f)
    if "result" in obj:
        meta, result = {k: v for k, v in obj.items() if k != "result"}, obj["result"]
    else:  # a benchmark's JSON as printed
        meta, result = dict(obj), obj
    bench = result.get("bench") or ("train_vs_pytorch" if "rows" in result else "unknown")
    meta.setdefault("cpu", result.get("cpu"))
    meta.setdefault("cpu_id", result.get("cpu_id"))
    meta.setdefault("command", result.get("command", ""))
    meta.setdefault("date", result.get("date", ""))
    meta.setdefault("notes", [])
    return dict(kind=cpu_kind_of(meta), bench=bench, threads=result.get("threads", 1), meta=meta, result=result,
                path=os.path.relpath(path, ROOT))


# ---------------------------------------------------------------- formatting


def table(header, rows, align):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def num(v, fmt, suffix=""):
    return "–" if v is None else format(v, fmt) + suffix


def shown_command(cmd):
    """The command as a reader would type it: no --json (record's), no leading nice."""
    return re.sub(r"^nice\s+(-n\s*\d+\s+)?", "", re.sub(r"\s+--json\b", "", cmd or "").strip())


def caption(title, e):
    m, r = e["meta"], e["result"]
    facts = [m["date"]] if m.get("date") else []
    if m.get("amp_commit"):
        facts.append(f"amp {m['amp_commit']}")
    if r.get("torch_version") and r.get("bench") == "train_vs_pytorch":
        facts.append(f"torch {r['torch_version']}")
    if m.get("environment"):
        facts.append(m["environment"])
    out = [f"#### {title}", "", f"{'; '.join(facts)}:" if facts else "", ""]
    if m.get("command"):
        out += ["```sh", shown_command(m["command"]), "```", ""]
    return out


def footer(e, computed):
    load = e["result"].get("load_average")
    if load:  # on a shared machine, what else ran matters
        computed = computed + [f"load average {load[0]:.1f} at the start of the run, {load[1]:.1f} at its end"]
    lines = [f"- {n}" for n in e["meta"].get("notes", []) + computed]
    if e["meta"].get("source"):
        lines.append(f"- {e['meta']['source'][0].upper()}{e['meta']['source'][1:]}.")
    return lines + [""] if lines else []


def pct_range(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    lo, hi = min(values), max(values)
    return f"{100 * lo:.0f}%" if round(100 * lo) == round(100 * hi) else f"{100 * lo:.0f}-{100 * hi:.0f}%"


# ---------------------------------------------------------------- one section per benchmark


def train_summary(r):
    """What the run measured besides the table, where its JSON has it (a run of the script)."""
    rows, out = r.get("rows", []), []
    shares = []
    for row in rows:
        if row.get("opt_ms") is not None and row.get("opt_ms_off") is not None and row.get("amp"):
            step_ms = 1e3 * row["batch"] / row["amp"]
            shares.append(f"{row['model']} {100 * (row['opt_ms'] - row['opt_ms_off']) / step_ms:+.2f}%")
    if shares:
        out.append("GradScaler share of the amp-fp16 step by the phase (optimizer+scaler minus optimizer, "
                   "timed inside the step): " + ", ".join(shares))
    unscale = pct_range([u.get("vs_memcpy") for u in (r.get("unscale") or {}).get("results", [])])
    if unscale:
        out.append(f"unscale + inf/NaN check: {unscale} of memcpy")
    act = []
    for model in MODELS:
        f32 = next((x for x in rows if x["model"] == model and x["precision"] == "fp32"), None)
        b16 = next((x for x in rows if x["model"] == model and x["precision"] == "bf16"), None)
        if f32 and b16 and f32.get("act") and b16.get("act") is not None:
            act.append(f"{model} {b16['act'] / f32['act']:.2f}")
    if act:
        out.append("activation memory kept for backward, bf16 / fp32: " + ", ".join(act))
    allocs = [x["allocs"] for x in rows if x.get("allocs") is not None]
    if allocs:
        out.append("heap allocations per steady-state step: " +
                   ("0 in every row" if max(allocs) == 0 else ", ".join(f"{x['model']} {x['precision']} {x['allocs']:g}"
                                                                       for x in rows if x.get("allocs"))))
    gemm = (r.get("gemm") or {}).get("results", [])
    if gemm:
        shapes = {}
        for g in gemm:
            shapes.setdefault((f"{g['m']}x{g['n']}x{g['k']}", g["dtype"]), []).append(g["of_peak"])
        out.append("GEMM at the models' shapes, % of peak: " +
                   ", ".join(f"{s} {d} {pct_range(v)}" for (s, d), v in shapes.items()))
    return out


def train_section(e):
    r, t = e["result"], e["threads"]
    out = caption(f"Training against PyTorch, {t} thread{'s' if t > 1 else ''}", e)
    peak = r.get("peak") or {}
    if peak.get("fma"):
        dot = (f"VDPBF16PS {peak['vdpbf16ps']:.1f} GFLOP/s" if peak.get("vdpbf16ps")
               else "VDPBF16PS slower than the FMA or absent (bf16 rated against the FMA)")
        out += [f"One core's measured peak (best of the run's processes): FMA {peak['fma']:.1f} GFLOP/s, {dot}.", ""]
    rows = []
    for x in sorted(r.get("rows", []), key=lambda x: (MODELS.index(x["model"]) if x["model"] in MODELS else 9,
                                                      PRECISIONS.index(x["precision"]))):
        rows.append([x["model"], x["precision"], num(x.get("batch"), "d"), num(x.get("amp"), ".1f"),
                     num(x.get("torch"), ".1f"), num(x.get("ratio"), ".2f", "x"), num(x.get("best_ratio"), ".2f", "x"),
                     num(None if x.get("fraction_of_peak") is None else 100 * x["fraction_of_peak"], ".1f", "%"),
                     "–" if x.get("met") is None else ("met" if x["met"] else "missed")])
    out += table(["model", "precision", "batch", "amp samples/s", "PyTorch samples/s", "amp / PyTorch", "best / best",
                  "% of peak", "goal"], rows, "llrrrrrrl")
    return out + [""] + footer(e, train_summary(r))


def convert_vs_numpy_section(e):
    r = e["result"]
    out = caption("Conversions against numpy, 1 thread", e)
    np_ver = f"numpy {r.get('numpy')}, ml_dtypes {r.get('ml_dtypes') or 'absent'}"
    out += [f"memcpy: {r.get('memcpy_gbps', 0):.2f} GB/s in amp's run (glibc), {r.get('numpy_memcpy_gbps', 0):.2f} GB/s "
            f"in numpy's (`np.copyto`); {r.get('mib', 64)} MiB of fp32 per conversion; {np_ver}.", ""]
    rows = [[f"{x['src']} → {x['dst']}", x["isa"], num(x["gbps"], ".2f"), num(100 * x["vs_memcpy"], ".0f", "%"),
             num(x.get("np_astype_gbps"), ".2f"), num(x.get("np_copyto_gbps"), ".2f"),
             num(x.get("amp_over_astype"), ".1f", "x"), num(x.get("amp_over_copyto"), ".1f", "x")]
            for x in r.get("results", [])]
    out += table(["conversion", "amp path", "amp GB/s", "vs memcpy", "np.astype GB/s", "np.copyto GB/s",
                  "amp / astype", "amp / copyto"], rows, "llrrrrrr")
    return out + [""] + footer(e, [])


def convert_section(e):
    r = e["result"]
    out = caption("Conversions, 1 thread", e)
    out += [f"memcpy: {r.get('memcpy_gbps', 0):.2f} GB/s; {r.get('mib', 64)} MiB of fp32 per conversion.", ""]
    rows = [[f"{x['src']} → {x['dst']}", x["isa"], num(x["gbps"], ".2f"), num(100 * x["vs_memcpy"], ".0f", "%")]
            for x in r.get("results", [])]
    out += table(["conversion", "path", "GB/s", "vs memcpy"], rows, "llrr")
    return out + [""] + footer(e, [])


def gemm_section(e):
    r, t = e["result"], e["threads"]
    out = caption(f"GEMM, {t} thread{'s' if t > 1 else ''}", e)
    p = r.get("peak_gflops_per_core") or {}
    line = (f"One core's measured peak: FMA zmm {p.get('fma_zmm', 0):.1f}, FMA ymm {p.get('fma_ymm', 0):.1f}, "
            f"VDPBF16PS zmm {p.get('vdpbf16ps_zmm', 0):.1f}" +
            (f", AMX TDPBF16PS {p['tdpbf16ps']:.1f}" if p.get("tdpbf16ps") else "") + " GFLOP/s")
    a = r.get("peak_gflops_all_threads") or {}
    if t > 1 and any(a.values()):
        line += (f"; {t} threads at once: FMA zmm {a.get('fma_zmm', 0):.1f}, FMA ymm {a.get('fma_ymm', 0):.1f}, "
                 f"VDPBF16PS zmm {a.get('vdpbf16ps_zmm', 0):.1f}" +
                 (f", AMX TDPBF16PS {a['tdpbf16ps']:.1f}" if a.get("tdpbf16ps") else "") +
                 f" GFLOP/s (% of peak uses {t} x one core's)")
    out += [line + ".", ""]
    rows = [[f"{x['m']}x{x['n']}x{x['k']}", x["op"].replace("*", "·"), x["dtype"], num(x["ms"], ".3f"), num(x["gflops"], ".1f"),
             num(100 * x["of_peak"], ".0f", "%"), num(x.get("openblas_gflops") or None, ".1f"),
             num(x.get("vs_openblas") or None, ".2f", "x")] for x in r.get("results", [])]
    out += table(["M x N x K", "op", "dtype", "ms", "GFLOP/s", "% of peak", "OpenBLAS GFLOP/s", "vs OpenBLAS"], rows,
                 "lllrrrrr")
    return out + [""] + footer(e, [])


def unscale_section(e):
    r = e["result"]
    out = caption("GradScaler unscale + inf/NaN check, 1 thread", e)
    out += [f"memcpy: {r.get('memcpy_gbps', 0):.2f} GB/s (read + write); {r.get('mib', 64)} MiB of gradients per dtype.", ""]
    rows = [[x["dtype"], x["isa"], x["pass"], num(x["gbps"], ".2f"), num(x.get("melem_per_s"), ".1f"),
             num(100 * x["vs_memcpy"], ".0f", "%")] for x in r.get("results", [])]
    out += table(["dtype", "path", "pass", "GB/s", "Melem/s", "vs memcpy"], rows, "lllrrr")
    return out + [""] + footer(e, [])


# bench/gpt2_vs_peers.py's trainers, in the order of its tables, with the names the tables give them
GPT2_TRAINERS = [("llmc", "llm.c (fp32)"), ("torch-fp32", "PyTorch fp32"), ("torch-bf16", "PyTorch bf16 autocast"),
                 ("amp-fp32", "amp fp32"), ("amp-bf16", "amp amp-bf16"), ("amp-fp16", "amp amp-fp16"),
                 ("amp-bf16-pure", "amp bf16-pure"), ("amp-fp32-avx2", "amp fp32, AVX2"),
                 ("amp-bf16-avx2", "amp amp-bf16, AVX2")]


def gpt2_rows(cfg_rows):
    """(name, row) for the trainers a configuration ran, in GPT2_TRAINERS' order; amp / llm.c for every row."""
    llmc = (cfg_rows.get("llmc") or {}).get("tokens_per_s")
    out = []
    for key, name in GPT2_TRAINERS:
        x = cfg_rows.get(key)
        if x is None:
            continue
        x = dict(x)
        x["vs_llmc_all"] = x["tokens_per_s"] / llmc if llmc and x.get("tokens_per_s") else None
        # bf16 rows are rated against the bf16 peak (the larger of VDPBF16PS's and the FMA's)
        x["of_peak"] = x.get("frac_bf16_peak") if x.get("frac_bf16_peak") is not None else x.get("frac_fma_peak")
        out.append((name, x))
    return out


def gpt2_cells(x):
    if x.get("tokens_per_s") is None:
        return [(x.get("skip") or x.get("error") or "not run")[:80], "", "", ""]
    return [num(x["tokens_per_s"], ".0f"), num(x["vs_llmc_all"], ".2f", "x"),
            num(None if x["of_peak"] is None else 100 * x["of_peak"], ".1f", "%"),
            num(x.get("rss"), ".0f", " MiB")]


def gpt2_section(e):
    r, t = e["result"], e["threads"]
    out = []
    for cfg, cfg_rows in r.get("configs", {}).items():
        b, tt = (int(v) for v in cfg.split("x"))
        out += caption(f"GPT-2 124M training against llm.c and PyTorch, B={b} T={tt}, {t} thread{'s' if t > 1 else ''}", e)
        p = r.get("peak_gflops_per_core") or {}
        out += [f"One core's measured peak (best of the run): FMA zmm {p.get('fma_zmm', 0):.1f}, FMA ymm "
                f"{p.get('fma_ymm', 0):.1f}, VDPBF16PS zmm {p.get('vdpbf16ps_zmm', 0):.1f}" +
                (f", AMX TDPBF16PS {p['tdpbf16ps']:.1f}" if p.get("tdpbf16ps") else "") + " GFLOP/s.", ""]
        rows = [[name] + gpt2_cells(x) + [num(x.get("s_per_step"), ".3f")] for name, x in gpt2_rows(cfg_rows)]
        out += table(["trainer", "tokens/s", "vs llm.c", "% of peak", "peak RSS", "s/step"], rows, "lrrrrr")
        rounds = max((len(x.get("round_medians", [])) for x in cfg_rows.values()), default=0)
        plan = (r.get("plan") or {}).get(cfg) or r  # per configuration; older results have one plan for all
        notes = [f"tokens/s: B x T over the median step time of {plan.get('steps', '?')} timed steps (after "
                 f"{plan.get('warmup', '?')} untimed ones) per trainer and round, {rounds} round{'s' if rounds != 1 else ''}, "
                 "the trainers in turn; peak RSS: each trainer's process",
                 "% of peak: llm.c's FLOP count, (6 N + 6 L C T) per token, over the threads x one core's FMA peak; "
                 "bf16 rows over the bf16 peak (the largest of the FMA's, VDPBF16PS's and AMX's TDPBF16PS's); AVX2 rows over the ymm FMA's",
                 f"llm.c: train_gpt2.c built with {r.get('llmc_cflags', '?')}, fp32; llm.c and amp start from the same "
                 "llm.c model file, PyTorch from its own initialisation; all AdamW (lr 1e-4, weight decay 0) on the "
                 "same random tokens"]
        versions = sorted({x["note"].split(",")[0] for x in cfg_rows.values() if str(x.get("note", "")).startswith("torch")})
        if versions:
            notes.append("PyTorch: " + ", ".join(versions))
        out += [""] + footer(e, notes)
    return out


def tokenize_section(e):
    r = e["result"]
    out = caption("Tokenizer against tiktoken (cl100k_base, the King James Bible)", e)
    mb = r.get("bytes", 0) / 1e6
    out += [f"{mb:.2f} MB of text, {r.get('tokens', 0)} tokens, amp's equal to tiktoken's token for token; "
            f"medians of {r.get('repeats', '?')} alternating runs; tiktoken {r.get('tiktoken_version', '?')}.", ""]
    rows = []
    for x in r.get("rows", []):
        what = "encode_ordinary" if x["threads"] == 1 else "encode_ordinary_batch"
        rows.append([str(x["threads"]), num(x["amp_s"], ".3f"), num(mb / x["amp_s"], ".1f"), num(x["tiktoken_s"], ".3f"),
                     num(mb / x["tiktoken_s"], ".1f"), what, num(x["ratio"], ".2f", "x")])
    out += table(["threads", "amp s", "amp MB/s", "tiktoken s", "tiktoken MB/s", "tiktoken call", "tiktoken time / amp time"],
                 rows, "rrrrrlr")
    notes = ["amp: the whole `amp tokenize` command (process start, loading the ranks, encoding, writing the shard); "
             "tiktoken: the call on the text already in memory, its ranks loaded beforehand",
             "2 threads: amp cuts one file where the pre-tokenizer stands (the same tokens); tiktoken's batch call "
             "takes the text cut into 64 pieces at newlines"]
    return out + [""] + footer(e, notes)


SECTIONS = [("train_vs_pytorch", train_section), ("gpt2_vs_peers", gpt2_section), ("convert_vs_numpy", convert_vs_numpy_section),
            ("convert", convert_section), ("gemm", gemm_section), ("unscale", unscale_section),
            ("tokenize_vs_tiktoken", tokenize_section)]


# ---------------------------------------------------------------- the page and the README's block


def by_kind(entries):
    kinds = {}
    for e in entries:
        kinds.setdefault(e["kind"], []).append(e)
    # the most recent training run first, so a newly measured machine leads
    def newest(k):
        dates = [e["meta"]["date"] for e in kinds[k] if e["bench"] == "train_vs_pytorch"] or [""]
        return max(dates)
    return sorted(kinds.items(), key=lambda kv: (newest(kv[0]), kv[0]), reverse=True)


def machine_line(es):
    m = next((e["meta"]["machine"] for e in es if e["meta"].get("machine")), None)
    return m or next((e["meta"]["cpu"] for e in es if e["meta"].get("cpu")), "")


def glance(kinds):
    """One table per CPU kind: amp / PyTorch samples/s for each model, precision and thread count."""
    out = []
    for kind, es in kinds:
        train = sorted((e for e in es if e["bench"] == "train_vs_pytorch"), key=lambda e: e["threads"])
        if not train:
            continue
        dates = sorted({e["meta"]["date"] for e in train if e["meta"].get("date")})
        out += [f"**{kind}**: {machine_line(es)}; {', '.join(dates)}:", "", "```sh"]
        out += [shown_command(e["meta"]["command"]) for e in train] + ["```", ""]
        header, align = ["amp / PyTorch"], "l"
        for e in train:
            t = e["threads"]
            header += [f"{p}, {t} thread{'s' if t > 1 else ''}" if p == "fp32" else p for p in PRECISIONS]
            align += "rrr"
        rows = []
        for model in MODELS:
            cells = [model]
            for e in train:
                for p in PRECISIONS:
                    x = next((x for x in e["result"].get("rows", []) if x["model"] == model and x["precision"] == p), None)
                    cells.append(num(x.get("ratio") if x else None, ".2f", "x"))
            if any(c != "–" for c in cells[1:]):
                rows.append(cells)
        out += table(header, rows, align) + [""]
    return out


def write_page(entries):
    kinds = by_kind(entries)
    out = METHOD.splitlines() + ["", "## At a glance", "",
                                 "amp's training samples/s over PyTorch's, in the same run, per model, precision and "
                                 "thread count (the full tables are below).", ""]
    out += glance(kinds)
    out += readme_gpt2_tables(kinds)
    out += ["## Results per CPU", ""]
    for kind, es in kinds:
        out += [f"### {kind}", "", machine_line(es) + ".", ""]
        for bench, section in SECTIONS:
            for e in sorted((e for e in es if e["bench"] == bench), key=lambda e: e["threads"]):
                out += section(e)
    unknown = [e["path"] for e in entries if e["bench"] not in dict(SECTIONS)]
    if unknown:
        raise SystemExit(f"write_benchmarks_md: no section for {', '.join(unknown)}")
    text = "\n".join(out)
    text = re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"
    return text


def readme_train_table(kinds):
    """amp / PyTorch samples/s, one row per CPU kind and model, 1 and 2 threads (docs/benchmarks.md has the rest)."""
    header = ["amp / PyTorch", "model"] + [f"{p}, {t} thread{'s' if t > 1 else ''}" if p == "fp32" else p
                                            for t in (1, 2) for p in PRECISIONS]
    rows, dates = [], []
    for kind, es in kinds:
        train = {e["threads"]: e for e in es if e["bench"] == "train_vs_pytorch"}
        if not train:
            continue
        dates.append(f"{kind} {max(e['meta'].get('date', '') for e in train.values())}")
        for i, model in enumerate(MODELS):
            cells = []
            for t in (1, 2):
                for p in PRECISIONS:
                    x = next((x for x in (train[t]["result"].get("rows", []) if t in train else [])
                              if x["model"] == model and x["precision"] == p), None)
                    cells.append(num(x.get("ratio") if x else None, ".2f", "x"))
            if any(c != "–" for c in cells):
                rows.append([f"**{kind}**" if i == 0 else "", model] + cells)
    if not rows:
        return []
    return (["Training samples/s, amp over PyTorch (`python3 bench/train_vs_pytorch.py --threads 1|2`; "
             + "; ".join(dates) + "):", ""] + table(header, rows, "ll" + "r" * 6) + [""])


def readme_gpt2_tables(kinds, first_config_only=False):
    """GPT-2 124M, one table per CPU kind and configuration (the README: the first, llm.c's B=4 T=64):
    llm.c, PyTorch and amp."""
    out = []
    for kind, es in kinds:
        for e in sorted((e for e in es if e["bench"] == "gpt2_vs_peers"), key=lambda e: e["threads"]):
            r, t = e["result"], e["threads"]
            configs = list(r.get("configs", {}).items())
            for cfg, cfg_rows in configs[:1] if first_config_only else configs:
                b, tt = (int(v) for v in cfg.split("x"))
                load = r.get("load_average")
                busy = f", load average {load[0]:.1f} to {load[1]:.1f}" if load else ""
                out += [f"GPT-2 124M training on **{kind}**, B={b} T={tt}, {t} thread{'s' if t > 1 else ''} "
                        f"({e['meta'].get('date', '')}{busy}; `{shown_command(e['meta'].get('command'))}`):", ""]
                rows = [[name] + gpt2_cells(x) for name, x in gpt2_rows(cfg_rows)
                        if not name.endswith("AVX2") and "pure" not in name]
                out += table([kind, "tokens/s", "vs llm.c", "% of peak", "peak RSS"], rows, "lrrrr") + [""]
    return out


def readme_block(entries):
    kinds = by_kind(entries)
    return "\n".join(readme_train_table(kinds) + readme_gpt2_tables(kinds, first_config_only=True)).rstrip()


def update(path, new, check):
    old = open(path).read() if os.path.exists(path) else None
    if old == new:
        return False
    if not check:
        with open(path, "w") as f:
            f.write(new)
    print(f"{'out of date' if check else 'wrote'}: {os.path.relpath(path, ROOT)}")
    return True


def write_all(args):
    entries = [load(p) for p in sorted(glob.glob(os.path.join(args.results, "*.json")))]
    if not entries:
        raise SystemExit(f"write_benchmarks_md: no results in {args.results}")
    changed = update(args.doc, write_page(entries), args.check)
    if os.path.exists(args.readme):
        text = open(args.readme).read()
        b, e = text.find(README_BEGIN), text.find(README_END)
        if b < 0 or e < b:
            raise SystemExit(f"write_benchmarks_md: {args.readme} lacks the markers {README_BEGIN!r} ... {README_END!r}")
        new = text[:b + len(README_BEGIN)] + "\n\n" + readme_block(entries) + "\n\n" + text[e:]
        changed |= update(args.readme, new, args.check)
    return 1 if (args.check and changed) else 0


# ---------------------------------------------------------------- record


def record(args):
    cmd = args.command[1:] if args.command and args.command[0] == "--" else args.command
    if not cmd:
        raise SystemExit("write_benchmarks_md record: give the benchmark's command after --")
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        raise SystemExit(f"write_benchmarks_md record: the command exited with status {proc.returncode}")
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise SystemExit("write_benchmarks_md record: the command's last line is not JSON (did you pass --json?)")
    cid = cpu_id()
    isa = ", ".join(cid.get("isa", []))
    meta = dict(cpu=cid.get("model name", result.get("cpu")), cpu_id={k: v for k, v in cid.items() if k != "model name"},
                machine=args.machine or f"{cid.get('model name', result.get('cpu', 'CPU'))}, {os.cpu_count()} logical CPUs; {isa}",
                date=result.get("date") or time.strftime("%Y-%m-%d", time.gmtime()),
                command=result.get("command") or " ".join(cmd), notes=[])
    if args.cpu_kind:
        meta["cpu_kind"] = args.cpu_kind
    try:
        meta["amp_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                            text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    kind = cpu_kind_of(meta)
    bench = result.get("bench") or ("train_vs_pytorch" if "rows" in result else "unknown")
    short = {"train_vs_pytorch": "train", "convert_vs_numpy": "convert-numpy"}.get(bench, bench.replace("_", "-"))
    name = re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-") + "-" + short
    if bench in ("train_vs_pytorch", "gemm", "gpt2_vs_peers"):
        name += f"-{result.get('threads', 1)}t"
    os.makedirs(args.results, exist_ok=True)
    path = os.path.join(args.results, name + ".json")
    with open(path, "w") as f:
        json.dump(dict(meta, result=result), f, indent=1)
        f.write("\n")
    print(f"recorded: {os.path.relpath(path, ROOT)} ({kind})", file=sys.stderr)
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "record":
        ap = argparse.ArgumentParser(prog="write_benchmarks_md.py record")
        ap.add_argument("--cpu-kind", help="the name the page files the run under (default: from /proc/cpuinfo)")
        ap.add_argument("--machine", help="a line describing the machine (default: model name, CPUs, ISA)")
        ap.add_argument("--results", default=RESULTS)
        ap.add_argument("command", nargs=argparse.REMAINDER)
        return record(ap.parse_args(sys.argv[2:]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument("--doc", default=DOC)
    ap.add_argument("--readme", default=README)
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is out of date")
    return write_all(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
