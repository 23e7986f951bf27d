/* Internal: what the fp8 recipes share: the fp8 dtypes' limits and the scaled casts, which run
 * through the active path's conversion kernels (kernels/convert_kernels.h) so that every rounding is
 * the library's one exact encoder.
 *
 * The scaled encode and the amax are the fp8 kernel family's (kernels/fp8_kernels.h): the multiply
 * and the encode fused in registers, one pass, with the bits of the staged multiply-then-encode. */
#ifndef AMP_FP8_INTERNAL_H
#define AMP_FP8_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/dtype.h"
#include "amp/fp8.h"

static inline bool amp_fp8_dtype_ok(amp_dtype d) { return d == AMP_F8E4M3 || d == AMP_F8E5M2; }

/* The largest finite value of an fp8 dtype: 448 or 57344 (exact in fp32). */
static inline float amp_fp8_max_finite(amp_dtype d) { return d == AMP_F8E4M3 ? 448.0f : 57344.0f; }

/* dst[i] = saturating fp8(src[i] * scale), the product one fp32 multiplication. */
void amp_fp8_scaled_encode(void *dst, amp_dtype fp8, const float *src, size_t n, float scale);
/* What casts add to a tensor's statistics (amp_fp8_cast_stats): the saturated and flushed counts
 * (fp8_kernels.h encode_stats: counts[0], counts[1]) and the smallest and largest scale used (start at
 * INFINITY and 0; a NaN scale, MXFP8's NaN block, is skipped). */
typedef struct amp_fp8_cast_tally {
    int64_t counts[2];
    float scale_min, scale_max;
} amp_fp8_cast_tally;
#define AMP_FP8_CAST_TALLY_INIT {{0, 0}, INFINITY, 0.0f}

/* amp_fp8_scaled_encode with the statistics of the one scale (long arrays split between threads). */
void amp_fp8_scaled_encode_tally(void *dst, amp_dtype fp8, const float *src, size_t n, float scale,
                                 amp_fp8_cast_tally *t);
/* amp_fp8_block_quantize (arguments checked by the caller) adding its counts and block scales to t,
 * and returning the largest |value| (NaNs skipped) in *amax. maxima: NULL, or src's maxima as the fp8
 * kernels' decode_band_bf16 gives them with tiles of 128 (a NaN where the values hold one), which the
 * cast then takes instead of its own: for 1x128 and 128x128 tiles the rows' tile maxima (cols a multiple
 * of 128), for 128x1 tiles the column maxima (rows <= 128). The same bits either way. */
void amp_fp8_block_quantize_tally(void *dst, float *scale_inv, const float *src, size_t rows, size_t cols,
                                  amp_dtype fp8, amp_fp8_block_shape shape, const float *maxima,
                                  amp_fp8_cast_tally *t, float *amax);
/* amp_mx_quantize (arguments checked by the caller) writing the scales as E8M0 bytes (scales_e8m0, or
 * NULL) and/or as the fp32 factors of the fp8 GEMM (scale_inv: 2^(byte-127), NaN for byte 0xFF, 1 for
 * a block of +-0 values only, whose byte is 0 and whose payloads decode to +-0 either way; or NULL),
 * adding its counts and
 * block scales to t, the largest |value| (NaNs skipped) into *amax (kept where larger). bmax: NULL, or
 * the blocks' maxima (a NaN for a block holding one: block_amax's, or decode_band_bf16's with tiles of
 * 32), taken instead of its own. */
void amp_mx_quantize_tally(void *dst, uint8_t *scales_e8m0, float *scale_inv, const float *src, size_t n,
                           amp_dtype elem, amp_mx_scale_mode mode, const float *bmax, amp_fp8_cast_tally *t,
                           float *amax);
/* The same for the columns of src (row-major [rows, cols]), blocks of 32 values down each column, kept
 * in src's layout: out holds rows rounded up to 32 rows of cols bytes (the padding rows are fp8
 * zeros, or a NaN block's payloads of 0 in a column's NaN block), scale_inv[b * cols + j] the GEMM factor
 * of column j's block b (as amp_mx_quantize_tally's). Panels of 32 source rows by up to 256 columns: column maxima, a multiplier per
 * column, each row through the fused encode. cmax: NULL, or the column maxima (rows <= 32; a NaN for a
 * column holding one, as decode_band_bf16 gives them), taken instead of its own. */
void amp_mx_quantize_columns_tally(uint8_t *out, float *scale_inv, const float *src, size_t rows, size_t cols,
                                   amp_dtype elem, amp_mx_scale_mode mode, const float *cmax, amp_fp8_cast_tally *t,
                                   float *amax);

/* dst[i] = decode(src[i]) * scale_inv in fp32. */
void amp_fp8_scaled_decode(float *dst, amp_dtype fp8, const void *src, size_t n, float scale_inv);
/* The largest |src[i]|, NaNs skipped (fmaxf); *saw_nan set when one was seen. 0 for n == 0. */
float amp_fp8_amax_skip_nan(const float *src, size_t n, bool *saw_nan);

/* The scale the amax init would give the delayed-scaling state from amax (amp_fp8_delayed_init),
 * the state unchanged: evaluation's casts before the first training step. */
float amp_fp8_delayed_init_scale(const amp_fp8_delayed *state, float amax);

#endif
