/* 2-D max and average pooling, PyTorch's semantics without padding, floor mode: x [N, C, H, W] (or
 * [C, H, W]) -> [..., H', W'] with H' = (H - kernel) / stride + 1. The result keeps x's dtype. Max
 * pooling is exact (the max is one of the inputs); it saves, per output, where in its window the
 * element it took sits (one byte for kernels up to 16: pool_kernels.h), the first maximum in row-major
 * window order on ties and the last NaN when the window has any (torch's CPU kernel:
 * `if (val > maxval || isnan(val))`), and backward routes the gradient there.
 * Average pooling sums the window in fp32 and divides once; backward spreads dy / kernel^2 evenly. */
#include <math.h>
#include <string.h>

#include "amp/cpu.h"
#include "amp/formats.h"
#include "../core/parallel.h"
#include "op_util.h"
#include "../kernels/pool_kernels.h"
#include "../core/float_bits.h"

typedef struct {
    int64_t planes, h, w, oh, ow, kernel, stride;
} pool_geom;

static bool pool_geometry(amp_ctx *ctx, amp_op op, const amp_tensor *x, int kernel, int stride, pool_geom *pg) {
    char sx[64];
    if (x->ndim != 3 && x->ndim != 4) {
        amp_op_fail(ctx, op, "x %s must be [N, C, H, W] or [C, H, W]", amp_shape_str(x, sx, sizeof sx));
        return false;
    }
    if (kernel < 1 || stride < 1) {
        amp_op_fail(ctx, op, "kernel (%d) and stride (%d) must be at least 1", kernel, stride);
        return false;
    }
    pg->h = x->shape[x->ndim - 2], pg->w = x->shape[x->ndim - 1];
    pg->planes = amp_shape_numel(x->ndim - 2, x->shape);
    if (pg->h < kernel || pg->w < kernel) {
        amp_op_fail(ctx, op, "kernel %d is larger than the input %s", kernel, amp_shape_str(x, sx, sizeof sx));
        return false;
    }
    pg->kernel = kernel, pg->stride = stride;
    pg->oh = (pg->h - kernel) / stride + 1, pg->ow = (pg->w - kernel) / stride + 1;
    return true;
}

static amp_tensor *pool_output(amp_ctx *ctx, const amp_tensor *x, const pool_geom *pg) {
    int64_t shape[AMP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 2] = pg->oh, shape[x->ndim - 1] = pg->ow;
    return amp_ctx_new_tensor(ctx, x->dtype, x->ndim, shape, true);
}

static void save_geometry(amp_node *node, const pool_geom *pg) {
    node->i[0] = pg->planes, node->i[1] = pg->h, node->i[2] = pg->w, node->i[3] = pg->oh, node->i[4] = pg->ow;
    node->i[5] = pg->kernel, node->i[6] = pg->stride;
}

static pool_geom saved_geometry(const amp_node *node) {
    return (pool_geom){node->i[0], node->i[1], node->i[2], node->i[3], node->i[4], node->i[5], node->i[6]};
}

/* ---- max ---- */

static inline int64_t offset_get(const void *offsets, bool byte, int64_t i) {
    return byte ? ((const uint8_t *)offsets)[i] : ((const uint32_t *)offsets)[i];
}

/* One window element in scan order: it becomes the max when greater, or when it is NaN (NaN wins, as
 * in torch; a later NaN replaces an earlier one). Written as selects so the compiler need not branch
 * on data whose order is a coin flip. */
static inline void pool_pick(float v, int64_t idx, float *vmax, int64_t *best) {
    const bool take = v > *vmax || v != v;
    *vmax = take ? v : *vmax;
    *best = take ? idx : *best;
}

void amp_max_pool_plane_ref(const float *x, int64_t w, int64_t kernel, int64_t stride, int64_t oh, int64_t ow,
                            float *y, void *offsets) {
    const bool byte = kernel <= AMP_POOL_BYTE_KERNEL;
    for (int64_t oy = 0; oy < oh; oy++)
        for (int64_t ox = 0; ox < ow; ox++) {
            const float *top = x + oy * stride * w + ox * stride;
            int64_t best = 0;
            float vmax = -INFINITY;
            for (int64_t ky = 0; ky < kernel; ky++)
                for (int64_t kx = 0; kx < kernel; kx++) pool_pick(top[ky * w + kx], ky * kernel + kx, &vmax, &best);
            const int64_t o = oy * ow + ox;
            y[o] = vmax;
            if (byte)
                ((uint8_t *)offsets)[o] = (uint8_t)best;
            else
                ((uint32_t *)offsets)[o] = (uint32_t)best;
        }
}

void amp_max_pool_backward_plane_ref(const float *g, const void *offsets, int64_t w, int64_t kernel,
                                     int64_t stride, int64_t oh, int64_t ow, float *dx) {
    const bool byte = kernel <= AMP_POOL_BYTE_KERNEL;
    for (int64_t oy = 0; oy < oh; oy++)
        for (int64_t ox = 0; ox < ow; ox++) {
            const int64_t o = oy * ow + ox, off = offset_get(offsets, byte, o);
            dx[(oy * stride + off / kernel) * w + ox * stride + off % kernel] += g[o];
        }
}

static inline uint32_t pool_nan(uint32_t bits) { return (bits & 0x7fffffffu) > 0x7f800000u; }

/* An int32 that orders non-NaN floats as < does, with -0 and +0 equal (they compare equal, so neither
 * displaces the other): the bits for x >= +0, minus the magnitude's bits for x <= -0. A NaN of either
 * sign is INT32_MAX: once the max is NaN nothing but a NaN displaces it (v > NaN is false). */
static inline int32_t pool_key(uint32_t bits) {
    const uint32_t mag = bits & 0x7fffffffu, neg = 0u - (bits >> 31), nan = 0u - pool_nan(bits);
    const uint32_t key = (mag ^ neg) - neg; /* two's complement -mag when negative */
    return (int32_t)((key & ~nan) | (0x7fffffffu & nan));
}

/* Branch-free on purpose: which element of a window wins is data, and random, so branches would
 * mispredict about half the time. gcc branches on float selects, so the picks run on integer keys
 * (pool_key) and the bits of the picked element: (key > max key) | NaN, the reference's
 * (v > max) | (v != v) exactly. */
static void max_pool_row_k2_scalar(const float *restrict r0, const float *restrict r1, int64_t ow,
                                   float *restrict y, uint8_t *restrict offsets) {
    for (int64_t ox = 0; ox < ow; ox++) {
        uint32_t e[4];
        memcpy(e, r0 + 2 * ox, 8);
        memcpy(e + 2, r1 + 2 * ox, 8);
        /* a first: a > -inf or NaN takes it, and a = -inf leaves (-inf, 0), which is a as well */
        uint32_t m = e[0], k = 0;
        int32_t km = pool_key(e[0]);
        for (uint32_t i = 1; i < 4; i++) {
            const int32_t ki = pool_key(e[i]);
            const uint32_t t = 0u - ((uint32_t)(ki > km) | pool_nan(e[i])); /* all ones: take e[i] */
            m ^= (m ^ e[i]) & t, k ^= (k ^ i) & t, km = (int32_t)((uint32_t)km ^ (((uint32_t)km ^ (uint32_t)ki) & t));
        }
        memcpy(y + ox, &m, sizeof m);
        offsets[ox] = (uint8_t)k;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define POOL_HAVE_AVX2 1

/* Eight windows at a time from their rows' 16 + 16 elements: the even and odd elements split by
 * shuffles (in the lane order 0 1 4 5 2 3 6 7, put back at the end), then the scalar picks as compare
 * masks and blends: (v > max, ordered) | (v unordered with itself), which is (v > max) | (v != v).
 * *y gets the maxima, *k their offsets as int32 lanes. */
__attribute__((target("avx2"))) static inline void max_pool_k2_x8(__m256 t0, __m256 t1, __m256 u0, __m256 u1,
                                                                   __m256 *y, __m256i *k) {
    const __m256 a = _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 b = _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m256 c = _mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 d = _mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 1, 3, 1));
    __m256 m = a, o = _mm256_setzero_ps();
    __m256 t = _mm256_or_ps(_mm256_cmp_ps(b, m, _CMP_GT_OQ), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
    m = _mm256_blendv_ps(m, b, t), o = _mm256_blendv_ps(o, _mm256_castsi256_ps(_mm256_set1_epi32(1)), t);
    t = _mm256_or_ps(_mm256_cmp_ps(c, m, _CMP_GT_OQ), _mm256_cmp_ps(c, c, _CMP_UNORD_Q));
    m = _mm256_blendv_ps(m, c, t), o = _mm256_blendv_ps(o, _mm256_castsi256_ps(_mm256_set1_epi32(2)), t);
    t = _mm256_or_ps(_mm256_cmp_ps(d, m, _CMP_GT_OQ), _mm256_cmp_ps(d, d, _CMP_UNORD_Q));
    m = _mm256_blendv_ps(m, d, t), o = _mm256_blendv_ps(o, _mm256_castsi256_ps(_mm256_set1_epi32(3)), t);
    *y = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(m), _MM_SHUFFLE(3, 1, 2, 0)));
    *k = _mm256_permute4x64_epi64(_mm256_castps_si256(o), _MM_SHUFFLE(3, 1, 2, 0));
}

/* int32 lanes (0..3) -> 8 bytes */
__attribute__((target("avx2"))) static inline __m128i offsets_to_bytes(__m256i k) {
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
    return _mm_packus_epi16(w16, w16);
}

/* The row's whole blocks of 8 windows (both paths' main loop); returns the first window left. */
__attribute__((target("avx2"))) static inline int64_t max_pool_k2_blocks(const float *r0, const float *r1, int64_t ow,
                                                                        float *y, uint8_t *offsets) {
    int64_t ox = 0;
    __m256 m;
    __m256i k;
    for (; ox + 8 <= ow; ox += 8) {
        max_pool_k2_x8(_mm256_loadu_ps(r0 + 2 * ox), _mm256_loadu_ps(r0 + 2 * ox + 8), _mm256_loadu_ps(r1 + 2 * ox),
                       _mm256_loadu_ps(r1 + 2 * ox + 8), &m, &k);
        _mm256_storeu_ps(y + ox, m);
        _mm_storel_epi64((__m128i *)(void *)(offsets + ox), offsets_to_bytes(k));
    }
    return ox;
}

/* The cnn's rows are 14 and 7 windows: in a row of 8 or more, a tail is the row's last 8 windows once
 * more, over the blocks' last (the same values, plain moves); a row of under 8 goes through one vector
 * with masked loads (lanes past the row read as 0; their windows are computed and dropped) and
 * stores. */
__attribute__((target("avx2"))) static void max_pool_row_k2_avx2(const float *r0, const float *r1, int64_t ow,
                                                                  float *y, uint8_t *offsets) {
    const int64_t ox = max_pool_k2_blocks(r0, r1, ow, y, offsets);
    __m256 m;
    __m256i k;
    if (ox >= 8 && ox < ow) {
        max_pool_k2_blocks(r0 + 2 * (ow - 8), r1 + 2 * (ow - 8), 8, y + ow - 8, offsets + ow - 8);
    } else if (ox < ow) {
        const int n = (int)(ow - ox);
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i in_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n), lane);     /* 2n input elements */
        const __m256i in_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n - 8), lane);
        const __m256i out = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);           /* n outputs */
        max_pool_k2_x8(_mm256_maskload_ps(r0 + 2 * ox, in_lo), _mm256_maskload_ps(r0 + 2 * ox + 8, in_hi),
                       _mm256_maskload_ps(r1 + 2 * ox, in_lo), _mm256_maskload_ps(r1 + 2 * ox + 8, in_hi), &m, &k);
        _mm256_maskstore_ps(y + ox, out, m);
        uint8_t bytes[8];
        _mm_storel_epi64((__m128i *)(void *)bytes, offsets_to_bytes(k));
        for (int i = 0; i < n; i++) offsets[ox + i] = bytes[i];
    }
}
#endif

/* AVX-512 (VL, BW): the same, with the tail as AVX-512 masked loads and stores, which are not
 * microcoded (AVX2's maskload and maskstore are, on AMD: the cnn's rows are 14 and 7 windows, so
 * every row has a tail; the fp32 forward pools were 1.6% of its step). */
__attribute__((target("avx2,avx512f,avx512vl,avx512bw"))) static void
max_pool_row_k2_avx512(const float *r0, const float *r1, int64_t ow, float *y, uint8_t *offsets) {
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
__attribute__((target("avx2,avx512f,avx512vl,avx512bw"))) static void
max_pool_rows_k2_avx512(const float *xs, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow, float *ys,
                        uint8_t *offsets) {
    for (int64_t p = 0; p < planes; p++)
        for (int64_t oy = 0; oy < oh; oy++) {
            const float *r0 = xs + (p * h + 2 * oy) * w;
            const int64_t o0 = (p * oh + oy) * ow;
            max_pool_row_k2_avx512(r0, r0 + w, ow, ys + o0, offsets + o0);
        }
}

void amp_max_pool_row_k2(const float *restrict r0, const float *restrict r1, int64_t ow, float *restrict y,
                         uint8_t *restrict offsets) {
#if defined(POOL_HAVE_AVX2)
    if (amp_isa_active() == AMP_ISA_AVX512) {
        max_pool_row_k2_avx512(r0, r1, ow, y, offsets);
        return;
    }
    if (amp_isa_active() >= AMP_ISA_AVX2) {
        max_pool_row_k2_avx2(r0, r1, ow, y, offsets);
        return;
    }
#endif
    max_pool_row_k2_scalar(r0, r1, ow, y, offsets);
}

/* d = g + 0 where the offset matches, else +0: as bit masks, so the selects need no branches and
 * an inf or NaN gradient stays where it goes. */
static void max_pool_backward_row_k2_scalar(const float *restrict g, const uint8_t *restrict offsets, int64_t ow,
                                            float *restrict d0, float *restrict d1) {
    for (int64_t ox = 0; ox < ow; ox++) {
        const float v = 0.0f + g[ox];
        uint32_t bits;
        memcpy(&bits, &v, sizeof bits);
        const uint32_t k = offsets[ox];
        const uint32_t w0 = bits & (0u - (uint32_t)(k == 0)), w1 = bits & (0u - (uint32_t)(k == 1));
        const uint32_t w2 = bits & (0u - (uint32_t)(k == 2)), w3 = bits & (0u - (uint32_t)(k == 3));
        memcpy(d0 + 2 * ox, &w0, sizeof w0);
        memcpy(d0 + 2 * ox + 1, &w1, sizeof w1);
        memcpy(d1 + 2 * ox, &w2, sizeof w2);
        memcpy(d1 + 2 * ox + 1, &w3, sizeof w3);
    }
}

#if defined(POOL_HAVE_AVX2)
/* Eight windows: g + 0 masked by offset == 0, 1, 2, 3 (the same bits as the scalar selects), then
 * (0, 1) and (2, 3) interleaved into the two rows. */
__attribute__((target("avx2"))) static inline void max_pool_backward_k2_x8(__m256 g, __m256i k, __m256 *d0lo,
                                                                            __m256 *d0hi, __m256 *d1lo,
                                                                            __m256 *d1hi) {
    const __m256 v = _mm256_add_ps(_mm256_setzero_ps(), g);
    const __m256 w0 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_setzero_si256())));
    const __m256 w1 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(1))));
    const __m256 w2 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(2))));
    const __m256 w3 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(3))));
    const __m256 a = _mm256_unpacklo_ps(w0, w1), b = _mm256_unpackhi_ps(w0, w1);
    const __m256 c = _mm256_unpacklo_ps(w2, w3), d = _mm256_unpackhi_ps(w2, w3);
    *d0lo = _mm256_permute2f128_ps(a, b, 0x20), *d0hi = _mm256_permute2f128_ps(a, b, 0x31);
    *d1lo = _mm256_permute2f128_ps(c, d, 0x20), *d1hi = _mm256_permute2f128_ps(c, d, 0x31);
}

/* The row's whole blocks of 8 windows (both paths' main loop); returns the first window left. */
__attribute__((target("avx2"))) static inline int64_t max_pool_backward_k2_blocks(const float *g, const uint8_t *offsets,
                                                                                 int64_t ow, float *d0, float *d1) {
    int64_t ox = 0;
    __m256 a, b, c, d;
    for (; ox + 8 <= ow; ox += 8) {
        const __m256i k = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(offsets + ox)));
        max_pool_backward_k2_x8(_mm256_loadu_ps(g + ox), k, &a, &b, &c, &d);
        _mm256_storeu_ps(d0 + 2 * ox, a), _mm256_storeu_ps(d0 + 2 * ox + 8, b);
        _mm256_storeu_ps(d1 + 2 * ox, c), _mm256_storeu_ps(d1 + 2 * ox + 8, d);
    }
    return ox;
}

__attribute__((target("avx2"))) static void max_pool_backward_row_k2_avx2(const float *g, const uint8_t *offsets,
                                                                           int64_t ow, float *d0, float *d1) {
    const int64_t ox = max_pool_backward_k2_blocks(g, offsets, ow, d0, d1);
    if (ox == ow) return;
    if (ox >= 8) { /* the row's last 8 windows once more, over the blocks' last: the same values, plain stores */
        max_pool_backward_k2_blocks(g + ow - 8, offsets + ow - 8, 8, d0 + 2 * (ow - 8), d1 + 2 * (ow - 8));
        return;
    }
    /* a row of under 8 windows in scalar code: four masked stores (slow on AMD: microcoded) cost more */
    max_pool_backward_row_k2_scalar(g + ox, offsets + ox, ow - ox, d0 + 2 * ox, d1 + 2 * ox);
}

/* AVX-512 (VL, BW): the same, with the tail of up to 7 windows as one more vector under masks
 * (AVX-512's masked loads and stores are not microcoded). The cnn's second pool has 7 windows per
 * row, all of which took the scalar tail: 1.2-1.6% of its step. */
__attribute__((target("avx2,avx512f,avx512vl,avx512bw"))) static void
max_pool_backward_row_k2_avx512(const float *g, const uint8_t *offsets, int64_t ow, float *d0, float *d1) {
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
#endif

/* bf16 bits -> the fp32 they encode (exact) */
static inline float bf16_value(uint16_t h) { return amp_f32_from_bits(amp_bf16_decode(h)); }

/* fp32 -> bf16 bits for a value that is a decoded bf16 (exact), NaN as amp_convert writes it */
static inline uint16_t bf16_exact_bits(float v) {
    const uint32_t bits = amp_f32_bits(v);
    return pool_nan(bits) ? (uint16_t)(((bits >> 31) << 15) | 0x7FC0u) : (uint16_t)(bits >> 16);
}

void amp_max_pool_row_k2_bf16_ref(const uint16_t *r0, const uint16_t *r1, int64_t ow, uint16_t *y,
                                  uint8_t *offsets) {
    for (int64_t ox = 0; ox < ow; ox++) {
        const uint16_t e[4] = {r0[2 * ox], r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]};
        float vmax = -INFINITY;
        int64_t best = 0;
        for (int i = 0; i < 4; i++) pool_pick(bf16_value(e[i]), i, &vmax, &best);
        y[ox] = bf16_exact_bits(vmax);
        offsets[ox] = (uint8_t)best;
    }
}

#if defined(POOL_HAVE_AVX2)
/* 16 windows at a time: each row's 32 bf16 widened to fp32 (a shift: exact), split into the even
 * and odd elements by permutes, the picks of max_pool_k2_x8 as compare masks, the max narrowed back
 * (a shift, or sign | 0x7FC0 for NaN); the tail under masks. Replaces a decode of the rows, the fp32
 * row kernel and an encode of the outputs (the cnn's bf16 forward pools: 1% of its step). */
/* n <= 16 windows: t and u hold their top and bottom rows (2n bf16 each, zeros after) */
__attribute__((target("avx2,avx512f,avx512vl,avx512bw"))) static inline void
max_pool_k2_bf16_x16(__m512i t, __m512i u, int n, uint16_t *y, uint8_t *offsets) {
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

__attribute__((target("avx2,avx512f,avx512vl,avx512bw"))) static void
max_pool_row_k2_bf16_avx512(const uint16_t *r0, const uint16_t *r1, int64_t ow, uint16_t *y, uint8_t *offsets) {
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
__attribute__((target("avx2,avx512f,avx512vl,avx512bw"))) static void
max_pool_rows_k2_bf16_avx512(const uint16_t *xs, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                             uint16_t *ys, uint8_t *offsets) {
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
#endif

void amp_max_pool_row_k2_bf16(const uint16_t *r0, const uint16_t *r1, int64_t ow, uint16_t *y, uint8_t *offsets) {
#if defined(POOL_HAVE_AVX2)
    if (amp_isa_active() == AMP_ISA_AVX512) {
        max_pool_row_k2_bf16_avx512(r0, r1, ow, y, offsets);
        return;
    }
#endif
    amp_max_pool_row_k2_bf16_ref(r0, r1, ow, y, offsets);
}

void amp_max_pool_backward_row_k2(const float *restrict g, const uint8_t *restrict offsets, int64_t ow,
                                  float *restrict d0, float *restrict d1) {
#if defined(POOL_HAVE_AVX2)
    if (amp_isa_active() == AMP_ISA_AVX512) {
        max_pool_backward_row_k2_avx512(g, offsets, ow, d0, d1);
        return;
    }
    if (amp_isa_active() >= AMP_ISA_AVX2) {
        max_pool_backward_row_k2_avx2(g, offsets, ow, d0, d1);
        return;
    }
#endif
    max_pool_backward_row_k2_scalar(g, offsets, ow, d0, d1);
}

void amp_max_pool_backward_row_k2_bf16_ref(const uint16_t *g, const uint8_t *offsets, int64_t ow, uint16_t *d0,
                                           uint16_t *d1) {
    for (int64_t ox = 0; ox < ow; ox++) {
        const uint16_t v = bf16_exact_bits(0.0f + bf16_value(g[ox])), k = offsets[ox];
        d0[2 * ox] = k == 0 ? v : 0, d0[2 * ox + 1] = k == 1 ? v : 0;
        d1[2 * ox] = k == 2 ? v : 0, d1[2 * ox + 1] = k == 3 ? v : 0;
    }
}

#if defined(POOL_HAVE_AVX2)
/* 16 windows at a time in 32-bit lanes: g's bits with -0 -> +0 and NaN -> sign | 0x7FC0 (what 0 + g
 * then the encode give), masked by offset == 0..3, and each row's pair of windows packed as the
 * two halves of a lane (element 2ox low, 2ox + 1 high): one 64-byte store per row, masked in the
 * tail. Replaces a decode of dY, the fp32 row kernel and an encode of dx. */
/* n <= 16 windows' dY g and offsets -> lane j of *r0, *r1: the two elements of window j in its top
 * and bottom row (low half: the even element) */
__attribute__((target("avx2,avx512f,avx512vl,avx512bw"))) static inline void
max_pool_backward_k2_bf16_x16(const uint16_t *g, const uint8_t *offsets, __mmask16 kn, __m512i *r0, __m512i *r1) {
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

__attribute__((target("avx2,avx512f,avx512vl,avx512bw"))) static void
max_pool_backward_row_k2_bf16_avx512(const uint16_t *g, const uint8_t *offsets, int64_t ow, uint16_t *d0,
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

/* The backward's rows the same way (max_pool_backward_k2 describes the borders). */
__attribute__((target("avx2,avx512f,avx512vl,avx512bw"))) static void
max_pool_backward_rows_k2_bf16_avx512(const uint16_t *gs, const uint8_t *offsets, int64_t planes, int64_t h,
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
#endif

void amp_max_pool_backward_row_k2_bf16(const uint16_t *g, const uint8_t *offsets, int64_t ow, uint16_t *d0,
                                       uint16_t *d1) {
#if defined(POOL_HAVE_AVX2)
    if (amp_isa_active() == AMP_ISA_AVX512) {
        max_pool_backward_row_k2_bf16_avx512(g, offsets, ow, d0, d1);
        return;
    }
#endif
    amp_max_pool_backward_row_k2_bf16_ref(g, offsets, ow, d0, d1);
}

/* The kernel 2, stride 2 path works on fp32 copies of a few rows at a time (in L1) instead of an fp32
 * copy of the whole input: this many floats of input rows per block. */
#define POOL_K2_BLOCK 4096

static bool use_k2_path(const pool_geom *pg) {
    return pg->kernel == 2 && pg->stride == 2 && 2 * pg->w <= POOL_K2_BLOCK;
}

/* kernel 2, stride 2 backward in blocks of output rows: g ([planes, oh, ow], contiguous, dtype gdt)
 * decoded a block at a time, the block's input rows written in fp32 (in L1) and encoded into dst
 * ([planes, h, w], dtype ddt) in one amp_convert, or written in place when ddt is f32. Every element
 * of dst is written: the rows and column floor mode leaves out get +0 (all-zero bits in every float
 * dtype). The values are those of the fp32 dx that amp_grad_accumulate would round to ddt. */
static void max_pool_backward_k2_planes(const pool_geom *pg, const void *g, amp_dtype gdt, const uint8_t *offsets,
                                        void *dst, amp_dtype ddt) {
    const size_t ges = amp_dtype_size(gdt), des = amp_dtype_size(ddt);
    const int64_t rows = POOL_K2_BLOCK / (2 * pg->w) < pg->oh ? POOL_K2_BLOCK / (2 * pg->w) : pg->oh;
    float gb[POOL_K2_BLOCK / 4], db[POOL_K2_BLOCK];
#if defined(POOL_HAVE_AVX2)
    if (gdt == AMP_BF16 && ddt == AMP_BF16 && amp_isa_active() == AMP_ISA_AVX512) { /* no fp32 copies */
        max_pool_backward_rows_k2_bf16_avx512(g, offsets, pg->planes, pg->h, pg->w, pg->oh, pg->ow, dst);
        return;
    }
#endif
    for (int64_t p = 0; p < pg->planes; p++) {
        for (int64_t oy0 = 0; oy0 < pg->oh; oy0 += rows) {
            const int64_t nr = pg->oh - oy0 < rows ? pg->oh - oy0 : rows;
            const int64_t o0 = (p * pg->oh + oy0) * pg->ow, i0 = (p * pg->h + 2 * oy0) * pg->w;
            const unsigned char *gsrc = (const unsigned char *)g + (size_t)o0 * ges;
            const float *gr = gdt == AMP_F32 ? (const float *)(const void *)gsrc : gb;
            float *d = ddt == AMP_F32 ? (float *)dst + i0 : db;
            if (gdt != AMP_F32) amp_convert(gb, AMP_F32, gsrc, gdt, (size_t)(nr * pg->ow));
            for (int64_t i = 0; i < nr; i++) {
                float *d0 = d + 2 * i * pg->w, *d1 = d0 + pg->w;
                amp_max_pool_backward_row_k2(gr + i * pg->ow, offsets + o0 + i * pg->ow, pg->ow, d0, d1);
                if (pg->w > 2 * pg->ow) d0[pg->w - 1] = d1[pg->w - 1] = 0.0f;
            }
            if (ddt != AMP_F32)
                amp_convert((unsigned char *)dst + (size_t)i0 * des, ddt, db, AMP_F32, (size_t)(2 * nr * pg->w));
        }
        if (pg->h > 2 * pg->oh)
            memset((unsigned char *)dst + (size_t)((p * pg->h + pg->h - 1) * pg->w) * des, 0, (size_t)pg->w * des);
    }
}

/* Planes are independent, and each is computed the same wherever it falls: a range of them runs as
 * its own pooling with pointers moved to its first plane, so splitting the planes between threads
 * leaves every value as it is. */
typedef struct k2_job {
    const pool_geom *pg;
    const void *src;  /* forward: x; backward: dY */
    amp_dtype src_dt;
    void *dst;        /* forward: y; backward: dX */
    amp_dtype dst_dt;
    const uint8_t *offsets_in; /* backward: the forward's window offsets [planes, oh, ow] */
    uint8_t *offsets_out;      /* forward: where they go */
} k2_job;

/* Below this many input elements a thread, one thread (a 28 x 28 plane is 784). */
#define POOL_MIN_PER_THREAD 16384

static int64_t pool_min_planes(const pool_geom *pg) {
    const int64_t plane = pg->h * pg->w > 0 ? pg->h * pg->w : 1;
    return POOL_MIN_PER_THREAD / plane > 1 ? POOL_MIN_PER_THREAD / plane : 1;
}

static void max_pool_backward_k2_range(void *arg, int64_t p0, int64_t p1, int thread_id) {
    (void)thread_id;
    const k2_job *j = arg;
    pool_geom sub = *j->pg;
    sub.planes = p1 - p0;
    const int64_t out0 = p0 * sub.oh * sub.ow, in0 = p0 * sub.h * sub.w;
    max_pool_backward_k2_planes(&sub, (const char *)j->src + (size_t)out0 * amp_dtype_size(j->src_dt), j->src_dt,
                                j->offsets_in + out0, (char *)j->dst + (size_t)in0 * amp_dtype_size(j->dst_dt),
                                j->dst_dt);
}

static void max_pool_backward_k2(const pool_geom *pg, const void *g, amp_dtype gdt, const uint8_t *offsets,
                                 void *dst, amp_dtype ddt) {
    k2_job job = {pg, g, gdt, dst, ddt, offsets, NULL};
    amp_parallel_range(pg->planes, pool_min_planes(pg), 1, max_pool_backward_k2_range, &job);
}

static bool grad_dtype_ok(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

static void max_pool_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0];
    const pool_geom pg = saved_geometry(node);
    const void *offsets = node->saved; /* [planes, oh, ow] window offsets */
    const int64_t n_in = pg.planes * pg.h * pg.w, plane_out = pg.oh * pg.ow, plane_in = pg.h * pg.w;
    if (use_k2_path(&pg)) {
        /* dY as it is when it is contiguous (decoded a block at a time), else through amp_grad_out */
        const amp_tensor *gt = node->out->grad;
        const bool direct = gt && amp_tensor_is_contiguous(gt) && grad_dtype_ok(gt->dtype);
        const void *g = direct ? gt->data : amp_grad_out(ctx, node);
        if (!g) return;
        const amp_dtype gdt = direct ? gt->dtype : AMP_F32;
        if (!x->grad && x->requires_grad) {
            /* x's first gradient, written in x's dtype (what amp_grad_accumulate would create) */
            amp_tensor *grad = amp_ctx_new_tensor(ctx, x->dtype, x->ndim, x->shape, true);
            if (!grad) return;
            max_pool_backward_k2(&pg, g, gdt, offsets, grad->data, x->dtype);
            x->grad = grad;
            return;
        }
        float *dx = amp_f32_scratch(ctx, n_in);
        if (!dx) return;
        max_pool_backward_k2(&pg, g, gdt, offsets, dx, AMP_F32);
        amp_grad_accumulate(ctx, x, dx);
        return;
    }
    const float *g = amp_grad_out(ctx, node);
    float *dx = amp_f32_scratch(ctx, n_in);
    if (!g || !dx) return;
    const size_t osize = pg.kernel <= AMP_POOL_BYTE_KERNEL ? 1 : 4;
    memset(dx, 0, (size_t)n_in * sizeof *dx);
    for (int64_t p = 0; p < pg.planes; p++)
        amp_max_pool_backward_plane_ref(g + p * plane_out, (const char *)offsets + (size_t)(p * plane_out) * osize,
                                        pg.w, pg.kernel, pg.stride, pg.oh, pg.ow, dx + p * plane_in);
    amp_grad_accumulate(ctx, x, dx);
}

/* kernel 2, stride 2, x contiguous: planes in blocks of output rows, each block's input rows decoded to
 * fp32 in one amp_convert (f16/bf16; an f32 x is read in place), its outputs encoded in one. Max
 * pooling is exact, so the output's bits are the picked input's (rounding an exact value). */
static void max_pool_k2_planes(const pool_geom *pg, const void *xdata, amp_dtype dt, void *ydata, uint8_t *offsets) {
    const size_t es = amp_dtype_size(dt);
    const int64_t rows = POOL_K2_BLOCK / (2 * pg->w) < pg->oh ? POOL_K2_BLOCK / (2 * pg->w) : pg->oh;
    float in[POOL_K2_BLOCK], yb[POOL_K2_BLOCK / 4];
#if defined(POOL_HAVE_AVX2)
    if (dt == AMP_BF16 && amp_isa_active() == AMP_ISA_AVX512) { /* no decoded copy: the same bits */
        max_pool_rows_k2_bf16_avx512(xdata, pg->planes, pg->h, pg->w, pg->oh, pg->ow, ydata, offsets);
        return;
    }
#endif
#if defined(POOL_HAVE_AVX2)
    if (dt == AMP_F32 && amp_isa_active() == AMP_ISA_AVX512) { /* the rows in place, one path check */
        max_pool_rows_k2_avx512(xdata, pg->planes, pg->h, pg->w, pg->oh, pg->ow, ydata, offsets);
        return;
    }
#endif
    for (int64_t p = 0; p < pg->planes; p++)
        for (int64_t oy0 = 0; oy0 < pg->oh; oy0 += rows) {
            const int64_t nr = pg->oh - oy0 < rows ? pg->oh - oy0 : rows;
            const int64_t o0 = (p * pg->oh + oy0) * pg->ow;
            const unsigned char *src = (const unsigned char *)xdata + (size_t)((p * pg->h + 2 * oy0) * pg->w) * es;
            const float *r = dt == AMP_F32 ? (const float *)(const void *)src : in;
            float *y = dt == AMP_F32 ? (float *)ydata + o0 : yb;
            if (dt != AMP_F32) amp_convert(in, AMP_F32, src, dt, (size_t)(2 * nr * pg->w));
            for (int64_t i = 0; i < nr; i++)
                amp_max_pool_row_k2(r + 2 * i * pg->w, r + (2 * i + 1) * pg->w, pg->ow, y + i * pg->ow,
                                    offsets + o0 + i * pg->ow);
            if (dt != AMP_F32)
                amp_convert((unsigned char *)ydata + (size_t)o0 * es, dt, yb, AMP_F32, (size_t)(nr * pg->ow));
        }
}

static void max_pool_k2_range(void *arg, int64_t p0, int64_t p1, int thread_id) {
    (void)thread_id;
    const k2_job *j = arg;
    pool_geom sub = *j->pg;
    sub.planes = p1 - p0;
    const int64_t out0 = p0 * sub.oh * sub.ow; /* y has x's dtype */
    max_pool_k2_planes(&sub, (const char *)j->src + (size_t)(p0 * sub.h * sub.w) * amp_dtype_size(j->src_dt), j->src_dt,
                       (char *)j->dst + (size_t)out0 * amp_dtype_size(j->dst_dt), j->offsets_out + out0);
}

/* max_pool_k2_planes over all planes, split between threads (k2_job) */
static void max_pool_k2(const amp_tensor *x, amp_tensor *out, const pool_geom *pg, uint8_t *offsets) {
    k2_job job = {pg, x->data, x->dtype, out->data, x->dtype, NULL, offsets};
    amp_parallel_range(pg->planes, pool_min_planes(pg), 1, max_pool_k2_range, &job);
}

amp_tensor *amp_max_pool2d(amp_ctx *ctx, amp_tensor *x, int kernel, int stride) {
    const amp_op op = AMP_OP_MAX_POOL2D;
    pool_geom pg;
    if (!amp_op_input_ok(ctx, op, x) || !amp_autocast_inputs(ctx, op, &x, 1) ||
        !pool_geometry(ctx, op, x, kernel, stride, &pg))
        return NULL;
    amp_tensor *out = pool_output(ctx, x, &pg);
    if (!out) return NULL;
    const int64_t n_out = pg.planes * pg.oh * pg.ow, plane_out = pg.oh * pg.ow;
    const size_t osize = pg.kernel <= AMP_POOL_BYTE_KERNEL ? 1 : 4;
    amp_arena_mark m = amp_scratch_mark(ctx);
    /* the offsets go straight into the arena when backward will need them */
    const size_t obytes = (size_t)(n_out > 0 ? n_out : 1) * osize;
    const bool record = amp_autograd_will_record(ctx, &x, 1);
    void *offsets = record ? amp_ctx_alloc(ctx, obytes) : amp_scratch_alloc(ctx, obytes);
    if (!offsets) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    if (use_k2_path(&pg) && amp_tensor_is_contiguous(x)) {
        max_pool_k2(x, out, &pg, offsets);
    } else {
        const float *xv = amp_f32_view(ctx, x);
        float *y = amp_f32_scratch(ctx, n_out);
        if (!xv || !y) {
            amp_scratch_release(ctx, m);
            return NULL;
        }
        for (int64_t p = 0; p < pg.planes; p++)
            amp_max_pool_plane_ref(xv + p * pg.h * pg.w, pg.w, pg.kernel, pg.stride, pg.oh, pg.ow, y + p * plane_out,
                                   (char *)offsets + (size_t)(p * plane_out) * osize);
        amp_store_f32(ctx, out, y);
    }
    amp_scratch_release(ctx, m);
    if (ctx->status != AMP_OK) return NULL;
    amp_node *node = amp_autograd_record(ctx, op, x->dtype, out, &x, 1, max_pool_backward);
    if (node) {
        save_geometry(node, &pg);
        node->saved = offsets;
    }
    return ctx->status == AMP_OK ? out : NULL;
}

/* ---- average ---- */

static void avg_pool_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0];
    const pool_geom pg = saved_geometry(node);
    const int64_t n_in = pg.planes * pg.h * pg.w;
    const float inv = 1.0f / (float)(pg.kernel * pg.kernel);
    const float *g = amp_grad_out(ctx, node);
    float *dx = amp_f32_scratch(ctx, n_in);
    if (!g || !dx) return;
    memset(dx, 0, (size_t)n_in * sizeof *dx);
    for (int64_t p = 0; p < pg.planes; p++)
        for (int64_t oy = 0; oy < pg.oh; oy++)
            for (int64_t ox = 0; ox < pg.ow; ox++) {
                const float share = g[(p * pg.oh + oy) * pg.ow + ox] * inv;
                for (int64_t ky = 0; ky < pg.kernel; ky++) {
                    float *row = dx + (p * pg.h + oy * pg.stride + ky) * pg.w + ox * pg.stride;
                    for (int64_t kx = 0; kx < pg.kernel; kx++) row[kx] += share;
                }
            }
    amp_grad_accumulate(ctx, x, dx);
}

amp_tensor *amp_avg_pool2d(amp_ctx *ctx, amp_tensor *x, int kernel, int stride) {
    const amp_op op = AMP_OP_AVG_POOL2D;
    pool_geom pg;
    if (!amp_op_input_ok(ctx, op, x) || !amp_autocast_inputs(ctx, op, &x, 1) ||
        !pool_geometry(ctx, op, x, kernel, stride, &pg))
        return NULL;
    amp_tensor *out = pool_output(ctx, x, &pg);
    if (!out) return NULL;
    const int64_t n_out = pg.planes * pg.oh * pg.ow;
    const float area = (float)(pg.kernel * pg.kernel);
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *xv = amp_f32_view(ctx, x);
    float *y = amp_f32_scratch(ctx, n_out);
    if (!xv || !y) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    for (int64_t p = 0; p < pg.planes; p++)
        for (int64_t oy = 0; oy < pg.oh; oy++)
            for (int64_t ox = 0; ox < pg.ow; ox++) {
                float sum = 0.0f;
                for (int64_t ky = 0; ky < pg.kernel; ky++) {
                    const float *row = xv + (p * pg.h + oy * pg.stride + ky) * pg.w + ox * pg.stride;
                    for (int64_t kx = 0; kx < pg.kernel; kx++) sum += row[kx];
                }
                y[(p * pg.oh + oy) * pg.ow + ox] = sum / area;
            }
    amp_store_f32(ctx, out, y);
    amp_scratch_release(ctx, m);
    amp_node *node = amp_autograd_record(ctx, op, x->dtype, out, &x, 1, avg_pool_backward);
    if (node) save_geometry(node, &pg);
    return ctx->status == AMP_OK ? out : NULL;
}
