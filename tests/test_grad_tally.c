/* The counting pass of the gradient statistics (amp_train_tally_add, src/train/grad_stats.c) against
 * the definition in amp/train.h evaluated here one value at a time with frexp and double compares:
 * the bin of floor(log2 g), g = |x| * inv_scale in double, zeros, non-finite values and the three fp16
 * counts, on edge values (zeros, subnormals, every power of two and its neighbours, the fp16
 * thresholds, FLT_MAX, infinities, NaNs) and random bit patterns, at scales that are powers of two and
 * scales that are not, and over calls of every length (the interleaved copies and the tail). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/train/train_internal.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

/* The expected counts of one run of values. */
typedef struct expected {
    int64_t bins[AMP_GRAD_HIST_BINS];
    int64_t zeros, nonfinite, under_unscaled, under_scaled, over_scaled;
} expected;

static void expect_value(expected *e, float xf, double inv_scale) {
    const double x = xf;
    if (x == 0) {
        e->zeros++;
        return;
    }
    if (!isfinite(x)) {
        e->nonfinite++;
        e->over_scaled++;
        return;
    }
    const double ax = fabs(x), g = ax * inv_scale;
    e->under_scaled += ax <= 0x1p-25;
    e->over_scaled += ax >= 65520.0;
    e->under_unscaled += g <= 0x1p-25;
    int ex;
    (void)frexp(g, &ex); /* g = m * 2^ex, m in [0.5, 1): floor(log2 g) = ex - 1 */
    int64_t k = (int64_t)(ex - 1) - AMP_GRAD_HIST_MIN_EXP;
    k = k < 0 ? 0 : k >= AMP_GRAD_HIST_BINS ? AMP_GRAD_HIST_BINS - 1 : k;
    e->bins[k]++;
}

/* Tallies v in pieces of the given lengths (cycled) and compares every count with the definition. */
static void check_values(const char *what, const float *v, int64_t n, double inv_scale, const int *pieces,
                         int n_pieces) {
    expected e;
    memset(&e, 0, sizeof e);
    for (int64_t i = 0; i < n; i++) expect_value(&e, v[i], inv_scale);
    amp_train_tally t;
    memset(&t, 0, sizeof t);
    int64_t at = 0;
    for (int p = 0; at < n; p = (p + 1) % n_pieces) {
        const int64_t m = n - at < pieces[p] ? n - at : pieces[p];
        amp_train_tally_add(&t, v + at, m, inv_scale);
        at += m;
    }
    bool ok = true;
    for (int k = 0; k < AMP_GRAD_HIST_BINS; k++) {
        const int64_t got = amp_train_tally_slot(&t, k);
        ok &= CHECK_MSG(got == e.bins[k], "%s, inv_scale %a: bin %d (log2 %d) holds %lld, want %lld", what, inv_scale,
                        k, AMP_GRAD_HIST_MIN_EXP + k, (long long)got, (long long)e.bins[k]);
    }
    const int64_t zeros = amp_train_tally_slot(&t, AMP_TRAIN_TALLY_ZERO);
    const int64_t nonfinite = amp_train_tally_slot(&t, AMP_TRAIN_TALLY_NONFINITE);
    ok &= CHECK_MSG(zeros == e.zeros && nonfinite == e.nonfinite,
                    "%s, inv_scale %a: zeros %lld nonfinite %lld, want %lld %lld", what, inv_scale, (long long)zeros,
                    (long long)nonfinite, (long long)e.zeros, (long long)e.nonfinite);
    ok &= CHECK_MSG(t.under_unscaled == e.under_unscaled && t.under_scaled == e.under_scaled &&
                        t.over_scaled == e.over_scaled,
                    "%s, inv_scale %a: fp16 counts %lld %lld %lld, want %lld %lld %lld", what, inv_scale,
                    (long long)t.under_unscaled, (long long)t.under_scaled, (long long)t.over_scaled,
                    (long long)e.under_unscaled, (long long)e.under_scaled, (long long)e.over_scaled);
    (void)ok;
}

/* 1/S for loss scales S a run may use (powers of two, the scaler off, Apex-style static scales that
 * are not powers of two, the extremes of fp32) and inverse scales outside what an fp32 S gives (0:
 * S = inf; tiny and huge ones, where g may be subnormal or zero). */
static const double inv_scales[] = {
    1.0, 0x1p-16, 0x1p-24, 0x1p16, 1.0 / 3.0, 1.0 / 65537.0, 1.0 / 1000.0, 1.0 / (double)0.99999994f,
    1.0 / 1.00000012, 1.0 / (double)FLT_MAX, 1.0 / (double)0x1p-149f, 1.0 / (double)FLT_MIN, 0x1p-200, 0x1p200,
    0x1.fffffffffffffp-201, 0x1.0000000000001p200, 0.0, 0x1p-1074, 0x1p-600, 0x1p600, 0x1p-1022,
    /* powers of two where 2^-25 / inv_scale is a subnormal fp32, the largest binade's, or beyond */
    0x1p102, 0x1p110, 0x1p124, 0x1p125, 0x1p-127, 0x1p-128, 0x1p-152, 0x1p-153};
enum { N_INV = sizeof inv_scales / sizeof inv_scales[0] };

/* Zeros, the smallest subnormals, the largest subnormal, every power of two from 2^-149 to 2^127 with
 * its two neighbours, the fp16 thresholds with theirs, FLT_MAX, infinities and NaNs, both signs. */
static int64_t edge_values(float *v, int64_t cap) {
    int64_t n = 0;
    const uint32_t fixed[] = {0x00000000u, 0x00000001u, 0x00000002u, 0x00000003u, 0x007FFFFFu, 0x00400000u,
                              0x33000000u, 0x32FFFFFFu, 0x33000001u, 0x477FF000u, 0x477FEFFFu, 0x477FF001u,
                              0x477FE000u, 0x7F7FFFFFu, 0x7F800000u, 0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        for (uint32_t sign = 0; sign < 2 && n < cap; sign++) v[n++] = f32_from_bits(fixed[i] | sign << 31);
    for (int e = -149; e <= 127; e++) {
        const float p = ldexpf(1.0f, e);
        const float near[] = {p, nextafterf(p, 0.0f), nextafterf(p, INFINITY)};
        for (int j = 0; j < 3; j++)
            if (n + 2 <= cap) v[n++] = near[j], v[n++] = -near[j];
    }
    return n;
}

void test_grad_tally_edges(void) {
    enum { CAP = 2048 };
    float *v = malloc(CAP * sizeof *v);
    if (!CHECK(v)) return;
    const int64_t n = edge_values(v, CAP);
    const int one[] = {1}, all[] = {CAP}, mixed[] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
    float *rot = malloc(CAP * sizeof *rot);
    if (!CHECK(rot)) goto done;
    for (int s = 0; s < N_INV; s++) {
        /* long calls go through whole blocks (of a fixed count, 1024 at the time of writing) where the
         * scale is a power of two: every value in the first 512, 1024 or 1536 of a call */
        for (int64_t start = 0; start < n; start += 512) {
            for (int64_t i = 0; i < n; i++) rot[i] = v[(start + i) % n];
            check_values("edge values, one call", rot, n, inv_scales[s], all, 1);
        }
        check_values("edge values, one value per call", v, n, inv_scales[s], one, 1);
        check_values("edge values, calls of 3, 1, 4, ...", v, n, inv_scales[s], mixed, 14);
    }
    /* every scale's g lands in the bins it should: one value per call, each alone */
    for (int s = 0; s < N_INV; s++)
        for (int64_t i = 0; i < n; i++) check_values("one edge value", v + i, 1, inv_scales[s], one, 1);
done:
    free(rot);
    free(v);
}

/* Random bit patterns over the whole fp32 range, and gradient-like values (exponents -40 to 4, a
 * tenth exact zeros), at every scale above. */
void test_grad_tally_random(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed};
    const int64_t n = harness_quick() ? 20000 : 200000;
    float *v = malloc((size_t)n * sizeof *v);
    if (!CHECK(v)) return;
    const int pieces[] = {4096, 1, 4093, 7, 64, 2, 3};
    for (int64_t i = 0; i < n; i++) v[i] = f32_from_bits((uint32_t)test_rng_next(&rng));
    for (int s = 0; s < N_INV; s++) check_values("random bit patterns", v, n, inv_scales[s], pieces, 7);
    for (int64_t i = 0; i < n; i++) {
        const uint32_t r = (uint32_t)test_rng_next(&rng);
        const float m = 1.0f + (float)(r >> 9) * 0x1p-23f;
        const float x = ldexpf(m, (int)test_rng_below(&rng, 45) - 40);
        v[i] = r % 10 == 0 ? 0.0f : (r & 256) ? -x : x;
    }
    for (int s = 0; s < N_INV; s++) check_values("gradient-like values", v, n, inv_scales[s], pieces, 7);
    free(v);
}
