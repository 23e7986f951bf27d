/* Losses: cross-entropy over class logits and mean squared error. Both return a 0-dim fp32 tensor
 * (losses are fp32, as under PyTorch's autocast), computed in fp32 straight from inputs of any float
 * dtype (no cast node, under autocast too: loss_autocast); gradients reach the inputs in their own
 * dtypes. compute_dtype is the inputs' dtype (mse: the two promoted; fp32 in an autocast region),
 * following amp_tensor's definition; the arithmetic is fp32 throughout. An empty batch gives 0/0 =
 * NaN, as PyTorch's mean reduction does. */
#include <string.h>
#include <math.h>

#include "../core/parallel.h"
#include "../kernels/vecmath.h"
#include "grad_sink_gemm.h"
#include "op_util.h"

/* Autocast for a loss. Under the default policy (fp32, PyTorch's list) a narrow input is read in place
 * (amp_autocast_inputs_exact): the fp32 copy autocast would make is the values the fp32 arithmetic
 * here reads anyway, at the price of a tensor of the input's size kept until backward (the gpt's
 * logits: 4 MiB). The result's compute_dtype is fp32, as with the copy. */
static bool loss_autocast(amp_ctx *ctx, amp_op op, amp_tensor **in, int n, bool *in_place_fp32) {
    amp_dtype target;
    const bool ok = amp_autocast_inputs_exact(ctx, op, in, n, &target);
    *in_place_fp32 = target == AMP_F32;
    return ok;
}

/* ---- cross-entropy ----
 * loss = mean over n of logsumexp(x[n, :]) - x[n, t_n], with the log-softmax fused and stabilized by
 * each row's maximum. Saved for backward (arena): the targets (copied: the caller may reuse its array)
 * and, per row, the maximum and log(sum exp(x - max)), so softmax = exp((x - max) - logsum) is
 * recomputed from the logits without a second pass for the sums and without losing accuracy when the
 * logits are large (x - max is exact; max + logsum would round away the small part). */

typedef struct {
    int32_t *targets; /* [N] */
    float *stats;     /* [N][2]: max, log(sum exp(x - max)) */
} ce_saved;

enum { CE_CHUNK = 256, CE_ROWS = 8 }; /* the forward's exp buffer, CE_ROWS rows of CE_CHUNK, on the stack */

/* The loops over a row below work in blocks of CE_LANES with fixed-length inner loops (what gcc -O2
 * and clang vectorize) and a scalar tail; each element gets the same operations as in the plain loop.
 * The row maximum keeps one running maximum per lane ("if (v > m) m = v": NaN never replaces, as in the
 * plain loop) and then combines the lanes in order; the result is the same value, except that a
 * maximum of zero may come out as -0 where the plain loop would keep +0 or the reverse, which changes
 * no result: x - (+0) and x - (-0) are the same but for zeros, whose exp is 1 either way. */
enum { CE_LANES = 16 };

static float row_max(const float *row, int64_t C) {
    float m[CE_LANES];
    for (int l = 0; l < CE_LANES; l++) m[l] = -INFINITY;
    int64_t c = 0;
    for (; c + CE_LANES <= C; c += CE_LANES)
        for (int l = 0; l < CE_LANES; l++) m[l] = row[c + l] > m[l] ? row[c + l] : m[l];
    float mx = -INFINITY;
    for (int l = 0; l < CE_LANES; l++)
        if (m[l] > mx) mx = m[l];
    for (; c < C; c++)
        if (row[c] > mx) mx = row[c]; /* skips NaN, whose exp makes the sum NaN */
    return mx;
}

/* d[c] = x[c] - mx */
static void row_shift(float *restrict d, const float *restrict x, float mx, int64_t C) {
    int64_t c = 0;
    for (; c + CE_LANES <= C; c += CE_LANES)
        for (int l = 0; l < CE_LANES; l++) d[c + l] = x[c + l] - mx;
    for (; c < C; c++) d[c] = x[c] - mx;
}

/* From this many rows per thread the cross-entropy's rows are split between threads. */
enum { CE_MIN_ROWS_PER_THREAD = 64 };

typedef struct ce_bwd_job {
    const ce_saved *s;
    const float *x;
    int64_t C;
    float k;
    const amp_grad_chunks *gc; /* dx [N, C], opened whole: each task computes its rows there and sends them on */
} ce_bwd_job;

/* rows [n0, n1) of dx; rows are independent, so they may run on any thread */
static void ce_bwd_rows(void *arg, int64_t n0, int64_t n1, int thread_id) {
    (void)thread_id;
    const ce_bwd_job *j = arg;
    const ce_saved *s = j->s;
    const int64_t C = j->C;
    const float *x = j->x, k = j->k;
    const amp_vmath_kernels *vm = amp_vmath_active();
    for (int64_t n = n0; n < n1; n++) {
        const float mx = s->stats[2 * n], logsum = s->stats[2 * n + 1];
        float *d = amp_grad_chunk_at(j->gc, n * C);
        row_shift(d, x + n * C, mx, C);
        int64_t c = 0;
        for (; c + CE_LANES <= C; c += CE_LANES)
            for (int l = 0; l < CE_LANES; l++) d[c + l] -= logsum;
        for (; c < C; c++) d[c] -= logsum;
        vm->exp(d, d, (size_t)C); /* softmax p, kernels/vecmath.h */
        const int32_t tn = s->targets[n];
        const float dtn = (d[tn] - 1.0f) * k;
        for (c = 0; c + CE_LANES <= C; c += CE_LANES)
            for (int l = 0; l < CE_LANES; l++) d[c + l] *= k;
        for (; c < C; c++) d[c] *= k;
        d[tn] = dtn;
    }
    amp_grad_chunk_put_from(j->gc, amp_grad_chunk_at(j->gc, n0 * C), n0 * C, (n1 - n0) * C);
}

static void cross_entropy_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *logits = node->in[0];
    const ce_saved *s = node->saved;
    const int64_t N = node->i[0], C = node->i[1];
    const float *g = amp_grad_out(ctx, node);
    const float *x = amp_f32_view(ctx, logits);
    if (!g || !x) return;
    /* dx where the logits' gradient goes (grad_sink_gemm.h): computed in the new fp32 gradient itself,
     * else in one fp32 buffer whose row ranges each task sends on through the sink (a narrow or an
     * existing gradient), or without a sink through amp_grad_accumulate; the bits of
     * amp_grad_accumulate on the fp32 dx either way, without a copy of dx when it is the gradient */
    amp_grad_chunks gc;
    amp_grad_chunks_open(ctx, logits, N * C, N * C, &gc);
    if (!gc.buf) return;
    ce_bwd_job job = {s, x, C, g[0] / (float)N, &gc}; /* k: d mean / d loss_n, times the incoming gradient */
    amp_parallel_range(N, CE_MIN_ROWS_PER_THREAD, CE_ROWS, ce_bwd_rows, &job);
    amp_grad_chunks_close(ctx, logits, &gc);
}

typedef struct ce_fwd_job {
    const float *x;
    float *stats;
    int64_t C;
} ce_fwd_job;

/* Rows [r0, r1): each row's maximum and log(sum exp(x - max)) into stats. CE_ROWS rows at a time: each
 * row's exps are still summed one after another in increasing c (the order that defines the bits), but
 * the rows' chains are interleaved, so the adds overlap instead of each waiting for the previous one.
 * Rows are independent, so they may run on any thread. */
static void ce_fwd_rows(void *arg, int64_t r0, int64_t r1, int thread_id) {
    (void)thread_id;
    const ce_fwd_job *j = arg;
    const float *x = j->x;
    const int64_t C = j->C;
    float e[CE_ROWS][CE_CHUNK];
    const amp_vmath_kernels *vm = amp_vmath_active();
    for (int64_t n0 = r0; n0 < r1; n0 += CE_ROWS) {
        const int nr = r1 - n0 < CE_ROWS ? (int)(r1 - n0) : CE_ROWS;
        float mx[CE_ROWS], sum[CE_ROWS];
        for (int r = 0; r < nr; r++) mx[r] = row_max(x + (n0 + r) * C, C), sum[r] = 0.0f;
        for (int64_t c0 = 0; c0 < C; c0 += CE_CHUNK) { /* exp(x - max) in chunks, summed in order */
            const int64_t len = C - c0 < CE_CHUNK ? C - c0 : CE_CHUNK;
            for (int r = 0; r < nr; r++) {
                row_shift(e[r], x + (n0 + r) * C + c0, mx[r], len);
                vm->exp(e[r], e[r], (size_t)len);
            }
            if (nr == CE_ROWS)
                for (int64_t c = 0; c < len; c++)
                    for (int r = 0; r < CE_ROWS; r++) sum[r] += e[r][c];
            else
                for (int r = 0; r < nr; r++)
                    for (int64_t c = 0; c < len; c++) sum[r] += e[r][c];
        }
        for (int r = 0; r < nr; r++) j->stats[2 * (n0 + r)] = mx[r], j->stats[2 * (n0 + r) + 1] = logf(sum[r]);
    }
}

amp_tensor *amp_cross_entropy(amp_ctx *ctx, amp_tensor *logits, const int32_t *targets) {
    const amp_op op = AMP_OP_CROSS_ENTROPY;
    bool fp32_region;
    if (!amp_op_input_ok(ctx, op, logits) || !loss_autocast(ctx, op, &logits, 1, &fp32_region)) return NULL;
    if (logits->ndim != 2) {
        char sh[64];
        return amp_op_fail(ctx, op, "logits must be [N, C], not %s", amp_shape_str(logits, sh, sizeof sh));
    }
    const int64_t N = logits->shape[0], C = logits->shape[1];
    if (N > 0 && !targets) {
        amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "cross_entropy: targets is NULL");
        return NULL;
    }
    for (int64_t n = 0; n < N; n++)
        if (targets[n] < 0 || targets[n] >= C)
            return amp_op_fail(ctx, op, "target %d at index %lld is outside [0, %lld)", (int)targets[n],
                               (long long)n, (long long)C);
    amp_tensor *out = amp_ctx_new_tensor(ctx, AMP_F32, 0, NULL, true);
    if (!out) return NULL;
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *x = amp_f32_view(ctx, logits);
    float *stats = amp_f32_scratch(ctx, 2 * N);
    if (!x || !stats) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    ce_fwd_job job = {x, stats, C};
    amp_parallel_range(N, CE_MIN_ROWS_PER_THREAD, CE_ROWS, ce_fwd_rows, &job);
    float acc = 0.0f; /* the mean's sum in row order */
    for (int64_t n = 0; n < N; n++) /* -log_softmax(x)[n, t_n], as the rows' loop added it */
        acc += stats[2 * n + 1] - (x[n * C + targets[n]] - stats[2 * n]);
    *(float *)out->data = acc / (float)N;
    amp_node *node = amp_autograd_record(ctx, op, fp32_region ? AMP_F32 : logits->dtype, out, &logits, 1,
                                         cross_entropy_backward);
    if (node) {
        ce_saved *s = amp_ctx_alloc(ctx, sizeof *s);
        int32_t *t = amp_ctx_alloc(ctx, (size_t)(N > 0 ? N : 1) * sizeof *t);
        float *st = amp_ctx_alloc(ctx, (size_t)(N > 0 ? 2 * N : 1) * sizeof *st);
        if (!s || !t || !st) {
            amp_scratch_release(ctx, m);
            return NULL;
        }
        if (N > 0) {
            memcpy(t, targets, (size_t)N * sizeof *t);
            memcpy(st, stats, (size_t)(2 * N) * sizeof *st);
        }
        s->targets = t, s->stats = st;
        node->saved = s;
        node->i[0] = N, node->i[1] = C;
    }
    amp_scratch_release(ctx, m);
    return out;
}

/* ---- mean squared error ----
 * loss = mean((pred - target)^2); d/dpred = 2 (pred - target) / n * g, d/dtarget = its negative.
 * Backward reads both inputs (the node holds them); nothing else is saved. */

static void mse_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *pred = node->in[0], *target = node->in[1];
    const int64_t n = amp_tensor_numel(pred);
    const float *g = amp_grad_out(ctx, node);
    const float *p = amp_f32_view(ctx, pred), *t = amp_f32_view(ctx, target);
    float *dp = amp_f32_scratch(ctx, n), *dt = target->requires_grad ? amp_f32_scratch(ctx, n) : NULL;
    if (!g || !p || !t || !dp || (target->requires_grad && !dt)) return;
    const float k = 2.0f * g[0] / (float)n;
    for (int64_t i = 0; i < n; i++) dp[i] = (p[i] - t[i]) * k;
    if (dt)
        for (int64_t i = 0; i < n; i++) dt[i] = -dp[i];
    amp_grad_accumulate(ctx, pred, dp);
    if (dt) amp_grad_accumulate(ctx, target, dt);
}

amp_tensor *amp_mse_loss(amp_ctx *ctx, amp_tensor *pred, amp_tensor *target) {
    const amp_op op = AMP_OP_MSE_LOSS;
    if (!amp_op_input_ok(ctx, op, pred) || !amp_op_input_ok(ctx, op, target)) return NULL;
    amp_tensor *cast_in[2] = {pred, target};
    bool fp32_region;
    if (!loss_autocast(ctx, op, cast_in, 2, &fp32_region)) return NULL;
    pred = cast_in[0], target = cast_in[1];
    if (!amp_same_shape(pred, target)) {
        char a[64], b[64];
        return amp_op_fail(ctx, op, "pred %s and target %s must have the same shape",
                           amp_shape_str(pred, a, sizeof a), amp_shape_str(target, b, sizeof b));
    }
    amp_tensor *out = amp_ctx_new_tensor(ctx, AMP_F32, 0, NULL, true);
    if (!out) return NULL;
    const int64_t n = amp_tensor_numel(pred);
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *p = amp_f32_view(ctx, pred), *t = amp_f32_view(ctx, target);
    if (!p || !t) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    float acc = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float d = p[i] - t[i];
        acc += d * d;
    }
    *(float *)out->data = acc / (float)n;
    amp_scratch_release(ctx, m);
    amp_tensor *in[2] = {pred, target};
    amp_autograd_record(ctx, op, fp32_region ? AMP_F32 : amp_promote(pred->dtype, target->dtype), out, in, 2,
                        mse_backward);
    return out;
}
