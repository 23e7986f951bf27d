/* Generation with a key/value cache (amp/generate.h): the layers of a gpt or gpt2 (gpt_internal.h)
 * run on the new tokens only, their attention reading the keys and values of every earlier position
 * from the cache. The block below is amp_transformer_block_forward's op sequence with the fused
 * attention's arithmetic (src/ops/attention.c) restricted to the new query rows; the head is gpt.c's
 * lm_head, or gpt2.c's tied wte[:V]. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/autocast.h"
#include "amp/formats.h"
#include "amp/gemm.h"
#include "amp/generate.h"
#include "gpt_internal.h"
#include "../core/alloc_internal.h"
#include "../kernels/elem_kernels.h"
#include "../kernels/vecmath.h"
#include "../tensor/autograd.h"
#include "../tensor/ctx_internal.h"

struct amp_generator {
    amp_model *m;
    amp_dtype compute;    /* the autocast dtype, AMP_F32 for none */
    amp_dtype cache_dtype; /* what the qkv projection produces: compute, or the parameters' dtype */
    int64_t layers, T, C, heads, V;
    int64_t pos;          /* positions in the cache */
    unsigned char *k, *v; /* [layers][T][C] each, cache_dtype */
    int32_t *pos_ids;     /* 0 .. T-1: the position embedding's ids */
};

static int gen_fail(amp_ctx *ctx, int status, const char *msg) {
    if (ctx) amp_ctx_fail(ctx, status, "amp_generator: %s", msg);
    return status;
}

int amp_generator_create(amp_model *m, amp_dtype compute, amp_generator **out) {
    if (out) *out = NULL;
    if (!m || !out) return AMP_ERR_NULL_POINTER;
    amp_ctx *ctx = m->ctx;
    if (m->cfg.kind != AMP_MODEL_GPT && m->cfg.kind != AMP_MODEL_GPT2)
        return amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT,
                            "amp_generator_create: a %s model cannot generate with a key/value cache (only gpt, gpt2)",
                            amp_model_kind_name(m->cfg.kind));
    if (compute != AMP_F32 && compute != AMP_BF16 && compute != AMP_F16)
        return gen_fail(ctx, AMP_ERR_UNSUPPORTED_DTYPE, "the compute dtype must be f32, bf16 or f16");
    for (size_t i = 0; i < m->n_params; i++)
        if (!m->params[i]->data) return gen_fail(ctx, AMP_ERR_STATE, "the model's parameters are not allocated");
    amp_generator *g = amp_calloc(1, sizeof *g);
    if (!g) return AMP_ERR_OUT_OF_MEMORY;
    g->m = m;
    g->compute = compute;
    g->cache_dtype = compute != AMP_F32 ? compute : m->cfg.param_dtype;
    /* the window: every row of the position embedding (gpt2's `positions` may exceed its context) */
    g->layers = m->cfg.layers, g->T = ((const gpt_layers *)m->layers)->wpe.num, g->C = m->cfg.hidden;
    g->heads = m->cfg.heads, g->V = m->cfg.vocab;
    const size_t bytes = (size_t)(g->layers * g->T * g->C) * amp_dtype_size(g->cache_dtype);
    g->k = amp_malloc(bytes);
    g->v = amp_malloc(bytes);
    g->pos_ids = amp_malloc((size_t)g->T * sizeof *g->pos_ids);
    if (!g->k || !g->v || !g->pos_ids) {
        amp_generator_free(g);
        return AMP_ERR_OUT_OF_MEMORY;
    }
    for (int64_t t = 0; t < g->T; t++) g->pos_ids[t] = (int32_t)t;
    *out = g;
    return AMP_OK;
}

void amp_generator_free(amp_generator *g) {
    if (!g) return;
    amp_free(g->k);
    amp_free(g->v);
    amp_free(g->pos_ids);
    amp_free(g);
}

void amp_generator_reset(amp_generator *g) {
    if (g) g->pos = 0;
}

int64_t amp_generator_position(const amp_generator *g) { return g ? g->pos : 0; }
int64_t amp_generator_context(const amp_generator *g) { return g ? g->T : 0; }
int64_t amp_generator_vocab(const amp_generator *g) { return g ? g->V : 0; }

/* ---- the forward pass over the new rows ---- */

/* Causal attention of the n new rows of qkv [1, n, 3C] (positions pos .. pos+n-1) over positions
 * 0 .. pos+n-1, after storing their keys and values in layer l's cache. Per head: S = q K^T / sqrt(D)
 * (amp_gemm, fp32 accumulation), row i's softmax over its first pos+i+1 entries with the row kernels
 * of amp_causal_self_attention, P rounded to the cache dtype, O = P V, rounded once into [1, n, C]. */
static amp_tensor *cached_attention(amp_generator *g, int64_t l, amp_tensor *qkv, int64_t n) {
    amp_ctx *ctx = g->m->ctx;
    const amp_dtype dt = g->cache_dtype;
    const size_t es = amp_dtype_size(dt);
    const int64_t C = g->C, C3 = 3 * C, D = C / g->heads, L = g->pos + n;
    if (!(qkv = amp_contiguous(ctx, qkv))) return NULL;
    unsigned char *kc = g->k + (size_t)(l * g->T * C) * es, *vc = g->v + (size_t)(l * g->T * C) * es;
    amp_arena_mark mk = amp_scratch_mark(ctx);
    unsigned char *q = amp_scratch_alloc(ctx, (size_t)(n * C) * es);
    float *s = amp_f32_scratch(ctx, n * L), *o = amp_f32_scratch(ctx, n * C);
    void *p = dt == AMP_F32 ? (void *)s : amp_scratch_alloc(ctx, (size_t)(n * L) * es);
    if (ctx->status != AMP_OK) {
        amp_scratch_release(ctx, mk);
        return NULL;
    }
    /* q, k, v of the new rows in the cache dtype (a copy when qkv has it: convert is exact then) */
    const size_t qs = amp_dtype_size(qkv->dtype);
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *row = (const unsigned char *)qkv->data + (size_t)(i * C3) * qs;
        amp_convert(q + (size_t)(i * C) * es, dt, row, qkv->dtype, (size_t)C);
        amp_convert(kc + (size_t)((g->pos + i) * C) * es, dt, row + (size_t)C * qs, qkv->dtype, (size_t)C);
        amp_convert(vc + (size_t)((g->pos + i) * C) * es, dt, row + (size_t)(2 * C) * qs, qkv->dtype, (size_t)C);
    }
    const amp_vmath_kernels *vm = amp_vmath_active();
    const amp_elem_kernels *ek = amp_elem_active();
    const float scale = (float)(1.0 / sqrt((double)D));
    int st = AMP_OK;
    for (int64_t h = 0; h < g->heads && st == AMP_OK; h++) {
        const size_t hoff = (size_t)(h * D) * es;
        st = amp_gemm(dt, false, true, n, L, D, scale, q + hoff, C, kc + hoff, C, 0.0f, s, L);
        for (int64_t i = 0; i < n && st == AMP_OK; i++) {
            float *row = s + i * L;
            const size_t len = (size_t)(g->pos + i + 1);
            ek->sub_scalar(row, ek->max(row, len), len);
            vm->exp(row, row, len);
            ek->div_scalar(row, ek->sum(row, len), len);
            memset(row + len, 0, ((size_t)L - len) * sizeof *row);
        }
        if (st == AMP_OK && dt != AMP_F32) amp_convert(p, dt, s, AMP_F32, (size_t)(n * L));
        if (st == AMP_OK) st = amp_gemm(dt, false, false, n, D, L, 1.0f, p, L, vc + hoff, C, 0.0f, o + h * D, C);
    }
    amp_tensor *out = NULL;
    if (st != AMP_OK) amp_ctx_fail(ctx, st, "amp_generator: amp_gemm failed: %s", amp_status_str(st));
    else out = amp_tensor_from(ctx, dt, 3, (const int64_t[]){1, n, C}, o, AMP_F32);
    amp_scratch_release(ctx, mk);
    return out;
}

/* One block on the new rows: amp_transformer_block_forward with cached_attention. */
static amp_tensor *block_step(amp_generator *g, int64_t l, amp_tensor *x, int64_t n) {
    amp_ctx *ctx = g->m->ctx;
    const amp_transformer_block *b = &((const gpt_layers *)g->m->layers)->blocks[l];
    amp_tensor *h = nn_norm_for_linear(ctx, &b->ln_1, x);
    amp_tensor *qkv = h ? amp_linear_layer_forward(ctx, &b->attn.c_attn, h) : NULL; /* [1, n, 3C] */
    amp_tensor *att = qkv ? cached_attention(g, l, qkv, n) : NULL;
    if (!att) return NULL;
    x = amp_linear_residual(ctx, att, b->attn.c_proj.weight, b->attn.c_proj.bias, x);
    h = nn_norm_for_linear(ctx, &b->ln_2, x);
    h = amp_linear_layer_forward_act(ctx, &b->mlp_fc, h, b->gelu_tanh ? AMP_ACT_GELU_TANH : AMP_ACT_GELU); /* [1, n, 4C] */
    return amp_linear_residual(ctx, h, b->mlp_proj.weight, b->mlp_proj.bias, x);
}

/* tokens[0..n) at positions pos.. -> logits [rows, V]: every row (all) or the last. */
static amp_tensor *forward_rows(amp_generator *g, const int32_t *tokens, int64_t n, bool all) {
    amp_ctx *ctx = g->m->ctx;
    const gpt_layers *L = g->m->layers;
    const int64_t C = g->C;
    amp_tensor *tok = amp_embedding_layer_forward(ctx, &L->wte, tokens, 2, (const int64_t[]){1, n});
    amp_tensor *pos = amp_embedding_layer_forward(ctx, &L->wpe, g->pos_ids + g->pos, 1, (const int64_t[]){n});
    amp_tensor *x = amp_add(ctx, tok, pos);
    for (int64_t l = 0; l < g->layers && x; l++) x = block_step(g, l, x, n);
    if (x && !all && n > 1) { /* only the last row goes on: the rows are independent from here */
        if (!(x = amp_contiguous(ctx, x))) return NULL;
        const size_t es = amp_dtype_size(x->dtype);
        x = amp_tensor_from(ctx, x->dtype, 3, (const int64_t[]){1, 1, C},
                            (const unsigned char *)x->data + (size_t)((n - 1) * C) * es, x->dtype);
    }
    x = x ? nn_norm_for_linear(ctx, &L->ln_f, x) : NULL;
    x = amp_reshape(ctx, x, 2, (const int64_t[]){all ? n : 1, C});
    if (L->lm_head.weight) return amp_linear_layer_forward(ctx, &L->lm_head, x);
    amp_tensor *head = amp_narrow_rows(ctx, L->wte.weight, g->V); /* gpt2: the head is wte[:V] (tied) */
    return x && head ? amp_linear(ctx, x, head, NULL) : NULL;
}

static int feed(amp_generator *g, const int32_t *tokens, int64_t n, float *logits, bool all) {
    if (!g) return AMP_ERR_NULL_POINTER;
    amp_ctx *ctx = g->m->ctx;
    if (!tokens) return gen_fail(ctx, AMP_ERR_NULL_POINTER, "no tokens (NULL)");
    if (n < 1 || n > g->T - g->pos)
        return amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT,
                            "amp_generator: %lld tokens at position %lld do not fit the context of %lld",
                            (long long)n, (long long)g->pos, (long long)g->T);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= g->V)
            return amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "amp_generator: token %lld is %d, outside [0, %lld)",
                                (long long)i, (int)tokens[i], (long long)g->V);
    int st = amp_ctx_reset(ctx);
    if (st != AMP_OK) return st;
    const bool prev = amp_set_grad_enabled(ctx, false);
    const bool autocast = g->compute != AMP_F32;
    if (autocast && (st = amp_autocast_enter(g->compute)) != AMP_OK) {
        amp_set_grad_enabled(ctx, prev);
        return gen_fail(ctx, st, "cannot enter autocast");
    }
    amp_tensor *out = forward_rows(g, tokens, n, all);
    if (autocast) amp_autocast_exit();
    amp_set_grad_enabled(ctx, prev);
    if (out && logits) st = amp_tensor_read(out, logits, AMP_F32);
    if (!out) st = amp_ctx_status(ctx) != AMP_OK ? amp_ctx_status(ctx) : AMP_ERR_STATE;
    if (st != AMP_OK) {
        g->pos = 0; /* the layers before the failure may have written part of the cache */
        return st;
    }
    g->pos += n;
    return amp_ctx_reset(ctx);
}

int amp_generator_feed(amp_generator *g, const int32_t *tokens, int64_t n, float *logits) {
    return feed(g, tokens, n, logits, false);
}

int amp_generator_feed_all(amp_generator *g, const int32_t *tokens, int64_t n, float *logits) {
    return feed(g, tokens, n, logits, true);
}

int amp_generator_append(amp_generator *g, const int32_t *history, int64_t len, float *logits) {
    if (!g) return AMP_ERR_NULL_POINTER;
    if (!history || len < 1) return gen_fail(g->m->ctx, AMP_ERR_INVALID_ARGUMENT, "append needs a history of >= 1 token");
    if (g->pos == 0) return amp_generator_recompute(g, history, len, logits); /* after a reset or a failure */
    if (g->pos < g->T) return feed(g, history + len - 1, 1, logits, false);
    const int64_t keep = g->T / 2 > 0 ? g->T / 2 : 1, from = len > keep ? len - keep : 0;
    g->pos = 0;
    return feed(g, history + from, len - from, logits, false);
}

int amp_generator_recompute(amp_generator *g, const int32_t *history, int64_t len, float *logits) {
    if (!g) return AMP_ERR_NULL_POINTER;
    if (!history || len < 1)
        return gen_fail(g->m->ctx, AMP_ERR_INVALID_ARGUMENT, "recompute needs a history of >= 1 token");
    const int64_t from = len > g->T ? len - g->T : 0;
    g->pos = 0;
    return feed(g, history + from, len - from, logits, false);
}

/* ---- sampling ---- */

/* a ranks before b: larger logit, then lower id; NaN after every number */
static bool ranks_before(const float *x, int32_t a, int32_t b) {
    const bool na = isnan(x[a]), nb = isnan(x[b]);
    if (na || nb) return na && nb ? a < b : nb;
    return x[a] > x[b] || (x[a] == x[b] && a < b);
}

/* qsort order of candidates: ranks_before on (logit, id) pairs */
typedef struct ranked {
    float logit;
    int32_t id;
} ranked;

static int ranked_cmp(const void *x, const void *y) {
    const ranked *a = x, *b = y;
    const bool na = isnan(a->logit), nb = isnan(b->logit);
    if (na != nb) return na ? 1 : -1;
    if (!na && a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int id_cmp(const void *x, const void *y) {
    const int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* The k best ids (k < vocab) into ids, ascending: insertion into a ranked list for small k, else a
 * sort of every (logit, id). False when out of memory. */
static bool top_ids(const float *logits, int32_t vocab, int64_t k, int32_t *ids) {
    if (k <= 64) {
        int64_t have = 0;
        for (int32_t i = 0; i < vocab; i++) {
            if (have == k && !ranks_before(logits, i, ids[k - 1])) continue;
            int64_t j = have < k ? have++ : k - 1;
            for (; j > 0 && ranks_before(logits, i, ids[j - 1]); j--) ids[j] = ids[j - 1];
            ids[j] = i;
        }
    } else {
        ranked *all = amp_malloc((size_t)vocab * sizeof *all);
        if (!all) return false;
        for (int32_t i = 0; i < vocab; i++) all[i] = (ranked){logits[i], i};
        qsort(all, (size_t)vocab, sizeof *all, ranked_cmp);
        for (int64_t j = 0; j < k; j++) ids[j] = all[j].id;
        amp_free(all);
    }
    qsort(ids, (size_t)k, sizeof *ids, id_cmp);
    return true;
}

int32_t amp_sample_token(const float *logits, int64_t vocab, const amp_sampling *s, amp_rng *rng) {
    if (!logits || !s || vocab < 1 || vocab > INT32_MAX || !(s->temperature >= 0) || !isfinite(s->temperature) ||
        s->top_k < 0)
        return -1;
    int32_t best = 0;
    for (int32_t i = 1; i < (int32_t)vocab; i++)
        if (ranks_before(logits, i, best)) best = i;
    if (s->temperature == 0 || s->top_k == 1 || !isfinite(logits[best])) return best; /* an inf, or all NaN */
    if (!rng) return -1;
    const bool all = s->top_k == 0 || s->top_k >= vocab;
    const int64_t k = all ? vocab : s->top_k;
    int32_t *ids = all ? NULL : amp_malloc((size_t)k * sizeof *ids);
    if (!all && (!ids || !top_ids(logits, (int32_t)vocab, k, ids))) {
        amp_free(ids);
        return -1;
    }
    /* weights exp((logit - max) / T) in double; the draw walks the candidates in id order */
    const double mx = logits[best], t = s->temperature;
    double total = 0;
    for (int64_t j = 0; j < k; j++) {
        const float x = logits[all ? j : ids[j]];
        total += isnan(x) ? 0.0 : exp(((double)x - mx) / t);
    }
    const double u = amp_rng_uniform(rng) * total;
    double acc = 0;
    int32_t pick = best;
    for (int64_t j = 0; j < k; j++) {
        const int32_t id = all ? (int32_t)j : ids[j];
        const double w = isnan(logits[id]) ? 0.0 : exp(((double)logits[id] - mx) / t);
        acc += w;
        if (w > 0 && u < acc) {
            pick = id;
            break;
        }
    }
    amp_free(ids);
    return pick;
}
