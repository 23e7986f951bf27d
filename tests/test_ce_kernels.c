/* The fused cross-entropy row kernels (kernels/vecmath.h: ce_stats, ce_grad) of every path that has
 * them, against the composition they replace (amp_vmath_ce_stats_composed and
 * amp_vmath_ce_grad_composed on the same table: its exp with scalar loops in the lanes' order), bit
 * for bit, any NaN matching any NaN; and the composition itself, on every path, against
 * double-precision log-sum-exp and softmax. Rows of fp32 and bf16 logits, every length to 40 and
 * lengths across the composition's 256-value chunks, every target lane, random values (the seed is
 * printed) and rows with infinities, NaN, huge and tiny values. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/float_bits.h"
#include "../src/kernels/vecmath.h"
#include "harness.h"
#include "tests.h"

enum { MAX_C = 1100 };

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)); }

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* a value in [-r, r) */
static float uniform(uint64_t *s, float r) { return ((float)(next(s) >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * r; }

/* The row's values as the kernels read them: bf16 rows round to bf16 (the patterns kept in x16) */
static void set_row(float *x, uint16_t *x16, bool bf16, size_t C) {
    for (size_t c = 0; bf16 && c < C; c++) {
        const uint32_t u = amp_f32_bits(x[c]);
        x16[c] = (uint16_t)(u >> 16); /* truncated: any pattern will do, the kernels read it exactly */
        x[c] = amp_f32_from_bits(amp_bf16_decode(x16[c]));
    }
}

/* Compares the path's fused kernels with the composition on one row, every target in targets */
static int64_t compare_row(const amp_vmath_kernels *k, const float *x, const uint16_t *x16, bool bf16, size_t C,
                           float kk, float *a, float *b) {
    const void *row = bf16 ? (const void *)x16 : (const void *)x;
    float mx_a, sum_a, mx_b, sum_b;
    k->ce_stats(row, bf16, C, &mx_a, &sum_a);
    amp_vmath_ce_stats_composed(k, row, bf16, C, &mx_b, &sum_b);
    int64_t bad = !(mx_a == mx_b || (isnan(mx_a) && isnan(mx_b))) || !same_bits(sum_a, sum_b);
    const float logsum = logf(sum_b);
    for (size_t t = 0; t < C; t += C > 40 ? 37 : 1) {
        k->ce_grad(a, row, bf16, C, mx_b, logsum, kk, t);
        amp_vmath_ce_grad_composed(k, b, row, bf16, C, mx_b, logsum, kk, t);
        for (size_t c = 0; c < C; c++) bad += !same_bits(a[c], b[c]);
    }
    return bad;
}

/* The composition on finite rows against double precision: log-sum-exp and the gradient */
static double accuracy_row(const amp_vmath_kernels *k, const float *x, size_t C, float kk, size_t t, float *d) {
    float mx, sum;
    amp_vmath_ce_stats_composed(k, x, false, C, &mx, &sum);
    const float logsum = logf(sum);
    double m = -INFINITY, s = 0.0;
    for (size_t c = 0; c < C; c++) m = x[c] > m ? x[c] : m;
    for (size_t c = 0; c < C; c++) s += exp((double)x[c] - m);
    const double lse = m + log(s);
    double err = fabs(((double)mx + (double)logsum) - lse) / fmax(1.0, fabs(lse));
    amp_vmath_ce_grad_composed(k, d, x, false, C, mx, logsum, kk, t);
    for (size_t c = 0; c < C; c++) {
        const double want = (exp((double)x[c] - lse) - (c == t ? 1.0 : 0.0)) * kk;
        err = fmax(err, fabs(d[c] - want) / fabs(kk));
    }
    return err;
}

void test_ce_kernels(void) {
    float *x = malloc(MAX_C * sizeof *x), *a = malloc(MAX_C * sizeof *a), *b = malloc(MAX_C * sizeof *b);
    uint16_t *x16 = malloc(MAX_C * sizeof *x16);
    if (!CHECK(x && a && b && x16)) goto out;
    const uint64_t seed = harness_seed();
    harness_note("seed 0x%llx", (unsigned long long)seed);
    static const size_t long_c[] = {63, 64, 65, 255, 256, 257, 300, 511, 512, 1000, 1093};
    int tested = 0;
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!amp_isa_supported((amp_isa)isa)) continue;
        const amp_vmath_kernels *k = amp_vmath_kernels_for((amp_isa)isa);
        uint64_t s = seed | 1;
        /* the composition's accuracy, every path (the op runs it where the fused kernels are NULL) */
        double worst = 0.0;
        for (int rep = 0; rep < 200; rep++) {
            const size_t C = 1 + (size_t)(next(&s) % 600);
            const float r = rep % 3 == 0 ? 60.0f : rep % 3 == 1 ? 8.0f : 1e-3f;
            for (size_t c = 0; c < C; c++) x[c] = uniform(&s, r) + (rep % 5 == 0 ? 1e4f : 0.0f);
            worst = fmax(worst, accuracy_row(k, x, C, rep % 2 ? 1.0f : -65536.0f / 4096.0f, next(&s) % C, a));
        }
        /* fp32: exp within 1 ulp, sums of up to 600 terms, log */
        CHECK_MSG(worst < 2e-5, "ce composition %s: relative error %.3g against double", amp_isa_name((amp_isa)isa),
                  worst);
        if (!k->ce_stats || !k->ce_grad) continue;
        tested++;
        int64_t bad = 0, rows = 0;
        for (int bf = 0; bf < 2; bf++) {
            const bool bf16 = bf == 1;
            /* every length to 40 and the long ones, random values of three scales */
            for (size_t i = 0; i < 41 + sizeof long_c / sizeof long_c[0]; i++) {
                const size_t C = i <= 40 ? i : long_c[i - 41];
                for (int scale = 0; scale < 3; scale++) {
                    for (size_t c = 0; c < C; c++) x[c] = uniform(&s, scale == 0 ? 4.0f : scale == 1 ? 90.0f : 1e30f);
                    set_row(x, x16, bf16, C);
                    bad += compare_row(k, x, x16, bf16, C, scale == 1 ? 1.0f / 2048.0f : 32.0f, a, b), rows++;
                }
            }
            /* special values: infinities, NaN, a row of -inf, zeros of both signs, subnormals */
            static const float specials[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-40f, -1e-40f, 3.4e38f, -3.4e38f};
            const size_t ns = sizeof specials / sizeof specials[0];
            for (size_t C = 1; C <= 37; C += 4)
                for (size_t sp = 0; sp < ns; sp++)
                    for (int pattern = 0; pattern < 3; pattern++) {
                        for (size_t c = 0; c < C; c++)
                            x[c] = pattern == 2 ? specials[sp] : pattern == 1 && c % 3 == 0 ? specials[sp] : uniform(&s, 3.0f);
                        if (pattern == 0) x[next(&s) % C] = specials[sp];
                        set_row(x, x16, bf16, C);
                        bad += compare_row(k, x, x16, bf16, C, 0.5f, a, b), rows++;
                    }
        }
        CHECK_MSG(bad == 0, "ce kernels %s: %lld values of %lld rows differ from the composition",
                  amp_isa_name((amp_isa)isa), (long long)bad, (long long)rows);
    }
    if (!tested) harness_note("no path with fused cross-entropy kernels on this CPU: compositions only");
out:
    free(x), free(a), free(b), free(x16);
}
