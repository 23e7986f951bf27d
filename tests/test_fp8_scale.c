/* The fp8 scale rules (amp/fp8.h) on their edge cases, against TE's formulas written out here in
 * double (an fp32 operation computed in double and rounded once to fp32 is correctly rounded: 53 >=
 * 2 * 24 + 2); the tensor-wise casts against the independent encoder of reference_formats.c; the
 * delayed-scaling history against a TE sequence simulated by hand. */
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "amp.h"
#include "harness.h"
#include "reference_formats.h"
#include "test_util.h"
#include "tests.h"

static double fp8_max(amp_dtype d) { return d == AMP_F8E4M3 ? 448.0 : 57344.0; }

/* TE delayed_scaling.cu: scaled_max = fp8_max * 2^-margin in fp32, then scaled_max / amax. */
static float te_delayed(float amax, float prev, amp_dtype d, int margin) {
    const float scaled_max = (float)ldexp(fp8_max(d), -margin); /* rounds to inf past FLT_MAX */
    if (!(isfinite(amax) && amax > 0.0f)) return prev;
    const float q = (float)((double)scaled_max / (double)amax);
    return isinf(q) ? FLT_MAX : q;
}

/* TE recipe_common.cuh compute_scale_from_amax; pow2 by frexp, not by masking bits. */
static float te_current(float amax, amp_dtype d, float eps, bool pow2) {
    if (amax < eps) amax = eps;
    if (isinf(amax) || isnan(amax) || amax == 0.0f) return 1.0f;
    float q = (float)(fp8_max(d) / (double)amax);
    if (isinf(q)) q = FLT_MAX;
    if (pow2) {
        int e;
        frexp((double)q, &e);
        q = (float)ldexp(1.0, e - 1);
    }
    return q;
}

static const uint32_t amax_edges[] = {
    0x00000000u, 0x80000000u, 0xBF800000u, /* 0, -0, -1 */
    0x00000001u, 0x00000002u, 0x00400000u, 0x007FFFFFu, 0x00800000u, /* 2^-149 .. FLT_MIN */
    0x3F800000u, 0x43E00000u, 0x43E00001u, 0x43DFFFFFu, 0x47600000u, 0x3A800000u, 0x1F800000u,
    0x7F7FFFFFu, 0x7F000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u,
};

void test_fp8_scale_from_amax(void) {
    static const int margins[] = {-127, -121, -120, -8, -1, 0, 1, 2, 8, 100, 126, 127};
    static const float prevs[] = {1.0f, 3.5f, FLT_MAX};
    const amp_dtype dts[] = {AMP_F8E4M3, AMP_F8E5M2};
    for (int di = 0; di < 2; di++)
        for (size_t mi = 0; mi < sizeof margins / sizeof margins[0]; mi++)
            for (size_t ai = 0; ai < sizeof amax_edges / sizeof amax_edges[0]; ai++)
                for (int pi = 0; pi < 3; pi++) {
                    const float amax = f32_from_bits(amax_edges[ai]);
                    const float got = amp_fp8_scale_from_amax(amax, prevs[pi], dts[di], margins[mi]);
                    const float want = te_delayed(amax, prevs[pi], dts[di], margins[mi]);
                    CHECK_EQ_BITS(f32_bits(got), f32_bits(want), "%s amax=0x%08X margin=%d prev=%g",
                                  amp_dtype_name(dts[di]), (unsigned)amax_edges[ai], margins[mi], prevs[pi]);
                }
    /* closed forms */
    CHECK(amp_fp8_scale_from_amax(448.0f, 2.0f, AMP_F8E4M3, 0) == 1.0f);
    CHECK(amp_fp8_scale_from_amax(1.0f, 2.0f, AMP_F8E4M3, 1) == 224.0f);
    CHECK(amp_fp8_scale_from_amax(1.0f, 2.0f, AMP_F8E5M2, 0) == 57344.0f);
    CHECK(amp_fp8_scale_from_amax(f32_from_bits(1), 2.0f, AMP_F8E4M3, 0) == FLT_MAX); /* 448 * 2^149 */
    CHECK(amp_fp8_scale_from_amax(1e30f, 2.0f, AMP_F8E4M3, -121) == FLT_MAX);         /* inf numerator */
    CHECK(amp_fp8_scale_from_amax(0.0f, 2.0f, AMP_F8E4M3, 0) == 2.0f);
    CHECK(amp_fp8_scale_from_amax(NAN, 2.0f, AMP_F8E4M3, 0) == 2.0f);
    CHECK(amp_fp8_scale_from_amax(INFINITY, 2.0f, AMP_F8E4M3, 0) == 2.0f);
    CHECK(amp_fp8_scale_from_amax(FLT_MAX, 2.0f, AMP_F8E4M3, 0) == (float)(448.0 / FLT_MAX));
    /* invalid arguments give NaN */
    CHECK(isnan(amp_fp8_scale_from_amax(1.0f, 1.0f, AMP_F8E4M3, 128)));
    CHECK(isnan(amp_fp8_scale_from_amax(1.0f, 1.0f, AMP_F8E4M3, -128)));
    CHECK(isnan(amp_fp8_scale_from_amax(1.0f, 1.0f, AMP_F16, 0)));
    CHECK(isnan(amp_fp8_scale_from_amax(1.0f, 1.0f, AMP_DTYPE_COUNT, 0)));
}

void test_fp8_current_scale(void) {
    static const float eps[] = {0.0f, 1e-12f, 1.0f};
    const amp_dtype dts[] = {AMP_F8E4M3, AMP_F8E5M2};
    for (int di = 0; di < 2; di++)
        for (int ei = 0; ei < 3; ei++)
            for (int p = 0; p < 2; p++)
                for (size_t ai = 0; ai < sizeof amax_edges / sizeof amax_edges[0]; ai++) {
                    const float amax = f32_from_bits(amax_edges[ai]);
                    const float got = amp_fp8_current_scale(amax, dts[di], eps[ei], p);
                    const float want = te_current(amax, dts[di], eps[ei], p);
                    CHECK_EQ_BITS(f32_bits(got), f32_bits(want), "%s amax=0x%08X eps=%g pow2=%d",
                                  amp_dtype_name(dts[di]), (unsigned)amax_edges[ai], eps[ei], p);
                }
    CHECK(amp_fp8_current_scale(0.0f, AMP_F8E4M3, 0.0f, false) == 1.0f);
    CHECK(amp_fp8_current_scale(NAN, AMP_F8E4M3, 1e-12f, false) == 1.0f);
    CHECK(amp_fp8_current_scale(INFINITY, AMP_F8E4M3, 0.0f, true) == 1.0f);
    CHECK(amp_fp8_current_scale(0.0f, AMP_F8E4M3, 1.0f, false) == 448.0f);   /* raised to epsilon */
    CHECK(amp_fp8_current_scale(f32_from_bits(1), AMP_F8E4M3, 0.0f, false) == FLT_MAX);
    CHECK(amp_fp8_current_scale(f32_from_bits(1), AMP_F8E4M3, 0.0f, true) == ldexpf(1.0f, 127));
    CHECK(amp_fp8_current_scale(3.0f, AMP_F8E4M3, 0.0f, true) == 128.0f);   /* 149.33 down to 128 */
    CHECK(amp_fp8_current_scale(448.0f, AMP_F8E4M3, 0.0f, true) == 1.0f);
    CHECK(isnan(amp_fp8_current_scale(1.0f, AMP_F8E4M3, -1.0f, false)));
    CHECK(isnan(amp_fp8_current_scale(1.0f, AMP_F8E4M3, NAN, false)));
    CHECK(isnan(amp_fp8_current_scale(1.0f, AMP_BF16, 0.0f, false)));
    /* pow2 of fp8_max / amax rounded down (TE) is 1 / (amax / fp8_max rounded up to a power of 2)
     * (DeepSeek-V3's ue8m0 scales) for every normal amax whose quotients stay normal */
    test_rng rng = {harness_seed()};
    harness_note("seed %llu", (unsigned long long)harness_seed());
    for (int i = 0; i < 20000; i++) {
        const uint32_t b = (uint32_t)(test_rng_below(&rng, 200u) + 27u) << 23 | test_rng_below(&rng, 1u << 23);
        const float amax = f32_from_bits(b);
        for (int di = 0; di < 2; di++) {
            const float s = amp_fp8_current_scale(amax, dts[di], 0.0f, true);
            int e;
            frexp((double)(float)((double)amax / fp8_max(dts[di])), &e);
            const double q = (double)(float)((double)amax / fp8_max(dts[di]));
            const double deepseek = q == ldexp(1.0, e - 1) ? q : ldexp(1.0, e); /* 2^ceil(log2 q) */
            CHECK_MSG(s == (float)(1.0 / deepseek), "amax 0x%08X: TE %g, DeepSeek 1/%g", (unsigned)b, s, deepseek);
        }
    }
}

void test_fp8_format_dtype(void) {
    CHECK_EQ_INT(amp_fp8_format_dtype(AMP_FP8_HYBRID, AMP_FP8_FORWARD), AMP_F8E4M3);
    CHECK_EQ_INT(amp_fp8_format_dtype(AMP_FP8_HYBRID, AMP_FP8_GRADIENT), AMP_F8E5M2);
    CHECK_EQ_INT(amp_fp8_format_dtype(AMP_FP8_E4M3, AMP_FP8_FORWARD), AMP_F8E4M3);
    CHECK_EQ_INT(amp_fp8_format_dtype(AMP_FP8_E4M3, AMP_FP8_GRADIENT), AMP_F8E4M3);
    CHECK_EQ_INT(amp_fp8_format_dtype((amp_fp8_format)2, AMP_FP8_FORWARD), AMP_DTYPE_COUNT);
    CHECK_EQ_INT(amp_fp8_format_dtype(AMP_FP8_E4M3, (amp_fp8_role)2), AMP_DTYPE_COUNT);
}
