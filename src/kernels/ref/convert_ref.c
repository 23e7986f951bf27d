/* Reference conversion kernels: plain loops over the scalar algorithms (core/float_bits.h), and
 * acc_rounded as their composition. Always built; the encode and decode kernels of every SIMD path
 * are tested bit for bit against these, acc_rounded on every path (this one included) against the
 * tests' independent format reference (tests/test_acc_rounded.c). */
#include <stdint.h>

#include "../../core/accumulate.h"
#include "../../core/float_bits.h"
#include "../convert_kernels.h"

#define DEFINE_ENCODE(name, type, encoder, rule)                                         \
    static void name(void *dst, const float *src, size_t n) {                            \
        type *out = dst;                                                                  \
        for (size_t i = 0; i < n; i++) out[i] = encoder(amp_f32_bits(src[i]), rule);      \
    }
#define DEFINE_DECODE(name, type, decoder)                                                \
    static void name(float *dst, const void *src, size_t n) {                             \
        const type *in = src;                                                             \
        for (size_t i = 0; i < n; i++) dst[i] = amp_f32_from_bits(decoder(in[i]));        \
    }

DEFINE_ENCODE(encode_f16, uint16_t, amp_f16_encode, AMP_OVERFLOW_INF)
DEFINE_ENCODE(encode_f16_sat, uint16_t, amp_f16_encode, AMP_OVERFLOW_SATURATE)
DEFINE_ENCODE(encode_bf16, uint16_t, amp_bf16_encode, AMP_OVERFLOW_INF)
DEFINE_ENCODE(encode_bf16_sat, uint16_t, amp_bf16_encode, AMP_OVERFLOW_SATURATE)
DEFINE_ENCODE(encode_f8e4m3, uint8_t, amp_f8e4m3_encode, AMP_OVERFLOW_NAN)
DEFINE_ENCODE(encode_f8e4m3_sat, uint8_t, amp_f8e4m3_encode, AMP_OVERFLOW_SATURATE)
DEFINE_ENCODE(encode_f8e5m2, uint8_t, amp_f8e5m2_encode, AMP_OVERFLOW_INF)
DEFINE_ENCODE(encode_f8e5m2_sat, uint8_t, amp_f8e5m2_encode, AMP_OVERFLOW_SATURATE)
DEFINE_DECODE(decode_f16, uint16_t, amp_f16_decode)
DEFINE_DECODE(decode_bf16, uint16_t, amp_bf16_decode)
DEFINE_DECODE(decode_f8e4m3, uint8_t, amp_f8e4m3_decode)
DEFINE_DECODE(decode_f8e5m2, uint8_t, amp_f8e5m2_decode)

/* acc_rounded as its definition: the row through a stack chunk, encoded, decoded, then added in fp32
 * (core/accumulate.h), the oracle of the SIMD paths' one-pass kernels */
enum { ACC_CHUNK = 256 };
#define DEFINE_ACC_ROUNDED(name, type, encode, decode)                                    \
    static uint32_t name(float *acc, const float *v, size_t n, amp_acc_mode mode) {     \
        float w[ACC_CHUNK];                                                               \
        uint32_t max = 0;                                                                 \
        for (size_t i0 = 0; i0 < n; i0 += ACC_CHUNK) {                                    \
            const size_t len = n - i0 < ACC_CHUNK ? n - i0 : ACC_CHUNK;                   \
            type h[ACC_CHUNK];                                                            \
            encode(h, v + i0, len);                                                       \
            decode(w, h, len);                                                            \
            amp_acc_f32(acc + i0, w, (int64_t)len, mode != AMP_ACC_ADD);                  \
            for (size_t i = 0; i < len; i++) {                                            \
                const uint32_t b = amp_f32_bits(acc[i0 + i]) & 0x7FFFFFFFu;               \
                max = b > max ? b : max;                                                  \
            }                                                                             \
        }                                                                                 \
        return max;                                                                       \
    }
DEFINE_ACC_ROUNDED(acc_rounded_f16, uint16_t, encode_f16, decode_f16)
DEFINE_ACC_ROUNDED(acc_rounded_bf16, uint16_t, encode_bf16, decode_bf16)
DEFINE_ACC_ROUNDED(acc_rounded_f8e4m3, uint8_t, encode_f8e4m3, decode_f8e4m3)
DEFINE_ACC_ROUNDED(acc_rounded_f8e5m2, uint8_t, encode_f8e5m2, decode_f8e5m2)

/* the reference path streams nothing */
static void no_fence(void) {}

void amp_convert_kernels_ref(amp_convert_kernels *k) {
    k->acc_rounded[AMP_F16] = acc_rounded_f16;
    k->acc_rounded[AMP_BF16] = acc_rounded_bf16;
    k->acc_rounded[AMP_F8E4M3] = acc_rounded_f8e4m3;
    k->acc_rounded[AMP_F8E5M2] = acc_rounded_f8e5m2;
    k->encode[AMP_F16][0] = encode_f16;
    k->encode[AMP_F16][1] = encode_f16_sat;
    k->encode[AMP_BF16][0] = encode_bf16;
    k->encode[AMP_BF16][1] = encode_bf16_sat;
    k->encode[AMP_F8E4M3][0] = encode_f8e4m3;
    k->encode[AMP_F8E4M3][1] = encode_f8e4m3_sat;
    k->encode[AMP_F8E5M2][0] = encode_f8e5m2;
    k->encode[AMP_F8E5M2][1] = encode_f8e5m2_sat;
    k->decode[AMP_F16] = decode_f16;
    k->decode[AMP_BF16] = decode_bf16;
    k->decode[AMP_F8E4M3] = decode_f8e4m3;
    k->decode[AMP_F8E5M2] = decode_f8e5m2;
    for (int dt = 0; dt < AMP_DTYPE_COUNT; dt++) k->encode_stream[dt] = k->encode[dt][0]; /* plain stores */
    k->stream_fence = no_fence;
}
