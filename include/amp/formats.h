/* Conversions between fp32 and amp's low-precision formats, exact to the bit.
 *
 * Encoding (fp32 -> narrow), every function and every SIMD path of amp_convert:
 *   - rounds to nearest, ties to even, in one rounding step from the exact fp32 value;
 *   - produces subnormals of the target format (never flushes them to zero);
 *   - overflows to +-inf in f16, bf16 and f8e5m2; in f8e4m3 ("fn", no inf) a value that rounds past
 *     448 becomes NaN, as PyTorch's float8_e4m3fn and ml_dtypes do;
 *   - keeps the sign of zeros; turns any NaN into the target's canonical quiet NaN with the same sign
 *     (f16 0x7E00, bf16 0x7FC0, f8e4m3 0x7F, f8e5m2 0x7E, each OR'd with the sign bit).
 * The *_sat encoders saturate instead (Transformer Engine's casts): a finite value that would round
 * past the largest finite value, and +-inf, become +-max finite; NaN stays NaN.
 *
 * Decoding (narrow -> fp32) is exact for every bit pattern: every finite value, both zeros and both
 * infinities map to the same value in fp32, and a NaN keeps its sign and its payload bits (f16 and
 * f8e5m2 payloads shift into the top of the fp32 fraction, without quieting; bf16 is the top half of
 * the fp32 word; f8e4m3's only NaN patterns become the canonical fp32 quiet NaN 0x7FC00000 | sign).
 *
 * Because decoding is exact and encoding rounds once, converting between two narrow formats with
 * amp_convert (through fp32) is also a single correct rounding. */
#ifndef AMP_FORMATS_H
#define AMP_FORMATS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Named limits (IEEE 754-2008 binary16; bfloat16; OCP 8-bit Floating Point Specification v1.0). */
#define AMP_FP16_MAX 65504.0f                  /* 0x7BFF */
#define AMP_FP16_MIN_NORMAL 6.103515625e-05f   /* 2^-14, 0x0400 */
#define AMP_FP16_MIN_SUBNORMAL 5.9604645e-08f  /* 2^-24, 0x0001 */
#define AMP_BF16_MAX 3.38953139e+38f           /* (2 - 2^-7) * 2^127, 0x7F7F */
#define AMP_FP8E4M3_MAX 448.0f                 /* S.1111.110 */
#define AMP_FP8E5M2_MAX 57344.0f               /* S.11110.11 */

uint16_t amp_fp16_from_fp32(float x);
float amp_fp16_to_fp32(uint16_t bits);
uint16_t amp_bf16_from_fp32(float x);
float amp_bf16_to_fp32(uint16_t bits);
uint8_t amp_fp8e4m3_from_fp32(float x);
float amp_fp8e4m3_to_fp32(uint8_t bits);
uint8_t amp_fp8e5m2_from_fp32(float x);
float amp_fp8e5m2_to_fp32(uint8_t bits);

/* Saturating encoders: like the ones above, except that out-of-range values and infinities clip
 * to +-max finite. */
uint16_t amp_fp16_from_fp32_sat(float x);
uint16_t amp_bf16_from_fp32_sat(float x);
uint8_t amp_fp8e4m3_from_fp32_sat(float x);
uint8_t amp_fp8e5m2_from_fp32_sat(float x);

/* Converts n elements between any two dtypes; returns 0 on success, a negative amp status otherwise
 * (AMP_ERR_UNSUPPORTED_DTYPE for a dtype outside the enum, AMP_ERR_NULL_POINTER for a NULL buffer
 * with n > 0). dst and src must not overlap unless they are the same pointer and the dtypes have the
 * same size. Uses the fastest SIMD path this CPU has (see amp/cpu.h); every path gives the same bits. */
int amp_convert(void *dst, amp_dtype dst_dtype, const void *src, amp_dtype src_dtype, size_t n);

/* As amp_convert, but encoding saturates: out-of-range values and infinities become +-max finite of
 * dst_dtype (the *_sat encoders above). With dst_dtype AMP_F32 it is the same as amp_convert. */
int amp_convert_sat(void *dst, amp_dtype dst_dtype, const void *src, amp_dtype src_dtype, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* AMP_FORMATS_H */
