/* AVX-512 LSTM pointwise kernels (kernels/lstm_kernels.h): 16 lanes, the
 * reference's multiplies and adds in the reference's order (no FMA), so the
 * same bits; tails run the scalar formula. */
#include <immintrin.h>

#include "../lstm_kernels.h"

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
    k->add3 = add3_avx512;
    k->cell_backward = cell_backward_avx512;
    k->acc = acc_avx512;
}
