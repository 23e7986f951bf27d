/* An e5m2 codec and scale rule of the tests' own, never amp's: the reference of the e5m2 gradient
 * sum (tests/test_allreduce_fp8.c, tests/mpi/allreduce_fp8_mpi.c). Decoding reads the bit fields;
 * encoding searches the 124 finite magnitudes for the nearest, ties to an even code. */
#ifndef AMP_TESTS_E5M2_REF_H
#define AMP_TESTS_E5M2_REF_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

enum { E5M2_REF_MAX = 57344 };

static inline double ref_decode(uint8_t b) {
    const int e = (b >> 2) & 31, m = b & 3;
    const double sign = (b & 0x80) ? -1.0 : 1.0;
    if (e == 31) return m ? NAN : sign * INFINITY;
    return sign * (e == 0 ? ldexp(m, -16) : ldexp(4 + m, e - 17));
}

/* Nearest finite code, ties to an even code; past the largest: saturate, or inf from 61440 (the
 * midpoint to the would-be next value 65536) when !sat. NaN: 0x7E with the sign. */
static inline uint8_t ref_encode(float x, bool sat) {
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x)) return (uint8_t)(sign | 0x7E);
    const double a = fabs((double)x);
    if (a >= 61440.0 && !sat) return (uint8_t)(sign | 0x7C);
    uint8_t best = 0;
    for (int c = 1; c <= 0x7B; c++) {
        const double d = fabs(a - ref_decode((uint8_t)c)), db = fabs(a - ref_decode(best));
        if (d < db || (d == db && (c & 1) == 0)) best = (uint8_t)c;
    }
    return (uint8_t)(sign | best);
}

/* A segment's scale: 57344 / amax in fp32 (one division; an infinite quotient taken as FLT_MAX),
 * rounded down to a power of 2, over 2^k, the smallest power of 2 >= ranks. */
static inline float ref_scale(float amax, int ranks) {
    int k = 0;
    while ((1 << k) < ranks) k++;
    if (amax == 0.0f) return ldexpf(1.0f, -k);
    float q = (float)E5M2_REF_MAX / amax;
    if (isinf(q)) q = FLT_MAX;
    int e;
    frexpf(q, &e);
    return ldexpf(1.0f, e - 1 - k);
}

/* The reference sum of one value: decode(e5m2(sum over ranks of decode(e5m2(g_r s)))) / s, the sum in
 * fp32 in rank order. */
static inline float ref_sum(const float *g, int ranks, float s) {
    float acc = 0.0f;
    for (int k = 0; k < ranks; k++) acc += (float)ref_decode(ref_encode(g[k] * s, true));
    return (float)ref_decode(ref_encode(acc, false)) * (1.0f / s);
}

#endif /* AMP_TESTS_E5M2_REF_H */
