/* Internal: max pooling's kernels on fp32 and bf16 rows and planes (src/ops/pool.c drives them): the
 * references in src/kernels/ref/pool_ref.c, the SIMD versions in src/kernels/x86/pool_avx2.c and
 * pool_avx512.c (the tests compare them with the references bit for bit).
 *
 * What backward needs per output is where its maximum sits in the window: the window offset
 * ky * kernel + kx, one byte while kernel <= AMP_POOL_BYTE_KERNEL (the 2x2 pools of a cnn: 1 byte per
 * output instead of an int64 flat index), else a uint32. The pick is PyTorch's CPU rule: scan the
 * window row-major, take an element when it is greater than the max so far or NaN (so the first
 * maximum wins ties and the last NaN wins; a window of -inf gives -inf at offset 0). */
#ifndef AMP_POOL_KERNELS_H
#define AMP_POOL_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/cpu.h"

/* The largest kernel whose window offsets (kernel^2 - 1) fit a byte. */
#define AMP_POOL_BYTE_KERNEL 16

/* Reference, any kernel and stride: one plane x [h, w] -> y [oh, ow] and window offsets [oh, ow]
 * (uint8_t when kernel <= AMP_POOL_BYTE_KERNEL, else uint32_t). */
void amp_max_pool_plane_ref(const float *x, int64_t w, int64_t kernel, int64_t stride, int64_t oh, int64_t ow,
                            float *y, void *offsets);
/* Reference backward of one plane: adds g [oh, ow] into dx [h, w] at the saved offsets (dx holds
 * what was there before: zeros for a fresh gradient). */
void amp_max_pool_backward_plane_ref(const float *g, const void *offsets, int64_t w, int64_t kernel,
                                     int64_t stride, int64_t oh, int64_t ow, float *dx);

/* kernel 2, stride 2, one output row: r0, r1 are the window's two input rows (2 * ow values each),
 * y and offsets the row's ow outputs. Same picks and bits as the plane reference. The _ref version
 * is branch-free scalar code; the plain name takes the active path's (the kernel table's row_k2). */
void amp_max_pool_row_k2_ref(const float *r0, const float *r1, int64_t ow, float *y, uint8_t *offsets);
void amp_max_pool_row_k2(const float *r0, const float *r1, int64_t ow, float *y, uint8_t *offsets);
/* The same on bf16 rows (bits) for a bf16 x: the picks of amp_max_pool_row_k2 on the decoded rows,
 * y the picked element encoded as amp_convert would (its own bits; a NaN as sign | 0x7FC0), with no
 * decoded copy of the rows. _ref is the scalar twin; the plain name takes the active path's. */
void amp_max_pool_row_k2_bf16_ref(const uint16_t *r0, const uint16_t *r1, int64_t ow, uint16_t *y,
                                  uint8_t *offsets);
void amp_max_pool_row_k2_bf16(const uint16_t *r0, const uint16_t *r1, int64_t ow, uint16_t *y, uint8_t *offsets);
/* Its backward: writes every element of the two input rows d0, d1 (2 * ow values each): g[ox] + 0
 * at the saved offset (the reference's 0 + g, so -0 becomes +0 alike), 0 elsewhere. Windows with
 * kernel = stride do not overlap, so nothing needs zeroing or adding first. */
void amp_max_pool_backward_row_k2_ref(const float *g, const uint8_t *offsets, int64_t ow, float *d0, float *d1);
void amp_max_pool_backward_row_k2(const float *g, const uint8_t *offsets, int64_t ow, float *d0, float *d1);

/* Its bf16 twin (bits), for a bf16 dY and a bf16 dx: the rows amp_max_pool_backward_row_k2 writes
 * from the decoded g, encoded as amp_convert would (g's bits; -0 -> +0; NaN -> sign | 0x7FC0).
 * _ref is the scalar twin; the plain name takes the active path's. */
void amp_max_pool_backward_row_k2_bf16_ref(const uint16_t *g, const uint8_t *offsets, int64_t ow, uint16_t *d0,
                                           uint16_t *d1);
void amp_max_pool_backward_row_k2_bf16(const uint16_t *g, const uint8_t *offsets, int64_t ow, uint16_t *d0,
                                       uint16_t *d1);

#if defined(__x86_64__)
/* src/kernels/x86/pool_avx2.c: the fp32 rows; only when the CPU has AVX2. */
void amp_max_pool_row_k2_avx2(const float *r0, const float *r1, int64_t ow, float *y, uint8_t *offsets);
void amp_max_pool_backward_row_k2_avx2(const float *g, const uint8_t *offsets, int64_t ow, float *d0, float *d1);

/* src/kernels/x86/pool_avx512.c: the rows above, and the same over every output row of a contiguous
 * tensor of planes [h, w] -> [oh, ow] (the loop inside the SIMD code, so the row kernel inlines);
 * only when the CPU has AVX-512 (F, VL, BW). The backward over rows writes every element of ds, as
 * pool.c's max_pool_backward_k2_planes does. */
void amp_max_pool_row_k2_avx512(const float *r0, const float *r1, int64_t ow, float *y, uint8_t *offsets);
void amp_max_pool_rows_k2_avx512(const float *xs, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                                 float *ys, uint8_t *offsets);
void amp_max_pool_backward_row_k2_avx512(const float *g, const uint8_t *offsets, int64_t ow, float *d0, float *d1);
void amp_max_pool_row_k2_bf16_avx512(const uint16_t *r0, const uint16_t *r1, int64_t ow, uint16_t *y,
                                     uint8_t *offsets);
void amp_max_pool_rows_k2_bf16_avx512(const uint16_t *xs, int64_t planes, int64_t h, int64_t w, int64_t oh,
                                      int64_t ow, uint16_t *ys, uint8_t *offsets);
void amp_max_pool_backward_row_k2_bf16_avx512(const uint16_t *g, const uint8_t *offsets, int64_t ow, uint16_t *d0,
                                              uint16_t *d1);
void amp_max_pool_backward_rows_k2_bf16_avx512(const uint16_t *gs, const uint8_t *offsets, int64_t planes, int64_t h,
                                               int64_t w, int64_t oh, int64_t ow, uint16_t *ds);
#endif

/* ---- max pooling's entries of the kernel table (kernels/kernels.h) ---- */

typedef struct amp_pool_kernels {
    /* the kernel 2, stride 2 rows: every path (the _ref versions, or the same bits) */
    void (*row_k2)(const float *r0, const float *r1, int64_t ow, float *y, uint8_t *offsets);
    void (*backward_row_k2)(const float *g, const uint8_t *offsets, int64_t ow, float *d0, float *d1);
    void (*row_k2_bf16)(const uint16_t *r0, const uint16_t *r1, int64_t ow, uint16_t *y, uint8_t *offsets);
    void (*backward_row_k2_bf16)(const uint16_t *g, const uint8_t *offsets, int64_t ow, uint16_t *d0, uint16_t *d1);
    /* every output row of a contiguous tensor of planes, the rows read in place (fp32) or without a
     * decoded copy (bf16); NULL on a path without them, where pool.c runs the rows above over blocks
     * of fp32 rows instead */
    void (*rows_k2)(const float *xs, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow, float *ys,
                    uint8_t *offsets);
    void (*rows_k2_bf16)(const uint16_t *xs, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                         uint16_t *ys, uint8_t *offsets);
    void (*backward_rows_k2_bf16)(const uint16_t *gs, const uint8_t *offsets, int64_t planes, int64_t h, int64_t w,
                                  int64_t oh, int64_t ow, uint16_t *ds);
} amp_pool_kernels;

void amp_pool_kernels_ref(amp_pool_kernels *k);
#if defined(__x86_64__)
void amp_pool_kernels_avx2(amp_pool_kernels *k);
void amp_pool_kernels_avx512(amp_pool_kernels *k);
#endif

/* The kernels for `isa` (a path the CPU lacks, or an invalid one, gets the reference's). */
const amp_pool_kernels *amp_pool_kernels_for(amp_isa isa);

#endif /* AMP_POOL_KERNELS_H */
