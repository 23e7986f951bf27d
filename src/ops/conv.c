/* 2-D convolution (PyTorch's conv2d: cross-correlation, zero padding, groups = 1) lowered to amp_gemm
 * through im2col.
 *
 * Why im2col and not a direct loop: the GEMM is the only kernel amp has that is blocked, vectorized
 * and threaded, and im2col keeps its operands in the compute dtype, so f16/bf16 convolutions run the
 * low-precision GEMM paths (fp32 accumulation) instead of a scalar fp32 loop; a direct convolution as
 * fast would need its own per-ISA kernels. The im2col, col2im and permutation passes run on the
 * thread pool too, one task per image or channel.
 * The price is memory: the column matrix holds C*KH*KW values per output pixel, so the batch is
 * processed in chunks whose scratch (columns, their fp32 gradient, the fp32 GEMM output) stays under
 * CONV_SCRATCH_BYTES. A chunk holds at least one image, so a single image whose columns exceed the
 * bound still runs (in one chunk, with that much scratch).
 *
 * Layout, per chunk of nb images (K = C*KH*KW, P = H'*W'):
 *   col [K, nb*P] in the compute dtype: col[(c*KH + ky)*KW + kx][b*P + oy*W' + ox] = x[b, c, iy, ix]
 *     with iy = oy*stride - pad + ky, ix = ox*stride - pad + kx (0 outside the image);
 *   forward   Y [O, nb*P] = W [O, K] col                       (fp32, + bias, rounded once into out)
 *   backward  dW [O, K] += dY [O, nb*P] col^T                   (fp32 across chunks, GEMM beta = 1)
 *             dX: stride 1 with a square kernel and pad <= k - 1 (the cnn's), the correlation of dY
 *               with the flipped kernel, [C, O*KH*KW], through the forward's path on a derived
 *               geometry (conv_dx_correlate, in its own chunks); otherwise dcol [K, nb*P] = W^T dY,
 *               then col2im adds it into dx (fp32)
 *             db [O] = sums of dY (fp32)
 * dY is the output gradient in the compute dtype (the output's dtype: exact), permuted to [O, nb*P]
 * (with nb = 1 that is dY's image [O, P] itself, used in place).
 *
 * Implicit GEMM (AVX-512, stride 1, padded plane within its bound): where the GEMM computes a
 * product as C^T (gemm.c's compute_transposed: the cnn's conv2, O = 64 against the kernel's 12 rows),
 * col is never written. Each chunk's images are copied once into zero-padded planes xp, and the
 * GEMM's pack of the col side calls back (src/gemm/conv_gemm.c, gemm/gemm_implicit.h) for panels
 * built straight from xp (conv_kernels.h; src/kernels/x86/conv_avx512.c): the forward's (and dX's)
 * panels of 12 pixels, the weight gradient's panels of 12 k indices (fp32 and bf16). The packed
 * values are the ones the GEMM's pack would make from col, so the bits are the same; the chunks of
 * the backward are too (dW is summed per chunk), while the forward's only bound is xp and Y. What
 * goes is im2col's writes and reads of col. dX's correlation sums each element once over O*KH*KW
 * terms in the GEMM's order, where col2im summed the O-term sums of W^T dY over the kernel's
 * positions: other bits, the same values to fp32 rounding; col2im and the fp32 dcol go.
 *
 * Direct tiles (every flipped implicit product: the forward's, dX's and the weight gradient's): no
 * implicit panels at all; conv_gemm.c runs the GEMM's loops itself and a copy of its 12 x 32 kernel
 * reads the implicit operand straight from xp (amp_conv_gemm_direct). Same bits.
 * On AVX2 (no implicit panels there) every stride-1 product within the plane's bound takes the
 * direct tiles, 6 x 16, in either orientation (conv_gemm.c's avx2_direct_kernel says why the bits
 * allow it), bf16 and f16 on an fp32 padded chunk: im2col and the packing of col go. */
#include <stdlib.h>
#include <string.h>

#include "../core/parallel.h"
#include "amp/formats.h"
#include "amp/gemm.h"
#include "../gemm/conv_gemm.h"
#include "../gemm/gemm_implicit.h"
#include "../kernels/kernels.h"
#include "grad_sink_gemm.h"
#include "op_util.h"

/* Scratch bound per chunk of images: columns, their fp32 gradient and the fp32 GEMM output. About
 * one core's L2, so im2col's columns are still in cache when the GEMM packs them and the GEMM's fp32
 * output when col2im and the store read it; a bound far above L2 streams every pass from DRAM. The
 * chunk depends on the shapes only, not the thread count. */
#ifndef CONV_SCRATCH_BYTES
#define CONV_SCRATCH_BYTES ((int64_t)2 << 20)
#endif
/* Below this many elements a pass runs on the calling thread: waking the pool costs more. */
#define CONV_MIN_PARALLEL_ELEMENTS ((int64_t)1 << 15)

typedef amp_conv_geom conv_geom;

/* Images per chunk, so that nb * per_image_bytes <= CONV_SCRATCH_BYTES (at least 1). */
static int64_t chunk_images(const conv_geom *g, int64_t per_image_bytes) {
    int64_t nb = per_image_bytes > 0 ? CONV_SCRATCH_BYTES / per_image_bytes : g->n;
    if (nb < 1) nb = 1;
    return nb < g->n ? nb : g->n;
}

/* ---- the column passes' active paths (conv_kernels.h) ---- */

void amp_conv_im2col_padded(const conv_geom *g, const void *x, size_t es, int64_t b0, int64_t nb, int64_t b, void *col) {
    amp_kernels_active()->conv.im2col_padded(g, x, es, b0, nb, b, col);
}

void amp_conv_col2im_padded(const conv_geom *g, const float *dcol, int64_t b0, int64_t nb, int64_t b, float *dx) {
    amp_kernels_active()->conv.col2im_padded(g, dcol, b0, nb, b, dx);
}

/* ---- the per-chunk passes ---- */

/* The per-chunk passes around the GEMMs, run on the thread pool: one task per image (im2col, col2im,
 * the output's bias and rounding) or per output channel (dY's permutation and bias gradient). Every
 * task writes its own elements in a fixed order, so the bits do not depend on the thread count. */
typedef struct {
    const conv_geom *g;
    amp_dtype dt;
    size_t es;
    int64_t b0, nb;
    const void *x;     /* im2col source, contiguous [N, C, H, W] */
    void *col;         /* [K, nb*P] in dt */
    const float *dcol; /* [K, nb*P] fp32 */
    float *dx;         /* [N, C, H, W] fp32 */
    float *y;          /* forward GEMM output [O, nb*P] fp32 */
    const float *bias; /* [O] or NULL */
    void *out;         /* [N, O, P] in out_dt (element size out_es) */
    amp_dtype out_dt;
    size_t out_es;
    const void *gy;    /* dY [N, O, P] in dt */
    void *gp;          /* dY permuted, [O, nb*P] in dt (when copy_gp; conv_backward says when not) */
    bool copy_gp;
    float *db;         /* [O] or NULL */
    void *xp;          /* implicit GEMM: padded chunk [nb, C, Hp, Wp] in xp_dt (dt, or fp32: amp_conv_panel_dtype) */
    amp_dtype xp_dt;
    const amp_grad_sink *sink; /* task_store: out's values (fp32, no bias) go here instead */
} conv_pass;

/* Runs fn for tasks [0, n) on the pool, or serially for a small pass (the same per-task work, so the
 * same bits either way). */
static void run_pass(int64_t n, amp_task_fn fn, conv_pass *a, int64_t elements) {
    if (elements < CONV_MIN_PARALLEL_ELEMENTS || amp_parallel_max_threads() == 1) {
        for (int64_t t = 0; t < n; t++) fn(a, t, 0);
        return;
    }
    amp_parallel_for(n, fn, a);
}

static void task_im2col(void *arg, int64_t b, int thread_id) {
    const conv_pass *a = arg;
    (void)thread_id;
    if (amp_conv_padded_ok(a->g))
        amp_conv_im2col_padded(a->g, a->x, a->es, a->b0, a->nb, b, a->col);
    else
        amp_conv_im2col_ref(a->g, a->x, a->es, a->b0, a->nb, b, a->col);
}

/* x's image b0 + b -> the interior of its padded planes in xp (decoded to fp32 where xp_dt is fp32
 * and dt is not: amp_conv_panel_dtype). The border is zeroed once per product (xp_zero), not per chunk: every
 * chunk writes the same interiors over it. */
static void task_pad(void *arg, int64_t b, int thread_id) {
    const conv_pass *a = arg;
    const conv_geom *g = a->g;
    const int64_t wp = g->w + 2 * g->pad, hp = g->h + 2 * g->pad;
    const size_t xes = amp_dtype_size(a->xp_dt);
    (void)thread_id;
    unsigned char *dst = (unsigned char *)a->xp + (size_t)(b * g->c * hp * wp) * xes;
    const unsigned char *src = (const unsigned char *)a->x + (size_t)((a->b0 + b) * g->c * g->h * g->w) * a->es;
    /* The decoder looked up once per image (xp_dt is then fp32), not per row by amp_convert, whose
     * dispatch cost more than decoding a row of 28. */
    const amp_decode_kernel decode = a->xp_dt == a->dt ? NULL : amp_kernels_active()->convert.decode[a->dt];
    for (int64_t c = 0; c < g->c; c++)
        for (int64_t iy = 0; iy < g->h; iy++) {
            unsigned char *d = dst + (size_t)((c * hp + iy + g->pad) * wp + g->pad) * xes;
            const unsigned char *sr = src + (size_t)((c * g->h + iy) * g->w) * a->es;
            if (decode)
                decode((float *)(void *)d, sr, (size_t)g->w);
            else
                amp_conv_copy_bytes(d, sr, (size_t)g->w * a->es);
        }
}

/* Zeroes the padded chunk of nb_max images (the borders task_pad leaves) and the slack after it. */
static void xp_zero(void *xp, int64_t xp_bytes) { memset(xp, 0, (size_t)xp_bytes + AMP_CONV_IMPLICIT_SLACK); }

static void task_col2im(void *arg, int64_t b, int thread_id) {
    const conv_pass *a = arg;
    (void)thread_id;
    if (amp_conv_padded_ok(a->g))
        amp_conv_col2im_padded(a->g, a->dcol, a->b0, a->nb, b, a->dx);
    else
        amp_conv_col2im_ref(a->g, a->dcol, a->b0, a->nb, b, a->dx);
}

/* y [O, nb*P] -> out [b0 + b, O, P]: bias added in fp32, then the one rounding (fp32: the sum is
 * written straight into out, no copy). */
static void task_store(void *arg, int64_t b, int thread_id) {
    const conv_pass *a = arg;
    const int64_t p_img = amp_conv_geom_p(a->g), ld = a->nb * p_img;
    (void)thread_id;
    if (a->sink) { /* the image's O rows of P values, straight into the gradient (sink's contract) */
        const amp_gemm_epilogue ep = amp_sink_epilogue(a->sink, (a->b0 + b) * a->g->o * p_img, p_img);
        amp_gemm_epilogue_apply(&ep, a->y + b * p_img, ld, a->g->o, p_img);
        return;
    }
    /* The path's fused bias + bf16 store (conv_kernels.h), looked up once per image; where the path
     * has none (NULL), the reference's add, then convert. */
    const amp_conv_store_bf16_fn store_bf16 =
        a->bias && a->out_dt == AMP_BF16 ? amp_kernels_active()->conv.store_bf16 : NULL;
    for (int64_t o = 0; o < a->g->o; o++) {
        float *yo = a->y + o * ld + b * p_img;
        unsigned char *dst = (unsigned char *)a->out + (size_t)(((a->b0 + b) * a->g->o + o) * p_img) * a->out_es;
        if (store_bf16)
            store_bf16((uint16_t *)(void *)dst, yo, a->bias[o], p_img);
        else
            amp_conv_store_row_ref(dst, a->out_dt, yo, a->bias ? &a->bias[o] : NULL, p_img);
    }
}

/* dY [b0.., O, P] -> gp [O, nb*P] for output channel o (nb > 1); db[o] += its sum in fp32. */
static void task_permute_grad(void *arg, int64_t o, int thread_id) {
    const conv_pass *a = arg;
    const int64_t p_img = amp_conv_geom_p(a->g), ld = a->nb * p_img;
    float chunk[256];
    (void)thread_id;
    int64_t b = 0;
    /* four images at a time: each image's sum as below, then added in order. The path's version of
     * amp_conv_sum_bf16_x4_ref (the same bits): gcc keeps the reference's 32 partial sums on the
     * stack, a load, an add and a store per 4 lanes. */
    const amp_conv_sum_bf16_x4_fn sum_bf16_x4 = amp_kernels_active()->conv.sum_bf16_x4;
    if (a->dt == AMP_BF16 && a->db)
        for (; b + 4 <= a->nb; b += 4) {
            const int64_t img = a->g->o * p_img;
            const uint16_t *src = (const uint16_t *)a->gy + ((a->b0 + b) * a->g->o + o) * p_img;
            float s[4] = {0.0f, 0.0f, 0.0f, 0.0f}, part[4];
            for (int j = 0; j < 4 && a->copy_gp; j++)
                memcpy((uint16_t *)a->gp + o * ld + (b + j) * p_img, src + j * img, (size_t)p_img * sizeof *src);
            for (int64_t i0 = 0; i0 < p_img; i0 += 256) {
                sum_bf16_x4(src + i0, img, p_img - i0 < 256 ? p_img - i0 : 256, part);
                for (int j = 0; j < 4; j++) s[j] += part[j];
            }
            for (int j = 0; j < 4; j++) a->db[o] += s[j];
        }
    for (; b < a->nb; b++) {
        const unsigned char *src = (const unsigned char *)a->gy + (size_t)(((a->b0 + b) * a->g->o + o) * p_img) * a->es;
        if (a->copy_gp) memcpy((unsigned char *)a->gp + (size_t)(o * ld + b * p_img) * a->es, src, (size_t)p_img * a->es);
        if (!a->db) continue;
        float s = 0.0f;
        for (int64_t i0 = 0; i0 < p_img; i0 += 256) {
            const int64_t n = p_img - i0 < 256 ? p_img - i0 : 256;
            const float *v = (const float *)(const void *)(src + (size_t)i0 * a->es);
            if (a->dt == AMP_BF16) {
                s += amp_conv_sum_bf16_ref((const uint16_t *)(const void *)(src + (size_t)i0 * a->es), n);
                continue;
            }
            if (a->dt != AMP_F32) {
                amp_convert(chunk, AMP_F32, src + (size_t)i0 * a->es, a->dt, (size_t)n);
                v = chunk;
            }
            s += amp_conv_sum_f32_ref(v, n);
        }
        a->db[o] += s;
    }
}

static int conv_gemm(amp_ctx *ctx, amp_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                     int64_t lda, const void *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    int st = amp_gemm_untiled(dt, ta, tb, m, n, k, 1.0f, a, lda > 0 ? lda : 1, b, ldb > 0 ? ldb : 1, beta, c,
                              ldc > 0 ? ldc : 1); /* the implicit routes' kernel: the same bits on every route */
    if (st != AMP_OK) amp_ctx_fail(ctx, st, "conv2d: amp_gemm failed: %s", amp_status_str(st));
    return st;
}

/* conv_gemm with B implicit, packed by cb (gemm_implicit.h), A not transposed, alpha 1 */
static int conv_gemm_implicit(amp_ctx *ctx, amp_dtype dt, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                              amp_gemm_pack_cb cb, const void *cb_arg, float beta, float *c, int64_t ldc) {
    int st = amp_gemm_implicit_b(dt, false, m, n, k, 1.0f, a, lda > 0 ? lda : 1, cb, cb_arg, beta, c, ldc > 0 ? ldc : 1,
                                 NULL);
    if (st != AMP_OK) amp_ctx_fail(ctx, st, "conv2d: amp_gemm failed: %s", amp_status_str(st));
    return st;
}

/* ---- the correlation: the forward's product, and (stride 1) the input gradient's ---- */

/* out [N, O, OH, OW] (in out_dt; or, with sink and no bias, where the sink writes fp32 values) = the correlation of x [N, C, H, W] (contiguous, in dt) with w
 * [O, C*KH*KW] (in dt) over geometry g, + bias [O] (fp32, or NULL), summed in fp32 and rounded once:
 * the forward's chunks of images, each through the implicit GEMM or im2col + GEMM. Scratch is
 * released before returning. */
static int conv_correlate(amp_ctx *ctx, const conv_geom *g, amp_dtype dt, const void *x, const void *w,
                          const float *bv, void *out, amp_dtype out_dt, const amp_grad_sink *sink) {
    const size_t es = amp_dtype_size(dt);
    const int64_t k = amp_conv_geom_k(g), p_img = amp_conv_geom_p(g), hp = g->h + 2 * g->pad, wp = g->w + 2 * g->pad;
    /* implicit GEMM: scratch per image is the padded image (in the panels' dtype) and the fp32 output;
     * else the columns too. The chunk changes no bits here: each output is one sum over K. */
    amp_dtype pdt = amp_conv_panel_dtype(g, dt);
    int64_t nb_max = chunk_images(g, g->c * hp * wp * (int64_t)amp_dtype_size(pdt) + p_img * g->o * 4);
    const bool implicit = amp_conv_implicit_ok(g, pdt, nb_max);
    if (!implicit) {
        pdt = dt;
        nb_max = chunk_images(g, p_img * (k * (int64_t)es + g->o * 4));
    }
    const size_t pes = amp_dtype_size(pdt);
    const amp_gemm_kernel *dkern = implicit ? amp_conv_direct_kernel(g, pdt, nb_max, false) : NULL;
    amp_arena_mark m = amp_scratch_mark(ctx);
    /* W in the panels' dtype (O x K: 200 KiB at the cnn's conv2 in fp32) */
    if (pdt != dt) {
        void *wd = amp_scratch_alloc(ctx, (size_t)(g->o * k) * pes);
        if (!wd) {
            amp_scratch_release(ctx, m);
            return AMP_ERR_OUT_OF_MEMORY;
        }
        amp_convert(wd, pdt, w, dt, (size_t)(g->o * k));
        w = wd;
    }
    int64_t dblocks = 0;
    const size_t dblk = dkern ? amp_conv_direct_block_bytes(dkern, g->o, k, &dblocks) : 0;
    void *dbp = dkern ? amp_scratch_alloc(ctx, dblk * (size_t)dblocks) : NULL;
    if (dkern && !dbp) {
        amp_scratch_release(ctx, m);
        return AMP_ERR_OUT_OF_MEMORY;
    }
    void *col = implicit ? amp_scratch_alloc(ctx, (size_t)(nb_max * g->c * hp * wp) * pes + AMP_CONV_IMPLICIT_SLACK)
                         : amp_scratch_alloc(ctx, (size_t)(k * nb_max * p_img) * es);
    float *y = amp_f32_scratch(ctx, g->o * nb_max * p_img);
    int32_t *koff = implicit ? amp_scratch_alloc(ctx, (size_t)k * sizeof *koff) : NULL;
    int32_t *pix = implicit ? amp_scratch_alloc(ctx, (size_t)(nb_max * p_img) * sizeof *pix) : NULL;
    if (!col || !y || (implicit && (!koff || !pix))) {
        amp_scratch_release(ctx, m);
        return AMP_ERR_OUT_OF_MEMORY;
    }
    conv_pass a = {.g = g, .dt = dt, .es = es, .x = x, .col = col, .y = y, .bias = bv, .out = out, .out_dt = out_dt,
                   .out_es = amp_dtype_size(out_dt), .xp = col, .xp_dt = pdt, .sink = sink};
    const amp_conv_implicit ci = {.g = g, .xp = col, .es = pes, .koff = koff, .pix = pix};
    if (implicit) {
        amp_conv_implicit_tables(g, nb_max, koff, pix);
        xp_zero(col, nb_max * g->c * hp * wp * (int64_t)pes);
    }
    if (dkern) amp_conv_direct_pack(dkern, w, pes, g->o, k, 0, k, dbp);
    int st = AMP_OK;
    for (int64_t b0 = 0; b0 < g->n && st == AMP_OK; b0 += nb_max) {
        const int64_t nb = g->n - b0 < nb_max ? g->n - b0 : nb_max, ld = nb * p_img;
        a.b0 = b0, a.nb = nb;
        if (dkern) {
            run_pass(nb, task_pad, &a, nb * g->c * hp * wp);
            amp_conv_direct d = {.ci = &ci, .kern = dkern, .rows = pix, .steps = koff, .bp = dbp, .m = ld, .n = g->o, .k = k, .beta = 0.0f, .c = y, .ldc = ld};
            amp_conv_gemm_direct(&d, false);
        } else if (implicit) {
            run_pass(nb, task_pad, &a, nb * g->c * hp * wp);
            st = conv_gemm_implicit(ctx, pdt, g->o, ld, k, w, k, amp_conv_pack_cb, &ci, 0.0f, y, ld);
        } else {
            run_pass(nb, task_im2col, &a, k * ld);
            st = conv_gemm(ctx, dt, false, false, g->o, ld, k, w, k, col, ld, 0.0f, y, ld);
        }
        if (st == AMP_OK) run_pass(nb, task_store, &a, g->o * ld);
    }
    amp_scratch_release(ctx, m);
    return st;
}

/* Whether dX is computed as a correlation (conv_dx_correlate): stride 1, a square kernel (one
 * padding for both axes) and pad <= k - 1 (the derived padding k - 1 - pad is not negative). */
static bool dx_by_correlation(const conv_geom *g) {
    return g->stride == 1 && g->kh == g->kw && g->pad <= g->kh - 1;
}

/* dX [N, C, H, W] (fp32, written) for stride 1 without col2im: dX[c, iy, ix] = sum over (o, ky, kx)
 * of W[o, c, ky, kx] dY[o, iy + pad - ky, ix + pad - kx], which is the correlation of dY padded by
 * k - 1 - pad with W flipped in both axes and transposed to [C, O, KH, KW]: the forward's product
 * (implicit GEMM or im2col + GEMM) on the derived geometry c := O, o := C, pad := k - 1 - pad. One
 * fp32 sum per element over K' = O*KH*KW terms, in the GEMM's order (col2im summed W^T dY's O-term
 * sums over the kernel's positions: other bits, the same value to rounding). col2im goes, and the
 * GEMM gets a deeper, narrower product (the cnn's conv2: k = 1600 into 32 rows instead of k = 64
 * into 800), which it runs faster. */
static int conv_dx_correlate(amp_ctx *ctx, const conv_geom *g, amp_dtype dt, const void *gy, const void *w, float *dx,
                             const amp_grad_sink *sink) {
    const conv_geom gd = {.n = g->n, .c = g->o, .h = g->oh, .w = g->ow, .o = g->c, .kh = g->kh, .kw = g->kw,
                          .oh = g->h, .ow = g->w, .stride = 1, .pad = g->kh - 1 - g->pad};
    const size_t es = amp_dtype_size(dt);
    const int64_t khw = g->kh * g->kw;
    amp_arena_mark m = amp_scratch_mark(ctx);
    unsigned char *wt = amp_scratch_alloc(ctx, (size_t)(g->c * g->o * khw) * es); /* [C, O, KH, KW] */
    if (!wt) return AMP_ERR_OUT_OF_MEMORY;
    for (int64_t c = 0; c < g->c; c++)
        for (int64_t o = 0; o < g->o; o++) {
            /* (ky, kx) -> (KH-1-ky, KW-1-kx) is t -> khw - 1 - t; elements copied as bits */
            const int64_t to = (c * g->o + o) * khw, from = (o * g->c + c) * khw + khw - 1;
            if (es == 2)
                for (int64_t t = 0; t < khw; t++) ((uint16_t *)(void *)wt)[to + t] = ((const uint16_t *)w)[from - t];
            else
                for (int64_t t = 0; t < khw; t++) ((uint32_t *)(void *)wt)[to + t] = ((const uint32_t *)w)[from - t];
        }
    const int st = conv_correlate(ctx, &gd, dt, gy, wt, NULL, dx, AMP_F32, sink);
    amp_scratch_release(ctx, m);
    return st;
}

/* ---- backward ---- */

static void conv_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0], *w = node->in[1], *bias = node->n_in > 2 ? node->in[2] : NULL;
    const conv_geom *g = node->saved;
    const amp_dtype dt = node->out->compute_dtype;
    const size_t es = amp_dtype_size(dt);
    const int64_t k = amp_conv_geom_k(g), p_img = amp_conv_geom_p(g);
    const bool need_dx = x->requires_grad, need_dw = w->requires_grad, need_db = bias && bias->requires_grad;

    /* dY in the compute dtype, [N, O, P] contiguous */
    const amp_tensor *gt = node->out->grad;
    const unsigned char *gy = gt->data;
    if (gt->dtype != dt || !amp_tensor_is_contiguous(gt)) {
        void *tmp = amp_scratch_alloc(ctx, (size_t)amp_tensor_numel(gt) * es);
        if (!tmp || amp_tensor_read(gt, tmp, dt) != AMP_OK) return;
        gy = tmp;
    }
    const bool dx_corr = need_dx && dx_by_correlation(g), dx_cols = need_dx && !dx_corr;
    /* dX by correlation goes where x's gradient goes (its own scratch or a sink: below) */
    float *dx = dx_cols ? amp_f32_scratch(ctx, g->n * g->c * g->h * g->w) : NULL;
    float *dw = need_dw ? amp_f32_scratch(ctx, g->o * k) : NULL;
    const amp_gemm_kernel *kern = amp_gemm_kernel_active(dt);
    float *db = need_db ? amp_f32_scratch(ctx, g->o) : NULL;
    /* dX as a correlation (conv_dx_correlate) has its own chunks; the loop below makes the rest */
    const int64_t hp = g->h + 2 * g->pad, wp = g->w + 2 * g->pad;
    /* scratch per image: dY's permuted copy, the columns (or the implicit weight gradient's padded
     * image) and, where dX goes through col2im, the columns' fp32 gradient, counted whether or not
     * x needs a gradient: dW's sum over the batch is split at chunk boundaries, so its bits depend
     * on nb, which depends on the shapes only (not on which gradients are made, nor the threads). */
    const int64_t per_image_gp = p_img * g->o * (int64_t)es + (dx_by_correlation(g) ? 0 : p_img * k * 4);
    /* the implicit weight gradient's padded chunk in the panels' dtype (amp_conv_panel_dtype: bf16 decoded to
     * fp32 where the bf16 GEMM is the fp32 kernel; dY stays bf16, packed by that kernel, pk) */
    amp_dtype pdt = need_dw ? amp_conv_panel_dtype(g, dt) : dt;
    int64_t nb_max = chunk_images(g, per_image_gp + g->c * hp * wp * (int64_t)amp_dtype_size(pdt));
    const bool implicit = need_dw && amp_conv_implicit_dw_ok(g, pdt, nb_max);
    if (!implicit) {
        pdt = dt;
        nb_max = chunk_images(g, per_image_gp + p_img * k * (int64_t)es);
    }
    const size_t pes = amp_dtype_size(pdt);
    const amp_gemm_kernel *dkern = implicit ? amp_conv_direct_kernel(g, pdt, nb_max, true) : NULL;
    const amp_gemm_kernel *pk = dkern && pdt != dt ? kern : dkern; /* packs dY (dt) in dkern's layout */
    int64_t dblocks = 0;
    const size_t dblk = dkern ? amp_conv_direct_block_bytes(dkern, g->o, nb_max * p_img, &dblocks) : 0;
    void *dbp = dkern ? amp_scratch_alloc(ctx, dblk * (size_t)dblocks) : NULL;
    /* dY's permuted copy gp [O, nb*P], the GEMMs' operand, is not made when
     * - one image per chunk: dY's image [O, P] is that already;
     * - dW is the only product and takes the columns (the cnn's conv1): it is computed as
     *   dW^T [K, O] = col dY^T, dY packed straight from [N, O, P] by amp_conv_pack_dy_cb (the same
     *   products summed in the same order: the same bits), then transposed into dW. */
    const bool dw_t = need_dw && !implicit && !dx_cols && nb_max > 1 && kern &&
                      (kern->k_unit == 1 || p_img % kern->k_unit == 0);
    /* the direct weight gradient packs dY straight from [N, O, P] (amp_conv_direct_pack over images) */
    const bool dy_direct = dkern && p_img % dkern->k_unit == 0;
    void *gp = nb_max > 1 && ((need_dw && !dw_t && !dy_direct) || dx_cols)
                   ? amp_scratch_alloc(ctx, (size_t)(g->o * nb_max * p_img) * es)
                   : NULL;
    float *dwt = dw_t ? amp_f32_scratch(ctx, k * g->o) : NULL; /* dW^T [K, O] */
    const int64_t xp_bytes = nb_max * g->c * hp * wp * (int64_t)pes;
    void *col = !need_dw    ? NULL
                : implicit ? amp_scratch_alloc(ctx, (size_t)xp_bytes + AMP_CONV_IMPLICIT_SLACK)
                           : amp_scratch_alloc(ctx, (size_t)(k * nb_max * p_img) * es);
    int32_t *koff = implicit ? amp_scratch_alloc(ctx, (size_t)k * sizeof *koff) : NULL;
    int32_t *pix = implicit ? amp_scratch_alloc(ctx, (size_t)(nb_max * p_img) * sizeof *pix) : NULL;
    float *dcol = dx_cols ? amp_f32_scratch(ctx, k * nb_max * p_img) : NULL;
    if (ctx->status != AMP_OK) return;
    const amp_conv_implicit ci = {.g = g, .xp = col, .es = pes, .koff = koff, .pix = pix};
    if (implicit) {
        amp_conv_implicit_tables(g, nb_max, koff, pix);
        xp_zero(col, xp_bytes);
    }
    /* the padded col2im writes every element of dx; the other one adds into zeros */
    if (dx_cols && !amp_conv_padded_ok(g)) memset(dx, 0, (size_t)(g->n * g->c * g->h * g->w) * sizeof *dx);
    if (dw) memset(dw_t ? dwt : dw, 0, (size_t)(g->o * k) * sizeof *dw);
    if (db) memset(db, 0, (size_t)g->o * sizeof *db);

    conv_pass a = {.g = g,
                   .dt = dt,
                   .es = es,
                   .x = x->data,
                   .col = col,
                   .dcol = dcol,
                   .dx = dx,
                   .gy = gy,
                   .gp = gp,
                   .copy_gp = gp != NULL,
                   .db = db,
                   .xp = col,
                   .xp_dt = pdt};
    for (int64_t b0 = 0; b0 < g->n; b0 += nb_max) {
        const int64_t nb = g->n - b0 < nb_max ? g->n - b0 : nb_max, ld = nb * p_img;
        a.b0 = b0, a.nb = nb;
        const void *gop = gp ? gp : gy + (size_t)(b0 * g->o * p_img) * es;
        if (gp || db) run_pass(g->o, task_permute_grad, &a, g->o * ld);
        if (dw && dkern) {
            run_pass(nb, task_pad, &a, nb * g->c * hp * wp);
            if (gp)
                amp_conv_direct_pack(pk, gp, es, g->o, ld, 0, ld, dbp);
            else
                amp_conv_direct_pack(pk, gy, es, g->o, p_img, b0, ld, dbp);
            amp_conv_direct d = {.ci = &ci, .kern = dkern, .rows = koff, .steps = pix, .bp = dbp, .m = k, .n = g->o, .k = ld, .beta = 1.0f, .c = dw, .ldc = k};
            amp_conv_gemm_direct(&d, true);
        } else if (dw && implicit) {
            run_pass(nb, task_pad, &a, nb * g->c * hp * wp);
            if (conv_gemm_implicit(ctx, dt, g->o, k, ld, gop, ld, amp_conv_pack_k_cb, &ci, 1.0f, dw, k)) return;
        } else if (dw_t) {
            run_pass(nb, task_im2col, &a, k * ld);
            const amp_conv_dy_src dys = {.g = g, .gy = gy, .es = es, .b0 = b0};
            if (conv_gemm_implicit(ctx, dt, k, g->o, ld, col, ld, amp_conv_pack_dy_cb, &dys, 1.0f, dwt, g->o)) return;
        } else if (dw) {
            run_pass(nb, task_im2col, &a, k * ld);
            if (conv_gemm(ctx, dt, false, true, g->o, k, ld, gop, ld, col, ld, 1.0f, dw, k)) return;
        }
        if (dx_cols) {
            if (conv_gemm(ctx, dt, true, false, k, ld, g->o, w->data, k, gop, ld, 0.0f, dcol, ld)) return;
            run_pass(nb, task_col2im, &a, k * ld);
        }
    }
    if (dw_t)
        for (int64_t o = 0; o < g->o; o++)
            for (int64_t r = 0; r < k; r++) dw[o * k + r] = dwt[r * g->o + o];
    if (dx_corr) {
        /* the correlation's fp32 output goes into x's gradient image by image while in cache
         * (grad_sink_gemm.h: amp_grad_accumulate's bits), not through an fp32 dX and a pass over it */
        amp_grad_sink sink;
        const bool sunk = amp_grad_sink_open(ctx, x, &sink);
        dx = sunk ? NULL : amp_f32_scratch(ctx, g->n * g->c * g->h * g->w);
        int st = sunk || dx ? conv_dx_correlate(ctx, g, dt, gy, w->data, dx, sunk ? &sink : NULL) : AMP_ERR_OUT_OF_MEMORY;
        if (st != AMP_OK && ctx->status == AMP_OK) amp_ctx_fail(ctx, st, "conv2d: backward: %s", amp_status_str(st));
        if (sunk) amp_grad_sink_close(ctx, &sink);
        if (st != AMP_OK) return;
    }
    if (dx) amp_grad_accumulate(ctx, x, dx);
    if (dw) amp_grad_accumulate(ctx, w, dw);
    if (db) amp_grad_accumulate(ctx, bias, db);
}

/* ---- forward ---- */

amp_tensor *amp_conv2d(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias, int stride, int padding) {
    const amp_op op = AMP_OP_CONV2D;
    if (!amp_op_input_ok(ctx, op, x) || !amp_op_input_ok(ctx, op, weight)) return NULL;
    if (bias && !amp_op_input_ok(ctx, op, bias)) return NULL;
    amp_tensor *cast_in[3] = {x, weight, bias};
    if (!amp_autocast_inputs(ctx, op, cast_in, 3)) return NULL;
    x = cast_in[0], weight = cast_in[1], bias = cast_in[2];
    char sx[64], sw[64];
    if (x->ndim != 4 || weight->ndim != 4 || weight->shape[1] != x->shape[1])
        return amp_op_fail(ctx, op, "input %s ([N, C, H, W]) does not match weight %s ([O, C, KH, KW])",
                           amp_shape_str(x, sx, sizeof sx), amp_shape_str(weight, sw, sizeof sw));
    if (stride < 1 || padding < 0)
        return amp_op_fail(ctx, op, "stride (%d) must be at least 1 and padding (%d) at least 0", stride, padding);
    conv_geom g = {.n = x->shape[0],
                   .c = x->shape[1],
                   .h = x->shape[2],
                   .w = x->shape[3],
                   .o = weight->shape[0],
                   .kh = weight->shape[2],
                   .kw = weight->shape[3],
                   .stride = stride,
                   .pad = padding};
    if (g.kh < 1 || g.kw < 1 || g.h + 2 * g.pad < g.kh || g.w + 2 * g.pad < g.kw)
        return amp_op_fail(ctx, op, "kernel %s does not fit the input %s padded by %d",
                           amp_shape_str(weight, sw, sizeof sw), amp_shape_str(x, sx, sizeof sx), padding);
    if (bias && (bias->ndim != 1 || bias->shape[0] != g.o))
        return amp_op_fail(ctx, op, "bias %s must have shape [%lld]", amp_shape_str(bias, sx, sizeof sx),
                           (long long)g.o);
    g.oh = (g.h + 2 * g.pad - g.kh) / g.stride + 1;
    g.ow = (g.w + 2 * g.pad - g.kw) / g.stride + 1;

    amp_dtype dt = amp_promote(x->dtype, weight->dtype);
    if (bias) dt = amp_promote(dt, bias->dtype);
    if (!(x = amp_op_as(ctx, x, dt)) || !(weight = amp_op_as(ctx, weight, dt))) return NULL;
    if (bias && !(bias = amp_op_as(ctx, bias, dt))) return NULL;
    if (!(x = amp_contiguous(ctx, x)) || !(weight = amp_contiguous(ctx, weight))) return NULL;

    const int64_t out_shape[4] = {g.n, g.o, g.oh, g.ow};
    amp_tensor *out = amp_ctx_new_tensor(ctx, dt, 4, out_shape, true);
    if (!out) return NULL;
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *bv = bias ? amp_f32_view(ctx, bias) : NULL;
    const int st = (bias && !bv) ? AMP_ERR_OUT_OF_MEMORY : conv_correlate(ctx, &g, dt, x->data, weight->data, bv, out->data, dt, NULL);
    amp_scratch_release(ctx, m);
    if (st != AMP_OK) return NULL;
    amp_tensor *in[3] = {x, weight, bias};
    amp_node *node = amp_autograd_record(ctx, op, dt, out, in, bias ? 3 : 2, conv_backward);
    if (node) {
        conv_geom *saved = amp_ctx_alloc(ctx, sizeof *saved);
        if (!saved) return NULL;
        *saved = g;
        node->saved = saved;
    }
    return out;
}
