/* Stochastic rounding of fp32 master weights to bf16 and f16, with a counter-based generator.
 *
 * Reproducibility (llm.c's idea, made stateless): the random bits of element i at update t are a hash
 * of (seed, t, i), not the next draw of a stream, so they do not depend on the thread count, on the
 * order the elements are visited in, or on how many updates ran in this process: a run resumed at
 * update k (state, masters and step count restored) rounds exactly as the uninterrupted one.
 * The hash is splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
 * OOPSLA 2014): the i-th output of the stream whose state starts at key(seed, t), i.e.
 * mix64(key + (i + 1) * golden), which passes BigCrush as a sequence.
 *
 * Rounding: with the spacing s of the target format around |x| and |x| = lo + f, 0 <= f < s, the
 * result is lo + s with probability f / s and lo otherwise, so its expected value is x. Where the
 * target's values are the fp32 values with their low d bits clear (bf16 everywhere; f16 in its normal
 * range), that is one integer addition: add d random bits to |x|'s bit pattern and clear the low d
 * bits (the carry happens with probability f / s exactly, and a carry into the exponent field is the
 * step into the next binade). f16's subnormal range has a fixed spacing 2^-24 and works in that unit
 * instead (below). */
#include <math.h>
#include <string.h>

#include "amp/formats.h"
#include "optim_internal.h"

#define SPLITMIX_GOLDEN 0x9E3779B97F4A7C15ull

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t optim_sr_key(uint64_t seed, uint64_t step) {
    /* Two rounds so that nearby (seed, step) pairs give unrelated streams. */
    return mix64(seed ^ mix64(step * SPLITMIX_GOLDEN + 0x632BE59BD9B4E019ull));
}

uint32_t optim_sr_bits(uint64_t key, uint64_t index) {
    return (uint32_t)(mix64(key + (index + 1) * SPLITMIX_GOLDEN) >> 32);
}

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t optim_sr_bf16(float x, uint32_t r) {
    if (!isfinite(x)) return amp_bf16_from_fp32(x);
    const uint32_t u = f32_bits(x), sign = u & 0x80000000u;
    /* |x| + 16 random bits, truncated: at most 0x7F7FFFFF + 0xFFFF, which is 0x7F80xxxx (inf) only
     * for |x| above bf16's largest finite value, where round-to-nearest would also give inf from the
     * midpoint on. */
    const uint32_t mag = ((u & 0x7FFFFFFFu) + (r & 0xFFFFu)) & 0xFFFF0000u;
    return (uint16_t)((sign | mag) >> 16);
}

/* 2^-14, f16's smallest normal, and 2^24, the reciprocal of its subnormal spacing. */
#define FP16_MIN_NORMAL_BITS 0x38800000u
#define TWO_POW_24 16777216.0f
#define TWO_POW_32 4294967296.0

uint16_t optim_sr_fp16(float x, uint32_t r) {
    if (!isfinite(x)) return amp_fp16_from_fp32(x);
    const uint32_t u = f32_bits(x), sign = u & 0x80000000u, abs_bits = u & 0x7FFFFFFFu;
    float y;
    if (abs_bits >= FP16_MIN_NORMAL_BITS) {
        /* Normal range: f16 keeps 10 of fp32's 23 fraction bits. Values past 65504 land on 65536,
         * which the exact conversion below turns into inf (nearest even would from 65520 on). */
        y = f32_from_bits(sign | ((abs_bits + (r & 0x1FFFu)) & ~0x1FFFu));
    } else {
        /* Subnormal range: multiples of 2^-24. q = |x| * 2^24 < 1024 is exact, and so are its integer
         * and fractional parts; round up when the 32 random bits, read as a fraction, fall below f.
         * P(up) = ceil(f * 2^32) / 2^32: exact when f has at most 32 fraction bits (|x| >= 2^-33). */
        const float q = fabsf(x) * TWO_POW_24;
        const float lo = floorf(q);
        const double f = (double)(q - lo);
        const float k = ((double)r < f * TWO_POW_32) ? lo + 1.0f : lo;
        y = copysignf(k / TWO_POW_24, x);
    }
    return amp_fp16_from_fp32(y); /* exact: y is an f16 value (or past its range: inf) */
}

void optim_sr_write(void *dst, amp_dtype dtype, const float *src, int64_t n, uint64_t key, uint64_t first_index) {
    uint16_t *out = dst;
    if (dtype == AMP_BF16) {
        for (int64_t i = 0; i < n; i++) out[i] = optim_sr_bf16(src[i], optim_sr_bits(key, first_index + (uint64_t)i));
    } else {
        for (int64_t i = 0; i < n; i++) out[i] = optim_sr_fp16(src[i], optim_sr_bits(key, first_index + (uint64_t)i));
    }
}
