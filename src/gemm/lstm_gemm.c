/* The LSTM sequence's GEMM drivers (lstm_gemm.h): a weight packed once per pass and products of a few
 * rows against it, and dG^T [X | H_prev] with its right operand packed in place. */
#include <string.h>

#include "amp/cpu.h"
#include "lstm_gemm.h"
#include "gemm_implicit.h"
#include "../kernels/gemm_kernels.h"
#include "../core/parallel.h"

/* The weight side is packed as the A operand (C^T computed) only for k >= LSTM_FLIP_MIN_K: ukernel_ct
 * ends each tile with two 16 x 16 register transposes and 32 row stores, a fixed cost that a short k
 * loop does not amortize. The lstm model's forward x_t W_ih^T (k = I = 64) is faster direct; W_hh's
 * products (k = 256 forward, 1024 backward) are faster transposed. */
#define LSTM_FLIP_MIN_K 128

/* Operands packed from two sources (pack_w_cat, pack_xh) go through a buffer of XH_CHUNK rows of up
 * to AMP_GEMM_MAX_TILE values where a panel takes from both: XH_CHUNK even, so a bf16 pair is never
 * split. */
enum { XH_CHUNK = 16 };

/* Below this many flops (2mnk) per thread, one thread: gemm.c's threshold. */
#define PACKED_MIN_FLOPS_PER_THREAD (1 << 21)

/* A leading dimension for amp_gemm: at least 1 even for an empty row. */
static int64_t ld(int64_t n) { return n > 0 ? n : 1; }
static int64_t round_up64(int64_t x, int64_t unit) { return (x + unit - 1) / unit * unit; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* bytes of one k block of `rows` rows packed in panels of r */
static size_t packed_bytes(const amp_gemm_kernel *kern, int64_t rows, int r, int64_t kc_pad) {
    return (size_t)(round_up64(rows, r) * kc_pad) * (size_t)kern->packed_size;
}

/* The kernel and orientation for W [n, k] against m-row operands: W packed as the A operand (*flip,
 * C^T computed) where that fills the tiles better, except that an 8-row kernel (amp_gemm_kernel_rows8)
 * that fills them at least as well takes W as the B operand and stores C directly: the lstm model's
 * 32 rows against W_hh fill its tiles exactly, and the direct product skips C^T's register
 * transposes. */
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

/* W packed as the A operand or the B operand (w_kernel); the panels' bytes (every k block) */
size_t amp_lstm_gemm_w_init(amp_lstm_packed_w *pw, amp_dtype dt, int64_t n, int64_t k, int64_t m) {
    bool flip;
    const amp_gemm_kernel *kern = w_kernel(dt, n, k, m, &flip);
    *pw = (amp_lstm_packed_w){.kern = kern,
                              .flip = flip,
                              .n = n,
                              .k = k,
                              .kc_pad = round_up64(min64(kern->kc, k), kern->k_unit),
                              .es = amp_dtype_size(dt)};
    const int r = pw->flip ? kern->mr : kern->nr;
    const int64_t blocks = (k + kern->kc - 1) / kern->kc;
    return packed_bytes(kern, n, r, pw->kc_pad) * (size_t)(blocks > 0 ? blocks : 1);
}

void amp_lstm_gemm_pack_w(amp_lstm_packed_w *pw, void *panels, const void *src, int64_t ld, bool trans) {
    const amp_gemm_kernel *kern = pw->kern;
    const int64_t n = pw->n, k = pw->k;
    const int r = pw->flip ? kern->mr : kern->nr;
    const int64_t blocks = (k + kern->kc - 1) / kern->kc;
    const size_t bytes = packed_bytes(kern, n, r, pw->kc_pad);
    pw->panels = panels;
    for (int64_t q = 0; q < blocks; q++) {
        const int64_t pc = q * kern->kc, kc = min64(kern->kc, k - pc);
        kern->pack(pw->panels + (size_t)q * bytes, (const char *)src + (size_t)(trans ? pc * ld : pc) * pw->es, ld,
                   trans, n, kc, r);
    }
}

/* Each panel packed from a or b in place, a panel across the border from rows gathered XH_CHUNK at a
 * time. */
void amp_lstm_gemm_pack_w_cat(amp_lstm_packed_w *pw, void *panels, const void *a, int64_t lda, int64_t na,
                              const void *b, int64_t ldb) {
    const amp_gemm_kernel *kern = pw->kern;
    const int64_t n = pw->n, k = pw->k;
    const size_t es = pw->es, ps = (size_t)kern->packed_size;
    const int r = pw->flip ? kern->mr : kern->nr;
    const int64_t blocks = (k + kern->kc - 1) / kern->kc;
    const size_t bytes = packed_bytes(kern, n, r, pw->kc_pad);
    pw->panels = panels;
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
            kern->pack(block + (size_t)(b0 * kcp) * ps, cb + (size_t)(pc * ldb + b0 - na) * es, ldb, true, n - b0, kc,
                       r);
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
}

typedef struct packed_job {
    const amp_lstm_packed_w *pw;
    const char *xpack; /* X packed for every k block: block q at xpack + q * x_bytes */
    size_t x_bytes, w_bytes;
    int64_t m, n;          /* C [m, n]: X's rows against W's first n rows */
    int64_t i0;            /* the first of X's rows computed (amp_lstm_gemm_rows; else 0) */
    int64_t tiles_w, tasks; /* tiles_w: those rows' panels, split between the tasks */
    float *c;
    int64_t ldc;
    float beta;
} packed_job;

/* Task t: W's panels [t * tiles_w / tasks, (t + 1) * tiles_w / tasks) against every panel of X. */
static void packed_task(void *arg, int64_t task, int thread_id) {
    (void)thread_id;
    const packed_job *j = arg;
    const amp_lstm_packed_w *pw = j->pw;
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

/* bytes of one k block of X [m, k] packed for a product with pw */
static size_t x_block_bytes(const amp_lstm_packed_w *pw, int64_t m) {
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
 * all of it would hold the others idle. */
static void pack_x_rows(const amp_lstm_packed_w *pw, char *xpack, int64_t m, const void *x, int64_t ldx, int64_t b0,
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

size_t amp_lstm_gemm_x_bytes(const amp_lstm_packed_w *pw, int64_t m) {
    const int64_t blocks = (pw->k + pw->kern->kc - 1) / pw->kern->kc;
    return x_block_bytes(pw, m) * (size_t)(blocks > 0 ? blocks : 1);
}

size_t amp_lstm_gemm_x_tmp_bytes(const amp_lstm_packed_w *pw) {
    return (size_t)(pw->kc_pad * AMP_GEMM_MAX_TILE * pw->kern->packed_size);
}

/* pack_x_rows into xp, with the calling thread's buffer */
void amp_lstm_gemm_pack_x(const amp_lstm_packed_w *pw, const amp_lstm_packed_x *xp, const void *x, int64_t ldx,
                          int64_t b0, int64_t b1, int thread_id) {
    pack_x_rows(pw, xp->data, xp->m, x, ldx, b0, b1, xp->tmp ? xp->tmp + (size_t)thread_id * xp->tmp_bytes : NULL);
}

/* W's panels split between tasks (packed_task), one thread below PACKED_MIN_FLOPS_PER_THREAD */
void amp_lstm_gemm_run(const amp_lstm_packed_w *pw, const amp_lstm_packed_x *xp, int64_t n, float beta, float *c,
                       int64_t ldc) {
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

/* One task over X's rows [i0, i1) (packed_task's i0 and m) */
void amp_lstm_gemm_rows(const amp_lstm_packed_w *pw, const amp_lstm_packed_x *xp, int64_t i0, int64_t i1, int64_t n,
                        float beta, float *c, int64_t ldc) {
    const amp_gemm_kernel *kern = pw->kern;
    const int rw = pw->flip ? kern->mr : kern->nr;
    if (i1 <= i0 || n == 0) return;
    const packed_job job = {.pw = pw, .xpack = xp->data, .x_bytes = x_block_bytes(pw, xp->m),
                            .w_bytes = packed_bytes(kern, pw->n, rw, pw->kc_pad), .m = i1, .n = n, .i0 = i0,
                            .tiles_w = (n + rw - 1) / rw, .tasks = 1, .c = c, .ldc = ldc, .beta = beta};
    packed_task((void *)&job, 0, 0);
}

/* ---- dG^T [X | H_prev] with [X | H_prev] packed in place ----
 *
 * amp_gemm_implicit_b packs its blocks from x and h as they are requested, where writing the whole
 * matrix and packing it back from memory would cost a pass over it each way. A panel's rows within X
 * or within H_prev (a run of rows between two t = 0 rows, whose H_prev row is zero) are packed by
 * kern->pack from x or h in place; the rest (a t = 0 row and the row after it, or a panel across the
 * X | H_prev border) are gathered into a small buffer first, then packed. Runs start at even rows of
 * the block (a bf16 pair is never split), so the packed values are those kern->pack gives the stored
 * matrix and the bits are amp_gemm's. */

/* rows [pp, pp + len) of the panel's columns [jp, jp + rows) of [X | H_prev] into tmp [len][r] */
static void gather_xh(const amp_lstm_xh *s, unsigned char *tmp, int r, int64_t jp, int64_t rows, int64_t pp,
                      int64_t len) {
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
    const amp_lstm_xh *s = arg;
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

int amp_lstm_gemm_xh(amp_dtype dt, const amp_lstm_xh *s, int64_t G, int64_t R, const void *dg, float *c) {
    const int64_t N = s->NX + s->H;
    return amp_gemm_implicit_b(dt, true, G, N, R, 1.0f, dg, ld(G), pack_xh, s, 0.0f, c, ld(N), NULL);
}

