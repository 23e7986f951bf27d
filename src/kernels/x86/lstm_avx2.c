/* AVX2 LSTM pointwise kernels (kernels/lstm_kernels.h): 8 lanes, the
 * reference's multiplies and adds in the reference's order (no FMA), so the
 * same bits; tails run the scalar formula. */
#include <immintrin.h>

#include "../lstm_kernels.h"
#include "../vecmath.h"

/* the composition of this path's vecmath and add3 (no fused AVX2 kernel: the lstm model runs the
 * AVX-512 path on the machines measured) */
static void cell_forward_avx2(float *act, float *c_save, float *c, float *h, const float *gr, const float *bi,
                              const float *bh, size_t H, bool stream) {
    (void)stream;
    amp_lstm_cell_forward_composed(amp_vmath_kernels_for(AMP_ISA_AVX2), amp_lstm_kernels_for(AMP_ISA_AVX2), act,
                                   c_save, c, h, gr, bi, bh, H);
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
    k->acc = acc_avx2;
}
