/* Tensor-wise fp8 casts (amax, scaled quantize and dequantize) on every SIMD path against the
 * independent encoder of reference_formats.c, and delayed scaling's amax history against a TE
 * sequence worked out by hand (TE's amax_and_scale_update: amax read before the roll, the roll
 * toward slot 0, slot 0 zeroed). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "harness.h"
#include "reference_formats.h"
#include "test_util.h"
#include "tests.h"

/* Random values over many binades, with zeros, infinities, NaNs and fp8 rounding ties. */
static void fill_values(float *x, size_t n, test_rng *rng) {
    for (size_t i = 0; i < n; i++) {
        const uint32_t r = test_rng_below(rng, 16);
        const uint32_t sign = (uint32_t)test_rng_below(rng, 2) << 31;
        if (r == 0) x[i] = f32_from_bits(sign);
        else if (r == 1) x[i] = f32_from_bits(sign | 0x7F800000u);
        else if (r == 2) x[i] = f32_from_bits(sign | 0x7FC00000u | test_rng_below(rng, 1u << 22));
        else if (r == 3) x[i] = f32_from_bits(sign | test_rng_below(rng, 1u << 23)); /* subnormal */
        else if (r == 4) x[i] = f32_from_bits(sign | (0x3F800000u + (test_rng_below(rng, 64) << 19) + (1u << 19)));
        else x[i] = f32_from_bits(sign | (test_rng_below(rng, 60) + 97u) << 23 | test_rng_below(rng, 1u << 23));
    }
}

void test_fp8_amax(void) {
    const float x[] = {1.0f, -3.0f, NAN, 2.0f, -NAN, -0.0f};
    float amax = -1.0f;
    bool nan = false;
    CHECK_EQ_INT(amp_fp8_amax(&amax, &nan, x, 6), AMP_OK);
    CHECK(amax == 3.0f && nan);
    CHECK_EQ_INT(amp_fp8_amax(&amax, &nan, x, 2), AMP_OK);
    CHECK(amax == 3.0f && !nan);
    CHECK_EQ_INT(amp_fp8_amax(&amax, NULL, x + 2, 1), AMP_OK);
    CHECK(amax == 0.0f);   /* an all-NaN array: TE's fmaxf skips every NaN */
    const float y[] = {-INFINITY, 5.0f};
    CHECK_EQ_INT(amp_fp8_amax(&amax, NULL, y, 2), AMP_OK);
    CHECK(isinf(amax) && amax > 0);
    CHECK_EQ_INT(amp_fp8_amax(&amax, &nan, NULL, 0), AMP_OK);
    CHECK(amax == 0.0f && !nan);
    CHECK_EQ_INT(amp_fp8_amax(NULL, NULL, x, 1), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_fp8_amax(&amax, NULL, NULL, 1), AMP_ERR_NULL_POINTER);
}

static void check_cast(amp_dtype d, const float *x, size_t n, float scale, uint8_t *q, float *back, const char *isa) {
    CHECK_EQ_INT(amp_fp8_quantize(q, d, x, n, scale), AMP_OK);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned want = ref_encode(d, x[i] * scale, true);
        if (q[i] != want && bad++ < 5)
            CHECK_MSG(0, "%s %s x=0x%08X scale=%g: got 0x%02X want 0x%02X", isa, amp_dtype_name(d),
                      (unsigned)f32_bits(x[i]), scale, q[i], want);
    }
    const float inv = 1.0f / scale;
    CHECK_EQ_INT(amp_fp8_dequantize(back, q, d, n, inv), AMP_OK);
    for (size_t i = 0; i < n; i++) {
        const double v = ref_decode_value(d, q[i]);
        const float want = (float)(v * (double)inv);
        const bool ok = isnan(v) ? isnan(back[i]) : f32_bits(back[i]) == f32_bits(want);
        if (!ok && bad++ < 5)
            CHECK_MSG(0, "%s %s q=0x%02X scale_inv=%g: got %g want %g", isa, amp_dtype_name(d), q[i], inv,
                      back[i], want);
    }
    if (bad == 0) harness_pass(1);
}

void test_fp8_quantize_dequantize(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    enum { N = 1500 };
    float *x = malloc(N * sizeof *x), *back = malloc(N * sizeof *back);
    uint8_t *q = malloc(N);
    if (!CHECK(x && back && q)) goto done;
    static const float scales[] = {1.0f, 0.5f, 3.0f, 448.0f / 3.0f, 1e-20f, 1e20f, FLT_MAX, 1e-38f};
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        test_rng rng = {seed};
        fill_values(x, N, &rng);
        for (int di = 0; di < 2; di++)
            for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++)
                for (size_t n = 0; n <= N; n += n < 20 ? 1 : 497)
                    check_cast(di ? AMP_F8E5M2 : AMP_F8E4M3, x, n, scales[si], q, back, amp_isa_name((amp_isa)isa));
    }
    test_isa_end();
    /* arguments */
    CHECK_EQ_INT(amp_fp8_quantize(q, AMP_F16, x, 4, 1.0f), AMP_ERR_UNSUPPORTED_DTYPE);
    CHECK_EQ_INT(amp_fp8_quantize(q, AMP_F8E4M3, x, 4, 0.0f), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_fp8_quantize(q, AMP_F8E4M3, x, 4, -1.0f), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_fp8_quantize(q, AMP_F8E4M3, x, 4, INFINITY), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_fp8_quantize(q, AMP_F8E4M3, x, 4, NAN), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_fp8_quantize(NULL, AMP_F8E4M3, x, 4, 1.0f), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_fp8_quantize(NULL, AMP_F8E4M3, NULL, 0, 1.0f), AMP_OK);
    CHECK_EQ_INT(amp_fp8_dequantize(x, NULL, AMP_F8E5M2, 4, 1.0f), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_fp8_dequantize(x, q, AMP_BF16, 4, 1.0f), AMP_ERR_UNSUPPORTED_DTYPE);
    CHECK_EQ_INT(amp_fp8_dequantize(x, q, AMP_F8E5M2, 4, 0.0f), AMP_ERR_INVALID_ARGUMENT);
done:
    free(x);
    free(back);
    free(q);
}

static void check_history(const amp_fp8_delayed *s, const float *want, size_t len, int step) {
    const float *h = NULL;
    size_t n = 0;
    CHECK_EQ_INT(amp_fp8_delayed_history(s, &h, &n), AMP_OK);
    if (!CHECK(n == len) || !h) return;
    for (size_t i = 0; i < len; i++)
        CHECK_MSG(f32_bits(h[i]) == f32_bits(want[i]), "step %d slot %zu: got %g want %g", step, i, h[i], want[i]);
}

/* History 4, max, e4m3, margin 0. Each row: the amaxes recorded in the step (0: none), then the
 * history and scale after the update, worked out by hand from TE's kernel. */
void test_fp8_delayed_history(void) {
    static const struct {
        float rec[2];
        float hist[4];
        float scale;
    } steps[] = {
        {{2, 1}, {0, 0, 0, 2}, 224},          /* amax 2 (slot 0 before the roll) */
        {{8, 0}, {0, 0, 2, 8}, 56},
        {{1, 0}, {0, 2, 8, 1}, 56},
        {{0.5f, 0}, {0, 8, 1, 0.5f}, 56},     /* step 1's 2, the oldest, leaves */
        {{0.25f, 0}, {0, 1, 0.5f, 0.25f}, 56},/* the window still held step 2's 8 */
        {{0.25f, 0}, {0, 0.5f, 0.25f, 0.25f}, 448},
        {{0, 0}, {0, 0.25f, 0.25f, 0}, 896},  /* nothing recorded: slot 0 stays 0 */
        {{INFINITY, 0}, {0, 0.25f, 0, INFINITY}, 896}, /* inf amax: the scale is kept */
        {{1, 0}, {0, 0, INFINITY, 1}, 896},
        {{NAN, 4}, {0, INFINITY, 1, 4}, 896}, /* a NaN is not recorded */
        {{2, 0}, {0, 1, 4, 2}, 896},          /* the inf is still in the window */
        {{2, 0}, {0, 4, 2, 2}, 112},          /* ... and has left it */
    };
    amp_fp8_delayed_config cfg = AMP_FP8_DELAYED_CONFIG_DEFAULT;
    CHECK_EQ_INT(cfg.history_len, 1024);
    CHECK_EQ_INT(cfg.algo, AMP_FP8_AMAX_MAX);
    CHECK_EQ_INT(cfg.margin, 0);
    CHECK_EQ_INT(cfg.format, AMP_FP8_HYBRID);
    cfg.history_len = 4;
    amp_fp8_delayed *s = NULL;
    if (!CHECK(amp_fp8_delayed_create(&s, &cfg, AMP_FP8_FORWARD) == AMP_OK)) return;
    CHECK(amp_fp8_delayed_scale(s) == 1.0f && amp_fp8_delayed_scale_inv(s) == 1.0f);
    CHECK_EQ_INT(amp_fp8_delayed_dtype(s), AMP_F8E4M3);
    for (size_t t = 0; t < sizeof steps / sizeof steps[0]; t++) {
        for (int r = 0; r < 2; r++)
            if (steps[t].rec[r] != 0.0f) CHECK_EQ_INT(amp_fp8_delayed_record(s, steps[t].rec[r]), AMP_OK);
        CHECK_EQ_INT(amp_fp8_delayed_update(s), AMP_OK);
        check_history(s, steps[t].hist, 4, (int)t + 1);
        CHECK_MSG(amp_fp8_delayed_scale(s) == steps[t].scale, "step %zu: scale %g want %g", t + 1,
                  amp_fp8_delayed_scale(s), steps[t].scale);
        CHECK(f32_bits(amp_fp8_delayed_scale_inv(s)) == f32_bits(1.0f / steps[t].scale));
    }
    amp_fp8_delayed_free(s);
}

/* most_recent with history 1 (early TE's and Megatron's default), HYBRID gradients (e5m2), margin. */
void test_fp8_delayed_variants(void) {
    amp_fp8_delayed_config cfg = {1, AMP_FP8_AMAX_MOST_RECENT, 1, AMP_FP8_HYBRID, false};
    amp_fp8_delayed *s = NULL;
    if (!CHECK(amp_fp8_delayed_create(&s, &cfg, AMP_FP8_GRADIENT) == AMP_OK)) return;
    CHECK_EQ_INT(amp_fp8_delayed_dtype(s), AMP_F8E5M2);
    static const float rec[] = {4, 0, 1000, 3};
    static const float want[] = {57344.0f / 2 / 4, 57344.0f / 2 / 4, (float)(28672.0 / 1000.0), 28672.0f / 3};
    for (int t = 0; t < 4; t++) {
        if (rec[t] != 0) amp_fp8_delayed_record(s, rec[t]);
        amp_fp8_delayed_update(s);
        CHECK_MSG(amp_fp8_delayed_scale(s) == want[t], "step %d: %g want %g", t, amp_fp8_delayed_scale(s), want[t]);
        const float *h;
        size_t n;
        amp_fp8_delayed_history(s, &h, &n);
        CHECK(n == 1 && h[0] == 0.0f);
    }
    amp_fp8_delayed_free(s);
    /* most_recent with a longer history ignores older slots */
    cfg = (amp_fp8_delayed_config){3, AMP_FP8_AMAX_MOST_RECENT, 0, AMP_FP8_E4M3, false};
    if (!CHECK(amp_fp8_delayed_create(&s, &cfg, AMP_FP8_GRADIENT) == AMP_OK)) return;
    CHECK_EQ_INT(amp_fp8_delayed_dtype(s), AMP_F8E4M3);
    amp_fp8_delayed_record(s, 64);
    amp_fp8_delayed_update(s);
    amp_fp8_delayed_record(s, 2);
    amp_fp8_delayed_update(s);
    CHECK(amp_fp8_delayed_scale(s) == 224.0f);
    amp_fp8_delayed_free(s);
    /* arguments */
    amp_fp8_delayed_config bad = AMP_FP8_DELAYED_CONFIG_DEFAULT;
    bad.history_len = 0;
    CHECK_EQ_INT(amp_fp8_delayed_create(&s, &bad, AMP_FP8_FORWARD), AMP_ERR_INVALID_ARGUMENT);
    CHECK(s == NULL);
    bad = (amp_fp8_delayed_config)AMP_FP8_DELAYED_CONFIG_DEFAULT;
    bad.margin = 128;
    CHECK_EQ_INT(amp_fp8_delayed_create(&s, &bad, AMP_FP8_FORWARD), AMP_ERR_INVALID_ARGUMENT);
    bad = (amp_fp8_delayed_config)AMP_FP8_DELAYED_CONFIG_DEFAULT;
    bad.algo = (amp_fp8_amax_algo)2;
    CHECK_EQ_INT(amp_fp8_delayed_create(&s, &bad, AMP_FP8_FORWARD), AMP_ERR_INVALID_ARGUMENT);
    bad = (amp_fp8_delayed_config)AMP_FP8_DELAYED_CONFIG_DEFAULT;
    bad.format = (amp_fp8_format)7;
    CHECK_EQ_INT(amp_fp8_delayed_create(&s, &bad, AMP_FP8_FORWARD), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_fp8_delayed_create(&s, &bad, (amp_fp8_role)5), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_fp8_delayed_create(NULL, &cfg, AMP_FP8_FORWARD), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_fp8_delayed_create(&s, NULL, AMP_FP8_FORWARD), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_fp8_delayed_record(NULL, 1.0f), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_fp8_delayed_update(NULL), AMP_ERR_NULL_POINTER);
    CHECK(isnan(amp_fp8_delayed_scale(NULL)) && isnan(amp_fp8_delayed_scale_inv(NULL)));
    CHECK_EQ_INT(amp_fp8_delayed_dtype(NULL), AMP_DTYPE_COUNT);
    amp_fp8_delayed_free(NULL);
    cfg = (amp_fp8_delayed_config)AMP_FP8_DELAYED_CONFIG_DEFAULT;
    if (CHECK(amp_fp8_delayed_create(&s, &cfg, AMP_FP8_FORWARD) == AMP_OK)) {
        CHECK_EQ_INT(amp_fp8_delayed_record(s, -1.0f), AMP_ERR_INVALID_ARGUMENT);
        const float *h;
        size_t n;
        CHECK_EQ_INT(amp_fp8_delayed_history(s, &h, &n), AMP_OK);
        CHECK_EQ_INT(n, 1024);
        CHECK_EQ_INT(amp_fp8_delayed_history(s, NULL, &n), AMP_ERR_NULL_POINTER);
        amp_fp8_delayed_free(s);
    }
}

/* torchao's amax init: which states want it, the scale it sets (the delayed rule from the given
 * amax, margin included; 0, inf and NaN keep 1), and that it happens once, never after an update or
 * a load, and never without the config's amax_init. */
void test_fp8_delayed_amax_init(void) {
    amp_fp8_delayed_config cfg = {4, AMP_FP8_AMAX_MAX, 0, AMP_FP8_HYBRID, true};
    amp_fp8_delayed *s = NULL;
    CHECK(!amp_fp8_delayed_needs_init(NULL));
    CHECK_EQ_INT(amp_fp8_delayed_init(NULL, 1.0f), AMP_ERR_NULL_POINTER);
    static const struct { int margin; amp_fp8_role role; float amax, scale; } cases[] = {
        {0, AMP_FP8_FORWARD, 2.0f, 224.0f},
        {0, AMP_FP8_FORWARD, 3.0f, (float)(448.0 / 3.0)}, /* one correctly rounded division */
        {1, AMP_FP8_GRADIENT, 2.0f, 57344.0f / 2 / 2},
        {-2, AMP_FP8_GRADIENT, 0x1p-20f, 57344.0f * 0x1p22f}, /* a margin of -2: 4 times the scale */
        {0, AMP_FP8_FORWARD, 0.0f, 1.0f},
        {0, AMP_FP8_FORWARD, INFINITY, 1.0f},
        {0, AMP_FP8_GRADIENT, NAN, 1.0f},
        {0, AMP_FP8_FORWARD, 0x1p-149f, FLT_MAX}, /* 448 / 2^-149 overflows: FLT_MAX */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cfg.margin = cases[i].margin;
        if (!CHECK(amp_fp8_delayed_create(&s, &cfg, cases[i].role) == AMP_OK)) return;
        CHECK(amp_fp8_delayed_needs_init(s));
        CHECK_EQ_INT(amp_fp8_delayed_init(s, cases[i].amax), AMP_OK);
        CHECK_MSG(amp_fp8_delayed_scale(s) == cases[i].scale, "case %zu: scale %g want %g", i,
                  (double)amp_fp8_delayed_scale(s), (double)cases[i].scale);
        CHECK(f32_bits(amp_fp8_delayed_scale_inv(s)) == f32_bits(1.0f / cases[i].scale));
        const float *h;
        size_t n;
        amp_fp8_delayed_history(s, &h, &n);
        CHECK(n == 4 && h[0] == 0.0f && h[1] == 0.0f && h[2] == 0.0f && h[3] == 0.0f); /* history untouched */
        CHECK(!amp_fp8_delayed_needs_init(s));
        CHECK_EQ_INT(amp_fp8_delayed_init(s, 1.0f), AMP_ERR_INVALID_ARGUMENT); /* once */
        CHECK(amp_fp8_delayed_scale(s) == cases[i].scale);
        amp_fp8_delayed_free(s);
        s = NULL;
    }
    /* an update or a load first: the state is the run's (or the saved run's), no init follows */
    cfg.margin = 0;
    if (!CHECK(amp_fp8_delayed_create(&s, &cfg, AMP_FP8_FORWARD) == AMP_OK)) return;
    amp_fp8_delayed_update(s);
    CHECK(!amp_fp8_delayed_needs_init(s) && amp_fp8_delayed_scale(s) == 1.0f);
    amp_fp8_delayed_free(s);
    const float zeros[4] = {0};
    if (!CHECK(amp_fp8_delayed_create(&s, &cfg, AMP_FP8_FORWARD) == AMP_OK)) return;
    CHECK(amp_fp8_delayed_load(s, zeros, 4, 1.0f) == AMP_OK);
    CHECK(!amp_fp8_delayed_needs_init(s));
    amp_fp8_delayed_free(s);
    /* TE's state never wants one */
    cfg.amax_init = false;
    if (!CHECK(amp_fp8_delayed_create(&s, &cfg, AMP_FP8_FORWARD) == AMP_OK)) return;
    CHECK(!amp_fp8_delayed_needs_init(s));
    CHECK_EQ_INT(amp_fp8_delayed_init(s, 2.0f), AMP_ERR_INVALID_ARGUMENT);
    CHECK(amp_fp8_delayed_scale(s) == 1.0f);
    amp_fp8_delayed_free(s);
    const amp_fp8_delayed_config def = AMP_FP8_DELAYED_CONFIG_DEFAULT;
    CHECK(!def.amax_init);
}

/* A state loaded from another's history and scale continues bit-identically (resume). */
void test_fp8_delayed_load(void) {
    amp_fp8_delayed_config cfg = {5, AMP_FP8_AMAX_MAX, 0, AMP_FP8_HYBRID, false};
    amp_fp8_delayed *a = NULL, *b = NULL;
    if (!CHECK(amp_fp8_delayed_create(&a, &cfg, AMP_FP8_GRADIENT) == AMP_OK) ||
        !CHECK(amp_fp8_delayed_create(&b, &cfg, AMP_FP8_GRADIENT) == AMP_OK))
        goto done;
    static const float amax[] = {3, 0.1f, 7, 1e-3f, 0, 2, 5e4f, 1, 1, 1, 0.5f, 9};
    const float *ha, *hb;
    size_t na, nb;
    for (int t = 0; t < 12; t++) {
        amp_fp8_delayed_record(a, amax[t]);
        amp_fp8_delayed_update(a);
        if (t == 4) {
            amp_fp8_delayed_history(a, &ha, &na);
            CHECK(amp_fp8_delayed_load(b, ha, na, amp_fp8_delayed_scale(a)) == AMP_OK);
        }
        if (t > 4) {
            amp_fp8_delayed_record(b, amax[t]);
            amp_fp8_delayed_update(b);
            amp_fp8_delayed_history(a, &ha, &na);
            amp_fp8_delayed_history(b, &hb, &nb);
            CHECK(na == nb && memcmp(ha, hb, na * sizeof *ha) == 0);
            CHECK(f32_bits(amp_fp8_delayed_scale(a)) == f32_bits(amp_fp8_delayed_scale(b)));
            CHECK(f32_bits(amp_fp8_delayed_scale_inv(a)) == f32_bits(amp_fp8_delayed_scale_inv(b)));
        }
    }
    const float bad_nan[5] = {0, 0, NAN, 0, 0}, bad_neg[5] = {0, -1, 0, 0, 0}, ok[5] = {0, INFINITY, 0, 0, 0};
    const float before = amp_fp8_delayed_scale(b);
    CHECK(amp_fp8_delayed_load(b, bad_nan, 5, 1.0f) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(amp_fp8_delayed_load(b, bad_neg, 5, 1.0f) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(amp_fp8_delayed_load(b, ok, 4, 1.0f) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(amp_fp8_delayed_load(b, ok, 5, NAN) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(amp_fp8_delayed_load(b, ok, 5, -2.0f) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(amp_fp8_delayed_scale(b) == before);
    CHECK(amp_fp8_delayed_load(b, ok, 5, 2.0f) == AMP_OK);
    CHECK(amp_fp8_delayed_scale(b) == 2.0f && amp_fp8_delayed_scale_inv(b) == 0.5f);
    CHECK(amp_fp8_delayed_load(NULL, ok, 5, 2.0f) == AMP_ERR_NULL_POINTER);
    CHECK(amp_fp8_delayed_load(b, NULL, 5, 2.0f) == AMP_ERR_NULL_POINTER);
done:
    amp_fp8_delayed_free(a);
    amp_fp8_delayed_free(b);
}
