/* Layer norm and batch norm. Statistics (means, variances, reciprocal standard deviations) and every
 * sum are fp32 whatever the compute dtype; the result is rounded once to it. The compute dtype is x's:
 * weight and bias may have another dtype (PyTorch allows fp32 affine parameters with bf16/fp16 inputs)
 * and are read exactly in fp32; batch norm's running statistics are state, not operands, read and
 * written in their own dtype. */
#include <math.h>
#include <string.h>

#include "../core/parallel.h"
#include "../kernels/elem_kernels.h"
#include "grad_sink_gemm.h"
#include "op_util.h"

/* Copies n floats from scratch into the arena (data a node keeps until backward). */
static float *keep_floats(amp_ctx *ctx, const float *src, int64_t n) {
    float *dst = amp_ctx_alloc(ctx, (size_t)(n > 0 ? n : 1) * sizeof *dst);
    if (dst && n > 0) memcpy(dst, src, (size_t)n * sizeof *dst);
    return dst;
}

/* The fp32 destination of a forward pass: the output itself when it is fp32 (it is contiguous),
 * else scratch that amp_store_f32 rounds into it. */
static float *f32_result(amp_ctx *ctx, amp_tensor *out) {
    return out->dtype == AMP_F32 ? out->data : amp_f32_scratch(ctx, amp_tensor_numel(out));
}

/* An affine parameter (weight or bias) must be 1-D of length n. */
static bool affine_ok(amp_ctx *ctx, amp_op op, const amp_tensor *p, const char *what, int64_t n) {
    if (!p) return true;
    if (!amp_op_input_ok(ctx, op, p)) return false;
    if (p->ndim != 1 || p->shape[0] != n) {
        char s[64];
        amp_op_fail(ctx, op, "%s %s must have shape [%lld]", what, amp_shape_str(p, s, sizeof s), (long long)n);
        return false;
    }
    return true;
}

/* ---- layer norm ----
 * x [rows, D] (leading dims flattened), per row: mean, var = mean((x - mean)^2) (biased, two passes; the
 * sums here and in backward are the row kernels' of kernels/elem_kernels.h, in their 16-lane order),
 * rstd = 1/sqrt(var + eps), y = (x - mean) * rstd * w + b. Backward, with xhat = (x - mean) * rstd and
 * gw = dy * w: dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), dw = sum_rows dy * xhat,
 * db = sum_rows dy. */

typedef struct {
    float *mean, *rstd; /* [rows] */
} norm_saved;

/* values per block of dx: 64 KiB of fp32, in L2 */
enum { NORM_GRAD_CHUNK = 16384 };
/* Values per thread from which layer norm's passes split between threads: rows for the forward and
 * dx, columns (each over every row) for dw and db. Each row's and each column's arithmetic is the same
 * on any thread, so the bits do not depend on the split. Single-threaded, the other threads would
 * wait through the gpt's norms. */
enum { NORM_MIN_PER_THREAD = 32768 };

/* rows per thread (at least one) for NORM_MIN_PER_THREAD values in rows of d */
static int64_t norm_min_rows(int64_t d) { return d > 0 && d < NORM_MIN_PER_THREAD ? NORM_MIN_PER_THREAD / d : 1; }

typedef struct ln_grad_job {
    const amp_elem_kernels *ek;
    const float *g, *x, *w;
    const norm_saved *s;
    int64_t rows, d;
    float *dw, *db;
} ln_grad_job;

/* dx of rows [r0, r1) into dx (row r at dx + (r - r0) d): each row's two sums, then its dx */
static void ln_dx_rows(const ln_grad_job *j, float *dx, int64_t r0, int64_t r1) {
    const int64_t d = j->d;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * d, *gr = j->g + r * d;
        const float mean = j->s->mean[r], rstd = j->s->rstd[r];
        float sums[2]; /* sum gw, sum gw * xhat, in the kernels' 16-lane order */
        j->ek->norm_grad_sums(sums, gr, xr, j->w, mean, rstd, (size_t)d);
        j->ek->norm_grad_apply(dx + (r - r0) * d, NULL, NULL, gr, xr, j->w, mean, rstd, sums[0] / (float)d,
                               sums[1] / (float)d, (size_t)d);
    }
}

/* amp_grad_chunk_fn: dx of the whole rows in values [off, off + len) */
static void ln_dx_chunk(const void *arg, float *dst, int64_t off, int64_t len) {
    const ln_grad_job *j = arg;
    ln_dx_rows(j, dst, off / j->d, (off + len) / j->d);
}

/* dw and db of columns [c0, c1), every row added in order: norm_grad_apply's own dw and db arithmetic
 * on the columns' part of each row (elementwise), so the bits of the one-pass loop */
static void ln_dwdb_cols(void *arg, int64_t c0, int64_t c1, int thread_id) {
    (void)thread_id;
    const ln_grad_job *j = arg;
    const int64_t d = j->d;
    for (int64_t r = 0; r < j->rows; r++)
        j->ek->norm_grad_apply(NULL, j->dw ? j->dw + c0 : NULL, j->db ? j->db + c0 : NULL, j->g + r * d + c0,
                               j->x + r * d + c0, NULL, j->s->mean[r], j->s->rstd[r], 0.0f, 0.0f, (size_t)(c1 - c0));
}

/* saved i[]: rows, D */
static void layer_norm_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const int64_t rows = node->i[0], d = node->i[1];
    const norm_saved *s = node->saved;
    const float *g = amp_grad_out(ctx, node), *xv = amp_f32_view(ctx, x);
    const float *wv = w ? amp_f32_view(ctx, w) : NULL;
    const bool need_dx = x->requires_grad, need_dw = w && w->requires_grad, need_db = b && b->requires_grad;
    float *dw = need_dw ? amp_f32_scratch(ctx, d) : NULL, *db = need_db ? amp_f32_scratch(ctx, d) : NULL;
    if (!g || !xv || (w && !wv) || ctx->status != AMP_OK) return;
    if (dw) memset(dw, 0, (size_t)d * sizeof *dw);
    if (db) memset(db, 0, (size_t)d * sizeof *db);
    /* dx goes where x's gradient goes, a block of rows at a time while in cache (grad_sink_gemm.h) */
    const int64_t block = d > 0 && d < NORM_GRAD_CHUNK ? NORM_GRAD_CHUNK / d : 1; /* rows per block */
    if (amp_parallel_max_threads() > 1 && rows * d >= 2 * NORM_MIN_PER_THREAD) {
        /* on the pool: dx by rows, then dw and db by columns (a second read of g and x, which one
         * thread's single pass below saves) */
        ln_grad_job job = {amp_elem_active(), g, xv, wv, s, rows, d, dw, db};
        if (need_dx) amp_grad_chunks_parallel(ctx, x, rows * d, block * d, norm_min_rows(d) * d, ln_dx_chunk, &job);
        if ((dw || db) && ctx->status == AMP_OK)
            amp_parallel_range(d, NORM_MIN_PER_THREAD / (rows > 0 ? rows : 1) + 1, 16, ln_dwdb_cols, &job);
        if (dw) amp_grad_accumulate(ctx, w, dw);
        if (db) amp_grad_accumulate(ctx, b, db);
        return;
    }
    amp_grad_chunks gc = {.buf = NULL};
    if (need_dx) {
        amp_grad_chunks_open(ctx, x, rows * d, block * d, &gc);
        if (!gc.buf) {
            amp_grad_chunks_close(ctx, x, &gc);
            return;
        }
    }
    const amp_elem_kernels *ek = amp_elem_active();
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
        const int64_t r1 = rows - r0 < block ? rows : r0 + block;
        float *dxb = need_dx ? amp_grad_chunk_at(&gc, r0 * d) : NULL;
        for (int64_t r = r0; r < r1; r++) {
            const float *xr = xv + r * d, *gr = g + r * d;
            const float mean = s->mean[r], rstd = s->rstd[r];
            float a = 0.0f, c = 0.0f;
            if (need_dx) {
                float sums[2]; /* sum gw, sum gw * xhat, in the kernels' 16-lane order */
                ek->norm_grad_sums(sums, gr, xr, wv, mean, rstd, (size_t)d);
                a = sums[0] / (float)d, c = sums[1] / (float)d;
            }
            ek->norm_grad_apply(dxb ? dxb + (r - r0) * d : NULL, dw, db, gr, xr, wv, mean, rstd, a, c, (size_t)d);
        }
        if (need_dx) amp_grad_chunk_put(&gc, r0 * d, (r1 - r0) * d);
    }
    if (need_dx) amp_grad_chunks_close(ctx, x, &gc);
    if (dw) amp_grad_accumulate(ctx, w, dw);
    if (db) amp_grad_accumulate(ctx, b, db);
}

typedef struct ln_fwd_job {
    const amp_elem_kernels *ek;
    const float *x, *w, *b;
    float *y, *mean, *rstd;
    int64_t d;
    float eps;
} ln_fwd_job;

/* rows [r0, r1): the statistics, in the kernels' 16-lane order (kernels/elem_kernels.h), and y */
static void ln_fwd_rows(void *arg, int64_t r0, int64_t r1, int thread_id) {
    (void)thread_id;
    const ln_fwd_job *j = arg;
    const int64_t d = j->d;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * d;
        const float mu = j->ek->sum(xr, (size_t)d) / (float)d;
        const float rs = 1.0f / sqrtf(j->ek->sum_sq_dev(xr, mu, (size_t)d) / (float)d + j->eps);
        j->mean[r] = mu, j->rstd[r] = rs;
        j->ek->norm_apply(j->y + r * d, xr, mu, rs, j->w, j->b, (size_t)d);
    }
}

/* out_dtype: the result's dtype, or AMP_DTYPE_COUNT for x's (after autocast) */
static amp_tensor *layer_norm(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias, float eps,
                              amp_dtype out_dtype) {
    const amp_op op = AMP_OP_LAYER_NORM;
    if (!amp_op_input_ok(ctx, op, x)) return NULL;
    if (x->ndim < 1) return amp_op_fail(ctx, op, "needs at least one dimension, got a 0-dimensional tensor");
    const int64_t d = x->shape[x->ndim - 1], rows = amp_shape_numel(x->ndim - 1, x->shape);
    if (!affine_ok(ctx, op, weight, "weight", d) || !affine_ok(ctx, op, bias, "bias", d)) return NULL;
    amp_tensor *cast_in[3] = {x, weight, bias};
    if (!amp_autocast_inputs(ctx, op, cast_in, 3)) return NULL;
    x = cast_in[0], weight = cast_in[1], bias = cast_in[2];
    /* PyTorch's mixed-dtype rule for norms: the result has x's dtype; weight and bias are read as they
     * are (fp32 affine parameters with low-precision activations is Apex O2's "batch-norm in fp32") and
     * get their gradients in their own dtype. */
    const amp_dtype dt = x->dtype, odt = out_dtype == AMP_DTYPE_COUNT ? dt : out_dtype;

    amp_tensor *out = amp_ctx_new_tensor(ctx, odt, x->ndim, x->shape, true);
    if (!out) return NULL;
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *xv = amp_f32_view(ctx, x);
    const float *wv = weight ? amp_f32_view(ctx, weight) : NULL, *bv = bias ? amp_f32_view(ctx, bias) : NULL;
    float *y = f32_result(ctx, out);
    float *mean = amp_f32_scratch(ctx, rows), *rstd = amp_f32_scratch(ctx, rows);
    if (!xv || (weight && !wv) || (bias && !bv) || !y || !mean || !rstd) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    ln_fwd_job job = {amp_elem_active(), xv, wv, bv, y, mean, rstd, d, eps};
    amp_parallel_range(rows, norm_min_rows(d), 1, ln_fwd_rows, &job);
    if (odt != AMP_F32) amp_store_f32(ctx, out, y);
    amp_tensor *in[3] = {x, weight, bias};
    amp_node *node = amp_autograd_record(ctx, op, dt, out, in, 3, layer_norm_backward);
    if (node) {
        norm_saved *s = amp_ctx_alloc(ctx, sizeof *s);
        if (s) s->mean = keep_floats(ctx, mean, rows), s->rstd = keep_floats(ctx, rstd, rows);
        node->saved = s;
        node->i[0] = rows, node->i[1] = d;
        node->f[0] = eps;
    }
    amp_scratch_release(ctx, m);
    return ctx->status == AMP_OK ? out : NULL;
}

amp_tensor *amp_layer_norm(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias, float eps) {
    return layer_norm(ctx, x, weight, bias, eps, AMP_DTYPE_COUNT);
}

/* The result rounded once, from the same fp32 values, to out_dtype: the bits of amp_layer_norm
 * followed by amp_cast (one rounding either way), and the same gradients (the cast's backward only
 * widens). What goes is the fp32 tensor the cast would read, which the arena keeps until backward. */
amp_tensor *amp_layer_norm_to(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias, float eps,
                              amp_dtype out_dtype) {
    if (!ctx) return NULL;
    if (out_dtype != AMP_F32 && out_dtype != AMP_F16 && out_dtype != AMP_BF16)
        return amp_op_fail(ctx, AMP_OP_LAYER_NORM, "the result's dtype must be f32, f16 or bf16, not %s",
                           amp_dtype_name(out_dtype));
    return layer_norm(ctx, x, weight, bias, eps, out_dtype);
}

/* ---- batch norm ----
 * x [N, C] or [N, C, H, W] seen as [N, C, S] (S = H*W, or 1); per channel c over n = N*S values.
 * Training: mean and biased variance of the batch normalize; backward, with xhat and gw as above,
 * dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) over the channel's n values. Evaluation: the
 * running statistics normalize, so y is affine in x: dx = gw * rstd. Either way dw = sum dy * xhat,
 * db = sum dy. */

/* A running statistic: NULL, or a float tensor of shape [C]; not differentiated. */
static bool running_ok(amp_ctx *ctx, const amp_tensor *r, const char *what, int64_t c) {
    if (!r) return true;
    if (!amp_op_input_ok(ctx, AMP_OP_BATCH_NORM, r)) return false;
    if (r->ndim != 1 || r->shape[0] != c) {
        char s[64];
        amp_op_fail(ctx, AMP_OP_BATCH_NORM, "%s %s must have shape [%lld]", what, amp_shape_str(r, s, sizeof s),
                    (long long)c);
        return false;
    }
    return true;
}

/* saved i[]: N, C, S, training */
static void batch_norm_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const int64_t nb = node->i[0], ch = node->i[1], sp = node->i[2];
    const bool training = node->i[3] != 0;
    const float n = (float)(nb * sp);
    const norm_saved *s = node->saved;
    const float *g = amp_grad_out(ctx, node), *xv = amp_f32_view(ctx, x);
    const float *wv = w ? amp_f32_view(ctx, w) : NULL;
    const bool need_dx = x->requires_grad, need_dw = w && w->requires_grad, need_db = b && b->requires_grad;
    float *dx = need_dx ? amp_f32_scratch(ctx, nb * ch * sp) : NULL;
    float *dw = need_dw ? amp_f32_scratch(ctx, ch) : NULL, *db = need_db ? amp_f32_scratch(ctx, ch) : NULL;
    if (!g || !xv || (w && !wv) || ctx->status != AMP_OK) return;
    for (int64_t c = 0; c < ch; c++) {
        const float mean = s->mean[c], rstd = s->rstd[c], wc = wv ? wv[c] : 1.0f;
        float sum_g = 0.0f, sum_gx = 0.0f; /* sums of dy and dy * xhat over the channel */
        for (int64_t i = 0; i < nb; i++) {
            const int64_t base = (i * ch + c) * sp;
            for (int64_t k = 0; k < sp; k++) {
                sum_g += g[base + k];
                sum_gx += g[base + k] * ((xv[base + k] - mean) * rstd);
            }
        }
        if (dw) dw[c] = sum_gx;
        if (db) db[c] = sum_g;
        if (!dx) continue;
        /* training: gw - mean(gw) - xhat mean(gw xhat) with gw = w dy, w factored out */
        const float a = training ? sum_g / n : 0.0f, q = training ? sum_gx / n : 0.0f, scale = wc * rstd;
        for (int64_t i = 0; i < nb; i++) {
            const int64_t base = (i * ch + c) * sp;
            for (int64_t k = 0; k < sp; k++) {
                const float xhat = (xv[base + k] - mean) * rstd;
                dx[base + k] = scale * (g[base + k] - a - xhat * q);
            }
        }
    }
    if (dx) amp_grad_accumulate(ctx, x, dx);
    if (dw) amp_grad_accumulate(ctx, w, dw);
    if (db) amp_grad_accumulate(ctx, b, db);
}

amp_tensor *amp_batch_norm(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias, amp_tensor *running_mean,
                           amp_tensor *running_var, bool training, float momentum, float eps) {
    const amp_op op = AMP_OP_BATCH_NORM;
    if (!amp_op_input_ok(ctx, op, x)) return NULL;
    char sx[64];
    if (x->ndim != 2 && x->ndim != 4)
        return amp_op_fail(ctx, op, "x %s must be [N, C] or [N, C, H, W]", amp_shape_str(x, sx, sizeof sx));
    const int64_t nb = x->shape[0], ch = x->shape[1], sp = x->ndim == 4 ? x->shape[2] * x->shape[3] : 1;
    if (!affine_ok(ctx, op, weight, "weight", ch) || !affine_ok(ctx, op, bias, "bias", ch)) return NULL;
    if (!running_ok(ctx, running_mean, "running_mean", ch) || !running_ok(ctx, running_var, "running_var", ch))
        return NULL;
    amp_tensor *cast_in[3] = {x, weight, bias}; /* never the running statistics: they are state, not inputs */
    if (!amp_autocast_inputs(ctx, op, cast_in, 3)) return NULL;
    x = cast_in[0], weight = cast_in[1], bias = cast_in[2];
    const int64_t count = nb * sp; /* values per channel */
    if (training && count <= 1)    /* PyTorch's check: a variance needs two values */
        return amp_op_fail(ctx, op, "expected more than 1 value per channel when training, got input %s",
                           amp_shape_str(x, sx, sizeof sx));
    if (!training && (!running_mean || !running_var))
        return amp_op_fail(ctx, op, "evaluation mode needs running_mean and running_var (got NULL)");
    /* PyTorch's mixed-dtype rule for norms: the result has x's dtype; weight and bias are read as they
     * are (fp32 affine parameters with low-precision activations is Apex O2's "batch-norm in fp32") and
     * get their gradients in their own dtype. */
    const amp_dtype dt = x->dtype;

    amp_tensor *out = amp_ctx_new_tensor(ctx, dt, x->ndim, x->shape, true);
    if (!out) return NULL;
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *xv = amp_f32_view(ctx, x);
    const float *wv = weight ? amp_f32_view(ctx, weight) : NULL, *bv = bias ? amp_f32_view(ctx, bias) : NULL;
    float *y = f32_result(ctx, out);
    float *mean = amp_f32_scratch(ctx, ch), *rstd = amp_f32_scratch(ctx, ch);
    if (!xv || (weight && !wv) || (bias && !bv) || !y || !mean || !rstd) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    if (training) {
        float *var = amp_f32_scratch(ctx, ch);
        if (!var) {
            amp_scratch_release(ctx, m);
            return NULL;
        }
        for (int64_t c = 0; c < ch; c++) {
            float sum = 0.0f, sq = 0.0f;
            for (int64_t i = 0; i < nb; i++)
                for (int64_t k = 0; k < sp; k++) sum += xv[(i * ch + c) * sp + k];
            const float mu = sum / (float)count;
            for (int64_t i = 0; i < nb; i++)
                for (int64_t k = 0; k < sp; k++) {
                    const float dev = xv[(i * ch + c) * sp + k] - mu;
                    sq += dev * dev;
                }
            mean[c] = mu, var[c] = sq / (float)count;
            rstd[c] = 1.0f / sqrtf(var[c] + eps);
        }
        /* running = (1 - momentum) running + momentum stat, with the unbiased variance (PyTorch,
         * torch.nn.BatchNorm2d). Updated in place, in the buffer's own dtype. */
        const float unbias = (float)count / (float)(count - 1);
        amp_tensor *const run[2] = {running_mean, running_var};
        for (int r = 0; r < 2; r++) {
            if (!run[r]) continue;
            float *upd = amp_f32_copy(ctx, run[r]);
            if (!upd) {
                amp_scratch_release(ctx, m);
                return NULL;
            }
            for (int64_t c = 0; c < ch; c++)
                upd[c] = (1.0f - momentum) * upd[c] + momentum * (r == 0 ? mean[c] : var[c] * unbias);
            amp_store_f32(ctx, run[r], upd);
        }
    } else {
        const float *rm = amp_f32_view(ctx, running_mean), *rv = amp_f32_view(ctx, running_var);
        if (!rm || !rv) {
            amp_scratch_release(ctx, m);
            return NULL;
        }
        for (int64_t c = 0; c < ch; c++) mean[c] = rm[c], rstd[c] = 1.0f / sqrtf(rv[c] + eps);
    }
    for (int64_t i = 0; i < nb; i++)
        for (int64_t c = 0; c < ch; c++) {
            const float mu = mean[c], rs = rstd[c], wc = wv ? wv[c] : 1.0f, bc = bv ? bv[c] : 0.0f;
            const int64_t base = (i * ch + c) * sp;
            for (int64_t k = 0; k < sp; k++) y[base + k] = (xv[base + k] - mu) * rs * wc + bc;
        }
    if (dt != AMP_F32) amp_store_f32(ctx, out, y);
    amp_tensor *in[3] = {x, weight, bias};
    amp_node *node = amp_autograd_record(ctx, op, dt, out, in, 3, batch_norm_backward);
    if (node) {
        norm_saved *s = amp_ctx_alloc(ctx, sizeof *s);
        if (s) s->mean = keep_floats(ctx, mean, ch), s->rstd = keep_floats(ctx, rstd, ch);
        node->saved = s;
        node->i[0] = nb, node->i[1] = ch, node->i[2] = sp, node->i[3] = training;
        node->f[0] = eps, node->f[1] = momentum;
    }
    amp_scratch_release(ctx, m);
    return ctx->status == AMP_OK ? out : NULL;
}
