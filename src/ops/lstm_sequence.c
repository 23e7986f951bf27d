/* The LSTM sequence op, amp_lstm_sequence (op_util.h): the lstm model's T steps of the cell as one node,
 * an op of its own beside the cell op (lstm_cell.c). This file holds its forward pass;
 * lstm_sequence_backward.c its backward, src/gemm/lstm_gemm.h the packed products of both.
 *
 * The same cell as amp_lstm_cell, unrolled over T steps from a zero state. What it saves over T
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
 *             weight gradients), each weight gradient accumulated (rounded) once instead of T times.
 *             The bias gradient is summed in fp32 as the rows of dG are formed (t from T - 1 down, b
 *             up within a step), so for f16/bf16 each fp32 row of dG lives only in a one-row buffer
 *             until it is rounded (for bf16 on AVX-512 only in registers, lstm_kernels.h
 *             cell_backward_bf16): no fp32 [B*T, 4H] buffer written and read again.
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
#include <string.h>

#include "amp/formats.h"
#include "../kernels/lstm_kernels.h"
#include "lstm_internal.h"

#define OP AMP_OP_LSTM_CELL

/* the most steps whose input projections run as one product */
#define LSTM_XCHUNK_MAX 8

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* c [m, n] (ldc) = X [m, k] W^T + beta c (n: W's rows), X[i, p] = x[i * ldx + p] in W's source dtype,
 * X packed in scratch, as amp_gemm(dt, false, ...) with alpha 1 gives it. False (error recorded) when
 * out of memory. */
static bool packed_gemm(amp_ctx *ctx, const amp_lstm_packed_w *pw, int64_t m, const void *x, int64_t ldx, float beta,
                        float *c, int64_t ldc) {
    const int64_t n = pw->n;
    if (m == 0 || n == 0) return true;
    amp_arena_mark mk = amp_scratch_mark(ctx);
    amp_lstm_packed_x xp;
    if (!lstm_packed_x_alloc(ctx, pw, m, false, &xp)) return false;
    amp_lstm_gemm_pack_x(pw, &xp, x, ldx, 0, m, 0); /* every panel whole: no buffer */
    amp_lstm_gemm_run(pw, &xp, n, beta, c, ldc);
    amp_scratch_release(ctx, mk);
    return true;
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
    const float *table;           /* with tokens: the input projections [V, 4H] (fwd_scratch) */
    const int32_t *tokens;        /* [B, T] */
    bool fold;                    /* table rows read where they are (fwd_gates), else copied into xt for t + 1 */
    const amp_lstm_packed_w *whh; /* with xh: step t + 1's recurrent product, whose X (h_t) each range packs */
    const amp_lstm_packed_x *xh;  /* NULL: none (the last step, or the composed path) */
    char *cprev_dt;               /* fwd_lanes: the saved c_{t-1} of every step (cpt is step t's block) */
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
        amp_lstm_gemm_pack_x(j->whh, j->xh, j->hout + (size_t)(j->t * j->H) * j->es, j->T * j->H, b0, b1, thread_id);
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
 * (amp_lstm_gemm_rows), and every value is the one-thread value. */
static void fwd_lanes(void *arg, int64_t b0, int64_t b1, int thread_id) {
    fwd_job j = *(const fwd_job *)arg;
    const amp_lstm_packed_x *xh = j.xh;
    for (int64_t t = 0; t < j.T; t++) {
        j.t = t;
        j.cpt = j.cprev_dt ? j.cprev_dt + (size_t)(t * j.nb * j.H) * j.es : NULL;
        j.xh = t + 1 < j.T ? xh : NULL;
        if (t > 0) amp_lstm_gemm_rows(j.whh, xh, b0, b1, j.whh->n, 0.0f, j.xt, j.ldx); /* fold: the sum alone */
        fwd_rows(&j, b0, b1, thread_id);
    }
}

/* ---- the forward pass, in steps ---- */

/* The pass's state: the inputs in the compute dtype, the output and saved values, and the scratch the
 * steps share */
typedef struct seq_fwd {
    amp_tensor *x, *w_ih, *w_hh, *b_ih, *b_hh; /* in dt; x and the weights contiguous */
    const int32_t *tokens;                      /* NULL: x holds the inputs */
    int64_t B, T, I, V, H, G, R;                /* V: the embedding's rows with tokens, else 0 */
    amp_dtype dt;
    size_t es;
    bool keep, narrow;                          /* keep: the backward will run (saved is written) */
    amp_tensor *out;                            /* [B, T, H] */
    amp_tensor *in[5];                          /* the node's inputs: x, w_ih, w_hh, the biases present */
    int n_in;
    int64_t i_bih, i_bhh;                       /* their indices in in[], or -1 */
    void *saved;
    float *acts, *cprev;                        /* fp32: saved's parts */
    uint16_t *acts16;                           /* narrow: saved's act16 */
    char *cprev_dt;                             /* narrow: saved's c_{t-1} in dt */
    const amp_lstm_kernels *lk;
    bool fused_bf16, fold, lanes;
    int64_t ldx, S;                             /* S: the steps whose input projections run as one product */
    float *xp, *c, *rowbuf, *table;
    const float *bi, *bh;
    char *xg, *hout;
    amp_lstm_packed_w wih, whh;
    amp_lstm_packed_x xh;
    int lane_rows;
} seq_fwd;

/* The inputs checked, autocast, promoted to one dtype and made contiguous into f; false on an error
 * (recorded) */
static bool fwd_inputs(amp_ctx *ctx, seq_fwd *f, amp_tensor *x, const int32_t *tokens, int64_t nb, int64_t nt,
                       amp_tensor *w_ih, amp_tensor *w_hh, amp_tensor *b_ih, amp_tensor *b_hh) {
    amp_tensor *ts[3] = {x, w_ih, w_hh};
    for (int t = 0; t < 3; t++)
        if (!amp_op_input_ok(ctx, OP, ts[t])) return false;
    if ((b_ih && !amp_op_input_ok(ctx, OP, b_ih)) || (b_hh && !amp_op_input_ok(ctx, OP, b_hh))) return false;
    amp_tensor *cast_in[5] = {x, w_ih, w_hh, b_ih, b_hh};
    if (!amp_autocast_inputs(ctx, OP, cast_in, 5)) return false;
    x = cast_in[0], w_ih = cast_in[1], w_hh = cast_in[2], b_ih = cast_in[3], b_hh = cast_in[4];
    if (tokens ? x->ndim != 2 : x->ndim != 3) {
        amp_op_fail(ctx, OP, tokens ? "the embedding must be [V, I]" : "x must be [B, T, I]");
        return false;
    }
    if (w_hh->ndim != 2) {
        amp_op_fail(ctx, OP, "w_hh must be [4H, H]");
        return false;
    }
    const int64_t B = tokens ? nb : x->shape[0], T = tokens ? nt : x->shape[1], I = x->shape[tokens ? 1 : 2];
    const int64_t V = tokens ? x->shape[0] : 0, H = w_hh->shape[1], G = 4 * H;
    if (B < 1 || T < 1 || B > (INT64_C(1) << 40) / T || !lstm_check_shape(ctx, w_ih, "w_ih", 2, G, I) ||
        !lstm_check_shape(ctx, w_hh, "w_hh", 2, G, H) || (b_ih && !lstm_check_shape(ctx, b_ih, "b_ih", 1, G, -1)) ||
        (b_hh && !lstm_check_shape(ctx, b_hh, "b_hh", 1, G, -1))) {
        if (!ctx->status) amp_op_fail(ctx, OP, "bad sequence shape: %lld x %lld steps", (long long)B, (long long)T);
        return false;
    }
    const int64_t R = B * T;
    for (int64_t r = 0; tokens && r < R; r++)
        if (tokens[r] < 0 || tokens[r] >= V) {
            amp_op_fail(ctx, OP, "token %d (position %lld) is out of range [0, %lld)", (int)tokens[r], (long long)r,
                        (long long)V);
            return false;
        }
    amp_dtype dt = amp_promote(amp_promote(x->dtype, w_ih->dtype), w_hh->dtype);
    if (b_ih) dt = amp_promote(dt, b_ih->dtype);
    if (b_hh) dt = amp_promote(dt, b_hh->dtype);
    if (!(x = amp_contiguous(ctx, amp_op_as(ctx, x, dt))) || !(w_ih = amp_contiguous(ctx, amp_op_as(ctx, w_ih, dt))) ||
        !(w_hh = amp_contiguous(ctx, amp_op_as(ctx, w_hh, dt))))
        return false;
    if ((b_ih && !(b_ih = amp_op_as(ctx, b_ih, dt))) || (b_hh && !(b_hh = amp_op_as(ctx, b_hh, dt)))) return false;
    *f = (seq_fwd){.x = x, .w_ih = w_ih, .w_hh = w_hh, .b_ih = b_ih, .b_hh = b_hh, .tokens = tokens,
                   .B = B, .T = T, .I = I, .V = V, .H = H, .G = G, .R = R, .dt = dt, .es = amp_dtype_size(dt),
                   .narrow = dt != AMP_F32};
    return true;
}

/* The output [B, T, H], the node's inputs, and where the backward's saved values go; false on an error */
static bool fwd_output(amp_ctx *ctx, seq_fwd *f) {
    const int64_t B = f->B, T = f->T, H = f->H, R = f->R;
    const int32_t *tokens = f->tokens;
    amp_tensor *out = f->out = amp_ctx_new_tensor(ctx, f->dt, 3, (const int64_t[]){B, T, H}, true);
    f->in[0] = f->x, f->in[1] = f->w_ih, f->in[2] = f->w_hh;
    f->n_in = 3;
    f->i_bih = f->b_ih ? f->n_in : -1;
    if (f->b_ih) f->in[f->n_in++] = f->b_ih;
    f->i_bhh = f->b_hh ? f->n_in : -1;
    if (f->b_hh) f->in[f->n_in++] = f->b_hh;
    const bool keep = f->keep = amp_autograd_will_record(ctx, f->in, f->n_in);
    const bool narrow = f->narrow;
    /* saved data goes straight into the arena when backward will need it: 6H values a row, fp32, or
     * for a narrow dt 5H act16 and H of dt (es = 2) */
    const size_t state_bytes = (size_t)(T * B * 6 * H) * (narrow ? 2 : sizeof(float)); /* then the tokens */
    void *saved = out && keep ? amp_ctx_alloc(ctx, state_bytes + (tokens ? (size_t)R * sizeof *tokens : 0)) : NULL;
    if (!out || (keep && !saved)) return false;
    if (saved && tokens) memcpy((char *)saved + state_bytes, tokens, (size_t)R * sizeof *tokens);
    f->saved = saved;
    f->acts = saved && !narrow ? saved : NULL, f->cprev = f->acts ? f->acts + T * B * 5 * H : NULL;
    f->acts16 = saved && narrow ? saved : NULL;
    f->cprev_dt = f->acts16 ? (char *)(f->acts16 + T * B * 5 * H) : NULL;
    return true;
}

/* The scratch of the pass: the gate pre-activations, c, the weights packed, with tokens the input
 * projections of the embedding's rows, and h_t's packing; false when out of memory */
static bool fwd_scratch(amp_ctx *ctx, seq_fwd *f) {
    const int64_t B = f->B, T = f->T, I = f->I, V = f->V, H = f->H, G = f->G, R = f->R;
    const int32_t *tokens = f->tokens;
    const amp_dtype dt = f->dt;
    /* Gate pre-activations, row t*B + b, LSTM_XP_PAD floats past 4H apart: each step's B rows are one
     * block that both products store into, and the pad keeps those rows from falling into the same L1
     * set (4H floats is a multiple of 4 KiB here), which the transposed tile stores of ukernel_ct hit. */
    const int64_t ldx = f->ldx = G + LSTM_XP_PAD;
    float *xp = f->xp = amp_f32_scratch(ctx, (tokens ? B : R) * ldx); /* tokens: step t's block, rewritten */
    float *c = f->c = amp_f32_scratch(ctx, B * H);                   /* c_{t-1}, values of dt */
    const amp_lstm_kernels *lk = f->lk = amp_lstm_active();
    f->fused_bf16 = dt == AMP_BF16 && lk->cell_forward_bf16;
    /* fwd_job.rowbuf: a slot per thread that may run rows */
    const bool need_rows = !f->fused_bf16 && (f->narrow || !f->keep);
    f->rowbuf = need_rows ? amp_f32_scratch(ctx, (int64_t)amp_parallel_max_threads() * 6 * H) : NULL;
    f->bi = f->b_ih ? amp_f32_view(ctx, f->b_ih) : NULL, f->bh = f->b_hh ? amp_f32_view(ctx, f->b_hh) : NULL;
    if (!xp || !c || (need_rows && !f->rowbuf) || (f->b_ih && !f->bi) || (f->b_hh && !f->bh)) return false;
    memset(c, 0, (size_t)(B * H) * sizeof *c);
    /* W_ih [4H, I], for gates_t = x_t W_ih^T; W_hh [4H, H], for gates_t += h_{t-1} W_hh^T */
    if (!lstm_pack_w(ctx, &f->wih, dt, f->w_ih->data, I, false, G, I, tokens ? V : B) ||
        (T > 1 && !lstm_pack_w(ctx, &f->whh, dt, f->w_hh->data, H, false, G, H, B)))
        return false;
    /* With tokens, the input projection of every embedding row once, table [V, 4H] = E W_ih^T: a row
     * of it is what x_t W_ih^T computes for a token (an element's sum does not depend on its row), at
     * V rows of work instead of B*T (the lstm model: 256 rows, not 2048). Each step's cells add their
     * tokens' rows (fold, below), or the rows are copied into the step's gate block. Without, the input
     * projection runs S steps at a time: S*B rows, a whole number of the kernel's row tiles where
     * S <= LSTM_XCHUNK_MAX allows it (B = 32 against 12-row tiles: S = 3, 96 rows, every tile full where
     * one step alone fills 32/36), gathered into xg in the steps' row order (t*B + b). */
    float *table = f->table = tokens ? amp_f32_scratch(ctx, V * G) : NULL;
    if (tokens && (!table || !packed_gemm(ctx, &f->wih, V, f->x->data, I, 0.0f, table, G))) return false;
    const int64_t rx = f->wih.flip ? f->wih.kern->nr : f->wih.kern->mr;
    int64_t S = 1;
    while (!tokens && S < LSTM_XCHUNK_MAX && S < T && (S * B) % rx != 0) S++;
    f->S = S;
    f->xg = S > 1 ? amp_scratch_alloc(ctx, (size_t)(S * B * I) * f->es) : NULL;
    if (S > 1 && !f->xg) return false;
    f->hout = f->out->data;
    /* With tokens, a step's looked-up rows stay where they are in the table when W_hh's product is
     * one k block (H <= kc): the product then stores its sum alone (beta 0) and the cell adds the row
     * (fwd_gates), where copying the rows into the gate block for the product to add (beta 1) would
     * move every row through memory once more. The same bits: beta 1 stores fma(1, sum, row), one
     * rounding of sum + row, and the cell's first addition is row + sum (gemm.c's k blocks: with two
     * or more, beta 1 adds the row to the first block's sum, and the rows are copied as before). */
    f->fold = tokens && (T == 1 || H <= f->whh.kern->kc);
    /* h_t packed for step t + 1's product by the rows' own tasks (fwd_rows) */
    f->xh = (amp_lstm_packed_x){.m = B}; /* allocated where there is a step t + 1 */
    if (T > 1 && !lstm_packed_x_alloc(ctx, &f->whh, B, true, &f->xh)) return false;
    /* fwd_lanes: the rows split between the threads for the whole sequence, with tokens folded (no
     * per-step input product), a row kernel, and W_hh as the B operand, so that a range of X's rows is
     * whole panels (amp-bf16 on AVX-512: an 8-row kernel) */
    f->lane_rows = T > 1 && !f->whh.flip ? f->whh.kern->mr : 0;
    f->lanes = f->fold && T > 1 && f->lane_rows > 0 && amp_parallel_max_threads() > 1 && B >= 2 * f->lane_rows;
    return true;
}

/* Every step on lanes (fwd_lanes) */
static void fwd_run_lanes(seq_fwd *f) {
    const fwd_job job = {.lk = f->lk, .dt = f->dt, .fused_bf16 = f->fused_bf16, .keep = f->keep, .nb = f->B,
                         .T = f->T, .H = f->H, .ldx = f->ldx, .es = f->es, .acts = f->acts, .cprev = f->cprev,
                         .acts16 = f->acts16, .c = f->c, .xt = f->xp, .hout = f->hout, .bi = f->bi, .bh = f->bh,
                         .rowbuf = f->rowbuf, .table = f->table, .tokens = f->tokens, .fold = true, .whh = &f->whh,
                         .xh = &f->xh, .cprev_dt = f->keep && f->narrow ? f->cprev_dt : NULL};
    amp_parallel_range(f->B, f->lane_rows, f->lane_rows, fwd_lanes, (void *)&job);
}

/* Step t without lanes: its gate pre-activations, then its rows' cells (split between the threads);
 * *xh_ready: h_t was packed for step t + 1's product. False when out of memory. */
static bool fwd_step(amp_ctx *ctx, seq_fwd *f, int64_t t, bool *xh_ready) {
    const int64_t B = f->B, T = f->T, I = f->I, H = f->H, G = f->G, ldx = f->ldx, S = f->S;
    const int32_t *tokens = f->tokens;
    const size_t es = f->es;
    const bool fold = f->fold;
    const float *table = f->table;
    /* gates_t = x_t W_ih^T (amp_gemm's bits for the whole [B*T, I] product: k = I is the same, and an
     * element's sum does not depend on its row), then += h_{t-1} W_hh^T; x_t and h_{t-1} read in
     * place, rows T*I and T*H apart */
    float *xt = tokens ? f->xp : f->xp + t * B * ldx;
    bool ok = true;
    const bool rows_copy = tokens && !fold; /* fwd_row copies step t + 1's rows */
    if (tokens) {
        for (int64_t b = 0; !fold && (t == 0 || !rows_copy) && b < B; b++)
            memcpy(xt + b * ldx, table + (int64_t)tokens[b * T + t] * G, (size_t)G * sizeof *xt);
    } else if (S == 1) {
        ok = packed_gemm(ctx, &f->wih, B, (const char *)f->x->data + (size_t)(t * I) * es, T * I, 0.0f, xt, ldx);
    } else if (t % S == 0) {
        const int64_t s_n = min64(S, T - t);
        for (int64_t s = 0; s < s_n; s++)
            for (int64_t b = 0; b < B; b++)
                memcpy(f->xg + (size_t)((s * B + b) * I) * es,
                       (const char *)f->x->data + (size_t)((b * T + t + s) * I) * es, (size_t)I * es);
        ok = packed_gemm(ctx, &f->wih, s_n * B, f->xg, I, 0.0f, xt, ldx);
    }
    const float beta = fold ? 0.0f : 1.0f; /* the recurrent product onto the input projection, or alone */
    if (ok && t > 0 && *xh_ready) /* h_{t-1} packed by step t - 1's rows */
        amp_lstm_gemm_run(&f->whh, &f->xh, f->whh.n, beta, xt, ldx);
    else if (!ok ||
             (t > 0 && !packed_gemm(ctx, &f->whh, B, f->hout + (size_t)((t - 1) * H) * es, T * H, beta, xt, ldx)))
        return false;
    /* c_{t-1} saved for a narrow dt (each row's, by its task) */
    char *cpt = f->keep && f->narrow ? f->cprev_dt + (size_t)(t * B * H) * es : NULL;
    fwd_job job = {.lk = f->lk, .dt = f->dt, .fused_bf16 = f->fused_bf16, .keep = f->keep, .t = t, .nb = B, .T = T,
                   .H = H, .ldx = ldx, .es = es, .acts = f->acts, .cprev = f->cprev, .acts16 = f->acts16, .cpt = cpt,
                   .c = f->c, .xt = xt, .hout = f->hout, .bi = f->bi, .bh = f->bh, .rowbuf = f->rowbuf,
                   .table = fold || rows_copy ? f->table : NULL, .tokens = tokens, .fold = fold, .whh = &f->whh,
                   .xh = t + 1 < T ? &f->xh : NULL};
    /* one kernel call per row, the rows split between the threads */
    if (B > 1 && amp_parallel_max_threads() > 1) amp_parallel_range(B, 1, 1, fwd_rows, &job);
    else fwd_rows(&job, 0, B, 0);
    *xh_ready = job.xh != NULL;
    return true;
}

/* amp_lstm_sequence, or with tokens (amp_lstm_sequence_tokens) x the embedding [V, I] whose rows
 * tokens[b * nt + t] are step t's inputs of batch element b */
static amp_tensor *lstm_sequence(amp_ctx *ctx, amp_tensor *x, const int32_t *tokens, int64_t nb, int64_t nt,
                                 amp_tensor *w_ih, amp_tensor *w_hh, amp_tensor *b_ih, amp_tensor *b_hh) {
    if (!ctx) return NULL;
    seq_fwd f;
    if (!fwd_inputs(ctx, &f, x, tokens, nb, nt, w_ih, w_hh, b_ih, b_hh) || !fwd_output(ctx, &f)) return NULL;
    amp_arena_mark mk = amp_scratch_mark(ctx);
    bool ok = fwd_scratch(ctx, &f), xh_ready = false;
    if (ok && f.lanes) fwd_run_lanes(&f);
    for (int64_t t = 0; ok && !f.lanes && t < f.T; t++) ok = fwd_step(ctx, &f, t, &xh_ready);
    amp_scratch_release(ctx, mk);
    if (!ok) return NULL;
    amp_node *node = amp_autograd_record(ctx, OP, f.dt, f.out, f.in, f.n_in, amp_lstm_sequence_backward);
    if (node && f.saved) {
        node->saved = f.saved;
        node->i[0] = f.B, node->i[1] = f.T, node->i[2] = f.I, node->i[3] = f.H, node->i[4] = f.i_bih;
        node->i[5] = f.i_bhh, node->i[6] = f.V;
    }
    return ctx->status == AMP_OK ? f.out : NULL;
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
