/* Block scaling (DeepSeek-V3; TE Float8BlockScaling): one power-of-2 fp32 scale per 1x128 tile,
 * 128x1 tile or 128x128 block of a row-major matrix. A tile's amax skips NaNs (TE's block kernels
 * take fmaxf); tiles at the right and bottom edges hold fewer values and their amax is over those.
 *
 * The matrix is walked in bands of tile-height rows: 1x128 and 128x128 tiles one at a time (the
 * amax of its rows, one scale, its rows through the fused encode with statistics); 128x1 tiles in
 * panels of 512 columns (the column maxima down the band, a scale per column, each row segment
 * through the fused encode with the per-column multipliers). 1x128 tiles of rows that are whole
 * tiles are one run of tiles: their maxima and scales a chunk at a time, one encode per chunk. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "amp/fp8.h"
#include "amp/status.h"
#include "../core/float_bits.h"
#include "../kernels/convert_kernels.h"
#include "../kernels/fp8_kernels.h"
#include "fp8_internal.h"

enum { TILE = AMP_FP8_BLOCK_TILE, PANEL = 4 * AMP_FP8_BLOCK_TILE /* 128x1: columns per pass */ };

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

/* 1x128 and 128x128: one scale per chunk of th rows by tw columns; its rows go through the fused
 * encode. rmax: NULL, or the rows' maxima over the chunk (rmax[r * ld_rmax], NaN: taken again). Returns
 * the chunk's amax. */
static float quantize_tile(uint8_t *dst, float *inv, const float *src, size_t cols, size_t th, size_t tw,
                           amp_dtype fp8, const float *rmax, size_t ld_rmax, amp_fp8_cast_tally *t) {
    const amp_fp8_kernels *fk = amp_fp8_kernels_active();
    float amax = 0.0f;
    for (size_t r = 0; r < th; r++) {
        const float a = rmax && !isnan(rmax[r * ld_rmax]) ? rmax[r * ld_rmax] : fk->amax(src + r * cols, tw, NULL);
        if (a > amax) amax = a;
    }
    float scale, stats[3] = {t->scale_min, t->scale_max, 0.0f};
    fk->block_scales(&scale, inv, &amax, 1, amp_fp8_max_finite(fp8), stats);
    t->scale_min = stats[0], t->scale_max = stats[1];
    for (size_t r = 0; r < th; r++) fk->encode_stats[fp8](dst + r * cols, src + r * cols, tw, scale, NULL, 1, t->counts);
    return amax;
}

/* 128x1: a panel of th rows by tw columns (row stride ld), one scale per column (scale: tw floats of
 * room); each row segment is encoded with its columns' scales. cmax: NULL, or the columns' maxima
 * (a NaN among them: all taken again). Returns the panel's amax. */
static float quantize_panel_columns(uint8_t *dst, float *inv, float *scale, const float *src, size_t ld, size_t th,
                                    size_t tw, amp_dtype fp8, const float *cmax, amp_fp8_cast_tally *t) {
    const amp_fp8_kernels *fk = amp_fp8_kernels_active();
    bool nan = !cmax;
    for (size_t j = 0; cmax && j < tw; j++) scale[j] = cmax[j], nan |= isnan(scale[j]);
    if (nan) { /* the amaxes (NaNs skipped), replaced by the scales below */
        for (size_t j = 0; j < tw; j++) scale[j] = 0.0f;
        (void)fk->col_amax(scale, src, th, tw, ld);
    }
    float stats[3] = {t->scale_min, t->scale_max, 0.0f};
    fk->block_scales(scale, inv, scale, tw, amp_fp8_max_finite(fp8), stats); /* the amaxes become the scales */
    t->scale_min = stats[0], t->scale_max = stats[1];
    for (size_t r = 0; r < th; r++) fk->encode_stats[fp8](dst + r * ld, src + r * ld, tw, 0.0f, scale, 1, t->counts);
    return stats[2];
}

enum { ROW_CHUNK = 64 }; /* 1x128: tiles per pass */

/* 1x128 over whole rows (cols a multiple of 128: the tiles are consecutive runs of 128 values): the
 * tiles' maxima ROW_CHUNK at a time (block_amax propagates a NaN: such a tile's amax is taken again,
 * NaNs skipped), a scale per tile, and the run through one fused encode with the per-tile
 * multipliers. The same scales, bytes and statistics as a tile at a time. Returns the amax. */
static float quantize_rows_1x128(uint8_t *dst, float *inv, const float *src, size_t tiles_total, amp_dtype fp8,
                                 const float *tmax, amp_fp8_cast_tally *t) {
    const amp_fp8_kernels *fk = amp_fp8_kernels_active();
    float bmax[ROW_CHUNK], scale[ROW_CHUNK], stats[3] = {t->scale_min, t->scale_max, 0.0f};
    for (size_t t0 = 0; t0 < tiles_total; t0 += ROW_CHUNK) {
        const size_t nt = tiles_total - t0 < ROW_CHUNK ? tiles_total - t0 : ROW_CHUNK;
        const float *x = src + t0 * TILE;
        if (tmax) memcpy(bmax, tmax + t0, nt * sizeof(float));
        else fk->block_amax(bmax, x, nt, TILE);
        for (size_t b = 0; b < nt; b++)
            if (isnan(bmax[b])) bmax[b] = fk->amax(x + b * TILE, TILE, NULL);
        fk->block_scales(scale, inv + t0, bmax, nt, amp_fp8_max_finite(fp8), stats);
        fk->encode_stats[fp8](dst + t0 * TILE, x, nt * TILE, 0.0f, scale, TILE, t->counts);
    }
    t->scale_min = stats[0], t->scale_max = stats[1];
    return stats[2];
}

void amp_fp8_block_quantize_tally(void *dst, float *scale_inv, const float *src, size_t rows, size_t cols,
                                  amp_dtype fp8, amp_fp8_block_shape shape, const float *maxima,
                                  amp_fp8_cast_tally *t, float *amax) {
    if (shape == AMP_FP8_BLOCK_1X128 && cols % TILE == 0) {
        *amax = quantize_rows_1x128(dst, scale_inv, src, rows * (cols / TILE), fp8, maxima, t);
        return;
    }
    const float *rmax = maxima && shape != AMP_FP8_BLOCK_128X1 && cols % TILE == 0 ? maxima : NULL;
    const size_t th_full = tile_rows(shape), per_row = shape == AMP_FP8_BLOCK_128X1 ? cols : tiles(cols);
    float m = 0.0f, scale[PANEL];
    for (size_t r0 = 0; r0 < rows; r0 += th_full) {
        const size_t th = rows - r0 < th_full ? rows - r0 : th_full;
        float *inv = scale_inv + (r0 / th_full) * per_row;
        uint8_t *d = (uint8_t *)dst + r0 * cols;
        const float *x = src + r0 * cols;
        const size_t step = shape == AMP_FP8_BLOCK_128X1 ? PANEL : TILE;
        for (size_t c0 = 0; c0 < cols; c0 += step) {
            const size_t tw = cols - c0 < step ? cols - c0 : step;
            const float a = shape == AMP_FP8_BLOCK_128X1
                                ? quantize_panel_columns(d + c0, inv + c0, scale, x + c0, cols, th, tw, fp8,
                                                         maxima && rows <= TILE ? maxima + c0 : NULL, t)
                                : quantize_tile(d + c0, inv + c0 / TILE, x + c0, cols, th, tw, fp8,
                                                rmax ? rmax + r0 * (cols / TILE) + c0 / TILE : NULL, cols / TILE, t);
            if (a > m) m = a;
        }
    }
    *amax = m;
}

int amp_fp8_block_quantize(void *dst, float *scale_inv, const float *src, size_t rows, size_t cols,
                           amp_dtype fp8, amp_fp8_block_shape shape) {
    const int st = check_block(dst, scale_inv, src, rows, cols, fp8, shape);
    if (st != AMP_OK || rows * cols == 0) return st;
    amp_fp8_cast_tally t = AMP_FP8_CAST_TALLY_INIT;
    float amax;
    amp_fp8_block_quantize_tally(dst, scale_inv, src, rows, cols, fp8, shape, NULL, &t, &amax);
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
