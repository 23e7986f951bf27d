#!/usr/bin/env python3
"""Writes the inputs of check_vs_llmc.sh, independently of amp: a random GPT-2 in llm.c's model file
layout (train_gpt2.py's write_model: header 20240326, version 3, then the 16 fp32 tensors in llm.c's
order, wte padded to Vp rows) and two token shards in llm.c's format (header 20240520, version 1,
count; uint16 ids).

usage: make_llmc_inputs.py OUTDIR LAYERS HEADS WIDTH [SEED]
  OUTDIR/gpt2_124M.bin   the model (the name llm.c's train_gpt2.c opens; any size), maxT 1024,
                         V 50257, Vp 50304; weights N(0, 0.02), the residual projections
                         N(0, 0.02/sqrt(2L)) (train_gpt2.py's init), biases N(0, 0.01) and LayerNorm
                         weights 1 + N(0, 0.05) so that every tensor matters
  OUTDIR/train.bin       40000 tokens: a fixed random phrase of 97 ids < 50257 repeated with a little
                         noise, so that ten steps of AdamW lower the loss
  OUTDIR/val.bin         4096 tokens made the same way
"""
import math
import os
import sys

import numpy as np


def tokens(rng, n, phrase):
    out = np.resize(phrase, n).astype(np.int64)
    noise = rng.random(n) < 0.05
    out[noise] = rng.integers(0, 50257, int(noise.sum()))
    return out.astype(np.uint16)


def write_shard(path, toks):
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = 20240520, 1, len(toks)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.astype("<u2").tobytes())


def main():
    out, L, NH, C = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    seed = int(sys.argv[5]) if len(sys.argv) > 5 else 1337
    maxT, V, Vp = 1024, 50257, 50304
    rng = np.random.default_rng(seed)
    std, resid = 0.02, 0.02 / math.sqrt(2 * L)

    def normal(shape, s, mean=0.0):
        return (rng.standard_normal(shape) * s + mean).astype(np.float32)

    wte = normal((Vp, C), std)
    tensors = [wte, normal((maxT, C), std),
               normal((L, C), 0.05, 1.0), normal((L, C), 0.01),            # ln1w, ln1b
               normal((L, 3 * C, C), std), normal((L, 3 * C), 0.01),       # qkvw, qkvb
               normal((L, C, C), resid), normal((L, C), 0.01),             # attprojw, attprojb
               normal((L, C), 0.05, 1.0), normal((L, C), 0.01),            # ln2w, ln2b
               normal((L, 4 * C, C), std), normal((L, 4 * C), 0.01),       # fcw, fcb
               normal((L, C, 4 * C), resid), normal((L, C), 0.01),         # fcprojw, fcprojb
               normal((C,), 0.05, 1.0), normal((C,), 0.01)]                # lnfw, lnfb
    header = np.zeros(256, dtype="<i4")
    header[:8] = [20240326, 3, maxT, V, L, NH, C, Vp]
    with open(os.path.join(out, "gpt2_124M.bin"), "wb") as f:
        f.write(header.tobytes())
        for t in tensors:
            f.write(t.astype("<f4").tobytes())
    phrase = rng.integers(0, 50257, 97)
    write_shard(os.path.join(out, "train.bin"), tokens(rng, 40000, phrase))
    write_shard(os.path.join(out, "val.bin"), tokens(rng, 4096, phrase))


if __name__ == "__main__":
    main()
