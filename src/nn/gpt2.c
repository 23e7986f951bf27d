/* gpt2: GPT-2 as OpenAI released it and llm.c trains it (train_gpt2.py's GPT, dropout 0):
 *     x = wte(tokens) + wpe(positions)
 *     per block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
 *         attn: c_attn (C -> 3C) split into q, k, v; causal scaled-dot-product attention; c_proj
 *         mlp:  c_proj(gelu_tanh(c_fc(x))), GELU's tanh approximation (F.gelu(approximate='tanh'))
 *     logits = ln_f(x) wte[:V]^T: the output head is the token embedding itself (tied: one parameter,
 *         whose gradient sums both uses)
 * LayerNorm eps 1e-5. wpe has `positions` rows (llm.c's maxT; default: context), of which a window of
 * `context` tokens reads the first context. The embedding table has vocab_padded >= V rows, as llm.c pads V = 50257 to
 * Vp = 50304 (a multiple of 128); the head reads its first V rows only (amp_narrow_rows), so the
 * logits are [B*T, V], the padded rows never enter a softmax and get no gradient (llm.c computes
 * the padded logits and leaves them out of the softmax: the same numbers).
 *
 * Sizes (amp_model_gpt2_size): 124m (the default) 12 layers, 12 heads, width 768; 350m 24/16/1024;
 * 774m 36/20/1280; 1558m 48/25/1600; context 1024 each.
 *
 * Built on the gpt's layer structs (gpt_internal.h): the same embeddings, blocks (with gelu_tanh set)
 * and final norm; lm_head stays empty (NULL weight): the head is wte. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpt_internal.h"
#include "../autocast/autocast_internal.h"
#include "../core/alloc_internal.h"

static const float GPT2_INIT_STD = 0.02f; /* train_gpt2.py's _init_weights */
enum { GPT2_VOCAB = 50257, GPT2_PAD_MULTIPLE = 128 };

static void gpt2_defaults(amp_model_config *c) {
    c->vocab = GPT2_VOCAB, c->context = 1024, c->hidden = 768, c->layers = 12, c->heads = 12;
    c->vocab_padded = 0, c->positions = 0;
}

int64_t amp_model_padded_vocab(const amp_model_config *c) {
    if (!c) return 0;
    if (c->vocab_padded > 0) return c->vocab_padded;
    return (c->vocab + GPT2_PAD_MULTIPLE - 1) / GPT2_PAD_MULTIPLE * GPT2_PAD_MULTIPLE;
}

static const struct {
    const char *name;
    int64_t layers, heads, hidden;
} gpt2_sizes[] = {
    {"124m", 12, 12, 768},
    {"350m", 24, 16, 1024},
    {"774m", 36, 20, 1280},
    {"1558m", 48, 25, 1600},
};

int amp_model_gpt2_size(const char *name, amp_model_config *cfg) {
    if (!name || !cfg) return AMP_ERR_NULL_POINTER;
    for (size_t i = 0; i < sizeof gpt2_sizes / sizeof gpt2_sizes[0]; i++)
        if (!strcmp(name, gpt2_sizes[i].name)) {
            cfg->layers = gpt2_sizes[i].layers, cfg->heads = gpt2_sizes[i].heads;
            cfg->hidden = gpt2_sizes[i].hidden, cfg->context = 1024;
            return AMP_OK;
        }
    return AMP_ERR_INVALID_ARGUMENT;
}

static int gpt2_validate(amp_ctx *ctx, const amp_model_config *c) {
    NN_NEED(ctx, c->layers > 0 && c->layers <= 1000 && c->heads > 0 && c->hidden % c->heads == 0,
            "gpt2: %lld layers, %lld heads for width %lld (the width must divide by the heads)", (long long)c->layers,
            (long long)c->heads, (long long)c->hidden);
    NN_NEED(ctx, c->vocab_padded == 0 || (c->vocab_padded >= c->vocab && c->vocab_padded <= NN_SIZE_CAP),
            "gpt2: padded vocabulary %lld below the vocabulary %lld", (long long)c->vocab_padded, (long long)c->vocab);
    NN_NEED(ctx, c->positions == 0 || (c->positions >= c->context && c->positions <= 65536),
            "gpt2: %lld positions for a context of %lld", (long long)c->positions, (long long)c->context);
    return AMP_OK;
}

static int gpt2_declare(amp_model *m) {
    const amp_model_config *cfg = &m->cfg;
    const int64_t Vp = amp_model_padded_vocab(cfg), T = cfg->context, C = cfg->hidden;
    const int64_t P = cfg->positions > 0 ? cfg->positions : T;
    const amp_dtype dt = cfg->param_dtype;
    m->positions = amp_malloc((size_t)T * sizeof *m->positions);
    if (!m->positions) return AMP_ERR_OUT_OF_MEMORY;
    for (int64_t t = 0; t < T; t++) m->positions[t] = (int32_t)t;
    gpt_layers *L = m->layers = nn_layers_alloc(m, sizeof *L + (size_t)cfg->layers * sizeof L->blocks[0]);
    if (!L) return AMP_ERR_OUT_OF_MEMORY;
    int st = amp_embedding_layer_declare(m->ctx, &L->wte, "wte", Vp, C, dt);
    if (st == AMP_OK) st = amp_embedding_layer_declare(m->ctx, &L->wpe, "wpe", P, C, dt);
    for (int64_t l = 0; l < cfg->layers && st == AMP_OK; l++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "h.%lld", (long long)l);
        st = amp_transformer_block_declare(m->ctx, &L->blocks[l], prefix, C, cfg->heads, dt);
        L->blocks[l].gelu_tanh = true;
    }
    if (st == AMP_OK) st = amp_layer_norm_layer_declare(m->ctx, &L->ln_f, "ln_f", C, dt);
    return st;
}

/* train_gpt2.py's _init_weights: Linear and Embedding weights N(0, 0.02) (the padded rows of wte
 * too), biases 0, LayerNorm 1 and 0, the residual projections (attn.c_proj, mlp.c_proj)
 * N(0, 0.02 / sqrt(2 * n_layer)). Drawn in declaration order from one generator; the head is wte. */
static int gpt2_init(amp_model *m, amp_rng *rng) { return gpt_init_trunk(m, GPT2_INIT_STD, rng); }

/* tokens [B, T] -> logits [B*T, V]: the head is wte's first V rows (the padded rows take no part) */
static amp_tensor *gpt2_forward(amp_model *m, amp_ctx *ctx, amp_tensor *x_in, const int32_t *tokens, int64_t batch) {
    (void)x_in;
    const gpt_layers *L = m->layers;
    amp_tensor *x = gpt_forward_trunk(m, ctx, tokens, batch);
    /* wte[:V], [V, C]: under 16-bit autocast, of wte's cached cast (its cast copy where kept: no cast
     * each step), whose gradient the head's GEMM then adds straight into wte's (tensor/autograd.c's
     * master_of); the values are those of wte's narrowed rows cast by the linear */
    amp_tensor *w = x ? amp_autocast_weight(ctx, AMP_OP_LINEAR, L->wte.weight) : NULL;
    amp_tensor *head = w ? amp_narrow_rows(ctx, w, m->cfg.vocab) : NULL;
    return head ? amp_linear(ctx, x, head, NULL) : NULL; /* [B*T, V] */
}

const nn_model nn_model_gpt2 = {
    .name = "gpt2",
    .task = NN_CHAR_LM,
    .defaults = gpt2_defaults,
    .validate = gpt2_validate,
    .declare = gpt2_declare,
    .init = gpt2_init,
    .forward = gpt2_forward,
    .flops = gpt_flops,
};
