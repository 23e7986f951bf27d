/* One fused LSTM step, PyTorch's LSTMCell:
 *
 *     gates [B, 4H] = x [B, I] W_ih^T [I, 4H] + b_ih + h [B, H] W_hh^T [H, 4H] + b_hh
 *     i, f, g, o    = sigmoid, sigmoid, tanh, sigmoid of the four [B, H] column blocks, in that order
 *     c' = f c + i g,   h' = o tanh(c')
 *
 * Forward: both GEMMs run in the compute dtype (x, h, the weights and biases promoted to one dtype,
 * like every op) and accumulate into one fp32 gate buffer; the biases and all gate math are fp32;
 * h' and c' are each rounded once to the compute dtype.
 *
 * Two outputs on a one-output tape. The fused node produces one hidden tensor hc [2, B, H] (hc[0] is
 * h', hc[1] is c'), and h_next and c_next are two contiguous views of its halves, each recorded as a
 * small node whose backward copies its gradient into that half of hc's gradient. The views are
 * recorded after hc, so the engine (newest-first) runs both of them before the fused node, which then
 * sees dh' and dc' together and runs the whole backward once: one pointwise pass, one set of GEMMs.
 * The halves are disjoint, so collecting them in hc's gradient adds only zeros: no extra rounding. An
 * output that received no gradient contributes zeros. All three tensors report op AMP_OP_LSTM_CELL.
 *
 * Saved for backward ([B, 5H]): the four gate activations and tanh(c'), read only by the pointwise
 * backward, never by a GEMM. For fp32, as fp32. For bf16 and f16, in 16 bits (act16,
 * src/kernels/lstm_kernels.h), half the bytes: the derivatives s (1 - s) and 1 - t^2 cancel when s or
 * t is near 1 (1 - s for s = 0.996 rounded to bf16 would have no correct bit), so act16 rounds the
 * smaller of v and 1 - |v| to bf16 and rebuilds the other, both within 2^-8: each gate gradient
 * within 6 * 2^-8 of its magnitude (tests/test_lstm_kernels.c), where dG is then rounded to the
 * dtype anyway (2^-8 for bf16; f16's 2^-11 is finer, the price of bf16's range under loss scaling).
 *
 * Backward: the gate gradient dG [B, 4H] is formed in fp32, rounded once to the compute dtype for the
 * GEMMs (as matmul's backward reads its output gradient in that dtype), then
 *     dx = dG W_ih,  dh = dG W_hh,  dW_ih = dG^T x,  dW_hh = dG^T h   (fp32 accumulation)
 *     db_ih = db_hh = column sums of the fp32 dG,   dc = dc'_total f. */
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "amp/formats.h"
#include "amp/gemm.h"
#include "../core/parallel.h"
#include "../gemm/gemm_implicit.h"
#include "../gemm/gemm_kernels.h"
#include "../kernels/lstm_kernels.h"
#include "grad_sink_gemm.h"
#include "op_util.h"

#define OP AMP_OP_LSTM_CELL

/* A leading dimension for amp_gemm: at least 1 even for an empty row. */
static int64_t ld(int64_t n) { return n > 0 ? n : 1; }

static int lstm_gemm_ldc(amp_ctx *ctx, amp_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                         const void *a, int64_t lda, const void *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    int st = amp_gemm(dt, ta, tb, m, n, k, 1.0f, a, ld(lda), b, ld(ldb), beta, c, ld(ldc));
    if (st != AMP_OK) amp_ctx_fail(ctx, st, "%s: amp_gemm failed: %s", amp_op_name(OP), amp_status_str(st));
    return st;
}

static int lstm_gemm(amp_ctx *ctx, amp_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                     int64_t lda, const void *b, int64_t ldb, float beta, float *c) {
    return lstm_gemm_ldc(ctx, dt, ta, tb, m, n, k, a, lda, b, ldb, beta, c, n);
}

/* Adds the fp32 block c [m, n] (rows ldc apart; t's elements in row-major order) into t's gradient
 * with amp_grad_accumulate's bits: through its sink in one pass where it has one, else copied into
 * contiguous scratch for amp_grad_accumulate. */
static void lstm_put_grad(amp_ctx *ctx, amp_tensor *t, float *c, int64_t ldc, int64_t m, int64_t n) {
    amp_grad_sink sink;
    if (amp_grad_sink_open(ctx, t, &sink)) {
        const amp_gemm_epilogue ep = amp_sink_epilogue(&sink, 0, n);
        amp_gemm_epilogue_apply(&ep, c, ld(ldc), m, n);
        amp_grad_sink_close(ctx, &sink);
        return;
    }
    float *g = amp_f32_scratch(ctx, m * n);
    if (!g) return;
    for (int64_t r = 0; r < m; r++) memcpy(g + r * n, c + r * ldc, (size_t)n * sizeof *g);
    amp_grad_accumulate(ctx, t, g);
}

/* ---- the recurrent product with W_hh packed once per pass ----
 *
 * The sequence multiplies by the same W_hh at every step (T products of B rows). amp_gemm would pack
 * W_hh's panels again for each of them (B times less arithmetic than packing work would justify);
 * these functions pack it once per pass with the GEMM path's own pack routine and run the same
 * micro-kernels over the same k blocks (kc of the path, each block's sum added to C as gemm.c does:
 * beta for the first block, 1 for the others), so every element of C gets the bits amp_gemm would
 * give it (gemm.c: they depend on the path and the shape only), which the tests check against the
 * per-step cell. Only the B rows of h or dG_t are packed per step.
 *
 * With B = 32 rows against a 12-row tile, C = X W^T fills 32/36 of its tiles; C^T = W X^T (W's
 * 4H or H rows on the 12-row side, X's B rows on the 32-wide side) fills 99% (gemm.c's transposed
 * product, ukernel_ct: products commute exactly, so the bits are the same); where the path has an
 * 8-row kernel (amp_gemm_kernel_rows8, on AVX-512: bf16 pairs on AVX512-BF16, and the fp32 kernel for
 * fp32 and for f16 and bf16 decoded to fp32), C = X W^T on it fills 100% and needs no transposes
 * (w_kernel); measured on the lstm model, amp-fp16 and amp-bf16 under the FMA bf16 method: one thread
 * 1.03 and 1.04 (12 and 6 pairs), two threads, where the rows then split into lanes (the backward's;
 * for bf16 the forward's too), median 1.39 and 1.31 (6 runs each). The forward's lanes (fwd_lanes)
 * now take every dtype: the composed narrow cell (fp16; bf16 without the fused kernel) keeps its
 * fp32 row temporaries in a slot per thread instead of one shared buffer, so its rows split too:
 * amp-fp16 two threads 1.08 and 1.10 (two runs of 8 pairs), amp-bf16 on the AVX2 path 1.07 (6 pairs),
 * one thread 0.99 (8 pairs, noise). The weight side is packed as
 * whichever operand the better fill makes it, but only for k >= LSTM_FLIP_MIN_K: ukernel_ct ends
 * each tile with two 16 x 16 register transposes and 32 row stores, a fixed cost that a short k loop
 * does not amortize. Measured on the lstm model (B = 32, amp-bf16, one thread): the forward's
 * x_t W_ih^T (k = I = 64) direct makes the whole step 2.7% faster; W_hh's products (k = 256 forward,
 * 1024 backward) stay faster transposed. */
#define LSTM_FLIP_MIN_K 128

typedef struct packed_w {
    const amp_gemm_kernel *kern;
    bool flip;            /* W packed as the A operand (panels of mr) and C^T computed; else as B (nr) */
    int64_t n, k, kc_pad; /* n: W's rows (C's columns); kc_pad: one k block's packed depth, padded */
    size_t es;            /* bytes per element of the source dtype (of both operands) */
    char *panels;         /* k block q at panels + q * round_up(n, r) * kc_pad * packed_size */
} packed_w;

/* floats of padding after each row of the forward's gate pre-activations (amp_lstm_sequence) */
#define LSTM_XP_PAD 16

/* the most steps whose input projections run as one product (amp_lstm_sequence) */
#define LSTM_XCHUNK_MAX 8

static int64_t round_up64(int64_t x, int64_t unit) { return (x + unit - 1) / unit * unit; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* bytes of one k block of `rows` rows packed in panels of r */
static size_t packed_bytes(const amp_gemm_kernel *kern, int64_t rows, int r, int64_t kc_pad) {
    return (size_t)(round_up64(rows, r) * kc_pad) * (size_t)kern->packed_size;
}

/* The kernel and orientation for W [n, k] against m-row operands: W packed as the A operand (*flip,
 * C^T computed) where that fills the tiles better, except that an 8-row kernel (amp_gemm_kernel_rows8)
 * that fills them at least as well takes W as the B operand and stores C directly: the lstm model's
 * 32 rows against W_hh fill its tiles exactly, and C^T's register transposes cost 9% of the
 * forward's k = 256 product (measured alone, Zen 4: 8 x 32 direct 234 GFLOP/s, 12 x 32 C^T 208). */
static const amp_gemm_kernel *w_kernel(amp_dtype dt, int64_t n, int64_t k, int64_t m, bool *flip) {
    const amp_gemm_kernel *kern = amp_gemm_kernel_for(amp_isa_active(), dt);
    const amp_gemm_kernel *k8 = amp_gemm_kernel_rows8(amp_isa_active(), dt);
    const double direct = amp_gemm_tile_fill(kern, m, n), flipped = amp_gemm_tile_fill(kern, n, m);
    *flip = kern->ukernel_ct && k >= LSTM_FLIP_MIN_K && flipped > direct;
    if (k8 && amp_gemm_tile_fill(k8, m, n) >= (*flip ? flipped : direct)) {
        *flip = false;
        return k8;
    }
    return kern;
}

/* Packs W [n, k] (W[i, p] = src[trans ? p * ld + i : i * ld + p], dtype dt) into scratch for products
 * with m-row operands, as the A operand or the B operand (w_kernel); false (error recorded) when out
 * of memory. */
static bool pack_w(amp_ctx *ctx, packed_w *pw, amp_dtype dt, const void *src, int64_t ld, bool trans, int64_t n,
                   int64_t k, int64_t m) {
    bool flip;
    const amp_gemm_kernel *kern = w_kernel(dt, n, k, m, &flip);
    *pw = (packed_w){.kern = kern,
                     .flip = flip,
                     .n = n,
                     .k = k,
                     .kc_pad = round_up64(min64(kern->kc, k), kern->k_unit),
                     .es = amp_dtype_size(dt)};
    const int r = pw->flip ? kern->mr : kern->nr;
    const int64_t blocks = (k + kern->kc - 1) / kern->kc;
    const size_t bytes = packed_bytes(kern, n, r, pw->kc_pad);
    pw->panels = amp_scratch_alloc(ctx, bytes * (size_t)(blocks > 0 ? blocks : 1));
    if (!pw->panels) return false;
    for (int64_t q = 0; q < blocks; q++) {
        const int64_t pc = q * kern->kc, kc = min64(kern->kc, k - pc);
        kern->pack(pw->panels + (size_t)q * bytes, (const char *)src + (size_t)(trans ? pc * ld : pc) * pw->es, ld, trans,
                   n, kc, r);
    }
    return true;
}

/* Operands packed from two sources (pack_w_cat, pack_xh) go through a buffer of XH_CHUNK rows of up
 * to AMP_GEMM_MAX_TILE values where a panel takes from both: XH_CHUNK even, so a bf16 pair is never
 * split. */
enum { XH_CHUNK = 16 };

/* pack_w for W = [A | B]^T [na + nb, k] with W[i, p] = a[p * lda + i] (i < na), b[p * ldb + i - na]
 * (else): each panel packed from a or b in place, a panel across the border from rows gathered
 * XH_CHUNK at a time, so the packed values are those of W stored ([A | B] written to scratch and
 * packed whole, 1.3 MB for the lstm model's fp32). */
static bool pack_w_cat(amp_ctx *ctx, packed_w *pw, amp_dtype dt, const void *a, int64_t lda, int64_t na,
                       const void *b, int64_t ldb, int64_t nb, int64_t k, int64_t m) {
    const int64_t n = na + nb;
    bool flip;
    const amp_gemm_kernel *kern = w_kernel(dt, n, k, m, &flip);
    *pw = (packed_w){.kern = kern,
                     .flip = flip,
                     .n = n,
                     .k = k,
                     .kc_pad = round_up64(min64(kern->kc, k), kern->k_unit),
                     .es = amp_dtype_size(dt)};
    const size_t es = pw->es, ps = (size_t)kern->packed_size;
    const int r = pw->flip ? kern->mr : kern->nr;
    const int64_t blocks = (k + kern->kc - 1) / kern->kc;
    const size_t bytes = packed_bytes(kern, n, r, pw->kc_pad);
    pw->panels = amp_scratch_alloc(ctx, bytes * (size_t)(blocks > 0 ? blocks : 1));
    if (!pw->panels) return false;
    _Alignas(64) unsigned char tmp[XH_CHUNK * AMP_GEMM_MAX_TILE * sizeof(float)];
    const char *ca = a, *cb = b;
    for (int64_t q = 0; q < blocks; q++) {
        const int64_t pc = q * kern->kc, kc = min64(kern->kc, k - pc);
        const int64_t kcp = round_up64(kc, kern->k_unit), a_end = na / r * r, b0 = (na + r - 1) / r * r;
        char *block = pw->panels + (size_t)q * bytes;
        /* the panels within A, then those within B, each in one call (kern->pack reads the rows in
         * order across panels); the panel across the border, if any, from gathered rows */
        if (a_end > 0) kern->pack(block, ca + (size_t)(pc * lda) * es, lda, true, a_end, kc, r);
        if (b0 < n)
            kern->pack(block + (size_t)(b0 * kcp) * ps, cb + (size_t)(pc * ldb + b0 - na) * es, ldb, true, n - b0, kc, r);
        if (a_end < na) {
            const int64_t i0 = a_end, rows = min64(r, n - i0);
            char *panel = block + (size_t)(i0 * kcp) * ps;
            const size_t ab = (size_t)(na - i0) * es, bb = (size_t)(i0 + rows - na) * es;
            for (int64_t p0 = pc; p0 < pc + kc; p0 += XH_CHUNK) {
                const int64_t len = min64(XH_CHUNK, pc + kc - p0);
                for (int64_t p = p0; p < p0 + len; p++) {
                    memcpy(tmp + (size_t)((p - p0) * r) * es, ca + (size_t)(p * lda + i0) * es, ab);
                    memcpy(tmp + (size_t)((p - p0) * r) * es + ab, cb + (size_t)(p * ldb) * es, bb);
                }
                kern->pack(panel + (size_t)((p0 - pc) * r) * ps, tmp, r, true, rows, len, r);
            }
        }
    }
    return true;
}

typedef struct packed_job {
    const packed_w *pw;
    const char *xpack; /* X packed for every k block: block q at xpack + q * x_bytes */
    size_t x_bytes, w_bytes;
    int64_t m, n;          /* C [m, n]: X's rows against W's first n rows */
    int64_t i0;            /* the first of X's rows computed (packed_rows; else 0) */
    int64_t tiles_w, tasks; /* tiles_w: those rows' panels, split between the tasks */
    float *c;
    int64_t ldc;
    float beta;
} packed_job;

/* Task t: W's panels [t * tiles_w / tasks, (t + 1) * tiles_w / tasks) against every panel of X. */
static void packed_task(void *arg, int64_t task, int thread_id) {
    (void)thread_id;
    const packed_job *j = arg;
    const packed_w *pw = j->pw;
    const amp_gemm_kernel *kern = pw->kern;
    const int rw = pw->flip ? kern->mr : kern->nr, rx = pw->flip ? kern->nr : kern->mr;
    const amp_gemm_ukernel_fn uk = pw->flip ? kern->ukernel_ct : kern->ukernel;
    const size_t ps = (size_t)kern->packed_size;
    const int64_t t0 = j->tiles_w * task / j->tasks, t1 = j->tiles_w * (task + 1) / j->tasks;
    for (int64_t pc = 0, q = 0; pc < pw->k; pc += kern->kc, q++) {
        const int64_t kc = min64(kern->kc, pw->k - pc), kc_pad = round_up64(kc, kern->k_unit);
        const float beta = pc == 0 ? j->beta : 1.0f;
        const char *xblock = j->xpack + (size_t)q * j->x_bytes, *wblock = pw->panels + (size_t)q * j->w_bytes;
        for (int64_t ix = j->i0; ix < j->m; ix += rx)
            for (int64_t tw = t0; tw < t1; tw++) {
                const int64_t iw = tw * rw;
                const char *xp = xblock + (size_t)(ix * kc_pad) * ps, *wp = wblock + (size_t)(iw * kc_pad) * ps;
                const int mx = (int)min64(rx, j->m - ix), nw = (int)min64(rw, j->n - iw);
                float *ct = j->c + ix * j->ldc + iw; /* C[ix, iw]; flipped: element (i, j) of W X^T is C[j, i] */
                if (pw->flip) uk(kc, wp, xp, ct, j->ldc, nw, mx, 1.0f, beta);
                else uk(kc, xp, wp, ct, j->ldc, mx, nw, 1.0f, beta);
            }
    }
}

/* Below this many flops (2mnk) per thread, one thread: gemm.c's threshold. */
#define PACKED_MIN_FLOPS_PER_THREAD (1 << 21)

/* bytes of one k block of X [m, k] packed for a product with pw (packed_gemm_n's X operand) */
static size_t x_block_bytes(const packed_w *pw, int64_t m) {
    return packed_bytes(pw->kern, m, pw->flip ? pw->kern->nr : pw->kern->mr, pw->kc_pad);
}

/* memcpy for n a multiple of 4 (a packed element is 2 or 4 bytes, whole pairs) */
static inline void copy_words(void *dst, const void *src, size_t n) {
    char *d = dst;
    const char *s = src;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) memcpy(d + i, s + i, 8);
    if (i < n) memcpy(d + i, s + i, 4);
}

/* Rows [b0, b1) of X [m, k] (X[i, p] = x[i * ldx + p], W's source dtype) into xpack, X packed for a
 * product with pw (k block q at xpack + q * x_block_bytes(pw, m)), writing only those rows' places:
 * the values kern->pack gives them when it packs all of X (the panels' other rows are another
 * task's, and the zero rows past m are packed with the last panel's rows). A panel only partly in
 * [b0, b1) is packed into tmp (kc_pad * r elements) and those rows' runs copied out. So the rows'
 * own tasks can pack X for the next product (amp_lstm_sequence's steps), where one thread packing
 * all of it held the other idle (two threads, the lstm model's amp-bf16: 2.2% of the samples). */
static void pack_x_rows(const packed_w *pw, char *xpack, int64_t m, const void *x, int64_t ldx, int64_t b0,
                        int64_t b1, unsigned char *tmp) {
    const amp_gemm_kernel *kern = pw->kern;
    const int r = pw->flip ? kern->nr : kern->mr, ku = kern->k_unit;
    const size_t ps = (size_t)kern->packed_size, x_bytes = x_block_bytes(pw, m);
    for (int64_t pc = 0, q = 0; pc < pw->k; pc += kern->kc, q++) {
        const int64_t kc = min64(kern->kc, pw->k - pc), kc_pad = round_up64(kc, ku);
        char *block = xpack + (size_t)q * x_bytes;
        for (int64_t i0 = b0 / r * r; i0 < b1; i0 += r) {
            const int64_t r0 = b0 > i0 ? b0 : i0, r1 = min64(b1, i0 + r);
            const bool whole = r0 == i0 && (r1 == i0 + r || r1 == m); /* every row of the panel, or the last */
            char *panel = block + (size_t)(i0 * kc_pad) * ps;
            const char *src = (const char *)x + (size_t)(r0 * ldx + pc) * pw->es;
            if (whole) {
                kern->pack(panel, src, ldx, false, r1 - r0, kc, r);
                continue;
            }
            kern->pack(tmp, src, ldx, false, r1 - r0, kc, r); /* rows at 0..r1-r0, then zeros */
            /* with X's last row, the panel's zero rows past m too */
            const int64_t out = (r1 == m ? i0 + r : r1) - r0;
            const size_t run = (size_t)(out * ku) * ps, line = (size_t)(r * ku) * ps;
            for (int64_t u = 0; u < kc_pad / ku; u++) /* runs of a few dozen bytes: no memcpy call each */
                copy_words(panel + (size_t)u * line + (size_t)((r0 - i0) * ku) * ps, tmp + (size_t)u * line, run);
        }
    }
}

typedef struct packed_x {
    char *data; /* X packed for every k block (pack_x_rows' layout) */
    int64_t m;
    unsigned char *tmp; /* with tasks: pack_x_rows' buffer, tmp_bytes for each thread; else NULL */
    size_t tmp_bytes;
} packed_x;

/* Scratch for X [m, k] packed for a product with pw, and with `tasks` a pack_x_rows buffer per thread
 * (X then packed by several row tasks at once); false (error recorded) when out of memory. */
static bool packed_x_alloc(amp_ctx *ctx, const packed_w *pw, int64_t m, bool tasks, packed_x *xp) {
    const int64_t blocks = (pw->k + pw->kern->kc - 1) / pw->kern->kc;
    *xp = (packed_x){.m = m,
                     .tmp_bytes = tasks ? (size_t)(pw->kc_pad * AMP_GEMM_MAX_TILE * pw->kern->packed_size) : 0};
    xp->data = amp_scratch_alloc(ctx, x_block_bytes(pw, m) * (size_t)(blocks > 0 ? blocks : 1));
    if (tasks) xp->tmp = amp_scratch_alloc(ctx, xp->tmp_bytes * (size_t)amp_parallel_max_threads());
    return xp->data && (!tasks || xp->tmp);
}

/* pack_x_rows into xp, with the calling thread's buffer */
static void pack_x_rows_into(const packed_w *pw, const packed_x *xp, const void *x, int64_t ldx, int64_t b0,
                             int64_t b1, int thread_id) {
    pack_x_rows(pw, xp->data, xp->m, x, ldx, b0, b1, xp->tmp ? xp->tmp + (size_t)thread_id * xp->tmp_bytes : NULL);
}

/* c [m, n] (ldc) = X W[0:n]^T + beta c with X [m, k] packed in xp (pack_x_rows), n <= W's rows, as
 * amp_gemm(dt, false, ...) with alpha 1 gives it */
static void packed_run(const packed_w *pw, const packed_x *xp, int64_t n, float beta, float *c, int64_t ldc) {
    const amp_gemm_kernel *kern = pw->kern;
    const int rw = pw->flip ? kern->mr : kern->nr;
    const int64_t m = xp->m, k = pw->k;
    if (m == 0 || n == 0) return;
    const int64_t tiles_w = (n + rw - 1) / rw;
    const double flops = 2.0 * (double)m * (double)n * (double)k;
    int64_t tasks = amp_parallel_max_threads();
    if (flops < (double)tasks * PACKED_MIN_FLOPS_PER_THREAD) tasks = (int64_t)(flops / PACKED_MIN_FLOPS_PER_THREAD);
    if (tasks > tiles_w) tasks = tiles_w;
    if (tasks < 1) tasks = 1;
    packed_job job = {pw,    xp->data, x_block_bytes(pw, m), packed_bytes(kern, pw->n, rw, pw->kc_pad), m, n, 0,
                      tiles_w, tasks, c, ldc, beta};
    if (tasks == 1) packed_task(&job, 0, 0);
    else amp_parallel_for(tasks, packed_task, &job);
}

/* Rows [i0, i1) of packed_run's product against every W panel, on the calling thread: i0 a multiple
 * of X's panel rows, and i1 one too or X's last row, so the range's tiles are its own (the kernel
 * stores a tile's rows below i1 only). Each element is packed_run's: a tile's arithmetic does not
 * depend on which tiles run with it. */
static void packed_rows(const packed_w *pw, const packed_x *xp, int64_t i0, int64_t i1, int64_t n, float beta,
                        float *c, int64_t ldc) {
    const amp_gemm_kernel *kern = pw->kern;
    const int rw = pw->flip ? kern->mr : kern->nr;
    if (i1 <= i0 || n == 0) return;
    const packed_job job = {.pw = pw, .xpack = xp->data, .x_bytes = x_block_bytes(pw, xp->m),
                            .w_bytes = packed_bytes(kern, pw->n, rw, pw->kc_pad), .m = i1, .n = n, .i0 = i0,
                            .tiles_w = (n + rw - 1) / rw, .tasks = 1, .c = c, .ldc = ldc, .beta = beta};
    packed_task((void *)&job, 0, 0);
}

/* c [m, n] (ldc) = X [m, k] W[0:n]^T + beta c, X[i, p] = x[i * ldx + p] in W's source dtype, n <= W's
 * rows, as amp_gemm(dt, false, ...) with alpha 1 gives it. False (error recorded) when out of memory. */
static bool packed_gemm_n(amp_ctx *ctx, const packed_w *pw, int64_t m, int64_t n, const void *x, int64_t ldx,
                          float beta, float *c, int64_t ldc) {
    if (m == 0 || n == 0) return true;
    amp_arena_mark mk = amp_scratch_mark(ctx);
    packed_x xp;
    if (!packed_x_alloc(ctx, pw, m, false, &xp)) return false;
    pack_x_rows_into(pw, &xp, x, ldx, 0, m, 0); /* every panel whole: no buffer */
    packed_run(pw, &xp, n, beta, c, ldc);
    amp_scratch_release(ctx, mk);
    return true;
}

static bool packed_gemm(amp_ctx *ctx, const packed_w *pw, int64_t m, const void *x, int64_t ldx, float beta, float *c,
                        int64_t ldc) {
    return packed_gemm_n(ctx, pw, m, pw->n, x, ldx, beta, c, ldc);
}

/* ---- the views h_next = hc[0], c_next = hc[1] ---- */

/* i[0]: which half (0: h', 1: c'). */
static void lstm_view_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *hc = node->in[0];
    const int64_t half = amp_tensor_numel(node->out);
    const float *g = amp_grad_out(ctx, node);
    float *full = amp_f32_scratch(ctx, 2 * half);
    if (!g || !full) return;
    memset(full, 0, (size_t)(2 * half) * sizeof *full);
    memcpy(full + node->i[0] * half, g, (size_t)half * sizeof *full);
    amp_grad_accumulate(ctx, hc, full);
}

static amp_tensor *lstm_view(amp_ctx *ctx, amp_tensor *hc, int which) {
    amp_tensor *v = amp_ctx_new_tensor(ctx, hc->dtype, 2, hc->shape + 1, false);
    if (!v) return NULL;
    const int64_t half = hc->shape[1] * hc->shape[2];
    v->data = (unsigned char *)hc->data + (size_t)(which * half) * amp_dtype_size(hc->dtype);
    amp_node *node = amp_autograd_record(ctx, OP, hc->compute_dtype, v, &hc, 1, lstm_view_backward);
    if (node) node->i[0] = which;
    return v;
}

/* ---- the fused cell ---- */

/* in[]: x, h, c, w_ih, w_hh, then the biases that are present. i[]: B, I, H, index of b_ih in in[] or
 * -1, index of b_hh or -1. saved: [B, 5H], row b = i, f, g, o activations then tanh(c'): fp32 for an
 * fp32 compute dtype, else act16 (lstm_kernels.h). */
static void lstm_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0], *h = node->in[1], *c = node->in[2], *w_ih = node->in[3], *w_hh = node->in[4];
    amp_tensor *b_ih = node->i[3] >= 0 ? node->in[node->i[3]] : NULL;
    amp_tensor *b_hh = node->i[4] >= 0 ? node->in[node->i[4]] : NULL;
    const int64_t B = node->i[0], I = node->i[1], H = node->i[2], G = 4 * H;
    const amp_dtype dt = node->out->compute_dtype;
    const void *saved = node->saved;
    const float *g = amp_grad_out(ctx, node); /* [2, B, H]: dh', then dc' */
    const float *cv = amp_f32_view(ctx, c);
    float *dgates = amp_f32_scratch(ctx, B * G);
    float *dc = amp_f32_scratch(ctx, B * H);
    if (!g || !cv || !dgates || !dc) return;

    const amp_lstm_kernels *lk = amp_lstm_active();
    for (int64_t b = 0; b < B; b++) {
        if (dt == AMP_F32)
            lk->cell_backward(dgates + b * G, dc + b * H, (const float *)saved + b * 5 * H, cv + b * H, g + b * H, NULL,
                              g + B * H + b * H, (size_t)H);
        else
            lk->cell_backward16(dgates + b * G, dc + b * H, (const uint16_t *)saved + b * 5 * H, cv + b * H,
                                g + b * H, NULL, g + B * H + b * H, (size_t)H);
    }
    amp_grad_accumulate(ctx, c, dc);

    /* The GEMM operand: dG in the compute dtype (the fp32 buffer itself for fp32). */
    const void *dg = dgates;
    if (dt != AMP_F32) {
        void *tmp = amp_scratch_alloc(ctx, (size_t)(B * G) * amp_dtype_size(dt));
        if (!tmp) return;
        amp_convert(tmp, dt, dgates, AMP_F32, (size_t)(B * G));
        dg = tmp;
    }
    if (x->requires_grad) { /* dx [B, I] = dG [B, 4H] W_ih [4H, I] */
        float *dx = amp_f32_scratch(ctx, B * I);
        if (!dx || lstm_gemm(ctx, dt, false, false, B, I, G, dg, G, w_ih->data, I, 0.0f, dx)) return;
        amp_grad_accumulate(ctx, x, dx);
    }
    if (h->requires_grad) { /* dh [B, H] = dG W_hh [4H, H] */
        float *dh = amp_f32_scratch(ctx, B * H);
        if (!dh || lstm_gemm(ctx, dt, false, false, B, H, G, dg, G, w_hh->data, H, 0.0f, dh)) return;
        amp_grad_accumulate(ctx, h, dh);
    }
    if (w_ih->requires_grad) { /* dW_ih [4H, I] = dG^T x [B, I] */
        float *dw = amp_f32_scratch(ctx, G * I);
        if (!dw || lstm_gemm(ctx, dt, true, false, G, I, B, dg, G, x->data, I, 0.0f, dw)) return;
        amp_grad_accumulate(ctx, w_ih, dw);
    }
    if (w_hh->requires_grad) { /* dW_hh [4H, H] = dG^T h [B, H] */
        float *dw = amp_f32_scratch(ctx, G * H);
        if (!dw || lstm_gemm(ctx, dt, true, false, G, H, B, dg, G, h->data, H, 0.0f, dw)) return;
        amp_grad_accumulate(ctx, w_hh, dw);
    }
    if ((b_ih && b_ih->requires_grad) || (b_hh && b_hh->requires_grad)) { /* column sums, fp32 */
        float *db = amp_f32_scratch(ctx, G);
        if (!db) return;
        memset(db, 0, (size_t)G * sizeof *db);
        for (int64_t b = 0; b < B; b++) lk->acc(db, dgates + b * G, (size_t)G);
        amp_grad_accumulate(ctx, b_ih, db);
        amp_grad_accumulate(ctx, b_hh, db);
    }
}

/* True when t is [d0, d1] (d1 < 0: any) ; records the error otherwise. */
static bool check_shape(amp_ctx *ctx, const amp_tensor *t, const char *what, int ndim, int64_t d0, int64_t d1) {
    bool ok = t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || d1 < 0 || t->shape[1] == d1);
    if (!ok) {
        char s[64];
        if (ndim == 1)
            amp_op_fail(ctx, OP, "%s has shape %s, want [%lld]", what, amp_shape_str(t, s, sizeof s), (long long)d0);
        else
            amp_op_fail(ctx, OP, "%s has shape %s, want [%lld, %lld]", what, amp_shape_str(t, s, sizeof s),
                        (long long)d0, (long long)d1);
    }
    return ok;
}

int amp_lstm_cell(amp_ctx *ctx, amp_tensor *x, amp_tensor *h, amp_tensor *c, amp_tensor *w_ih, amp_tensor *w_hh,
                  amp_tensor *b_ih, amp_tensor *b_hh, amp_tensor **h_next, amp_tensor **c_next) {
    if (h_next) *h_next = NULL;
    if (c_next) *c_next = NULL;
    if (!ctx) return AMP_ERR_NULL_POINTER;
    if (!h_next || !c_next) {
        amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "%s: h_next or c_next is NULL", amp_op_name(OP));
        return ctx->status; /* the first error stays */
    }
    amp_tensor *ts[5] = {x, h, c, w_ih, w_hh};
    for (int t = 0; t < 5; t++)
        if (!amp_op_input_ok(ctx, OP, ts[t])) return ctx->status;
    if ((b_ih && !amp_op_input_ok(ctx, OP, b_ih)) || (b_hh && !amp_op_input_ok(ctx, OP, b_hh))) return ctx->status;
    amp_tensor *cast_in[7] = {x, h, c, w_ih, w_hh, b_ih, b_hh};
    if (!amp_autocast_inputs(ctx, OP, cast_in, 7)) return ctx->status;
    x = cast_in[0], h = cast_in[1], c = cast_in[2], w_ih = cast_in[3], w_hh = cast_in[4];
    b_ih = cast_in[5], b_hh = cast_in[6];

    if (x->ndim != 2 || h->ndim != 2) {
        char sx[64], sh[64];
        amp_op_fail(ctx, OP, "x %s and h %s must be [B, I] and [B, H]", amp_shape_str(x, sx, sizeof sx),
                    amp_shape_str(h, sh, sizeof sh));
        return ctx->status;
    }
    const int64_t B = x->shape[0], I = x->shape[1], H = h->shape[1], G = 4 * H;
    if (!check_shape(ctx, h, "h", 2, B, H) || !check_shape(ctx, c, "c", 2, B, H) ||
        !check_shape(ctx, w_ih, "w_ih", 2, G, I) || !check_shape(ctx, w_hh, "w_hh", 2, G, H) ||
        (b_ih && !check_shape(ctx, b_ih, "b_ih", 1, G, -1)) || (b_hh && !check_shape(ctx, b_hh, "b_hh", 1, G, -1)))
        return ctx->status;

    amp_dtype dt = amp_promote(amp_promote(x->dtype, h->dtype), amp_promote(c->dtype, w_ih->dtype));
    dt = amp_promote(dt, w_hh->dtype);
    if (b_ih) dt = amp_promote(dt, b_ih->dtype);
    if (b_hh) dt = amp_promote(dt, b_hh->dtype);
    /* The GEMM operands contiguous in dt (casts and copies are recorded, so gradients reach the
     * originals in their own dtypes); c and the biases are only read as fp32. */
    if (!(x = amp_contiguous(ctx, amp_op_as(ctx, x, dt))) || !(h = amp_contiguous(ctx, amp_op_as(ctx, h, dt))) ||
        !(c = amp_op_as(ctx, c, dt)) || !(w_ih = amp_contiguous(ctx, amp_op_as(ctx, w_ih, dt))) ||
        !(w_hh = amp_contiguous(ctx, amp_op_as(ctx, w_hh, dt))))
        return ctx->status;
    if ((b_ih && !(b_ih = amp_op_as(ctx, b_ih, dt))) || (b_hh && !(b_hh = amp_op_as(ctx, b_hh, dt))))
        return ctx->status;

    amp_tensor *hc = amp_ctx_new_tensor(ctx, dt, 3, (const int64_t[]){2, B, H}, true);
    if (!hc) return ctx->status;
    amp_arena_mark mk = amp_scratch_mark(ctx);
    float *gates = amp_f32_scratch(ctx, B * G);
    float *saved = amp_f32_scratch(ctx, B * 5 * H); /* activations and tanh(c'), see the top */
    float *out = amp_f32_scratch(ctx, 2 * B * H);   /* h', c' in fp32 before the one rounding */
    const float *cv = gates && saved && out ? amp_f32_view(ctx, c) : NULL;
    const float *bi = b_ih && cv ? amp_f32_view(ctx, b_ih) : NULL;
    const float *bh = b_hh && cv ? amp_f32_view(ctx, b_hh) : NULL;
    if (!cv || (b_ih && !bi) || (b_hh && !bh) ||
        lstm_gemm(ctx, dt, false, true, B, G, I, x->data, I, w_ih->data, I, 0.0f, gates) ||
        lstm_gemm(ctx, dt, false, true, B, G, H, h->data, H, w_hh->data, H, 1.0f, gates)) {
        amp_scratch_release(ctx, mk);
        return ctx->status;
    }
    const amp_lstm_kernels *lk = amp_lstm_active();
    for (int64_t b = 0; b < B; b++) { /* c' computed in place in its half of out, from a copy of c */
        float *cn = out + B * H + b * H;
        memcpy(cn, cv + b * H, (size_t)H * sizeof *cn);
        lk->cell_forward(saved + b * 5 * H, NULL, cn, out + b * H, gates + b * G, NULL, bi, bh, (size_t)H, false);
    }
    amp_store_f32(ctx, hc, out);

    amp_tensor *in[7] = {x, h, c, w_ih, w_hh};
    int n_in = 5;
    const int64_t i_bih = b_ih ? n_in : -1;
    if (b_ih) in[n_in++] = b_ih;
    const int64_t i_bhh = b_hh ? n_in : -1;
    if (b_hh) in[n_in++] = b_hh;
    amp_node *node = amp_autograd_record(ctx, OP, dt, hc, in, n_in, lstm_backward);
    if (node) { /* fp32, or act16 for a 16-bit dt (see the top) */
        const size_t n = (size_t)(B * 5 * H > 0 ? B * 5 * H : 1);
        void *keep = amp_ctx_alloc(ctx, n * (dt == AMP_F32 ? sizeof(float) : sizeof(uint16_t)));
        if (keep) {
            if (dt == AMP_F32) memcpy(keep, saved, (size_t)(B * 5 * H) * sizeof *saved);
            else lk->act16_pack(keep, saved, (size_t)(B * 5 * H));
            node->saved = keep;
            node->i[0] = B, node->i[1] = I, node->i[2] = H, node->i[3] = i_bih, node->i[4] = i_bhh;
        }
    }
    amp_scratch_release(ctx, mk);
    if (ctx->status != AMP_OK) return ctx->status;

    amp_tensor *hn = lstm_view(ctx, hc, 0), *cn = lstm_view(ctx, hc, 1);
    if (!hn || !cn) return ctx->status;
    *h_next = hn;
    *c_next = cn;
    return AMP_OK;
}

/* ---- the whole sequence: amp_lstm_sequence (op_util.h) ----
 *
 * The same cell as above, unrolled over T steps from a zero state, as one node. What it saves over T
 * amp_lstm_cell calls (its reference twin, tests/test_ops_lstm_attention.c compares them) is GEMM
 * shape and bookkeeping, not arithmetic:
 *   forward:  per step x_t W_ih^T, then h_{t-1} W_hh^T accumulated into the same rows (beta 1), with
 *             both weights packed once per pass and h_{t-1} read in place from the output; then one
 *             fused pointwise pass per row (lstm_kernels.h cell_forward: biases, activations, c_t, h_t;
 *             for bf16 on AVX-512 also the act16 packing and h_t's and c_t's rounding,
 *             cell_forward_bf16), which stores the saved activations and c_{t-1} around the caches,
 *             as nothing reads them before the backward pass; with more than one thread the rows of
 *             a step's pointwise pass, forward and backward, are split between them (fwd_row, bwd_row:
 *             the same values as one thread, tests/test_lstm_sequence.c);
 *   backward: per step dh = dG_t W_hh and dx_t = dG_t W_ih from one packing of dG_t; then
 *             [dW_ih | dW_hh] = dG^T [X | H_prev] as one GEMM with K = B*T (one pass over dG for both
 *             weight gradients), each weight
 *             gradient accumulated (rounded) once instead of T times. The bias gradient is summed in
 *             fp32 as the rows of dG are formed (t from T - 1 down, b up within a step), so for f16/bf16
 *             each fp32 row of dG lives only in a one-row buffer until it is rounded (for bf16 on
 *             AVX-512 only in registers, lstm_kernels.h cell_backward_bf16): no fp32 [B*T, 4H] buffer
 *             written and read again (measured 3-5% of the lstm model's amp-bf16 step).
 * Values: the gate pre-activations are fp32 sums of the same dt products; tanh(c_t) is taken of the
 * fp32 c_t and the next step reads c_t rounded to dt, as with the cell's c' output; dG is formed in
 * fp32 and rounded once to dt for the GEMMs. The weight gradients sum over time inside one fp32 GEMM
 * instead of T roundings to the gradient's dtype (for fp32 the same sum in another order), the bias
 * gradient in the order above.
 *
 * Saved: the cell's activations and tanh(c_t) per step and row, and c_{t-1}. For fp32 both in fp32;
 * for bf16 and f16 the activations as act16 (the cell's format, so the two stay bit-identical) and
 * c_{t-1} in dt, exactly (c is rounded to dt every step): 12 bytes per hidden unit and step instead
 * of 24 (the lstm model's 12.5 MiB of saved state becomes 6.25).
 *
 * With tokens (amp_lstm_sequence_tokens, the lstm model's embedding folded in): x_t's rows are rows
 * of the embedding E [V, I]; the input projection is computed once for E's V rows and looked up, and
 * the gradients of W_ih and E come from dG summed by token (token_grads), so no product has B*T rows
 * of x or dx; h, c, dG and dW_hh are the composed ops' bits (tests/test_lstm_sequence.c).
 *
 * in[]: x [B, T, I] or with tokens E [V, I] (contiguous, dt), w_ih, w_hh (contiguous, dt), then the
 * biases present. i[]: B, T, I, H, index of b_ih or -1, index of b_hh or -1, V with tokens or 0.
 * saved: [T, B, 5H] activations and tanh(c_t), then [T, B, H] c_{t-1}: fp32, or for a narrow dt act16
 * then dt; then with tokens the tokens [B*T]. */

/* The weight gradients' right operand [X | H_prev] [B*T, NX + H] (NX = I, or 0 for H_prev alone), never
 * stored: amp_gemm_implicit_b packs its blocks from x and h as they are requested, where writing the
 * whole matrix and packing it back from memory cost a pass over 2.6 MB each (the lstm model's fp32).
 * A panel's rows within X or within H_prev (a run of rows between two t = 0 rows, whose H_prev row is
 * zero) are packed by kern->pack from x or h in place; the rest (a t = 0 row and the row after it, or
 * a panel across the X | H_prev border) are gathered into a small buffer first, then packed. Runs
 * start at even rows of the block (a bf16 pair is never split), so the packed values are those
 * kern->pack gives the stored matrix and the bits are amp_gemm's. */
typedef struct xh_src {
    const char *x, *h; /* x [B*T, NX], h the sequence's output [B, T, H], es bytes per element */
    int64_t T, NX, H;
    size_t es;
} xh_src;

/* rows [pp, pp + len) of the panel's columns [jp, jp + rows) of [X | H_prev] into tmp [len][r] */
static void gather_xh(const xh_src *s, unsigned char *tmp, int r, int64_t jp, int64_t rows, int64_t pp, int64_t len) {
    const size_t es = s->es;
    const int64_t jx = jp + rows < s->NX ? jp + rows : jp > s->NX ? jp : s->NX; /* [jp, jx) from X */
    const size_t xb = (size_t)(jx - jp) * es, hb = (size_t)(jp + rows - jx) * es;
    for (int64_t q = 0; q < len; q++) {
        const int64_t row = pp + q;
        unsigned char *d = tmp + (size_t)(q * r) * es;
        if (xb) memcpy(d, s->x + (size_t)(row * s->NX + jp) * es, xb);
        if (!hb) continue;
        if (row % s->T == 0) memset(d + xb, 0, hb);
        else memcpy(d + xb, s->h + (size_t)((row - 1) * s->H + (jx - s->NX)) * es, hb);
    }
}

/* amp_gemm_pack_cb: rows [j0, j0 + cols) x columns [p0, p0 + kc) of M = [X | H_prev]^T */
static void pack_xh(const void *arg, const amp_gemm_kernel *kern, void *dst, int64_t j0, int64_t cols, int64_t p0,
                    int64_t kc, int r) {
    const xh_src *s = arg;
    const size_t es = s->es, ps = (size_t)kern->packed_size;
    const int64_t kc_pad = round_up64(kc, kern->k_unit), pend = p0 + kc;
    _Alignas(64) unsigned char tmp[XH_CHUNK * AMP_GEMM_MAX_TILE * sizeof(float)]; /* [XH_CHUNK][r] rows, in dt */
    for (int64_t jp = j0; jp < j0 + cols; jp += r) {
        const int64_t rows = min64(r, j0 + cols - jp);
        const bool xonly = jp + rows <= s->NX, honly = jp >= s->NX;
        char *panel = (char *)dst + (size_t)((jp - j0) / r * kc_pad * r) * ps;
        for (int64_t pp = p0, len; pp < pend; pp += len) {
            const int64_t left = pend - pp;
            const char *src = NULL;
            int64_t lds = r;
            if (xonly) {
                len = left, src = s->x + (size_t)(pp * s->NX + jp) * es, lds = s->NX;
            } else if (honly && pp % s->T != 0) { /* up to the next t = 0 row; even unless it ends the block */
                const int64_t run = s->T - pp % s->T;
                len = run >= left ? left : run & ~(int64_t)1;
                if (len > 0) src = s->h + (size_t)((pp - 1) * s->H + (jp - s->NX)) * es, lds = s->H;
            }
            if (!src) {
                len = min64(honly ? 2 : XH_CHUNK, left);
                gather_xh(s, tmp, r, jp, rows, pp, len);
                src = (const char *)tmp, lds = r;
            }
            kern->pack(panel + (size_t)((pp - p0) * r) * ps, src, lds, true, rows, len, r);
        }
    }
}

/* c [G, NX + H] = dG^T [X | H_prev] (dG [B*T, G] in dt), amp_gemm's bits; the error recorded on failure */
static int xh_gemm(amp_ctx *ctx, amp_dtype dt, const xh_src *s, int64_t G, int64_t R, const void *dg, float *c) {
    const int64_t N = s->NX + s->H;
    const int st = amp_gemm_implicit_b(dt, true, G, N, R, 1.0f, dg, ld(G), pack_xh, s, 0.0f, c, ld(N), NULL);
    if (st != AMP_OK) amp_ctx_fail(ctx, st, "%s: amp_gemm failed: %s", amp_op_name(OP), amp_status_str(st));
    return st;
}

/* Prefetches the cache lines of [p, p + bytes) (PREFETCHT1: read, kept in the caches) */
static void prefetch_bytes(const void *p, size_t bytes) {
    const uintptr_t end = (uintptr_t)p + bytes;
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)63; a < end; a += 64) __builtin_prefetch((const void *)a, 0, 2);
}

/* One step's pointwise backward (lstm_seq_backward), row b per task: each row reads its own saved
 * values and gradients and writes its own dG and dc rows, so the rows can be split between threads.
 * The bias gradient, a sum across rows, is added afterwards in row order from fp32 rows of dG: the
 * same additions in the same order as one row at a time. For a narrow dt a task forms its row in
 * fp32 in dgf and rounds it into dG: with the fused kernel (cell_backward_bf16, bf16 with a bf16 dout)
 * in one pass that also keeps the fp32 row, else by its composition (cell_backward16 from c_{t-1} in
 * fp32, then amp_convert), the same bits (lstm_kernels.h). At two threads on the lstm model the
 * composition's conversions were 3.2% of the samples. */
typedef struct bwd_job {
    const amp_lstm_kernels *lk;
    amp_dtype dt;
    const float *acts, *cprev;              /* fp32: [T, B, 5H] and [T, B, H] */
    const uint16_t *acts16;                 /* narrow: [T, B, 5H] act16 */
    const char *cpt;                        /* narrow: step t's c_{t-1} [B, H] in dt */
    float *cpf;                             /* narrow: the same in fp32, each row converted by its task */
    float *dgf;                             /* narrow: step t's dG rows in fp32 [B, 4H] */
    const float *dout, *dhn;                /* dhn: dh_t rows ldp apart (zeros after the last step) */
    const uint16_t *dout16;                 /* the fused bf16 rows: dout in bf16, in place (dout NULL) */
    void *dgd;                              /* dG [B*T, 4H] in dt, rows b*T + t */
    float *dc;                              /* dc_t -> dc_{t-1} [B, H] */
    int64_t t, nb, T, H, ldp;               /* nb: B */
    const packed_w *w;                      /* with xg: step t's product, whose X (dG_t) each range packs */
    const packed_x *xg;                     /* NULL: none */
    const float *gs;                        /* the serial path's token sums [V, 4H], which the cell adds to
                                               (prefetched as dG's rows); NULL: none */
    const int32_t *tok;                     /* with gs: the tokens [B, T] */
} bwd_job;

/* The next row's reads that come from memory, not from a cache, fetched (PREFETCHT1) while row b
 * computes: row b + 1 of step t, or after the last row of the range [b0, b1) this thread runs, row b0
 * of step t - 1 (the backward's order; the ranges are the same every step). The saved
 * activations and c_{t-1} were streamed past the caches by the forward, and dout's rows of one step are
 * T*H floats apart (one per batch element), a pattern the hardware prefetchers do not follow: without
 * this the cell's loads waited on memory (perf on the lstm model, one thread, Zen 4: a third of the
 * bf16 backward kernel's samples on its first loads; with it, paired runs of the whole step 1.03).
 * The row of dG the cell will write is fetched too: dG [B*T, 4H] (4 MiB in the lstm model's bf16)
 * is written a row per batch element a step, T*4H apart, and its stores waited on their lines'
 * reads; with it and the serial path's token-sum row (gs) the bf16 kernel's perf samples fell by
 * a quarter (915-1012 -> 591-682, the prefetch loops +50-100 of about 14000), and paired runs of the
 * step read 1.024 (10 pairs). Into L2 only: PREFETCHW (L1, for writing) read 0.964 and PREFETCHT0
 * for all of it 0.933 (8 pairs each), the lines evicting what the row's kernel was using. */
static void prefetch_bwd_row(const bwd_job *j, int64_t b, int64_t b0, int64_t b1) {
    const int64_t B = j->nb, H = j->H, t = b + 1 < b1 ? j->t : j->t - 1, nb = b + 1 < b1 ? b + 1 : b0;
    if (t < 0) return;
    const int64_t row = t * B + nb; /* in the saved [T, B, ...] order */
    const size_t es = amp_dtype_size(j->dt);
    prefetch_bytes((char *)j->dgd + (size_t)((nb * j->T + t) * 4 * H) * es, (size_t)(4 * H) * es);
    if (j->gs) prefetch_bytes(j->gs + (int64_t)j->tok[nb * j->T + t] * 4 * H, (size_t)(4 * H) * sizeof(float));
    if (j->dout16) prefetch_bytes(j->dout16 + (nb * j->T + t) * H, (size_t)H * sizeof(uint16_t));
    else prefetch_bytes(j->dout + (nb * j->T + t) * H, (size_t)H * sizeof(float));
    if (j->dt == AMP_F32) {
        prefetch_bytes(j->acts + row * 5 * H, (size_t)(5 * H) * sizeof(float));
        prefetch_bytes(j->cprev + row * H, (size_t)H * sizeof(float));
        return;
    }
    prefetch_bytes(j->acts16 + row * 5 * H, (size_t)(5 * H) * sizeof(uint16_t));
    prefetch_bytes(j->cpt + (row - j->t * B) * H * (int64_t)es, (size_t)H * es); /* cpt is step t's block */
}

static void bwd_row(void *arg, int64_t b, int thread_id) {
    (void)thread_id;
    const bwd_job *j = arg;
    const int64_t t = j->t, H = j->H, G = 4 * H, row = t * j->nb + b, r = b * j->T + t;
    const float *dho = j->dout ? j->dout + r * H : NULL, *dhb = j->dhn + b * j->ldp;
    if (j->dt == AMP_F32) {
        j->lk->cell_backward((float *)j->dgd + r * G, j->dc + b * H, j->acts + row * 5 * H, j->cprev + row * H, dho,
                             dhb, j->dc + b * H, (size_t)H);
        return;
    }
    float *dgr = j->dgf + b * G;
    if (j->dout16) { /* the fused kernel: dG rounded and its fp32 row kept for the sums, in one pass */
        j->lk->cell_backward_bf16((uint16_t *)j->dgd + r * G, NULL, dgr, j->dc + b * H, j->acts16 + row * 5 * H,
                                  (const uint16_t *)(const void *)j->cpt + b * H, j->dout16 + r * H, dhb, j->dc + b * H,
                                  (size_t)H);
        return;
    }
    amp_convert(j->cpf + b * H, AMP_F32, j->cpt + (size_t)(b * H) * amp_dtype_size(j->dt), j->dt, (size_t)H);
    j->lk->cell_backward16(dgr, j->dc + b * H, j->acts16 + row * 5 * H, j->cpf + b * H, dho, dhb, j->dc + b * H,
                           (size_t)H);
    amp_convert((char *)j->dgd + (size_t)(r * G) * amp_dtype_size(j->dt), j->dt, dgr, AMP_F32, (size_t)G);
}

/* Rows [b0, b1) of step t (bwd_row), then those rows of dG_t packed for the step's product */
static void bwd_rows(void *arg, int64_t b0, int64_t b1, int thread_id) {
    const bwd_job *j = arg;
    for (int64_t b = b0; b < b1; b++) {
        prefetch_bwd_row(j, b, b0, b1);
        bwd_row(arg, b, thread_id);
    }
    if (j->xg)
        pack_x_rows_into(j->w, j->xg, (const char *)j->dgd + (size_t)(j->t * 4 * j->H) * amp_dtype_size(j->dt),
                         j->T * 4 * j->H, b0, b1, thread_id);
}

/* The backward's lanes (amp_parallel_gang): each thread runs its rows [b0, b1) through every step,
 * as fwd_lanes does, where splitting each step met the other thread three times a step (the rows,
 * the bias and token sums on one thread, the product by W's columns).
 *
 * A row's steps need only its own rows (dh_t from its product, dc_t), but the sums of dG's rows (the
 * bias gradient, or with tokens each token's row of gs) add every row of a step, in row order, the
 * steps in the backward's order: those bits must not depend on the thread count. So each lane keeps
 * its fp32 rows of step k (the k-th step done) in slot k % LANE_SLOTS of a ring, publishes
 * produced = k + 1, and then sums step k - LANE_LAG for its own columns over all rows, waiting until
 * every lane has produced it: each element still gets the rows in the one-thread order, and a lane
 * waits only when another is LANE_LAG steps behind. Before it overwrites a slot, a lane waits until
 * every lane has summed the step that used it. */
enum { LANE_LAG = 1, LANE_SLOTS = LANE_LAG + 2 };

typedef struct bwd_lanes {
    bwd_job job;                /* every step's fields but t, dgf, dhn, cpt, xg (each lane's copy) */
    const char *cprev_dt;       /* narrow: the saved c_{t-1} of every step */
    float *ring;                /* narrow: [LANE_SLOTS][B][4H] fp32 dG rows */
    float *dxh;                 /* per step t: [dx_t | dh_{t-1}], rows t*B + b, ldp apart */
    float *gs, *dbt;            /* where rows are summed (ROW_SUM) */
    const int32_t *tok;
    int64_t NX, NW, lanes, rows; /* rows: X's panel rows (a lane's range is whole panels) */
    _Atomic int64_t produced[AMP_MAX_THREADS], summed[AMP_MAX_THREADS];
} bwd_lanes;

/* until every lane's counter is at least want */
static void lanes_wait(_Atomic int64_t *v, int64_t lanes, int64_t want) {
    for (int64_t i = 0; i < lanes; i++)
        for (int spins = 0; atomic_load_explicit(&v[i], memory_order_acquire) < want; spins++)
            if (spins > 4096) sched_yield(); /* the other lane may be descheduled: give it the core */
}

/* Lane i's columns [c0, c1) of step k's rows, each added to its row sum (ROW_SUM's target) */
static void lanes_sum(bwd_lanes *L, int64_t i, int64_t k, int64_t c0, int64_t c1) {
    const bwd_job *j = &L->job;
    const int64_t B = j->nb, T = j->T, G = 4 * j->H, t = T - 1 - k;
    lanes_wait(L->produced, L->lanes, k + 1);
    for (int64_t b = 0; b < B && c1 > c0; b++) {
        float *dst = L->gs ? L->gs + (int64_t)L->tok[b * T + t] * G : L->dbt;
        if (!dst) break;
        const float *row = L->ring ? L->ring + ((k % LANE_SLOTS) * B + b) * G : (const float *)j->dgd + (b * T + t) * G;
        j->lk->acc(dst + c0, row + c0, (size_t)(c1 - c0));
    }
    atomic_store_explicit(&L->summed[i], k + 1, memory_order_release);
}

static void bwd_lane(void *arg, int64_t i, int thread_id) {
    bwd_lanes *L = arg;
    bwd_job j = L->job;
    const int64_t B = j.nb, T = j.T, H = j.H, G = 4 * H;
    int64_t b0, b1; /* the rows fwd_lanes gives lane i (amp_parallel_range's cut) */
    amp_parallel_range_bounds(B, L->rows, L->lanes, i, &b0, &b1);
    const int64_t c0 = G * i / L->lanes / 16 * 16, c1 = i + 1 == L->lanes ? G : G * (i + 1) / L->lanes / 16 * 16;
    const size_t es = amp_dtype_size(j.dt);
    const packed_x *xg = j.xg;
    for (int64_t k = 0; k < T; k++) {
        const int64_t t = T - 1 - k, n = t > 0 ? L->NW : L->NX;
        if (L->ring && k >= LANE_SLOTS) lanes_wait(L->summed, L->lanes, k - LANE_SLOTS + 1); /* the slot is free */
        j.t = t;
        j.dgf = L->ring ? L->ring + (k % LANE_SLOTS) * B * G : NULL;
        j.dhn = L->dxh + (t + 1) * B * j.ldp + L->NX;
        j.cpt = L->cprev_dt ? L->cprev_dt + (size_t)(t * B * H) * es : NULL;
        j.xg = n > 0 ? xg : NULL;
        bwd_rows(&j, b0, b1, thread_id);
        if (n > 0) packed_rows(j.w, xg, b0, b1, n, 0.0f, L->dxh + t * B * j.ldp, j.ldp);
        atomic_store_explicit(&L->produced[i], k + 1, memory_order_release);
        if (k >= LANE_LAG) lanes_sum(L, i, k - LANE_LAG, c0, c1);
    }
    for (int64_t k = T - LANE_LAG > 0 ? T - LANE_LAG : 0; k < T; k++) lanes_sum(L, i, k, c0, c1);
}

/* dX's rows of batch elements [b0, b1) from the step-major dxh (rows t B + b, ldp apart) into X's order
 * (rows b T + t): copied into dx, or through the sink's epilogue row by row. Rows are disjoint, so the
 * batch elements may be split between threads. */
typedef struct dx_job {
    float *dxh;
    float *dx;                  /* NULL: through the sink */
    const amp_grad_sink *sink;
    int64_t T, I, B, ldp;
} dx_job;

static void dx_rows(void *arg, int64_t b0, int64_t b1, int thread_id) {
    (void)thread_id;
    const dx_job *j = arg;
    const int64_t T = j->T, I = j->I;
    for (int64_t b = b0; b < b1; b++)
        for (int64_t t = 0; t < T; t++) {
            float *row = j->dxh + (t * j->B + b) * j->ldp;
            if (j->dx) {
                memcpy(j->dx + (b * T + t) * I, row, (size_t)I * sizeof *row);
                continue;
            }
            const amp_gemm_epilogue ep = amp_sink_epilogue(j->sink, (b * T + t) * I, I);
            amp_gemm_epilogue_apply(&ep, row, ld(I), 1, I);
        }
}

/* With tokens (amp_lstm_sequence_tokens): the input projection's gradients through the embedding.
 * x_t = E[tok], so dW_ih = dG^T X = gs^T E and each dx_t = dG_t W_ih lands in its token's row of dE,
 * dE = gs W_ih, with gs [V, 4H] the rows of dG summed by token: two products of V rows where the
 * composed ops (amp_embedding, then amp_lstm_sequence) compute dX with B*T rows, then dW_ih with K =
 * B*T, then scatter dX into dE. Values: gs sums the fp32 rows of dG (as the bias gradient does,
 * rows in the backward's order) where the composed products read each row rounded to dt. For bf16
 * both products are bf16 products (fp32 accumulation, as the composed ones) of gs rounded once to
 * bf16 and of E's and W_ih's values as they are stored; for f16 and fp32 they run in fp32 on gs and
 * E's and W_ih's values (f16 would round gs, a sum of up to B*T rows, into f16's range where the
 * composed ops round each row: a loss-scaled sum could overflow). So the products are the composed
 * ops' summed in another order, with one rounding of each token's sum to bf16 in place of one per
 * row (f16: none), and dE also skips dx_t's rounding to dt (autocast: the gradient of a bf16 input
 * is bf16) before the scatter: for bf16 within 2^-8 of the magnitudes summed, for fp32 the same
 * terms (tests/test_lstm_sequence.c measures both). On the lstm model (one thread, Zen 4) the fp32
 * products with their packing were 2.8% of the amp-bf16 step, 0.72 ms against 0.36 ms in bf16. */
static void token_grads(amp_ctx *ctx, amp_tensor *emb, amp_tensor *w_ih, const float *gs, int64_t V, int64_t I,
                        int64_t G) {
    const bool bf16 = emb->dtype == AMP_BF16;
    const amp_dtype pt = bf16 ? AMP_BF16 : AMP_F32; /* the products' dtype */
    const void *gp = gs;
    if (bf16) {
        void *g16 = amp_scratch_alloc(ctx, (size_t)(V * G) * sizeof(uint16_t));
        if (!g16) return;
        amp_convert(g16, AMP_BF16, gs, AMP_F32, (size_t)(V * G));
        gp = g16;
    }
    if (w_ih->requires_grad) { /* dW_ih [4H, I] = gs^T E */
        const void *e = bf16 ? emb->data : amp_f32_view(ctx, emb);
        float *dw = amp_f32_scratch(ctx, G * I);
        if (!e || !dw || lstm_gemm(ctx, pt, true, false, G, I, V, gp, G, e, I, 0.0f, dw)) return;
        lstm_put_grad(ctx, w_ih, dw, I, G, I);
    }
    if (emb->requires_grad && ctx->status == AMP_OK) { /* dE [V, I] = gs W_ih */
        const void *w = bf16 ? w_ih->data : amp_f32_view(ctx, w_ih);
        float *de = amp_f32_scratch(ctx, V * I);
        if (!w || !de || lstm_gemm(ctx, pt, false, false, V, I, G, gp, G, w, I, 0.0f, de)) return;
        lstm_put_grad(ctx, emb, de, I, V, I);
    }
}

static void lstm_seq_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0], *w_ih = node->in[1], *w_hh = node->in[2];
    amp_tensor *b_ih = node->i[4] >= 0 ? node->in[node->i[4]] : NULL;
    amp_tensor *b_hh = node->i[5] >= 0 ? node->in[node->i[5]] : NULL;
    const int64_t B = node->i[0], T = node->i[1], I = node->i[2], H = node->i[3], G = 4 * H, R = B * T;
    const int64_t V = node->i[6]; /* > 0: x is the embedding, the inputs its rows tokens[b * T + t] */
    const amp_dtype dt = node->out->compute_dtype;
    const size_t es = amp_dtype_size(dt);
    /* saved: see amp_lstm_sequence; narrow: act16 and c_{t-1} in dt */
    const bool narrow = dt != AMP_F32;
    const float *acts = narrow ? NULL : node->saved, *cprev = narrow ? NULL : acts + T * B * 5 * H;
    const uint16_t *acts16 = narrow ? node->saved : NULL;
    const char *cprev_dt = narrow ? (const char *)(acts16 + T * B * 5 * H) : NULL;
    const int32_t *tok = V ? (const int32_t *)(const void *)((const char *)node->saved +
                                                             (size_t)(T * B * 6 * H) * (narrow ? 2 : sizeof(float)))
                           : NULL;
    const amp_lstm_kernels *lk = amp_lstm_active();
    /* the rows of a step split between threads (bwd_row); narrow: through fp32 rows in dgf */
    const bool par = B > 1 && amp_parallel_max_threads() > 1;
    /* bf16 and the path's fused row kernel (lstm_kernels.h cell_backward_bf16): h's gradient read in
     * place in bf16, where widening it to fp32 first was a pass over [B, T, H]; with one thread the
     * kernel also sums the rows (fused_bf16), with more each row's task keeps its fp32 row for the
     * sums after the step (bwd_row) */
    const amp_tensor *gout = node->out->grad;
    const bool fused_kernel = dt == AMP_BF16 && lk->cell_backward_bf16 && gout && gout->dtype == AMP_BF16 &&
                              amp_tensor_is_contiguous(gout);
    const bool fused_bf16 = fused_kernel && !par;
    const uint16_t *dout16 = fused_kernel ? gout->data : NULL;
    const float *dout = fused_kernel ? NULL : amp_grad_out(ctx, node); /* [B, T, H] */
    /* dG in dt, rows b*T + t; for a narrower dt each row is formed in fp32 in dgrow, then rounded */
    void *dgd = amp_scratch_alloc(ctx, (size_t)(R * G) * es);
    float *dgrow = dt == AMP_F32 ? NULL : amp_f32_scratch(ctx, G);
    const bool want_db = (b_ih && b_ih->requires_grad) || (b_hh && b_hh->requires_grad);
    float *db = want_db ? amp_f32_scratch(ctx, G) : NULL; /* the bias gradient, summed row by row below */
    /* with tokens, the fp32 rows of dG summed by token (token_grads) instead of into db, which is then
     * their column sum: one pass over the rows for both */
    const bool want_gs = V && (want_db || x->requires_grad || w_ih->requires_grad);
    float *gs = want_gs ? amp_f32_scratch(ctx, V * G) : NULL;
    float *const dbt = gs ? NULL : db; /* the rows' target without tokens */
    float *dc = amp_f32_scratch(ctx, B * H);
    float *dgf = narrow && par ? amp_f32_scratch(ctx, B * G) : NULL;
    const bool need_cpf = narrow && !fused_kernel;
    float *cpf = need_cpf ? amp_f32_scratch(ctx, B * H) : NULL; /* step t's c_{t-1} in fp32 */
    if ((!dout && !dout16) || !dgd || (narrow && !dgrow) || (want_db && !db) || (want_gs && !gs) || !dc || (need_cpf && !cpf) ||
        (narrow && par && !dgf))
        return;
    if (gs) memset(gs, 0, (size_t)(V * G) * sizeof *gs);
#define ROW_SUM(b) (gs ? gs + (int64_t)tok[(b) * T + t] * G : dbt) /* where row b of step t's dG is summed */
    memset(dc, 0, (size_t)(B * H) * sizeof *dc);
    if (db) memset(db, 0, (size_t)G * sizeof *db);
    /* Per step, [dx_t | dh_{t-1}] [B, I + H] = dG_t [W_ih | W_hh]: one product against W = [W_ih | W_hh]^T
     * [I + H, 4H], packed once per pass, from one packing of dG_t, where a GEMM for all of dX after the
     * loop packed dG a second time, read back from memory, and W_ih's 64 rows alone would fill 64/72
     * of the kernel's 12-row tiles (320/324 together). Each element is still amp_gemm's sum over the
     * same k blocks, so the bits are those of the separate products. Without dX (x needs no gradient)
     * W is W_hh^T alone. Block t of dxh (rows t*B + b, padded as the forward's gate rows: the
     * transposed tile stores would hit one L1 set otherwise) holds step t's [dx_t | dh_{t-1}]; block T
     * the zero dh that enters the last step. */
    const int64_t NX = !V && x->requires_grad ? I : 0, NW = NX + H, ldp = NW + LSTM_XP_PAD;
    float *dxh = amp_f32_scratch(ctx, (R + B) * ldp);
    if (!dxh) return;
    for (int64_t b = 0; b < B; b++) memset(dxh + (R + b) * ldp + NX, 0, (size_t)H * sizeof *dxh);
    packed_w w; /* read only by products with n > 0 below, which need it packed */
    if (NX) {
        if (!pack_w_cat(ctx, &w, dt, w_ih->data, I, I, w_hh->data, H, H, G, B)) return;
    } else if (T > 1 && !pack_w(ctx, &w, dt, w_hh->data, H, true, H, G, B)) {
        return;
    }
    /* dG_t packed for the step's product by the rows' own tasks (bwd_rows) */
    packed_x xg = {.m = B}; /* allocated where a step has a product */
    if ((NX || T > 1) && !packed_x_alloc(ctx, &w, B, true, &xg)) return;
    /* lanes (bwd_lane): the rows split between the threads for the whole sequence, where W is the B
     * operand (a range of X's rows is whole panels) and every thread can run at once */
    const int64_t lane_r = T > 1 && !w.flip ? w.kern->mr : 0;
    const int64_t nl = lane_r > 0 && par ? min64(amp_parallel_max_threads(), B / lane_r) : 0;
    bool laned = false;
    if (nl > 1) {
        float *ring = narrow ? amp_f32_scratch(ctx, LANE_SLOTS * B * G) : NULL;
        bwd_lanes *lj = amp_scratch_alloc(ctx, sizeof *lj);
        if (!lj || (narrow && !ring)) return;
        *lj = (bwd_lanes){.job = {lk, dt, acts, cprev, acts16, NULL, cpf, NULL, dout, NULL, dout16, dgd, dc, T - 1, B,
                                  T, H, ldp, &w, &xg, NULL, NULL},
                          .cprev_dt = cprev_dt, .ring = ring, .dxh = dxh, .gs = gs, .dbt = dbt, .tok = tok,
                          .NX = NX, .NW = NW, .lanes = nl, .rows = lane_r};
        for (int64_t i = 0; i < nl; i++) atomic_init(&lj->produced[i], 0), atomic_init(&lj->summed[i], 0);
        laned = amp_parallel_gang(nl, bwd_lane, lj);
    }
    for (int64_t t = T - 1; !laned && t >= 0; t--) {
        const int64_t n = t > 0 ? NW : NX; /* the step's product: [dx_t | dh_{t-1}], dx_t alone at t = 0 */
        float *blk = dxh + t * B * ldp;                  /* step t's [dx_t | dh_{t-1}] */
        const float *dhn = dxh + (t + 1) * B * ldp + NX; /* dh_t, from step t + 1 (zeros after the last) */
        const char *cpt = narrow ? cprev_dt + (size_t)(t * B * H) * es : NULL; /* step t's c_{t-1}, [B, H] in dt */
        if (cpf && !par) amp_convert(cpf, AMP_F32, cpt, dt, (size_t)(B * H));
        bwd_job job = {lk, dt,  acts, cprev, acts16, cpt,  cpf,  dgf,        dout,
                       dhn, dout16, dgd, dc,  t,      B,    T,    H,          ldp,
                       &w,  n > 0 ? &xg : NULL,
                       narrow && !par ? gs : NULL, tok}; /* the serial rows add to gs in the kernel */
        if (!narrow || par) { /* the rows' pointwise passes (split between the threads), then db in row order */
            if (par) amp_parallel_range(B, 1, 1, bwd_rows, &job);
            else bwd_rows(&job, 0, B, 0);
            for (int64_t b = 0; ROW_SUM(b) && b < B; b++)
                lk->acc(ROW_SUM(b), narrow ? dgf + b * G : (const float *)dgd + (b * T + t) * G, (size_t)G);
        }
        for (int64_t b = 0; narrow && !par && b < B; b++) {
            const float *dho = dout ? dout + (b * T + t) * H : NULL, *dhb = dhn + b * ldp;
            char *dgt = (char *)dgd + (size_t)((b * T + t) * G) * es;
            const uint16_t *act = acts16 + (t * B + b) * 5 * H;
            prefetch_bwd_row(&job, b, 0, B);
            if (fused_bf16) { /* the three steps below in one pass */
                lk->cell_backward_bf16((uint16_t *)(void *)dgt, ROW_SUM(b), NULL, dc + b * H, act,
                                       (const uint16_t *)(const void *)cpt + b * H, dout16 + (b * T + t) * H, dhb,
                                       dc + b * H, (size_t)H);
                continue;
            }
            lk->cell_backward16(dgrow, dc + b * H, act, cpf + b * H, dho, dhb, dc + b * H, (size_t)H);
            if (ROW_SUM(b)) lk->acc(ROW_SUM(b), dgrow, (size_t)G);
            amp_convert(dgt, dt, dgrow, AMP_F32, (size_t)G);
        }
        /* [dx_t | dh_{t-1}] = dG_t W^T, with dG_t (rows T*G apart) packed by the rows' tasks above, or here
         * after the serial narrow rows */
        if (narrow && !par && job.xg)
            pack_x_rows_into(&w, &xg, (const char *)dgd + (size_t)(t * G) * es, T * G, 0, B, 0);
        if (n > 0) packed_run(&w, &xg, n, 0.0f, blk, ldp);
    }
    if (NX) { /* dX in X's row order, rows b*T + t, into x's gradient as amp_gemm_into_grad sends it: row by
               * row from dxh through the sink's epilogue, or copied into the new fp32 gradient itself */
        amp_grad_sink sink;
        const bool sunk = amp_grad_sink_open(ctx, x, &sink);
        /* fp32 rows copied in X's order: into the new gradient itself, or (no sink) into scratch */
        float *dx = sunk ? amp_sink_direct(&sink) : amp_f32_scratch(ctx, R * I);
        if (!sunk && !dx) return;
        dx_job dj = {dxh, dx, sunk ? &sink : NULL, T, I, B, ldp};
        amp_parallel_range(B, 1, 1, dx_rows, &dj);
        if (sunk) amp_grad_sink_close(ctx, &sink);
        else amp_grad_accumulate(ctx, x, dx);
        if (ctx->status != AMP_OK) return;
    }
    const xh_src xs = {x->data, node->out->data, T, I, H, es};
    if (V) token_grads(ctx, x, w_ih, gs, V, I, G); /* then dW_hh below, as when x needs no W_ih gradient */
    if (ctx->status != AMP_OK) return;
    if (!V && w_ih->requires_grad && w_hh->requires_grad) {
        /* [dW_ih | dW_hh] [4H, I + H] = dG^T [X | H_prev]: one pass over dG, packed once per block where two
         * GEMMs read and packed all of it twice (measured on the lstm model, one thread: fp32 step about
         * 1% faster, bf16 within noise); an element's sum does not depend on the columns around it
         * (gemm.c), so the bits are those of the two products */
        const int64_t N = I + H;
        float *dwc = amp_f32_scratch(ctx, G * N); /* [dW_ih | dW_hh], each half then sent where its gradient goes */
        if (!dwc || xh_gemm(ctx, dt, &xs, G, R, dgd, dwc)) return;
        lstm_put_grad(ctx, w_ih, dwc, N, G, I);
        lstm_put_grad(ctx, w_hh, dwc + I, N, G, H);
    } else if (!V && w_ih->requires_grad) { /* dW_ih [4H, I] = dG^T X */
        amp_gemm_into_grad(ctx, OP, dt, true, false, G, I, R, dgd, G, x->data, I, w_ih);
    } else if (w_hh->requires_grad) { /* dW_hh [4H, H] = dG^T H_prev */
        const xh_src hs = {NULL, node->out->data, T, 0, H, es};
        float *dw = amp_f32_scratch(ctx, G * H);
        if (!dw || xh_gemm(ctx, dt, &hs, G, R, dgd, dw)) return;
        lstm_put_grad(ctx, w_hh, dw, H, G, H);
    }
    if (ctx->status != AMP_OK) return;
#undef ROW_SUM
    if (db) {
        for (int64_t v = 0; gs && v < V; v++) lk->acc(db, gs + v * G, (size_t)G); /* tokens: db = column sums of gs */
        amp_grad_accumulate(ctx, b_ih, db);
        amp_grad_accumulate(ctx, b_hh, db);
    }
}

/* One step's pointwise pass (amp_lstm_sequence), row b per task: rows share nothing (each reads its
 * gate row and c row and writes its own h, c and saved rows; a row's fp32 temporaries go to its
 * thread's slot of rowbuf), so splitting them between threads leaves every value as it is. */
typedef struct fwd_job {
    const amp_lstm_kernels *lk;
    amp_dtype dt;
    bool fused_bf16, keep;
    int64_t t, nb, T, H, ldx; /* nb: B */
    size_t es;
    float *acts, *cprev; /* fp32: [T, B, 5H] and [T, B, H] (keep) */
    uint16_t *acts16;    /* bf16: [T, B, 5H] (keep) */
    char *cpt;           /* bf16: step t's c_{t-1} [B, H] (keep) */
    float *c, *xt;       /* c_{t-1} -> c_t [B, H]; step t's gate pre-activations, rows ldx apart */
    char *hout;          /* the output [B, T, H] */
    const float *bi, *bh;
    float *rowbuf; /* 6H floats per thread (thread_id's slot): one row's fp32 activations (5H) where they
                      are not saved as they are (not saving, or a narrow dt packing them to act16), and
                      its fp32 h_t (H) before a narrow dt's rounding; NULL where neither is needed */
    const float *table;     /* with tokens: the input projections [V, 4H] (below) */
    const int32_t *tokens;  /* [B, T] */
    bool fold;              /* table rows read where they are (fwd_gates), else copied into xt for step t + 1 */
    const packed_w *whh;    /* with xh: step t + 1's recurrent product, whose X (h_t) each range packs */
    const packed_x *xh;     /* NULL: none (the last step, or the composed path) */
    char *cprev_dt;         /* fwd_lanes: the saved c_{t-1} of every step (cpt is step t's block) */
} fwd_job;

/* Row b's gate pre-activations at step t: the product's row in xt, with tokens and fold plus the
 * token's table row (at t = 0, when there is no product, the table row alone) */
static const float *fwd_gates(const fwd_job *j, int64_t b, const float **gr2) {
    const float *row = j->xt + b * j->ldx;
    *gr2 = NULL;
    if (!j->fold) return row;
    const float *tab = j->table + (int64_t)j->tokens[b * j->T + j->t] * 4 * j->H;
    if (j->t == 0) return tab;
    *gr2 = tab;
    return row;
}

static void fwd_row(void *arg, int64_t b, int thread_id);

/* Rows [b0, b1) of step t (fwd_row), then those rows of h_t packed for step t + 1's product */
static void fwd_rows(void *arg, int64_t b0, int64_t b1, int thread_id) {
    const fwd_job *j = arg;
    for (int64_t b = b0; b < b1; b++) fwd_row(arg, b, thread_id);
    if (j->xh)
        pack_x_rows_into(j->whh, j->xh, j->hout + (size_t)(j->t * j->H) * j->es, j->T * j->H, b0, b1, thread_id);
}

static void fwd_row(void *arg, int64_t b, int thread_id) {
    const fwd_job *j = arg;
    const int64_t t = j->t, H = j->H;
    char *dst = j->hout + (size_t)((b * j->T + t) * H) * j->es;
    const float *gr2, *gr = fwd_gates(j, b, &gr2);
    /* c_t in place (c_{t-1} saved first); tanh of the fp32 c_t, as the cell's. What is saved is read
     * back only by the backward pass, after the rest of the forward: streamed past the caches. */
    float *tcs = j->rowbuf ? j->rowbuf + (size_t)thread_id * (size_t)(6 * H) : NULL;
    if (j->fused_bf16) { /* the act16 packing and the roundings in the same pass */
        j->lk->cell_forward_bf16(j->keep ? j->acts16 + (t * j->nb + b) * 5 * H : NULL,
                                 j->cpt ? (uint16_t *)(void *)j->cpt + b * H : NULL, j->c + b * H,
                                 (uint16_t *)(void *)dst, gr, gr2, j->bi, j->bh, (size_t)H, j->keep);
    } else if (j->dt == AMP_F32) {
        j->lk->cell_forward(j->keep ? j->acts + (t * j->nb + b) * 5 * H : tcs,
                            j->keep ? j->cprev + (t * j->nb + b) * H : NULL, j->c + b * H, (float *)(void *)dst, gr,
                            gr2, j->bi, j->bh, (size_t)H, j->keep);
    } else { /* a narrow dt, composed: the fp32 cell, then act16 and the roundings to dt, row by row */
        const amp_dtype dt = j->dt;
        float *hrow = tcs + 5 * H, *crow = j->c + b * H;
        /* c_{t-1} saved first: c holds values of dt, so exactly */
        if (j->cpt) amp_convert(j->cpt + (size_t)(b * H) * j->es, dt, crow, AMP_F32, (size_t)H);
        j->lk->cell_forward(tcs, NULL, crow, hrow, gr, gr2, j->bi, j->bh, (size_t)H, false);
        if (j->keep) j->lk->act16_pack(j->acts16 + (t * j->nb + b) * 5 * H, tcs, (size_t)(5 * H));
        amp_convert(dst, dt, hrow, AMP_F32, (size_t)H);
        /* the next step reads c_t rounded to dt, as the cell's c' (through hrow's memory, now free) */
        amp_convert(hrow, dt, crow, AMP_F32, (size_t)H);
        amp_convert(crow, AMP_F32, hrow, dt, (size_t)H);
    }
    if (j->table && !j->fold && t + 1 < j->T) /* the row is read: step t + 1's starts there (the task owns it) */
        memcpy(j->xt + b * j->ldx, j->table + (int64_t)j->tokens[b * j->T + t + 1] * 4 * H,
               (size_t)(4 * H) * sizeof(float));
}

/* Every step of the rows [b0, b1) (fwd_lanes): the recurrent product of those rows, their cells, their
 * h_t packed for the next step. A row's steps read nothing of the other rows (its gates are its h
 * row times W_hh, plus its token's table row), so each thread runs its own rows through the whole
 * sequence with no wait between steps, where splitting each step (the product by W's columns, then
 * the cells by rows) met the other thread twice a step. The ranges are whole panels of X's rows
 * (packed_rows), and every value is the one-thread value. */
static void fwd_lanes(void *arg, int64_t b0, int64_t b1, int thread_id) {
    fwd_job j = *(const fwd_job *)arg;
    const packed_x *xh = j.xh;
    for (int64_t t = 0; t < j.T; t++) {
        j.t = t;
        j.cpt = j.cprev_dt ? j.cprev_dt + (size_t)(t * j.nb * j.H) * j.es : NULL;
        j.xh = t + 1 < j.T ? xh : NULL;
        if (t > 0) packed_rows(j.whh, xh, b0, b1, j.whh->n, 0.0f, j.xt, j.ldx); /* fold: the sum alone */
        fwd_rows(&j, b0, b1, thread_id);
    }
}

/* amp_lstm_sequence, or with tokens (amp_lstm_sequence_tokens) x the embedding [V, I] whose rows
 * tokens[b * nt + t] are step t's inputs of batch element b */
static amp_tensor *lstm_sequence(amp_ctx *ctx, amp_tensor *x, const int32_t *tokens, int64_t nb, int64_t nt,
                                 amp_tensor *w_ih, amp_tensor *w_hh, amp_tensor *b_ih, amp_tensor *b_hh) {
    if (!ctx) return NULL;
    amp_tensor *ts[3] = {x, w_ih, w_hh};
    for (int t = 0; t < 3; t++)
        if (!amp_op_input_ok(ctx, OP, ts[t])) return NULL;
    if ((b_ih && !amp_op_input_ok(ctx, OP, b_ih)) || (b_hh && !amp_op_input_ok(ctx, OP, b_hh))) return NULL;
    amp_tensor *cast_in[5] = {x, w_ih, w_hh, b_ih, b_hh};
    if (!amp_autocast_inputs(ctx, OP, cast_in, 5)) return NULL;
    x = cast_in[0], w_ih = cast_in[1], w_hh = cast_in[2], b_ih = cast_in[3], b_hh = cast_in[4];
    if (tokens ? x->ndim != 2 : x->ndim != 3)
        return amp_op_fail(ctx, OP, tokens ? "the embedding must be [V, I]" : "x must be [B, T, I]");
    if (w_hh->ndim != 2) return amp_op_fail(ctx, OP, "w_hh must be [4H, H]");
    const int64_t B = tokens ? nb : x->shape[0], T = tokens ? nt : x->shape[1], I = x->shape[tokens ? 1 : 2];
    const int64_t V = tokens ? x->shape[0] : 0, H = w_hh->shape[1], G = 4 * H;
    if (B < 1 || T < 1 || B > (INT64_C(1) << 40) / T || !check_shape(ctx, w_ih, "w_ih", 2, G, I) ||
        !check_shape(ctx, w_hh, "w_hh", 2, G, H) || (b_ih && !check_shape(ctx, b_ih, "b_ih", 1, G, -1)) ||
        (b_hh && !check_shape(ctx, b_hh, "b_hh", 1, G, -1)))
        return ctx->status ? NULL
                           : amp_op_fail(ctx, OP, "bad sequence shape: %lld x %lld steps", (long long)B, (long long)T);
    const int64_t R = B * T;
    for (int64_t r = 0; tokens && r < R; r++)
        if (tokens[r] < 0 || tokens[r] >= V)
            return amp_op_fail(ctx, OP, "token %d (position %lld) is out of range [0, %lld)", (int)tokens[r],
                               (long long)r, (long long)V);
    amp_dtype dt = amp_promote(amp_promote(x->dtype, w_ih->dtype), w_hh->dtype);
    if (b_ih) dt = amp_promote(dt, b_ih->dtype);
    if (b_hh) dt = amp_promote(dt, b_hh->dtype);
    if (!(x = amp_contiguous(ctx, amp_op_as(ctx, x, dt))) || !(w_ih = amp_contiguous(ctx, amp_op_as(ctx, w_ih, dt))) ||
        !(w_hh = amp_contiguous(ctx, amp_op_as(ctx, w_hh, dt))))
        return NULL;
    if ((b_ih && !(b_ih = amp_op_as(ctx, b_ih, dt))) || (b_hh && !(b_hh = amp_op_as(ctx, b_hh, dt)))) return NULL;

    amp_tensor *out = amp_ctx_new_tensor(ctx, dt, 3, (const int64_t[]){B, T, H}, true);
    amp_tensor *in[5] = {x, w_ih, w_hh};
    int n_in = 3;
    const int64_t i_bih = b_ih ? n_in : -1;
    if (b_ih) in[n_in++] = b_ih;
    const int64_t i_bhh = b_hh ? n_in : -1;
    if (b_hh) in[n_in++] = b_hh;
    const bool keep = amp_autograd_will_record(ctx, in, n_in);
    const bool narrow = dt != AMP_F32;
    const size_t es = amp_dtype_size(dt);
    /* saved data goes straight into the arena when backward will need it: 6H values a row, fp32, or
     * for a narrow dt 5H act16 and H of dt (es = 2) */
    const size_t state_bytes = (size_t)(T * B * 6 * H) * (narrow ? 2 : sizeof(float)); /* then the tokens */
    void *saved = out && keep ? amp_ctx_alloc(ctx, state_bytes + (tokens ? (size_t)R * sizeof *tokens : 0)) : NULL;
    if (!out || (keep && !saved)) return NULL;
    if (saved && tokens) memcpy((char *)saved + state_bytes, tokens, (size_t)R * sizeof *tokens);
    float *acts = saved && !narrow ? saved : NULL, *cprev = acts ? acts + T * B * 5 * H : NULL;
    uint16_t *acts16 = saved && narrow ? saved : NULL;
    char *cprev_dt = acts16 ? (char *)(acts16 + T * B * 5 * H) : NULL;
    amp_arena_mark mk = amp_scratch_mark(ctx);
    /* Gate pre-activations, row t*B + b, LSTM_XP_PAD floats past 4H apart: each step's B rows are one
     * block that both products store into, and the pad keeps those rows from falling into the same L1
     * set (4H floats is a multiple of 4 KiB here), which the transposed tile stores of ukernel_ct hit. */
    const int64_t ldx = G + LSTM_XP_PAD;
    float *xp = amp_f32_scratch(ctx, (tokens ? B : R) * ldx); /* tokens: step t's block only, rewritten per step */
    float *c = amp_f32_scratch(ctx, B * H);             /* c_{t-1}, values of dt */
    const amp_lstm_kernels *lk = amp_lstm_active();
    const bool fused_bf16 = dt == AMP_BF16 && lk->cell_forward_bf16;
    /* fwd_job.rowbuf: a slot per thread that may run rows */
    const bool need_rows = !fused_bf16 && (narrow || !keep);
    float *rowbuf = need_rows ? amp_f32_scratch(ctx, (int64_t)amp_parallel_max_threads() * 6 * H) : NULL;
    const float *bi = b_ih ? amp_f32_view(ctx, b_ih) : NULL, *bh = b_hh ? amp_f32_view(ctx, b_hh) : NULL;
    if (!xp || !c || (need_rows && !rowbuf) || (b_ih && !bi) || (b_hh && !bh)) {
        amp_scratch_release(ctx, mk);
        return NULL;
    }
    memset(c, 0, (size_t)(B * H) * sizeof *c);
    packed_w wih, whh; /* W_ih [4H, I], for gates_t = x_t W_ih^T; W_hh [4H, H], for gates_t += h_{t-1} W_hh^T */
    if (!pack_w(ctx, &wih, dt, w_ih->data, I, false, G, I, tokens ? V : B) ||
        (T > 1 && !pack_w(ctx, &whh, dt, w_hh->data, H, false, G, H, B))) {
        amp_scratch_release(ctx, mk);
        return NULL;
    }
    /* With tokens, the input projection of every embedding row once, table [V, 4H] = E W_ih^T: a row
     * of it is what x_t W_ih^T computes for a token (an element's sum does not depend on its row), at
     * V rows of work instead of B*T (the lstm model: 256 rows, not 2048). Each step's cells add their
     * tokens' rows (fold, below), or the rows are copied into the step's gate block. Without, the input projection runs S steps at a time: S*B rows, a
     * whole number of the kernel's row tiles where S <= LSTM_XCHUNK_MAX allows it (B = 32 against
     * 12-row tiles: S = 3, 96 rows, every tile full where one step alone fills 32/36), gathered into
     * xg in the steps' row order (t*B + b). */
    float *table = tokens ? amp_f32_scratch(ctx, V * G) : NULL;
    if (tokens && (!table || !packed_gemm(ctx, &wih, V, x->data, I, 0.0f, table, G))) {
        amp_scratch_release(ctx, mk);
        return NULL;
    }
    const int64_t rx = wih.flip ? wih.kern->nr : wih.kern->mr;
    int64_t S = 1;
    while (!tokens && S < LSTM_XCHUNK_MAX && S < T && (S * B) % rx != 0) S++;
    char *xg = S > 1 ? amp_scratch_alloc(ctx, (size_t)(S * B * I) * es) : NULL;
    if (S > 1 && !xg) {
        amp_scratch_release(ctx, mk);
        return NULL;
    }
    char *hout = out->data;
    /* With tokens, a step's looked-up rows stay where they are in the table when W_hh's product is
     * one k block (H <= kc): the product then stores its sum alone (beta 0) and the cell adds the row
     * (fwd_gates), where copying the rows into the gate block for the product to add (beta 1) moved
     * 4 KiB a row through memory (1.6% of the lstm model's amp-bf16 step). The same bits: beta 1
     * stores fma(1, sum, row), one rounding of sum + row, and the cell's first addition is row + sum
     * (gemm.c's k blocks: with two or more, beta 1 adds the row to the first block's sum, and the
     * rows are copied as before). */
    const bool fold = tokens && (T == 1 || H <= whh.kern->kc);
    /* h_t packed for step t + 1's product by the rows' own tasks (fwd_rows) */
    packed_x xh = {.m = B}; /* allocated where there is a step t + 1 */
    bool xh_ready = false;
    if (T > 1 && !packed_x_alloc(ctx, &whh, B, true, &xh)) {
        amp_scratch_release(ctx, mk);
        return NULL;
    }
    /* fwd_lanes: the rows split between the threads for the whole sequence, with tokens folded (no
     * per-step input product), a row kernel, and W_hh as the B operand, so that a range of X's rows is
     * whole panels (amp-bf16 on AVX-512: an 8-row kernel) */
    const int lane_rows = T > 1 && !whh.flip ? whh.kern->mr : 0;
    const bool lanes = fold && T > 1 && lane_rows > 0 && amp_parallel_max_threads() > 1 && B >= 2 * lane_rows;
    if (lanes) {
        const fwd_job job = {.lk = lk, .dt = dt, .fused_bf16 = fused_bf16, .keep = keep, .nb = B, .T = T, .H = H,
                             .ldx = ldx, .es = es, .acts = acts, .cprev = cprev, .acts16 = acts16, .c = c, .xt = xp,
                             .hout = hout, .bi = bi, .bh = bh, .rowbuf = rowbuf, .table = table, .tokens = tokens,
                             .fold = true,
                             .whh = &whh, .xh = &xh, .cprev_dt = keep && narrow ? cprev_dt : NULL};
        amp_parallel_range(B, lane_rows, lane_rows, fwd_lanes, (void *)&job);
    }
    for (int64_t t = 0; !lanes && t < T; t++) {
        /* gates_t = x_t W_ih^T (amp_gemm's bits for the whole [B*T, I] product: k = I is the same, and an
         * element's sum does not depend on its row), then += h_{t-1} W_hh^T; x_t and h_{t-1} read in
         * place, rows T*I and T*H apart */
        float *xt = tokens ? xp : xp + t * B * ldx;
        bool ok = true;
        const bool rows_copy = tokens && !fold; /* fwd_row copies step t + 1's rows */
        if (tokens) {
            for (int64_t b = 0; !fold && (t == 0 || !rows_copy) && b < B; b++)
                memcpy(xt + b * ldx, table + (int64_t)tokens[b * T + t] * G, (size_t)G * sizeof *xt);
        } else if (S == 1) {
            ok = packed_gemm(ctx, &wih, B, (const char *)x->data + (size_t)(t * I) * es, T * I, 0.0f, xt, ldx);
        } else if (t % S == 0) {
            const int64_t s_n = min64(S, T - t);
            for (int64_t s = 0; s < s_n; s++)
                for (int64_t b = 0; b < B; b++)
                    memcpy(xg + (size_t)((s * B + b) * I) * es, (const char *)x->data + (size_t)((b * T + t + s) * I) * es,
                           (size_t)I * es);
            ok = packed_gemm(ctx, &wih, s_n * B, xg, I, 0.0f, xt, ldx);
        }
        const float beta = fold ? 0.0f : 1.0f; /* the recurrent product onto the input projection, or alone */
        if (ok && t > 0 && xh_ready) packed_run(&whh, &xh, whh.n, beta, xt, ldx); /* h_{t-1} packed by step t - 1's rows */
        else if (!ok || (t > 0 && !packed_gemm(ctx, &whh, B, hout + (size_t)((t - 1) * H) * es, T * H, beta, xt, ldx))) {
            amp_scratch_release(ctx, mk);
            return NULL;
        }
        /* c_{t-1} saved for a narrow dt (each row's, by its task) */
        char *cpt = keep && narrow ? cprev_dt + (size_t)(t * B * H) * es : NULL;
        fwd_job job = {.lk = lk, .dt = dt, .fused_bf16 = fused_bf16, .keep = keep, .t = t, .nb = B, .T = T, .H = H,
                       .ldx = ldx, .es = es, .acts = acts, .cprev = cprev, .acts16 = acts16, .cpt = cpt, .c = c,
                       .xt = xt, .hout = hout, .bi = bi, .bh = bh, .rowbuf = rowbuf,
                       .table = fold || rows_copy ? table : NULL, .tokens = tokens, .fold = fold, .whh = &whh,
                       .xh = t + 1 < T ? &xh : NULL};
        /* one kernel call per row, the rows split between the threads */
        if (B > 1 && amp_parallel_max_threads() > 1) amp_parallel_range(B, 1, 1, fwd_rows, &job);
        else fwd_rows(&job, 0, B, 0);
        xh_ready = job.xh != NULL;
    }
    amp_scratch_release(ctx, mk);
    amp_node *node = amp_autograd_record(ctx, OP, dt, out, in, n_in, lstm_seq_backward);
    if (node && saved) {
        node->saved = saved;
        node->i[0] = B, node->i[1] = T, node->i[2] = I, node->i[3] = H, node->i[4] = i_bih, node->i[5] = i_bhh;
        node->i[6] = V;
    }
    return ctx->status == AMP_OK ? out : NULL;
}

amp_tensor *amp_lstm_sequence(amp_ctx *ctx, amp_tensor *x, amp_tensor *w_ih, amp_tensor *w_hh, amp_tensor *b_ih,
                              amp_tensor *b_hh) {
    return lstm_sequence(ctx, x, NULL, 0, 0, w_ih, w_hh, b_ih, b_hh);
}

amp_tensor *amp_lstm_sequence_tokens(amp_ctx *ctx, amp_tensor *embedding, const int32_t *tokens, int64_t batch,
                                     int64_t steps, amp_tensor *w_ih, amp_tensor *w_hh, amp_tensor *b_ih,
                                     amp_tensor *b_hh) {
    if (ctx && !tokens) {
        amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "%s: tokens are NULL", amp_op_name(OP));
        return NULL;
    }
    return lstm_sequence(ctx, embedding, tokens, batch, steps, w_ih, w_hh, b_ih, b_hh);
}
