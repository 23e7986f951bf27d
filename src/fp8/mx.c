/* MXFP8 (OCP Microscaling v1.0): blocks of 32 values sharing one E8M0 scale 2^(byte-127), with the
 * four ways of choosing the exponent that torchao's to_mx offers. fp8.h states the rules and the
 * documented differences from torchao. */
#include <math.h>
#include <stdint.h>

#include "amp/fp8.h"
#include "amp/status.h"
#include "../core/float_bits.h"
#include "../kernels/fp8_kernels.h"
#include "fp8_internal.h"

enum { E8M0_NAN = 0xFF, E8M0_INF_RCEIL = 0xFE, AMAX_CHUNK = 64 };

/* RCEIL: amax / fp8_max rounded up to a power of 2 in E8M0, saturating at 0xFE (the rounding of
 * cvt.rp.satfinite.ue8m0x2.f32: 2^-127 is the smallest scale, so anything up to it gives byte 0). */
static uint8_t rceil_byte(float amax, amp_dtype elem) {
    const uint32_t d = amp_f32_bits(amax / amp_fp8_max_finite(elem));
    const uint32_t e = d >> 23, m = d & 0x7FFFFFu;
    if (e == 0xFF) return m ? E8M0_NAN : E8M0_INF_RCEIL;
    if (e == 0) return m > 0x400000u ? 1 : 0; /* subnormal: above 2^-127 rounds up to 2^-126 */
    const uint32_t b = e + (m != 0);
    return (uint8_t)(b > E8M0_INF_RCEIL ? E8M0_INF_RCEIL : b);
}

static uint8_t scale_byte(float amax, amp_dtype elem, amp_mx_scale_mode mode) {
    if (isnan(amax)) return E8M0_NAN;
    if (mode == AMP_MX_RCEIL) return rceil_byte(amax, elem);
    const int emax = elem == AMP_F8E4M3 ? 8 : 15;   /* log2 of the largest power of 2 in elem */
    const unsigned mbits = elem == AMP_F8E4M3 ? 3 : 2;
    uint32_t a = amp_f32_bits(amax);
    if (mode == AMP_MX_EVEN) a = (a + (1u << (22 - mbits))) & 0xFF800000u;
    int e = (int)((a >> 23) & 0xFF) - 127;
    if (mode == AMP_MX_CEIL) e += (a & 0x7FFFFFu) != 0;
    int u = e - emax;
    if (u < -127) u = -127;
    return (uint8_t)(u + 127); /* u <= 128 - 8: no upper clamp needed */
}

/* The payload of a NaN block, torchao's bits on x86 (fp8.h); the values are NaN on decode anyway. */
static float nan_block_value(float x, amp_mx_scale_mode mode) {
    if (mode == AMP_MX_RCEIL) return amp_f32_from_bits(0x7FC00000u);
    if (isnan(x)) return x;
    if (isinf(x)) return amp_f32_from_bits(0xFFC00000u); /* inf / inf: the default NaN */
    return copysignf(0.0f, x);                            /* x / inf */
}

/* 2^(127 - byte) for byte in [0, 254]: the exact reciprocal of the scale (2^-127 is subnormal). */
static float inverse_scale(uint8_t byte) {
    return byte == 254 ? amp_f32_from_bits(0x00400000u) : amp_f32_from_bits((uint32_t)(254 - byte) << 23);
}

static int check_mx(const void *a, const void *b, const void *c, size_t n, amp_dtype elem) {
    if (!amp_fp8_dtype_ok(elem)) return AMP_ERR_UNSUPPORTED_DTYPE;
    if (n % AMP_MX_BLOCK != 0) return AMP_ERR_INVALID_ARGUMENT;
    if (n > 0 && (!a || !b || !c)) return AMP_ERR_NULL_POINTER;
    return AMP_OK;
}

int amp_mx_quantize(void *dst, uint8_t *scales_e8m0, const float *src, size_t n, amp_dtype elem,
                    amp_mx_scale_mode mode) {
    const int st = check_mx(dst, scales_e8m0, src, n, elem);
    if (st != AMP_OK) return st;
    if ((unsigned)mode > AMP_MX_EVEN) return AMP_ERR_INVALID_ARGUMENT;
    uint8_t *out = dst;
    const amp_fp8_kernels *fk = amp_fp8_kernels_active();
    float amax[AMAX_CHUNK];
    for (size_t b = 0; b < n / AMP_MX_BLOCK; b++) {
        const float *x = src + b * AMP_MX_BLOCK;
        if (b % AMAX_CHUNK == 0) { /* the amaxes of the next AMAX_CHUNK blocks (NaN where a block has one) */
            const size_t left = n / AMP_MX_BLOCK - b;
            fk->block_amax(amax, x, left < AMAX_CHUNK ? left : AMAX_CHUNK, AMP_MX_BLOCK);
        }
        const uint8_t byte = scale_byte(amax[b % AMAX_CHUNK], elem, mode);
        scales_e8m0[b] = byte;
        if (byte == E8M0_NAN) {
            float v[AMP_MX_BLOCK];
            for (int i = 0; i < AMP_MX_BLOCK; i++) v[i] = nan_block_value(x[i], mode);
            amp_fp8_scaled_encode(out + b * AMP_MX_BLOCK, elem, v, AMP_MX_BLOCK, 1.0f);
        } else {
            amp_fp8_scaled_encode(out + b * AMP_MX_BLOCK, elem, x, AMP_MX_BLOCK, inverse_scale(byte));
        }
    }
    return AMP_OK;
}

int amp_mx_dequantize(float *dst, const void *src, const uint8_t *scales_e8m0, size_t n, amp_dtype elem) {
    const int st = check_mx(dst, src, scales_e8m0, n, elem);
    if (st != AMP_OK) return st;
    const uint8_t *in = src;
    for (size_t b = 0; b < n / AMP_MX_BLOCK; b++) {
        const uint8_t byte = scales_e8m0[b];
        /* 2^(byte-127): 2^-127 is the subnormal 0x00400000; 0xFF is NaN (the OCP definition). */
        const float s = byte == E8M0_NAN ? amp_f32_from_bits(0x7FC00000u)
                        : byte == 0      ? amp_f32_from_bits(0x00400000u)
                                         : amp_f32_from_bits((uint32_t)byte << 23);
        amp_fp8_scaled_decode(dst + b * AMP_MX_BLOCK, elem, in + b * AMP_MX_BLOCK, AMP_MX_BLOCK, s);
    }
    return AMP_OK;
}
