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
 * logits are large (x - max is exact; max + logsum would round away the small part). The two passes
 * over a row are kernels/vecmath.h's ce_stats and ce_grad (fused on AVX-512, reading bf16 logits in
 * place: no fp32 copy of the logits, and no round trip of the gradient through fp32). */

typedef struct {
    int32_t *targets; /* [N] */
    float *stats;     /* [N][2]: max, log(sum exp(x - max)) */
} ce_saved;

/* The logits' rows as the row kernels read them (vecmath.h ce_stats, ce_grad): in place when fp32 or
 * bf16 and contiguous, else an fp32 copy (f16: the f16 -> fp32 conversion, exact). */
typedef struct ce_rows {
    const void *x;
    bool bf16;
} ce_rows;

static bool ce_rows_of(amp_ctx *ctx, const amp_tensor *logits, ce_rows *r) {
    const bool in_place = amp_tensor_is_contiguous(logits) && (logits->dtype == AMP_F32 || logits->dtype == AMP_BF16);
    r->bf16 = in_place && logits->dtype == AMP_BF16;
    r->x = in_place ? logits->data : amp_f32_view(ctx, logits);
    return r->x != NULL;
}

static const void *ce_row(const ce_rows *r, int64_t n, int64_t C) {
    return (const char *)r->x + (size_t)(n * C) * (r->bf16 ? sizeof(uint16_t) : sizeof(float));
}

/* From this many rows per thread the cross-entropy's rows are split between threads; the backward's
 * gradient goes on in chunks of CE_ROWS rows. */
enum { CE_MIN_ROWS_PER_THREAD = 64, CE_ROWS = 8 };

typedef struct ce_bwd_job {
    const ce_saved *s;
    ce_rows x;
    int64_t C;
    float k;
} ce_bwd_job;

/* amp_grad_chunk_fn: the rows of elements [off, off + len) (whole rows: chunks of CE_ROWS rows) */
static void ce_bwd_chunk(const void *arg, float *dst, int64_t off, int64_t len) {
    const ce_bwd_job *j = arg;
    const ce_saved *s = j->s;
    const int64_t C = j->C;
    const amp_vmath_kernels *vm = amp_vmath_active();
    for (int64_t n = off / C; n < (off + len) / C; n++) {
        const float mx = s->stats[2 * n], logsum = s->stats[2 * n + 1];
        float *d = dst + (n * C - off);
        const void *x = ce_row(&j->x, n, C);
        if (vm->ce_grad) vm->ce_grad(d, x, j->x.bf16, (size_t)C, mx, logsum, j->k, (size_t)s->targets[n]);
        else amp_vmath_ce_grad_composed(vm, d, x, j->x.bf16, (size_t)C, mx, logsum, j->k, (size_t)s->targets[n]);
    }
}

static void cross_entropy_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *logits = node->in[0];
    const ce_saved *s = node->saved;
    const int64_t N = node->i[0], C = node->i[1];
    const float *g = amp_grad_out(ctx, node);
    ce_bwd_job job = {s, {NULL, false}, C, 0.0f};
    if (!g || !ce_rows_of(ctx, logits, &job.x)) return;
    job.k = g[0] / (float)N; /* d mean / d loss_n, times the incoming gradient */
    /* dx where the logits' gradient goes (grad_sink_gemm.h), CE_ROWS rows at a time: into the new fp32
     * gradient itself, or through a thread's own chunk buffer sent on at once (a narrow or an existing
     * gradient: the bf16 logits' gradient is rounded while in cache, with no fp32 copy of dx written
     * and read back) */
    const int64_t row = C > 0 ? C : 1; /* an empty gradient still goes where it goes */
    amp_grad_chunks_parallel(ctx, logits, N * C, CE_ROWS * row, CE_MIN_ROWS_PER_THREAD * row, ce_bwd_chunk, &job);
}

typedef struct ce_fwd_job {
    ce_rows x;
    float *stats;
    int64_t C;
} ce_fwd_job;

/* Rows [r0, r1): each row's maximum and log(sum exp(x - max)) into stats. Rows are independent, so
 * they may run on any thread. */
static void ce_fwd_rows(void *arg, int64_t r0, int64_t r1, int thread_id) {
    (void)thread_id;
    const ce_fwd_job *j = arg;
    const int64_t C = j->C;
    const amp_vmath_kernels *vm = amp_vmath_active();
    for (int64_t n = r0; n < r1; n++) {
        float mx, sum;
        const void *x = ce_row(&j->x, n, C);
        if (vm->ce_stats) vm->ce_stats(x, j->x.bf16, (size_t)C, &mx, &sum);
        else amp_vmath_ce_stats_composed(vm, x, j->x.bf16, (size_t)C, &mx, &sum);
        j->stats[2 * n] = mx, j->stats[2 * n + 1] = logf(sum);
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
    ce_fwd_job job = {{NULL, false}, amp_f32_scratch(ctx, 2 * N), C};
    if (!ce_rows_of(ctx, logits, &job.x) || !job.stats) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    const float *stats = job.stats;
    amp_parallel_range(N, CE_MIN_ROWS_PER_THREAD, 1, ce_fwd_rows, &job);
    float acc = 0.0f; /* the mean's sum in row order */
    for (int64_t n = 0; n < N; n++) /* -log_softmax(x)[n, t_n] */
        acc += stats[2 * n + 1] - (amp_vmath_ce_at(job.x.x, job.x.bf16, (size_t)(n * C + targets[n])) - stats[2 * n]);
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
