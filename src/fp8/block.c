/* Block scaling (DeepSeek-V3; TE Float8BlockScaling): one power-of-2 fp32 scale per 1x128 tile or
 * 128x128 block of a row-major matrix. A tile's amax skips NaNs (TE's block kernels take fmaxf);
 * tiles at the right and bottom edges hold fewer values and their amax is over those. */
#include <stdint.h>

#include "amp/fp8.h"
#include "amp/status.h"
#include "fp8_internal.h"

enum { TILE = AMP_FP8_BLOCK_TILE };

static size_t tiles(size_t len) { return len / TILE + (len % TILE != 0); }

size_t amp_fp8_block_scale_count(size_t rows, size_t cols, amp_fp8_block_shape shape) {
    switch (shape) {
    case AMP_FP8_BLOCK_1X128: return rows * tiles(cols);
    case AMP_FP8_BLOCK_128X128: return tiles(rows) * tiles(cols);
    default: return 0;
    }
}

static int check_block(const void *a, const void *b, const void *c, size_t rows, size_t cols,
                       amp_dtype fp8, amp_fp8_block_shape shape) {
    if (!amp_fp8_dtype_ok(fp8)) return AMP_ERR_UNSUPPORTED_DTYPE;
    if ((unsigned)shape > AMP_FP8_BLOCK_128X128) return AMP_ERR_INVALID_ARGUMENT;
    if (cols != 0 && rows > SIZE_MAX / cols) return AMP_ERR_INVALID_ARGUMENT;
    if (rows * cols > 0 && (!a || !b || !c)) return AMP_ERR_NULL_POINTER;
    return AMP_OK;
}

/* The tile (r0, c0) of height th and width tw: its amax, then its cast. */
static float tile_scale_inv(void *dst, const float *src, size_t cols, size_t r0, size_t c0, size_t th,
                            size_t tw, amp_dtype fp8) {
    float amax = 0.0f;
    for (size_t r = r0; r < r0 + th; r++) {
        const float a = amp_fp8_amax_skip_nan(src + r * cols + c0, tw, NULL);
        if (a > amax) amax = a;
    }
    const float scale = amp_fp8_current_scale(amax, fp8, 0.0f, true);
    for (size_t r = r0; r < r0 + th; r++)
        amp_fp8_scaled_encode((uint8_t *)dst + r * cols + c0, fp8, src + r * cols + c0, tw, scale);
    return 1.0f / scale; /* exact: scale is a power of 2 in [2^-126, 2^127] */
}

int amp_fp8_block_quantize(void *dst, float *scale_inv, const float *src, size_t rows, size_t cols,
                           amp_dtype fp8, amp_fp8_block_shape shape) {
    const int st = check_block(dst, scale_inv, src, rows, cols, fp8, shape);
    if (st != AMP_OK) return st;
    const size_t th_full = shape == AMP_FP8_BLOCK_1X128 ? 1 : TILE;
    size_t k = 0;
    for (size_t r0 = 0; r0 < rows; r0 += th_full) {
        const size_t th = rows - r0 < th_full ? rows - r0 : th_full;
        for (size_t c0 = 0; c0 < cols; c0 += TILE) {
            const size_t tw = cols - c0 < TILE ? cols - c0 : TILE;
            scale_inv[k++] = tile_scale_inv(dst, src, cols, r0, c0, th, tw, fp8);
        }
    }
    return AMP_OK;
}

int amp_fp8_block_dequantize(float *dst, const void *src, const float *scale_inv, size_t rows,
                             size_t cols, amp_dtype fp8, amp_fp8_block_shape shape) {
    const int st = check_block(dst, src, scale_inv, rows, cols, fp8, shape);
    if (st != AMP_OK) return st;
    const size_t th_full = shape == AMP_FP8_BLOCK_1X128 ? 1 : TILE, ct = tiles(cols);
    for (size_t r = 0; r < rows; r++)
        for (size_t c0 = 0; c0 < cols; c0 += TILE) {
            const size_t tw = cols - c0 < TILE ? cols - c0 : TILE;
            const float s = scale_inv[(r / th_full) * ct + c0 / TILE];
            amp_fp8_scaled_decode(dst + r * cols + c0, fp8, (const uint8_t *)src + r * cols + c0, tw, s);
        }
    return AMP_OK;
}
