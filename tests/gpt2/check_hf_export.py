#!/usr/bin/env python3
"""amp's Hugging Face export of gpt2 (amp train --save-hf, amp_llmc_save_hf) loaded by
transformers.GPT2LMHeadModel.from_pretrained and compared with the same weights read from amp's
llm.c file (--save-llmc, read here with numpy) into the torch GPT-2 of gen_gpt2_fixtures.py (llm.c's
train_gpt2.py): logits on random tokens within 1e-5 of max|logit|, the head tied to wte, every
parameter of the HF model found in the file.

usage: tests/gpt2/check_hf_export.py [AMP]     (from the repository root, after make; AMP: build/amp)
Prints "skipped: ..." and exits 0 without torch, numpy or transformers.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as e:  # pragma: no cover
    print("skipped: %s" % e)
    sys.exit(0)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
sys.path.insert(0, HERE)
from gen_gpt2_fixtures import GPT2  # noqa: E402

L, NH, C = 2, 4, 64


def read_llmc(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        body = np.frombuffer(f.read(), dtype="<f4")
    assert header[0] == 20240326 and header[1] == 3, header[:2]
    maxT, V, nl, nh, c, Vp = (int(x) for x in header[2:8])
    shapes = [(Vp, c), (maxT, c), (nl, c), (nl, c), (nl, 3 * c, c), (nl, 3 * c), (nl, c, c), (nl, c), (nl, c),
              (nl, c), (nl, 4 * c, c), (nl, 4 * c), (nl, c, 4 * c), (nl, c), (c,), (c,)]
    out, off = [], 0
    for s in shapes:
        n = int(np.prod(s))
        out.append(torch.from_numpy(body[off:off + n].copy()).reshape(s))
        off += n
    assert off == body.size
    return (maxT, V, nl, nh, c, Vp), out


def reference(dims, t):
    maxT, V, nl, nh, c, Vp = dims
    m = GPT2(V, Vp, maxT, c, nl, nh)
    sd = {"wte.weight": t[0], "wpe.weight": t[1], "ln_f.weight": t[14], "ln_f.bias": t[15]}
    names = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
             "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
             "mlp.c_proj.bias"]
    for l in range(nl):
        for k, name in enumerate(names):
            sd["h.%d.%s" % (l, name)] = t[2 + k][l]
    m.load_state_dict(sd)
    return m.eval()


def main():
    amp = sys.argv[1] if len(sys.argv) > 1 else "build/amp"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, os.path.join(HERE, "make_llmc_inputs.py"), tmp, str(L), str(NH), str(C)],
                       check=True)
        hf_dir = os.path.join(tmp, "hf")
        os.mkdir(hf_dir)
        subprocess.run([amp, "train", "--model", "gpt2", "--init-from", os.path.join(tmp, "gpt2_124M.bin"),
                        "--context", "32", "--batch", "2", "--data", os.path.join(tmp, "train.bin"), "--val-data",
                        os.path.join(tmp, "val.bin"), "--vocab", "50257", "--precision", "fp32", "--steps", "2",
                        "--no-eval", "--quiet", "--save-llmc", os.path.join(tmp, "out.bin"), "--save-hf",
                        os.path.join(hf_dir, "model.safetensors")], check=True, stdout=subprocess.DEVNULL)
        dims, tensors = read_llmc(os.path.join(tmp, "out.bin"))
        maxT, V, nl, nh, c, Vp = dims
        config = GPT2Config(vocab_size=V, n_positions=maxT, n_embd=c, n_layer=nl, n_head=nh,
                            activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True)
        with open(os.path.join(hf_dir, "config.json"), "w") as f:
            json.dump(config.to_dict(), f)
        hf, info = GPT2LMHeadModel.from_pretrained(hf_dir, output_loading_info=True)
        hf.eval()
        missing = [k for k in info["missing_keys"] if not k.endswith("attn.bias") and k != "lm_head.weight"]
        assert not missing and not info["unexpected_keys"], info
        assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr(), "lm_head is not tied to wte"
        ref = reference(dims, tensors)
        tokens = torch.randint(0, V, (2, 32), generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            want = ref(tokens)
            got = hf(tokens).logits.reshape(-1, V)
        err = (got - want).abs().max().item() / want.abs().max().item()
        print("hf export: max |HF - reference| = %.3g of max|logit| (limit 1e-5)" % err)
        if err > 1e-5:
            print("FAILED")
            sys.exit(1)
        print("ok")


if __name__ == "__main__":
    main()
