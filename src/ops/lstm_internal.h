/* Internal: what the LSTM op files share (lstm_cell.c, lstm_sequence.c, lstm_sequence_backward.c): the
 * shape check and the GEMM calls that record their errors as lstm_cell's, the sequence's saved layout
 * and backward, and the sequence's packed products (src/gemm/lstm_gemm.h) with their memory in ctx's
 * scratch. */
#ifndef AMP_LSTM_INTERNAL_H
#define AMP_LSTM_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/gemm.h"
#include "../core/parallel.h"
#include "../gemm/gemm_implicit.h"
#include "../gemm/lstm_gemm.h"
#include "../tensor/ctx_internal.h"
#include "op_util.h"

/* A leading dimension for amp_gemm: at least 1 even for an empty row. */
static inline int64_t lstm_ld(int64_t n) { return n > 0 ? n : 1; }

/* c [m, n] = op(a) op(b) + beta c by amp_gemm; its status, the error recorded as lstm_cell's. */
static inline int lstm_op_gemm(amp_ctx *ctx, amp_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                               const void *a, int64_t lda, const void *b, int64_t ldb, float beta, float *c) {
    /* the kernel of the sequence's packed products (gemm_implicit.h), so that cells and sequence agree */
    int st = amp_gemm_untiled(dt, ta, tb, m, n, k, 1.0f, a, lstm_ld(lda), b, lstm_ld(ldb), beta, c, lstm_ld(n));
    if (st != AMP_OK)
        amp_ctx_fail(ctx, st, "%s: amp_gemm failed: %s", amp_op_name(AMP_OP_LSTM_CELL), amp_status_str(st));
    return st;
}

/* True when t is [d0, d1] (d1 < 0: any) ; records the error otherwise. */
static inline bool lstm_check_shape(amp_ctx *ctx, const amp_tensor *t, const char *what, int ndim, int64_t d0,
                                    int64_t d1) {
    bool ok = t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || d1 < 0 || t->shape[1] == d1);
    if (!ok) {
        char s[64];
        if (ndim == 1)
            amp_op_fail(ctx, AMP_OP_LSTM_CELL, "%s has shape %s, want [%lld]", what, amp_shape_str(t, s, sizeof s),
                        (long long)d0);
        else
            amp_op_fail(ctx, AMP_OP_LSTM_CELL, "%s has shape %s, want [%lld, %lld]", what,
                        amp_shape_str(t, s, sizeof s), (long long)d0, (long long)d1);
    }
    return ok;
}

/* ---- the sequence (lstm_sequence.c explains it) ---- */

/* floats of padding after each row of the forward's gate pre-activations and of the backward's
 * [dx_t | dh_{t-1}] rows: the transposed tile stores (ukernel_ct) would hit one L1 set otherwise */
#define LSTM_XP_PAD 16

/* The sequence node's backward (lstm_sequence_backward.c); its in[], i[] and saved: lstm_sequence.c */
void amp_lstm_sequence_backward(amp_ctx *ctx, amp_node *node);

/* W [n, k] (W[i, p] = src[trans ? p * ld + i : i * ld + p], dtype dt) packed into scratch for products
 * with m-row operands; false (error recorded) when out of memory. */
static inline bool lstm_pack_w(amp_ctx *ctx, amp_lstm_packed_w *pw, amp_dtype dt, const void *src, int64_t ld,
                               bool trans, int64_t n, int64_t k, int64_t m) {
    void *panels = amp_scratch_alloc(ctx, amp_lstm_gemm_w_init(pw, dt, n, k, m));
    if (!panels) return false;
    amp_lstm_gemm_pack_w(pw, panels, src, ld, trans);
    return true;
}

/* Scratch for X [m, k] packed for a product with pw, and with `tasks` a buffer per thread (X then
 * packed by several row tasks at once); false (error recorded) when out of memory. */
static inline bool lstm_packed_x_alloc(amp_ctx *ctx, const amp_lstm_packed_w *pw, int64_t m, bool tasks,
                                       amp_lstm_packed_x *xp) {
    *xp = (amp_lstm_packed_x){.m = m, .tmp_bytes = tasks ? amp_lstm_gemm_x_tmp_bytes(pw) : 0};
    xp->data = amp_scratch_alloc(ctx, amp_lstm_gemm_x_bytes(pw, m));
    if (tasks) xp->tmp = amp_scratch_alloc(ctx, xp->tmp_bytes * (size_t)amp_parallel_max_threads());
    return xp->data && (!tasks || xp->tmp);
}

#endif /* AMP_LSTM_INTERNAL_H */
