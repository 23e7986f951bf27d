/* The LSTM cell op, amp_lstm_cell: one fused step, PyTorch's LSTMCell. The lstm model's whole sequence
 * is an op of its own (lstm_sequence.c) that shares this cell's arithmetic and saved format:
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
#include <string.h>

#include "amp/formats.h"
#include "../kernels/lstm_kernels.h"
#include "lstm_internal.h"

#define OP AMP_OP_LSTM_CELL

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
        if (!dx || lstm_op_gemm(ctx, dt, false, false, B, I, G, dg, G, w_ih->data, I, 0.0f, dx)) return;
        amp_grad_accumulate(ctx, x, dx);
    }
    if (h->requires_grad) { /* dh [B, H] = dG W_hh [4H, H] */
        float *dh = amp_f32_scratch(ctx, B * H);
        if (!dh || lstm_op_gemm(ctx, dt, false, false, B, H, G, dg, G, w_hh->data, H, 0.0f, dh)) return;
        amp_grad_accumulate(ctx, h, dh);
    }
    if (w_ih->requires_grad) { /* dW_ih [4H, I] = dG^T x [B, I] */
        float *dw = amp_f32_scratch(ctx, G * I);
        if (!dw || lstm_op_gemm(ctx, dt, true, false, G, I, B, dg, G, x->data, I, 0.0f, dw)) return;
        amp_grad_accumulate(ctx, w_ih, dw);
    }
    if (w_hh->requires_grad) { /* dW_hh [4H, H] = dG^T h [B, H] */
        float *dw = amp_f32_scratch(ctx, G * H);
        if (!dw || lstm_op_gemm(ctx, dt, true, false, G, H, B, dg, G, h->data, H, 0.0f, dw)) return;
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
    if (!lstm_check_shape(ctx, h, "h", 2, B, H) || !lstm_check_shape(ctx, c, "c", 2, B, H) ||
        !lstm_check_shape(ctx, w_ih, "w_ih", 2, G, I) || !lstm_check_shape(ctx, w_hh, "w_hh", 2, G, H) ||
        (b_ih && !lstm_check_shape(ctx, b_ih, "b_ih", 1, G, -1)) ||
        (b_hh && !lstm_check_shape(ctx, b_hh, "b_hh", 1, G, -1)))
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
        lstm_op_gemm(ctx, dt, false, true, B, G, I, x->data, I, w_ih->data, I, 0.0f, gates) ||
        lstm_op_gemm(ctx, dt, false, true, B, G, H, h->data, H, w_hh->data, H, 1.0f, gates)) {
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
