/* The layers of include/amp/layers.h: PyTorch's names, shapes and declaration order; the declaration
 * errors; PyTorch's default initialization; each forward against a double-precision reference of the
 * module it stands for (nn.Linear with its activations, nn.LayerNorm, nn.Embedding, nn.Conv2d,
 * nn.LSTM, nanoGPT's CausalSelfAttention and Block), on random inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "harness.h"
#include "tests.h"

static amp_ctx *new_ctx(void) {
    amp_ctx *ctx = NULL;
    return CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK) ? ctx : NULL;
}

void test_layers_names_and_order(void) {
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    amp_linear_layer fc1, bare;
    amp_layer_norm_layer ln;
    amp_embedding_layer emb;
    amp_conv2d_layer conv;
    amp_lstm_layer lstm;
    amp_attention_layer attn;
    amp_transformer_block block;
    const amp_dtype f = AMP_F32;
    CHECK(amp_linear_layer_declare(ctx, &fc1, "fc1", 3, 4, true, f) == AMP_OK);
    CHECK(amp_linear_layer_declare(ctx, &bare, "", 3, 2, false, AMP_BF16) == AMP_OK && bare.bias == NULL);
    CHECK(amp_layer_norm_layer_declare(ctx, &ln, "ln", 4, f) == AMP_OK && ln.eps == 1e-5f);
    CHECK(amp_embedding_layer_declare(ctx, &emb, "emb", 10, 4, f) == AMP_OK);
    CHECK(amp_conv2d_layer_declare(ctx, &conv, "0", 2, 3, 5, 1, 2, true, f) == AMP_OK);
    CHECK(amp_lstm_layer_declare(ctx, &lstm, "lstm", 4, 5, true, f) == AMP_OK);
    CHECK(amp_attention_layer_declare(ctx, &attn, "attn", 8, 2, true, f) == AMP_OK);
    CHECK(amp_transformer_block_declare(ctx, &block, "h.0", 8, 2, f) == AMP_OK);
    static const struct {
        const char *name;
        int ndim;
        int64_t shape[4];
    } want[] = {
        {"fc1.weight", 2, {4, 3}},                {"fc1.bias", 1, {4}},
        {"weight", 2, {2, 3}},                    {"ln.weight", 1, {4}},
        {"ln.bias", 1, {4}},                      {"emb.weight", 2, {10, 4}},
        {"0.weight", 4, {3, 2, 5, 5}},            {"0.bias", 1, {3}},
        {"lstm.weight_ih_l0", 2, {20, 4}},        {"lstm.weight_hh_l0", 2, {20, 5}},
        {"lstm.bias_ih_l0", 1, {20}},             {"lstm.bias_hh_l0", 1, {20}},
        {"attn.c_attn.weight", 2, {24, 8}},       {"attn.c_attn.bias", 1, {24}},
        {"attn.c_proj.weight", 2, {8, 8}},        {"attn.c_proj.bias", 1, {8}},
        {"h.0.ln_1.weight", 1, {8}},              {"h.0.ln_1.bias", 1, {8}},
        {"h.0.attn.c_attn.weight", 2, {24, 8}},   {"h.0.attn.c_attn.bias", 1, {24}},
        {"h.0.attn.c_proj.weight", 2, {8, 8}},    {"h.0.attn.c_proj.bias", 1, {8}},
        {"h.0.ln_2.weight", 1, {8}},              {"h.0.ln_2.bias", 1, {8}},
        {"h.0.mlp.c_fc.weight", 2, {32, 8}},      {"h.0.mlp.c_fc.bias", 1, {32}},
        {"h.0.mlp.c_proj.weight", 2, {8, 32}},    {"h.0.mlp.c_proj.bias", 1, {8}},
    };
    const size_t n = sizeof want / sizeof want[0];
    CHECK_EQ_INT(amp_ctx_num_params(ctx), n);
    if (amp_ctx_num_params(ctx) == n)
        for (size_t i = 0; i < n; i++) {
            const amp_tensor *t = amp_ctx_param(ctx, i);
            bool same = t->ndim == want[i].ndim && !strcmp(t->name, want[i].name);
            for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == want[i].shape[d];
            CHECK_MSG(same, "parameter %zu: %s, want %s", i, t->name, want[i].name);
        }
    CHECK(fc1.weight == amp_ctx_param(ctx, 0) && fc1.bias == amp_ctx_param(ctx, 1) && fc1.in == 3 && fc1.out == 4);
    CHECK(conv.stride == 1 && conv.padding == 2 && conv.kernel == 5 && lstm.hidden == 5 && attn.heads == 2);
    CHECK(bare.weight->dtype == AMP_BF16);
    CHECK(amp_ctx_status(ctx) == AMP_OK);
    amp_ctx_free(ctx);
}

void test_layers_declare_errors(void) {
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    amp_linear_layer l;
    amp_attention_layer a;
    amp_conv2d_layer c;
    char prefix[300];
    memset(prefix, 'p', sizeof prefix - 1), prefix[sizeof prefix - 1] = '\0';
    static const char *const fns[] = {"amp_linear_layer_declare", "amp_attention_layer_declare",
                                      "amp_conv2d_layer_declare"};
    int st[6];
    st[0] = amp_linear_layer_declare(ctx, &l, "x", 0, 4, true, AMP_F32);          /* a zero size */
    st[1] = amp_attention_layer_declare(ctx, &a, "a", 6, 4, true, AMP_F32);       /* 6 % 4 */
    st[2] = amp_conv2d_layer_declare(ctx, &c, "c", 1, 1, 3, 0, 0, true, AMP_F32); /* stride 0 */
    st[3] = amp_linear_layer_declare(ctx, &l, prefix, 2, 2, true, AMP_F32);       /* a name too long */
    st[4] = amp_linear_layer_declare(ctx, &l, "x", 2, 2, true, AMP_F8E4M3);       /* not f32/f16/bf16 */
    st[5] = amp_linear_layer_declare(ctx, NULL, "x", 2, 2, true, AMP_F32);
    const int want[6] = {AMP_ERR_INVALID_ARGUMENT, AMP_ERR_INVALID_ARGUMENT, AMP_ERR_INVALID_ARGUMENT,
                         AMP_ERR_INVALID_ARGUMENT, AMP_ERR_INVALID_ARGUMENT, AMP_ERR_NULL_POINTER};
    for (int i = 0; i < 6; i++) CHECK_MSG(st[i] == want[i], "case %d: status %d, want %d", i, st[i], want[i]);
    CHECK(l.weight == NULL && l.bias == NULL && a.c_attn.weight == NULL && c.weight == NULL);
    CHECK_EQ_INT(amp_ctx_num_params(ctx), 0);
    CHECK_MSG(strstr(amp_ctx_error(ctx), fns[0]) != NULL, "first error: %s", amp_ctx_error(ctx));
    /* each message names its function */
    for (int i = 1; i < 3; i++) {
        amp_ctx_clear_error(ctx);
        i == 1 ? amp_attention_layer_declare(ctx, &a, "a", 6, 4, true, AMP_F32)
               : amp_conv2d_layer_declare(ctx, &c, "c", 1, 1, 3, 0, 0, true, AMP_F32);
        CHECK_MSG(strstr(amp_ctx_error(ctx), fns[i]) != NULL, "error: %s", amp_ctx_error(ctx));
    }
    amp_ctx_clear_error(ctx);
    CHECK(amp_linear_layer_declare(NULL, &l, "x", 2, 2, true, AMP_F32) == AMP_ERR_NULL_POINTER);
    /* declared after allocation */
    CHECK(amp_linear_layer_declare(ctx, &l, "ok", 2, 2, true, AMP_F32) == AMP_OK);
    CHECK(amp_ctx_alloc_params(ctx) == AMP_OK);
    CHECK(amp_linear_layer_declare(ctx, &l, "late", 2, 2, true, AMP_F32) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(strstr(amp_ctx_error(ctx), "declared after amp_ctx_alloc_params") != NULL);
    amp_ctx_free(ctx);
}

/* Before allocation every init function refuses with the hint; after it, the PyTorch defaults. */
void test_layers_init(void) {
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    amp_transformer_block b;
    amp_lstm_layer lstm;
    amp_rng rng;
    amp_rng_seed(&rng, 8);
    CHECK(amp_transformer_block_declare(ctx, &b, "blk", 16, 4, AMP_F32) == AMP_OK);
    CHECK(amp_lstm_layer_declare(ctx, &lstm, "lstm", 3, 16, false, AMP_F32) == AMP_OK && lstm.b_ih == NULL);
    CHECK(amp_transformer_block_init(ctx, &b, &rng) == AMP_ERR_STATE);
    CHECK_MSG(strstr(amp_ctx_error(ctx), "amp_ctx_alloc_params") != NULL, "message: %s", amp_ctx_error(ctx));
    amp_ctx_clear_error(ctx);
    if (!CHECK(amp_ctx_alloc_params(ctx) == AMP_OK)) {
        amp_ctx_free(ctx);
        return;
    }
    CHECK(amp_transformer_block_init(ctx, &b, &rng) == AMP_OK && amp_lstm_layer_init(ctx, &lstm, &rng) == AMP_OK);
    const amp_tensor *uniform[5] = {b.attn.c_attn.weight, b.attn.c_proj.bias, b.mlp_fc.weight, lstm.w_ih, lstm.w_hh};
    const float bound[5] = {0.25f, 0.25f, 0.25f, 0.25f, 0.25f}; /* 1/sqrt(16) each */
    for (int i = 0; i < 5; i++) {
        float most = 0;
        for (int64_t j = 0; j < amp_tensor_numel(uniform[i]); j++)
            most = fmaxf(most, fabsf(amp_tensor_get(uniform[i], j)));
        CHECK_MSG(most <= bound[i] && most > 0.8f * bound[i], "tensor %d: max %g", i, most);
    }
    float most = 0; /* mlp.c_proj: fan_in 64 */
    for (int64_t j = 0; j < amp_tensor_numel(b.mlp_proj.weight); j++)
        most = fmaxf(most, fabsf(amp_tensor_get(b.mlp_proj.weight, j)));
    CHECK_MSG(most <= 0.125f && most > 0.12f, "mlp.c_proj: max %g", most);
    CHECK(amp_tensor_get(b.ln_1.weight, 3) == 1.0f && amp_tensor_get(b.ln_2.bias, 5) == 0.0f);
    CHECK(amp_linear_layer_init(ctx, NULL, &rng) == AMP_ERR_NULL_POINTER);
    amp_ctx_free(ctx);
}

/* ---- forwards against double references ---- */

typedef struct rnd {
    uint64_t s;
} rnd;

static float urand(rnd *r) {
    r->s ^= r->s << 13, r->s ^= r->s >> 7, r->s ^= r->s << 17;
    return (float)(r->s >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

/* Fills a tensor (parameter or arena) with U(-scale, scale) values, keeping them in v. */
static void fill(amp_tensor *t, float *v, float scale, rnd *r) {
    const int64_t n = amp_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) v[i] = scale * urand(r);
    amp_tensor_write(t, v, AMP_F32);
}

/* Reads t as double values into out (at most cap). */
static int64_t read_double(const amp_tensor *t, double *out, int64_t cap) {
    const int64_t n = amp_tensor_numel(t);
    for (int64_t i = 0; i < n && i < cap; i++) out[i] = amp_tensor_get(t, i);
    return n;
}

/* y[r, o] = sum_i x[r, i] w[o, i] + b[o] (b may be NULL), then the activation (0 none, 1 relu, 2 gelu). */
static void linear_ref(const double *x, const double *w, const double *b, int64_t rows, int64_t in, int64_t out,
                       int act, double *y) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int64_t i = 0; i < in; i++) s += x[r * in + i] * w[o * in + i];
            if (act == 1) s = s > 0 ? s : 0;
            if (act == 2) s = 0.5 * s * (1.0 + erf(s / sqrt(2.0)));
            y[r * out + o] = s;
        }
}

static void layer_norm_ref(const double *x, const double *w, const double *b, int64_t rows, int64_t d, double *y) {
    for (int64_t r = 0; r < rows; r++) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < d; i++) mean += x[r * d + i] / (double)d;
        for (int64_t i = 0; i < d; i++) var += (x[r * d + i] - mean) * (x[r * d + i] - mean) / (double)d;
        for (int64_t i = 0; i < d; i++) y[r * d + i] = (x[r * d + i] - mean) / sqrt(var + 1e-5) * w[i] + b[i];
    }
}

/* Causal attention of qkv [B, T, 3C] (q, k, v column blocks, heads of D = C / H) -> [B, T, C]. */
static void attention_ref(const double *qkv, int64_t B, int64_t T, int64_t C, int64_t H, double *y) {
    const int64_t D = C / H;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                const double *q = qkv + (b * T + t) * 3 * C + h * D;
                double s[64], most = -INFINITY, total = 0;
                for (int64_t u = 0; u <= t; u++) {
                    const double *k = qkv + (b * T + u) * 3 * C + C + h * D;
                    s[u] = 0;
                    for (int64_t i = 0; i < D; i++) s[u] += q[i] * k[i] / sqrt((double)D);
                    most = fmax(most, s[u]);
                }
                for (int64_t u = 0; u <= t; u++) total += (s[u] = exp(s[u] - most));
                for (int64_t i = 0; i < D; i++) {
                    double acc = 0;
                    for (int64_t u = 0; u <= t; u++) acc += s[u] / total * qkv[(b * T + u) * 3 * C + 2 * C + h * D + i];
                    y[(b * T + t) * C + h * D + i] = acc;
                }
            }
}

/* max |got - want| over n values, relative to max(1, max |want|). */
static double worst(const amp_tensor *got, const double *want, int64_t n) {
    double err = 0, scale = 1;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) err = fmax(err, fabs((double)amp_tensor_get(got, i) - want[i]));
    return got && amp_tensor_numel(got) == n ? err / scale : INFINITY;
}

enum { MAXV = 4096 };

void test_layers_forward_linear_norm_embedding_conv(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    rnd r = {seed | 1};
    amp_linear_layer fc;
    amp_layer_norm_layer ln;
    amp_embedding_layer emb;
    amp_conv2d_layer conv;
    const int64_t R = 5, I = 7, O = 6;
    static float v[MAXV];
    static double x[MAXV], w[MAXV], b[MAXV], y[MAXV];
    bool ok = CHECK(amp_linear_layer_declare(ctx, &fc, "fc", I, O, true, AMP_F32) == AMP_OK) &&
              CHECK(amp_layer_norm_layer_declare(ctx, &ln, "ln", O, AMP_F32) == AMP_OK) &&
              CHECK(amp_embedding_layer_declare(ctx, &emb, "emb", 9, 3, AMP_F32) == AMP_OK) &&
              CHECK(amp_conv2d_layer_declare(ctx, &conv, "conv", 2, 3, 3, 2, 1, true, AMP_F32) == AMP_OK) &&
              CHECK(amp_ctx_alloc_params(ctx) == AMP_OK);
    if (!ok) {
        amp_ctx_free(ctx);
        return;
    }
    fill(fc.weight, v, 0.5f, &r), fill(fc.bias, v, 0.5f, &r);
    fill(ln.weight, v, 1.0f, &r), fill(ln.bias, v, 1.0f, &r);
    fill(emb.weight, v, 1.0f, &r), fill(conv.weight, v, 0.5f, &r), fill(conv.bias, v, 0.5f, &r);
    amp_tensor *xt = amp_tensor_new(ctx, AMP_F32, 2, (const int64_t[]){R, I});
    fill(xt, v, 1.0f, &r);
    read_double(xt, x, MAXV), read_double(fc.weight, w, MAXV), read_double(fc.bias, b, MAXV);
    for (int act = 0; act < 3; act++) {
        linear_ref(x, w, b, R, I, O, act, y);
        amp_tensor *out = act ? amp_linear_layer_forward_act(ctx, &fc, xt, (amp_activation)act)
                              : amp_linear_layer_forward(ctx, &fc, xt);
        CHECK_MSG(worst(out, y, R * O) < 1e-6, "linear, activation %d: error %g", act, worst(out, y, R * O));
    }
    CHECK(amp_linear_layer_forward_act(ctx, &fc, xt, (amp_activation)7) == NULL);
    amp_ctx_clear_error(ctx);
    /* layer norm of the linear's output */
    amp_tensor *h = amp_linear_layer_forward(ctx, &fc, xt);
    double hv[64], lw[8], lb[8];
    read_double(h, hv, 64), read_double(ln.weight, lw, 8), read_double(ln.bias, lb, 8);
    layer_norm_ref(hv, lw, lb, R, O, y);
    CHECK_MSG(worst(amp_layer_norm_layer_forward(ctx, &ln, h), y, R * O) < 1e-5, "layer norm");
    /* embedding: rows copied */
    const int32_t ids[4] = {8, 0, 3, 8};
    amp_tensor *e = amp_embedding_layer_forward(ctx, &emb, ids, 2, (const int64_t[]){2, 2});
    bool rows = e && e->ndim == 3 && e->shape[2] == 3;
    for (int i = 0; rows && i < 4; i++)
        for (int d = 0; d < 3; d++) rows = rows && amp_tensor_get(e, i * 3 + d) == amp_tensor_get(emb.weight, ids[i] * 3 + d);
    CHECK_MSG(rows, "embedding rows");
    /* conv2d, stride 2, padding 1: x [2, 2, 5, 5] -> [2, 3, 3, 3] */
    amp_tensor *img = amp_tensor_new(ctx, AMP_F32, 4, (const int64_t[]){2, 2, 5, 5});
    fill(img, v, 1.0f, &r);
    read_double(img, x, MAXV), read_double(conv.weight, w, MAXV), read_double(conv.bias, b, MAXV);
    for (int n = 0; n < 2; n++)
        for (int o = 0; o < 3; o++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++) {
                    double s = b[o];
                    for (int c = 0; c < 2; c++)
                        for (int ki = 0; ki < 3; ki++)
                            for (int kj = 0; kj < 3; kj++) {
                                const int yy = 2 * i - 1 + ki, xx = 2 * j - 1 + kj;
                                if (yy >= 0 && yy < 5 && xx >= 0 && xx < 5)
                                    s += x[((n * 2 + c) * 5 + yy) * 5 + xx] * w[((o * 2 + c) * 3 + ki) * 3 + kj];
                            }
                    y[((n * 3 + o) * 3 + i) * 3 + j] = s;
                }
    CHECK_MSG(worst(amp_conv2d_layer_forward(ctx, &conv, img), y, 2 * 3 * 3 * 3) < 1e-6, "conv2d");
    CHECK_MSG(amp_ctx_status(ctx) == AMP_OK, "%s", amp_ctx_error(ctx));
    amp_ctx_free(ctx);
}

static double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

void test_layers_forward_lstm(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    enum { B = 2, T = 4, I = 3, H = 5, V = 6 };
    amp_lstm_layer l;
    amp_embedding_layer emb;
    static double wih[4 * H * I], whh[4 * H * H], bih[4 * H], bhh[4 * H], x[B * T * I], y[B * T * H];
    if (!CHECK(amp_lstm_layer_declare(ctx, &l, "lstm", I, H, true, AMP_F32) == AMP_OK) ||
        !CHECK(amp_embedding_layer_declare(ctx, &emb, "emb", V, I, AMP_F32) == AMP_OK) ||
        !CHECK(amp_ctx_alloc_params(ctx) == AMP_OK)) {
        amp_ctx_free(ctx);
        return;
    }
    amp_rng rng;
    amp_rng_seed(&rng, seed);
    CHECK(amp_lstm_layer_init(ctx, &l, &rng) == AMP_OK && amp_embedding_layer_init(ctx, &emb, &rng) == AMP_OK);
    const int32_t tokens[B * T] = {1, 5, 0, 2, 3, 3, 4, 1};
    amp_tensor *xt = amp_embedding_layer_forward(ctx, &emb, tokens, 2, (const int64_t[]){B, T});
    read_double(l.w_ih, wih, MAXV), read_double(l.w_hh, whh, MAXV), read_double(l.b_ih, bih, MAXV);
    read_double(l.b_hh, bhh, MAXV), read_double(xt, x, MAXV);
    for (int b = 0; b < B; b++) {
        double h[H] = {0}, c[H] = {0};
        for (int t = 0; t < T; t++) {
            double g[4 * H], hn[H];
            for (int k = 0; k < 4 * H; k++) {
                g[k] = bih[k] + bhh[k];
                for (int i = 0; i < I; i++) g[k] += wih[k * I + i] * x[(b * T + t) * I + i];
                for (int j = 0; j < H; j++) g[k] += whh[k * H + j] * h[j];
            }
            for (int j = 0; j < H; j++) { /* gates i, f, g, o */
                c[j] = sigmoid(g[H + j]) * c[j] + sigmoid(g[j]) * tanh(g[2 * H + j]);
                hn[j] = sigmoid(g[3 * H + j]) * tanh(c[j]);
            }
            memcpy(h, hn, sizeof h);
            memcpy(y + (b * T + t) * H, h, sizeof h);
        }
    }
    amp_tensor *out = amp_lstm_layer_forward(ctx, &l, xt);
    CHECK_MSG(out && out->ndim == 3 && out->shape[2] == H && worst(out, y, B * T * H) < 1e-5, "lstm: error %g",
              worst(out, y, B * T * H));
    /* with the embedding folded in: the same values, bit for bit */
    amp_tensor *folded = amp_lstm_layer_forward_tokens(ctx, &l, &emb, tokens, B, T);
    bool same = out && folded && amp_tensor_numel(folded) == B * T * H;
    for (int64_t i = 0; same && i < B * T * H; i++) same = amp_tensor_get(out, i) == amp_tensor_get(folded, i);
    CHECK_MSG(same, "amp_lstm_layer_forward_tokens differs from the embedding then amp_lstm_layer_forward");
    CHECK_MSG(amp_ctx_status(ctx) == AMP_OK, "%s", amp_ctx_error(ctx));
    amp_ctx_free(ctx);
}

/* The attention layer and the transformer block against the composition in double. */
void test_layers_forward_attention_block(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    enum { B = 2, T = 5, C = 8, NH = 2 };
    amp_attention_layer attn;
    amp_transformer_block blk;
    if (!CHECK(amp_attention_layer_declare(ctx, &attn, "attn", C, NH, true, AMP_F32) == AMP_OK) ||
        !CHECK(amp_transformer_block_declare(ctx, &blk, "h.0", C, NH, AMP_F32) == AMP_OK) ||
        !CHECK(amp_ctx_alloc_params(ctx) == AMP_OK)) {
        amp_ctx_free(ctx);
        return;
    }
    amp_rng rng;
    amp_rng_seed(&rng, seed);
    CHECK(amp_attention_layer_init(ctx, &attn, &rng) == AMP_OK && amp_transformer_block_init(ctx, &blk, &rng) == AMP_OK);
    /* non-trivial norms */
    CHECK(amp_init_uniform(ctx, blk.ln_1.weight, 0.5f, 1.5f, &rng) == AMP_OK &&
          amp_init_uniform(ctx, blk.ln_2.bias, -0.5f, 0.5f, &rng) == AMP_OK);
    rnd r = {seed ^ 0xABCDEFu};
    static float v[MAXV];
    static double x[B * T * C], w[4 * C * C], b[4 * C], w2[4 * C * C], b2[4 * C], qkv[B * T * 3 * C], att[B * T * C],
        y[B * T * C], h[B * T * 4 * C], lw[C], lb[C], x1[B * T * C];
    amp_tensor *xt = amp_tensor_new(ctx, AMP_F32, 3, (const int64_t[]){B, T, C});
    fill(xt, v, 1.0f, &r);
    read_double(xt, x, MAXV);
    /* attention alone, with and without the residual */
    read_double(attn.c_attn.weight, w, MAXV), read_double(attn.c_attn.bias, b, MAXV);
    linear_ref(x, w, b, B * T, C, 3 * C, 0, qkv);
    attention_ref(qkv, B, T, C, NH, att);
    read_double(attn.c_proj.weight, w, MAXV), read_double(attn.c_proj.bias, b, MAXV);
    linear_ref(att, w, b, B * T, C, C, 0, y);
    CHECK_MSG(worst(amp_attention_layer_forward(ctx, &attn, xt, NULL), y, B * T * C) < 1e-5, "attention");
    for (int i = 0; i < B * T * C; i++) y[i] += x[i];
    CHECK_MSG(worst(amp_attention_layer_forward(ctx, &attn, xt, xt), y, B * T * C) < 1e-5, "attention + residual");
    /* the block: x1 = x + attn(ln_1(x)); out = x1 + mlp(ln_2(x1)) */
    read_double(blk.ln_1.weight, lw, C), read_double(blk.ln_1.bias, lb, C);
    layer_norm_ref(x, lw, lb, B * T, C, h);
    read_double(blk.attn.c_attn.weight, w, MAXV), read_double(blk.attn.c_attn.bias, b, MAXV);
    linear_ref(h, w, b, B * T, C, 3 * C, 0, qkv);
    attention_ref(qkv, B, T, C, NH, att);
    read_double(blk.attn.c_proj.weight, w, MAXV), read_double(blk.attn.c_proj.bias, b, MAXV);
    linear_ref(att, w, b, B * T, C, C, 0, x1);
    for (int i = 0; i < B * T * C; i++) x1[i] += x[i];
    read_double(blk.ln_2.weight, lw, C), read_double(blk.ln_2.bias, lb, C);
    layer_norm_ref(x1, lw, lb, B * T, C, att);
    read_double(blk.mlp_fc.weight, w, MAXV), read_double(blk.mlp_fc.bias, b, MAXV);
    linear_ref(att, w, b, B * T, C, 4 * C, 2, h);
    read_double(blk.mlp_proj.weight, w2, MAXV), read_double(blk.mlp_proj.bias, b2, MAXV);
    linear_ref(h, w2, b2, B * T, 4 * C, C, 0, y);
    for (int i = 0; i < B * T * C; i++) y[i] += x1[i];
    amp_tensor *out = amp_transformer_block_forward(ctx, &blk, xt);
    CHECK_MSG(worst(out, y, B * T * C) < 1e-5, "block: error %g", worst(out, y, B * T * C));
    /* under autocast bf16 the block stays within bf16's rounding of the reference */
    amp_autocast_enter(AMP_BF16);
    out = amp_transformer_block_forward(ctx, &blk, xt);
    amp_autocast_exit();
    CHECK_MSG(worst(out, y, B * T * C) < 0.05, "block under autocast: error %g", worst(out, y, B * T * C));
    CHECK_MSG(amp_ctx_status(ctx) == AMP_OK, "%s", amp_ctx_error(ctx));
    amp_ctx_free(ctx);
}
