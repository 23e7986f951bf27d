/* GPT-2 in Hugging Face's layout (amp/llmc.h, amp_llmc_save_hf): transformers' GPT2LMHeadModel names
 * its weights transformer.<amp's name> and keeps its projections as Conv1D, weight [in, out] (the
 * transpose of nn.Linear's [out, in], amp's), wte [V, C] without llm.c's padding; the head is tied to
 * wte, so the file has no lm_head.weight (save_pretrained leaves it out too). Every tensor is written
 * in fp32. */
#include "amp/llmc.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "amp/checkpoint.h"
#include "amp/status.h"
#include "../core/alloc_internal.h"
#include "../core/status_internal.h"

/* A block's tensors: amp's leaf name, and whether it is a Conv1D weight (transposed). */
static const struct {
    const char *leaf;
    bool conv1d;
} hf_block[] = {
    {"ln_1.weight", false},        {"ln_1.bias", false},        {"attn.c_attn.weight", true},
    {"attn.c_attn.bias", false},   {"attn.c_proj.weight", true}, {"attn.c_proj.bias", false},
    {"ln_2.weight", false},        {"ln_2.bias", false},        {"mlp.c_fc.weight", true},
    {"mlp.c_fc.bias", false},      {"mlp.c_proj.weight", true},  {"mlp.c_proj.bias", false},
};
enum { HF_BLOCK = sizeof hf_block / sizeof hf_block[0], HF_NAME = 96 };

typedef struct hf_out {
    amp_st_tensor *t;
    char (*names)[HF_NAME];
    int64_t (*shapes)[2];
    float **data; /* each tensor's fp32 copy (amp_free) */
    size_t n;
} hf_out;

static amp_tensor *param_named(amp_ctx *ctx, const char *name) {
    for (size_t i = 0; i < amp_ctx_num_params(ctx); i++) {
        amp_tensor *t = amp_ctx_param(ctx, i);
        if (t && t->name && !strcmp(t->name, name)) return t;
    }
    return NULL;
}

/* Appends amp's parameter `name` as transformer.<name>: its first `rows` rows (wte: V of Vp), in fp32,
 * transposed when conv1d. */
static int add(const char *path, amp_ctx *ctx, hf_out *o, const char *name, int64_t rows, bool conv1d, char *err,
               size_t err_size) {
    amp_tensor *p = param_named(ctx, name);
    if (!p || !p->data || p->ndim < 1 || p->ndim > 2 || (rows > 0 && (p->ndim != 2 || p->shape[0] < rows)))
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: the model has no parameter %s to export", path,
                           name);
    const int64_t n = amp_tensor_numel(p), r = p->ndim == 2 ? p->shape[0] : n, c = p->ndim == 2 ? p->shape[1] : 1;
    float *all = amp_malloc((size_t)(n > 0 ? n : 1) * sizeof *all);
    float *out = conv1d ? amp_malloc((size_t)(n > 0 ? n : 1) * sizeof *out) : all;
    if (!all || !out) {
        amp_free(all);
        if (out != all) amp_free(out);
        return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    int st = amp_tensor_read(p, all, AMP_F32);
    if (conv1d) { /* [out, in] -> [in, out] */
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++) out[j * r + i] = all[i * c + j];
        amp_free(all);
    }
    const size_t k = o->n++;
    o->data[k] = out;
    snprintf(o->names[k], HF_NAME, "transformer.%s", name);
    if (p->ndim == 1) o->shapes[k][0] = n;
    else if (conv1d) o->shapes[k][0] = c, o->shapes[k][1] = r;
    else o->shapes[k][0] = rows > 0 ? rows : r, o->shapes[k][1] = c;
    o->t[k] = (amp_st_tensor){o->names[k], AMP_F32, p->ndim, o->shapes[k], out};
    return st == AMP_OK ? AMP_OK : amp_err_fmt(err, err_size, st, "%s: cannot read %s", path, name);
}

int amp_llmc_save_hf(const char *path, amp_ctx *ctx, const amp_llmc_header *h, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!path || !ctx || !h) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_llmc_save_hf: NULL argument");
    if (h->layers < 1 || h->layers > 4096 || h->vocab < 1)
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: %lld layers, vocabulary %lld", path,
                           (long long)h->layers, (long long)h->vocab);
    const size_t cap = 4 + (size_t)h->layers * HF_BLOCK;
    hf_out o = {amp_calloc(cap, sizeof *o.t), amp_calloc(cap, sizeof *o.names), amp_calloc(cap, sizeof *o.shapes),
                amp_calloc(cap, sizeof *o.data), 0};
    int st = o.t && o.names && o.shapes && o.data ? AMP_OK
                                                   : amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    if (st == AMP_OK) st = add(path, ctx, &o, "wte.weight", h->vocab, false, err, err_size);
    if (st == AMP_OK) st = add(path, ctx, &o, "wpe.weight", 0, false, err, err_size);
    for (int64_t l = 0; l < h->layers && st == AMP_OK; l++)
        for (int k = 0; k < HF_BLOCK && st == AMP_OK; k++) {
            char name[HF_NAME];
            snprintf(name, sizeof name, "h.%lld.%s", (long long)l, hf_block[k].leaf);
            st = add(path, ctx, &o, name, 0, hf_block[k].conv1d, err, err_size);
        }
    if (st == AMP_OK) st = add(path, ctx, &o, "ln_f.weight", 0, false, err, err_size);
    if (st == AMP_OK) st = add(path, ctx, &o, "ln_f.bias", 0, false, err, err_size);
    const amp_st_meta meta[] = {{"format", "pt"}};
    if (st == AMP_OK) st = amp_safetensors_write(path, o.t, o.n, meta, 1, err, err_size);
    for (size_t i = 0; o.data && i < o.n; i++) amp_free(o.data[i]);
    amp_free(o.t), amp_free(o.names), amp_free(o.shapes), amp_free(o.data);
    return st;
}
