/* AVX-512 LSTM pointwise kernels (kernels/lstm_kernels.h): 16 lanes, the
 * reference's multiplies and adds in the reference's order (no FMA), so the
 * same bits; tails run the scalar formula (cell_backward, acc, add3) or the
 * same vector code under a mask (the fused row kernels). */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "../lstm_kernels.h"
#include "vecmath_avx512.h"

/* fp32 -> bf16, round to nearest even on the bit pattern, NaN to 0x7FC0 with the input's sign:
 * convert_avx512.c's encode (not VCVTNEPS2BF16, which flushes subnormals) */
static inline __m256i bf16_from_f32(__m512 v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    const __m512i qnan = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(x, 31), 15), _mm512_set1_epi32(0x7FC0));
    r = _mm512_mask_mov_epi32(r, nan, qnan);
    return _mm512_cvtepi32_epi16(r);
}

static inline __attribute__((always_inline)) __m512 preact(__mmask16 m, const float *gr, const float *b1,
                                                           const float *b2, size_t o) {
    __m512 p = _mm512_maskz_loadu_ps(m, gr + o);
    if (b1) p = _mm512_add_ps(p, _mm512_maskz_loadu_ps(m, b1 + o));
    if (b2) p = _mm512_add_ps(p, _mm512_maskz_loadu_ps(m, b2 + o));
    return p;
}

/* One fused pass over the row instead of the composition's seven (add3, three activation maps, the
 * cell update, tanh, the product): each vector of 16 columns goes from the pre-activations to h'
 * in registers. The same instructions per element as the composition on this path (vecmath_avx512.h
 * is the vecmath table's code; the tail runs the same vector code under a mask, as the maps do), so
 * the same bits. h is fp32, or bf16 when bf16 is set (then c' is left rounded to bf16 too). */
static inline __attribute__((always_inline)) void cell_forward_impl(float *act, float *c_save, float *c, void *h,
                                                                    const float *gr, const float *bi, const float *bh,
                                                                    size_t H, bool stream, bool bf16) {
    const float *b1 = bi ? bi : bh, *b2 = bi ? bh : NULL; /* (gr + b1) + b2, as add3 */
    /* non-temporal stores need whole aligned vectors */
    stream = stream && H % 16 == 0 && (uintptr_t)act % 64 == 0 && (!c_save || (uintptr_t)c_save % 64 == 0);
    for (size_t j = 0; j < H; j += 16) {
        const __mmask16 m = H - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (H - j)) - 1u);
        const __m512 gi = sigmoid_v(preact(m, gr, b1, b2, j)), gf = sigmoid_v(preact(m, gr, b1, b2, H + j));
        const __m512 gg = tanh_v(preact(m, gr, b1, b2, 2 * H + j)), go = sigmoid_v(preact(m, gr, b1, b2, 3 * H + j));
        const __m512 cp = _mm512_maskz_loadu_ps(m, c + j);
        if (c_save) {
            if (stream) _mm512_stream_ps(c_save + j, cp);
            else _mm512_mask_storeu_ps(c_save + j, m, cp);
        }
        const __m512 cn = _mm512_add_ps(_mm512_mul_ps(gf, cp), _mm512_mul_ps(gi, gg));
        const __m512 t = tanh_v(cn);
        if (stream) {
            _mm512_stream_ps(act + j, gi);
            _mm512_stream_ps(act + H + j, gf);
            _mm512_stream_ps(act + 2 * H + j, gg);
            _mm512_stream_ps(act + 3 * H + j, go);
            _mm512_stream_ps(act + 4 * H + j, t);
        } else {
            _mm512_mask_storeu_ps(act + j, m, gi);
            _mm512_mask_storeu_ps(act + H + j, m, gf);
            _mm512_mask_storeu_ps(act + 2 * H + j, m, gg);
            _mm512_mask_storeu_ps(act + 3 * H + j, m, go);
            _mm512_mask_storeu_ps(act + 4 * H + j, m, t);
        }
        const __m512 hn = _mm512_mul_ps(go, t);
        if (bf16) { /* c' to bf16 and back: the low half cleared, as bf16 decodes */
            const __m256i cb = bf16_from_f32(cn);
            _mm512_mask_storeu_ps(c + j, m, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(cb), 16)));
            _mm256_mask_storeu_epi16((uint16_t *)h + j, m, bf16_from_f32(hn));
        } else {
            _mm512_mask_storeu_ps(c + j, m, cn);
            _mm512_mask_storeu_ps((float *)h + j, m, hn);
        }
    }
    if (stream) _mm_sfence();
}

static void cell_backward_avx512(float *dgr, float *dc_prev, const float *act, const float *cprev, const float *dh,
                                 const float *dh2, const float *dc, size_t H) {
    const __m512 one = _mm512_set1_ps(1.0f);
    size_t j = 0;
    for (; j + 16 <= H; j += 16) {
        const __m512 gi = _mm512_loadu_ps(act + j), gf = _mm512_loadu_ps(act + H + j);
        const __m512 gg = _mm512_loadu_ps(act + 2 * H + j), go = _mm512_loadu_ps(act + 3 * H + j);
        const __m512 t = _mm512_loadu_ps(act + 4 * H + j);
        __m512 dh_out = _mm512_loadu_ps(dh + j);
        if (dh2) dh_out = _mm512_add_ps(dh_out, _mm512_loadu_ps(dh2 + j));
        /* dct = dc + dh_out * go * (1 - t t) */
        const __m512 dct = _mm512_add_ps(
            _mm512_loadu_ps(dc + j), _mm512_mul_ps(_mm512_mul_ps(dh_out, go), _mm512_sub_ps(one, _mm512_mul_ps(t, t))));
        _mm512_storeu_ps(dgr + j, _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dct, gg), gi), _mm512_sub_ps(one, gi)));
        _mm512_storeu_ps(dgr + H + j, _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dct, _mm512_loadu_ps(cprev + j)), gf),
                                                    _mm512_sub_ps(one, gf)));
        _mm512_storeu_ps(dgr + 2 * H + j,
                         _mm512_mul_ps(_mm512_mul_ps(dct, gi), _mm512_sub_ps(one, _mm512_mul_ps(gg, gg))));
        _mm512_storeu_ps(dgr + 3 * H + j,
                         _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dh_out, t), go), _mm512_sub_ps(one, go)));
        _mm512_storeu_ps(dc_prev + j, _mm512_mul_ps(dct, gf));
    }
    for (; j < H; j++) amp_lstm_cell_backward_at(dgr, dc_prev, act, cprev, dh, dh2, dc, H, j);
}

static void cell_forward_avx512(float *act, float *c_save, float *c, float *h, const float *gr, const float *bi,
                                const float *bh, size_t H, bool stream) {
    cell_forward_impl(act, c_save, c, h, gr, bi, bh, H, stream, false);
}

static void cell_forward_bf16_avx512(float *act, float *c_save, float *c, uint16_t *h, const float *gr,
                                     const float *bi, const float *bh, size_t H, bool stream) {
    cell_forward_impl(act, c_save, c, h, gr, bi, bh, H, stream, true);
}

/* one gate's gradient: summed into db, rounded into dg */
static inline __attribute__((always_inline)) void put_gate(uint16_t *dg, float *db, size_t o, __mmask16 m, __m512 d) {
    if (db) _mm512_mask_storeu_ps(db + o, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, db + o), d));
    _mm256_mask_storeu_epi16(dg + o, m, bf16_from_f32(d));
}

/* cell_backward_avx512's arithmetic, in registers through the sum and the rounding; the tail under a
 * mask with the same vector code (the same operations as the scalar formula) */
static void cell_backward_bf16_avx512(uint16_t *dg, float *db, float *dc_prev, const float *act, const float *cprev,
                                      const float *dh, const float *dh2, const float *dc, size_t H) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (size_t j = 0; j < H; j += 16) {
        const __mmask16 m = H - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (H - j)) - 1u);
        const __m512 gi = _mm512_maskz_loadu_ps(m, act + j), gf = _mm512_maskz_loadu_ps(m, act + H + j);
        const __m512 gg = _mm512_maskz_loadu_ps(m, act + 2 * H + j), go = _mm512_maskz_loadu_ps(m, act + 3 * H + j);
        const __m512 t = _mm512_maskz_loadu_ps(m, act + 4 * H + j);
        __m512 dh_out = _mm512_maskz_loadu_ps(m, dh + j);
        if (dh2) dh_out = _mm512_add_ps(dh_out, _mm512_maskz_loadu_ps(m, dh2 + j));
        const __m512 dot = _mm512_mul_ps(_mm512_mul_ps(dh_out, go), _mm512_sub_ps(one, _mm512_mul_ps(t, t)));
        const __m512 dct = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dc + j), dot);
        put_gate(dg, db, j, m, _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dct, gg), gi), _mm512_sub_ps(one, gi)));
        put_gate(dg, db, H + j, m,
                 _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dct, _mm512_maskz_loadu_ps(m, cprev + j)), gf),
                               _mm512_sub_ps(one, gf)));
        put_gate(dg, db, 2 * H + j, m,
                 _mm512_mul_ps(_mm512_mul_ps(dct, gi), _mm512_sub_ps(one, _mm512_mul_ps(gg, gg))));
        put_gate(dg, db, 3 * H + j, m,
                 _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dh_out, t), go), _mm512_sub_ps(one, go)));
        _mm512_mask_storeu_ps(dc_prev + j, m, _mm512_mul_ps(dct, gf));
    }
}

static void acc_avx512(float *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_add_ps(_mm512_loadu_ps(dst + i), _mm512_loadu_ps(src + i)));
    for (; i < n; i++) dst[i] += src[i];
}

static void add3_avx512(float *dst, const float *a, const float *b, const float *c, size_t n) {
    size_t i = 0;
    if (c) {
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, _mm512_add_ps(_mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)), _mm512_loadu_ps(c + i)));
        for (; i < n; i++) dst[i] = a[i] + b[i] + c[i];
    } else {
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
        for (; i < n; i++) dst[i] = a[i] + b[i];
    }
}

void amp_lstm_kernels_avx512(amp_lstm_kernels *k) {
    k->cell_forward = cell_forward_avx512;
    k->cell_forward_bf16 = cell_forward_bf16_avx512;
    k->cell_backward_bf16 = cell_backward_bf16_avx512;
    k->add3 = add3_avx512;
    k->cell_backward = cell_backward_avx512;
    k->acc = acc_avx512;
}
