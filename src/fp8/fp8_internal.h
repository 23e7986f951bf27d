/* Internal: what the fp8 recipes share: the fp8 dtypes' limits and the scaled casts, which run
 * through the active path's conversion kernels (kernels/convert_kernels.h) so that every rounding is
 * the library's one exact encoder.
 *
 * The scaled encode and the amax are the fp8 kernel family's (kernels/fp8_kernels.h): the multiply
 * and the encode fused in registers, one pass, with the bits of the staged multiply-then-encode. */
#ifndef AMP_FP8_INTERNAL_H
#define AMP_FP8_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "amp/dtype.h"

static inline bool amp_fp8_dtype_ok(amp_dtype d) { return d == AMP_F8E4M3 || d == AMP_F8E5M2; }

/* The largest finite value of an fp8 dtype: 448 or 57344 (exact in fp32). */
static inline float amp_fp8_max_finite(amp_dtype d) { return d == AMP_F8E4M3 ? 448.0f : 57344.0f; }

/* dst[i] = saturating fp8(src[i] * scale), the product one fp32 multiplication. */
void amp_fp8_scaled_encode(void *dst, amp_dtype fp8, const float *src, size_t n, float scale);
/* dst[i] = decode(src[i]) * scale_inv in fp32. */
void amp_fp8_scaled_decode(float *dst, amp_dtype fp8, const void *src, size_t n, float scale_inv);
/* The largest |src[i]|, NaNs skipped (fmaxf); *saw_nan set when one was seen. 0 for n == 0. */
float amp_fp8_amax_skip_nan(const float *src, size_t n, bool *saw_nan);

#endif
