/* conv2d, max/avg pooling and embedding against double-precision references written here
 * (gradcheck.h), in f32, f16 and bf16; plus the behaviours a gradient check cannot see: max pooling's
 * ties and NaNs, conv2d's batch chunking, dtype promotion, errors.
 *
 * Tolerances (factors of the dtype's unit roundoff u, see gradcheck.h), per dtype because the error
 * sources differ:
 *   - f16, bf16: every operand amp reads (inputs, the seed gradient) is representable and is what the
 *     reference sees, and amp accumulates in fp32, so the error is the one rounding of each result
 *     (<= u/2 |ref|) plus fp32 noise far below u. LOWP_FACTOR 2. Measured over 1400 seeds: at most
 *     0.50 u (in units of u * (max|ref| + |ref|)); the gathers (embedding, max pool) are exact.
 *   - f32: the fp32 noise of the sums is the whole error: an n-term sum is off by about sqrt(n) u
 *     times the size of its terms, and gradcheck scales tolerances by the largest |result|, which a
 *     cancelling sum can make small: conv2d's bias gradient sums N*H'*W' seed values of both signs.
 *     Measured over 1400 seeds: median <= 1.7 u; worst 58 u with 2 output channels (both bias
 *     gradients happened to cancel), 23 u with the 3 or more channels used below. F32_FACTOR 256
 *     (1.5e-5 of the largest value) is still far below what a wrong index or a missing term costs
 *     (>= 1e-2). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/float_bits.h"
#include "../src/gemm/gemm_implicit.h"
#include "../src/kernels/gemm_kernels.h"
#include "../src/kernels/conv_kernels.h"
#include "../src/kernels/pool_kernels.h"
#include "gradcheck.h"
#include "harness.h"
#include "tests.h"

#define LOWP_FACTOR 2
#define F32_FACTOR 256

/* f32 first at f32_factor, then f16 and bf16 at the check's own (low-precision) factors: the two
 * error sources differ too much for one factor of u to fit both (see the top of this file). */
static void run_dtypes(gradcheck c, double f32_factor) {
    gradcheck f32 = c;
    f32.rtol_factor = f32.atol_factor = f32_factor;
    gradcheck_run(&f32, AMP_F32);
    gradcheck_run(&c, AMP_F16);
    gradcheck_run(&c, AMP_BF16);
}

/* ---- conv2d ---- */

/* Uniform in [-0.5, 0.5) with 24 bits (exact in fp32), from a 64-bit LCG (Knuth's MMIX constants). */
static float next_uniform(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(*s >> 40) / 16777216.0f - 0.5f;
}

typedef struct {
    int n, c, h, w, o, kh, kw, stride, pad;
    bool bias;
} conv_user;

static int conv_out(int size, int k, int stride, int pad) { return (size + 2 * pad - k) / stride + 1; }

static amp_tensor *build_conv(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    const conv_user *u = user;
    amp_tensor *out = amp_conv2d(ctx, in[0], in[1], u->bias ? in[2] : NULL, u->stride, u->pad);
    if (out) {
        CHECK_EQ_INT(out->op, AMP_OP_CONV2D);
        CHECK_EQ_INT(out->compute_dtype, in[0]->dtype);
        CHECK_EQ_INT(out->shape[2], conv_out(u->h, u->kh, u->stride, u->pad));
        CHECK_EQ_INT(out->shape[3], conv_out(u->w, u->kw, u->stride, u->pad));
    }
    return out;
}

/* The direct definition: y[b,o,oy,ox] = bias[o] + sum_{c,ky,kx} x[b,c,oy*s-p+ky,ox*s-p+kx] w[o,c,ky,kx]. */
static void ref_conv(const double *const *in, double *out, const void *user) {
    const conv_user *u = user;
    const int oh = conv_out(u->h, u->kh, u->stride, u->pad), ow = conv_out(u->w, u->kw, u->stride, u->pad);
    for (int b = 0; b < u->n; b++)
        for (int o = 0; o < u->o; o++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    double s = u->bias ? in[2][o] : 0.0;
                    for (int c = 0; c < u->c; c++)
                        for (int ky = 0; ky < u->kh; ky++)
                            for (int kx = 0; kx < u->kw; kx++) {
                                const int iy = oy * u->stride - u->pad + ky, ix = ox * u->stride - u->pad + kx;
                                if (iy < 0 || iy >= u->h || ix < 0 || ix >= u->w) continue;
                                s += in[0][((b * u->c + c) * u->h + iy) * u->w + ix] *
                                     in[1][((o * u->c + c) * u->kh + ky) * u->kw + kx];
                            }
                    out[((b * u->o + o) * oh + oy) * ow + ox] = s;
                }
}

/* Batch chunking: with 11 images of 16 x 64 x 64 and a 5x5 kernel the fp32 columns take 6.6 MB per
 * image, over conv.c's per-chunk scratch bound (2 MiB), so forward and backward run in 11 chunks of
 * one image each, the over-bound single image included (dW accumulates across chunks). Checked
 * against the direct definition, in double, elementwise. */
static void check_conv_chunked(void) {
    enum { N = 11, C = 16, H = 64, W = 64, K = 5, PAD = 2, HW = H * W };
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    float *xs = malloc(sizeof(float) * N * C * HW), ws[C * K * K], *gs = malloc(sizeof(float) * N * HW);
    double *y = calloc(N * HW, sizeof(double)), *dx = calloc((size_t)N * C * HW, sizeof(double));
    double dw[C * K * K] = {0}, db = 0;
    float *got = malloc(sizeof(float) * N * C * HW);
    uint64_t s = harness_seed();
    for (int i = 0; i < N * C * HW; i++) xs[i] = next_uniform(&s);
    for (int i = 0; i < C * K * K; i++) ws[i] = next_uniform(&s);
    for (int i = 0; i < N * HW; i++) gs[i] = next_uniform(&s);
    const float bias = 0.25f;
    amp_tensor *x = amp_tensor_from(ctx, AMP_F32, 4, (const int64_t[]){N, C, H, W}, xs, AMP_F32);
    amp_tensor *w = amp_tensor_from(ctx, AMP_F32, 4, (const int64_t[]){1, C, K, K}, ws, AMP_F32);
    amp_tensor *b = amp_tensor_from(ctx, AMP_F32, 1, (const int64_t[]){1}, &bias, AMP_F32);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor_set_requires_grad(w, true);
    amp_tensor_set_requires_grad(b, true);
    amp_tensor *out = amp_conv2d(ctx, x, w, b, 1, PAD);
    amp_tensor *seed = amp_tensor_from(ctx, AMP_F32, 4, (const int64_t[]){N, 1, H, W}, gs, AMP_F32);
    if (!CHECK_MSG(out && amp_backward(ctx, out, seed) == AMP_OK, "chunked conv failed: %s", amp_ctx_error(ctx)))
        goto done;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int ky = 0; ky < K; ky++)
                for (int kx = 0; kx < K; kx++) {
                    const double wv = ws[(c * K + ky) * K + kx];
                    for (int oy = 0; oy < H; oy++) {
                        const int iy = oy - PAD + ky;
                        if (iy < 0 || iy >= H) continue;
                        for (int ox = 0; ox < W; ox++) {
                            const int ix = ox - PAD + kx;
                            if (ix < 0 || ix >= W) continue;
                            const size_t xi = ((size_t)(n * C + c) * H + iy) * W + ix,
                                         yi = (size_t)n * HW + oy * W + ox;
                            y[yi] += xs[xi] * wv;
                            dx[xi] += gs[yi] * wv;
                            dw[(c * K + ky) * K + kx] += gs[yi] * (double)xs[xi];
                        }
                    }
                }
    for (int i = 0; i < N * HW; i++) db += gs[i];
    /* 400-term fp32 dot products (forward), 25-term (dx), 45056-term (dw): sqrt(n) u32 with margin */
    int bad = 0;
    amp_tensor_read(out, got, AMP_F32);
    for (int i = 0; i < N * HW && bad < 3; i++)
        if (!(fabs(got[i] - (y[i] + bias)) <= 1e-5))
            bad++, CHECK_MSG(false, "y[%d] %.9g, want %.9g", i, got[i], y[i] + bias);
    amp_tensor_read(x->grad, got, AMP_F32);
    for (int i = 0; i < N * C * HW && bad < 3; i++)
        if (!(fabs(got[i] - dx[i]) <= 1e-5)) bad++, CHECK_MSG(false, "dx[%d] %.9g, want %.9g", i, got[i], dx[i]);
    amp_tensor_read(w->grad, got, AMP_F32);
    for (int i = 0; i < C * K * K && bad < 3; i++)
        if (!(fabs(got[i] - dw[i]) <= 1e-3)) bad++, CHECK_MSG(false, "dw[%d] %.9g, want %.9g", i, got[i], dw[i]);
    CHECK_MSG(fabs(amp_tensor_get(b->grad, 0) - db) <= 1e-3, "db %.9g, want %.9g", amp_tensor_get(b->grad, 0), db);
    CHECK(bad == 0);
done:
    free(xs), free(gs), free(y), free(dx), free(got);
    amp_ctx_free(ctx);
}

/* The passes around the GEMMs run on the thread pool, one task per image or channel, and GEMM's bits
 * do not depend on the thread count: so neither do conv2d's, forward or backward, in any dtype. */
static void check_conv_thread_invariance(void) {
    enum { N = 4, C = 8, H = 16, W = 16, O = 16, K = 3 };
    const int saved_threads = amp_get_num_threads();
    float *xs = malloc(sizeof(float) * N * C * H * W), ws[O * C * K * K], *gs = malloc(sizeof(float) * N * O * H * W);
    uint64_t s = harness_seed();
    for (int i = 0; i < N * C * H * W; i++) xs[i] = next_uniform(&s);
    for (int i = 0; i < O * C * K * K; i++) ws[i] = next_uniform(&s);
    for (int i = 0; i < N * O * H * W; i++) gs[i] = next_uniform(&s);
    for (int d = 0; d < 3; d++) {
        const amp_dtype dt = d == 0 ? AMP_F32 : d == 1 ? AMP_F16 : AMP_BF16;
        const size_t es = amp_dtype_size(dt);
        unsigned char *first[4] = {0};
        const int threads[2] = {1, 3};
        for (int r = 0; r < 2; r++) {
            amp_set_num_threads(threads[r]);
            amp_ctx *ctx = NULL;
            if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) break;
            amp_tensor *x = amp_tensor_from(ctx, dt, 4, (const int64_t[]){N, C, H, W}, xs, AMP_F32);
            amp_tensor *w = amp_tensor_from(ctx, dt, 4, (const int64_t[]){O, C, K, K}, ws, AMP_F32);
            amp_tensor *b = amp_tensor_from(ctx, dt, 1, (const int64_t[]){O}, ws, AMP_F32);
            amp_tensor_set_requires_grad(x, true);
            amp_tensor_set_requires_grad(w, true);
            amp_tensor_set_requires_grad(b, true);
            amp_tensor *y = amp_conv2d(ctx, x, w, b, 1, 1);
            amp_tensor *seed = amp_tensor_from(ctx, dt, 4, (const int64_t[]){N, O, H, W}, gs, AMP_F32);
            if (CHECK_MSG(y && amp_backward(ctx, y, seed) == AMP_OK, "%s", amp_ctx_error(ctx))) {
                const amp_tensor *res[4] = {y, x->grad, w->grad, b->grad};
                for (int q = 0; q < 4; q++) {
                    const size_t bytes = (size_t)amp_tensor_numel(res[q]) * es;
                    if (r == 0) {
                        first[q] = malloc(bytes);
                        memcpy(first[q], res[q]->data, bytes);
                    } else if (first[q]) {
                        CHECK_MSG(memcmp(first[q], res[q]->data, bytes) == 0, "%s, %s: result %d differs with 3 threads",
                                  amp_isa_name(amp_isa_active()), amp_dtype_name(dt), q);
                    }
                }
            }
            amp_ctx_free(ctx);
        }
        for (int q = 0; q < 4; q++) free(first[q]);
    }
    amp_set_num_threads(saved_threads);
    free(xs), free(gs);
}

/* The stride-1 padded-plane im2col and col2im against the general ones, bit for bit, on one image
 * (b = 1) of a chunk of 3 starting at image 1 of 4: columns for both element sizes (every byte
 * written: col starts as garbage), and dx (the reference adds into zeros, the padded one writes;
 * other images' planes stay untouched). */
/* A stride-1 geometry from a {c, h, w, kh, kw, pad} row: n images, o output channels. */
static amp_conv_geom stride1_geom(const int q[6], int64_t n, int64_t o) {
    amp_conv_geom g = {.n = n, .c = q[0], .h = q[1], .w = q[2], .o = o, .kh = q[3], .kw = q[4], .stride = 1, .pad = q[5]};
    g.oh = g.h + 2 * g.pad - g.kh + 1, g.ow = g.w + 2 * g.pad - g.kw + 1;
    return g;
}

/* The implicit GEMM's offsets in the padded images: koff[r] of each k index r = (c, ky, kx), pix[i]
 * of each output pixel (amp_conv_pixel_offset). */
static void implicit_offsets(const amp_conv_geom *g, int32_t *koff, int32_t *pix) {
    const int64_t hp = g->h + 2 * g->pad, wp = g->w + 2 * g->pad, pixels = g->n * g->oh * g->ow;
    for (int64_t c = 0, r = 0; c < g->c; c++)
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) koff[r++] = (int32_t)((c * hp + ky) * wp + kx);
    const amp_conv_implicit c0 = {.g = g};
    for (int64_t i = 0; i < pixels; i++) pix[i] = (int32_t)amp_conv_pixel_offset(&c0, i);
}

static void check_conv_padded_twin(void) {
    static const int geoms[][6] = {/* c, h, w, kh, kw, pad */
                                   {3, 5, 7, 3, 3, 1}, {2, 6, 4, 5, 5, 2}, {1, 28, 28, 5, 5, 2}, {2, 3, 9, 1, 1, 0},
                                   {2, 4, 5, 2, 3, 0}, {1, 3, 3, 3, 3, 3}, {2, 9, 40, 3, 5, 2}, {1, 2, 1, 2, 1, 0},
                                   {1, 4, 20, 3, 3, 1}, {1, 3, 70, 3, 3, 1},
                                   /* AVX-512 im2col: 2 output columns in a 20-wide plane (a vector's
                                    * sources span too many rows: the row copies), P = 32 (no tail),
                                    * the largest plane the bound takes (225 fp32 blocks), the cnn's
                                    * second layer */
                                   {2, 12, 20, 3, 19, 0}, {1, 4, 8, 3, 3, 1}, {1, 60, 60, 5, 5, 2},
                                   {3, 14, 14, 5, 5, 2}};
    enum { N = 4, B0 = 1, NB = 3, B = 1 };
    uint64_t s = harness_seed();
    for (size_t v = 0; v < sizeof geoms / sizeof geoms[0]; v++) {
        const int *q = geoms[v];
        amp_conv_geom g = stride1_geom(q, N, 1);
        if (!CHECK_MSG(amp_conv_padded_ok(&g), "geometry %zu should take the padded path", v)) continue;
        const int64_t k = g.c * g.kh * g.kw, p = g.oh * g.ow, ncol = k * NB * p, nx = N * g.c * g.h * g.w;
        const int64_t plane0 = (B0 + B) * g.c * g.h * g.w, nplane = g.c * g.h * g.w;
        float *x = malloc(sizeof(float) * (size_t)nx), *dcol = malloc(sizeof(float) * (size_t)ncol);
        float *col_ref = malloc(sizeof(float) * (size_t)ncol), *col = malloc(sizeof(float) * (size_t)ncol);
        float *dx_ref = malloc(sizeof(float) * (size_t)nx), *dx = malloc(sizeof(float) * (size_t)nx);
        for (int64_t i = 0; i < nx; i++) x[i] = next_uniform(&s);
        for (int64_t i = 0; i < ncol; i++) dcol[i] = next_uniform(&s);
        for (size_t es = 2; es <= 4; es += 2) {
            memset(col_ref, 0xAB, sizeof(float) * (size_t)ncol);
            memset(col, 0xAB, sizeof(float) * (size_t)ncol);
            amp_conv_im2col_ref(&g, x, es, B0, NB, B, col_ref);
            amp_conv_im2col_padded(&g, x, es, B0, NB, B, col);
            CHECK_MSG(memcmp(col, col_ref, sizeof(float) * (size_t)ncol) == 0,
                      "im2col padded (%s) != ref, geometry %zu, es %zu", amp_isa_name(amp_isa_active()), v, es);
            memset(col, 0xAB, sizeof(float) * (size_t)ncol);
            amp_conv_im2col_padded_ref(&g, x, es, B0, NB, B, col);
            CHECK_MSG(memcmp(col, col_ref, sizeof(float) * (size_t)ncol) == 0,
                      "im2col padded (C) != ref, geometry %zu, es %zu", v, es);
        }
        for (int64_t i = 0; i < nx; i++) dx_ref[i] = dx[i] = 7.0f;
        for (int64_t i = 0; i < nplane; i++) dx_ref[plane0 + i] = 0.0f;
        amp_conv_col2im_ref(&g, dcol, B0, NB, B, dx_ref);
        amp_conv_col2im_padded(&g, dcol, B0, NB, B, dx);
        CHECK_MSG(memcmp(dx, dx_ref, sizeof(float) * (size_t)nx) == 0, "col2im padded (%s) != ref, geometry %zu",
                  amp_isa_name(amp_isa_active()), v);
        for (int64_t i = 0; i < nx; i++) dx[i] = 7.0f;
        amp_conv_col2im_padded_ref(&g, dcol, B0, NB, B, dx);
        CHECK_MSG(memcmp(dx, dx_ref, sizeof(float) * (size_t)nx) == 0, "col2im padded (C) != ref, geometry %zu", v);
        free(x), free(dcol), free(col_ref), free(col), free(dx_ref), free(dx);
    }
}


/* The implicit GEMM's panels: the AVX-512 versions against the references, bit for bit, for every
 * panel position of a chunk of 3 padded images (forward: panels straddling images; weight
 * gradient: rows straddling channels, pixel pairs straddling output rows and images), r = 6, 12,
 * 16 (and 32, which the SIMD versions decline), both element sizes, a k block starting past 0 and
 * an odd one (the bf16 pair padding). The panels start as garbage. */
static void check_conv_implicit_panels(void) {
#if defined(__x86_64__)
    if (!amp_isa_supported(AMP_ISA_AVX512)) return;
    static const int geoms[][6] = {/* c, h, w, kh, kw, pad */
                                   {3, 14, 14, 5, 5, 2}, {1, 28, 28, 5, 5, 2}, {2, 7, 9, 3, 3, 1},
                                   {1, 5, 6, 1, 1, 0},   {2, 3, 3, 3, 3, 0},   {2, 4, 30, 3, 2, 1}};
    enum { NB = 3 };
    uint64_t s = harness_seed();
    for (size_t v = 0; v < sizeof geoms / sizeof geoms[0]; v++) {
        const int *q = geoms[v];
        amp_conv_geom g = stride1_geom(q, NB, 1);
        const int64_t hp = g.h + 2 * g.pad, wp = g.w + 2 * g.pad, k = g.c * g.kh * g.kw, pixels = NB * g.oh * g.ow;
        const int64_t nxp = NB * g.c * hp * wp;
        uint32_t *xp = malloc(sizeof(uint32_t) * (size_t)nxp + AMP_CONV_IMPLICIT_SLACK);
        int32_t *koff = malloc(sizeof(int32_t) * (size_t)k), *pix = malloc(sizeof(int32_t) * (size_t)pixels);
        uint32_t *ref = malloc(sizeof(uint32_t) * 32 * (size_t)(k + 1)), *got = malloc(sizeof(uint32_t) * 32 * (size_t)(k + 1));
        for (int64_t i = 0; i < nxp; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            xp[i] = (uint32_t)(s >> 32);
        }
        memset(xp + nxp, 0, AMP_CONV_IMPLICIT_SLACK);
        implicit_offsets(&g, koff, pix);
        int64_t simd_panels = 0, simd_k_panels = 0, simd_k_panels_f32 = 0;
        for (size_t es = 2; es <= 4; es += 2) {
            const amp_conv_implicit ci = {.g = &g, .xp = xp, .es = es, .koff = koff, .pix = pix};
            static const int rs[] = {6, 12, 16, 32};
            for (size_t ri = 0; ri < 4; ri++) {
                const int r = rs[ri];
                for (int blk = 0; blk < 2; blk++) {
                    const int64_t p0 = blk == 0 ? 0 : (k > 1 ? 1 : 0), kc = blk == 0 ? k : k - p0;
                    for (int64_t i0 = 0; i0 < pixels; i0 += r) {
                        const int64_t rows = pixels - i0 < r ? pixels - i0 : r;
                        memset(ref, 0xCD, sizeof(uint32_t) * 32 * (size_t)(k + 1));
                        memset(got, 0xCD, sizeof(uint32_t) * 32 * (size_t)(k + 1));
                        amp_conv_pack_panel_ref(&ci, ref, i0, rows, p0, kc, r);
                        if (!amp_conv_pack_panel_avx512(&ci, got, i0, rows, p0, kc, r)) continue;
                        simd_panels++;
                        CHECK_MSG(memcmp(got, ref, sizeof(uint32_t) * 32 * (size_t)(k + 1)) == 0,
                                  "implicit panel avx512 != ref: geometry %zu, es %zu, r %d, i0 %lld, p0 %lld, kc %lld",
                                  v, es, r, (long long)i0, (long long)p0, (long long)kc);
                    }
                    /* the weight gradient's panels: rows are k indices, columns pixels (from p0) */
                    const int64_t q0 = blk == 0 ? 0 : 3, qc = blk == 0 ? pixels : pixels - 3 - (pixels > 8);
                    if (qc < 1) continue;
                    const size_t kbytes = sizeof(uint32_t) * 32 * (size_t)(pixels + 1);
                    uint32_t *kref = malloc(kbytes), *kgot = malloc(kbytes);
                    for (int64_t j0 = 0; j0 < k; j0 += r) {
                        const int64_t rows = k - j0 < r ? k - j0 : r;
                        memset(kref, 0xCD, kbytes);
                        memset(kgot, 0xCD, kbytes);
                        amp_conv_pack_panel_k_ref(&ci, kref, j0, rows, q0, qc, r);
                        if (!amp_conv_pack_panel_k_avx512(&ci, kgot, j0, rows, q0, qc, r)) continue;
                        simd_k_panels++;
                        simd_k_panels_f32 += es == 4;
                        CHECK_MSG(memcmp(kgot, kref, kbytes) == 0,
                                  "implicit k panel avx512 != ref: geometry %zu, es %zu, r %d, j0 %lld, p0 %lld, kc %lld",
                                  v, es, r, (long long)j0, (long long)q0, (long long)qc);
                    }
                    free(kref), free(kgot);
                }
            }
        }
        if (v < 3)
            CHECK_MSG(simd_panels > 0 && simd_k_panels > 0 && simd_k_panels_f32 > 0,
                      "geometry %zu: no panel took the AVX-512 path (%lld, %lld, fp32 %lld)", v, (long long)simd_panels,
                      (long long)simd_k_panels, (long long)simd_k_panels_f32);
        free(xp), free(koff), free(pix), free(ref), free(got);
    }
#endif
}

/* The bias gradient's 4-row bf16 sums: the AVX-512 version against the reference, bit for bit, for
 * every length 0..300 (the tail after the 8-lane blocks, the blocks' combination), values of mixed
 * signs and magnitudes with zeros, subnormals and infinities (no NaN inputs: which NaN an add keeps
 * is the compiler's choice of operand order). */
static void check_conv_sum_bf16(void) {
#if defined(__x86_64__)
    if (!amp_isa_supported(AMP_ISA_AVX512)) return;
    enum { NMAX = 300, STRIDE = NMAX + 5 };
    uint16_t *v = malloc(sizeof(uint16_t) * 4 * STRIDE);
    uint64_t s = harness_seed();
    for (int i = 0; i < 4 * STRIDE; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const unsigned r = (unsigned)(s >> 40);
        uint16_t h = (uint16_t)(((r & 1u) << 15) | ((0x70u + (r >> 1) % 24u) << 7) | ((r >> 6) & 0x7Fu));
        if (r % 53 == 0) h = (uint16_t)((r & 1u) << 15); /* +-0 */
        if (r % 61 == 0) h = (uint16_t)(((r & 1u) << 15) | ((r >> 7) & 0x7Fu)); /* subnormal */
        if (r % 397 == 0) h = (uint16_t)(((r & 1u) << 15) | 0x7F80u); /* +-inf */
        v[i] = h;
    }
    int bad = 0;
    for (int n = 0; n <= NMAX; n++) {
        float want[4], got[4];
        amp_conv_sum_bf16_x4_ref(v, STRIDE, n, want);
        amp_conv_sum_bf16_x4_avx512(v, STRIDE, n, got);
        if (memcmp(want, got, sizeof want) != 0 && bad++ < 3)
            CHECK_MSG(0, "sum_bf16_x4 avx512 != ref at n = %d: %g %g %g %g vs %g %g %g %g", n, (double)got[0],
                      (double)got[1], (double)got[2], (double)got[3], (double)want[0], (double)want[1],
                      (double)want[2], (double)want[3]);
    }
    CHECK(bad == 0);
    free(v);
#endif
}

/* The direct tiles (amp_conv_direct_tile_avx512 and _avx2) against their reference: the same tile as
 * the reference's R-row panel (amp_conv_pack_panel_ref) run through the path's GEMM kernel's
 * ukernel_ct, bit for bit: AVX-512's 12 x 32 tiles in fp32 and bf16 pairs, AVX2's 6 x 16 in fp32;
 * every R-pixel tile of a chunk of 3 padded images (tiles straddling images, a partial last tile),
 * k blocks from 0 and from an odd p0 with an odd kc (the pair pad), all NC columns and a partial
 * 5/8 of them, beta 0 (C unread: it starts as NaN) and 1. The values are small integers and halves,
 * so that bf16 and fp32 hold them exactly and no sum is in doubt; occasional infinities check that
 * a pad lane never multiplies one into a NaN. */
#if defined(__x86_64__)
static void direct_tile(amp_isa isa, const void *xp, size_t es, const int32_t *steps, const int32_t *rows, int64_t kc,
                        const void *bpanel, float *c, int64_t ldc, int m, int n, float beta) {
    if (isa == AMP_ISA_AVX2)
        amp_conv_direct_tile_avx2(xp, steps, rows, kc, bpanel, c, ldc, m, n, beta);
    else
        amp_conv_direct_tile_avx512(xp, es, steps, rows, kc, bpanel, c, ldc, m, n, beta);
}
#endif

static void check_conv_direct_tile_isa(amp_isa isa) {
#if defined(__x86_64__)
    if (!amp_isa_supported(isa)) return;
    const int R = isa == AMP_ISA_AVX2 ? 6 : 12, NC = isa == AMP_ISA_AVX2 ? 16 : 32; /* the tile */
    /* the bf16 pairs kernel is the dot method's (amp/gemm.h), whichever method is the default here */
    const amp_gemm_bf16_method method = amp_gemm_bf16_method_active();
    if (amp_gemm_bf16_method_supported(AMP_GEMM_BF16_DOT)) amp_gemm_bf16_method_set(AMP_GEMM_BF16_DOT);
    static const int geoms[][6] = {/* c, h, w, kh, kw, pad */
                                   {3, 14, 14, 5, 5, 2}, {2, 7, 9, 3, 3, 1}, {1, 28, 28, 5, 5, 2}, {2, 4, 30, 3, 2, 1}};
    enum { NB = 3 };
    uint64_t s = harness_seed();
    int64_t tiles = 0;
    for (size_t v = 0; v < sizeof geoms / sizeof geoms[0]; v++) {
        const int *q = geoms[v];
        amp_conv_geom g = stride1_geom(q, NB, 32);
        const int64_t hp = g.h + 2 * g.pad, wp = g.w + 2 * g.pad, k = g.c * g.kh * g.kw, pixels = NB * g.oh * g.ow;
        const int64_t nxp = NB * g.c * hp * wp;
        int32_t *koff = malloc(sizeof(int32_t) * (size_t)k), *pix = malloc(sizeof(int32_t) * (size_t)pixels);
        implicit_offsets(&g, koff, pix);
        for (size_t es = isa == AMP_ISA_AVX2 ? 4 : 2; es <= 4; es += 2) {
            const amp_dtype dt = es == 2 ? AMP_BF16 : AMP_F32;
            const amp_gemm_kernel *kern = amp_gemm_kernel_for(isa, dt);
            if (kern->mr != R || kern->nr != NC || (dt == AMP_BF16 && kern->packed != AMP_GEMM_PACKED_BF16_PAIRS))
                continue;
            /* xp and W as bits of small values: fp32 or bf16 (the top half of the fp32) */
            unsigned char *xp = malloc((size_t)nxp * es + AMP_CONV_IMPLICIT_SLACK);
            unsigned char *w = malloc((size_t)(NC * k) * es);
            for (int64_t i = 0; i < nxp + NC * k; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                float f = (float)((int)(s >> 59) - 16) * 0.5f;
                if ((s >> 40) % 97 == 0 && i < nxp) f = INFINITY;
                uint32_t u;
                memcpy(&u, &f, sizeof u);
                unsigned char *d = i < nxp ? xp + (size_t)i * es : w + (size_t)(i - nxp) * es;
                if (es == 4) memcpy(d, &u, 4);
                else {
                    const uint16_t h = (uint16_t)(u >> 16);
                    memcpy(d, &h, 2);
                }
            }
            memset(xp + (size_t)nxp * es, 0, AMP_CONV_IMPLICIT_SLACK);
            const amp_conv_implicit ci = {.g = &g, .xp = xp, .es = es, .koff = koff, .pix = pix};
            const size_t bbytes = (size_t)(NC * (k + 1)) * 4;
            void *bpanel = malloc(bbytes), *apanel = malloc((size_t)(R * (k + 1)) * 4);
            const int64_t ldc = pixels + 3;
            float *cref = malloc(sizeof(float) * (size_t)(NC * ldc)), *cgot = malloc(sizeof(float) * (size_t)(NC * ldc));
            for (int blk = 0; blk < 2; blk++) {
                const int64_t p0 = blk == 0 ? 0 : 1, kc = blk == 0 ? k : (k - 1) / 2 * 2 - 1;
                if (kc < 1) continue;
                kern->pack(bpanel, w + (size_t)p0 * es, k, false, NC, kc, NC);
                for (int bi = 0; bi < 2; bi++) {
                    const float beta = bi == 0 ? 0.0f : 1.0f;
                    const int n = bi == 0 ? NC : NC * 5 / 8;
                    for (int64_t i = 0; i < NC * ldc; i++) {
                        cref[i] = cgot[i] = bi == 0 ? NAN : (float)(i % 7) - 3.0f;
                    }
                    for (int64_t i0 = 0; i0 < pixels; i0 += R) {
                        const int m = (int)(pixels - i0 < R ? pixels - i0 : R);
                        int32_t po[12];
                        for (int ii = 0; ii < R; ii++) po[ii] = pix[i0 + (ii < m ? ii : 0)];
                        amp_conv_pack_panel_ref(&ci, apanel, i0, m, p0, kc, R);
                        kern->ukernel_ct(kc, apanel, bpanel, cref + i0, ldc, m, n, 1.0f, beta);
                        direct_tile(isa, xp, es, koff + p0, po, kc, bpanel, cgot + i0, ldc, m, n, beta);
                        tiles++;
                    }
                    CHECK_MSG(memcmp(cref, cgot, sizeof(float) * (size_t)(NC * ldc)) == 0,
                              "%s direct tile != panel + ukernel_ct: geometry %zu, es %zu, p0 %lld, kc %lld, beta %g, n %d",
                              amp_isa_name(isa), v, es, (long long)p0, (long long)kc, (double)beta, n);
                }
            }
            /* the weight gradient's tiles: rows are R k indices (koff), steps pixels (pix) from q0,
             * against amp_conv_pack_panel_k_ref's panel + ukernel_ct; B is [NC, pixels] */
            const size_t kb = (size_t)(NC * (pixels + 1)) * 4;
            unsigned char *wb = malloc((size_t)(NC * pixels) * es);
            void *bk = malloc(kb), *ak = malloc((size_t)(R * (pixels + 1)) * 4);
            for (int64_t i = 0; i < NC * pixels; i++) memcpy(wb + (size_t)i * es, xp + (size_t)(i % nxp) * es, es);
            const int64_t ldk = k + 5;
            float *kref = malloc(sizeof(float) * (size_t)(NC * ldk)), *kgot = malloc(sizeof(float) * (size_t)(NC * ldk));
            for (int blk = 0; blk < 2; blk++) {
                const int64_t q0 = blk == 0 ? 0 : 3, qc = blk == 0 ? pixels : pixels - 3 - (pixels % 2 == 0);
                kern->pack(bk, wb + (size_t)q0 * es, pixels, false, NC, qc, NC);
                for (int64_t i = 0; i < NC * ldk; i++) kref[i] = kgot[i] = (float)(i % 5) - 2.0f;
                for (int64_t j0 = 0; j0 < k; j0 += R) {
                    const int m = (int)(k - j0 < R ? k - j0 : R);
                    int32_t ro[12];
                    for (int ii = 0; ii < R; ii++) ro[ii] = koff[j0 + (ii < m ? ii : 0)];
                    amp_conv_pack_panel_k_ref(&ci, ak, j0, m, q0, qc, R);
                    kern->ukernel_ct(qc, ak, bk, kref + j0, ldk, m, NC, 1.0f, 1.0f);
                    direct_tile(isa, xp, es, pix + q0, ro, qc, bk, kgot + j0, ldk, m, NC, 1.0f);
                    tiles++;
                }
                CHECK_MSG(memcmp(kref, kgot, sizeof(float) * (size_t)(NC * ldk)) == 0,
                          "%s direct k tile != k panel + ukernel_ct: geometry %zu, es %zu, q0 %lld, kc %lld",
                          amp_isa_name(isa), v, es, (long long)q0, (long long)qc);
            }
            free(wb), free(bk), free(ak), free(kref), free(kgot);
            free(xp), free(w), free(bpanel), free(apanel), free(cref), free(cgot);
        }
        free(koff), free(pix);
    }
    amp_gemm_bf16_method_set(method);
    CHECK_MSG(tiles > 0, "no %s direct tile was checked", amp_isa_name(isa));
#else
    (void)isa;
#endif
}

static void check_conv_direct_tile(void) {
    check_conv_direct_tile_isa(AMP_ISA_AVX512);
    check_conv_direct_tile_isa(AMP_ISA_AVX2);
}

/* conv2d's forward and weight gradient through the implicit GEMM against im2col + amp_gemm (+ bias
 * + one rounding), bit for bit, in f32, bf16 and f16; on AVX2 the same checks cover its direct tiles
 * (every shape here, in either orientation), on the portable path the im2col versions. On AVX-512: C = 8, O = 64, a product the GEMM computes as C^T (O against mr =
 * 12: panels of 12 pixels); C = 1, O = 32, 28 x 28 (the cnn's conv1, K = 25: odd, a pair's pad),
 * a product it does not (panels of nr = 32 pixels, two 16-pixel ones each), 3 x 784 pixels ending
 * in a part panel. */
static void check_conv_implicit_forward_shape(int N, int C, int H, int W, int O) {
    enum { KS = 5, PAD = 2 };
    const int P = H * W, KK = C * KS * KS;
    float *xs = malloc(sizeof(float) * N * C * H * W), *ws = malloc(sizeof(float) * O * KK);
    float *bs = malloc(sizeof(float) * O), *bias = malloc(sizeof(float) * O), *row = malloc(sizeof(float) * P);
    float *col = malloc(sizeof(float) * KK * N * P), *y = malloc(sizeof(float) * O * N * P);
    unsigned char *want = malloc(sizeof(float) * N * O * P);
    uint64_t s = harness_seed();
    for (int i = 0; i < N * C * H * W; i++) xs[i] = next_uniform(&s);
    for (int i = 0; i < O * KK; i++) ws[i] = next_uniform(&s);
    for (int i = 0; i < O; i++) bs[i] = next_uniform(&s);
    const amp_conv_geom g = {.n = N, .c = C, .h = H, .w = W, .o = O, .kh = KS, .kw = KS, .oh = H, .ow = W,
                             .stride = 1, .pad = PAD};
    for (int d = 0; d < 3; d++) {
        const amp_dtype dt = d == 0 ? AMP_F32 : d == 1 ? AMP_BF16 : AMP_F16;
        const size_t es = amp_dtype_size(dt);
        amp_ctx *ctx = NULL;
        if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) break;
        amp_tensor *x = amp_tensor_from(ctx, dt, 4, (const int64_t[]){N, C, H, W}, xs, AMP_F32);
        amp_tensor *w = amp_tensor_from(ctx, dt, 4, (const int64_t[]){O, C, KS, KS}, ws, AMP_F32);
        amp_tensor *b = amp_tensor_from(ctx, dt, 1, (const int64_t[]){O}, bs, AMP_F32);
        amp_tensor *out = amp_conv2d(ctx, x, w, b, 1, PAD);
        if (CHECK_MSG(out, "%s", amp_ctx_error(ctx))) {
            amp_tensor_read(b, bias, AMP_F32);
            for (int64_t i = 0; i < N; i++) amp_conv_im2col_ref(&g, x->data, es, 0, N, i, col);
            /* amp_gemm_untiled: conv's kernel on every route (amp_gemm's but for AMX's tiles) */
            CHECK(amp_gemm_untiled(dt, false, false, O, N * P, KK, 1.0f, w->data, KK, col, N * P, 0.0f, y, N * P) ==
                  AMP_OK);
            for (int i = 0; i < N; i++)
                for (int o = 0; o < O; o++) {
                    for (int e = 0; e < P; e++) row[e] = y[o * N * P + i * P + e] + bias[o];
                    amp_convert(want + (size_t)((i * O + o) * P) * es, dt, row, AMP_F32, P);
                }
            CHECK_MSG(memcmp(want, out->data, (size_t)(N * O * P) * es) == 0, "%s conv2d forward (%s) != im2col + gemm",
                      amp_dtype_name(dt), amp_isa_name(amp_isa_active()));
            /* the weight gradient (one chunk here): dW = dY col^T, as one GEMM on the stored columns */
            amp_tensor_set_requires_grad(w, true);
            amp_tensor *w2 = w;
            amp_tensor *out2 = amp_conv2d(ctx, x, w2, b, 1, PAD);
            float *gs = malloc(sizeof(float) * N * O * P), *dw = calloc((size_t)O * KK, sizeof(float));
            unsigned char *gp = malloc(sizeof(float) * O * N * P);
            for (int i = 0; i < N * O * P; i++) gs[i] = next_uniform(&s);
            amp_tensor *seed = amp_tensor_from(ctx, dt, 4, (const int64_t[]){N, O, H, W}, gs, AMP_F32);
            if (CHECK_MSG(out2 && seed && amp_backward(ctx, out2, seed) == AMP_OK && w2->grad, "%s", amp_ctx_error(ctx))) {
                for (int i = 0; i < N; i++)
                    for (int o = 0; o < O; o++)
                        memcpy(gp + (size_t)(o * N * P + i * P) * es, (const unsigned char *)seed->data +
                               (size_t)((i * O + o) * P) * es, (size_t)P * es);
                CHECK(amp_gemm_untiled(dt, false, true, O, KK, N * P, 1.0f, gp, N * P, col, N * P, 1.0f, dw, KK) ==
                      AMP_OK);
                const amp_dtype gdt = w2->grad->dtype;
                float *got = malloc(sizeof(float) * O * KK), *want_dw = malloc(sizeof(float) * O * KK);
                unsigned char *tmp = malloc(sizeof(float) * O * KK);
                amp_convert(tmp, gdt, dw, AMP_F32, (size_t)O * KK);
                amp_convert(want_dw, AMP_F32, tmp, gdt, (size_t)O * KK);
                amp_tensor_read(w2->grad, got, AMP_F32);
                CHECK_MSG(memcmp(got, want_dw, sizeof(float) * O * KK) == 0, "%s conv2d dW (%s) != gemm on the columns",
                          amp_dtype_name(dt), amp_isa_name(amp_isa_active()));
                free(got), free(want_dw), free(tmp);
            }
            free(gs), free(dw), free(gp);
        }
        amp_ctx_free(ctx);
    }
    free(xs), free(ws), free(col), free(y), free(want), free(bs), free(bias), free(row);
}

static void check_conv_implicit_forward(void) {
    check_conv_implicit_forward_shape(3, 8, 10, 10, 64);
    check_conv_implicit_forward_shape(3, 1, 28, 28, 32);
    /* K = 800: fp32 in two k blocks (the direct tiles' second adds to the first's C), a 7x7 image
     * (tiles straddle images); O = 64, so the GEMM would flip: the direct tiles */
    check_conv_implicit_forward_shape(5, 32, 7, 7, 64);
}

/* conv2d's stride-1 input gradient as a correlation (conv.c's conv_dx_correlate): x->grad against
 * the product written out here, bit for bit: the kernel flipped in both axes and transposed to
 * [C, O, K, K] by its own loop, dY's columns by amp_conv_im2col_ref on the derived geometry (dY's
 * planes, padding K - 1 - pad), one amp_gemm, rounded once to the gradient's dtype; f32, bf16 and f16,
 * 1 and 3 threads. C = 32 is the cnn's conv2 (the GEMM computes C^T: on AVX-512 the implicit GEMM),
 * C = 8 the other orientation (im2col; on AVX2 both take the direct tiles); the values against the direct definition in double, within
 * the fp32 sums' noise (f32) or one bf16 rounding (bf16). */
static void check_conv_dx_correlation(void) {
    static const int geoms[][5] = {/* n, c, hw, o, pad */ {3, 32, 8, 16, 1}, {2, 8, 9, 6, 2}, {2, 32, 7, 4, 0}};
    const int saved_threads = amp_get_num_threads();
    uint64_t s = harness_seed();
    for (size_t v = 0; v < sizeof geoms / sizeof geoms[0]; v++) {
        const int n = geoms[v][0], c = geoms[v][1], hw = geoms[v][2], o = geoms[v][3], pad = geoms[v][4];
        const int k = pad == 0 ? 3 : 2 * pad + 1, ohw = hw + 2 * pad - k + 1, p = hw * hw, kk = o * k * k;
        const amp_conv_geom gd = {.n = n, .c = o, .h = ohw, .w = ohw, .o = c, .kh = k, .kw = k, .oh = hw, .ow = hw,
                                  .stride = 1, .pad = k - 1 - pad};
        const size_t nx = (size_t)n * c * p, nw = (size_t)o * c * k * k, ny = (size_t)n * o * ohw * ohw;
        float *xs = malloc(sizeof(float) * nx), *ws = malloc(sizeof(float) * nw), *gs = malloc(sizeof(float) * ny);
        float *y = malloc(sizeof(float) * nx), *want = malloc(sizeof(float) * nx), *got = malloc(sizeof(float) * nx);
        double *dx = calloc(nx, sizeof(double));
        unsigned char *wt = malloc(sizeof(float) * nw), *col = malloc(sizeof(float) * (size_t)kk * n * p);
        for (size_t i = 0; i < nx; i++) xs[i] = next_uniform(&s);
        for (size_t i = 0; i < nw; i++) ws[i] = next_uniform(&s);
        for (size_t i = 0; i < ny; i++) gs[i] = next_uniform(&s);
        for (int d = 0; d < 3; d++) {
            const amp_dtype dt = d == 0 ? AMP_F32 : d == 1 ? AMP_BF16 : AMP_F16;
            const size_t es = amp_dtype_size(dt);
            for (int r = 0; r < 2; r++) {
                amp_set_num_threads(r == 0 ? 1 : 3);
                amp_ctx *ctx = NULL;
                if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) break;
                amp_tensor *x = amp_tensor_from(ctx, dt, 4, (const int64_t[]){n, c, hw, hw}, xs, AMP_F32);
                amp_tensor *w = amp_tensor_from(ctx, dt, 4, (const int64_t[]){o, c, k, k}, ws, AMP_F32);
                amp_tensor *seed = amp_tensor_from(ctx, dt, 4, (const int64_t[]){n, o, ohw, ohw}, gs, AMP_F32);
                amp_tensor_set_requires_grad(x, true);
                amp_tensor *out = amp_conv2d(ctx, x, w, NULL, 1, pad);
                if (!CHECK_MSG(out && seed && amp_backward(ctx, out, seed) == AMP_OK && x->grad, "%s",
                               amp_ctx_error(ctx))) {
                    amp_ctx_free(ctx);
                    continue;
                }
                if (r == 0) { /* the product, from the operands amp saw (rounded to dt) */
                    for (int ci = 0; ci < c; ci++)
                        for (int oi = 0; oi < o; oi++)
                            for (int t = 0; t < k * k; t++)
                                memcpy(wt + ((size_t)(ci * o + oi) * k * k + t) * es,
                                       (const unsigned char *)w->data + ((size_t)(oi * c + ci) * k * k + k * k - 1 - t) * es,
                                       es);
                    for (int b = 0; b < n; b++) amp_conv_im2col_ref(&gd, seed->data, es, 0, n, b, col);
                    CHECK(amp_gemm_untiled(dt, false, false, c, n * p, kk, 1.0f, wt, kk, col, n * p, 0.0f, y, n * p) ==
                          AMP_OK);
                    for (int b = 0; b < n; b++)
                        for (int ci = 0; ci < c; ci++)
                            memcpy(want + (size_t)(b * c + ci) * p, y + (size_t)ci * n * p + (size_t)b * p,
                                   sizeof(float) * (size_t)p);
                    unsigned char *tmp = malloc(sizeof(float) * nx);
                    amp_convert(tmp, x->grad->dtype, want, AMP_F32, nx);
                    amp_convert(want, AMP_F32, tmp, x->grad->dtype, nx);
                    free(tmp);
                }
                amp_tensor_read(x->grad, got, AMP_F32);
                CHECK_MSG(memcmp(got, want, sizeof(float) * nx) == 0,
                          "geometry %zu, %s, %d thread(s), %s: dX != flipped-kernel im2col + gemm (seed %llu)", v,
                          amp_dtype_name(dt), r == 0 ? 1 : 3, amp_isa_name(amp_isa_active()),
                          (unsigned long long)harness_seed());
                if (r == 0 && d == 0) { /* the definition, in double, on the fp32 operands */
                    for (int b = 0; b < n; b++)
                        for (int oi = 0; oi < o; oi++)
                            for (int ci = 0; ci < c; ci++)
                                for (int ky = 0; ky < k; ky++)
                                    for (int kx = 0; kx < k; kx++)
                                        for (int oy = 0; oy < ohw; oy++)
                                            for (int ox = 0; ox < ohw; ox++) {
                                                const int iy = oy - pad + ky, ix = ox - pad + kx;
                                                if (iy < 0 || iy >= hw || ix < 0 || ix >= hw) continue;
                                                dx[((size_t)(b * c + ci) * hw + iy) * hw + ix] +=
                                                    (double)gs[((size_t)(b * o + oi) * ohw + oy) * ohw + ox] *
                                                    ws[((size_t)(oi * c + ci) * k + ky) * k + kx];
                                            }
                    int bad = 0;
                    for (size_t i = 0; i < nx && bad < 3; i++)
                        if (!(fabs(got[i] - dx[i]) <= 1e-5 * (1.0 + fabs(dx[i]))))
                            bad++, CHECK_MSG(false, "geometry %zu: dx[%zu] %.9g, want %.9g (seed %llu)", v, i, got[i],
                                             dx[i], (unsigned long long)harness_seed());
                }
                amp_ctx_free(ctx);
            }
        }
        free(xs), free(ws), free(gs), free(y), free(want), free(got), free(dx), free(wt), free(col);
    }
    amp_set_num_threads(saved_threads);
}

/* The forward's fused bias + bf16 rounding against the fp32 add then the scalar reference encoder
 * (amp_convert's rounding, which the AVX2 store shares in its vector part), bit for bit: random
 * values with rounding ties, subnormals, infinities, NaN payloads, sums that overflow; rows of 1-40
 * elements and the cnn's 196 and 784 (AVX-512's tails under masks, AVX2's scalar); each path the
 * CPU has. */
#if defined(__x86_64__)
static void check_conv_store_bf16_path(void (*fn)(uint16_t *, const float *, float, int64_t), const char *name) {
    static const uint32_t special[] = {0x3F808000u, 0x3F818000u, 0x00000001u, 0x807FFFFFu, 0x7F800000u,
                                       0xFF800000u, 0x7F800001u, 0xFFC00001u, 0x7F7FFFFFu, 0x80000000u};
    uint64_t s = harness_seed();
    int bad = 0;
    float y[800];
    uint16_t want[800], got[800];
    for (int t = 0; t < 60; t++) {
        const int n = t < 40 ? t + 1 : t % 2 ? 196 : 784;
        const float bias = t % 5 == 0 ? 0.0f : t % 7 == 0 ? 3.0e38f : next_uniform(&s);
        for (int i = 0; i < n; i++) {
            y[i] = next_uniform(&s) * 4.0f;
            if (i % 3 == 0) {
                const uint32_t b = special[(unsigned)(i / 3 + t) % (sizeof special / sizeof special[0])];
                memcpy(&y[i], &b, sizeof b);
            }
        }
        for (int i = 0; i < n; i++) want[i] = amp_bf16_encode(amp_f32_bits(y[i] + bias), AMP_OVERFLOW_INF);
        memset(got, 0xAB, sizeof got);
        fn(got, y, bias, n);
        bad += memcmp(got, want, sizeof(uint16_t) * (size_t)n) != 0;
        for (int i = n; i < 800; i++) bad += got[i] != 0xABABu;
    }
    CHECK_MSG(bad == 0, "conv store bf16 (%s) differs from add + the reference encoder in %d of 60 rows (seed %llu)", name, bad,
              (unsigned long long)harness_seed());
}
#endif

static void check_conv_store_bf16(void) {
#if defined(__x86_64__)
    typedef void (*store_fn)(uint16_t *, const float *, float, int64_t);
    static const struct {
        amp_isa isa;
        store_fn fn;
        const char *name;
    } paths[] = {{AMP_ISA_AVX512, amp_conv_store_bf16_avx512, "avx512"}, {AMP_ISA_AVX2, amp_conv_store_bf16_avx2, "avx2"}};
    for (size_t q = 0; q < sizeof paths / sizeof paths[0]; q++)
        if (amp_isa_supported(paths[q].isa)) check_conv_store_bf16_path(paths[q].fn, paths[q].name);
#endif
}

/* The weight gradient with dY packed straight from [N, O, P] (conv_backward's dW^T = col dY^T, taken
 * when dX needs no W^T dY and a chunk holds several images) against the one through dY's permuted
 * copy (x needs a gradient and dX goes through col2im: geometry 2, stride 2; at stride 1 dX is a
 * correlation and both runs take the direct path), bit for bit, with db, in chunks of 3-4 images
 * and a last partial chunk (the packed runs split at image boundaries inside a k block); P odd
 * (bf16 pairs then keep the copy; f32 and f16 take the direct path) and stride 2; 1 and 3 threads. */
static void check_conv_dw_direct_dy(void) {
    static const int geoms[][6] = {/* n, c, hw, o, stride, pad */
                                   {10, 8, 20, 6, 1, 2}, {7, 8, 19, 5, 1, 2}, {9, 8, 20, 6, 2, 2}};
    enum { K = 5 };
    const int saved_threads = amp_get_num_threads();
    uint64_t s = harness_seed();
    for (size_t v = 0; v < sizeof geoms / sizeof geoms[0]; v++) {
        const int n = geoms[v][0], c = geoms[v][1], hw = geoms[v][2], o = geoms[v][3], st = geoms[v][4],
                  pad = geoms[v][5];
        const int ohw = (hw + 2 * pad - K) / st + 1;
        const int64_t nx = (int64_t)n * c * hw * hw, nw = (int64_t)o * c * K * K, ny = (int64_t)n * o * ohw * ohw;
        float *xs = malloc(sizeof(float) * (size_t)nx), *ws = malloc(sizeof(float) * (size_t)nw);
        float *gs = malloc(sizeof(float) * (size_t)ny);
        for (int64_t i = 0; i < nx; i++) xs[i] = next_uniform(&s);
        for (int64_t i = 0; i < nw; i++) ws[i] = next_uniform(&s);
        for (int64_t i = 0; i < ny; i++) gs[i] = next_uniform(&s);
        for (int d = 0; d < 3; d++) {
            const amp_dtype dt = d == 0 ? AMP_F32 : d == 1 ? AMP_F16 : AMP_BF16;
            const size_t es = amp_dtype_size(dt);
            unsigned char *want[2] = {0};
            /* run 0: x needs a gradient (dY's copy); runs 1, 2: it does not, 1 and 3 threads */
            for (int r = 0; r < 3; r++) {
                amp_set_num_threads(r == 2 ? 3 : 1);
                amp_ctx *ctx = NULL;
                if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) break;
                amp_tensor *x = amp_tensor_from(ctx, dt, 4, (const int64_t[]){n, c, hw, hw}, xs, AMP_F32);
                amp_tensor *w = amp_tensor_from(ctx, dt, 4, (const int64_t[]){o, c, K, K}, ws, AMP_F32);
                amp_tensor *b = amp_tensor_from(ctx, dt, 1, (const int64_t[]){o}, ws, AMP_F32);
                amp_tensor_set_requires_grad(x, r == 0);
                amp_tensor_set_requires_grad(w, true);
                amp_tensor_set_requires_grad(b, true);
                amp_tensor *y = amp_conv2d(ctx, x, w, b, st, pad);
                amp_tensor *seed = amp_tensor_from(ctx, dt, 4, (const int64_t[]){n, o, ohw, ohw}, gs, AMP_F32);
                if (CHECK_MSG(y && amp_backward(ctx, y, seed) == AMP_OK, "%s", amp_ctx_error(ctx))) {
                    const amp_tensor *res[2] = {w->grad, b->grad};
                    for (int q = 0; q < 2; q++) {
                        const size_t bytes = (size_t)amp_tensor_numel(res[q]) * es;
                        if (r == 0) {
                            want[q] = malloc(bytes);
                            memcpy(want[q], res[q]->data, bytes);
                        } else if (want[q]) {
                            CHECK_MSG(memcmp(want[q], res[q]->data, bytes) == 0,
                                      "geometry %zu, %s, %s, %d thread(s): %s differs from the copy path (seed %llu)",
                                      v, amp_isa_name(amp_isa_active()), amp_dtype_name(dt), r == 2 ? 3 : 1,
                                      q ? "db" : "dW", (unsigned long long)harness_seed());
                        }
                    }
                }
                amp_ctx_free(ctx);
            }
            for (int q = 0; q < 2; q++) free(want[q]);
        }
        free(xs), free(ws), free(gs);
    }
    amp_set_num_threads(saved_threads);
}

void test_ops_conv2d(void) {
    static const conv_user users[] = {
        {2, 3, 5, 5, 4, 3, 3, 1, 1, true},  /* 3x3, padding 1, N > 1, C > 1 */
        {2, 2, 7, 6, 3, 3, 2, 2, 2, false}, /* non-square kernel and image, stride 2, padding 2, no bias */
        {3, 2, 6, 5, 4, 1, 1, 2, 0, true},  /* 1x1, stride 2 */
        {1, 1, 8, 8, 3, 5, 5, 1, 2, true},  /* the cnn's first layer shape, small */
        {2, 2, 5, 5, 3, 3, 3, 3, 1, true},  /* stride 3 (windows skip pixels) */
        {2, 2, 4, 6, 3, 3, 2, 1, 3, true},  /* padding past the kernel: border outputs see only zeros */
    };
    const char *names[] = {"conv2d 3x3 pad 1", "conv2d 3x2 stride 2 pad 2", "conv2d 1x1 stride 2", "conv2d 5x5 pad 2",
                           "conv2d stride 3", "conv2d 3x2 pad 3"};
    for (size_t v = 0; v < sizeof users / sizeof users[0]; v++) {
        const conv_user *u = &users[v];
        gradcheck c = {.name = names[v],
                       .n_inputs = u->bias ? 3 : 2,
                       .build = build_conv,
                       .reference = ref_conv,
                       .user = u,
                       .rtol_factor = LOWP_FACTOR};
        c.inputs[0] = (gradcheck_input){.ndim = 4, .shape = {u->n, u->c, u->h, u->w}};
        c.inputs[1] = (gradcheck_input){.ndim = 4, .shape = {u->o, u->c, u->kh, u->kw}};
        c.inputs[2] = (gradcheck_input){.ndim = 1, .shape = {u->o}};
        run_dtypes(c, F32_FACTOR);
    }
    check_conv_chunked();
    check_conv_padded_twin();
    check_conv_implicit_panels();
    check_conv_direct_tile();
    check_conv_sum_bf16();
    check_conv_store_bf16();
    /* the routes conv2d picks by path (AVX-512's implicit panels and direct tiles, AVX2's direct tiles,
     * the portable im2col) on every path this CPU has, so that one machine checks them all */
    const amp_isa active = amp_isa_active();
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!amp_isa_supported((amp_isa)isa) || !CHECK(amp_isa_set((amp_isa)isa) == AMP_OK)) continue;
        check_conv_thread_invariance();
        check_conv_implicit_forward();
        check_conv_dw_direct_dy();
        check_conv_dx_correlation();
    }
    CHECK(amp_isa_set(active) == AMP_OK);

    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    /* promotion: bf16 x with an f32 weight computes and returns f32; f16 with f16 stays f16 */
    amp_tensor *xb = amp_tensor_zeros(ctx, AMP_BF16, 4, (const int64_t[]){1, 2, 4, 4});
    amp_tensor *wf = amp_tensor_zeros(ctx, AMP_F32, 4, (const int64_t[]){3, 2, 3, 3});
    amp_tensor *y = amp_conv2d(ctx, xb, wf, NULL, 1, 0);
    if (CHECK(y != NULL)) {
        CHECK_EQ_INT(y->dtype, AMP_F32);
        CHECK_EQ_INT(y->compute_dtype, AMP_F32);
    }
    amp_tensor *xh = amp_tensor_zeros(ctx, AMP_F16, 4, (const int64_t[]){1, 2, 4, 4});
    amp_tensor *wh = amp_tensor_zeros(ctx, AMP_F16, 4, (const int64_t[]){3, 2, 3, 3});
    y = amp_conv2d(ctx, xh, wh, NULL, 1, 1);
    if (CHECK(y != NULL)) {
        CHECK_EQ_INT(y->dtype, AMP_F16);
        CHECK_EQ_INT(y->compute_dtype, AMP_F16);
    }
    /* NaN reaches exactly the outputs whose window covers it: x[0,0,0,0] with a 3x3 kernel, pad 0 */
    float ones[32];
    for (int i = 0; i < 32; i++) ones[i] = 1.0f;
    ones[0] = NAN;
    amp_tensor *xn = amp_tensor_from(ctx, AMP_F32, 4, (const int64_t[]){1, 2, 4, 4}, ones, AMP_F32);
    amp_tensor *w1 = amp_tensor_from(ctx, AMP_F32, 4, (const int64_t[]){1, 2, 3, 3}, ones + 1, AMP_F32);
    y = amp_conv2d(ctx, xn, w1, NULL, 1, 0);
    if (CHECK(y != NULL)) {
        CHECK(isnan(amp_tensor_get(y, 0)));
        for (int i = 1; i < 4; i++) CHECK_MSG(amp_tensor_get(y, i) == 18.0f, "y[%d] = %g", i, amp_tensor_get(y, i));
    }
    /* errors: channel mismatch, kernel larger than the padded input, stride 0 */
    CHECK(amp_conv2d(ctx, xh, amp_tensor_zeros(ctx, AMP_F16, 4, (const int64_t[]){3, 1, 3, 3}), NULL, 1, 0) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    CHECK(amp_conv2d(ctx, xh, amp_tensor_zeros(ctx, AMP_F16, 4, (const int64_t[]){3, 2, 7, 3}), NULL, 1, 1) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    CHECK(amp_conv2d(ctx, xh, wh, NULL, 0, 1) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_free(ctx);
}

/* ---- pooling ---- */

typedef struct {
    int ndim;         /* 3 or 4 */
    int planes, h, w; /* planes = N*C (or C for 3-D) */
    int64_t lead[2];  /* N, C (or C) */
    int kernel, stride;
    bool max;
} pool_user;

/* Max pooling is differentiable only away from ties, and random draws in bf16 (8 significant bits)
 * tie often. So the pooled tensor is x + base, x in [-0.25, 0.25] from the gradcheck and base a fixed
 * permutation of 0, 1, ..., H*W-1 in every plane: values in a window differ by at least
 * 1 - 0.5 - (two roundings of at most 0.125 in bf16 below 64) > 0, so no window ties, and the
 * argmax moves around the window from one output to the next. */
static float pool_base(const pool_user *u, int i) { return (float)(((i % (u->h * u->w)) * 37) % (u->h * u->w)); }

static amp_tensor *build_pool(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    const pool_user *u = user;
    amp_tensor *x = in[0];
    if (u->max) {
        const int n = u->planes * u->h * u->w;
        float *base = malloc(sizeof(float) * (size_t)n);
        for (int i = 0; i < n; i++) base[i] = pool_base(u, i);
        amp_tensor *bt = amp_tensor_from(ctx, x->dtype, x->ndim, x->shape, base, AMP_F32);
        free(base);
        x = amp_add(ctx, x, bt);
    }
    amp_tensor *out =
        u->max ? amp_max_pool2d(ctx, x, u->kernel, u->stride) : amp_avg_pool2d(ctx, x, u->kernel, u->stride);
    if (out) {
        CHECK_EQ_INT(out->op, u->max ? AMP_OP_MAX_POOL2D : AMP_OP_AVG_POOL2D);
        CHECK_EQ_INT(out->compute_dtype, in[0]->dtype);
        CHECK_EQ_INT(out->dtype, in[0]->dtype);
    }
    return out;
}

static void ref_pool(const double *const *in, double *out, const void *user) {
    const pool_user *u = user;
    const int oh = (u->h - u->kernel) / u->stride + 1, ow = (u->w - u->kernel) / u->stride + 1;
    for (int p = 0; p < u->planes; p++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                double acc = u->max ? -INFINITY : 0.0;
                for (int ky = 0; ky < u->kernel; ky++)
                    for (int kx = 0; kx < u->kernel; kx++) {
                        const int i = (p * u->h + oy * u->stride + ky) * u->w + ox * u->stride + kx;
                        if (u->max)
                            acc = fmax(acc, in[0][i] + pool_base(u, i));
                        else
                            acc += in[0][i];
                    }
                out[(p * oh + oy) * ow + ox] = u->max ? acc : acc / (u->kernel * u->kernel);
            }
}

/* Ties (the first maximum in the window wins, as in PyTorch's CPU kernel), NaN (wins and propagates),
 * a window of -inf (the output is -inf, the gradient goes to its first element). */
static void check_max_pool_ties(void) {
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    /* one 4x4 plane, kernel 2 stride 2: windows {0,1,4,5} {2,3,6,7} {8,9,12,13} {10,11,14,15} */
    const float xs[16] = {1, 3, 2, NAN, 3, 3, 5, 2, -INFINITY, -INFINITY, 0, 7, -INFINITY, -INFINITY, 7, 7};
    for (int d = 0; d < 3; d++) {
        const amp_dtype dt = d == 0 ? AMP_F32 : d == 1 ? AMP_F16 : AMP_BF16;
        amp_tensor *x = amp_tensor_from(ctx, dt, 4, (const int64_t[]){1, 1, 4, 4}, xs, AMP_F32);
        amp_tensor_set_requires_grad(x, true);
        amp_tensor *y = amp_max_pool2d(ctx, x, 2, 2);
        if (!CHECK(y != NULL)) break;
        CHECK(amp_tensor_get(y, 0) == 3.0f);
        CHECK(isnan(amp_tensor_get(y, 1)));
        CHECK(amp_tensor_get(y, 2) == -INFINITY);
        CHECK(amp_tensor_get(y, 3) == 7.0f);
        const float seed[4] = {1, 2, 4, 8};
        CHECK(amp_backward(ctx, y, amp_tensor_from(ctx, dt, 4, (const int64_t[]){1, 1, 2, 2}, seed, AMP_F32)) ==
              AMP_OK);
        /* window 0: 3 at 1 and 4, 5 -> index 1; window 1: NaN at 3; window 2: all -inf -> index 8;
         * window 3: 7 at 11, 14, 15 -> index 11 */
        float want[16] = {0};
        want[1] = 1, want[3] = 2, want[8] = 4, want[11] = 8;
        for (int i = 0; i < 16; i++)
            CHECK_MSG(amp_tensor_get(x->grad, i) == want[i], "%s dx[%d] = %g, want %g", amp_dtype_name(dt), i,
                      amp_tensor_get(x->grad, i), want[i]);
        amp_ctx_reset(ctx);
        /* x pooled twice: the first backward writes x's gradient, the second adds into it */
        x = amp_tensor_from(ctx, dt, 4, (const int64_t[]){1, 1, 4, 4}, xs, AMP_F32);
        amp_tensor_set_requires_grad(x, true);
        y = amp_add(ctx, amp_max_pool2d(ctx, x, 2, 2), amp_max_pool2d(ctx, x, 2, 2));
        if (!CHECK(y != NULL)) break;
        CHECK(amp_backward(ctx, y, amp_tensor_from(ctx, dt, 4, (const int64_t[]){1, 1, 2, 2}, seed, AMP_F32)) ==
              AMP_OK);
        for (int i = 0; i < 16; i++)
            CHECK_MSG(amp_tensor_get(x->grad, i) == 2 * want[i], "%s twice: dx[%d] = %g, want %g", amp_dtype_name(dt),
                      i, amp_tensor_get(x->grad, i), 2 * want[i]);
        amp_ctx_reset(ctx);
    }
    amp_ctx_free(ctx);
}

/* The kernel 2 stride 2 row kernels against the reference plane kernels, bit for bit: random planes
 * drawn from a few values (ties everywhere), NaNs, infinities and signed zeros, forward values and
 * offsets, then backward (the reference adds into zeros, the row kernel writes). */
static void check_max_pool_k2_twin(void) {
    /* OW: two 8-window vectors and a tail; the cnn's 7 (all tail); 1; exactly 8; 8 and a tail of 7 */
    static const int ows[] = {19, 7, 1, 8, 15};
    enum { H = 6, OH = 3, MAX_OW = 19, MAX_W = 2 * MAX_OW, PLANES = 200 };
    const float pool_vals[8] = {0.0f, -0.0f, 1.0f, -NAN, -2.5f, INFINITY, -INFINITY, NAN};
    uint64_t s = harness_seed();
    int bad = 0;
    for (int p = 0; p < PLANES; p++) {
        const int OW = ows[p % 5], W = 2 * OW;
        float x[H * MAX_W], g[OH * MAX_OW], y_ref[OH * MAX_OW], y[OH * MAX_OW], dx_ref[H * MAX_W] = {0}, dx[H * MAX_W];
        uint8_t off_ref[OH * MAX_OW], off[OH * MAX_OW];
        for (int i = 0; i < H * W; i++) {
            const float u = next_uniform(&s); /* [-1, 1) */
            /* mostly a tie-prone pick from the list; NaN and the infinities one time in 8 each */
            x[i] = pool_vals[(int)((u + 1.0f) * 4.0f) & 7];
            if (p % 4 == 0) x[i] = u; /* some planes without ties */
        }
        for (int i = 0; i < OH * OW; i++) g[i] = (i % 5 == 0) ? -0.0f : next_uniform(&s);
        amp_max_pool_plane_ref(x, W, 2, 2, OH, OW, y_ref, off_ref);
        for (int oy = 0; oy < OH; oy++)
            amp_max_pool_row_k2(x + 2 * oy * W, x + (2 * oy + 1) * W, OW, y + oy * OW, off + oy * OW);
        bad += memcmp(y, y_ref, sizeof(float) * (size_t)(OH * OW)) != 0 ||
               memcmp(off, off_ref, (size_t)(OH * OW)) != 0;
        amp_max_pool_backward_plane_ref(g, off_ref, W, 2, 2, OH, OW, dx_ref);
        for (int i = 0; i < H * MAX_W; i++) dx[i] = 12345.0f; /* every element must be written, no more */
        for (int oy = 0; oy < OH; oy++)
            amp_max_pool_backward_row_k2(g + oy * OW, off + oy * OW, OW, dx + 2 * oy * W, dx + (2 * oy + 1) * W);
        bad += memcmp(dx, dx_ref, sizeof(float) * (size_t)(H * W)) != 0;
        for (int i = H * W; i < H * MAX_W; i++) bad += dx[i] != 12345.0f;
        for (int i = 0; i < H * W; i++) dx_ref[i] = 0.0f;

        /* bf16 rows: the direct kernels against decode, the fp32 row kernel, encode (the path they
         * replace), with NaN payloads other than the canonical one (quiet and signalling, both signs) */
        static const uint16_t nans[4] = {0x7F81u, 0xFFC1u, 0x7FFFu, 0xFF80u | 0x20u};
        uint16_t xh[H * MAX_W], yh_ref[OH * MAX_OW], yh[OH * MAX_OW], yh2[OH * MAX_OW];
        float xd[H * MAX_W], yd[OH * MAX_OW];
        amp_convert(xh, AMP_BF16, x, AMP_F32, (size_t)(H * W));
        for (int i = 0; i < H * W; i++)
            if (x[i] != x[i] && (i & 1)) xh[i] = nans[(i >> 1) & 3];
        amp_convert(xd, AMP_F32, xh, AMP_BF16, (size_t)(H * W));
        for (int oy = 0; oy < OH; oy++)
            amp_max_pool_row_k2(xd + 2 * oy * W, xd + (2 * oy + 1) * W, OW, yd + oy * OW, off_ref + oy * OW);
        amp_convert(yh_ref, AMP_BF16, yd, AMP_F32, (size_t)(OH * OW));
        memset(yh, 0xAB, sizeof yh), memset(yh2, 0xAB, sizeof yh2), memset(off, 0xCD, sizeof off);
        for (int oy = 0; oy < OH; oy++)
            amp_max_pool_row_k2_bf16(xh + 2 * oy * W, xh + (2 * oy + 1) * W, OW, yh + oy * OW, off + oy * OW);
        bad += memcmp(yh, yh_ref, sizeof(uint16_t) * (size_t)(OH * OW)) != 0 ||
               memcmp(off, off_ref, (size_t)(OH * OW)) != 0;
        for (int i = OH * OW; i < OH * MAX_OW; i++) bad += yh[i] != 0xABABu || off[i] != 0xCD; /* no more */
        memset(off, 0xCD, sizeof off);
        for (int oy = 0; oy < OH; oy++)
            amp_max_pool_row_k2_bf16_ref(xh + 2 * oy * W, xh + (2 * oy + 1) * W, OW, yh2 + oy * OW, off + oy * OW);
        bad += memcmp(yh2, yh_ref, sizeof(uint16_t) * (size_t)(OH * OW)) != 0 ||
               memcmp(off, off_ref, (size_t)(OH * OW)) != 0;

        /* bf16 backward: dY with -0, infinities and NaN payloads, against decode, the fp32 row
         * kernel, encode; every element of the two rows written, nothing past them */
        uint16_t gh[OH * MAX_OW], dh_ref[H * MAX_W], dh[H * MAX_W];
        float gd[OH * MAX_OW];
        amp_convert(gh, AMP_BF16, g, AMP_F32, (size_t)(OH * OW));
        for (int i = 0; i < OH * OW; i++)
            if (i % 7 == 3) gh[i] = i % 3 ? nans[i & 3] : (uint16_t)(0x7F80u | (i & 1u) << 15);
        amp_convert(gd, AMP_F32, gh, AMP_BF16, (size_t)(OH * OW));
        for (int oy = 0; oy < OH; oy++)
            amp_max_pool_backward_row_k2(gd + oy * OW, off_ref + oy * OW, OW, dx + 2 * oy * W, dx + (2 * oy + 1) * W);
        amp_convert(dh_ref, AMP_BF16, dx, AMP_F32, (size_t)(H * W));
        for (int v = 0; v < 2; v++) {
            for (int i = 0; i < H * MAX_W; i++) dh[i] = 0xABABu;
            for (int oy = 0; oy < OH; oy++)
                (v ? amp_max_pool_backward_row_k2_bf16_ref : amp_max_pool_backward_row_k2_bf16)(
                    gh + oy * OW, off_ref + oy * OW, OW, dh + 2 * oy * W, dh + (2 * oy + 1) * W);
            bad += memcmp(dh, dh_ref, sizeof(uint16_t) * (size_t)(H * W)) != 0;
            for (int i = H * W; i < H * MAX_W; i++) bad += dh[i] != 0xABABu;
        }
    }
    CHECK_MSG(bad == 0, "max pool k2 row kernels (%s) differ from the reference in %d of %d planes",
              amp_isa_name(amp_isa_active()), bad, 6 * PLANES);
}

/* bf16 max_pool2d k2 s2 on whole tensors (the AVX-512 passes over every row of the tensor, which
 * take rows of at most 8 windows two at a time when the rows follow each other without gaps, an odd
 * count leaving one) against the reference path, bit for bit: values, picks and the gradient;
 * widths 2..19 (even and odd), heights even and odd, tie-prone values with NaN and infinities. */
static int pool_bf16_run(int planes, int h, int w, const uint16_t *xs, const uint16_t *gs, uint16_t *ys, uint16_t *dx) {
    amp_ctx *ctx = NULL;
    int ok = 0;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return 0;
    const int oh = h / 2, ow = w / 2;
    amp_tensor *x = amp_tensor_new(ctx, AMP_BF16, 4, (const int64_t[]){1, planes, h, w});
    amp_tensor *seed = amp_tensor_new(ctx, AMP_BF16, 4, (const int64_t[]){1, planes, oh, ow});
    if (x && seed) {
        memcpy(x->data, xs, sizeof(uint16_t) * (size_t)(planes * h * w));
        memcpy(seed->data, gs, sizeof(uint16_t) * (size_t)(planes * oh * ow));
        amp_tensor_set_requires_grad(x, true);
        amp_tensor *y = amp_max_pool2d(ctx, x, 2, 2);
        if (y && y->dtype == AMP_BF16 && amp_backward(ctx, y, seed) == AMP_OK && x->grad && x->grad->dtype == AMP_BF16) {
            memcpy(ys, y->data, sizeof(uint16_t) * (size_t)(planes * oh * ow));
            memcpy(dx, x->grad->data, sizeof(uint16_t) * (size_t)(planes * h * w));
            ok = 1;
        }
    }
    amp_ctx_free(ctx);
    return ok;
}

static uint16_t bf16_trunc(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return (uint16_t)(b >> 16);
}

static void check_max_pool_k2_bf16_tensors(void) {
    if (!amp_isa_supported(AMP_ISA_AVX512)) return;
    enum { MAXP = 7, MAXH = 9, MAXW = 19 };
    static const uint16_t vals[8] = {0x0000u, 0x8000u, 0x3F80u, 0xFFC1u, 0xC020u, 0x7F80u, 0xFF80u, 0x7F81u};
    const amp_isa was = amp_isa_active();
    uint64_t s = harness_seed();
    int bad = 0, runs = 0;
    for (int w = 2; w <= MAXW; w++)
        for (int h = 2; h <= MAXH; h += 1)
            for (int planes = 1; planes <= MAXP; planes += 3) {
                uint16_t xs[MAXP * MAXH * MAXW], gs[MAXP * MAXH * MAXW], y0[MAXP * MAXH * MAXW], y1[MAXP * MAXH * MAXW];
                uint16_t d0[MAXP * MAXH * MAXW], d1[MAXP * MAXH * MAXW];
                const int n = planes * h * w, m = planes * (h / 2) * (w / 2);
                for (int i = 0; i < n; i++) {
                    const float u = next_uniform(&s);
                    xs[i] = vals[(int)((u + 1.0f) * 4.0f) & 7];
                    if (i % 3 == 0) xs[i] = bf16_trunc(u);
                }
                for (int i = 0; i < m; i++) gs[i] = i % 5 == 0 ? 0x8000u : bf16_trunc(next_uniform(&s));
                amp_isa_set(AMP_ISA_REF);
                const int ok0 = pool_bf16_run(planes, h, w, xs, gs, y0, d0);
                amp_isa_set(AMP_ISA_AVX512);
                const int ok1 = pool_bf16_run(planes, h, w, xs, gs, y1, d1);
                runs++;
                bad += !ok0 || !ok1 || memcmp(y0, y1, sizeof(uint16_t) * (size_t)m) != 0 ||
                       memcmp(d0, d1, sizeof(uint16_t) * (size_t)n) != 0;
            }
    amp_isa_set(was);
    CHECK_MSG(bad == 0, "bf16 max pool k2 tensor passes differ from the reference in %d of %d shapes", bad, runs);
}

void test_ops_pool2d(void) {
    static const pool_user users[] = {
        {4, 4, 6, 6, {2, 2}, 2, 2, true},  {4, 2, 7, 7, {1, 2}, 3, 2, true},  {4, 6, 5, 4, {2, 3}, 2, 1, true},
        {3, 2, 5, 5, {2, 0}, 3, 1, true},  {4, 4, 6, 6, {2, 2}, 2, 2, false}, {4, 2, 7, 7, {1, 2}, 3, 2, false},
        {4, 6, 5, 4, {2, 3}, 2, 1, false}, {3, 2, 5, 5, {2, 0}, 3, 1, false}, {4, 2, 5, 7, {1, 2}, 2, 3, false},
        {4, 3, 5, 7, {1, 3}, 2, 2, true},  {4, 1, 18, 18, {1, 1}, 17, 1, true}, {3, 2, 3, 33, {2, 0}, 2, 2, true},
    };
    const char *names[] = {"max_pool2d k2 s2",     "max_pool2d k3 s2",     "max_pool2d k2 s1 (overlap)",
                           "max_pool2d 3-D k3 s1", "avg_pool2d k2 s2",     "avg_pool2d k3 s2",
                           "avg_pool2d k2 s1",     "avg_pool2d 3-D k3 s1", "avg_pool2d k2 s3 (gaps)",
                           "max_pool2d k2 s2 odd (floor mode drops a row and a column)",
                           "max_pool2d k17 (uint32 offsets)", "max_pool2d k2 s2 3-D, 33 columns"};
    for (size_t v = 0; v < sizeof users / sizeof users[0]; v++) {
        const pool_user *u = &users[v];
        gradcheck c = {.name = names[v],
                       .n_inputs = 1,
                       .build = build_pool,
                       .reference = ref_pool,
                       .user = u,
                       .rtol_factor = LOWP_FACTOR};
        c.inputs[0].ndim = u->ndim;
        if (u->ndim == 4)
            c.inputs[0] = (gradcheck_input){.ndim = 4, .shape = {u->lead[0], u->lead[1], u->h, u->w}};
        else
            c.inputs[0] = (gradcheck_input){.ndim = 3, .shape = {u->lead[0], u->h, u->w}};
        if (u->max) c.inputs[0].lo = -0.25f, c.inputs[0].hi = 0.25f;
        run_dtypes(c, F32_FACTOR);
    }
    check_max_pool_ties();
    const amp_isa active = amp_isa_active();
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) /* each path's row kernels, whichever path this CPU runs */
        if (amp_isa_supported((amp_isa)isa) && CHECK(amp_isa_set((amp_isa)isa) == AMP_OK)) check_max_pool_k2_twin();
    CHECK(amp_isa_set(active) == AMP_OK);
    check_max_pool_k2_bf16_tensors();

    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    amp_tensor *x = amp_tensor_zeros(ctx, AMP_F32, 4, (const int64_t[]){1, 1, 3, 3});
    CHECK(amp_max_pool2d(ctx, x, 4, 1) == NULL); /* kernel larger than the input */
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    CHECK(amp_avg_pool2d(ctx, x, 2, 0) == NULL); /* stride 0 */
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    amp_tensor *y = amp_avg_pool2d(ctx, x, 2, 2); /* floor mode: 3 -> 1 */
    if (CHECK(y != NULL)) CHECK(y->shape[2] == 1 && y->shape[3] == 1);
    amp_ctx_free(ctx);
}

/* ---- embedding ---- */

enum { EMB_V = 5, EMB_D = 3, EMB_T = 6 };
static const int32_t emb_ids[EMB_T] = {1, 4, 1, 0, 4, 1}; /* 1 three times, 4 twice, 2 and 3 never */

static amp_tensor *build_embedding(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    (void)user;
    amp_tensor *out = amp_embedding(ctx, in[0], emb_ids, 2, (const int64_t[]){2, 3});
    if (out) {
        CHECK_EQ_INT(out->op, AMP_OP_EMBEDDING);
        CHECK_EQ_INT(out->compute_dtype, in[0]->dtype);
        CHECK_EQ_INT(out->dtype, in[0]->dtype);
        CHECK(out->ndim == 3 && out->shape[0] == 2 && out->shape[1] == 3 && out->shape[2] == EMB_D);
    }
    return out;
}

static void ref_embedding(const double *const *in, double *out, const void *user) {
    (void)user;
    for (int t = 0; t < EMB_T; t++)
        for (int j = 0; j < EMB_D; j++) out[t * EMB_D + j] = in[0][emb_ids[t] * EMB_D + j];
}

/* An fp32 table gradient that exists already takes the scatter-add of a second embedding's backward
 * as an add of 0 to every element no index reads: checked bit for bit against the IEEE adds done
 * here, with a -0, a signalling NaN, a quiet NaN and ordinary values in the rows no index reads
 * (which the backward only reads unless a bit would change) and in a row one does. Several blocks of
 * rows (src/ops/embedding.c works on 16384 values at a time). */
static void embedding_existing_f32_grad(void) {
    enum { V = 12289, D = 4 };
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    amp_tensor *w = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){V, D});
    if (!CHECK(w != NULL)) {
        amp_ctx_free(ctx);
        return;
    }
    amp_tensor_set_requires_grad(w, true);
    const int32_t ids[3] = {4100, 7, 4100};
    amp_tensor *y = amp_embedding(ctx, w, ids, 1, (const int64_t[]){3});
    if (!CHECK(y != NULL) || !CHECK(amp_backward(ctx, amp_sum_all(ctx, y), NULL) == AMP_OK) || !CHECK(w->grad != NULL)) {
        amp_ctx_free(ctx);
        return;
    }
    /* the gradient as the second backward finds it: specials in untouched rows 3, 5000 and V - 1 and in
     * read row 7 */
    uint32_t *gb = w->grad->data;
    const size_t n = (size_t)V * D;
    for (size_t i = 0; i < n; i++) gb[i] = amp_f32_bits((float)((int)(i % 7) - 3) * 0.25f);
    const uint32_t specials[4] = {0x80000000u, 0x7f800001u, 0x7fc00005u, 0xff800000u};
    const int64_t rows[4] = {3, 5000, V - 1, 7};
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < D; j++) gb[rows[r] * D + j] = specials[(r + j) % 4];
    uint32_t *before = malloc(n * sizeof *before);
    if (!CHECK(before != NULL)) {
        amp_ctx_free(ctx);
        return;
    }
    memcpy(before, gb, n * sizeof *before);
    const int32_t ids2[2] = {7, 9000};
    amp_tensor *y2 = amp_embedding(ctx, w, ids2, 1, (const int64_t[]){2});
    if (CHECK(y2 != NULL) && CHECK(amp_backward(ctx, amp_sum_all(ctx, y2), NULL) == AMP_OK)) {
        int bad = 0;
        for (size_t i = 0; i < n && bad < 5; i++) {
            const int64_t row = (int64_t)i / D;
            volatile float add = row == 7 || row == 9000 ? 1.0f : 0.0f;
            const uint32_t want = amp_f32_bits(amp_f32_from_bits(before[i]) + add);
            if (gb[i] != want) {
                bad++;
                CHECK_MSG(false, "dw[%zu] = 0x%08x, want 0x%08x (before 0x%08x)", i, gb[i], want, before[i]);
            }
        }
    }
    free(before);
    amp_ctx_free(ctx);
}

void test_ops_embedding(void) {
    gradcheck c = {.name = "embedding",
                   .n_inputs = 1,
                   .inputs = {{.ndim = 2, .shape = {EMB_V, EMB_D}}},
                   .build = build_embedding,
                   .reference = ref_embedding,
                   .rtol_factor = LOWP_FACTOR};
    run_dtypes(c, F32_FACTOR);

    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    const float wv[6] = {1, 2, 3, 4, 5, 6};
    amp_tensor *w = amp_tensor_from(ctx, AMP_BF16, 2, (const int64_t[]){3, 2}, wv, AMP_F32);
    /* the ids are copied: changing the caller's array after the forward does not change backward */
    int32_t ids[3] = {2, 2, 0};
    amp_tensor_set_requires_grad(w, true);
    amp_tensor *y = amp_embedding(ctx, w, ids, 1, (const int64_t[]){3});
    ids[0] = ids[1] = 1;
    if (CHECK(y != NULL)) {
        CHECK(amp_tensor_get(y, 0) == 5.0f && amp_tensor_get(y, 1) == 6.0f && amp_tensor_get(y, 4) == 1.0f);
        const float seed[6] = {1, 1, 0.5f, 0.5f, 2, 2};
        CHECK(amp_backward(ctx, y, amp_tensor_from(ctx, AMP_BF16, 2, (const int64_t[]){3, 2}, seed, AMP_F32)) ==
              AMP_OK);
        const float want[6] = {2, 2, 0, 0, 1.5f, 1.5f};
        for (int i = 0; i < 6; i++)
            CHECK_MSG(amp_tensor_get(w->grad, i) == want[i], "dw[%d] = %g", i, amp_tensor_get(w->grad, i));
    }
    /* an index outside [0, V) is an error that names it */
    const int32_t bad[2] = {0, 3};
    CHECK(amp_embedding(ctx, w, bad, 1, (const int64_t[]){2}) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(amp_ctx_error(ctx), "index 3") != NULL, "error: %s", amp_ctx_error(ctx));
    amp_ctx_clear_error(ctx);
    const int32_t neg[1] = {-1};
    CHECK(amp_embedding(ctx, w, neg, 1, (const int64_t[]){1}) == NULL);
    CHECK_MSG(strstr(amp_ctx_error(ctx), "index -1") != NULL, "error: %s", amp_ctx_error(ctx));
    amp_ctx_clear_error(ctx);
    /* a 0-dimensional index gives one row [D] */
    const int32_t one = 1;
    y = amp_embedding(ctx, w, &one, 0, NULL);
    if (CHECK(y != NULL)) CHECK(y->ndim == 1 && y->shape[0] == 2 && amp_tensor_get(y, 1) == 4.0f);
    amp_ctx_free(ctx);
    embedding_existing_f32_grad();
}
