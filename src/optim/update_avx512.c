/* The norm's sum of squares with AVX-512F, 16 floats at a time: the fused step's read-only pass.
 *
 * The scalar loop's twin (fused.c, optim_sum_squares) bit for bit: u = g * inv_scale in fp32, widened
 * to fp64 exactly, squared and added to lane i % 32. The scalar loop multiplies, then adds; here one
 * fused multiply-add does both, with the same bits, because the square of an fp32 value is exact in
 * fp64 (24 significant bits squared fit in 53): the one rounding is the add's either way. Four
 * registers hold the 32 lanes, so four adds are in flight. Each fp32 -> fp64 conversion takes half a
 * register of floats; AVX2 does 4 per instruction, this 8, and that is where the time went: 0.294 ms
 * against the AVX2 loop's 0.355 ms over 1.9M gradients in cache (Emerald Rapids core), where a plain
 * read takes 0.256 ms. The fused multiply-add then took the mlp's optimizer phase with the scaler from
 * 1.931 to 1.901 and 1.962 to 1.914 ms at one thread, 0.875 to 0.864 and 0.940 to 0.912 ms at two
 * (amp-fp16, switched every other timed step in one process, medians of 40 a side). Called only when
 * the CPU (and the AMP_ISA choice) allows AVX-512. */
#include "optim_internal.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(OPTIM_HAVE_AVX2)
#include <immintrin.h>

/* The upper 8 floats of u (AVX-512F only: the 32x8 extract would need AVX512DQ). */
__attribute__((target("avx512f"))) static inline __m256 upper_half(__m512 u) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1));
}

__attribute__((target("avx512f"))) void optim_sum_squares_avx512(const float *g, int64_t n, float inv_scale,
                                                                 double acc[OPTIM_LANES]) {
    _Static_assert(OPTIM_LANES == 32, "the loop below holds 32 lanes in 4 registers");
    __m512d a0 = _mm512_loadu_pd(acc), a1 = _mm512_loadu_pd(acc + 8), a2 = _mm512_loadu_pd(acc + 16),
            a3 = _mm512_loadu_pd(acc + 24);
    const __m512 inv = _mm512_set1_ps(inv_scale);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 u = _mm512_mul_ps(_mm512_loadu_ps(g + i), inv), v = _mm512_mul_ps(_mm512_loadu_ps(g + i + 16), inv);
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
    if (i < n) optim_sum_squares(g + i, n - i, inv_scale, acc); /* i is a multiple of 32: lanes line up */
}
#endif
