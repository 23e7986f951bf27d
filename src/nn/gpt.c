/* gpt: nanoGPT's GPT (Karpathy, model.py) without dropout, bias=True, lm_head untied:
 *     x = wte(tokens) + wpe(positions)
 *     per block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
 *         attn: qkv = c_attn(x) [B, T, 3C] split into q, k, v, each [B, nh, T, C/nh]; causal
 *               scaled-dot-product attention; heads merged; c_proj
 *         mlp:  c_proj(gelu(c_fc(x))), c_fc: C -> 4C (exact erf GELU, nn.GELU's default)
 *     logits = lm_head(ln_f(x))
 * LayerNorm eps 1e-5 (nn.LayerNorm's default).
 *
 * Written with the layers of amp/layers.h: two embeddings, `layers` transformer blocks
 * (amp_transformer_block: the fused qkv projection and attention, src/nn/layers_seq.c), the final
 * norm and the head. With cfg.recompute each block runs as a recomputed region (amp/recompute.h:
 * gpt_block_forward, shared with gpt2.c). */
#include <math.h>
#include <stdio.h>

#include "amp/recompute.h"
#include "gpt_internal.h"
#include "../core/alloc_internal.h"

static const float GPT_INIT_STD = 0.02f; /* nanoGPT's _init_weights */

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
    const amp_dtype dt = cfg->param_dtype;
    m->positions = amp_malloc((size_t)T * sizeof *m->positions);
    if (!m->positions) return AMP_ERR_OUT_OF_MEMORY;
    for (int64_t t = 0; t < T; t++) m->positions[t] = (int32_t)t;
    gpt_layers *L = m->layers = nn_layers_alloc(m, sizeof *L + (size_t)cfg->layers * sizeof L->blocks[0]);
    if (!L) return AMP_ERR_OUT_OF_MEMORY;
    int st = amp_embedding_layer_declare(m->ctx, &L->wte, "wte", V, C, dt);
    if (st == AMP_OK) st = amp_embedding_layer_declare(m->ctx, &L->wpe, "wpe", T, C, dt);
    for (int64_t l = 0; l < cfg->layers && st == AMP_OK; l++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "h.%lld", (long long)l);
        st = amp_transformer_block_declare(m->ctx, &L->blocks[l], prefix, C, cfg->heads, dt);
    }
    if (st == AMP_OK) st = amp_layer_norm_layer_declare(m->ctx, &L->ln_f, "ln_f", C, dt);
    if (st == AMP_OK) st = amp_linear_layer_declare(m->ctx, &L->lm_head, "lm_head", C, V, false, dt);
    return st;
}

/* A linear's weight N(0, std), its bias zeros. */
static int init_linear_normal(amp_ctx *ctx, const amp_linear_layer *l, float std, amp_rng *rng) {
    const int st = amp_init_normal(ctx, l->weight, 0.0f, std, rng);
    return st == AMP_OK ? amp_init_zeros(ctx, l->bias) : st;
}

int gpt_init_trunk(amp_model *m, float std, amp_rng *rng) {
    gpt_layers *L = m->layers;
    amp_ctx *ctx = m->ctx;
    const float resid = (float)(std / sqrt(2.0 * (double)m->cfg.layers));
    int st = amp_init_normal(ctx, L->wte.weight, 0.0f, std, rng);
    if (st == AMP_OK) st = amp_init_normal(ctx, L->wpe.weight, 0.0f, std, rng);
    for (int64_t l = 0; l < m->cfg.layers && st == AMP_OK; l++) {
        amp_transformer_block *b = &L->blocks[l];
        st = amp_layer_norm_layer_init(ctx, &b->ln_1);
        if (st == AMP_OK) st = init_linear_normal(ctx, &b->attn.c_attn, std, rng);
        if (st == AMP_OK) st = init_linear_normal(ctx, &b->attn.c_proj, resid, rng);
        if (st == AMP_OK) st = amp_layer_norm_layer_init(ctx, &b->ln_2);
        if (st == AMP_OK) st = init_linear_normal(ctx, &b->mlp_fc, std, rng);
        if (st == AMP_OK) st = init_linear_normal(ctx, &b->mlp_proj, resid, rng);
    }
    return st == AMP_OK ? amp_layer_norm_layer_init(ctx, &L->ln_f) : st;
}

/* nanoGPT's _init_weights: Linear and Embedding weights N(0, 0.02), biases 0, LayerNorm 1 and 0, and
 * the residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 * n_layer)) (GPT-2's init);
 * the untied head last. */
static int gpt_init(amp_model *m, amp_rng *rng) {
    const int st = gpt_init_trunk(m, GPT_INIT_STD, rng);
    gpt_layers *L = m->layers;
    return st == AMP_OK ? amp_init_normal(m->ctx, L->lm_head.weight, 0.0f, GPT_INIT_STD, rng) : st;
}

static amp_tensor *block_region(amp_ctx *ctx, amp_tensor *const *in, int n_in, void *user) {
    (void)n_in;
    return amp_transformer_block_forward(ctx, user, in[0]);
}

amp_tensor *gpt_block_forward(amp_ctx *ctx, const amp_model_config *cfg, const amp_transformer_block *b, amp_tensor *x) {
    if (!cfg->recompute) return amp_transformer_block_forward(ctx, b, x);
    return amp_recompute(ctx, block_region, &x, 1, (void *)b); /* (the block is only read) */
}

amp_tensor *gpt_forward_trunk(const amp_model *m, amp_ctx *ctx, const int32_t *tokens, int64_t batch) {
    const amp_model_config *cfg = &m->cfg;
    const gpt_layers *L = m->layers;
    const int64_t B = batch, T = cfg->context, C = cfg->hidden;
    amp_tensor *tok = amp_embedding_layer_forward(ctx, &L->wte, tokens, 2, (const int64_t[]){B, T});     /* [B, T, C] */
    amp_tensor *pos = amp_embedding_layer_forward(ctx, &L->wpe, m->positions, 1, (const int64_t[]){T}); /* [T, C] */
    amp_tensor *x = amp_add(ctx, tok, pos);
    for (int64_t l = 0; l < cfg->layers && x; l++) x = gpt_block_forward(ctx, cfg, &L->blocks[l], x);
    x = nn_norm_for_linear(ctx, &L->ln_f, x);
    return amp_reshape(ctx, x, 2, (const int64_t[]){B * T, C});
}

/* tokens [B, T] -> logits [B*T, V] */
static amp_tensor *gpt_forward(amp_model *m, amp_ctx *ctx, amp_tensor *x_in, const int32_t *tokens, int64_t batch) {
    (void)x_in;
    const gpt_layers *L = m->layers;
    amp_tensor *x = gpt_forward_trunk(m, ctx, tokens, batch);
    return amp_linear_layer_forward(ctx, &L->lm_head, x); /* [B*T, V] */
}

double gpt_flops(const amp_model_config *c) {
    const double C = (double)c->hidden, T = (double)c->context;
    /* per token and layer: qkv 3C^2, proj C^2, mlp 8C^2, scores and weighted sum 2TC; the head CV */
    const double per_token = (double)c->layers * (12.0 * C * C + 2.0 * T * C) + C * (double)c->vocab;
    return 3.0 * 2.0 * per_token * T;
}

const nn_model nn_model_gpt = {
    .name = "gpt",
    .task = NN_CHAR_LM,
    .defaults = gpt_defaults,
    .validate = gpt_validate,
    .declare = gpt_declare,
    .init = gpt_init,
    .forward = gpt_forward,
    .flops = gpt_flops,
};
