/* Internal: the scalar conversion algorithms, as static inline functions so that the public scalar
 * API, the reference ("ref") kernels and the SIMD kernels' tails all run the same code.
 *
 * One parametric integer algorithm serves every narrow format (E exponent bits, M fraction bits,
 * bias B): round-to-nearest-even is an integer add on the fp32 bit pattern, which makes subnormals,
 * ties and overflow exact without touching the FPU's rounding mode or DAZ/FTZ flags. */
#ifndef AMP_FLOAT_BITS_H
#define AMP_FLOAT_BITS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t amp_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float amp_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Shifts x right by s (s >= 1) rounding to nearest, ties to even. Exact for s up to 31; x < 2^31. */
static inline uint32_t amp_shift_right_rne(uint32_t x, unsigned s) {
    return (x + ((1u << (s - 1)) - 1u) + ((x >> s) & 1u)) >> s;
}

/* What happens to a finite value that rounds past the largest finite value of the target. */
typedef enum { AMP_OVERFLOW_INF, AMP_OVERFLOW_NAN, AMP_OVERFLOW_SATURATE } amp_overflow_rule;

/* Encodes fp32 bits `f` into a narrow format with E exponent bits, M fraction bits and bias B <= 127,
 * given its largest finite pattern, infinity pattern and canonical NaN (all without sign). */
static inline uint32_t amp_encode_narrow(uint32_t f, unsigned E, unsigned M, int B, uint32_t max_finite,
                                         uint32_t inf_bits, uint32_t nan_bits, amp_overflow_rule rule) {
    const uint32_t a = f & 0x7FFFFFFFu;
    const uint32_t sign_bit = (f >> 31) << (E + M);
    if (a > 0x7F800000u) return sign_bit | nan_bits;
    if (a == 0x7F800000u) return sign_bit | (rule == AMP_OVERFLOW_SATURATE ? max_finite : inf_bits);
    const int e = (int)(a >> 23) - 127 + B; /* target's biased exponent if the value were normal there */
    uint32_t out;
    if (e >= 1) {
        /* Normal in the target: rebias the exponent field and round off 23 - M fraction bits. A carry
         * out of the fraction correctly bumps the exponent (and can reach the overflow pattern). */
        out = amp_shift_right_rne(a - ((uint32_t)(127 - B) << 23), 23u - M);
    } else {
        /* Subnormal in the target: the significand (with its implicit bit for fp32 normals) is shifted
         * by the extra 1 - e positions; a carry out lands exactly on the smallest normal pattern. */
        const uint32_t sig = (a & 0x007FFFFFu) | ((a >> 23) ? 0x00800000u : 0u);
        const unsigned s = (23u - M) + (unsigned)(1 - e);
        out = s > 25u ? 0u : amp_shift_right_rne(sig, s);
    }
    if (out > max_finite) {
        switch (rule) {
        case AMP_OVERFLOW_INF: out = inf_bits; break;
        case AMP_OVERFLOW_NAN: out = nan_bits; break;
        default: out = max_finite; break;
        }
    }
    return sign_bit | out;
}

/* Decodes a narrow pattern `h` (E exponent bits, M fraction bits, bias B) into fp32 bits, exactly.
 * has_inf false means the "fn" convention: only the all-ones exponent with all-ones fraction is NaN. */
static inline uint32_t amp_decode_narrow(uint32_t h, unsigned E, unsigned M, int B, bool has_inf) {
    const uint32_t sign = (h >> (E + M)) << 31;
    const uint32_t e = (h >> M) & ((1u << E) - 1u);
    const uint32_t m = h & ((1u << M) - 1u);
    if (e == (1u << E) - 1u) {
        if (has_inf) return sign | 0x7F800000u | (m << (23 - M)); /* inf, or NaN with its payload */
        if (m == (1u << M) - 1u) return sign | 0x7FC00000u;      /* fn: the only NaN */
    }
    if (e == 0) {
        if (m == 0) return sign;
        /* Subnormal: normalize. m has its top set bit at position p; the value is m * 2^(1-B-M). */
        unsigned p = 31u - (unsigned)__builtin_clz(m);
        uint32_t frac = (m << (23 - p)) & 0x007FFFFFu;
        uint32_t exp = (uint32_t)(127 + 1 - B - (int)M + (int)p);
        return sign | (exp << 23) | frac;
    }
    return sign | ((e + (uint32_t)(127 - B)) << 23) | (m << (23 - M));
}

/* The four formats, spelled out once. bf16's subnormals coincide with fp32's (same exponent range),
 * so its encoder is the plain integer rounding of the top half. */
static inline uint16_t amp_f16_encode(uint32_t f, amp_overflow_rule rule) {
    return (uint16_t)amp_encode_narrow(f, 5, 10, 15, 0x7BFFu, 0x7C00u, 0x7E00u, rule);
}
static inline uint32_t amp_f16_decode(uint16_t h) { return amp_decode_narrow(h, 5, 10, 15, true); }

static inline uint16_t amp_bf16_encode(uint32_t f, amp_overflow_rule rule) {
    const uint32_t sign_bit = (f >> 16) & 0x8000u;
    const uint32_t a = f & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign_bit | 0x7FC0u);
    uint32_t out = (a == 0x7F800000u) ? 0x7F80u : amp_shift_right_rne(a, 16);
    if (rule == AMP_OVERFLOW_SATURATE && out > 0x7F7Fu) out = 0x7F7Fu;
    return (uint16_t)(sign_bit | out);
}
static inline uint32_t amp_bf16_decode(uint16_t h) { return (uint32_t)h << 16; }

static inline uint8_t amp_f8e4m3_encode(uint32_t f, amp_overflow_rule rule) {
    /* fn variant: no infinity, so overflow and +-inf give NaN unless saturating (PyTorch, ml_dtypes). */
    if (rule == AMP_OVERFLOW_INF) rule = AMP_OVERFLOW_NAN;
    return (uint8_t)amp_encode_narrow(f, 4, 3, 7, 0x7Eu, 0x7Fu, 0x7Fu, rule);
}
static inline uint32_t amp_f8e4m3_decode(uint8_t h) { return amp_decode_narrow(h, 4, 3, 7, false); }

static inline uint8_t amp_f8e5m2_encode(uint32_t f, amp_overflow_rule rule) {
    return (uint8_t)amp_encode_narrow(f, 5, 2, 15, 0x7Bu, 0x7Cu, 0x7Eu, rule);
}
static inline uint32_t amp_f8e5m2_decode(uint8_t h) { return amp_decode_narrow(h, 5, 2, 15, true); }

#endif /* AMP_FLOAT_BITS_H */
