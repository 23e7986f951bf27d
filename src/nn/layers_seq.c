/* Layers over sequences (amp/layers.h): the LSTM, causal self-attention, the transformer block. */
#include <stdio.h>
#include <string.h>

#include "nn_internal.h"
#include "../ops/op_util.h"
#include "../tensor/ctx_internal.h"

/* ---- LSTM ---- */

int amp_lstm_layer_declare(amp_ctx *ctx, amp_lstm_layer *l, const char *prefix, int64_t input, int64_t hidden,
                           bool bias, amp_dtype dtype) {
    const char *fn = "amp_lstm_layer_declare";
    if (!ctx) return AMP_ERR_NULL_POINTER;
    if (!l) return amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "%s: no layer (NULL)", fn);
    *l = (amp_lstm_layer){.input = input, .hidden = hidden};
    if (hidden <= 0 || hidden > (INT32_MAX / 4)) return nn_layer_fail(ctx, fn, "hidden size %lld out of range", (long long)hidden);
    const int64_t gates = 4 * hidden;
    l->w_ih = nn_layer_param(ctx, fn, prefix, "weight_ih_l0", dtype, 2, (const int64_t[]){gates, input});
    if (l->w_ih) l->w_hh = nn_layer_param(ctx, fn, prefix, "weight_hh_l0", dtype, 2, (const int64_t[]){gates, hidden});
    if (l->w_hh && bias) l->b_ih = nn_layer_param(ctx, fn, prefix, "bias_ih_l0", dtype, 1, (const int64_t[]){gates});
    if (l->b_ih) l->b_hh = nn_layer_param(ctx, fn, prefix, "bias_hh_l0", dtype, 1, (const int64_t[]){gates});
    if (l->w_hh && (l->b_hh || !bias)) return AMP_OK;
    *l = (amp_lstm_layer){0};
    return nn_declare_status(ctx);
}

int amp_lstm_layer_init(amp_ctx *ctx, amp_lstm_layer *l, amp_rng *rng) {
    const int st = nn_need_layer(ctx, l, "amp_lstm_layer_init");
    if (st != AMP_OK) return st;
    return amp_init_lstm(ctx, l->w_ih, l->w_hh, l->b_ih, l->b_hh, rng);
}

amp_tensor *amp_lstm_layer_forward(amp_ctx *ctx, const amp_lstm_layer *l, amp_tensor *x) {
    if (nn_need_layer(ctx, l, "amp_lstm_layer_forward") != AMP_OK) return NULL;
    return amp_lstm_sequence(ctx, x, l->w_ih, l->w_hh, l->b_ih, l->b_hh);
}

amp_tensor *amp_lstm_layer_forward_tokens(amp_ctx *ctx, const amp_lstm_layer *l, const amp_embedding_layer *emb,
                                          const int32_t *tokens, int64_t batch, int64_t steps) {
    if (nn_need_layer(ctx, l && emb ? l : NULL, "amp_lstm_layer_forward_tokens") != AMP_OK) return NULL;
    return amp_lstm_sequence_tokens(ctx, emb->weight, tokens, batch, steps, l->w_ih, l->w_hh, l->b_ih, l->b_hh);
}

/* ---- causal self-attention ---- */

int amp_attention_layer_declare(amp_ctx *ctx, amp_attention_layer *l, const char *prefix, int64_t dim, int64_t heads,
                                bool bias, amp_dtype dtype) {
    const char *fn = "amp_attention_layer_declare";
    char sub[AMP_LAYER_MAX_NAME];
    if (!ctx) return AMP_ERR_NULL_POINTER;
    if (!l) return amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "%s: no layer (NULL)", fn);
    *l = (amp_attention_layer){.dim = dim, .heads = heads};
    if (dim <= 0 || heads <= 0 || dim % heads != 0)
        return nn_layer_fail(ctx, fn, "%lld heads for width %lld (the width must divide by the heads)",
                             (long long)heads, (long long)dim);
    int st = nn_layer_name(ctx, fn, sub, prefix, "c_attn");
    if (st == AMP_OK) st = amp_linear_layer_declare(ctx, &l->c_attn, sub, dim, 3 * dim, bias, dtype);
    if (st == AMP_OK) st = nn_layer_name(ctx, fn, sub, prefix, "c_proj");
    if (st == AMP_OK) st = amp_linear_layer_declare(ctx, &l->c_proj, sub, dim, dim, bias, dtype);
    if (st != AMP_OK) *l = (amp_attention_layer){0};
    return st;
}

int amp_attention_layer_init(amp_ctx *ctx, amp_attention_layer *l, amp_rng *rng) {
    int st = nn_need_layer(ctx, l, "amp_attention_layer_init");
    if (st == AMP_OK) st = amp_linear_layer_init(ctx, &l->c_attn, rng);
    return st == AMP_OK ? amp_linear_layer_init(ctx, &l->c_proj, rng) : st;
}

/* The fused qkv projection: c_attn is one [3C, C] parameter (nanoGPT's layout, so checkpoints load)
 * and one amp_linear; amp_causal_self_attention (src/ops/attention.c) reads q, k, v and each head in
 * place from its output and writes the heads' outputs merged, so no split, transpose or merge copies
 * (nor their gradients' scatters) are made. */
amp_tensor *amp_attention_layer_forward(amp_ctx *ctx, const amp_attention_layer *l, amp_tensor *x,
                                        amp_tensor *residual) {
    if (nn_need_layer(ctx, l, "amp_attention_layer_forward") != AMP_OK) return NULL;
    amp_tensor *qkv = amp_linear_layer_forward(ctx, &l->c_attn, x); /* [B, T, 3C] */
    if (!qkv) return NULL;
    amp_tensor *att = amp_causal_self_attention(ctx, qkv, l->heads); /* [B, T, C], heads merged */
    if (!residual) return amp_linear_layer_forward(ctx, &l->c_proj, att);
    return nn_linear_residual(ctx, &l->c_proj, att, residual);
}

/* ---- the transformer block ---- */

int amp_transformer_block_declare(amp_ctx *ctx, amp_transformer_block *b, const char *prefix, int64_t dim,
                                  int64_t heads, amp_dtype dtype) {
    const char *fn = "amp_transformer_block_declare";
    char sub[AMP_LAYER_MAX_NAME];
    if (!ctx) return AMP_ERR_NULL_POINTER;
    if (!b) return amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "%s: no block (NULL)", fn);
    memset(b, 0, sizeof *b);
    if (dim <= 0 || dim > INT32_MAX / 4) return nn_layer_fail(ctx, fn, "width %lld out of range", (long long)dim);
    int st = nn_layer_name(ctx, fn, sub, prefix, "ln_1");
    if (st == AMP_OK) st = amp_layer_norm_layer_declare(ctx, &b->ln_1, sub, dim, dtype);
    if (st == AMP_OK) st = nn_layer_name(ctx, fn, sub, prefix, "attn");
    if (st == AMP_OK) st = amp_attention_layer_declare(ctx, &b->attn, sub, dim, heads, true, dtype);
    if (st == AMP_OK) st = nn_layer_name(ctx, fn, sub, prefix, "ln_2");
    if (st == AMP_OK) st = amp_layer_norm_layer_declare(ctx, &b->ln_2, sub, dim, dtype);
    if (st == AMP_OK) st = nn_layer_name(ctx, fn, sub, prefix, "mlp.c_fc");
    if (st == AMP_OK) st = amp_linear_layer_declare(ctx, &b->mlp_fc, sub, dim, 4 * dim, true, dtype);
    if (st == AMP_OK) st = nn_layer_name(ctx, fn, sub, prefix, "mlp.c_proj");
    if (st == AMP_OK) st = amp_linear_layer_declare(ctx, &b->mlp_proj, sub, 4 * dim, dim, true, dtype);
    if (st != AMP_OK) memset(b, 0, sizeof *b);
    return st;
}

int amp_transformer_block_init(amp_ctx *ctx, amp_transformer_block *b, amp_rng *rng) {
    int st = nn_need_layer(ctx, b, "amp_transformer_block_init");
    if (st == AMP_OK) st = amp_layer_norm_layer_init(ctx, &b->ln_1);
    if (st == AMP_OK) st = amp_attention_layer_init(ctx, &b->attn, rng);
    if (st == AMP_OK) st = amp_layer_norm_layer_init(ctx, &b->ln_2);
    if (st == AMP_OK) st = amp_linear_layer_init(ctx, &b->mlp_fc, rng);
    if (st == AMP_OK) st = amp_linear_layer_init(ctx, &b->mlp_proj, rng);
    return st;
}

/* x -> x + attn(ln_1(x)) -> + mlp(ln_2(.)); the residual adds fused into the projections. */
amp_tensor *amp_transformer_block_forward(amp_ctx *ctx, const amp_transformer_block *b, amp_tensor *x) {
    if (nn_need_layer(ctx, b, "amp_transformer_block_forward") != AMP_OK) return NULL;
    amp_tensor *h = nn_norm_for_linear(ctx, &b->ln_1, x);
    x = amp_attention_layer_forward(ctx, &b->attn, h, x);
    if (!x) return NULL;
    h = nn_norm_for_linear(ctx, &b->ln_2, x);
    h = amp_linear_layer_forward_act(ctx, &b->mlp_fc, h, b->gelu_tanh ? AMP_ACT_GELU_TANH : AMP_ACT_GELU); /* [B, T, 4C] */
    return nn_linear_residual(ctx, &b->mlp_proj, h, x);
}
