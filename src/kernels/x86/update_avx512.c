/* The norm's sum of squares with AVX-512F, 16 floats at a time: the fused step's read-only pass
 * (kernels/update_kernels.h). The AVX-512 path takes the AVX2 loops for everything else: the updates
 * are bound by memory and gain nothing from wider vectors, while this pass is bound by its fp32 -> fp64
 * conversions, which take half a register of floats each (AVX2 converts 4 per instruction, this 8).
 *
 * The scalar loop's twin (kernels/ref/update_ref.c, amp_sum_squares_ref) bit for bit: u = g * inv_scale
 * in fp32, widened to fp64 exactly, squared and added to lane i % 32. The scalar loop multiplies, then
 * adds; here one fused multiply-add does both, with the same bits, because the square of an fp32 value
 * is exact in fp64 (24 significant bits squared fit in 53): the one rounding is the add's either way.
 * Four registers hold the 32 lanes, so four adds are in flight. */
#include <immintrin.h>

#include "../update_kernels.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* The upper 8 floats of u (AVX-512F only: the 32x8 extract would need AVX512DQ). */
static inline __m256 upper_half(__m512 u) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1)); }

static void sum_squares(const float *g, int64_t n, float inv_scale, double acc[AMP_UPDATE_LANES]) {
    _Static_assert(AMP_UPDATE_LANES == 32, "the loop below holds 32 lanes in 4 registers");
    __m512d a0 = _mm512_loadu_pd(acc), a1 = _mm512_loadu_pd(acc + 8), a2 = _mm512_loadu_pd(acc + 16),
            a3 = _mm512_loadu_pd(acc + 24);
    const __m512 inv = _mm512_set1_ps(inv_scale);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 u = _mm512_mul_ps(_mm512_loadu_ps(g + i), inv);
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(g + i + 16), inv);
        const __m512d u0 = _mm512_cvtps_pd(_mm512_castps512_ps256(u)), u1 = _mm512_cvtps_pd(upper_half(u));
        const __m512d v0 = _mm512_cvtps_pd(_mm512_castps512_ps256(v)), v1 = _mm512_cvtps_pd(upper_half(v));
        a0 = _mm512_fmadd_pd(u0, u0, a0);
        a1 = _mm512_fmadd_pd(u1, u1, a1);
        a2 = _mm512_fmadd_pd(v0, v0, a2);
        a3 = _mm512_fmadd_pd(v1, v1, a3);
    }
    _mm512_storeu_pd(acc, a0);
    _mm512_storeu_pd(acc + 8, a1);
    _mm512_storeu_pd(acc + 16, a2);
    _mm512_storeu_pd(acc + 24, a3);
    if (i < n) amp_sum_squares_ref(g + i, n - i, inv_scale, acc); /* i is a multiple of 32: lanes line up */
}

void amp_update_kernels_avx512(amp_update_kernels *k) { k->sum_squares = sum_squares; }
