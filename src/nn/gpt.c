/* gpt: nanoGPT's GPT (Karpathy, model.py) without dropout, bias=True, lm_head untied:
 *     x = wte(tokens) + wpe(positions)
 *     per block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
 *         attn: qkv = c_attn(x) [B, T, 3C] split into q, k, v, each [B, nh, T, C/nh]; causal
 *               scaled-dot-product attention; heads merged; c_proj
 *         mlp:  c_proj(gelu(c_fc(x))), c_fc: C -> 4C (exact erf GELU, nn.GELU's default)
 *     logits = lm_head(ln_f(x))
 * LayerNorm eps 1e-5 (nn.LayerNorm's default).
 *
 * The fused qkv projection: c_attn is one [3C, C] parameter (nanoGPT's layout, so checkpoints load)
 * and one amp_linear; amp_causal_self_attention (src/ops/attention.c) reads q, k, v and each head in
 * place from its output and writes the heads' outputs merged, so no split, transpose or merge copies
 * (nor their gradients' scatters) are made. */
#include <math.h>
#include <stdlib.h>

#include "nn_internal.h"
#include "../ops/op_util.h"
#include "../core/alloc_internal.h"

/* The parameters in declaration order: the embeddings, layers blocks of BLK_COUNT, the tail. */
enum { GPT_WTE, GPT_WPE, GPT_BLOCK0 };
enum {
    BLK_LN1_W, BLK_LN1_B, BLK_ATTN_W, BLK_ATTN_B, BLK_PROJ_W, BLK_PROJ_B,
    BLK_LN2_W, BLK_LN2_B, BLK_FC_W, BLK_FC_B, BLK_MLP_PROJ_W, BLK_MLP_PROJ_B, BLK_COUNT
};
enum { TAIL_LNF_W, TAIL_LNF_B, TAIL_HEAD_W }; /* after the last block */

static const float GPT_INIT_STD = 0.02f; /* nanoGPT's _init_weights */
static const float GPT_LN_EPS = 1e-5f;   /* nn.LayerNorm's default eps */

/* nanoGPT's small character model: width 128 over a context of 128. */
static void gpt_defaults(amp_model_config *c) { c->hidden = 128, c->context = 128; }

static int gpt_validate(amp_ctx *ctx, const amp_model_config *c) {
    NN_NEED(ctx, c->layers > 0 && c->layers <= 1000 && c->heads > 0 && c->hidden % c->heads == 0,
            "gpt: %lld layers, %lld heads for width %lld (the width must divide by the heads)", (long long)c->layers,
            (long long)c->heads, (long long)c->hidden);
    return AMP_OK;
}

static int gpt_declare(amp_model *m) {
    const amp_model_config *cfg = &m->cfg;
    const int64_t V = cfg->vocab, T = cfg->context, C = cfg->hidden;
    const nn_init normal = {NN_INIT_NORMAL, GPT_INIT_STD}, zero = {NN_INIT_CONST, 0.0f}, one = {NN_INIT_CONST, 1.0f};
    /* nanoGPT scales the residual projections' std by 1/sqrt(2 * n_layer) (GPT-2's init). */
    const nn_init resid = {NN_INIT_NORMAL, (float)(GPT_INIT_STD / sqrt(2.0 * (double)cfg->layers))};
    m->positions = amp_malloc((size_t)T * sizeof *m->positions);
    if (!m->positions) return AMP_ERR_OUT_OF_MEMORY;
    for (int64_t t = 0; t < T; t++) m->positions[t] = (int32_t)t;
    const int64_t vc[2] = {V, C}, tc[2] = {T, C}, c1[1] = {C}, c3[1] = {3 * C}, c4[1] = {4 * C};
    if (!nn_param(m, normal, 2, vc, "wte.weight") || !nn_param(m, normal, 2, tc, "wpe.weight"))
        return amp_ctx_status(m->ctx);
    for (int64_t l = 0; l < cfg->layers; l++) {
        const long long i = (long long)l;
        if (!nn_param(m, one, 1, c1, "h.%lld.ln_1.weight", i) || !nn_param(m, zero, 1, c1, "h.%lld.ln_1.bias", i) ||
            !nn_param(m, normal, 2, (const int64_t[]){3 * C, C}, "h.%lld.attn.c_attn.weight", i) ||
            !nn_param(m, zero, 1, c3, "h.%lld.attn.c_attn.bias", i) ||
            !nn_param(m, resid, 2, (const int64_t[]){C, C}, "h.%lld.attn.c_proj.weight", i) ||
            !nn_param(m, zero, 1, c1, "h.%lld.attn.c_proj.bias", i) ||
            !nn_param(m, one, 1, c1, "h.%lld.ln_2.weight", i) || !nn_param(m, zero, 1, c1, "h.%lld.ln_2.bias", i) ||
            !nn_param(m, normal, 2, (const int64_t[]){4 * C, C}, "h.%lld.mlp.c_fc.weight", i) ||
            !nn_param(m, zero, 1, c4, "h.%lld.mlp.c_fc.bias", i) ||
            !nn_param(m, resid, 2, (const int64_t[]){C, 4 * C}, "h.%lld.mlp.c_proj.weight", i) ||
            !nn_param(m, zero, 1, c1, "h.%lld.mlp.c_proj.bias", i))
            return amp_ctx_status(m->ctx);
    }
    if (!nn_param(m, one, 1, c1, "ln_f.weight") || !nn_param(m, zero, 1, c1, "ln_f.bias") ||
        !nn_param(m, normal, 2, vc, "lm_head.weight"))
        return amp_ctx_status(m->ctx);
    return AMP_OK;
}

/* A LayerNorm whose only reader is a linear: under autocast, with the linear in the low dtype (the
 * default policy), the norm's fp32 result would only be cast to that dtype: amp_layer_norm_to rounds
 * it there directly (the same values and gradients; the fp32 tensor, 2 MiB per norm at the default
 * shapes, is not kept until backward). Elsewhere the plain norm. */
static amp_tensor *norm_for_linear(amp_ctx *ctx, amp_tensor *x, amp_tensor *w, amp_tensor *b) {
    if (x && amp_autocast_enabled() && amp_autocast_get_policy(AMP_OP_LINEAR) == AMP_POLICY_LOWER &&
        amp_autocast_get_policy(AMP_OP_LAYER_NORM) == AMP_POLICY_FP32)
        return amp_layer_norm_to(ctx, x, w, b, GPT_LN_EPS, amp_autocast_dtype());
    return amp_layer_norm(ctx, x, w, b, GPT_LN_EPS);
}

/* x [B, T, C] -> x + attn(ln_1(x)) -> + mlp(ln_2(.)) */
static amp_tensor *block(amp_model *m, amp_ctx *ctx, amp_tensor *x, size_t base) {
    const int64_t NH = m->cfg.heads;
#define P(i) nn_p(m, base + (i))
    amp_tensor *h = norm_for_linear(ctx, x, P(BLK_LN1_W), P(BLK_LN1_B));
    amp_tensor *qkv = amp_linear(ctx, h, P(BLK_ATTN_W), P(BLK_ATTN_B)); /* [B, T, 3C] */
    if (!qkv) return NULL;
    /* q, k, v split into nh heads of D, attention per head, heads merged: [B, T, C] */
    amp_tensor *att = amp_causal_self_attention(ctx, qkv, NH);
    x = amp_linear_residual(ctx, att, P(BLK_PROJ_W), P(BLK_PROJ_B), x);
    h = norm_for_linear(ctx, x, P(BLK_LN2_W), P(BLK_LN2_B));
    h = amp_linear_gelu(ctx, h, P(BLK_FC_W), P(BLK_FC_B)); /* [B, T, 4C] */
    return amp_linear_residual(ctx, h, P(BLK_MLP_PROJ_W), P(BLK_MLP_PROJ_B), x);
#undef P
}

/* tokens [B, T] -> logits [B*T, V] */
static amp_tensor *gpt_forward(amp_model *m, amp_ctx *ctx, amp_tensor *x_in, const int32_t *tokens, int64_t batch) {
    (void)x_in;
    const amp_model_config *cfg = &m->cfg;
    const int64_t B = batch, T = cfg->context, C = cfg->hidden;
    amp_tensor *tok = amp_embedding(ctx, nn_p(m, GPT_WTE), tokens, 2, (const int64_t[]){B, T}); /* [B, T, C] */
    amp_tensor *pos = amp_embedding(ctx, nn_p(m, GPT_WPE), m->positions, 1, (const int64_t[]){T}); /* [T, C] */
    amp_tensor *x = amp_add(ctx, tok, pos);
    for (int64_t l = 0; l < cfg->layers && x; l++) x = block(m, ctx, x, GPT_BLOCK0 + (size_t)l * BLK_COUNT);
    const size_t tail = GPT_BLOCK0 + (size_t)cfg->layers * BLK_COUNT;
    x = norm_for_linear(ctx, x, nn_p(m, tail + TAIL_LNF_W), nn_p(m, tail + TAIL_LNF_B));
    x = amp_reshape(ctx, x, 2, (const int64_t[]){B * T, C});
    return amp_linear(ctx, x, nn_p(m, tail + TAIL_HEAD_W), NULL); /* [B*T, V] */
}

static double gpt_flops(const amp_model_config *c) {
    const double C = (double)c->hidden, T = (double)c->context;
    /* per token and layer: qkv 3C^2, proj C^2, mlp 8C^2, scores and weighted sum 2TC */
    const double per_token = (double)c->layers * (12.0 * C * C + 2.0 * T * C) + C * (double)c->vocab;
    return 3.0 * 2.0 * per_token * T;
}

const nn_model nn_model_gpt = {
    .name = "gpt",
    .task = NN_CHAR_LM,
    .defaults = gpt_defaults,
    .validate = gpt_validate,
    .declare = gpt_declare,
    .forward = gpt_forward,
    .flops = gpt_flops,
};
