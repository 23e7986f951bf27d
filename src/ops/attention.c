/* Fused causal scaled-dot-product attention: q, k, v [B, Hh, T, D] -> O [B, Hh, T, D],
 *
 *     S = q k^T / sqrt(D)   (S_ij = -inf for j > i: position i sees positions 0..i)
 *     P = softmax(S) over j,   O = P v.
 *
 * Per (batch, head): S comes from amp_gemm in the compute dtype (q, k, v promoted to one dtype) with
 * the 1/sqrt(D) applied as its fp32 alpha; the mask and a max-subtracted softmax run in fp32; P is
 * rounded to the compute dtype, the operand of the second GEMM, and O = P v is rounded once.
 *
 * Saved for backward: nothing but the inputs. The backward recomputes each head's P from q and k, one
 * head at a time in a T x T scratch, by the forward's own code (the same GEMM on the same operands and
 * shape, the same softmax kernels in the same order, the same rounding to the compute dtype), so it is
 * the forward's P bit for bit: the operand the forward multiplied v by, so dV = P^T dO is the gradient
 * of the function computed. Keeping P for every head would cost B Hh T^2 elements per layer (4.8 GB
 * in fp32 for GPT-2 124M at B = 8, T = 1024, more than its other activations); recomputing it costs
 * one more T x T x D GEMM and softmax per head in backward.
 *
 * Backward, per (batch, head), with dO read in the compute dtype (as matmul's backward does):
 *     P as in the forward (fp32 P: the compute-dtype P widened back, the operand the forward used),
 *     dV = P^T dO,  dP = dO V^T,  dS = P (dP - rowsum(dP P))  (fp32; masked entries are 0),
 *     dQ = dS K / sqrt(D),  dK = dS^T Q / sqrt(D)   (dS rounded once to the compute dtype).
 * q, k and v may be one tensor (self-attention on a shared projection): each input's gradient is
 * accumulated separately, so they add up. */
#include <math.h>
#include <string.h>

#include "amp/formats.h"
#include "amp/gemm.h"
#include "../gemm/gemm_direct.h"
#include "../kernels/elem_kernels.h"
#include "../kernels/vecmath.h"
#include "../core/parallel.h"
#include "grad_sink_gemm.h"
#include "op_util.h"

#define OP AMP_OP_ATTENTION

static int64_t ld(int64_t n) { return n > 0 ? n : 1; }

static int attn_gemm(amp_ctx *ctx, amp_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const void *a, int64_t lda, const void *b, int64_t ldb, float *c) {
    int st = amp_gemm(dt, ta, tb, m, n, k, alpha, a, ld(lda), b, ld(ldb), 0.0f, c, ld(n));
    if (st != AMP_OK) amp_ctx_fail(ctx, st, "%s: amp_gemm failed: %s", amp_op_name(OP), amp_status_str(st));
    return st;
}

/* amp_gemm with a leading dimension for C and no context, for tasks on the pool's threads: the status
 * is returned and reported by the caller (a context is not shared between threads). In fp32, with
 * `direct` (the thread's scratch of direct_floats), the product runs straight on the stored operands
 * (gemm/gemm_direct.h: amp_gemm's bits without its per-call costs and most of its packing; the gpt's
 * heads are 48-128 x 32-128 x 32-128). */
static int gemm_ldc(amp_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                    int64_t lda, const void *b, int64_t ldb, float *c, int64_t ldc, float *direct) {
    if (direct && dt == AMP_F32 &&
        amp_gemm_direct_f32(m, n, k, alpha, a, ta ? 1 : lda, ta ? lda : 1, b, tb ? 1 : ldb, tb ? ldb : 1, c, ldc,
                            direct))
        return AMP_OK;
    return amp_gemm(dt, ta, tb, m, n, k, alpha, a, ld(lda), b, ld(ldb), 0.0f, c, ld(ldc));
}

/* Floats of gemm_ldc's direct scratch per thread for the heads' products (T x T x D at most any way
 * round), 0 where they go through amp_gemm (a narrow dtype, or a path without the kernels). */
static int64_t direct_floats(amp_dtype dt, int64_t T, int64_t D) {
    const int64_t n = T > D ? T : D;
    return dt == AMP_F32 ? amp_gemm_direct_scratch(n, n) : 0; /* 0 without the kernels */
}

/* The first failure among n task statuses, recorded in ctx; true when all succeeded. */
static bool report_tasks(amp_ctx *ctx, const int *st, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (st[i] != AMP_OK) {
            amp_ctx_fail(ctx, st[i], "%s: amp_gemm failed: %s", amp_op_name(OP), amp_status_str(st[i]));
            return false;
        }
    return true;
}

static float attn_scale(int64_t d) { return d > 0 ? (float)(1.0 / sqrt((double)d)) : 1.0f; }

/* s [T, T] in place: softmax of each row i over j <= i; P_ij = 0 for j > i. The row sums are the
 * row kernels' (kernels/elem_kernels.h, their 16-lane order); the rest is elementwise. */
static void causal_softmax(const amp_vmath_kernels *vm, const amp_elem_kernels *ek, float *s, int64_t T) {
    for (int64_t i = 0; i < T; i++) {
        float *row = s + i * T;
        const size_t n = (size_t)(i + 1);
        ek->sub_scalar(row, ek->max(row, n), n);
        vm->exp(row, row, n); /* kernels/vecmath.h: per element, libm under AMP_ISA=ref */
        ek->div_scalar(row, ek->sum(row, n), n);
        memset(row + n, 0, (size_t)(T - i - 1) * sizeof *row);
    }
}

/* dp [T, T] in place: dP -> dS = P (dP - rowsum(dP P)), masked entries 0; pf = P in fp32 */
static void causal_softmax_backward(const amp_elem_kernels *ek, float *dp, const float *pf, int64_t T) {
    for (int64_t i = 0; i < T; i++) {
        float *dr = dp + i * T;
        const float *pr = pf + i * T;
        const size_t n = (size_t)(i + 1);
        ek->softmax_grad(dr, pr, ek->dot(pr, dr, n), n);
        memset(dr + n, 0, (size_t)(T - i - 1) * sizeof *dr);
    }
}

/* One head's P = softmax(q k^T / sqrt(D)) (amp_causal_attention's): S into s (fp32, T x T), the softmax
 * in place, then P into p in dt (in fp32, p may be s). The forward and the backward's recomputation
 * both call it, so they get the same bits. Returns the GEMM's status (recorded in ctx). */
static int head_probs(amp_ctx *ctx, amp_dtype dt, const void *qb, const void *kb, int64_t T, int64_t D, float *s,
                      void *p) {
    const int st = attn_gemm(ctx, dt, false, true, T, T, D, attn_scale(D), qb, D, kb, D, s); /* S = q k^T / sqrt(D) */
    if (st != AMP_OK) return st;
    causal_softmax(amp_vmath_active(), amp_elem_active(), s, T);
    if (dt != AMP_F32) amp_convert(p, dt, s, AMP_F32, (size_t)(T * T));
    else if (p != s) memcpy(p, s, (size_t)(T * T) * sizeof *s);
    return AMP_OK;
}

/* in[]: q, k, v (contiguous, compute dtype). i[]: BH (batch * heads), T, D. saved: nothing (P is
 * recomputed per head). */
static void attention_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *q = node->in[0], *k = node->in[1], *v = node->in[2];
    const int64_t BH = node->i[0], T = node->i[1], D = node->i[2];
    const amp_dtype dt = node->out->compute_dtype;
    const size_t es = amp_dtype_size(dt);
    const float scale = attn_scale(D);
    const bool need_s = q->requires_grad || k->requires_grad;

    /* dO in the compute dtype, contiguous [BH, T, D] */
    const amp_tensor *go = node->out->grad;
    const void *dout = go->data;
    if (go->dtype != dt || !amp_tensor_is_contiguous(go)) {
        void *tmp = amp_scratch_alloc(ctx, (size_t)ld(BH * T * D) * es);
        if (!tmp) return;
        amp_tensor_read(go, tmp, dt);
        dout = tmp;
    }
    float *dq = q->requires_grad ? amp_f32_scratch(ctx, BH * T * D) : NULL;
    float *dk = k->requires_grad ? amp_f32_scratch(ctx, BH * T * D) : NULL;
    float *dv = v->requires_grad ? amp_f32_scratch(ctx, BH * T * D) : NULL;
    float *dp = need_s ? amp_f32_scratch(ctx, T * T) : NULL; /* dP, then dS in place */
    float *pf = amp_f32_scratch(ctx, T * T);                 /* S, then P as fp32 */
    /* P in dt, then dS in dt (P is no longer read once dP is known); in fp32 P is pf and dS is dp */
    void *pn = dt != AMP_F32 ? amp_scratch_alloc(ctx, (size_t)ld(T * T) * es) : pf;
    void *ds = dt != AMP_F32 ? pn : dp;
    if (ctx->status != AMP_OK) return;

    for (int64_t bh = 0; bh < BH; bh++) {
        const size_t off = (size_t)(bh * T * D) * es;
        const unsigned char *qb = (const unsigned char *)q->data + off, *kb = (const unsigned char *)k->data + off;
        const unsigned char *vb = (const unsigned char *)v->data + off, *gb = (const unsigned char *)dout + off;
        if (head_probs(ctx, dt, qb, kb, T, D, pf, pn)) return;
        if (dt != AMP_F32) amp_convert(pf, AMP_F32, pn, dt, (size_t)(T * T)); /* the rounded P, widened */
        if (dv && attn_gemm(ctx, dt, true, false, T, D, T, 1.0f, pn, T, gb, D, dv + bh * T * D)) return;
        if (!need_s) continue;
        if (attn_gemm(ctx, dt, false, true, T, T, D, 1.0f, gb, D, vb, D, dp)) return; /* dP = dO V^T */
        causal_softmax_backward(amp_elem_active(), dp, pf, T);
        if (dt != AMP_F32) amp_convert(ds, dt, dp, AMP_F32, (size_t)(T * T));
        if (dq && attn_gemm(ctx, dt, false, false, T, D, T, scale, ds, T, kb, D, dq + bh * T * D)) return;
        if (dk && attn_gemm(ctx, dt, true, false, T, D, T, scale, ds, T, qb, D, dk + bh * T * D)) return;
    }
    if (dq) amp_grad_accumulate(ctx, q, dq);
    if (dk) amp_grad_accumulate(ctx, k, dk);
    if (dv) amp_grad_accumulate(ctx, v, dv);
}

amp_tensor *amp_causal_attention(amp_ctx *ctx, amp_tensor *q, amp_tensor *k, amp_tensor *v) {
    if (!amp_op_input_ok(ctx, OP, q) || !amp_op_input_ok(ctx, OP, k) || !amp_op_input_ok(ctx, OP, v)) return NULL;
    amp_tensor *cast_in[3] = {q, k, v};
    if (!amp_autocast_inputs(ctx, OP, cast_in, 3)) return NULL;
    q = cast_in[0], k = cast_in[1], v = cast_in[2];
    if (q->ndim != 4 || !amp_same_shape(q, k) || !amp_same_shape(q, v)) {
        char sq[64], sk[64], sv[64];
        return amp_op_fail(ctx, OP, "q %s, k %s and v %s must share one shape [B, H, T, D]",
                           amp_shape_str(q, sq, sizeof sq), amp_shape_str(k, sk, sizeof sk),
                           amp_shape_str(v, sv, sizeof sv));
    }
    const amp_dtype dt = amp_promote(amp_promote(q->dtype, k->dtype), v->dtype);
    if (!(q = amp_contiguous(ctx, amp_op_as(ctx, q, dt))) || !(k = amp_contiguous(ctx, amp_op_as(ctx, k, dt))) ||
        !(v = amp_contiguous(ctx, amp_op_as(ctx, v, dt))))
        return NULL;
    const int64_t BH = q->shape[0] * q->shape[1], T = q->shape[2], D = q->shape[3];
    const size_t es = amp_dtype_size(dt);
    amp_tensor *out = amp_ctx_new_tensor(ctx, dt, 4, q->shape, true);
    if (!out) return NULL;

    /* one head's S and P at a time, in scratch: the backward recomputes P (nothing is saved) */
    amp_arena_mark mk = amp_scratch_mark(ctx);
    float *o = dt == AMP_F32 ? out->data : amp_f32_scratch(ctx, BH * T * D);
    float *s = amp_f32_scratch(ctx, T * T);
    void *p = dt != AMP_F32 ? amp_scratch_alloc(ctx, (size_t)ld(T * T) * es) : s; /* in fp32, P is S's buffer */
    if (ctx->status != AMP_OK) {
        amp_scratch_release(ctx, mk);
        return NULL;
    }
    for (int64_t bh = 0; bh < BH; bh++) {
        const size_t off = (size_t)(bh * T * D) * es;
        const unsigned char *qb = (const unsigned char *)q->data + off, *kb = (const unsigned char *)k->data + off;
        const unsigned char *vb = (const unsigned char *)v->data + off;
        if (head_probs(ctx, dt, qb, kb, T, D, s, p)) break;
        if (attn_gemm(ctx, dt, false, false, T, D, T, 1.0f, p, T, vb, D, o + bh * T * D)) break; /* O = P v */
    }
    if (ctx->status == AMP_OK && dt != AMP_F32) amp_store_f32(ctx, out, o);
    amp_scratch_release(ctx, mk);
    if (ctx->status != AMP_OK) return NULL;
    amp_tensor *in[3] = {q, k, v};
    amp_node *node = amp_autograd_record(ctx, OP, dt, out, in, 3, attention_backward);
    if (node) node->i[0] = BH, node->i[1] = T, node->i[2] = D;
    return out;
}

/* ---- self-attention on a fused projection: amp_causal_self_attention (op_util.h) ----
 *
 * The same arithmetic as amp_causal_attention on the heads of qkv [B, T, 3C] (q = columns [0, C),
 * k = [C, 2C), v = [2C, 3C), head h = columns [h D, (h + 1) D) of each), with the heads merged
 * back into O [B, T, C]; what it saves over narrow + reshape + transpose + amp_causal_attention +
 * transpose + reshape (its reference twin, tests/test_attention_fused.c compares them) is the copies:
 * the GEMMs read q, k, v and dO in place with leading dimensions 3C and C and write O and dq, dk, dv
 * in place, so the forward makes no copy of q, k, v or O and the backward accumulates one fp32
 * gradient of qkv, rounded once (the composition rounds dq, dk, dv once each, then copies them exactly:
 * the same values). Each GEMM is the composition's on the same values and shape, so the same bits.
 *
 * Causal blocks: the products run on blocks of ATTN_ROWS query rows, each only over the keys it sees,
 * so the masked upper triangle of S, dP and of the P and dS operands is skipped (about a third of the
 * attention GEMMs' work at T = 128). A skipped term is a product with an exact zero of P or dS; left
 * out at the end of a sum (O, dQ: columns past the block) or at its start (dV, dK: rows above it, where
 * the sum is still +0; ATTN_ROWS even keeps VDPBF16PS's pairs aligned) it changes no bit, as long as
 * one k block of the GEMM covers T (kc: 512 fp32, 1024 bf16) and the skipped operand is finite. Past
 * that, the sums are split at other points than amp_causal_attention's: still deterministic.
 *
 * Threads: the (batch element, head) pairs are tasks on the pool (fwd_head_task, bwd_head_task), each
 * with its thread's scratch; a head's GEMMs run whole on one thread (amp_gemm's bits depend only on
 * the shape), so the values are those of one thread (tests/test_threads.c). At the gpt model's
 * 128 x 128 x 32 products a single product is too small to split well between threads. In fp32 on a
 * path with the kernels they are amp_gemm_direct_f32's (gemm_ldc): amp_gemm's bits, reading q, k, v,
 * P, dS and dO where they are (only K^T and V^T are packed).
 *
 * in[]: qkv (contiguous, compute dtype). i[]: B, T, C, heads. saved: nothing: each head's P is
 * recomputed in backward by the forward's code (fused_head_probs), in its thread's scratch. */

/* query rows per causal block: a multiple of the micro-kernels' 12 and 6 rows, and even */
enum { ATTN_ROWS = 48 };

/* One head's P = softmax(q k^T / sqrt(D)) of batch element b, head h of qkv [B, T, 3C] (dt), by causal
 * blocks: S into s (fp32, T x T), the softmax in place, then P rounded into p for a narrow dt (in fp32,
 * P is s and p is not written). The forward and the backward's recomputation both call it on one
 * thread with the same scratch sizes, so the backward's P is the forward's bit for bit. Returns the
 * first GEMM's failure (runs on any thread: no context). */
static int fused_head_probs(const unsigned char *qkv, amp_dtype dt, int64_t T, int64_t C, int64_t NH, int64_t b,
                            int64_t h, float *s, void *p, float *direct) {
    const int64_t D = C / NH, C3 = 3 * C;
    const size_t es = amp_dtype_size(dt);
    const float scale = attn_scale(D);
    const unsigned char *qb = qkv + (size_t)(b * T * C3 + h * D) * es, *kb = qb + (size_t)C * es;
    int st = AMP_OK;
    for (int64_t r0 = 0; r0 < T && st == AMP_OK; r0 += ATTN_ROWS) { /* S[r0:r1, 0:r1] = q[r0:r1] k[0:r1]^T / sqrt(D) */
        const int64_t r1 = T - r0 < ATTN_ROWS ? T : r0 + ATTN_ROWS;
        st = gemm_ldc(dt, false, true, r1 - r0, r1, D, scale, qb + (size_t)(r0 * C3) * es, C3, kb, C3, s + r0 * T, T,
                      direct);
    }
    if (st != AMP_OK) return st;
    causal_softmax(amp_vmath_active(), amp_elem_active(), s, T); /* reads S_ij for j <= i only, zeroes the rest */
    if (dt != AMP_F32) amp_convert(p, dt, s, AMP_F32, (size_t)(T * T));
    return AMP_OK;
}

/* One head's gradients of batch element b: dq, dk, dv into columns [h D, (h + 1) D) of the three
 * column blocks of dqkv_b [T, 3C] (fp32); dp, pf: T x T fp32 scratch of this head's thread, pn: T x T
 * in dt (a narrow dt; NULL in fp32). Returns the first GEMM's failure (runs on any thread: no context). */
static int head_backward(const amp_node *node, const void *dout, float *dqkv_b, int64_t b, int64_t h, float *dp,
                         float *pf, void *pn, float *direct) {
    const amp_tensor *qkv = node->in[0];
    const int64_t T = node->i[1], C = node->i[2], NH = node->i[3], D = C / NH, C3 = 3 * C;
    const amp_dtype dt = node->out->compute_dtype;
    const size_t es = amp_dtype_size(dt);
    const float scale = attn_scale(D);
    const unsigned char *qb = (const unsigned char *)qkv->data + (size_t)(b * T * C3 + h * D) * es;
    const unsigned char *kb = qb + (size_t)C * es, *vb = qb + (size_t)(2 * C) * es;
    const unsigned char *gb = (const unsigned char *)dout + (size_t)(b * T * C + h * D) * es;
    float *dq = dqkv_b + h * D, *dk = dq + C, *dv = dq + 2 * C;
    /* P: in fp32 pf itself; in a narrow dt pn, then pf = pn widened (the operand the forward used) */
    int st = fused_head_probs(qkv->data, dt, T, C, NH, b, h, pf, pn, direct);
    if (st != AMP_OK) return st;
    if (dt != AMP_F32) amp_convert(pf, AMP_F32, pn, dt, (size_t)(T * T));
    const unsigned char *pc = dt == AMP_F32 ? (const unsigned char *)pf : (const unsigned char *)pn;
    for (int64_t r0 = 0; r0 < T && st == AMP_OK; r0 += ATTN_ROWS) { /* rows [r0, r1): see causal blocks above */
        const int64_t r1 = T - r0 < ATTN_ROWS ? T : r0 + ATTN_ROWS, nr = r1 - r0;
        /* dV[r0:r1] = P[r0:T, r0:r1]^T dO[r0:T]; dP[r0:r1, 0:r1] = dO[r0:r1] V[0:r1]^T */
        st = gemm_ldc(dt, true, false, nr, D, T - r0, 1.0f, pc + (size_t)(r0 * T + r0) * es, T,
                      gb + (size_t)(r0 * C) * es, C, dv + r0 * C3, C3, direct);
        if (st == AMP_OK)
            st = gemm_ldc(dt, false, true, nr, r1, D, 1.0f, gb + (size_t)(r0 * C) * es, C, vb, C3, dp + r0 * T, T,
                          direct);
    }
    if (st != AMP_OK) return st;
    causal_softmax_backward(amp_elem_active(), dp, pf, T); /* reads dP_ij for j <= i only, zeroes the rest */
    /* dS in dt: dp itself in fp32, else rounded into pn (P in dt is not read again) */
    if (dt != AMP_F32) amp_convert(pn, dt, dp, AMP_F32, (size_t)(T * T));
    const unsigned char *dsc = dt == AMP_F32 ? (const unsigned char *)dp : (const unsigned char *)pn;
    for (int64_t r0 = 0; r0 < T && st == AMP_OK; r0 += ATTN_ROWS) {
        const int64_t r1 = T - r0 < ATTN_ROWS ? T : r0 + ATTN_ROWS, nr = r1 - r0;
        /* dQ[r0:r1] = dS[r0:r1, 0:r1] K[0:r1] / sqrt(D); dK[r0:r1] = dS[r0:T, r0:r1]^T Q[r0:T] / sqrt(D) */
        st = gemm_ldc(dt, false, false, nr, D, r1, scale, dsc + (size_t)(r0 * T) * es, T, kb, C3, dq + r0 * C3, C3,
                      direct);
        if (st == AMP_OK)
            st = gemm_ldc(dt, true, false, nr, D, T - r0, scale, dsc + (size_t)(r0 * T + r0) * es, T,
                          qb + (size_t)(r0 * C3) * es, C3, dk + r0 * C3, C3, direct);
    }
    return st;
}

/* Heads run as tasks on the pool's threads (task i: batch element b0 + i / NH, head i % NH), each with
 * its thread's T x T scratch; heads write disjoint columns and each head's GEMMs are those of one thread
 * (amp_gemm's bits depend only on the shape), so the values do not depend on the threads. */
typedef struct bwd_heads_job {
    const amp_node *node;
    const void *dout;
    float *dqkv;       /* batch element b's block at dqkv + (blockwise ? 0 : b T 3C) */
    bool blockwise;
    int64_t b0, NH;    /* task i: batch element b0 + i / NH, head i % NH */
    float *dp, *pf;    /* per thread: T x T fp32 each */
    unsigned char *pn; /* per thread: T x T in dt (a narrow dt), else NULL */
    float *direct;     /* per thread: n_direct floats (gemm_ldc), or NULL */
    int64_t n_direct;
    int *st;           /* per task */
} bwd_heads_job;

static void bwd_head_task(void *arg, int64_t i, int thread_id) {
    const bwd_heads_job *j = arg;
    const int64_t T = j->node->i[1], C3 = 3 * j->node->i[2], TT = T * T, b = j->b0 + i / j->NH;
    const size_t es = amp_dtype_size(j->node->out->compute_dtype);
    j->st[i] = head_backward(j->node, j->dout, j->blockwise ? j->dqkv : j->dqkv + b * T * C3, b, i % j->NH,
                             j->dp + thread_id * TT, j->pf + thread_id * TT,
                             j->pn ? j->pn + (size_t)(thread_id * TT) * es : NULL,
                             j->direct ? j->direct + thread_id * j->n_direct : NULL);
}

static void self_attention_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *qkv = node->in[0];
    const int64_t B = node->i[0], T = node->i[1], C = node->i[2], NH = node->i[3], C3 = 3 * C;
    const amp_dtype dt = node->out->compute_dtype;
    const size_t es = amp_dtype_size(dt);

    /* dO in the compute dtype, contiguous [B, T, C] */
    const amp_tensor *go = node->out->grad;
    const void *dout = go->data;
    if (go->dtype != dt || !amp_tensor_is_contiguous(go)) {
        void *tmp = amp_scratch_alloc(ctx, (size_t)ld(B * T * C) * es);
        if (!tmp) return;
        amp_tensor_read(go, tmp, dt);
        dout = tmp;
    }
    /* dqkv goes where qkv's gradient goes (amp_grad_sink): straight there when that is a new fp32
     * gradient, else through one batch element's fp32 block [T, 3C] and the GEMM epilogue, applied
     * while the block is in cache; no full fp32 copy is written to memory and read again. Without a
     * sink: the whole fp32 gradient, then amp_grad_accumulate. */
    amp_grad_sink sink;
    const bool sunk = amp_grad_sink_open(ctx, qkv, &sink);
    float *direct = sunk ? amp_sink_direct(&sink) : NULL;
    float *dqkv = direct ? direct : amp_f32_scratch(ctx, (sunk ? T : B * T) * C3); /* every column is written */
    const bool blockwise = sunk && !direct;
    /* tasks: the heads of one batch element at a time when blockwise (its block then goes to the sink),
     * else every (batch element, head) at once */
    const int64_t per_call = blockwise ? NH : B * NH;
    const int64_t threads = amp_parallel_max_threads() < per_call ? amp_parallel_max_threads() : per_call;
    float *dp = amp_f32_scratch(ctx, threads * T * T); /* dP, then dS in place */
    float *pf = amp_f32_scratch(ctx, threads * T * T); /* S, then P as fp32 */
    /* P in dt, then dS in dt (a narrow dt) */
    unsigned char *pn = dt != AMP_F32 ? amp_scratch_alloc(ctx, (size_t)ld(threads * T * T) * es) : NULL;
    int *st = amp_scratch_alloc(ctx, (size_t)per_call * sizeof *st);
    const int64_t n_direct = direct_floats(dt, T, C / NH);
    float *per_thread = n_direct ? amp_f32_scratch(ctx, threads * n_direct) : NULL; /* gemm_ldc's */
    bwd_heads_job job = {node, dout, dqkv, blockwise, 0, NH, dp, pf, pn, per_thread, n_direct, st};
    for (int64_t b = 0; b < (blockwise ? B : 1) && ctx->status == AMP_OK; b++) {
        job.b0 = b;
        amp_parallel_for(per_call, bwd_head_task, &job);
        if (!report_tasks(ctx, st, per_call)) break;
        if (blockwise) {
            const amp_gemm_epilogue ep = amp_sink_epilogue(&sink, b * T * C3, C3);
            amp_gemm_epilogue_apply(&ep, dqkv, C3, T, C3);
        }
    }
    if (sunk) amp_grad_sink_close(ctx, &sink);
    else if (ctx->status == AMP_OK) amp_grad_accumulate(ctx, qkv, dqkv);
}

/* The forward's heads as tasks (bwd_heads_job's scheme): task bh = b NH + h, S and P in its thread's
 * T x T scratch. */
typedef struct fwd_heads_job {
    const unsigned char *qkv;
    amp_dtype dt;
    int64_t T, C, NH;
    float *o;         /* O [B, T, C] in fp32 */
    float *s;         /* per thread: S, then P in fp32 [T, T] */
    unsigned char *p; /* per thread: P [T, T] in dt (a narrow dt), else NULL */
    float *direct;    /* per thread: n_direct floats (gemm_ldc), or NULL */
    int64_t n_direct;
    int *st;          /* per task */
} fwd_heads_job;

static void fwd_head_task(void *arg, int64_t bh, int thread_id) {
    const fwd_heads_job *j = arg;
    const amp_dtype dt = j->dt;
    const int64_t T = j->T, C = j->C, NH = j->NH, D = C / NH, C3 = 3 * C, b = bh / NH, h = bh % NH;
    const size_t es = amp_dtype_size(dt);
    const unsigned char *vb = j->qkv + (size_t)(b * T * C3 + 2 * C + h * D) * es;
    float *s = j->s + thread_id * T * T;
    unsigned char *pb = dt == AMP_F32 ? (unsigned char *)s : j->p + (size_t)(thread_id * T * T) * es;
    float *direct = j->direct ? j->direct + thread_id * j->n_direct : NULL;
    int st = fused_head_probs(j->qkv, dt, T, C, NH, b, h, s, pb, direct);
    for (int64_t r0 = 0; r0 < T && st == AMP_OK; r0 += ATTN_ROWS) { /* O[r0:r1] = P[r0:r1, 0:r1] v[0:r1] */
        const int64_t r1 = T - r0 < ATTN_ROWS ? T : r0 + ATTN_ROWS;
        st = gemm_ldc(dt, false, false, r1 - r0, D, r1, 1.0f, pb + (size_t)(r0 * T) * es, T, vb, C3,
                      j->o + (b * T + r0) * C + h * D, C, direct);
    }
    j->st[bh] = st;
}

amp_tensor *amp_causal_self_attention(amp_ctx *ctx, amp_tensor *qkv, int64_t heads) {
    if (!amp_op_input_ok(ctx, OP, qkv) || !amp_autocast_inputs(ctx, OP, &qkv, 1)) return NULL;
    if (qkv->ndim != 3 || qkv->shape[2] % 3 != 0 || heads < 1 || (qkv->shape[2] / 3) % heads != 0) {
        char sq[64];
        return amp_op_fail(ctx, OP, "qkv %s must be [B, T, 3C] with C a multiple of the %lld heads",
                           amp_shape_str(qkv, sq, sizeof sq), (long long)heads);
    }
    const amp_dtype dt = qkv->dtype;
    if (!(qkv = amp_contiguous(ctx, qkv))) return NULL;
    const int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, NH = heads;
    const size_t es = amp_dtype_size(dt);
    amp_tensor *out = amp_ctx_new_tensor(ctx, dt, 3, (const int64_t[]){B, T, C}, true);
    if (!out) return NULL;

    amp_arena_mark mk = amp_scratch_mark(ctx);
    const int64_t threads = amp_parallel_max_threads() < B * NH ? amp_parallel_max_threads() : B * NH;
    float *o = dt == AMP_F32 ? out->data : amp_f32_scratch(ctx, B * T * C);
    float *s = amp_f32_scratch(ctx, threads * T * T); /* S, then P in place (in fp32, the GEMM's operand) */
    void *p = dt != AMP_F32 ? amp_scratch_alloc(ctx, (size_t)ld(threads * T * T) * es) : NULL;
    int *st = amp_scratch_alloc(ctx, (size_t)(B * NH) * sizeof *st);
    const int64_t n_direct = direct_floats(dt, T, C / NH);
    float *direct = n_direct ? amp_f32_scratch(ctx, threads * n_direct) : NULL;
    if (ctx->status != AMP_OK) {
        amp_scratch_release(ctx, mk);
        return NULL;
    }
    fwd_heads_job job = {qkv->data, dt, T, C, NH, o, s, p, direct, n_direct, st};
    amp_parallel_for(B * NH, fwd_head_task, &job);
    report_tasks(ctx, st, B * NH);
    if (ctx->status == AMP_OK && dt != AMP_F32) amp_store_f32(ctx, out, o);
    amp_scratch_release(ctx, mk);
    if (ctx->status != AMP_OK) return NULL;
    amp_node *node = amp_autograd_record(ctx, OP, dt, out, &qkv, 1, self_attention_backward);
    if (node) node->i[0] = B, node->i[1] = T, node->i[2] = C, node->i[3] = NH;
    return out;
}
