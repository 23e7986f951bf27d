/* Reference kernels of max pooling (kernels/pool_kernels.h; src/ops/pool.c drives them): any
 * kernel and stride on fp32 planes, and the kernel 2, stride 2 rows on fp32 and bf16. Always built:
 * the path every CPU can run, and the oracle the SIMD rows (src/kernels/x86/pool_*.c) are tested
 * against bit for bit. */
#include <math.h>
#include <string.h>

#include "../../core/float_bits.h"
#include "../pool_kernels.h"

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
void amp_max_pool_row_k2_ref(const float *restrict r0, const float *restrict r1, int64_t ow, float *restrict y,
                             uint8_t *restrict offsets) {
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

/* d = g + 0 where the offset matches, else +0: as bit masks, so the selects need no branches and
 * an inf or NaN gradient stays where it goes. */
void amp_max_pool_backward_row_k2_ref(const float *restrict g, const uint8_t *restrict offsets, int64_t ow,
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

void amp_max_pool_backward_row_k2_bf16_ref(const uint16_t *g, const uint8_t *offsets, int64_t ow, uint16_t *d0,
                                           uint16_t *d1) {
    for (int64_t ox = 0; ox < ow; ox++) {
        const uint16_t v = bf16_exact_bits(0.0f + bf16_value(g[ox])), k = offsets[ox];
        d0[2 * ox] = k == 0 ? v : 0, d0[2 * ox + 1] = k == 1 ? v : 0;
        d1[2 * ox] = k == 2 ? v : 0, d1[2 * ox + 1] = k == 3 ? v : 0;
    }
}

/* The reference path's max pooling entries (kernels/kernels.h): the rows, no whole-tensor loops. */
void amp_pool_kernels_ref(amp_pool_kernels *k) {
    k->row_k2 = amp_max_pool_row_k2_ref;
    k->backward_row_k2 = amp_max_pool_backward_row_k2_ref;
    k->row_k2_bf16 = amp_max_pool_row_k2_bf16_ref;
    k->backward_row_k2_bf16 = amp_max_pool_backward_row_k2_bf16_ref;
}
