#!/usr/bin/env python3
"""`amp tokenizer train` against a naive trainer written from the rules in amp/tokenizer.h: every step
recounts every pair of every piece (each weighted by how often the piece occurs, overlapping pairs
counted), takes the most frequent, ties to the smallest token ids, and merges left to right. The two
rank files must be identical, line for line. Slow (seconds a hundred merges on 300 kB): a small file.

    python3 tests/tokenizer/check_train.py --amp build/amp [--vocab 1200] [--pattern gpt2] FILE

Needs the `regex` module (PyPI; tiktoken's educational code uses it) and tiktoken for the patterns;
exits 77 (skip) without them.
"""
import argparse
import base64
import collections
import inspect
import os
import subprocess
import sys
import tempfile


def pieces_of(data, pattern, regex):
    """Valid UTF-8 runs split by the pattern; each maximal run of invalid bytes one piece."""
    pieces = collections.Counter()
    i = 0
    while i < len(data):
        try:
            data[i:].decode()
            v = len(data) - i
        except UnicodeDecodeError as e:
            v = e.start
        for m in regex.finditer(pattern, data[i:i + v].decode()):
            pieces[m.group().encode()] += 1
        i += v
        j = i
        while j < len(data):
            try:
                data[j:j + 4].decode()
                break
            except UnicodeDecodeError as e:
                if e.start > 0:
                    break
                j += 1
        if j > i:
            pieces[data[i:j]] += 1
        i = j
    return pieces


def train(pieces, vocab):
    tokens = [bytes([b]) for b in range(256)]
    index = {t: k for k, t in enumerate(tokens)}
    words = {k: list(k) for k in pieces}
    while len(tokens) < vocab:
        count = collections.Counter()
        for w, c in pieces.items():
            s = words[w]
            for a, b in zip(s, s[1:]):
                count[(a, b)] += c
        if not count:
            break
        best = min(count, key=lambda p: (-count[p], p))
        joined = tokens[best[0]] + tokens[best[1]]
        if joined not in index:  # a merge whose bytes are a token already reuses it
            index[joined] = len(tokens)
            tokens.append(joined)
        t = index[joined]
        for w, s in words.items():
            out, k = [], 0
            while k < len(s):
                if k + 1 < len(s) and s[k] == best[0] and s[k + 1] == best[1]:
                    out.append(t)
                    k += 2
                else:
                    out.append(s[k])
                    k += 1
            words[w] = out
    return tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--amp", default="build/amp")
    ap.add_argument("--vocab", type=int, default=1200)
    ap.add_argument("--pattern", default="gpt2", choices=["gpt2", "cl100k"])
    ap.add_argument("file")
    args = ap.parse_args()
    try:
        import regex
        import tiktoken_ext.openai_public as openai_public
    except ImportError:
        print("check_train: needs regex and tiktoken (pip install tiktoken): skipped")
        return 77
    if args.pattern == "gpt2":
        pattern = openai_public.r50k_pat_str
    else:
        src = inspect.getsource(openai_public.cl100k_base)
        start = src.index('r"""') + 4
        pattern = src[start:src.index('"""', start)]
    data = open(args.file, "rb").read()
    want = "".join(f"{base64.b64encode(t).decode()} {r}\n"
                   for r, t in enumerate(train(pieces_of(data, pattern, regex), args.vocab)))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ranks.tiktoken")
        subprocess.run([args.amp, "tokenizer", "train", "--vocab", str(args.vocab), "--pattern", args.pattern,
                        args.file, "-o", out], check=True, stdout=subprocess.DEVNULL)
        got = open(out).read()
    if got == want:
        print(f"{args.file}: {want.count(chr(10))} ranks, identical to the naive trainer's")
        print("1 passed, 0 failed")
        return 0
    for k, (a, b) in enumerate(zip(want.splitlines(), got.splitlines())):
        if a != b:
            print(f"{args.file}: rank file line {k + 1}: naive '{a}', amp '{b}'")
            break
    print("0 passed, 1 failed")
    return 1


if __name__ == "__main__":
    sys.exit(main())
