/* AVX-512 (F, VL, BW) versions of max pooling's kernel 2, stride 2 rows and whole tensors
 * (kernels/pool_kernels.h): the same picks and bits as the reference (src/kernels/ref/pool_ref.c).
 * The whole-tensor loops sit here so that the row kernels inline into them. */
#include <immintrin.h>
#include <string.h>

#include "../pool_kernels.h"
#include "pool_avx2.h"

/* The AVX2 row (pool_avx2.c) with the tail as AVX-512 masked loads and stores, which are not
 * microcoded (AVX2's maskload and maskstore are, on AMD: the cnn's rows are 14 and 7 windows, so
 * every row has a tail). */
static void max_pool_row_k2_avx512(const float *r0, const float *r1, int64_t ow, float *y, uint8_t *offsets) {
    const int64_t ox = max_pool_k2_blocks(r0, r1, ow, y, offsets);
    __m256 m;
    __m256i k;
    if (ox < ow) {
        const int n = (int)(ow - ox); /* 1..7 windows, 2n input elements per row */
        const __mmask8 lo = (__mmask8)(n >= 4 ? 0xFFu : (1u << (2 * n)) - 1u);
        const __mmask8 hi = (__mmask8)(n <= 4 ? 0u : (1u << (2 * n - 8)) - 1u), out = (__mmask8)((1u << n) - 1u);
        max_pool_k2_x8(_mm256_maskz_loadu_ps(lo, r0 + 2 * ox), _mm256_maskz_loadu_ps(hi, r0 + 2 * ox + 8),
                       _mm256_maskz_loadu_ps(lo, r1 + 2 * ox), _mm256_maskz_loadu_ps(hi, r1 + 2 * ox + 8), &m, &k);
        _mm256_mask_storeu_ps(y + ox, out, m);
        _mm_mask_storeu_epi8(offsets + ox, (__mmask16)out, offsets_to_bytes(k));
    }
}

/* Every output row of an fp32 tensor (rows in place, h even or not) through max_pool_row_k2_avx512. */
void amp_max_pool_rows_k2_avx512(const float *xs, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                                 float *ys, uint8_t *offsets) {
    for (int64_t p = 0; p < planes; p++)
        for (int64_t oy = 0; oy < oh; oy++) {
            const float *r0 = xs + (p * h + 2 * oy) * w;
            const int64_t o0 = (p * oh + oy) * ow;
            max_pool_row_k2_avx512(r0, r0 + w, ow, ys + o0, offsets + o0);
        }
}

/* The AVX2 backward row with the tail of up to 7 windows as one more vector under masks (AVX-512's
 * masked loads and stores are not microcoded), where AVX2 takes the scalar tail: the cnn's second
 * pool has 7 windows per row, all of them in the tail. */
void amp_max_pool_backward_row_k2_avx512(const float *g, const uint8_t *offsets, int64_t ow, float *d0, float *d1) {
    const int64_t ox = max_pool_backward_k2_blocks(g, offsets, ow, d0, d1);
    __m256 a, b, c, d;
    if (ox < ow) {
        const int rest = (int)(ow - ox); /* 1..7 windows: 2 * rest outputs per row */
        const __mmask8 kg = (__mmask8)((1u << rest) - 1u);
        const __mmask8 klo = (__mmask8)(rest >= 4 ? 0xFFu : (1u << (2 * rest)) - 1u);
        const __mmask8 khi = (__mmask8)(rest <= 4 ? 0u : (1u << (2 * rest - 8)) - 1u);
        const __m256i k = _mm256_cvtepu8_epi32(_mm_maskz_loadu_epi8((__mmask16)kg, offsets + ox));
        max_pool_backward_k2_x8(_mm256_maskz_loadu_ps(kg, g + ox), k, &a, &b, &c, &d);
        _mm256_mask_storeu_ps(d0 + 2 * ox, klo, a), _mm256_mask_storeu_ps(d0 + 2 * ox + 8, khi, b);
        _mm256_mask_storeu_ps(d1 + 2 * ox, klo, c), _mm256_mask_storeu_ps(d1 + 2 * ox + 8, khi, d);
    }
}

/* 16 windows at a time: each row's 32 bf16 widened to fp32 (a shift: exact), split into the even
 * and odd elements by permutes, the picks of max_pool_k2_x8 as compare masks, the max narrowed back
 * (a shift, or sign | 0x7FC0 for NaN); the tail under masks. Replaces a decode of the rows, the fp32
 * row kernel and an encode of the outputs. */
/* n <= 16 windows: t and u hold their top and bottom rows (2n bf16 each, zeros after) */
static inline void max_pool_k2_bf16_x16(__m512i t, __m512i u, int n, uint16_t *y, uint8_t *offsets) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    {
        const __mmask16 kout = (__mmask16)(n == 16 ? 0xFFFFu : (1u << n) - 1u);
        const __m512 t0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(t)), 16));
        const __m512 t1 =
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(t, 1)), 16));
        const __m512 u0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(u)), 16));
        const __m512 u1 =
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(u, 1)), 16));
        const __m512 v[4] = {_mm512_permutex2var_ps(t0, even, t1), _mm512_permutex2var_ps(t0, odd, t1),
                             _mm512_permutex2var_ps(u0, even, u1), _mm512_permutex2var_ps(u0, odd, u1)};
        __m512 m = v[0];
        __m512i o = _mm512_setzero_si512();
        for (int i = 1; i < 4; i++) {
            const __mmask16 take = _mm512_cmp_ps_mask(v[i], m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v[i], v[i], _CMP_UNORD_Q);
            m = _mm512_mask_mov_ps(m, take, v[i]);
            o = _mm512_mask_mov_epi32(o, take, _mm512_set1_epi32(i));
        }
        const __m512i bits = _mm512_castps_si512(m);
        const __mmask16 nan =
            _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
        const __m512i h = _mm512_mask_mov_epi32(
            _mm512_srli_epi32(bits, 16), nan,
            _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(bits, 31), 15), _mm512_set1_epi32(0x7FC0)));
        _mm256_mask_storeu_epi16(y, kout, _mm512_cvtepi32_epi16(h));
        _mm_mask_storeu_epi8(offsets, kout, _mm512_cvtepi32_epi8(o));
    }
}

static void max_pool_row_k2_bf16_avx512(const uint16_t *r0, const uint16_t *r1, int64_t ow, uint16_t *y,
                                        uint8_t *offsets) {
    for (int64_t ox = 0; ox < ow; ox += 16) {
        const int n = ow - ox < 16 ? (int)(ow - ox) : 16;
        const __mmask32 kin = n == 16 ? 0xFFFFFFFFu : (1u << (2 * n)) - 1u;
        const __m512i t = _mm512_maskz_loadu_epi16(kin, r0 + 2 * ox), u = _mm512_maskz_loadu_epi16(kin, r1 + 2 * ox);
        max_pool_k2_bf16_x16(t, u, n, y + ox, offsets + ox);
    }
}

/* Every output row of the tensor through the row kernel, the loop inside the AVX-512 code so that
 * the kernel inlines: the cnn's rows are 14 and 7 windows, and a call plus a path check per row
 * cost about a third of the pass. */
void amp_max_pool_rows_k2_bf16_avx512(const uint16_t *xs, int64_t planes, int64_t h, int64_t w, int64_t oh,
                                      int64_t ow, uint16_t *ys, uint8_t *offsets) {
    if (w == 2 * ow && h == 2 * oh && ow <= 8) {
        /* rows of at most 8 windows (the cnn's second pool: 7) without gaps between them: two
         * windows' rows at a time, their 8ow <= 64 contiguous elements permuted into one t and u
         * (14 of 16 lanes for ow = 7, not 7) */
        const int64_t rows = planes * oh, m = 2 * ow;
        uint16_t ti[32], ui[32];
        for (int j = 0; j < 32; j++) {
            const int64_t pair = j < m ? 0 : 1, e = j < m ? j : j - m; /* e: element within the row */
            ti[j] = (uint16_t)(j < 2 * m ? pair * 2 * w + e : 0);
            ui[j] = (uint16_t)(j < 2 * m ? pair * 2 * w + w + e : 0);
        }
        const __m512i tix = _mm512_loadu_si512(ti), uix = _mm512_loadu_si512(ui);
        const __mmask32 kin = (__mmask32)((1ull << (2 * m)) - 1u);      /* 4ow elements of t and u */
        const int rest = (int)(4 * w - 32);                               /* elements after the first 32 */
        const __mmask32 klo = rest >= 0 ? 0xFFFFFFFFu : (__mmask32)((1ull << (4 * w)) - 1u);
        const __mmask32 khi = rest >= 32 ? 0xFFFFFFFFu : (__mmask32)((1ull << (rest > 0 ? rest : 0)) - 1u);
        int64_t r = 0;
        for (; r + 2 <= rows; r += 2) {
            const uint16_t *in = xs + r * 2 * w;
            const __m512i lo = _mm512_maskz_loadu_epi16(klo, in), hi = _mm512_maskz_loadu_epi16(khi, in + 32);
            max_pool_k2_bf16_x16(_mm512_maskz_permutex2var_epi16(kin, lo, tix, hi),
                                 _mm512_maskz_permutex2var_epi16(kin, lo, uix, hi), (int)(2 * ow), ys + r * ow,
                                 offsets + r * ow);
        }
        for (; r < rows; r++) max_pool_row_k2_bf16_avx512(xs + r * 2 * w, xs + r * 2 * w + w, ow, ys + r * ow, offsets + r * ow);
        return;
    }
    for (int64_t p = 0; p < planes; p++)
        for (int64_t oy = 0; oy < oh; oy++) {
            const uint16_t *r0 = xs + (p * h + 2 * oy) * w;
            const int64_t o0 = (p * oh + oy) * ow;
            max_pool_row_k2_bf16_avx512(r0, r0 + w, ow, ys + o0, offsets + o0);
        }
}

/* 16 windows at a time in 32-bit lanes: g's bits with -0 -> +0 and NaN -> sign | 0x7FC0 (what 0 + g
 * then the encode give), masked by offset == 0..3, and each row's pair of windows packed as the
 * two halves of a lane (element 2ox low, 2ox + 1 high): one 64-byte store per row, masked in the
 * tail. Replaces a decode of dY, the fp32 row kernel and an encode of dx. */
/* n <= 16 windows' dY g and offsets -> lane j of *r0, *r1: the two elements of window j in its top
 * and bottom row (low half: the even element) */
static inline void max_pool_backward_k2_bf16_x16(const uint16_t *g, const uint8_t *offsets, __mmask16 kn, __m512i *r0,
                                                 __m512i *r1) {
    {
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(kn, g));
        const __m512i k = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(kn, offsets));
        const __m512i mag = _mm512_and_si512(h, _mm512_set1_epi32(0x7FFF));
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7F80));
        const __mmask16 nonzero = _mm512_test_epi32_mask(mag, mag);
        const __m512i v = _mm512_maskz_mov_epi32(
            nonzero, _mm512_mask_mov_epi32(h, nan,
                                           _mm512_or_si512(_mm512_and_si512(h, _mm512_set1_epi32(0x8000)),
                                                           _mm512_set1_epi32(0x7FC0))));
        const __m512i w0 = _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(k, _mm512_setzero_si512()), v);
        const __m512i w1 = _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(1)), v);
        const __m512i w2 = _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(2)), v);
        const __m512i w3 = _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(3)), v);
        *r0 = _mm512_or_si512(w0, _mm512_slli_epi32(w1, 16));
        *r1 = _mm512_or_si512(w2, _mm512_slli_epi32(w3, 16));
    }
}

static void max_pool_backward_row_k2_bf16_avx512(const uint16_t *g, const uint8_t *offsets, int64_t ow, uint16_t *d0,
                                                 uint16_t *d1) {
    for (int64_t ox = 0; ox < ow; ox += 16) {
        const int n = ow - ox < 16 ? (int)(ow - ox) : 16;
        const __mmask16 kn = (__mmask16)(n == 16 ? 0xFFFFu : (1u << n) - 1u);
        __m512i a, b;
        max_pool_backward_k2_bf16_x16(g + ox, offsets + ox, kn, &a, &b);
        _mm512_mask_storeu_epi32(d0 + 2 * ox, kn, a);
        _mm512_mask_storeu_epi32(d1 + 2 * ox, kn, b);
    }
}

/* The backward's rows the same way (pool.c's max_pool_backward_k2_planes describes the borders). */
void amp_max_pool_backward_rows_k2_bf16_avx512(const uint16_t *gs, const uint8_t *offsets, int64_t planes, int64_t h,
                                               int64_t w, int64_t oh, int64_t ow, uint16_t *ds) {
    if (w == 2 * ow && h == 2 * oh && ow <= 8) {
        /* as the forward: two windows' rows at a time, their 4ow lanes of element pairs permuted
         * into the 4ow contiguous pairs (top row, bottom row, top row, bottom row) */
        const int64_t rows = planes * oh;
        const int m = (int)ow, q4 = 4 * m;
        int32_t ix[32];
        for (int q = 0; q < 32; q++) { /* row r = q / m of the four: a (top) or b (bottom) lanes */
            const int r = q < q4 ? q / m : 0, e = q < q4 ? q % m : 0;
            ix[q] = (r & 1) * 16 + (r >> 1) * m + e;
        }
        const __m512i ix0 = _mm512_loadu_si512(ix), ix1 = _mm512_loadu_si512(ix + 16);
        const __mmask16 kn = (__mmask16)((1u << (2 * m)) - 1u);
        const __mmask16 k0 = (__mmask16)(q4 >= 16 ? 0xFFFFu : (1u << q4) - 1u);
        const __mmask16 k1 = (__mmask16)(q4 > 16 ? (1u << (q4 - 16)) - 1u : 0u);
        int64_t r = 0;
        for (; r + 2 <= rows; r += 2) {
            __m512i a, b;
            max_pool_backward_k2_bf16_x16(gs + r * ow, offsets + r * ow, kn, &a, &b);
            uint16_t *d = ds + r * 2 * w;
            _mm512_mask_storeu_epi32(d, k0, _mm512_permutex2var_epi32(a, ix0, b));
            _mm512_mask_storeu_epi32(d + 32, k1, _mm512_permutex2var_epi32(a, ix1, b));
        }
        for (; r < rows; r++)
            max_pool_backward_row_k2_bf16_avx512(gs + r * ow, offsets + r * ow, ow, ds + r * 2 * w, ds + r * 2 * w + w);
        return;
    }
    for (int64_t p = 0; p < planes; p++) {
        for (int64_t oy = 0; oy < oh; oy++) {
            const int64_t o0 = (p * oh + oy) * ow;
            uint16_t *d0 = ds + (p * h + 2 * oy) * w, *d1 = d0 + w;
            max_pool_backward_row_k2_bf16_avx512(gs + o0, offsets + o0, ow, d0, d1);
            if (w > 2 * ow) d0[w - 1] = d1[w - 1] = 0;
        }
        if (h > 2 * oh) memset(ds + (p * h + h - 1) * w, 0, (size_t)w * sizeof *ds);
    }
}

/* The row kernels the whole-tensor loops above inline, for callers outside this file. */
void amp_max_pool_row_k2_avx512(const float *r0, const float *r1, int64_t ow, float *y, uint8_t *offsets) {
    max_pool_row_k2_avx512(r0, r1, ow, y, offsets);
}

void amp_max_pool_row_k2_bf16_avx512(const uint16_t *r0, const uint16_t *r1, int64_t ow, uint16_t *y,
                                     uint8_t *offsets) {
    max_pool_row_k2_bf16_avx512(r0, r1, ow, y, offsets);
}

void amp_max_pool_backward_row_k2_bf16_avx512(const uint16_t *g, const uint8_t *offsets, int64_t ow, uint16_t *d0,
                                              uint16_t *d1) {
    max_pool_backward_row_k2_bf16_avx512(g, offsets, ow, d0, d1);
}

/* The AVX-512 path's max pooling entries: every one. */
void amp_pool_kernels_avx512(amp_pool_kernels *k) {
    k->row_k2 = amp_max_pool_row_k2_avx512;
    k->backward_row_k2 = amp_max_pool_backward_row_k2_avx512;
    k->row_k2_bf16 = amp_max_pool_row_k2_bf16_avx512;
    k->backward_row_k2_bf16 = amp_max_pool_backward_row_k2_bf16_avx512;
    k->rows_k2 = amp_max_pool_rows_k2_avx512;
    k->rows_k2_bf16 = amp_max_pool_rows_k2_bf16_avx512;
    k->backward_rows_k2_bf16 = amp_max_pool_backward_rows_k2_bf16_avx512;
}
