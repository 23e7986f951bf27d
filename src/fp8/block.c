/* Block scaling (DeepSeek-V3; TE Float8BlockScaling): one power-of-2 fp32 scale per 1x128 tile,
 * 128x1 tile or 128x128 block of a row-major matrix. A tile's amax skips NaNs (TE's block kernels
 * take fmaxf); tiles at the right and bottom edges hold fewer values and their amax is over those.
 *
 * The matrix is walked in bands of tile-height rows and chunks of 128 columns: a chunk holds one
 * tile (1x128, 128x128) or 128 of them (128x1, one per column). A chunk with one scale goes through
 * the fused scaled encode (fp8_internal.h); a 128x1 chunk multiplies each value by its column's scale
 * in an L1 stage before the saturating encode kernel. */
#include <math.h>
#include <stdint.h>

#include "amp/fp8.h"
#include "amp/status.h"
#include "../kernels/convert_kernels.h"
#include "fp8_internal.h"

enum { TILE = AMP_FP8_BLOCK_TILE };

static size_t tiles(size_t len) { return len / TILE + (len % TILE != 0); }
static size_t tile_rows(amp_fp8_block_shape s) { return s == AMP_FP8_BLOCK_1X128 ? 1 : TILE; }

size_t amp_fp8_block_scale_count(size_t rows, size_t cols, amp_fp8_block_shape shape) {
    switch (shape) {
    case AMP_FP8_BLOCK_1X128: return rows * tiles(cols);
    case AMP_FP8_BLOCK_128X128: return tiles(rows) * tiles(cols);
    case AMP_FP8_BLOCK_128X1: return tiles(rows) * cols;
    default: return 0;
    }
}

static int check_block(const void *a, const void *b, const void *c, size_t rows, size_t cols,
                       amp_dtype fp8, amp_fp8_block_shape shape) {
    if (!amp_fp8_dtype_ok(fp8)) return AMP_ERR_UNSUPPORTED_DTYPE;
    if ((unsigned)shape > AMP_FP8_BLOCK_128X1) return AMP_ERR_INVALID_ARGUMENT;
    if (cols != 0 && rows > SIZE_MAX / cols) return AMP_ERR_INVALID_ARGUMENT;
    if (rows * cols > 0 && (!a || !b || !c)) return AMP_ERR_NULL_POINTER;
    return AMP_OK;
}

/* The amaxes of the chunk (rows r0 .. r0+th, columns c0 .. c0+tw): one per column for 128x1, else
 * one, copied to every column. */
static void chunk_amax(float amax[TILE], const float *src, size_t cols, size_t r0, size_t th, size_t c0,
                       size_t tw, amp_fp8_block_shape shape) {
    for (size_t j = 0; j < tw; j++) amax[j] = 0.0f;
    for (size_t r = r0; r < r0 + th; r++) {
        const float *x = src + r * cols + c0;
        if (shape == AMP_FP8_BLOCK_128X1) {
            for (size_t j = 0; j < tw; j++) {
                const float a = fabsf(x[j]);
                if (a > amax[j]) amax[j] = a; /* false for NaN: skipped */
            }
        } else {
            const float a = amp_fp8_amax_skip_nan(x, tw, NULL);
            if (a > amax[0]) amax[0] = a;
        }
    }
    if (shape != AMP_FP8_BLOCK_128X1)
        for (size_t j = 1; j < tw; j++) amax[j] = amax[0];
}

int amp_fp8_block_quantize(void *dst, float *scale_inv, const float *src, size_t rows, size_t cols,
                           amp_dtype fp8, amp_fp8_block_shape shape) {
    const int st = check_block(dst, scale_inv, src, rows, cols, fp8, shape);
    if (st != AMP_OK || rows * cols == 0) return st;
    const amp_encode_kernel encode = amp_convert_kernels_for(amp_isa_active())->encode[fp8][1];
    const size_t th_full = tile_rows(shape), per_row = shape == AMP_FP8_BLOCK_128X1 ? cols : tiles(cols);
    float amax[TILE], scale[TILE], stage[TILE];
    for (size_t r0 = 0; r0 < rows; r0 += th_full) {
        const size_t th = rows - r0 < th_full ? rows - r0 : th_full;
        for (size_t c0 = 0; c0 < cols; c0 += TILE) {
            const size_t tw = cols - c0 < TILE ? cols - c0 : TILE;
            chunk_amax(amax, src, cols, r0, th, c0, tw, shape);
            for (size_t j = 0; j < tw; j++) scale[j] = amp_fp8_current_scale(amax[j], fp8, 0.0f, true);
            /* 1 / scale is exact: scale is a power of 2 in [2^-126, 2^127] */
            float *inv = scale_inv + (r0 / th_full) * per_row;
            if (shape == AMP_FP8_BLOCK_128X1)
                for (size_t j = 0; j < tw; j++) inv[c0 + j] = 1.0f / scale[j];
            else
                inv[c0 / TILE] = 1.0f / scale[0];
            for (size_t r = r0; r < r0 + th; r++) {
                const float *x = src + r * cols + c0;
                if (shape != AMP_FP8_BLOCK_128X1) { /* one scale for the chunk: the fused kernel */
                    amp_fp8_scaled_encode((uint8_t *)dst + r * cols + c0, fp8, x, tw, scale[0]);
                    continue;
                }
                for (size_t j = 0; j < tw; j++) stage[j] = x[j] * scale[j];
                encode((uint8_t *)dst + r * cols + c0, stage, tw);
            }
        }
    }
    return AMP_OK;
}

int amp_fp8_block_dequantize(float *dst, const void *src, const float *scale_inv, size_t rows,
                             size_t cols, amp_dtype fp8, amp_fp8_block_shape shape) {
    const int st = check_block(dst, src, scale_inv, rows, cols, fp8, shape);
    if (st != AMP_OK || rows * cols == 0) return st;
    const amp_decode_kernel decode = amp_convert_kernels_for(amp_isa_active())->decode[fp8];
    const size_t th = tile_rows(shape), per_row = shape == AMP_FP8_BLOCK_128X1 ? cols : tiles(cols);
    for (size_t r = 0; r < rows; r++) {
        float *y = dst + r * cols;
        const float *inv = scale_inv + (r / th) * per_row;
        decode(y, (const uint8_t *)src + r * cols, cols);
        if (shape == AMP_FP8_BLOCK_128X1)
            for (size_t c = 0; c < cols; c++) y[c] *= inv[c];
        else
            for (size_t c = 0; c < cols; c++) y[c] *= inv[c / TILE];
    }
    return AMP_OK;
}
