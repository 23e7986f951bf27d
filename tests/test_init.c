/* The initializers of include/amp/init.h against closed forms: the generator's published test
 * vectors, the bounds and moments of the uniform and normal fills over many samples, exact constants,
 * f16/bf16 fills as the f32 fill rounded once, PyTorch's default bounds per layer kind, the error
 * statuses and messages, and amp_model_init as the same public fills. */
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

/* Reads t as fp32 into a malloc'd buffer. */
static float *values(const amp_tensor *t) {
    float *v = malloc((size_t)amp_tensor_numel(t) * sizeof *v);
    if (v && amp_tensor_read(t, v, AMP_F32) != AMP_OK) free(v), v = NULL;
    return v;
}

void test_init_generator(void) {
    /* splitmix64 from 0 (Vigna's splitmix64.c) gives the four state words */
    amp_rng rng;
    amp_rng_seed(&rng, 0);
    const uint64_t seeded[4] = {0xE220A8397B1DCDAFull, 0x6E789E6AA1B965F4ull, 0x06C45D188009454Full,
                                0xF88BB8A8724C81ECull};
    for (int i = 0; i < 4; i++) CHECK_EQ_BITS(rng.s[i], seeded[i], "splitmix64 output %d", i);
    /* xoshiro256** from the state {1, 2, 3, 4} (the reference xoshiro256starstar.c) */
    rng = (amp_rng){{1, 2, 3, 4}};
    const uint64_t outputs[4] = {11520, 0, 1509978240, 1215971899390074240ull};
    for (int i = 0; i < 4; i++) CHECK_EQ_BITS(amp_rng_next(&rng), outputs[i], "xoshiro256** output %d", i);
    /* uniform: the top 53 bits */
    amp_rng a, b;
    amp_rng_seed(&a, 99), amp_rng_seed(&b, 99);
    for (int i = 0; i < 1000; i++) {
        const double u = amp_rng_uniform(&a);
        const uint64_t bits = amp_rng_next(&b);
        if (!CHECK_MSG(u == (double)(bits >> 11) * 0x1p-53 && u >= 0.0 && u < 1.0, "draw %d: %.17g", i, u)) break;
    }
    amp_rng_seed(NULL, 1); /* ignored */
}

/* Mean and mean square of v[0..n) in double. */
static void moments(const float *v, int64_t n, double *mean, double *square) {
    double s = 0, q = 0;
    for (int64_t i = 0; i < n; i++) s += v[i], q += (double)v[i] * v[i];
    *mean = s / (double)n, *square = q / (double)n;
}

void test_init_fills(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    enum { N = 200000 };
    amp_tensor *t = amp_tensor_new(ctx, AMP_F32, 1, (const int64_t[]){N});
    amp_rng rng;
    amp_rng_seed(&rng, seed);
    float *v = NULL;
    double mean, square;
    /* U(-0.5, 1.5): inside the bounds, the largest close to them; mean 0.5 (sd 1/sqrt(3N)), variance 1/3
     * (the mean square's sd sqrt(4/45)/sqrt(N) around 0; checked at 6 sd) */
    if (CHECK(amp_init_uniform(ctx, t, -0.5f, 1.5f, &rng) == AMP_OK) && CHECK((v = values(t)) != NULL)) {
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t i = 0; i < N; i++) lo = fminf(lo, v[i]), hi = fmaxf(hi, v[i]);
        CHECK_MSG(lo >= -0.5f && hi <= 1.5f && lo < -0.499f && hi > 1.499f, "U(-0.5, 1.5): [%g, %g]", lo, hi);
        for (int64_t i = 0; i < N; i++) v[i] -= 0.5f; /* exact: centred U(-1, 1) */
        moments(v, N, &mean, &square);
        CHECK_MSG(fabs(mean) < 6.0 / sqrt(3.0 * N), "U(-1, 1): mean %g", mean);
        CHECK_MSG(fabs(square - 1.0 / 3.0) < 6.0 * sqrt(4.0 / 45.0 / N), "U(-1, 1): mean square %g", square);
    }
    free(v), v = NULL;
    /* N(2, 0.5^2): mean (sd 0.5/sqrt N), variance (sd 0.25 sqrt(2/N)), and the share within one sd 0.6827 */
    if (CHECK(amp_init_normal(ctx, t, 2.0f, 0.5f, &rng) == AMP_OK) && CHECK((v = values(t)) != NULL)) {
        int64_t inside = 0;
        for (int64_t i = 0; i < N; i++) inside += fabsf(v[i] - 2.0f) < 0.5f, v[i] = (v[i] - 2.0f) / 0.5f;
        moments(v, N, &mean, &square);
        CHECK_MSG(fabs(mean) < 6.0 / sqrt(N), "N(2, 0.25): standardized mean %g", mean);
        CHECK_MSG(fabs(square - 1.0) < 6.0 * sqrt(2.0 / N), "N(2, 0.25): standardized variance %g", square);
        const double p = 0.682689492137086, share = (double)inside / N;
        CHECK_MSG(fabs(share - p) < 6.0 * sqrt(p * (1 - p) / N), "N(2, 0.25): %.4f within one sd", share);
    }
    free(v), v = NULL;
    /* constants: exact, rounded once to the dtype */
    const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int d = 0; d < 3; d++) {
        amp_tensor *c = amp_tensor_new(ctx, dts[d], 2, (const int64_t[]){3, 5});
        const float want[4] = {0.1f, 0.0f, 1.0f, -3.5f};
        for (int k = 0; k < 4; k++) {
            const int st = k == 0   ? amp_init_constant(ctx, c, want[0])
                           : k == 1 ? amp_init_zeros(ctx, c)
                           : k == 2 ? amp_init_ones(ctx, c)
                                    : amp_init_constant(ctx, c, want[3]);
            float rounded = want[k];
            uint16_t narrow = 0;
            if (dts[d] != AMP_F32)
                amp_convert(&narrow, dts[d], &want[k], AMP_F32, 1), amp_convert(&rounded, AMP_F32, &narrow, dts[d], 1);
            bool all = st == AMP_OK;
            for (int64_t i = 0; i < 15; i++) all = all && amp_tensor_get(c, i) == rounded;
            CHECK_MSG(all, "%s constant %d: status %d", amp_dtype_name(dts[d]), k, st);
        }
    }
    amp_ctx_free(ctx);
}

/* f16 and bf16 fills are the f32 fill (same seed) rounded once; a fill leaves the generator where the
 * draws end, so two fills in a row continue one stream. */
void test_init_dtypes_and_stream(void) {
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    const int64_t n = 1000;
    amp_tensor *f32 = amp_tensor_new(ctx, AMP_F32, 1, &n), *both = amp_tensor_new(ctx, AMP_F32, 1, (int64_t[]){2 * n});
    const amp_dtype narrow[2] = {AMP_F16, AMP_BF16};
    for (int kind = 0; kind < 2; kind++) {
        for (int d = 0; d < 2; d++) {
            amp_tensor *t = amp_tensor_new(ctx, narrow[d], 1, &n);
            amp_rng r32, r16;
            amp_rng_seed(&r32, 5 + (uint64_t)d), amp_rng_seed(&r16, 5 + (uint64_t)d);
            int st = kind ? amp_init_normal(ctx, f32, 0.0f, 3.0f, &r32) : amp_init_uniform(ctx, f32, -2.0f, 2.0f, &r32);
            st |= kind ? amp_init_normal(ctx, t, 0.0f, 3.0f, &r16) : amp_init_uniform(ctx, t, -2.0f, 2.0f, &r16);
            uint16_t want[1000], got[1000];
            float *v = values(f32);
            bool same = st == AMP_OK && v && amp_convert(want, narrow[d], v, AMP_F32, (size_t)n) == AMP_OK &&
                        amp_tensor_read(t, got, narrow[d]) == AMP_OK && !memcmp(want, got, sizeof want);
            CHECK_MSG(same, "%s %s fill is not the f32 fill rounded once", amp_dtype_name(narrow[d]),
                      kind ? "normal" : "uniform");
            CHECK(!memcmp(&r32, &r16, sizeof r32)); /* the same draws */
            free(v);
        }
    }
    /* one fill of 2n values equals two fills of n from one generator */
    amp_rng one, two;
    amp_rng_seed(&one, 11), amp_rng_seed(&two, 11);
    float *whole = NULL, *first = NULL, *second = NULL;
    if (CHECK(amp_init_normal(ctx, both, 0.0f, 1.0f, &one) == AMP_OK) && (whole = values(both)) &&
        CHECK(amp_init_normal(ctx, f32, 0.0f, 1.0f, &two) == AMP_OK) && (first = values(f32)) &&
        CHECK(amp_init_normal(ctx, f32, 0.0f, 1.0f, &two) == AMP_OK) && (second = values(f32)))
        CHECK(!memcmp(whole, first, (size_t)n * 4) && !memcmp(whole + n, second, (size_t)n * 4));
    free(whole), free(first), free(second);
    amp_ctx_free(ctx);
}

/* The largest |value| of t. */
static float largest(const amp_tensor *t) {
    float most = 0;
    for (int64_t i = 0; i < amp_tensor_numel(t); i++) most = fmaxf(most, fabsf(amp_tensor_get(t, i)));
    return most;
}

/* A U(-bound, bound) fill of t: inside the bound (plus the dtype's rounding) and reaching near it. */
static void check_bound(const amp_tensor *t, float bound, float near, const char *what) {
    const float most = largest(t), slack = t->dtype == AMP_BF16 ? 0x1p-8f : t->dtype == AMP_F16 ? 0x1p-11f : 0.0f;
    CHECK_MSG(most <= bound * (1 + slack) && most > near * bound, "%s: max |value| %g, bound %g", what, most, bound);
}

void test_init_pytorch_defaults(void) {
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    amp_tensor *lw = amp_param_new(ctx, "lw", AMP_F32, 2, (const int64_t[]){300, 49});
    amp_tensor *lb = amp_param_new(ctx, "lb", AMP_F32, 1, (const int64_t[]){300});
    amp_tensor *cw = amp_param_new(ctx, "cw", AMP_BF16, 4, (const int64_t[]){64, 4, 5, 5});
    amp_tensor *cb = amp_param_new(ctx, "cb", AMP_BF16, 1, (const int64_t[]){64});
    amp_tensor *emb = amp_param_new(ctx, "emb", AMP_F32, 2, (const int64_t[]){400, 100});
    amp_tensor *nw = amp_param_new(ctx, "nw", AMP_F16, 1, (const int64_t[]){7});
    amp_tensor *nb = amp_param_new(ctx, "nb", AMP_F16, 1, (const int64_t[]){7});
    amp_tensor *wih = amp_param_new(ctx, "wih", AMP_F32, 2, (const int64_t[]){4 * 25, 3});
    amp_tensor *whh = amp_param_new(ctx, "whh", AMP_F32, 2, (const int64_t[]){4 * 25, 25});
    amp_tensor *bih = amp_param_new(ctx, "bih", AMP_F32, 1, (const int64_t[]){4 * 25});
    amp_tensor *bhh = amp_param_new(ctx, "bhh", AMP_F32, 1, (const int64_t[]){4 * 25});
    if (!CHECK(amp_ctx_alloc_params(ctx) == AMP_OK)) {
        amp_ctx_free(ctx);
        return;
    }
    amp_rng rng;
    amp_rng_seed(&rng, 3);
    CHECK(amp_init_fan_in_bound(49) == 1.0f / 7.0f && amp_init_fan_in_bound(0) == 0.0f);
    CHECK(amp_init_linear(ctx, lw, lb, &rng) == AMP_OK);
    check_bound(lw, 1.0f / 7.0f, 0.99f, "linear weight");
    check_bound(lb, 1.0f / 7.0f, 0.9f, "linear bias");
    CHECK(amp_init_conv2d(ctx, cw, cb, &rng) == AMP_OK); /* fan_in 4 * 5 * 5 = 100 */
    check_bound(cw, 0.1f, 0.98f, "conv weight");
    check_bound(cb, 0.1f, 0.8f, "conv bias");
    CHECK(amp_init_embedding(ctx, emb, &rng) == AMP_OK);
    float *v = values(emb);
    double mean, square;
    if (CHECK(v != NULL)) {
        moments(v, 40000, &mean, &square);
        CHECK_MSG(fabs(mean) < 6.0 / 200.0 && fabs(square - 1.0) < 6.0 * sqrt(2.0 / 40000), "embedding: %g, %g", mean,
                  square);
    }
    free(v);
    CHECK(amp_init_normal(ctx, nw, 0.0f, 1.0f, &rng) == AMP_OK && amp_init_normal(ctx, nb, 0.0f, 1.0f, &rng) == AMP_OK);
    CHECK(amp_init_layer_norm(ctx, nw, nb) == AMP_OK);
    bool norm = true;
    for (int i = 0; i < 7; i++) norm = norm && amp_tensor_get(nw, i) == 1.0f && amp_tensor_get(nb, i) == 0.0f;
    CHECK_MSG(norm, "layer norm: not ones and zeros");
    CHECK(amp_init_lstm(ctx, wih, whh, bih, bhh, &rng) == AMP_OK); /* 1/sqrt(25) */
    const amp_tensor *lstm[4] = {wih, whh, bih, bhh};
    for (int i = 0; i < 4; i++) check_bound(lstm[i], 0.2f, 0.9f, "lstm");
    CHECK(amp_ctx_status(ctx) == AMP_OK);
    amp_ctx_free(ctx);
}

/* Every refusal: a status, a message naming the function, nothing written. */
void test_init_errors(void) {
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    amp_rng rng;
    amp_rng_seed(&rng, 1);
    amp_tensor *w = amp_param_new(ctx, "fc1.weight", AMP_F32, 2, (const int64_t[]){4, 3});
    amp_tensor *b = amp_param_new(ctx, "fc1.bias", AMP_F32, 1, (const int64_t[]){4});
    CHECK(amp_init_linear(ctx, w, b, &rng) == AMP_ERR_STATE);
    CHECK_MSG(strstr(amp_ctx_error(ctx), "amp_init_linear") && strstr(amp_ctx_error(ctx), "fc1.weight") &&
                  strstr(amp_ctx_error(ctx), "amp_ctx_alloc_params"),
              "message: %s", amp_ctx_error(ctx));
    amp_ctx_clear_error(ctx);
    CHECK(amp_init_uniform(NULL, w, -1, 1, &rng) == AMP_ERR_STATE); /* no context: the status alone */
    if (!CHECK(amp_ctx_alloc_params(ctx) == AMP_OK)) {
        amp_ctx_free(ctx);
        return;
    }
    CHECK(amp_init_constant(ctx, w, 7.0f) == AMP_OK && amp_init_constant(ctx, b, 7.0f) == AMP_OK);
    CHECK(amp_init_zeros(ctx, NULL) == AMP_ERR_NULL_POINTER);
    CHECK(strstr(amp_ctx_error(ctx), "amp_init_zeros") != NULL);
    amp_ctx_clear_error(ctx);
    CHECK(amp_init_uniform(ctx, w, -1, 1, NULL) == AMP_ERR_NULL_POINTER);
    CHECK(strstr(amp_ctx_error(ctx), "amp_rng_seed") != NULL);
    amp_ctx_clear_error(ctx);
    CHECK(amp_init_uniform(ctx, w, 1, -1, &rng) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(amp_init_uniform(ctx, w, -INFINITY, 1, &rng) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(amp_init_normal(ctx, w, 0, -1, &rng) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(amp_init_normal(ctx, w, NAN, 1, &rng) == AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    /* a wrong bias shape is found before the weight is written */
    amp_tensor *wrong = amp_tensor_new(ctx, AMP_F32, 1, (const int64_t[]){5});
    CHECK(amp_init_linear(ctx, w, wrong, &rng) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(amp_init_conv2d(ctx, w, NULL, &rng) == AMP_ERR_INVALID_ARGUMENT); /* not 4-D */
    CHECK(amp_init_lstm(ctx, w, w, NULL, NULL, &rng) == AMP_ERR_INVALID_ARGUMENT); /* 4 != 4 * 3 */
    CHECK(amp_init_embedding(ctx, b, &rng) == AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    /* a transposed view; an fp8 tensor */
    amp_tensor *view = amp_transpose(ctx, w, 0, 1);
    CHECK(amp_init_ones(ctx, view) == AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    amp_tensor *f8 = amp_tensor_new(ctx, AMP_F8E4M3, 1, (const int64_t[]){4});
    CHECK(amp_init_ones(ctx, f8) == AMP_ERR_UNSUPPORTED_DTYPE);
    amp_ctx_clear_error(ctx);
    bool untouched = true;
    for (int i = 0; i < 12; i++) untouched = untouched && amp_tensor_get(w, i) == 7.0f;
    for (int i = 0; i < 4; i++) untouched = untouched && amp_tensor_get(b, i) == 7.0f;
    CHECK_MSG(untouched, "a refused fill wrote");
    amp_ctx_free(ctx);
}

/* amp_model_init is the public fills in declaration order from one generator: the mlp's bits by hand. */
void test_init_model_is_public_fills(void) {
    amp_ctx *a = new_ctx(), *b = new_ctx();
    amp_model *m = NULL;
    amp_model_config cfg = amp_model_default_config(AMP_MODEL_MLP);
    cfg.image_rows = cfg.image_cols = 4, cfg.hidden = 12, cfg.classes = 3;
    amp_linear_layer fc[3];
    const int64_t sizes[4] = {16, 12, 12, 3};
    const char *names[3] = {"1", "3", "5"};
    bool ok = a && b && CHECK(amp_model_create(a, &cfg, &m) == AMP_OK);
    for (int l = 0; l < 3 && ok; l++)
        ok = CHECK(amp_linear_layer_declare(b, &fc[l], names[l], sizes[l], sizes[l + 1], true, AMP_F32) == AMP_OK);
    if (ok && CHECK(amp_ctx_alloc_params(a) == AMP_OK && amp_ctx_alloc_params(b) == AMP_OK) &&
        CHECK(amp_model_init(m, 17) == AMP_OK)) {
        amp_rng rng;
        amp_rng_seed(&rng, 17);
        for (int l = 0; l < 3; l++) CHECK(amp_init_linear(b, fc[l].weight, fc[l].bias, &rng) == AMP_OK);
        size_t na = 0, nb = 0;
        const void *pa = amp_ctx_param_memory(a, &na), *pb = amp_ctx_param_memory(b, &nb);
        CHECK_MSG(na == nb && !memcmp(pa, pb, na), "amp_model_init differs from amp_init_linear in order");
        for (size_t i = 0; i < amp_ctx_num_params(b); i++)
            CHECK_STR_EQ(amp_ctx_param(b, i)->name, amp_model_tensor(m, i)->name);
    }
    amp_ctx_free(a), amp_ctx_free(b);
    amp_model_free(m);
}
