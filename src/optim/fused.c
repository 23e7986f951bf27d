/* The sweeps over the optimizer's parameters: the plain step, global-norm clipping, and the fused
 * mixed-precision step.
 *
 * Fused step = two passes over flat memory (llm.c's shape, plus the inf/NaN check it lacks):
 *   1. read-only: every gradient g, read as fp32, gives u = g * inv_scale (the same fp32 multiply
 *      unscaling does) and the fp64 sum of u^2. Finite fp32 values square and add to a finite fp64
 *      sum (at most 2^64 terms of at most 2^256), while one inf or NaN, in g or made by the multiply
 *      (3e38 * 16), makes the sum inf or NaN: the sum is the inf/NaN check, with no branch per element.
 *   2. only when the sum is finite: clip_coef from the norm (torch's formula), then per element
 *      g' = (g * inv_scale) * clip_coef, which is stored back as the gradient, and the update with g';
 *      F16/BF16 parameters are rewritten from their masters.
 * A global norm needs every gradient before the first update can be scaled, and a skipped step must
 * leave everything untouched, so two passes are the minimum; pass 1 writes nothing. The arithmetic is
 * the arithmetic of unscale, then clip_grad_norm_, then step, so for fp32 gradients the fused step and
 * the three separate calls give the same bits.
 *
 * Unless backward has checked them already (amp_ctx_set_backward_grad_check, amp/tensor.h): a weight
 * gradient written whole by a GEMM's epilogue comes with a note of its largest |g|, and without
 * clipping nothing but the inf/NaN check needs pass 1, so the noted gradients skip it (the check is
 * the note's: largest |g| times inv_scale finite, fp32 rounding being monotonic) and the update's
 * pass computes their segments' sums before it changes each block (pass 1's kernel on pass 1's
 * blocks: the same bits). That saves a read of every noted gradient from memory per step.
 *
 * Both passes run over fixed segments (optim_internal.h), on the thread pool from OPTIM_PARALLEL_MIN
 * elements on; the norm's per-segment sums are added in segment order, so no result depends on the
 * thread count. The element loops come from the active path's kernel table (kernels/update_kernels.h),
 * each the scalar loop's twin bit for bit; the scalar loops call libm's fmaf, the SIMD ones an FMA
 * instruction. Beyond the caches the loops are bound by memory, so a second thread gains little. */
#include <math.h>
#include <string.h>

#include "../core/parallel.h"
#include "amp/formats.h"
#include "amp/status.h"
#include "optim_internal.h"
#include "optim_shard.h"
#include "../kernels/convert_kernels.h"
#include "../tensor/ctx_internal.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* The gradient elements [off, off + n) of q as fp32: in place when F32, else converted into buf. */
static const float *grad_fp32(const optim_param *q, int64_t off, int64_t n, float *buf) {
    const amp_dtype d = q->grad->dtype;
    if (d == AMP_F32) return (const float *)q->grad->data + off;
    amp_convert(buf, AMP_F32, (const unsigned char *)q->grad->data + (size_t)off * amp_dtype_size(d), d, (size_t)n);
    return buf;
}

void optim_settle_grads(const amp_optimizer *opt) { amp_ctx_settle_grads(opt->ctx); }

/* Runs fn over every segment: on the thread pool for large optimizers, in this thread for small ones
 * (waking the pool costs more than a few hundred thousand elements take). Either way the same bits. */
static void for_each_segment(const amp_optimizer *opt, amp_task_fn fn, void *arg) {
    optim_settle_grads(opt);
    if (opt->total_numel < OPTIM_PARALLEL_MIN) {
        for (size_t t = 0; t < opt->n_segments; t++) fn(arg, (int64_t)t, 0);
    } else {
        amp_parallel_for((int64_t)opt->n_segments, fn, arg);
    }
}

/* ---- pass 1: sums of squares ---- */

typedef struct norm_job {
    amp_optimizer *opt;
    const amp_update_kernels *kernels;
    float inv_scale;
    bool skip_noted; /* leave the segments of noted gradients to the update (see the fused step) */
} norm_job;

/* Pass 1 reads every gradient once, most of them from memory (the backward wrote them out of cache)
 * and does little with each, so it runs at the speed one core brings lines in; the hardware
 * prefetcher alone kept too few in flight. Each block therefore asks for the gradient bytes
 * OPTIM_PREFETCH_AHEAD elements further on, into L2, within the parameter (no address past its end is
 * formed). A hint: no value changes; any distance from 2048 to 8192 elements does alike. The update
 * pass reads more streams per element, and the same prefetches gained nothing there. */
enum { OPTIM_PREFETCH_AHEAD = 4096 };

static void prefetch_grad_block(const optim_param *q, int64_t off, int64_t n) {
    const int64_t ahead = off + OPTIM_PREFETCH_AHEAD;
    if (ahead >= q->numel) return;
    const int64_t m = q->numel - ahead < n ? q->numel - ahead : n;
    const size_t es = amp_dtype_size(q->grad->dtype);
    const unsigned char *p = (const unsigned char *)q->grad->data + (size_t)ahead * es;
    for (size_t b = 0; b < (size_t)m * es; b += 64) __builtin_prefetch(p + b, 0, 2); /* 2: into L2 (PREFETCHT1) */
}

/* A segment's lanes added pairwise, in a fixed tree: (0+1), (2+3), ... then pairs of those, and so on. */
static double fold_lanes(double acc[AMP_UPDATE_LANES]) {
    for (int width = AMP_UPDATE_LANES / 2; width >= 1; width /= 2)
        for (int l = 0; l < width; l++) acc[l] = acc[2 * l] + acc[2 * l + 1];
    return acc[0];
}

static void norm_segment(void *arg, int64_t task, int thread_id) {
    (void)thread_id;
    const norm_job *job = arg;
    const optim_segment *seg = &job->opt->segments[task];
    const optim_param *q = &job->opt->params[seg->param];
    if (job->skip_noted && q->grad_noted) return;
    float buf[OPTIM_BLOCK];
    /* Fixed lanes (element i of the segment goes to lane i % AMP_UPDATE_LANES; blocks are multiples of it)
     * for instruction-level parallelism and SIMD; the order is fixed, so the bits are too. */
    double acc[AMP_UPDATE_LANES] = {0};
    for (int64_t off = seg->start; off < seg->start + seg->len; off += OPTIM_BLOCK) {
        const int64_t n = seg->start + seg->len - off < OPTIM_BLOCK ? seg->start + seg->len - off : OPTIM_BLOCK;
        prefetch_grad_block(q, off, n);
        job->kernels->sum_squares(grad_fp32(q, off, n, buf), n, job->inv_scale, acc);
    }
    job->opt->partial[task] = fold_lanes(acc);
}

/* The per-segment sums added in segment order. */
static double partials_sum(const amp_optimizer *opt) {
    double sum = 0.0;
    for (size_t s = 0; s < opt->n_segments; s++) sum += opt->partial[s];
    return sum;
}

/* The fp64 sum of (g * inv_scale)^2 over every gradient: finite iff every g * inv_scale is. */
static double sum_of_squares(amp_optimizer *opt, float inv_scale) {
    norm_job job = {.opt = opt, .kernels = amp_update_active(), .inv_scale = inv_scale, .skip_noted = false};
    for_each_segment(opt, norm_segment, &job);
    return partials_sum(opt);
}

/* Sharded training (optim_shard.h): this optimizer's own gradients' fp64 sum of squares (each
 * rank's share of the global norm). */
double optim_grad_sum_of_squares(amp_optimizer *opt) { return sum_of_squares(opt, 1.0f); }

/* torch.nn.utils.clip_grad_norm_: min(1, max_norm / (total_norm + 1e-6)) in fp32, where total_norm is
 * the fp32 norm (here: the fp64 norm rounded once). max_norm <= 0 means no clipping. */
static float clip_coef(double norm, float max_norm) {
    if (!(max_norm > 0.0f)) return 1.0f;
    const float total = (float)norm;
    float coef = max_norm / (total + (float)OPTIM_CLIP_EPS);
    if (isinf(total)) coef = (float)((double)max_norm / norm); /* finite gradients past fp32's range */
    return coef < 1.0f ? coef : 1.0f;
}

/* ---- pass 2: the update ---- */

typedef struct apply_job {
    amp_optimizer *opt;
    const amp_update_kernels *kernels;
    const amp_convert_kernels *convert; /* the weight copies' encode_stream */
    bool scale;       /* g' = (g * inv_scale) * coef, stored back as the gradient */
    bool after_pass1; /* the fused step: pass 1 has just read every gradient */
    bool norm_noted;  /* the fused step: the noted gradients' segments' partial sums are computed here */
    float inv_scale, coef;
    amp_sgd_scalars sgd;
    amp_adam_scalars adam;
    uint64_t sr_key;
} apply_job;

/* F16/BF16 parameters [off, off + n) rewritten from their updated masters p; for an fp32 parameter
 * with a cast copy, the copy from the new values (amp_tensor_read's conversion: the cast's bits),
 * while the block is in cache; a copy of AMP_STREAM_MIN_BYTES or more by the encode that streams
 * past the caches: the next forward reads the copies only after the whole update (convert_kernels.h's
 * encode_stream; apply_segment fences once at its end). */
static void store_param(const apply_job *job, const optim_param *q, amp_dtype pd, const float *p, int64_t off,
                        int64_t n) {
    if (pd == AMP_F32) {
        if (q->cast_copy) {
            void *dst = (unsigned char *)q->cast_copy + (size_t)off * amp_dtype_size(q->copy_dtype);
            if (q->copy_dtype == AMP_F32 || (unsigned)q->copy_dtype >= AMP_DTYPE_COUNT ||
                (size_t)q->numel * amp_dtype_size(q->copy_dtype) < AMP_STREAM_MIN_BYTES)
                amp_convert(dst, q->copy_dtype, p, AMP_F32, (size_t)n);
            else
                job->convert->encode_stream[q->copy_dtype](dst, p, (size_t)n);
        }
        return;
    }
    void *dst = (unsigned char *)q->tensor->data + (size_t)off * amp_dtype_size(pd);
    if (job->opt->config.stochastic_rounding)
        optim_sr_write(dst, pd, p, n, job->sr_key, q->first_index + (uint64_t)off);
    else
        amp_convert(dst, pd, p, AMP_F32, (size_t)n);
}

static void apply_segment(void *arg, int64_t task, int thread_id) {
    (void)thread_id;
    const apply_job *job = arg;
    const amp_optimizer *opt = job->opt;
    /* After pass 1, last segment first: pass 1 has just read the gradients front to back, so the last
     * ones are still in cache for the first updates (segments are independent: no bits change). */
    const size_t si = job->after_pass1 ? opt->n_segments - 1 - (size_t)task : (size_t)task;
    const optim_segment *seg = &opt->segments[si];
    const optim_param *q = &opt->params[seg->param];
    const amp_dtype gd = q->grad->dtype, pd = q->tensor->dtype;
    float buf[OPTIM_BLOCK];
    /* pass 1's sum for this segment, the same kernel on the same blocks before each is updated: its bits */
    const bool norm_here = job->norm_noted && q->grad_noted;
    double acc[AMP_UPDATE_LANES] = {0};
    for (int64_t off = seg->start; off < seg->start + seg->len; off += OPTIM_BLOCK) {
        const int64_t n = seg->start + seg->len - off < OPTIM_BLOCK ? seg->start + seg->len - off : OPTIM_BLOCK;
        float *p = q->master + off;
        float *mom = q->momentum ? q->momentum + off : NULL;
        if (norm_here) job->kernels->sum_squares(grad_fp32(q, off, n, buf), n, job->inv_scale, acc);
        if (job->scale && gd == AMP_F32 && opt->config.kind == AMP_OPTIM_SGD) {
            /* the unscale stored back and the update in one sweep over the gradient */
            job->kernels->sgd_scaled(&job->sgd, p, (float *)q->grad->data + off, job->inv_scale, job->coef, mom, n);
            store_param(job, q, pd, p, off, n);
            continue;
        }
        const float *g = grad_fp32(q, off, n, buf);
        if (job->scale) {
            /* fp32 gradients are scaled in place; others in buf, then stored back rounded. */
            float *u = gd == AMP_F32 ? (float *)q->grad->data + off : buf;
            job->kernels->scale(u, g, n, job->inv_scale, job->coef);
            if (gd != AMP_F32)
                amp_convert((unsigned char *)q->grad->data + (size_t)off * amp_dtype_size(gd), gd, u, AMP_F32,
                            (size_t)n);
            g = u;
        }
        if (opt->config.kind == AMP_OPTIM_SGD)
            job->kernels->sgd(&job->sgd, p, g, mom, n);
        else
            job->kernels->adam(&job->adam, p, g, q->exp_avg + off, q->exp_avg_sq + off, n);
        store_param(job, q, pd, p, off, n);
    }
    if (norm_here) opt->partial[si] = fold_lanes(acc);
    if (q->cast_copy) job->convert->stream_fence(); /* encode_stream's stores, before the segment ends */
}

static void apply(amp_optimizer *opt, bool after_pass1, bool norm_noted, bool scale, float inv_scale, float coef) {
    apply_job job = {.opt = opt,
                     .kernels = amp_update_active(),
                     .convert = amp_convert_kernels_for(amp_isa_active()),
                     .scale = scale,
                     .after_pass1 = after_pass1,
                     .norm_noted = norm_noted,
                     .inv_scale = inv_scale,
                     .coef = coef};
    if (opt->config.kind == AMP_OPTIM_SGD)
        optim_sgd_scalars_init(opt, &job.sgd);
    else
        optim_adam_scalars_init(opt, &job.adam);
    job.sr_key = optim_sr_key(opt->config.seed, (uint64_t)opt->step_count);
    /* the cast copies to rewrite with the masters (amp_ctx_keep_cast_copies), then every parameter's
     * version advanced: its values change, and a copy written here holds the new ones */
    const bool live = opt->ctx->copy_memory && amp_ctx_graph_live(opt->ctx);
    for (size_t i = 0; i < opt->n_params; i++) {
        optim_param *q = &opt->params[i];
        q->cast_copy = q->tensor->dtype == AMP_F32 ? amp_ctx_cast_copy_for_update(opt->ctx, q->tensor, live, &q->copy_dtype)
                                                   : NULL;
    }
    for_each_segment(opt, apply_segment, &job);
    for (size_t i = 0; i < opt->n_params; i++) {
        optim_param *q = &opt->params[i];
        amp_ctx_cast_copy_written(opt->ctx, q->tensor, q->cast_copy != NULL);
        q->cast_copy = NULL;
    }
    opt->step_count++;
}

int amp_optimizer_step(amp_optimizer *opt) {
    if (!opt) return AMP_ERR_NULL_POINTER;
    apply(opt, false, false, false, 1.0f, 1.0f);
    return AMP_OK;
}

/* ---- clipping on its own ---- */

typedef struct clip_job {
    amp_optimizer *opt;
    const amp_update_kernels *kernels;
    float coef;
} clip_job;

static void clip_segment(void *arg, int64_t task, int thread_id) {
    (void)thread_id;
    const clip_job *job = arg;
    const optim_segment *seg = &job->opt->segments[task];
    const optim_param *q = &job->opt->params[seg->param];
    const amp_dtype gd = q->grad->dtype;
    float buf[OPTIM_BLOCK];
    for (int64_t off = seg->start; off < seg->start + seg->len; off += OPTIM_BLOCK) {
        const int64_t n = seg->start + seg->len - off < OPTIM_BLOCK ? seg->start + seg->len - off : OPTIM_BLOCK;
        const float *g = grad_fp32(q, off, n, buf);
        float *u = gd == AMP_F32 ? (float *)q->grad->data + off : buf;
        job->kernels->scale(u, g, n, job->coef, 1.0f); /* g * coef * 1: the same bits as g * coef */
        if (gd != AMP_F32)
            amp_convert((unsigned char *)q->grad->data + (size_t)off * amp_dtype_size(gd), gd, u, AMP_F32, (size_t)n);
    }
}

double amp_optimizer_clip_grad_norm(amp_optimizer *opt, float max_norm) {
    if (!opt) return NAN;
    const bool given = opt->norm_sum_given; /* optim_shard_set_norm_sum: this call only */
    opt->norm_sum_given = false;
    const double norm = sqrt(given ? opt->norm_sum : sum_of_squares(opt, 1.0f));
    if (!isfinite(norm)) return norm;
    const float coef = clip_coef(norm, max_norm);
    if (coef < 1.0f) {
        clip_job job = {.opt = opt, .kernels = amp_update_active(), .coef = coef};
        for_each_segment(opt, clip_segment, &job);
        amp_ctx_grads_changed(opt->ctx);
    }
    return norm;
}

/* ---- the fused step ---- */

/* The backward check's notes (amp_ctx_set_backward_grad_check) for this step: each parameter's
 * grad_noted and grad_absmax. Returns (and keeps in noted_numel) how many elements they cover. */
static int64_t take_notes(amp_optimizer *opt) {
    opt->noted_numel = 0;
    for (size_t i = 0; i < opt->n_params; i++) {
        optim_param *q = &opt->params[i];
        uint32_t b = 0;
        q->grad_noted = q->grad->dtype == AMP_F32 &&
                        amp_ctx_grad_noted(opt->ctx, amp_ctx_param_index(opt->ctx, q->tensor), &b);
        q->grad_absmax = b;
        opt->noted_numel += q->grad_noted ? q->numel : 0;
    }
    return opt->noted_numel;
}

/* Whether every noted gradient times inv_scale is finite, from its note: fp32 rounding is monotonic,
 * so the largest |g * inv_scale| is the largest |g| times inv_scale, rounded. *nan: a NaN among them. */
static bool notes_finite(const amp_optimizer *opt, float inv_scale, bool *nan) {
    bool finite = true;
    for (size_t i = 0; i < opt->n_params; i++) {
        const optim_param *q = &opt->params[i];
        if (!q->grad_noted) continue;
        float m;
        memcpy(&m, &q->grad_absmax, sizeof m);
        if (q->grad_absmax > 0x7f800000u) *nan = true;
        if (!isfinite(m * inv_scale)) finite = false;
    }
    return finite;
}

int optim_fused_step(amp_optimizer *opt, float inv_scale, float max_norm, bool want_norm, amp_fused_result *result) {
    if (result) *result = (amp_fused_result){.found_inf = false, .grad_norm = 0.0, .clip_coef = 1.0f};
    if (!opt) return AMP_ERR_NULL_POINTER;
    if (isnan(max_norm)) return AMP_ERR_INVALID_ARGUMENT;
    const bool given = opt->norm_sum_given; /* optim_shard_set_norm_sum: this step only */
    const double given_sum = opt->norm_sum;
    opt->norm_sum_given = false;
    /* Gradients whose inf/NaN check backward made as it wrote them (their notes) skip pass 1: without
     * clipping nothing but that check needs the norm before the update, and the update's own pass
     * computes their segments' sums (pass 1's kernel on pass 1's blocks: the same bits). */
    opt->noted_numel = 0;
    const bool noted = opt->ctx->backward_grad_check && !(max_norm > 0.0f) && isfinite(inv_scale) && take_notes(opt) > 0;
    double sum;
    if (noted) {
        norm_job job = {.opt = opt, .kernels = amp_update_active(), .inv_scale = inv_scale, .skip_noted = true};
        for_each_segment(opt, norm_segment, &job);
        bool nan = false, finite = notes_finite(opt, inv_scale, &nan);
        for (size_t s = 0; s < opt->n_segments; s++) {
            if (opt->params[opt->segments[s].param].grad_noted) continue;
            nan |= isnan(opt->partial[s]);
            finite &= isfinite(opt->partial[s]) != 0;
        }
        sum = finite ? 0.0 : nan ? (double)NAN : (double)INFINITY; /* what pass 1's whole sum would be */
    } else {
        sum = sum_of_squares(opt, inv_scale);
    }
    if (!isfinite(sum)) {
        if (result) *result = (amp_fused_result){.found_inf = true, .grad_norm = sqrt(sum), .clip_coef = 1.0f};
        return AMP_OK;
    }
    if (given && !noted) sum = given_sum; /* sharded: the norm over every rank's slice */
    const float coef = noted ? 1.0f : clip_coef(sqrt(sum), max_norm);
    const bool scale = inv_scale != 1.0f || coef != 1.0f; /* (g * 1) * 1 is g: nothing to store */
    /* the noted gradients' share of the norm only where someone reads the norm: without clipping it
     * decides nothing (the check is the notes'), and it is a sum of squares over most of the gradients */
    const bool norm_noted = noted && want_norm;
    apply(opt, !noted, norm_noted, scale, inv_scale, coef);
    if (norm_noted) sum = partials_sum(opt);
    if (scale) amp_ctx_grads_changed(opt->ctx);
    const double norm = noted && !want_norm ? (double)NAN : sqrt(sum);
    if (result) *result = (amp_fused_result){.found_inf = false, .grad_norm = norm, .clip_coef = coef};
    return AMP_OK;
}

int amp_optimizer_fused_step(amp_optimizer *opt, float inv_scale, float max_norm, amp_fused_result *result) {
    return optim_fused_step(opt, inv_scale, max_norm, result != NULL, result);
}
