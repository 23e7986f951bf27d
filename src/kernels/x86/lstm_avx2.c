/* AVX2 LSTM pointwise kernels (kernels/lstm_kernels.h): 8 lanes, the
 * reference's multiplies and adds in the reference's order (no FMA), so the
 * same bits; tails run the scalar formula. */
#include <immintrin.h>

#include "../lstm_kernels.h"
#include "../vecmath.h"

/* the composition of this path's vecmath and add3 (no fused AVX2 kernel yet: lstm_avx512.c has one) */
static void cell_forward_avx2(float *act, float *c_save, float *c, float *h, const float *gr, const float *gr2,
                              const float *bi, const float *bh, size_t H, bool stream) {
    (void)stream;
    amp_lstm_cell_forward_composed(amp_vmath_kernels_for(AMP_ISA_AVX2), amp_lstm_kernels_for(AMP_ISA_AVX2), act,
                                   c_save, c, h, gr, gr2, bi, bh, H);
}

static void cell_backward_avx2(float *dgr, float *dc_prev, const float *act, const float *cprev, const float *dh,
                               const float *dh2, const float *dc, size_t H) {
    const __m256 one = _mm256_set1_ps(1.0f);
    size_t j = 0;
    for (; j + 8 <= H; j += 8) {
        const __m256 gi = _mm256_loadu_ps(act + j), gf = _mm256_loadu_ps(act + H + j);
        const __m256 gg = _mm256_loadu_ps(act + 2 * H + j), go = _mm256_loadu_ps(act + 3 * H + j);
        const __m256 t = _mm256_loadu_ps(act + 4 * H + j);
        __m256 dh_out = _mm256_loadu_ps(dh + j);
        if (dh2) dh_out = _mm256_add_ps(dh_out, _mm256_loadu_ps(dh2 + j));
        /* dct = dc + dh_out * go * (1 - t t) */
        const __m256 dct = _mm256_add_ps(
            _mm256_loadu_ps(dc + j), _mm256_mul_ps(_mm256_mul_ps(dh_out, go), _mm256_sub_ps(one, _mm256_mul_ps(t, t))));
        _mm256_storeu_ps(dgr + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(dct, gg), gi), _mm256_sub_ps(one, gi)));
        _mm256_storeu_ps(dgr + H + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(dct, _mm256_loadu_ps(cprev + j)), gf),
                                                    _mm256_sub_ps(one, gf)));
        _mm256_storeu_ps(dgr + 2 * H + j,
                         _mm256_mul_ps(_mm256_mul_ps(dct, gi), _mm256_sub_ps(one, _mm256_mul_ps(gg, gg))));
        _mm256_storeu_ps(dgr + 3 * H + j,
                         _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(dh_out, t), go), _mm256_sub_ps(one, go)));
        _mm256_storeu_ps(dc_prev + j, _mm256_mul_ps(dct, gf));
    }
    for (; j < H; j++) amp_lstm_cell_backward_at(dgr, dc_prev, act, cprev, dh, dh2, dc, H, j);
}

/* ---- act16 (lstm_kernels.h): the scalar codec's operations on 8 lanes ---- */

static inline __m256 with_sign_of(__m256 a, __m256 s) { /* copysign(a, s) for a with its sign bit clear */
    return _mm256_or_ps(a, _mm256_and_ps(s, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u))));
}

/* amp_lstm_act16_encode of 8 values, in the top halves of 32-bit lanes */
static inline __m256i act16_top(__m256 v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i a = _mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF));
    /* |v| in [0.5, 1) on the bits (a >= 0 as a signed integer; NaN is outside) */
    const __m256i b = _mm256_and_si256(_mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x3EFFFFFF)),
                                       _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3F800000), a));
    const __m256 w = _mm256_blendv_ps(v, _mm256_sub_ps(v, with_sign_of(_mm256_set1_ps(1.0f), v)), _mm256_castsi256_ps(b));
    const __m256i wi = _mm256_castps_si256(w);
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), _mm256_and_si256(b, _mm256_set1_epi32(0x20000000)));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(wi, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(_mm256_add_epi32(wi, bias), lsb);
    /* amp_lstm_act16_round's exceptions: a NaN quieted (its top half | 0x40), a zero or subnormal
     * to the zero of its sign (w = v in both cases: form A) */
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7F800000)), _mm256_setzero_si256());
    const __m256i q = _mm256_or_si256(x, _mm256_set1_epi32(0x00400000));
    const __m256i z = _mm256_and_si256(x, _mm256_set1_epi32((int)0x80000000u));
    return _mm256_blendv_epi8(_mm256_blendv_epi8(r, q, nan), z, tiny);
}

/* 16 values as act16: lo's 8, then hi's */
static inline __m256i act16_encode16(__m256 lo, __m256 hi) {
    const __m256i p = _mm256_packus_epi32(_mm256_srli_epi32(act16_top(lo), 16), _mm256_srli_epi32(act16_top(hi), 16));
    return _mm256_permute4x64_epi64(p, 0xD8); /* packus interleaves the 128-bit lanes */
}

static void act16_pack_avx2(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), act16_encode16(_mm256_loadu_ps(src + i), _mm256_loadu_ps(src + i + 8)));
    for (; i < n; i++) dst[i] = amp_lstm_act16_encode(src[i]);
}

/* amp_lstm_act16_decode of 8 patterns: v, and 1 - |v| in *comp */
static inline __m256 act16_decode8(const uint16_t *p, __m256 *comp) {
    const __m256 one = _mm256_set1_ps(1.0f), absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 raw = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)), 16));
    const __m256 b = _mm256_cmp_ps(_mm256_and_ps(raw, absm), _mm256_set1_ps(2.0f), _CMP_GE_OQ);
    const __m256 u = _mm256_blendv_ps(raw, _mm256_mul_ps(raw, _mm256_set1_ps(0x1p-64f)), b), au = _mm256_and_ps(u, absm);
    *comp = _mm256_blendv_ps(_mm256_sub_ps(one, au), au, b);
    return _mm256_blendv_ps(u, _mm256_sub_ps(u, with_sign_of(one, u)), b);
}

static void cell_backward16_avx2(float *dgr, float *dc_prev, const uint16_t *act, const float *cprev, const float *dh,
                                 const float *dh2, const float *dc, size_t H) {
    const __m256 two = _mm256_set1_ps(2.0f);
    size_t j = 0;
    for (; j + 8 <= H; j += 8) {
        __m256 ci, cf, cg, co, ct;
        const __m256 gi = act16_decode8(act + j, &ci), gf = act16_decode8(act + H + j, &cf);
        const __m256 gg = act16_decode8(act + 2 * H + j, &cg), go = act16_decode8(act + 3 * H + j, &co);
        const __m256 t = act16_decode8(act + 4 * H + j, &ct);
        __m256 dh_out = _mm256_loadu_ps(dh + j);
        if (dh2) dh_out = _mm256_add_ps(dh_out, _mm256_loadu_ps(dh2 + j));
        /* dct = dc + dh_out * go * (1 - t^2), 1 - t^2 = ct (2 - ct) */
        const __m256 dct = _mm256_add_ps(_mm256_loadu_ps(dc + j), _mm256_mul_ps(_mm256_mul_ps(dh_out, go),
                                                                               _mm256_mul_ps(ct, _mm256_sub_ps(two, ct))));
        _mm256_storeu_ps(dgr + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(dct, gg), gi), ci));
        _mm256_storeu_ps(dgr + H + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(dct, _mm256_loadu_ps(cprev + j)), gf), cf));
        _mm256_storeu_ps(dgr + 2 * H + j, _mm256_mul_ps(_mm256_mul_ps(dct, gi), _mm256_mul_ps(cg, _mm256_sub_ps(two, cg))));
        _mm256_storeu_ps(dgr + 3 * H + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(dh_out, t), go), co));
        _mm256_storeu_ps(dc_prev + j, _mm256_mul_ps(dct, gf));
    }
    for (; j < H; j++) amp_lstm_cell_backward16_at(dgr, dc_prev, act, cprev, dh, dh2, dc, H, j);
}

static void acc_avx2(float *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(src + i)));
    for (; i < n; i++) dst[i] += src[i];
}

static void add3_avx2(float *dst, const float *a, const float *b, const float *c, size_t n) {
    size_t i = 0;
    if (c) {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)), _mm256_loadu_ps(c + i)));
        for (; i < n; i++) dst[i] = a[i] + b[i] + c[i];
    } else {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
        for (; i < n; i++) dst[i] = a[i] + b[i];
    }
}

void amp_lstm_kernels_avx2(amp_lstm_kernels *k) {
    k->cell_forward = cell_forward_avx2;
    k->add3 = add3_avx2;
    k->cell_backward = cell_backward_avx2;
    k->cell_backward16 = cell_backward16_avx2;
    k->act16_pack = act16_pack_avx2;
    k->acc = acc_avx2;
}
