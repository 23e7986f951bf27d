/* The backward pass of the LSTM sequence op (lstm_sequence.c describes the op, its values and what it
 * saves): the rows' pointwise passes, per-step products against [W_ih | W_hh] packed once, and the
 * weight gradients. Separate from the forward because each pass is a file's worth on its own. */
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "amp/formats.h"
#include "../kernels/lstm_kernels.h"
#include "grad_sink_gemm.h"
#include "lstm_internal.h"

#define OP AMP_OP_LSTM_CELL

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Adds the fp32 block c [m, n] (rows ldc apart; t's elements in row-major order) into t's gradient
 * with amp_grad_accumulate's bits: through its sink in one pass where it has one, else copied into
 * contiguous scratch for amp_grad_accumulate. */
static void lstm_put_grad(amp_ctx *ctx, amp_tensor *t, float *c, int64_t ldc, int64_t m, int64_t n) {
    amp_grad_sink sink;
    if (amp_grad_sink_open(ctx, t, &sink)) {
        const amp_gemm_epilogue ep = amp_sink_epilogue(&sink, 0, n);
        amp_gemm_epilogue_apply(&ep, c, lstm_ld(ldc), m, n);
        amp_grad_sink_close(ctx, &sink);
        return;
    }
    float *g = amp_f32_scratch(ctx, m * n);
    if (!g) return;
    for (int64_t r = 0; r < m; r++) memcpy(g + r * n, c + r * ldc, (size_t)n * sizeof *g);
    amp_grad_accumulate(ctx, t, g);
}

/* Prefetches the cache lines of [p, p + bytes) (PREFETCHT1: read, kept in the caches) */
static void prefetch_bytes(const void *p, size_t bytes) {
    const uintptr_t end = (uintptr_t)p + bytes;
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)63; a < end; a += 64) __builtin_prefetch((const void *)a, 0, 2);
}

/* One step's pointwise backward (bwd_step, bwd_lane), row b per task: each row reads its own saved
 * values and gradients and writes its own dG and dc rows, so the rows can be split between threads.
 * The bias gradient, a sum across rows, is added afterwards in row order from fp32 rows of dG: the
 * same additions in the same order as one row at a time. For a narrow dt a task forms its row in
 * fp32 in dgf and rounds it into dG: with the fused kernel (cell_backward_bf16, bf16 with a bf16 dout)
 * in one pass that also keeps the fp32 row, else by its composition (cell_backward16 from c_{t-1} in
 * fp32, then amp_convert), the same bits (lstm_kernels.h). */
typedef struct bwd_job {
    const amp_lstm_kernels *lk;
    amp_dtype dt;
    const float *acts, *cprev;      /* fp32: [T, B, 5H] and [T, B, H] */
    const uint16_t *acts16;         /* narrow: [T, B, 5H] act16 */
    const char *cpt;                /* narrow: step t's c_{t-1} [B, H] in dt */
    float *cpf;                     /* narrow: the same in fp32, each row converted by its task */
    float *dgf;                     /* narrow: step t's dG rows in fp32 [B, 4H] */
    const float *dout, *dhn;        /* dhn: dh_t rows ldp apart (zeros after the last step) */
    const uint16_t *dout16;         /* the fused bf16 rows: dout in bf16, in place (dout NULL) */
    void *dgd;                      /* dG [B*T, 4H] in dt, rows b*T + t */
    float *dc;                      /* dc_t -> dc_{t-1} [B, H] */
    int64_t t, nb, T, H, ldp;       /* nb: B */
    const amp_lstm_packed_w *w;     /* with xg: step t's product, whose X (dG_t) each range packs */
    const amp_lstm_packed_x *xg;    /* NULL: none */
    const float *gs;                /* the serial path's token sums [V, 4H], which the cell adds to
                                       (prefetched as dG's rows); NULL: none */
    const int32_t *tok;             /* with gs: the tokens [B, T] */
} bwd_job;

/* The next row's reads that come from memory, not from a cache, fetched (PREFETCHT1) while row b
 * computes: row b + 1 of step t, or after the last row of the range [b0, b1) this thread runs, row b0
 * of step t - 1 (the backward's order; the ranges are the same every step). The saved activations
 * and c_{t-1} were streamed past the caches by the forward, and dout's rows of one step are T*H floats
 * apart (one per batch element), a pattern the hardware prefetchers do not follow: without this the
 * cell's first loads wait on memory. The row of dG the cell will write is fetched too, and the serial
 * path's token-sum row (gs): dG [B*T, 4H] is written a row per batch element a step, T*4H apart, and
 * its stores would wait on their lines' reads. Into L2 only: fetching into L1 (PREFETCHW, or
 * PREFETCHT0) evicts what the row's kernel is using. */
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
        amp_lstm_gemm_pack_x(j->w, j->xg, (const char *)j->dgd + (size_t)(j->t * 4 * j->H) * amp_dtype_size(j->dt),
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
    const amp_lstm_packed_x *xg = j.xg;
    for (int64_t k = 0; k < T; k++) {
        const int64_t t = T - 1 - k, n = t > 0 ? L->NW : L->NX;
        if (L->ring && k >= LANE_SLOTS) lanes_wait(L->summed, L->lanes, k - LANE_SLOTS + 1); /* the slot is free */
        j.t = t;
        j.dgf = L->ring ? L->ring + (k % LANE_SLOTS) * B * G : NULL;
        j.dhn = L->dxh + (t + 1) * B * j.ldp + L->NX;
        j.cpt = L->cprev_dt ? L->cprev_dt + (size_t)(t * B * H) * es : NULL;
        j.xg = n > 0 ? xg : NULL;
        bwd_rows(&j, b0, b1, thread_id);
        if (n > 0) amp_lstm_gemm_rows(j.w, xg, b0, b1, n, 0.0f, L->dxh + t * B * j.ldp, j.ldp);
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
            amp_gemm_epilogue_apply(&ep, row, lstm_ld(I), 1, I);
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
 * terms (tests/test_lstm_sequence.c measures both). The bf16 products, with their packing, also cost
 * about half of what fp32 products would. */
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
        if (!e || !dw || lstm_op_gemm(ctx, pt, true, false, G, I, V, gp, G, e, I, 0.0f, dw)) return;
        lstm_put_grad(ctx, w_ih, dw, I, G, I);
    }
    if (emb->requires_grad && ctx->status == AMP_OK) { /* dE [V, I] = gs W_ih */
        const void *w = bf16 ? w_ih->data : amp_f32_view(ctx, w_ih);
        float *de = amp_f32_scratch(ctx, V * I);
        if (!w || !de || lstm_op_gemm(ctx, pt, false, false, V, I, G, gp, G, w, I, 0.0f, de)) return;
        lstm_put_grad(ctx, emb, de, I, V, I);
    }
}

/* ---- the backward pass, in steps ---- */

/* The pass's state: the node's shapes and saved values, and the scratch the steps share */
typedef struct seq_bwd {
    amp_tensor *x, *w_ih, *w_hh, *b_ih, *b_hh;
    int64_t B, T, I, H, G, R, V; /* V > 0: x is the embedding, the inputs its rows tokens[b * T + t] */
    amp_dtype dt;
    size_t es;
    bool narrow, par, fused_bf16;
    const amp_lstm_kernels *lk;
    const float *acts, *cprev;   /* fp32: the saved activations and c_{t-1} */
    const uint16_t *acts16;      /* narrow: the saved act16 */
    const char *cprev_dt;        /* narrow: the saved c_{t-1} in dt */
    const int32_t *tok;          /* with tokens: [B, T] */
    const uint16_t *dout16;      /* the fused bf16 rows: h's gradient in bf16, in place (dout NULL) */
    const float *dout;           /* h's gradient [B, T, H] */
    void *dgd;                   /* dG in dt, rows b*T + t */
    float *dgrow, *db, *gs, *dbt, *dc, *dgf, *cpf;
    int64_t NX, NW, ldp;         /* the step's product [dx_t | dh_{t-1}]: NX + H = NW columns, rows ldp apart */
    float *dxh;                  /* block t: step t's [dx_t | dh_{t-1}]; block T: the zero dh of the last step */
    amp_lstm_packed_w w;         /* [W_ih | W_hh]^T or W_hh^T, read only by products with n > 0 */
    amp_lstm_packed_x xg;        /* dG_t packed for the step's product */
} seq_bwd;

/* Where row b of step t's dG is summed: its token's row of gs, or the bias gradient; NULL: neither */
static inline float *row_sum(const seq_bwd *s, int64_t b, int64_t t) {
    return s->gs ? s->gs + (int64_t)s->tok[b * s->T + t] * s->G : s->dbt;
}

/* The node's shapes and saved values, and the scratch for dG, its sums and dc; false when out of memory */
static bool bwd_setup(amp_ctx *ctx, amp_node *node, seq_bwd *s) {
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
     * place in bf16, where widening it to fp32 first would be a pass over [B, T, H]; with one thread the
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
    float *db = want_db ? amp_f32_scratch(ctx, G) : NULL; /* the bias gradient, summed row by row */
    /* with tokens, the fp32 rows of dG summed by token (token_grads) instead of into db, which is then
     * their column sum: one pass over the rows for both */
    const bool want_gs = V && (want_db || x->requires_grad || w_ih->requires_grad);
    float *gs = want_gs ? amp_f32_scratch(ctx, V * G) : NULL;
    float *const dbt = gs ? NULL : db; /* the rows' target without tokens */
    float *dc = amp_f32_scratch(ctx, B * H);
    float *dgf = narrow && par ? amp_f32_scratch(ctx, B * G) : NULL;
    const bool need_cpf = narrow && !fused_kernel;
    float *cpf = need_cpf ? amp_f32_scratch(ctx, B * H) : NULL; /* step t's c_{t-1} in fp32 */
    if ((!dout && !dout16) || !dgd || (narrow && !dgrow) || (want_db && !db) || (want_gs && !gs) || !dc ||
        (need_cpf && !cpf) || (narrow && par && !dgf))
        return false;
    if (gs) memset(gs, 0, (size_t)(V * G) * sizeof *gs);
    memset(dc, 0, (size_t)(B * H) * sizeof *dc);
    if (db) memset(db, 0, (size_t)G * sizeof *db);
    *s = (seq_bwd){.x = x, .w_ih = w_ih, .w_hh = w_hh, .b_ih = b_ih, .b_hh = b_hh,
                   .B = B, .T = T, .I = I, .H = H, .G = G, .R = R, .V = V, .dt = dt, .es = es,
                   .narrow = narrow, .par = par, .fused_bf16 = fused_bf16, .lk = lk,
                   .acts = acts, .cprev = cprev, .acts16 = acts16, .cprev_dt = cprev_dt, .tok = tok,
                   .dout16 = dout16, .dout = dout, .dgd = dgd, .dgrow = dgrow, .db = db, .gs = gs, .dbt = dbt,
                   .dc = dc, .dgf = dgf, .cpf = cpf};
    return true;
}

/* Per step, [dx_t | dh_{t-1}] [B, I + H] = dG_t [W_ih | W_hh]: one product against W = [W_ih | W_hh]^T
 * [I + H, 4H], packed once per pass, from one packing of dG_t, where a GEMM for all of dX after the
 * loop would pack dG a second time, read back from memory, and W_ih's 64 rows alone would fill 64/72
 * of the kernel's 12-row tiles (320/324 together). Each element is still amp_gemm's sum over the
 * same k blocks, so the bits are those of the separate products. Without dX (x needs no gradient)
 * W is W_hh^T alone. Block t of dxh (rows t*B + b, padded as the forward's gate rows: the
 * transposed tile stores would hit one L1 set otherwise) holds step t's [dx_t | dh_{t-1}]; block T
 * the zero dh that enters the last step. False when out of memory. */
static bool bwd_products_setup(amp_ctx *ctx, seq_bwd *s) {
    const int64_t B = s->B, T = s->T, I = s->I, H = s->H, G = s->G, R = s->R;
    s->NX = !s->V && s->x->requires_grad ? I : 0, s->NW = s->NX + H, s->ldp = s->NW + LSTM_XP_PAD;
    const int64_t NX = s->NX, ldp = s->ldp;
    float *dxh = s->dxh = amp_f32_scratch(ctx, (R + B) * ldp);
    if (!dxh) return false;
    for (int64_t b = 0; b < B; b++) memset(dxh + (R + b) * ldp + NX, 0, (size_t)H * sizeof *dxh);
    if (NX) {
        void *panels = amp_scratch_alloc(ctx, amp_lstm_gemm_w_init(&s->w, s->dt, I + H, G, B));
        if (!panels) return false;
        amp_lstm_gemm_pack_w_cat(&s->w, panels, s->w_ih->data, I, I, s->w_hh->data, H);
    } else if (T > 1 && !lstm_pack_w(ctx, &s->w, s->dt, s->w_hh->data, H, true, H, G, B)) {
        return false;
    }
    /* dG_t packed for the step's product by the rows' own tasks (bwd_rows) */
    s->xg = (amp_lstm_packed_x){.m = B}; /* allocated where a step has a product */
    return !(NX || T > 1) || lstm_packed_x_alloc(ctx, &s->w, B, true, &s->xg);
}

/* The steps on lanes (bwd_lane): the rows split between the threads for the whole sequence, where W is
 * the B operand (a range of X's rows is whole panels) and every thread can run at once. *laned: whether
 * they ran; false when out of memory. */
static bool bwd_run_lanes(amp_ctx *ctx, seq_bwd *s, bool *laned) {
    const int64_t B = s->B, T = s->T, G = s->G;
    const int64_t lane_r = T > 1 && !s->w.flip ? s->w.kern->mr : 0;
    const int64_t nl = lane_r > 0 && s->par ? min64(amp_parallel_max_threads(), B / lane_r) : 0;
    *laned = false;
    if (nl <= 1) return true;
    float *ring = s->narrow ? amp_f32_scratch(ctx, LANE_SLOTS * B * G) : NULL;
    bwd_lanes *lj = amp_scratch_alloc(ctx, sizeof *lj);
    if (!lj || (s->narrow && !ring)) return false;
    *lj = (bwd_lanes){.job = {s->lk, s->dt, s->acts, s->cprev, s->acts16, NULL, s->cpf, NULL, s->dout, NULL,
                              s->dout16, s->dgd, s->dc, T - 1, B, T, s->H, s->ldp, &s->w, &s->xg, NULL, NULL},
                      .cprev_dt = s->cprev_dt, .ring = ring, .dxh = s->dxh, .gs = s->gs, .dbt = s->dbt,
                      .tok = s->tok, .NX = s->NX, .NW = s->NW, .lanes = nl, .rows = lane_r};
    for (int64_t i = 0; i < nl; i++) atomic_init(&lj->produced[i], 0), atomic_init(&lj->summed[i], 0);
    *laned = amp_parallel_gang(nl, bwd_lane, lj);
    return true;
}

/* Step t's rows on one thread for a narrow dt: the cell's backward of each row into dgrow, its sum,
 * and its rounding into dG (with the fused bf16 kernel, the three in one pass) */
static void bwd_serial_narrow_rows(const seq_bwd *s, const bwd_job *job, int64_t t) {
    const int64_t B = s->B, T = s->T, H = s->H, G = s->G;
    const amp_lstm_kernels *lk = s->lk;
    float *dc = s->dc, *dgrow = s->dgrow;
    for (int64_t b = 0; b < B; b++) {
        const float *dho = s->dout ? s->dout + (b * T + t) * H : NULL, *dhb = job->dhn + b * s->ldp;
        char *dgt = (char *)s->dgd + (size_t)((b * T + t) * G) * s->es;
        const uint16_t *act = s->acts16 + (t * B + b) * 5 * H;
        prefetch_bwd_row(job, b, 0, B);
        if (s->fused_bf16) { /* the three steps below in one pass */
            lk->cell_backward_bf16((uint16_t *)(void *)dgt, row_sum(s, b, t), NULL, dc + b * H, act,
                                   (const uint16_t *)(const void *)job->cpt + b * H, s->dout16 + (b * T + t) * H,
                                   dhb, dc + b * H, (size_t)H);
            continue;
        }
        lk->cell_backward16(dgrow, dc + b * H, act, s->cpf + b * H, dho, dhb, dc + b * H, (size_t)H);
        if (row_sum(s, b, t)) lk->acc(row_sum(s, b, t), dgrow, (size_t)G);
        amp_convert(dgt, s->dt, dgrow, AMP_F32, (size_t)G);
    }
}

/* Step t without lanes: its rows' pointwise passes (split between the threads, or serial), their sums,
 * then the step's product [dx_t | dh_{t-1}] = dG_t W^T */
static void bwd_step(seq_bwd *s, int64_t t) {
    const int64_t B = s->B, T = s->T, H = s->H, G = s->G, NX = s->NX, ldp = s->ldp;
    const amp_dtype dt = s->dt;
    const size_t es = s->es;
    const bool narrow = s->narrow, par = s->par;
    const int64_t n = t > 0 ? s->NW : NX; /* the step's product: [dx_t | dh_{t-1}], dx_t alone at t = 0 */
    float *blk = s->dxh + t * B * ldp;                  /* step t's [dx_t | dh_{t-1}] */
    const float *dhn = s->dxh + (t + 1) * B * ldp + NX; /* dh_t, from step t + 1 (zeros after the last) */
    const char *cpt = narrow ? s->cprev_dt + (size_t)(t * B * H) * es : NULL; /* step t's c_{t-1}, [B, H] in dt */
    if (s->cpf && !par) amp_convert(s->cpf, AMP_F32, cpt, dt, (size_t)(B * H));
    bwd_job job = {s->lk, dt,     s->acts, s->cprev, s->acts16, cpt, s->cpf, s->dgf, s->dout,
                   dhn,   s->dout16, s->dgd, s->dc,  t,         B,   T,      H,      ldp,
                   &s->w, n > 0 ? &s->xg : NULL,
                   narrow && !par ? s->gs : NULL, s->tok}; /* the serial rows add to gs in the kernel */
    if (!narrow || par) { /* the rows' pointwise passes (split between the threads), then db in row order */
        if (par) amp_parallel_range(B, 1, 1, bwd_rows, &job);
        else bwd_rows(&job, 0, B, 0);
        for (int64_t b = 0; b < B && row_sum(s, b, t); b++)
            s->lk->acc(row_sum(s, b, t), narrow ? s->dgf + b * G : (const float *)s->dgd + (b * T + t) * G,
                       (size_t)G);
    }
    if (narrow && !par) bwd_serial_narrow_rows(s, &job, t);
    /* [dx_t | dh_{t-1}] = dG_t W^T, with dG_t (rows T*G apart) packed by the rows' tasks above, or here
     * after the serial narrow rows */
    if (narrow && !par && job.xg)
        amp_lstm_gemm_pack_x(&s->w, &s->xg, (const char *)s->dgd + (size_t)(t * G) * es, T * G, 0, B, 0);
    if (n > 0) amp_lstm_gemm_run(&s->w, &s->xg, n, 0.0f, blk, ldp);
}

/* dX in X's row order, rows b*T + t, into x's gradient as amp_gemm_into_grad sends it: row by row from
 * dxh through the sink's epilogue, or copied into the new fp32 gradient itself. False on an error. */
static bool bwd_dx(amp_ctx *ctx, const seq_bwd *s) {
    amp_grad_sink sink;
    const bool sunk = amp_grad_sink_open(ctx, s->x, &sink);
    /* fp32 rows copied in X's order: into the new gradient itself, or (no sink) into scratch */
    float *dx = sunk ? amp_sink_direct(&sink) : amp_f32_scratch(ctx, s->R * s->I);
    if (!sunk && !dx) return false;
    dx_job dj = {s->dxh, dx, sunk ? &sink : NULL, s->T, s->I, s->B, s->ldp};
    amp_parallel_range(s->B, 1, 1, dx_rows, &dj);
    if (sunk) amp_grad_sink_close(ctx, &sink);
    else amp_grad_accumulate(ctx, s->x, dx);
    return ctx->status == AMP_OK;
}

/* c [G, NX + H] = dG^T [X | H_prev] (amp_lstm_gemm_xh); the error recorded on failure */
static int xh_gemm(amp_ctx *ctx, amp_dtype dt, const amp_lstm_xh *xh, int64_t G, int64_t R, const void *dg, float *c) {
    const int st = amp_lstm_gemm_xh(dt, xh, G, R, dg, c);
    if (st != AMP_OK) amp_ctx_fail(ctx, st, "%s: amp_gemm failed: %s", amp_op_name(OP), amp_status_str(st));
    return st;
}

/* The weight gradients (with tokens W_ih's and E's through token_grads); false on an error */
static bool bwd_weight_grads(amp_ctx *ctx, const amp_node *node, const seq_bwd *s) {
    amp_tensor *x = s->x, *w_ih = s->w_ih, *w_hh = s->w_hh;
    const int64_t T = s->T, I = s->I, H = s->H, G = s->G, R = s->R, V = s->V;
    const amp_dtype dt = s->dt;
    const amp_lstm_xh xs = {x->data, node->out->data, T, I, H, s->es};
    if (V) token_grads(ctx, x, w_ih, s->gs, V, I, G); /* then dW_hh below, as when x needs no W_ih gradient */
    if (ctx->status != AMP_OK) return false;
    if (!V && w_ih->requires_grad && w_hh->requires_grad) {
        /* [dW_ih | dW_hh] [4H, I + H] = dG^T [X | H_prev]: one pass over dG, packed once per block where two
         * GEMMs would read and pack all of it twice; an element's sum does not depend on the columns
         * around it (gemm.c), so the bits are those of the two products */
        const int64_t N = I + H;
        float *dwc = amp_f32_scratch(ctx, G * N); /* [dW_ih | dW_hh], each half then sent where its gradient goes */
        if (!dwc || xh_gemm(ctx, dt, &xs, G, R, s->dgd, dwc)) return false;
        lstm_put_grad(ctx, w_ih, dwc, N, G, I);
        lstm_put_grad(ctx, w_hh, dwc + I, N, G, H);
    } else if (!V && w_ih->requires_grad) { /* dW_ih [4H, I] = dG^T X */
        amp_gemm_into_grad(ctx, OP, dt, true, false, G, I, R, s->dgd, G, x->data, I, w_ih);
    } else if (w_hh->requires_grad) { /* dW_hh [4H, H] = dG^T H_prev */
        const amp_lstm_xh hs = {NULL, node->out->data, T, 0, H, s->es};
        float *dw = amp_f32_scratch(ctx, G * H);
        if (!dw || xh_gemm(ctx, dt, &hs, G, R, s->dgd, dw)) return false;
        lstm_put_grad(ctx, w_hh, dw, H, G, H);
    }
    return ctx->status == AMP_OK;
}

void amp_lstm_sequence_backward(amp_ctx *ctx, amp_node *node) {
    seq_bwd s;
    if (!bwd_setup(ctx, node, &s) || !bwd_products_setup(ctx, &s)) return;
    bool laned;
    if (!bwd_run_lanes(ctx, &s, &laned)) return;
    for (int64_t t = s.T - 1; !laned && t >= 0; t--) bwd_step(&s, t);
    if (s.NX && !bwd_dx(ctx, &s)) return;
    if (!bwd_weight_grads(ctx, node, &s)) return;
    if (s.db) {
        for (int64_t v = 0; s.gs && v < s.V; v++) /* tokens: db = column sums of gs */
            s.lk->acc(s.db, s.gs + v * s.G, (size_t)s.G);
        amp_grad_accumulate(ctx, s.b_ih, s.db);
        amp_grad_accumulate(ctx, s.b_hh, s.db);
    }
}
