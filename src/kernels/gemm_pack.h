/* Internal: portable packing loops (the formats are described in gemm_kernels.h), written once and
 * compiled into each path's translation unit, so each gets that path's vectorizer and its own fp16
 * decoder. The includer defines, before including this header:
 *     static inline float gemm_f16_to_f32(uint16_t h);   an exact fp16 -> fp32 decode
 * Paths replace the loops that matter for speed with their own and keep these for the rest. */
#ifndef AMP_GEMM_PACK_H
#define AMP_GEMM_PACK_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "amp/dtype.h"

#if defined(__GNUC__)
#define GEMM_INLINE static inline __attribute__((always_inline))
#else
#define GEMM_INLINE static inline
#endif

static inline float gemm_f16_to_f32(uint16_t h);

static inline float gemm_bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16; /* bf16 is the top half of an fp32: exact */
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Element idx of a buffer of dtype dt (AMP_F32, AMP_F16 or AMP_BF16), decoded to fp32. dt is a
 * constant wherever this is inlined, so the switch folds away. */
GEMM_INLINE float gemm_load(amp_dtype dt, const void *src, int64_t idx) {
    switch (dt) {
    case AMP_F16: return gemm_f16_to_f32(((const uint16_t *)src)[idx]);
    case AMP_BF16: return gemm_bf16_to_f32(((const uint16_t *)src)[idx]);
    default: return ((const float *)src)[idx];
    }
}

/* AMP_GEMM_PACKED_F32 panels: dst[panel][p][i], panel = r x kc fp32. */
GEMM_INLINE void gemm_pack_f32_generic(float *dst /* [ceil(rows/r)][kc][r] */, const void *src, amp_dtype dt,
                                       int64_t ld, bool trans, int64_t rows, int64_t kc, int r) {
    if (trans) {
        /* M[i, p] = src[p * ld + i]: the panel's r values for one p are contiguous. Four source rows
         * at a time across all panels, so reads stream along rows instead of jumping a row (often a
         * page, where hardware prefetch stops) for every r values. */
        for (int64_t p0 = 0; p0 < kc; p0 += 4) {
            const int64_t p1 = kc - p0 < 4 ? kc : p0 + 4;
            for (int64_t i0 = 0; i0 < rows; i0 += r) {
                const int ri = rows - i0 < r ? (int)(rows - i0) : r;
                float *panel = dst + i0 * kc; /* panel i0 / r starts at (i0 / r) * r * kc */
                for (int64_t p = p0; p < p1; p++) {
                    for (int i = 0; i < ri; i++) panel[p * r + i] = gemm_load(dt, src, p * ld + i0 + i);
                    for (int i = ri; i < r; i++) panel[p * r + i] = 0.0f;
                }
            }
        }
        return;
    }
    for (int64_t i0 = 0; i0 < rows; i0 += r, dst += (int64_t)r * kc) {
        /* M[i, p] = src[i * ld + p]: read along each source row, write with stride r */
        const int ri = rows - i0 < r ? (int)(rows - i0) : r;
        for (int i = 0; i < ri; i++)
            for (int64_t p = 0; p < kc; p++) dst[p * r + i] = gemm_load(dt, src, (i0 + i) * ld + p);
        for (int i = ri; i < r; i++)
            for (int64_t p = 0; p < kc; p++) dst[p * r + i] = 0.0f;
    }
}

/* AMP_GEMM_PACKED_BF16_PAIRS panels from bf16: dst[panel][q][i][2], panel = r x 2*ceil(kc/2) bf16;
 * the pad element of an odd kc is +0, so the last pair adds an exact +0 product. */
GEMM_INLINE void gemm_pack_bf16_pairs_generic(uint16_t *dst, const uint16_t *src, int64_t ld, bool trans, int64_t rows,
                                              int64_t kc, int r) {
    const int64_t kq = (kc + 1) / 2;
    for (int64_t i0 = 0; i0 < rows; i0 += r, dst += 2 * (int64_t)r * kq) {
        const int ri = rows - i0 < r ? (int)(rows - i0) : r;
        if (trans) { /* source rows 2q and 2q+1 hold the two halves of the pairs, interleave them */
            for (int64_t q = 0; q < kq; q++) {
                const uint16_t *s0 = src + 2 * q * ld + i0;
                const bool has_odd = 2 * q + 1 < kc;
                uint16_t *d = dst + 2 * q * r;
                for (int i = 0; i < ri; i++) {
                    d[2 * i] = s0[i];
                    d[2 * i + 1] = has_odd ? s0[ld + i] : 0;
                }
                for (int i = 2 * ri; i < 2 * r; i++) d[i] = 0;
            }
        } else { /* a pair is two neighbours in a source row: one 32-bit copy */
            for (int i = 0; i < ri; i++) {
                const uint16_t *row = src + (i0 + i) * ld;
                for (int64_t q = 0; q < kc / 2; q++) memcpy(dst + 2 * (q * r + i), row + 2 * q, 4);
                if (kc & 1) {
                    dst[2 * ((kc / 2) * r + i)] = row[kc - 1];
                    dst[2 * ((kc / 2) * r + i) + 1] = 0;
                }
            }
            for (int i = ri; i < r; i++)
                for (int64_t q = 0; q < kq; q++) memset(dst + 2 * (q * r + i), 0, 4);
        }
    }
}

#endif /* AMP_GEMM_PACK_H */
