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
 * convert_avx512.c's encode (not VCVTNEPS2BF16, which flushes subnormals); the patterns in 32-bit lanes */
static inline __m512i bf16_lanes(__m512 v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    const __m512i qnan = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(x, 31), 15), _mm512_set1_epi32(0x7FC0));
    return _mm512_mask_mov_epi32(r, nan, qnan);
}

static inline __m256i bf16_from_f32(__m512 v) { return _mm512_cvtepi32_epi16(bf16_lanes(v)); }

/* 16 bf16 patterns (masked lanes 0) as fp32 */
static inline __m512 f32_from_bf16(__mmask16 m, const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

static inline __m512 abs_v(__m512 v) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF)));
}

/* copysign(a, s) for a with its sign bit clear */
static inline __m512 with_sign_of(__m512 a, __m512 s) {
    return _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(a), _mm512_and_si512(_mm512_castps_si512(s), _mm512_set1_epi32((int)0x80000000u))));
}

/* x + bias + (bit 16 of x): the bf16 rounding to nearest even of x's pattern, in the top half, for
 * finite and infinite x (the bias may carry a multiple of 2^16 along, as act16's form B does) */
static inline __m512i rne_top(__m512i x, __m512i bias) {
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(_mm512_add_epi32(x, bias), lsb);
}

/* rne_top's result with NaN lanes of v (x's value) replaced by the quiet NaN of their sign (amp_convert's) */
static inline __m512i nan_to_qnan(__m512i r, __m512 v) {
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    /* (x & sign) | 0x7FC00000 */
    const __m512i q = _mm512_ternarylogic_epi32(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u),
                                                _mm512_set1_epi32(0x7FC00000), 0xEA);
    return _mm512_mask_mov_epi32(r, nan, q);
}

/* the top halves of lo's 16 lanes, then of hi's: 32 16-bit patterns */
static inline __m512i top_halves(__m512i lo, __m512i hi) {
    const __m512i idx = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25,
                                         23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutex2var_epi16(lo, idx, hi);
}

/* act16's form test and stored value before the rounding: |v| in [0.5, 1) on the bits (NaN is
 * outside), *b the lanes in form B, whose w = v - copysign(1, v) (exact) */
static inline __m512 act16_w(__m512 v, __mmask16 *b) {
    const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF));
    *b = _mm512_cmp_epu32_mask(_mm512_sub_epi32(a, _mm512_set1_epi32(0x3F000000)), _mm512_set1_epi32(0x00800000),
                               _MM_CMPINT_LT);
    return _mm512_mask_sub_ps(v, *b, v, with_sign_of(_mm512_set1_ps(1.0f), v));
}

/* amp_lstm_act16_encode of 16 values in integer operations, in the top halves of 32-bit lanes: form
 * B's 2^64 added to the exponent with the rounding's bias, then amp_lstm_act16_round's exceptions
 * (NaN quieted, zero and subnormal to the zero of their sign: w = v there) */
static inline __m512i act16_top(__m512 v) {
    __mmask16 b;
    const __m512i w = _mm512_castps_si512(act16_w(v, &b));
    const __m512i bias = _mm512_mask_mov_epi32(_mm512_set1_epi32(0x7FFF), b, _mm512_set1_epi32(0x20007FFF));
    __m512i r = rne_top(w, bias);
    r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), w, _mm512_set1_epi32(0x00400000));
    const __mmask16 tiny = _mm512_testn_epi32_mask(w, _mm512_set1_epi32(0x7F800000));
    return _mm512_mask_and_epi32(r, tiny, w, _mm512_set1_epi32((int)0x80000000u));
}

/* 32 values as act16 (lo's 16, then hi's): with AVX-512 BF16 (hw) the rounding, exceptions and packing
 * of both vectors are one VCVTNE2PS2BF16, then form B's 2^64 is added to the 16-bit patterns */
static inline __attribute__((always_inline)) __m512i act16_encode_pair(__m512 lo, __m512 hi, bool hw) {
    if (!hw) return top_halves(act16_top(lo), act16_top(hi));
    __mmask16 bl, bh;
    const __m512 wl = act16_w(lo, &bl), wh = act16_w(hi, &bh);
    const __m512i p = (__m512i)_mm512_cvtne2ps_pbh(wh, wl);
    return _mm512_mask_add_epi16(p, _mm512_kunpackw(bh, bl), p, _mm512_set1_epi16(64 << 7));
}

/* 32 values rounded to bf16 (amp_convert's bits): lo's 16, then hi's */
static inline __m512i bf16_pair(__m512 lo, __m512 hi) {
    const __m512i bias = _mm512_set1_epi32(0x7FFF);
    return top_halves(nan_to_qnan(rne_top(_mm512_castps_si512(lo), bias), lo),
                      nan_to_qnan(rne_top(_mm512_castps_si512(hi), bias), hi));
}

/* amp_lstm_act16_decode of 16 patterns (masked lanes decode 0): v, and 1 - |v| in *comp */
static inline __m512 act16_decode_v(__mmask16 m, const uint16_t *p, __m512 *comp) {
    const __m512 one = _mm512_set1_ps(1.0f), raw = f32_from_bf16(m, p);
    const __mmask16 b = _mm512_cmp_ps_mask(abs_v(raw), _mm512_set1_ps(2.0f), _CMP_GE_OQ);
    const __m512 u = _mm512_mask_mul_ps(raw, b, raw, _mm512_set1_ps(0x1p-64f)), au = abs_v(u);
    *comp = _mm512_mask_mov_ps(_mm512_sub_ps(one, au), b, au);
    return _mm512_mask_sub_ps(u, b, u, with_sign_of(one, u));
}

/* ((gr + g2) + b1) + b2 at o, a NULL term skipped */
static inline __attribute__((always_inline)) __m512 preact(__mmask16 m, const float *gr, const float *g2,
                                                           const float *b1, const float *b2, size_t o) {
    __m512 p = _mm512_maskz_loadu_ps(m, gr + o);
    if (g2) p = _mm512_add_ps(p, _mm512_maskz_loadu_ps(m, g2 + o));
    if (b1) p = _mm512_add_ps(p, _mm512_maskz_loadu_ps(m, b1 + o));
    if (b2) p = _mm512_add_ps(p, _mm512_maskz_loadu_ps(m, b2 + o));
    return p;
}

static inline __mmask16 tail_mask(size_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* The fused forward's first pass on the columns [j, j + 16) under m (masked lanes compute from zeros
 * and store nothing): the four gates and c' = f c + i g, c' stored in c (fp32, or when bf16 is set
 * rounded to bf16 and kept as an fp32 value); the i, f, g, o activations and c as it came in returned
 * in out[0..3] and out[5], the fp32 c' in *cn (the second pass takes tanh(c') and h' = o tanh(c')).
 * The same instructions per element as the composition on this path (vecmath_avx512.h is the vecmath
 * table's code; a tail runs the same vector code under a mask, as the maps do), so the same bits. */
static inline __attribute__((always_inline)) void gates_cols(__mmask16 m, size_t j, float *c, const float *gr,
                                                             const float *g2, const float *b1, const float *b2,
                                                             size_t H, bool bf16, __m512 out[6], __m512 *cn) {
    const __m512 gi = sigmoid_v(preact(m, gr, g2, b1, b2, j)), gf = sigmoid_v(preact(m, gr, g2, b1, b2, H + j));
    const __m512 gg = tanh_v(preact(m, gr, g2, b1, b2, 2 * H + j));
    const __m512 go = sigmoid_v(preact(m, gr, g2, b1, b2, 3 * H + j));
    const __m512 cp = _mm512_maskz_loadu_ps(m, c + j);
    *cn = _mm512_add_ps(_mm512_mul_ps(gf, cp), _mm512_mul_ps(gi, gg));
    /* under bf16, c' to bf16 and back: the low half cleared, as bf16 decodes */
    _mm512_mask_storeu_ps(c + j, m, bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(bf16_lanes(*cn), 16)) : *cn);
    out[0] = gi, out[1] = gf, out[2] = gg, out[3] = go, out[5] = cp;
}

/* Both fused forwards run a row in two passes over chunks of FWD_CHUNK columns: the gates and c'
 * (four independent functions per column), then tanh(c') and h' from c' and o kept in a stack
 * buffer. In one pass each column's tanh(c') waits on its gates, a chain of dependent instructions
 * longer than the out-of-order window covers, so the core idled between columns; split, each pass's
 * columns are independent. Chunks of 64 run about as fast as longer ones, keep the buffers small and
 * let tests/test_lstm_kernels.c's rows (H up to 70) cross a chunk. */
enum { FWD_CHUNK = 64 };

/* One fused row instead of the composition's seven passes (add3, three activation maps, the cell
 * update, tanh, the product), two passes per chunk (above). act, c_save and h fp32. */
static void cell_forward_avx512(float *act, float *c_save, float *c, float *h, const float *gr, const float *gr2,
                                const float *bi, const float *bh, size_t H, bool stream) {
    const float *b1 = bi ? bi : bh, *b2 = bi ? bh : NULL; /* ((gr + gr2) + b1) + b2, as the composition */
    /* non-temporal stores need whole aligned vectors */
    stream = stream && H % 16 == 0 && (uintptr_t)act % 64 == 0 && (!c_save || (uintptr_t)c_save % 64 == 0);
    _Alignas(64) float cn_buf[FWD_CHUNK], go_buf[FWD_CHUNK];
    for (size_t j0 = 0; j0 < H; j0 += FWD_CHUNK) {
        const size_t j1 = H - j0 < FWD_CHUNK ? H : j0 + FWD_CHUNK;
        for (size_t j = j0; j < j1; j += 16) {
            const __mmask16 m = tail_mask(H - j);
            __m512 v[6], cn;
            gates_cols(m, j, c, gr, gr2, b1, b2, H, false, v, &cn);
            _mm512_store_ps(cn_buf + (j - j0), cn), _mm512_store_ps(go_buf + (j - j0), v[3]);
            for (size_t q = 0; q < 6; q++) {
                float *dst = q < 4 ? act + q * H + j : q == 5 && c_save ? c_save + j : NULL;
                if (!dst) continue;
                if (stream) _mm512_stream_ps(dst, v[q]);
                else _mm512_mask_storeu_ps(dst, m, v[q]);
            }
        }
        for (size_t j = j0; j < j1; j += 16) { /* masked lanes: tanh(0) and 0 o, stored nowhere */
            const __mmask16 m = tail_mask(H - j);
            const __m512 t = tanh_v(_mm512_load_ps(cn_buf + (j - j0)));
            _mm512_mask_storeu_ps(h + j, m, _mm512_mul_ps(_mm512_load_ps(go_buf + (j - j0)), t));
            if (stream) _mm512_stream_ps(act + 4 * H + j, t);
            else _mm512_mask_storeu_ps(act + 4 * H + j, m, t);
        }
    }
    if (stream) _mm_sfence();
}

/* 32 of the row's saved values (act16, or bf16 for c_save) at dst, streamed or stored under m0, m1 */
static inline __attribute__((always_inline)) void put_saved(uint16_t *dst, __m512i v, __mmask16 m0, __mmask16 m1,
                                                            bool stream) {
    if (stream) _mm512_stream_si512((void *)dst, v);
    else _mm512_mask_storeu_epi16(dst, (__mmask32)m0 | (__mmask32)m1 << 16, v);
}

/* cell_forward_avx512 for bf16: act16 and bf16 saved, h' and c' rounded, two passes per chunk
 * (above). 32 columns a step: two vectors of saved values are packed into one 64-byte line (one
 * permute for both) and stored whole. */
static inline __attribute__((always_inline)) void cell_forward_bf16_impl(uint16_t *act, uint16_t *c_save, float *c,
                                                                         uint16_t *h, const float *gr,
                                                                         const float *gr2, const float *bi,
                                                                         const float *bh, size_t H, bool stream,
                                                                         bool hw) {
    const float *b1 = bi ? bi : bh, *b2 = bi ? bh : NULL;
    stream = stream && H % 32 == 0 && (uintptr_t)act % 64 == 0 && (!c_save || (uintptr_t)c_save % 64 == 0);
    _Alignas(64) float cn_buf[FWD_CHUNK], go_buf[FWD_CHUNK];
    for (size_t j0 = 0; j0 < H; j0 += FWD_CHUNK) {
        const size_t j1 = H - j0 < FWD_CHUNK ? H : j0 + FWD_CHUNK;
        for (size_t j = j0; j < j1; j += 32) {
            const __mmask16 m0 = tail_mask(H - j), m1 = H - j > 16 ? tail_mask(H - j - 16) : 0;
            __m512 lo[6], hi[6], cl, ch;
            gates_cols(m0, j, c, gr, gr2, b1, b2, H, true, lo, &cl);
            gates_cols(m1, j + 16, c, gr, gr2, b1, b2, H, true, hi, &ch);
            _mm512_store_ps(cn_buf + (j - j0), cl), _mm512_store_ps(cn_buf + (j - j0) + 16, ch);
            _mm512_store_ps(go_buf + (j - j0), lo[3]), _mm512_store_ps(go_buf + (j - j0) + 16, hi[3]);
            for (size_t q = 0; act && q < 4; q++)
                put_saved(act + q * H + j, act16_encode_pair(lo[q], hi[q], hw), m0, m1, stream);
            if (c_save) put_saved(c_save + j, bf16_pair(lo[5], hi[5]), m0, m1, stream);
        }
        for (size_t j = j0; j < j1; j += 32) { /* masked lanes: tanh(0) and 0 o, stored nowhere */
            const __mmask16 m0 = tail_mask(H - j), m1 = H - j > 16 ? tail_mask(H - j - 16) : 0;
            const __m512 tl = tanh_v(_mm512_load_ps(cn_buf + (j - j0)));
            const __m512 th = tanh_v(_mm512_load_ps(cn_buf + (j - j0) + 16));
            _mm256_mask_storeu_epi16(h + j, m0, bf16_from_f32(_mm512_mul_ps(_mm512_load_ps(go_buf + (j - j0)), tl)));
            _mm256_mask_storeu_epi16(h + j + 16, m1,
                                     bf16_from_f32(_mm512_mul_ps(_mm512_load_ps(go_buf + (j - j0) + 16), th)));
            if (act) put_saved(act + 4 * H + j, act16_encode_pair(tl, th, hw), m0, m1, stream);
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

/* one gate's gradient: stored in fp32 into dgr (when not NULL), and (when dg is not NULL) summed into db
 * (when not NULL) and rounded into dg */
static inline __attribute__((always_inline)) void put_gate(float *dgr, uint16_t *dg, float *db, size_t o,
                                                           __mmask16 m, __m512 d) {
    if (dgr) _mm512_mask_storeu_ps(dgr + o, m, d);
    if (!dg) return;
    if (db) _mm512_mask_storeu_ps(db + o, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, db + o), d));
    _mm256_mask_storeu_epi16(dg + o, m, bf16_from_f32(d));
}

/* amp_lstm_cell_backward16_at on 16 columns at a time, the tail under a mask with the same vector code
 * (the same operations as the scalar formula). The gradient goes to dgr (fp32) when it is not NULL,
 * and through db into dg (bf16) in registers when dg is not NULL; cprev is fp32 (cp32) or bf16 (cp16), dh fp32 or (NULL) bf16
 * (dh16). */
static inline __attribute__((always_inline)) void cell_backward16_impl(float *dgr, uint16_t *dg, float *db,
                                                                       float *dc_prev, const uint16_t *act,
                                                                       const float *cp32, const uint16_t *cp16,
                                                                       const float *dh, const uint16_t *dh16,
                                                                       const float *dh2,
                                                                       const float *dc, size_t H) {
    const __m512 two = _mm512_set1_ps(2.0f);
    for (size_t j = 0; j < H; j += 16) {
        const __mmask16 m = tail_mask(H - j);
        __m512 ci, cf, cg, co, ct;
        const __m512 gi = act16_decode_v(m, act + j, &ci), gf = act16_decode_v(m, act + H + j, &cf);
        const __m512 gg = act16_decode_v(m, act + 2 * H + j, &cg), go = act16_decode_v(m, act + 3 * H + j, &co);
        const __m512 t = act16_decode_v(m, act + 4 * H + j, &ct);
        const __m512 cp = cp32 ? _mm512_maskz_loadu_ps(m, cp32 + j) : f32_from_bf16(m, cp16 + j);
        __m512 dh_out = dh ? _mm512_maskz_loadu_ps(m, dh + j) : f32_from_bf16(m, dh16 + j);
        if (dh2) dh_out = _mm512_add_ps(dh_out, _mm512_maskz_loadu_ps(m, dh2 + j));
        /* dct = dc + dh_out * go * (1 - t^2), 1 - t^2 = ct (2 - ct) */
        const __m512 dot = _mm512_mul_ps(_mm512_mul_ps(dh_out, go), _mm512_mul_ps(ct, _mm512_sub_ps(two, ct)));
        const __m512 dct = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dc + j), dot);
        put_gate(dgr, dg, db, j, m, _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dct, gg), gi), ci));
        put_gate(dgr, dg, db, H + j, m, _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dct, cp), gf), cf));
        put_gate(dgr, dg, db, 2 * H + j, m,
                 _mm512_mul_ps(_mm512_mul_ps(dct, gi), _mm512_mul_ps(cg, _mm512_sub_ps(two, cg))));
        put_gate(dgr, dg, db, 3 * H + j, m, _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dh_out, t), go), co));
        _mm512_mask_storeu_ps(dc_prev + j, m, _mm512_mul_ps(dct, gf));
    }
}

static void cell_backward16_avx512(float *dgr, float *dc_prev, const uint16_t *act, const float *cprev,
                                   const float *dh, const float *dh2, const float *dc, size_t H) {
    cell_backward16_impl(dgr, NULL, NULL, dc_prev, act, cprev, NULL, dh, NULL, dh2, dc, H);
}

static void cell_backward_bf16_avx512(uint16_t *dg, float *db, float *dgr, float *dc_prev, const uint16_t *act,
                                      const uint16_t *cprev, const uint16_t *dh, const float *dh2, const float *dc,
                                      size_t H) {
    cell_backward16_impl(dgr, dg, db, dc_prev, act, NULL, cprev, NULL, dh, dh2, dc, H);
}

static inline __attribute__((always_inline)) void act16_pack_impl(uint16_t *dst, const float *src, size_t n,
                                                                  bool hw) {
    for (size_t i = 0; i < n; i += 32) {
        const __mmask16 m0 = tail_mask(n - i), m1 = n - i > 16 ? tail_mask(n - i - 16) : 0;
        const __m512i v = act16_encode_pair(_mm512_maskz_loadu_ps(m0, src + i), _mm512_maskz_loadu_ps(m1, src + i + 16), hw);
        _mm512_mask_storeu_epi16(dst + i, (__mmask32)m0 | (__mmask32)m1 << 16, v);
    }
}

static void cell_forward_bf16_avx512(uint16_t *act, uint16_t *c_save, float *c, uint16_t *h, const float *gr,
                                     const float *gr2, const float *bi, const float *bh, size_t H, bool stream) {
    cell_forward_bf16_impl(act, c_save, c, h, gr, gr2, bi, bh, H, stream, true);
}

static void cell_forward_bf16_avx512_soft(uint16_t *act, uint16_t *c_save, float *c, uint16_t *h, const float *gr,
                                          const float *gr2, const float *bi, const float *bh, size_t H,
                                          bool stream) {
    cell_forward_bf16_impl(act, c_save, c, h, gr, gr2, bi, bh, H, stream, false);
}

static void act16_pack_avx512(uint16_t *dst, const float *src, size_t n) { act16_pack_impl(dst, src, n, true); }

static void act16_pack_avx512_soft(uint16_t *dst, const float *src, size_t n) { act16_pack_impl(dst, src, n, false); }

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
    k->cell_backward_bf16 = cell_backward_bf16_avx512;
    k->cell_backward16 = cell_backward16_avx512;
    if (amp_cpu_get_features()->avx512_bf16) {
        k->cell_forward_bf16 = cell_forward_bf16_avx512;
        k->act16_pack = act16_pack_avx512;
    } else {
        amp_lstm_kernels_avx512_soft(k);
    }
    k->add3 = add3_avx512;
    k->cell_backward = cell_backward_avx512;
    k->acc = acc_avx512;
}

void amp_lstm_kernels_avx512_soft(amp_lstm_kernels *k) {
    k->cell_forward_bf16 = cell_forward_bf16_avx512_soft;
    k->act16_pack = act16_pack_avx512_soft;
}
