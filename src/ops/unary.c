/* Elementwise activations and functions of one tensor (relu, gelu, tanh, sigmoid, pow, exp, log) and
 * dropout. The result has the input's dtype; each element is computed in fp32 and rounded once.
 *
 * What backward reads (nothing is copied for it: the node already holds both tensors, which live in
 * the arena until amp_ctx_reset):
 *   exp: the output y (node->out), as PyTorch does: exp' = y, one rounding away from exact.
 *   the others: the input x (node->in[0]); pow's exponent in node->f[0]; gelu's variant in node->i[0]
 *     (1: the tanh approximation). tanh and sigmoid too, unlike
 *     PyTorch's 1 - y^2 and y(1-y): near saturation those cancel, and with y rounded to f16/bf16 the
 *     derivative loses most of its digits (bf16, x = 4: y(1-y) is off by up to 11%); from x,
 *     sigmoid' = e/(1+e)^2 with e = exp(-|x|) (and tanh'(x) = 4 sigmoid'(2x)) has no cancellation.
 *   dropout: a bitmask (one bit per element, 1 = kept) in the arena, node->saved, and the scale
 *     1/(1-p) in node->f[0].
 * No clamping: NaN and infinities go through the fp32 formulas as IEEE arithmetic takes them (log of a
 * negative is NaN, log(0) is -inf, gelu(-inf) = -inf * 0 is NaN, as in PyTorch). */
#include <math.h>
#include <string.h>

#include "../kernels/elem_kernels.h"
#include "../kernels/vecmath.h"
#include "grad_sink_gemm.h"
#include "../core/parallel.h"
#include "../core/relu_bits.h"
#include "op_util.h"

/* gelu and its gradient: the active path's fused kernels (kernels/vecmath.h: x Phi(x) with Phi from
 * erfc, full relative accuracy in the left tail; libm under AMP_ISA=ref). */

/* sigmoid'(x) = sigmoid(x) sigmoid(-x) = e/(1+e)^2 with e = exp(-|x|) in (0, 1]: no cancellation, 0 at
 * +-inf, NaN at NaN. */
static float sigmoid_grad_f32(float x) {
    const float e = expf(-fabsf(x)), d = 1.0f + e;
    return e / (d * d);
}

/* ---- relu on fp16/bf16/fp32 bits: one pass, no fp32 staging ----
 * The selections are core/relu_bits.h's, run by the path's elem kernels (relu16 and the others); on a
 * path without them (the reference, which AMP_ISA=ref forces) the generic route below decodes to fp32,
 * selects and rounds back, the same bits. tests/test_relu_bits.c compares the two on all 2^16 inputs
 * and on fp32 patterns. */
static bool fast_relu_ok(const amp_elem_kernels *ek, const amp_tensor *x, amp_half_bits *hb) {
    return ek->relu16 && ek->relu_grad16 && amp_half_bits_of(x->dtype, hb) && amp_tensor_is_contiguous(x);
}

static bool fast_relu32_ok(const amp_elem_kernels *ek, const amp_tensor *x) {
    return ek->relu32 && ek->relu_grad32 && x->dtype == AMP_F32 && amp_tensor_is_contiguous(x);
}

/* dx = g * f'(v) for elements [0, n) of one chunk (v: y for exp, else x). */
static void unary_grad(const amp_node *node, float *dx, const float *g, const float *v, int64_t n) {
    switch (node->op) {
    case AMP_OP_RELU:
        /* PyTorch's threshold_backward: 0 where x <= 0 (x = 0 included), g elsewhere (NaN x passes g) */
        for (int64_t i = 0; i < n; i++) dx[i] = v[i] <= 0.0f ? 0.0f : g[i];
        break;
    case AMP_OP_GELU: /* d/dx x Phi(x) = Phi(x) + x phi(x); i[0]: the tanh approximation (vecmath.h) */
        if (node->i[0]) amp_vmath_active()->gelu_tanh_grad(dx, g, v, (size_t)n);
        else amp_vmath_active()->gelu_grad(dx, g, v, (size_t)n);
        break;
    case AMP_OP_TANH: /* 1 - tanh^2 = 4 e/(1+e)^2, e = exp(-2|x|) */
        for (int64_t i = 0; i < n; i++) dx[i] = g[i] * (4.0f * sigmoid_grad_f32(2.0f * v[i]));
        break;
    case AMP_OP_SIGMOID:
        for (int64_t i = 0; i < n; i++) dx[i] = g[i] * sigmoid_grad_f32(v[i]);
        break;
    case AMP_OP_POW: {
        const float e = node->f[0];
        /* PyTorch's pow_backward: exponent 0 gives a zero gradient (not 0 * x^-1, NaN/inf at x = 0) */
        if (e == 0.0f)
            memset(dx, 0, (size_t)n * sizeof *dx);
        else
            for (int64_t i = 0; i < n; i++) dx[i] = g[i] * (e * powf(v[i], e - 1.0f));
        break;
    }
    case AMP_OP_EXP:
        for (int64_t i = 0; i < n; i++) dx[i] = g[i] * v[i];
        break;
    default: /* log */
        for (int64_t i = 0; i < n; i++) dx[i] = g[i] / v[i];
        break;
    }
}

/* values per chunk of the gradient: 64 KiB of fp32, in L2 with g and v */
enum { UNARY_GRAD_CHUNK = 16384 };
/* The elementwise passes split between threads (amp_parallel_range) from this many elements per
 * thread: each element's result depends only on its own values, so the bits do not change. */
enum { UNARY_MIN_PER_THREAD = 32768 };

/* The four bit-level ReLU loops over [0, n) split between threads the same way: each element's bits
 * depend on its own inputs alone, and on one thread the others would wait for them. */
typedef struct relu_job {
    const amp_elem_kernels *ek;
    void *y;
    const void *x, *g; /* g NULL: the forward */
    amp_half_bits hb;
    bool wide; /* fp32 bits, else the 16-bit format hb */
} relu_job;

static void relu_range(void *arg, int64_t i0, int64_t i1, int thread_id) {
    (void)thread_id;
    const relu_job *j = arg;
    const amp_elem_kernels *ek = j->ek;
    const int64_t n = i1 - i0;
    /* the forward runs only where the path has the kernels (fast_relu_ok); the gradient also for
     * amp_relu_grad_run, which takes the inline loops on a path without them */
    if (j->wide) {
        uint32_t *y = (uint32_t *)j->y + i0;
        const uint32_t *x = (const uint32_t *)j->x + i0, *g = j->g ? (const uint32_t *)j->g + i0 : NULL;
        if (!g) ek->relu32(y, x, n);
        else if (ek->relu_grad32) ek->relu_grad32(y, x, g, n);
        else amp_relu_grad_bits32(y, x, g, n);
    } else {
        uint16_t *y = (uint16_t *)j->y + i0;
        const uint16_t *x = (const uint16_t *)j->x + i0, *g = j->g ? (const uint16_t *)j->g + i0 : NULL;
        if (!g) ek->relu16(y, x, n, j->hb);
        else if (ek->relu_grad16) ek->relu_grad16(y, x, g, n, j->hb);
        else amp_relu_grad_bits16(y, x, g, n, j->hb);
    }
}

static void relu_run(const amp_elem_kernels *ek, void *y, const void *x, const void *g, int64_t n, amp_half_bits hb,
                     bool wide) {
    relu_job job = {ek, y, x, g, hb, wide};
    amp_parallel_range(n, UNARY_MIN_PER_THREAD, 64, relu_range, &job);
}

void amp_relu_grad_run(void *dx, const void *x, const void *g, int64_t n, amp_dtype dt) {
    amp_half_bits hb = {0};
    const bool wide = !amp_half_bits_of(dt, &hb);
    relu_run(amp_elem_active(), dx, x, g, n, hb, wide);
}

typedef struct grad_job {
    const amp_node *node;
    const float *g, *v;
} grad_job;

/* amp_grad_chunk_fn: the gradient of elements [off, off + len) */
static void grad_chunk(const void *arg, float *dst, int64_t off, int64_t len) {
    const grad_job *j = arg;
    unary_grad(j->node, dst, j->g + off, j->v + off, len);
}

static void unary_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0];
    const int64_t n = amp_tensor_numel(x);
    amp_half_bits hb = {0};
    amp_tensor *gt = node->out->grad;
    const amp_elem_kernels *ek = amp_elem_active();
    if (node->op == AMP_OP_RELU && !x->grad && x->requires_grad && fast_relu_ok(ek, x, &hb) && gt &&
        gt->dtype == x->dtype && amp_tensor_is_contiguous(gt)) {
        /* x's first gradient, in x's dtype (what amp_grad_accumulate would create) */
        amp_tensor *grad = amp_ctx_new_tensor(ctx, x->dtype, x->ndim, x->shape, true);
        if (!grad) return;
        relu_run(ek, grad->data, x->data, gt->data, n, hb, false);
        x->grad = grad;
        return;
    }
    if (node->op == AMP_OP_RELU && !x->grad && x->requires_grad && fast_relu32_ok(ek, x) && gt &&
        gt->dtype == AMP_F32 && amp_tensor_is_contiguous(gt)) {
        amp_tensor *grad = amp_ctx_new_tensor(ctx, AMP_F32, x->ndim, x->shape, true);
        if (!grad) return;
        relu_run(ek, grad->data, x->data, gt->data, n, hb, true);
        x->grad = grad;
        return;
    }
    const float *g = amp_grad_out(ctx, node);
    const float *v = amp_f32_view(ctx, node->op == AMP_OP_EXP ? node->out : x); /* y for exp, else x */
    if (!g || !v) return;
    /* dx goes where x's gradient goes, a chunk at a time while in cache (grad_sink_gemm.h) */
    grad_job job = {node, g, v};
    amp_grad_chunks_parallel(ctx, x, n, UNARY_GRAD_CHUNK, UNARY_MIN_PER_THREAD, grad_chunk, &job);
}

typedef struct map_job {
    amp_op op;
    float *y;
    const float *x;
    float exponent;
    bool gelu_tanh; /* AMP_OP_GELU: the tanh approximation */
} map_job;

static void map_range(void *arg, int64_t i0, int64_t i1, int thread_id) {
    (void)thread_id;
    const map_job *j = arg;
    float *y = j->y + i0;
    const float *xv = j->x + i0;
    const int64_t n = i1 - i0;
    switch (j->op) {
    case AMP_OP_RELU: /* x > 0 ? x : 0, but NaN stays NaN (fmaxf would drop it) */
        for (int64_t i = 0; i < n; i++) y[i] = (xv[i] > 0.0f || isnan(xv[i])) ? xv[i] : 0.0f;
        break;
    case AMP_OP_GELU:
        if (j->gelu_tanh) amp_vmath_active()->gelu_tanh(y, xv, (size_t)n);
        else amp_vmath_active()->gelu(y, xv, (size_t)n);
        break;
    case AMP_OP_TANH:
        amp_vmath_active()->tanh(y, xv, (size_t)n);
        break;
    case AMP_OP_SIGMOID:
        amp_vmath_active()->sigmoid(y, xv, (size_t)n);
        break;
    case AMP_OP_POW:
        for (int64_t i = 0; i < n; i++) y[i] = powf(xv[i], j->exponent);
        break;
    case AMP_OP_EXP:
        amp_vmath_active()->exp(y, xv, (size_t)n);
        break;
    default: /* log */
        for (int64_t i = 0; i < n; i++) y[i] = logf(xv[i]);
        break;
    }
}

/* gelu_tanh: AMP_OP_GELU's tanh approximation (recorded in the node's i[0]) */
static amp_tensor *unary_op(amp_ctx *ctx, amp_op op, amp_tensor *x, float exponent, bool gelu_tanh) {
    if (!amp_op_input_ok(ctx, op, x) || !amp_autocast_inputs(ctx, op, &x, 1)) return NULL;
    amp_tensor *out = amp_ctx_new_tensor(ctx, x->dtype, x->ndim, x->shape, true);
    if (!out) return NULL;
    const int64_t n = amp_tensor_numel(x);
    amp_half_bits hb = {0};
    const amp_elem_kernels *ek = amp_elem_active();
    if (op == AMP_OP_RELU && fast_relu_ok(ek, x, &hb)) {
        relu_run(ek, out->data, x->data, NULL, n, hb, false);
        amp_autograd_record(ctx, op, x->dtype, out, &x, 1, unary_backward);
        return out;
    }
    if (op == AMP_OP_RELU && fast_relu32_ok(ek, x)) {
        relu_run(ek, out->data, x->data, NULL, n, hb, true);
        amp_autograd_record(ctx, op, x->dtype, out, &x, 1, unary_backward);
        return out;
    }
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *xv = amp_f32_view(ctx, x);
    float *y = x->dtype == AMP_F32 ? out->data : amp_f32_scratch(ctx, n); /* fp32 results in place */
    if (!xv || !y) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    map_job job = {op, y, xv, exponent, gelu_tanh};
    amp_parallel_range(n, UNARY_MIN_PER_THREAD, 16, map_range, &job);
    if (x->dtype != AMP_F32) amp_store_f32(ctx, out, y);
    amp_scratch_release(ctx, m);
    amp_node *node = amp_autograd_record(ctx, op, x->dtype, out, &x, 1, unary_backward);
    if (node) node->f[0] = exponent, node->i[0] = gelu_tanh;
    return out;
}

static amp_tensor *unary(amp_ctx *ctx, amp_op op, amp_tensor *x, float exponent) {
    return unary_op(ctx, op, x, exponent, false);
}

amp_tensor *amp_relu(amp_ctx *ctx, amp_tensor *x) { return unary(ctx, AMP_OP_RELU, x, 0.0f); }
amp_tensor *amp_gelu(amp_ctx *ctx, amp_tensor *x) { return unary(ctx, AMP_OP_GELU, x, 0.0f); }
amp_tensor *amp_gelu_tanh(amp_ctx *ctx, amp_tensor *x) { return unary_op(ctx, AMP_OP_GELU, x, 0.0f, true); }
amp_tensor *amp_tanh(amp_ctx *ctx, amp_tensor *x) { return unary(ctx, AMP_OP_TANH, x, 0.0f); }
amp_tensor *amp_sigmoid(amp_ctx *ctx, amp_tensor *x) { return unary(ctx, AMP_OP_SIGMOID, x, 0.0f); }
amp_tensor *amp_pow(amp_ctx *ctx, amp_tensor *x, float exponent) { return unary(ctx, AMP_OP_POW, x, exponent); }
amp_tensor *amp_exp(amp_ctx *ctx, amp_tensor *x) { return unary(ctx, AMP_OP_EXP, x, 0.0f); }
amp_tensor *amp_log(amp_ctx *ctx, amp_tensor *x) { return unary(ctx, AMP_OP_LOG, x, 0.0f); }

/* ---- dropout ----
 * Element i is kept when the top 32 bits of the i-th draw from the dropout stream are >= p * 2^32,
 * so it is dropped with probability p (to within 2^-32) and the mask depends only on the stream's
 * state: the same ctx seed and the same sequence of dropout calls give the same masks. y = x * m with
 * m = 1/(1-p) or 0, a multiplication even where dropped, so NaN and inf inputs give NaN there as in
 * PyTorch (x * mask * scale) instead of vanishing. */

static bool mask_bit(const uint64_t *mask, int64_t i) { return (mask[i >> 6] >> (i & 63)) & 1u; }

static void dropout_backward(amp_ctx *ctx, amp_node *node) {
    const int64_t n = amp_tensor_numel(node->out);
    const uint64_t *mask = node->saved;
    const float scale = node->f[0];
    const float *g = amp_grad_out(ctx, node);
    float *dx = amp_f32_scratch(ctx, n);
    if (!g || !dx) return;
    for (int64_t i = 0; i < n; i++) dx[i] = g[i] * (mask_bit(mask, i) ? scale : 0.0f);
    amp_grad_accumulate(ctx, node->in[0], dx);
}

amp_tensor *amp_dropout(amp_ctx *ctx, amp_tensor *x, float p, bool training) {
    if (!amp_op_input_ok(ctx, AMP_OP_DROPOUT, x) || !amp_autocast_inputs(ctx, AMP_OP_DROPOUT, &x, 1)) return NULL;
    if (!(p >= 0.0f && p <= 1.0f)) /* NaN too */
        return amp_op_fail(ctx, AMP_OP_DROPOUT, "p = %g is outside [0, 1]", (double)p);
    /* Identity: x itself, like PyTorch's eval-mode dropout (no copy, no node; x keeps its own op). */
    if (!training || p == 0.0f) return x;
    amp_tensor *out = amp_ctx_new_tensor(ctx, x->dtype, x->ndim, x->shape, true);
    if (!out) return NULL;
    const int64_t n = amp_tensor_numel(x), words = (n + 63) / 64;
    /* p == 1 drops everything (scale 0 instead of 1/0) and draws nothing. */
    const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    /* p * 2^32 is exact in double; the cast drops a fraction only for p < 2^-9 (an error < 2^-32) */
    const uint64_t threshold = (uint64_t)ldexp((double)p, 32);
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *xv = amp_f32_view(ctx, x);
    float *y = x->dtype == AMP_F32 ? out->data : amp_f32_scratch(ctx, n);
    uint64_t *mask = amp_scratch_alloc(ctx, (size_t)(words > 0 ? words : 1) * sizeof *mask);
    if (!xv || !y || !mask) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    memset(mask, 0, (size_t)words * sizeof *mask);
    if (p < 1.0f)
        for (int64_t i = 0; i < n; i++)
            if ((amp_ctx_random(ctx, 0) >> 32) >= threshold) mask[i >> 6] |= (uint64_t)1 << (i & 63);
    for (int64_t i = 0; i < n; i++) y[i] = xv[i] * (mask_bit(mask, i) ? scale : 0.0f);
    if (x->dtype != AMP_F32) amp_store_f32(ctx, out, y);
    amp_node *node = amp_autograd_record(ctx, AMP_OP_DROPOUT, x->dtype, out, &x, 1, dropout_backward);
    if (node) {
        uint64_t *saved = amp_ctx_alloc(ctx, (size_t)(words > 0 ? words : 1) * sizeof *saved);
        if (!saved) {
            amp_scratch_release(ctx, m);
            return NULL;
        }
        memcpy(saved, mask, (size_t)words * sizeof *saved);
        node->saved = saved;
        node->f[0] = scale;
    }
    amp_scratch_release(ctx, m);
    return out;
}
