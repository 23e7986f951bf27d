/* Internal: the fp8 kernels, one table per SIMD path: the decode of stored operands into the GEMM's
 * packing (amp_gemm_fp8, src/gemm/gemm_fp8.c) and the scaled casts of the fp8 recipes (src/fp8/).
 *
 * Every path gives the bits of the reference kernels (ref/fp8_ref.c) for every input, with one
 * exception: the payload of a NaN that decode_row writes is unspecified (it is a NaN). The reference
 * path fills every entry; a SIMD path overrides what it accelerates. */
#ifndef AMP_FP8_KERNELS_H
#define AMP_FP8_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/cpu.h"
#include "amp/dtype.h"
#include "amp/fp8.h"

/* Decodes n stored elements of the entry's dtype (src) to fp32 and multiplies each by its factor, one
 * fp32 multiplication: element j's factor is factors[0] for j < lead, then factors[1 + (j - lead) /
 * block] (blocks of `block` elements along the row, the first one entered `block - lead` elements
 * in); factors NULL: no multiplication. dst is fp32 (out entry 0) or bf16 (out entry 1: the top half
 * of that fp32 value, exact where the value is exact in bf16, which is what the bf16 GEMM route
 * requires). lead >= 1 and block >= 1 when factors is not NULL. */
typedef void (*amp_fp8_decode_row_fn)(void *dst, const void *src, size_t n, const float *factors, size_t lead,
                                      size_t block);

/* The bf16-pairs panels (gemm_kernels.h) of an fp8 matrix M whose columns are stored rows: src0 and
 * src1 are stored rows 2q and 2q+1 from M's row i0 on (src1 NULL: the zero pad of an odd k), n values
 * each; they go to ceil(n / r) panels of r rows, panel t's pairs at dst + t * panel_stride:
 * dst[t * panel_stride + 2 i + 0 / 1] for i < r, the decoded src0 / src1 value of M's row t r + i, 0
 * past n. adds: NULL, or per value j (both rows) e_j << 7 for a factor 2^e_j that keeps every fp8
 * value times it a normal bf16 (e_j in [-117, 119] for e4m3, [-110, 111] for e5m2), multiplied in.
 * The results are exact; a NaN is a NaN. */
typedef void (*amp_fp8_decode_pairs_fn)(uint16_t *dst, size_t panel_stride, const uint8_t *src0, const uint8_t *src1,
                                        const int16_t *adds, size_t n, int r);

/* One bf16-pairs panel (gemm_kernels.h) of an fp8 matrix M whose rows are stored rows: row i < ri of
 * M is the kc values at src + i * ld; dst[(p / 2) * 2r + 2i + p % 2] = the decoded value of M[i, p],
 * 0 for the rows ri..r-1 (r <= 32) and the pad of an odd kc. adds: NULL, or adds[i * ld_adds + p / 32]
 * = e << 7 for the factor 2^e of values p / 32 * 32 .. + 31 of row i (the range of decode_pairs'
 * adds), multiplied in. The results are exact; a NaN is a NaN. */
typedef void (*amp_fp8_decode_panel_fn)(uint16_t *dst, const uint8_t *src, size_t ld, const int16_t *adds,
                                        size_t ld_adds, size_t ri, size_t kc, int r);

/* The largest |src[i]|, NaNs skipped (fmaxf), 0 for n == 0; *saw_nan (not NULL) says whether there
 * was a NaN. amp_fp8_amax's definition (amp/fp8.h). */
typedef float (*amp_fp8_amax_fn)(const float *src, size_t n, bool *saw_nan);

/* dst[i] = the saturating fp8 encoding of src[i] * scale (one fp32 multiplication, then the exact
 * round-to-nearest-even encode with saturation, NaN to the canonical NaN of amp/formats.h). */
typedef void (*amp_fp8_scaled_encode_fn)(uint8_t *dst, const float *src, size_t n, float scale);

/* The largest |x| of each of nblocks blocks of `block` consecutive values, NaN where a block holds a
 * NaN (torch.amax's rule, which MXFP8's scale follows): out[b] for src[b * block .. (b + 1) * block). */
typedef void (*amp_fp8_block_amax_fn)(float *out, const float *src, size_t nblocks, size_t block);

/* scaled_encode's bytes with the cast's statistics, in one pass: dst[i] = the saturating fp8 encoding
 * of src[i] * m_i, where m_i = scale (scales NULL) or scales[i / block] (one fp32 multiplication
 * either way; block is 1 or a multiple of 16), and counts[0] += the finite nonzero src[i] with
 * |src[i] * m_i| > the dtype's largest finite value (saturated), counts[1] += the finite nonzero
 * src[i] whose byte is +-0 (flushed). */
typedef void (*amp_fp8_encode_stats_fn)(uint8_t *dst, const float *src, size_t n, float scale, const float *scales,
                                        size_t block, int64_t counts[2]);

/* amax[j] = the largest of amax[j] and |src[r * ld + j]| for r < rows, NaNs skipped (fmaxf), j < cols:
 * the column maxima of a row-major panel (block scaling's 128x1 tiles, MX's 32x1 blocks). Returns
 * whether one of those values was a NaN. */
typedef bool (*amp_fp8_col_amax_fn)(float *amax, const float *src, size_t rows, size_t cols, size_t ld);

/* Block scaling's scales from n tiles' amaxes (none a NaN: NaNs skipped), for an fp8 dtype whose
 * largest finite value is maxf: scale[b] = amp_fp8_current_scale(amax[b], dtype, 0, true) (maxf /
 * amax rounded down to a power of 2, 2^127 where the quotient is infinite, 1 for an amax of 0 or
 * inf), inv[b] = 1 / scale[b] (exact). stats[0] and stats[1] become the smallest and largest of
 * themselves and the scales, stats[2] the largest of itself and the amaxes. scale may be amax (in
 * place). */
typedef void (*amp_fp8_block_scales_fn)(float *scale, float *inv, const float *amax, size_t n, float maxf,
                                        float stats[3]);

/* A band of a row-major bf16 matrix [rows, cols] decoded to fp32 with the block maxima its MXFP8 or
 * block-scaled casts take, in one pass over src (cols a multiple of tile, tile 32 or 128):
 * dst[r * cols + j] = the fp32 value of src[r * cols + j] (exact); tmax[r * (cols / tile) + t] = the
 * largest |x| of row r's values t * tile .. (t + 1) * tile - 1 (MX's 1x32 blocks, block scaling's 1x128
 * tiles); cmax[j] = the largest |x| of column j down the rows (MX's 32x1 blocks, block scaling's 128x1
 * tiles, where rows is the block's height). A maximum over values holding a NaN is a NaN (block_amax's
 * rule; which NaN is unspecified). */
typedef void (*amp_fp8_decode_band_fn)(float *dst, const uint16_t *src, size_t rows, size_t cols, size_t tile,
                                       float *tmax, float *cmax);

/* adds[j] = e_j << 7 (two's complement in 16 bits) for each factor f[j] = 2^e_j, j < n, where every one
 * keeps each value of fp8 dtype dt times it a normal bf16: a power of 2 with e_j in [-117, 119] for
 * e4m3, [-110, 111] for e5m2 (decode_pairs' and decode_panel's adds). Returns false, adds[] then
 * unspecified, where a factor is not one (not a power of 2, out of that range, negative, 0, inf, NaN). */
typedef bool (*amp_fp8_factor_adds_fn)(int16_t *adds, const float *f, size_t n, amp_dtype dt);

/* The range of e above for fp8 dtype dt: 2^-9 .. 448 (e4m3) and 2^-16 .. 57344 (e5m2) times 2^e stay
 * normal and finite in bf16. */
static inline int amp_fp8_add_exp_min(amp_dtype dt) { return dt == AMP_F8E4M3 ? -117 : -110; }
static inline int amp_fp8_add_exp_max(amp_dtype dt) { return dt == AMP_F8E4M3 ? 119 : 111; }

/* MXFP8's per-block bookkeeping from the n blocks' amaxes (block_amax's or col_amax's: |x| maxima, NaN
 * for a block holding a NaN), blocks of fp8 dtype elem under scale rule mode (amp/fp8.h):
 * bytes[b] = the block's E8M0 byte (0xFF for a NaN amax); mult[b] = 2^(127 - byte), the encode's
 * multiplier (unspecified for 0xFF); factor[b] (factor NULL: not written) = the fp8 GEMM's factor:
 * 2^(byte - 127), NaN for 0xFF, and 1 for an amax of +-0 (a block of zeros: byte 0, whose 2^-127 would
 * be an fp32 subnormal; its payloads are +-0 either way). Over the blocks whose byte is not 0xFF,
 * stats[0] and stats[1] become the smallest and largest of themselves and the mults, stats[2] the
 * largest of itself and the amaxes. Returns whether a byte is 0xFF. mult may be amax (in place). */
typedef bool (*amp_fp8_mx_scales_fn)(uint8_t *bytes, float *mult, float *factor, const float *amax, size_t n,
                                     amp_dtype elem, amp_mx_scale_mode mode, float stats[3]);

typedef struct amp_fp8_kernels {
    amp_fp8_decode_row_fn decode_row[AMP_DTYPE_COUNT][2]; /* [AMP_F32, AMP_BF16, AMP_F8E4M3, AMP_F8E5M2][out] */
    amp_fp8_decode_pairs_fn decode_pairs[AMP_DTYPE_COUNT]; /* [AMP_F8E4M3, AMP_F8E5M2] */
    amp_fp8_decode_panel_fn decode_panel[AMP_DTYPE_COUNT]; /* [AMP_F8E4M3, AMP_F8E5M2] */
    amp_fp8_amax_fn amax;
    amp_fp8_scaled_encode_fn scaled_encode[AMP_DTYPE_COUNT]; /* [AMP_F8E4M3, AMP_F8E5M2] */
    amp_fp8_block_amax_fn block_amax;
    amp_fp8_encode_stats_fn encode_stats[AMP_DTYPE_COUNT]; /* [AMP_F8E4M3, AMP_F8E5M2] */
    amp_fp8_col_amax_fn col_amax;
    amp_fp8_factor_adds_fn factor_adds;
    amp_fp8_mx_scales_fn mx_scales;
    amp_fp8_decode_band_fn decode_band_bf16;
    amp_fp8_block_scales_fn block_scales;
} amp_fp8_kernels;

void amp_fp8_kernels_ref(amp_fp8_kernels *k);
#if defined(__x86_64__)
void amp_fp8_kernels_avx2(amp_fp8_kernels *k);
void amp_fp8_kernels_avx512(amp_fp8_kernels *k);
#endif

/* The kernels for `isa` (any value: a path this CPU lacks gets the reference's). */
const amp_fp8_kernels *amp_fp8_kernels_for(amp_isa isa);
static inline const amp_fp8_kernels *amp_fp8_kernels_active(void) { return amp_fp8_kernels_for(amp_isa_active()); }

#endif /* AMP_FP8_KERNELS_H */
