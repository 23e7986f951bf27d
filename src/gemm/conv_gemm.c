/* conv2d's GEMM drivers (conv_gemm.h): the implicit GEMM's pack callbacks, which build the column
 * side's panels straight from the zero-padded chunk, and the direct product, which runs the GEMM's
 * loops here with a tile that reads the padded chunk in place; and the choice between them. The
 * operations on each element are amp_gemm's on the stored column matrix, in its order. */
#include <string.h>

#include "../core/parallel.h"
#include "../kernels/kernels.h"
#include "conv_gemm.h"
#include "gemm_implicit.h"

typedef amp_conv_geom conv_geom;

/* ---- implicit GEMM: column panels from the padded chunk (conv_kernels.h) ---- */

typedef amp_conv_pack_panel_fn panel_simd_fn;
typedef void (*panel_ref_fn)(const amp_conv_implicit *, void *, int64_t, int64_t, int64_t, int64_t, int);

/* Slices of a 32-row panel that simd_2x16 packs at a time (even: pairs stay whole) */
#define PANEL_SLICE 64

/* A panel of r = 32 rows (the kernel's nr, where the GEMM does not compute C^T) from two 16-row
 * panels of the SIMD version, PANEL_SLICE columns at a time: both layouts keep a k unit's rows
 * together (fp32: column p at p*r; pairs: pair q at q*2r), so a k unit of the 32-row panel is the
 * 16-row panels' k units, one after the other (64 bytes each). The same values as the reference's
 * 32-row panel; false (the panel then left to the reference) where the SIMD version declines. */
static bool simd_2x16(const amp_conv_implicit *ci, const amp_gemm_kernel *kern, unsigned char *panel, int64_t i0,
                      int64_t rows, int64_t p0, int64_t kc, panel_simd_fn simd_fn) {
    _Alignas(64) unsigned char half[2][16 * PANEL_SLICE * 4];
    const size_t unit = (size_t)(16 * kern->k_unit * kern->packed_size); /* bytes of one k unit, 16 rows */
    if (unit != 64) return false;
    for (int64_t s0 = 0; s0 < kc; s0 += PANEL_SLICE) {
        const int64_t n = kc - s0 < PANEL_SLICE ? kc - s0 : PANEL_SLICE, units = (n + kern->k_unit - 1) / kern->k_unit;
        for (int h = 0; h < 2; h++) {
            const int64_t hr = rows - 16 * h < 16 ? rows - 16 * h : 16;
            if (hr <= 0)
                memset(half[h], 0, (size_t)units * unit);
            else if (!simd_fn(ci, half[h], i0 + 16 * h, hr, p0 + s0, n, 16))
                return false;
        }
        unsigned char *d = panel + (size_t)(s0 / kern->k_unit) * 2 * unit;
        for (int64_t u = 0; u < units; u++) {
            memcpy(d + (size_t)u * 2 * unit, half[0] + (size_t)u * unit, unit);
            memcpy(d + (size_t)u * 2 * unit + unit, half[1] + (size_t)u * unit, unit);
        }
    }
    return true;
}

/* Packs columns [j0, j0 + cols) of the implicit operand as consecutive panels of r, each by the
 * path's version (simd_fn, from the kernel table; NULL on a path without) when it takes the panel
 * (r = 32: simd_2x16), else by the reference. */
static void pack_panels(const amp_conv_implicit *ci, const amp_gemm_kernel *kern, void *dst, int64_t j0, int64_t cols,
                        int64_t p0, int64_t kc, int r, panel_simd_fn simd_fn, panel_ref_fn ref_fn) {
    const size_t panel_bytes = (size_t)r * (size_t)((kc + kern->k_unit - 1) / kern->k_unit * kern->k_unit) *
                               (size_t)kern->packed_size;
    const bool simd = simd_fn != NULL;
    for (int64_t t = 0; t * r < cols; t++) {
        unsigned char *panel = (unsigned char *)dst + (size_t)t * panel_bytes;
        const int64_t i0 = j0 + t * r, rows = cols - t * r < r ? cols - t * r : r;
        if (simd && (r == 32 ? simd_2x16(ci, kern, panel, i0, rows, p0, kc, simd_fn) : simd_fn(ci, panel, i0, rows, p0, kc, r)))
            continue;
        ref_fn(ci, panel, i0, rows, p0, kc, r);
    }
}

/* The weight gradient's pack callback: panels of r k indices. */
void amp_conv_pack_k_cb(const void *arg, const amp_gemm_kernel *kern, void *dst, int64_t j0, int64_t cols,
                        int64_t p0, int64_t kc, int r) {
    pack_panels(arg, kern, dst, j0, cols, p0, kc, r, amp_kernels_active()->conv.pack_panel_k,
                amp_conv_pack_panel_k_ref);
}

/* The GEMM's pack callback: panels of r pixels. */
void amp_conv_pack_cb(const void *arg, const amp_gemm_kernel *kern, void *dst, int64_t j0, int64_t cols, int64_t p0,
                      int64_t kc, int r) {
    pack_panels(arg, kern, dst, j0, cols, p0, kc, r, amp_kernels_active()->conv.pack_panel, amp_conv_pack_panel_ref);
}

void amp_conv_pack_dy_cb(const void *arg, const amp_gemm_kernel *kern, void *dst, int64_t j0, int64_t cols,
                         int64_t p0, int64_t kc, int r) {
    const amp_conv_dy_src *d = arg;
    const int64_t p_img = amp_conv_geom_p(d->g);
    const size_t ps = (size_t)kern->packed_size;
    const size_t panel_bytes = (size_t)r * (size_t)((kc + kern->k_unit - 1) / kern->k_unit * kern->k_unit) * ps;
    for (int64_t t = 0; t * r < cols; t++) {
        unsigned char *panel = (unsigned char *)dst + (size_t)t * panel_bytes;
        const int64_t o0 = j0 + t * r, rows = cols - t * r < r ? cols - t * r : r;
        for (int64_t p = p0; p < p0 + kc;) {
            const int64_t b = p / p_img, e = p % p_img, len = p_img - e < p0 + kc - p ? p_img - e : p0 + kc - p;
            const unsigned char *src = d->gy + (size_t)(((d->b0 + b) * d->g->o + o0) * p_img + e) * d->es;
            kern->pack(panel + (size_t)((p - p0) * r) * ps, src, p_img, false, rows, len, r);
            p += len;
        }
    }
}

/* koff [K] and pix [nb*P] of amp_conv_implicit, for chunks of up to nb images. */
void amp_conv_implicit_tables(const conv_geom *g, int64_t nb, int32_t *koff, int32_t *pix) {
    const int64_t hp = g->h + 2 * g->pad, wp = g->w + 2 * g->pad;
    for (int64_t c = 0, r = 0; c < g->c; c++)
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) koff[r++] = (int32_t)((c * hp + ky) * wp + kx);
    const amp_conv_implicit ci = {.g = g};
    for (int64_t i = 0; i < nb * amp_conv_geom_p(g); i++) pix[i] = (int32_t)amp_conv_pixel_offset(&ci, i);
}

/* Whether the GEMM computes C^T (gemm.c's compute_transposed: panels of mr columns of the implicit
 * operand) for every chunk size used, nb_max images and the last chunk's: the weight gradient's
 * dW [O, K] (k = nb*P) or the forward's Y [O, nb*P] (k = K). */
static bool flips_every_chunk(const conv_geom *g, amp_dtype dt, int64_t nb_max, bool weight_grad) {
    const int64_t k = amp_conv_geom_k(g), p_img = amp_conv_geom_p(g), last = g->n % nb_max;
    for (int i = 0; i < 2; i++) {
        const int64_t nb = i == 0 ? nb_max : last;
        if (nb == 0) continue;
        const bool flips = weight_grad ? amp_gemm_computes_transposed(dt, g->o, k, nb * p_img)
                                       : amp_gemm_computes_transposed(dt, g->o, nb * p_img, k);
        if (!flips) return false;
    }
    return true;
}

/* The path's GEMM kernel for dt when the implicit panels can feed it: a path with the implicit GEMM
 * (the kernel table's pack_panel: AVX-512), stride 1 within the padded plane's bound, and the
 * kernel's packed format one the panels' SIMD code writes (fp32 -> fp32, bf16 -> VDPBF16PS pairs);
 * else NULL. */
static const amp_gemm_kernel *panel_kernel(const conv_geom *g, amp_dtype dt) {
    if (!amp_conv_padded_ok(g) || !amp_kernels_active()->conv.pack_panel) return NULL;
    const amp_gemm_kernel *kern = amp_gemm_kernel_active(dt);
    const bool fits = kern && ((dt == AMP_F32 && kern->packed == AMP_GEMM_PACKED_F32) ||
                               (dt == AMP_BF16 && kern->packed == AMP_GEMM_PACKED_BF16_PAIRS));
    return fits ? kern : NULL;
}

/* The path's fp32 GEMM kernel when its direct tiles run every product (the kernel table's
 * direct_every: AVX2, whose 6 x 16 fp32 tiles decode bf16 and f16 while packing, and which has no
 * implicit panels): stride 1 within the padded plane's bound, fp32 (amp_conv_panel_dtype sends bf16
 * and f16 there, decoded once), in either orientation of the GEMM. Each element of C is one chain of
 * FMAs over the k block's products in order, and the same update, whichever operand the tile
 * broadcasts, so the direct tile computing C^T gives the bits of the GEMM that does not flip too
 * (the cnn's forward and dX products: O = 64 or 32 output channels fill 16-column tiles as well as
 * the pixels fill 6-row ones). */
static const amp_gemm_kernel *every_direct_kernel(const conv_geom *g, amp_dtype dt) {
    const amp_conv_kernels *ck = &amp_kernels_active()->conv;
    if (dt != AMP_F32 || !ck->direct_tile || !ck->direct_every || !amp_conv_padded_ok(g)) return NULL;
    const amp_gemm_kernel *kern = amp_gemm_kernel_active(AMP_F32);
    const bool fits = kern && kern->packed == AMP_GEMM_PACKED_F32 && kern->k_unit == 1 && kern->packed_size == 4 &&
                      kern->mr == ck->direct_mr && kern->nr == ck->direct_nr;
    return fits ? kern : NULL;
}

/* The dtype the implicit panels are fed in for a product in dt: dt, or fp32 for fp16, and for bf16
 * where its GEMM is the fp32 kernel on values decoded while packing (amp_gemm_bf16_method FMA, where
 * VDPBF16PS is the slower: it packs no BF16 pairs, so the bf16 panels do not fit it; fp16 is always
 * that), where the fp32 panels fit:
 * the padded chunk (and W, or dY for the weight gradient, by the bf16 kernel's decoding pack) goes to
 * fp32 once, exactly, and the fp32 panels and direct tiles run on it: the bf16 GEMM's operations on
 * the same values (the same micro-kernel, blocks and order; tests/test_ops_conv_pool.c compares the
 * results with im2col + amp_gemm in bf16 and fp16 bit for bit). The forward's and dX's bits are the
 * im2col route's; the weight gradient's chunk of images grows (a padded fp32 image is smaller than
 * its bf16 columns), so its sum over the batch, split at chunk boundaries, rounds at other places.
 * Without it the 16-bit convolutions would take im2col and a decoding pack of the columns, the two
 * passes this saves. */
amp_dtype amp_conv_panel_dtype(const conv_geom *g, amp_dtype dt) {
    const amp_gemm_kernel *kern = dt == AMP_BF16 || dt == AMP_F16 ? amp_gemm_kernel_active(dt) : NULL;
    return kern && kern->packed == AMP_GEMM_PACKED_F32 && (panel_kernel(g, AMP_F32) || every_direct_kernel(g, AMP_F32))
               ? AMP_F32
               : dt;
}

/* Whether the weight gradient takes the implicit GEMM: on AVX2 its direct tiles (every_direct_kernel),
 * else a panel_kernel, and a product computed as C^T (panels of mr k indices) for every chunk size. */
bool amp_conv_implicit_dw_ok(const conv_geom *g, amp_dtype dt, int64_t nb_max) {
    if (every_direct_kernel(g, dt)) return true;
    const amp_gemm_kernel *kern = panel_kernel(g, dt);
    return kern && flips_every_chunk(g, dt, nb_max, true);
}

/* Whether the forward takes the implicit GEMM: on AVX2 its direct tiles (every_direct_kernel), else a
 * panel_kernel, and panels the SIMD code packs: mr = 12 pixels where the GEMM computes C^T, nr = 32
 * (two 16-pixel panels, simd_2x16) where it does not (the cnn's conv1: C = 1, K = 25, not flipped),
 * which replaces im2col and the GEMM's pack of the columns. */
bool amp_conv_implicit_ok(const conv_geom *g, amp_dtype dt, int64_t nb_max) {
    if (every_direct_kernel(g, dt)) return true;
    const amp_gemm_kernel *kern = panel_kernel(g, dt);
    return kern && (kern->nr == 32 || flips_every_chunk(g, dt, nb_max, false));
}

/* ---- the direct product: the implicit GEMM's flipped case without its implicit panels ----
 * Where the GEMM would compute C^T with the AVX-512 12 x 32 kernel and the implicit operand on the
 * 12-row side (flips_every_chunk: the forward's and dX's pixels, the weight gradient's k indices),
 * or on AVX2 with its 6 x 16 kernel (every_direct_kernel: either orientation's bits), conv2d runs its
 * loops here instead: the stored operand (W, or dY's permuted copy) packed as the GEMM packs it,
 * then each mr-row tile x nr columns by amp_conv_direct_tile_avx512 (or _avx2), which reads the
 * implicit operand straight from the padded chunk instead of a packed panel. The GEMM's k blocks are
 * kept (kern->kc from 0, the first one's sum stored with beta, each later one added), so each
 * element gets the GEMM's operations in its order: the same bits. Per k block, the tiles of a block
 * of rows are one task. */
#define DIRECT_MAX_TILE_ROWS 12 /* the kernels' mr: 12 (AVX-512) or 6 (AVX2) */
#define DIRECT_TASK_ROWS 144    /* a multiple of both */

/* Bytes of the stored operand's packed panels (of the kernel's nr columns) per k block, and the
 * number of k blocks. */
size_t amp_conv_direct_block_bytes(const amp_gemm_kernel *kern, int64_t n, int64_t k, int64_t *blocks) {
    const int64_t kcb = kern->kc < k ? kern->kc : k, unit = kern->k_unit;
    *blocks = (k + kern->kc - 1) / kern->kc;
    const int64_t n_pad = (n + kern->nr - 1) / kern->nr * kern->nr;
    return (size_t)(n_pad * ((kcb + unit - 1) / unit * unit)) * (size_t)kern->packed_size;
}

/* One tile's k blocks [pc0, pc1) (multiples of kern->kc), in order, by the path's direct tile. */
static void direct_tile_blocks(const amp_conv_direct *d, amp_conv_direct_tile_fn tile,
                               const int32_t ro[DIRECT_MAX_TILE_ROWS], int64_t i0, int rows, int64_t pc0, int64_t pc1) {
    const amp_gemm_kernel *kern = d->kern;
    for (int64_t pc = pc0; pc < pc1; pc += kern->kc) {
        const int64_t kc = d->k - pc < kern->kc ? d->k - pc : kern->kc;
        const size_t kc_pad = (size_t)((kc + kern->k_unit - 1) / kern->k_unit * kern->k_unit);
        const unsigned char *bblock = d->bp + (size_t)(pc / kern->kc) * d->blk_bytes;
        for (int64_t jr = 0; jr < d->n; jr += kern->nr) {
            const unsigned char *bpanel = bblock + (size_t)jr * kc_pad * (size_t)kern->packed_size;
            const int cols = (int)(d->n - jr < kern->nr ? d->n - jr : kern->nr);
            float *c = d->c + i0 + jr * d->ldc;
            const float beta = pc == 0 ? d->beta : 1.0f;
            tile(d->ci->xp, d->ci->es, d->steps + pc, ro, kc, bpanel, c, d->ldc, rows, cols, beta);
        }
    }
}

/* The stored operand [n, k] into per-k-block panels of nr rows at bp, as the GEMM packs op(A) when it
 * computes C^T (rows 0 .. n, each k block's columns), read from images [*, n, p_img] (element size es)
 * starting at image b0: column p is image b0 + p / p_img's column p % p_img. A plain [n, k] matrix is
 * one image (p_img = k, b0 = 0: W, or dY's permuted copy). The weight gradient's dY chunk [O, nb*P]
 * is packed this way straight from dY [N, O, P] (amp_conv_pack_dy_cb's way), so its permuted copy is
 * not made: each k block's columns split at image boundaries into runs of
 * plain [rows, len] matrices of row stride P, each packed at its column offset in the panel, 32 rows
 * at a time. Needs P % k_unit == 0 when runs split (they start at whole pairs and, but for the
 * chunk's last, end at them). */
void amp_conv_direct_pack(const amp_gemm_kernel *kern, const void *src, size_t es, int64_t n, int64_t p_img,
                          int64_t b0, int64_t k, void *bp) {
    int64_t blocks;
    const size_t blk = amp_conv_direct_block_bytes(kern, n, k, &blocks), ps = (size_t)kern->packed_size;
    for (int64_t bi = 0; bi < blocks; bi++) {
        const int64_t pc = bi * kern->kc, kc = k - pc < kern->kc ? k - pc : kern->kc;
        const size_t kc_pad = (size_t)((kc + kern->k_unit - 1) / kern->k_unit * kern->k_unit);
        for (int64_t j0 = 0; j0 < n; j0 += kern->nr) {
            unsigned char *panel = (unsigned char *)bp + (size_t)bi * blk + (size_t)j0 * kc_pad * ps;
            const int64_t rows = n - j0 < kern->nr ? n - j0 : kern->nr;
            for (int64_t p = pc; p < pc + kc;) {
                const int64_t b = p / p_img, e = p % p_img, len = p_img - e < pc + kc - p ? p_img - e : pc + kc - p;
                const unsigned char *run = (const unsigned char *)src + (size_t)(((b0 + b) * n + j0) * p_img + e) * es;
                kern->pack(panel + (size_t)((p - pc) * kern->nr) * ps, run, p_img, false, rows, len, kern->nr);
                p += len;
            }
        }
    }
}

/* Task t: the tiles of rows [t*DIRECT_TASK_ROWS, ...), over k block d->pc, or all of them when
 * d->pc < 0. */
static void task_direct(void *arg, int64_t t, int thread_id) {
    const amp_conv_direct *d = arg;
    (void)thread_id;
    const int64_t i_end = (t + 1) * DIRECT_TASK_ROWS < d->m ? (t + 1) * DIRECT_TASK_ROWS : d->m;
    const int64_t pc0 = d->pc < 0 ? 0 : d->pc, pc1 = d->pc < 0 ? d->k : d->pc + 1;
    const int mr = d->kern->mr;
    const amp_conv_direct_tile_fn tile = amp_kernels_active()->conv.direct_tile; /* the tile of d->kern's path */
    for (int64_t i0 = t * DIRECT_TASK_ROWS; i0 < i_end; i0 += mr) {
        const int rows = (int)(i_end - i0 < mr ? i_end - i0 : mr);
        int32_t ro[DIRECT_MAX_TILE_ROWS];
        for (int ii = 0; ii < mr; ii++) ro[ii] = d->rows[i0 + (ii < rows ? ii : 0)];
        direct_tile_blocks(d, tile, ro, i0, rows, pc0, pc1);
    }
}

static void run_direct_tasks(amp_conv_direct *d, int64_t tasks) {
    if (amp_parallel_max_threads() == 1 || tasks == 1)
        for (int64_t t = 0; t < tasks; t++) task_direct(d, t, 0);
    else /* rows are disjoint and each task's result its own: any thread may take any task */
        amp_parallel_for_dynamic(tasks, task_direct, d);
}

/* C^T += or = the product (d->beta). k_outer: k block by k block, each block's row tasks on the
 * pool (the weight gradient: its steps are the chunk's pixels, and a block of dY's panels, kc x 64,
 * is what stays in L2 while every tile uses it); else each tile runs all its k blocks while its
 * rows' data is in L1 (the forward: W's panels are all small, and k_outer would reload each tile's
 * rows once per k block). */
void amp_conv_gemm_direct(amp_conv_direct *d, bool k_outer) {
    const int64_t tasks = (d->m + DIRECT_TASK_ROWS - 1) / DIRECT_TASK_ROWS;
    int64_t blocks;
    d->blk_bytes = amp_conv_direct_block_bytes(d->kern, d->n, d->k, &blocks);
    if (!k_outer) {
        d->pc = -1;
        run_direct_tasks(d, tasks);
        return;
    }
    for (d->pc = 0; d->pc < d->k; d->pc += d->kern->kc) run_direct_tasks(d, tasks);
}

/* The kernel when the forward's product (or the weight gradient's) takes the direct tiles: AVX2's
 * (every_direct_kernel), or the AVX-512 implicit GEMM's panel kernel with the 12 x 32 tile the direct
 * tile copies, flipped for every chunk size. */
const amp_gemm_kernel *amp_conv_direct_kernel(const conv_geom *g, amp_dtype dt, int64_t nb_max, bool weight_grad) {
    const amp_gemm_kernel *every = every_direct_kernel(g, dt);
    if (every) return every;
    const amp_conv_kernels *ck = &amp_kernels_active()->conv;
    const amp_gemm_kernel *kern = ck->direct_tile ? panel_kernel(g, dt) : NULL;
    const bool ok = kern && kern->mr == ck->direct_mr && kern->nr == ck->direct_nr &&
                    flips_every_chunk(g, dt, nb_max, weight_grad);
    return ok ? kern : NULL;
}
