/* Gradient magnitude statistics of a training run (amp/train.h, "Gradient statistics"): a histogram
 * of log2 |g| of every parameter gradient, unscaled, and the fractions that fp16 would flush to zero
 * (at scale 1 and at the scale in use) or overflow (at the scale in use). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"
#include "../tensor/ctx_internal.h"
#include "../core/alloc_internal.h"

/* Values per conversion chunk for F16/BF16 gradients. */
enum { GS_CHUNK = 4096 };

/* fp16 rounds |x| <= 2^-25 to zero (half the smallest subnormal; the tie goes to the even zero) and
 * |x| >= 65520 (65504 + half an ulp) to inf. */
#define FP16_UNDERFLOW_MAX 0x1p-25
#define FP16_OVERFLOW_MIN 65520.0

bool amp_train_grad_stats_due(const amp_train_run_state *r, int64_t done) {
    const int64_t every = r->cfg.grad_stats_every;
    if (every < 0) return false;
    if (done == 1) return true;
    if (every > 0) return done % every == 0;
    const int64_t quarter = r->steps_per_epoch / 4 > 1 ? r->steps_per_epoch / 4 : 1;
    if (done % quarter == 0) return true;
    return done < quarter && (done & (done - 1)) == 0;
}

/* The histogram bin of a nonzero finite magnitude g: floor(log2 g) (g = m * 2^e, m in [0.5, 1), so
 * floor(log2 g) = e - 1), offset by AMP_GRAD_HIST_MIN_EXP and clamped to the bins. */
static int64_t hist_bin(double g) {
    int e;
    (void)frexp(g, &e);
    const int64_t k = (int64_t)(e - 1) - AMP_GRAD_HIST_MIN_EXP;
    return k < 0 ? 0 : k >= AMP_GRAD_HIST_BINS ? AMP_GRAD_HIST_BINS - 1 : k;
}

typedef struct counts {
    int64_t under_unscaled, under_scaled, over_scaled;
} counts;

static void add_values(amp_grad_stats *s, counts *c, const float *v, int64_t n, double inv_scale) {
    for (int64_t i = 0; i < n; i++) {
        const double x = v[i]; /* the scaled gradient g*S */
        if (x == 0) {
            s->zeros++;
            continue;
        }
        if (!isfinite(x)) {
            s->nonfinite++;
            c->over_scaled++;
            continue;
        }
        const double ax = fabs(x), g = ax * inv_scale; /* exact when S is a power of two (dynamic scaling) */
        c->under_scaled += ax <= FP16_UNDERFLOW_MAX;
        c->over_scaled += ax >= FP16_OVERFLOW_MIN;
        c->under_unscaled += g <= FP16_UNDERFLOW_MAX;
        s->bins[hist_bin(g)]++;
    }
}

int amp_train_grad_stats_sample(amp_train_run_state *r, int64_t done, float scale) {
    amp_grad_stats *s = &r->gs_last;
    memset(s, 0, sizeof *s);
    s->step = done;
    s->scale = scale;
    counts c = {0};
    const double inv_scale = scale > 0 ? 1.0 / (double)scale : 1.0;
    /* the model's parameters (with zero_stage 1 the optimizer holds only this rank's slice) */
    const size_t n_params = amp_ctx_num_params(r->ctx);
    for (size_t i = 0; i < n_params; i++) {
        const amp_tensor *p = amp_ctx_param(r->ctx, i);
        const amp_tensor *g = p ? p->grad : NULL;
        if (!g || !g->data) continue;
        const int64_t n = amp_tensor_numel(g);
        s->count += n;
        if (g->dtype == AMP_F32) {
            add_values(s, &c, g->data, n, inv_scale);
            continue;
        }
        if (!r->gs_buf && !(r->gs_buf = amp_malloc(GS_CHUNK * sizeof *r->gs_buf)))
            return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "out of memory for the gradient statistics");
        const size_t esize = amp_dtype_size(g->dtype);
        for (int64_t at = 0; at < n; at += GS_CHUNK) {
            const int64_t m = n - at < GS_CHUNK ? n - at : GS_CHUNK;
            int st = amp_convert(r->gs_buf, AMP_F32, (const char *)g->data + (size_t)at * esize, g->dtype, (size_t)m);
            if (st != AMP_OK) return amp_train_fail(r, st, "gradient statistics: cannot read a %s gradient", amp_dtype_name(g->dtype));
            add_values(s, &c, r->gs_buf, m, inv_scale);
        }
    }
    const int64_t nonzero = s->count - s->zeros;
    const double denom = nonzero > 0 ? (double)nonzero : 1.0;
    /* Non-finite values cannot be unscaled: they count as overflowed, not as underflowed. */
    s->underflow_fp16_unscaled = nonzero > 0 ? (double)c.under_unscaled / denom : 0;
    s->underflow_fp16_scaled = nonzero > 0 ? (double)c.under_scaled / denom : 0;
    s->overflow_fp16_scaled = nonzero > 0 ? (double)c.over_scaled / denom : 0;
    r->gs_sum.underflow_fp16_unscaled += s->underflow_fp16_unscaled;
    r->gs_sum.underflow_fp16_scaled += s->underflow_fp16_scaled;
    r->gs_sum.overflow_fp16_scaled += s->overflow_fp16_scaled;
    r->gs_samples++;
    /* the activation gradients the hook counted during this step's last backward */
    int64_t act_nonzero = 0, act_under = 0;
    for (int k = 0; k < AMP_OP_COUNT; k++) {
        s->act_count[k] = r->act.act_count[k];
        s->act_zeros[k] = r->act.act_zeros[k];
        s->act_underflow[k] = r->act.act_underflow[k];
        act_nonzero += s->act_count[k] - s->act_zeros[k];
        act_under += s->act_underflow[k];
    }
    s->act_underflow_fp16_unscaled = act_nonzero > 0 ? (double)act_under / (double)act_nonzero : 0;
    memcpy(s->act_bins, r->act.act_bins, sizeof s->act_bins);
    r->act_sum += s->act_underflow_fp16_unscaled;
    return AMP_OK;
}

/* ---- stalled updates of the pure presets ------------------------------------------------------- */

int amp_train_update_stats_begin(amp_train_run_state *r) {
    size_t bytes = 0;
    const void *params = amp_ctx_param_memory(r->ctx, &bytes);
    if (!r->us_before && !(r->us_before = amp_malloc(bytes ? bytes : 1)))
        return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "out of memory for the update statistics");
    memcpy(r->us_before, params, bytes);
    return AMP_OK;
}

void amp_train_update_stats_end(amp_train_run_state *r) {
    const unsigned char *base = amp_ctx_param_memory(r->ctx, NULL);
    int64_t intended = 0, stalled = 0;
    const size_t n_params = amp_optimizer_num_params(r->opt);
    for (size_t i = 0; i < n_params && r->gs_buf; i++) {
        const amp_tensor *p = amp_optimizer_param(r->opt, i);
        if (!p || p->dtype == AMP_F32 || !p->data) continue;
        const float *master = amp_optimizer_master(r->opt, i);
        const size_t esize = amp_dtype_size(p->dtype);
        const unsigned char *before = r->us_before + ((const unsigned char *)p->data - base);
        const unsigned char *after = p->data;
        const int64_t n = amp_tensor_numel(p);
        for (int64_t at = 0; at < n; at += GS_CHUNK) {
            const int64_t m = n - at < GS_CHUNK ? n - at : GS_CHUNK;
            amp_convert(r->gs_buf, AMP_F32, before + (size_t)at * esize, p->dtype, (size_t)m);
            for (int64_t j = 0; j < m; j++) {
                /* The update the optimizer computed in fp32 (the master started this step equal to the
                 * parameter) against what the rounded parameter kept of it. */
                if (master[at + j] == r->gs_buf[j]) continue;
                intended++;
                stalled += !memcmp(before + (size_t)(at + j) * esize, after + (size_t)(at + j) * esize, esize);
            }
        }
    }
    if (intended == 0) return; /* a skipped step, or nothing moved: no sample */
    r->us_sum += (double)stalled / (double)intended;
    r->us_samples++;
}

/* ---- activation gradients ---------------------------------------------------------------------- */

static void count_act(amp_train_run_state *r, amp_op op, const float *v, int64_t n) {
    const double inv = r->act_scale > 0 ? 1.0 / (double)r->act_scale : 1.0;
    int64_t zeros = 0, under = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = v[i];
        if (x == 0) {
            zeros++;
            continue;
        }
        if (!isfinite(x)) continue;
        const double g = fabs(x) * inv;
        under += g <= FP16_UNDERFLOW_MAX;
        r->act.act_bins[hist_bin(g)]++;
    }
    r->act.act_count[op] += n;
    r->act.act_zeros[op] += zeros;
    r->act.act_underflow[op] += under;
}

static void on_backward_grad(amp_ctx *ctx, const amp_tensor *out, const amp_tensor *grad, void *user) {
    (void)ctx;
    amp_train_run_state *r = user;
    const amp_op op = out->op >= 0 && out->op < AMP_OP_COUNT ? out->op : AMP_OP_NONE;
    if (!grad->data || !amp_tensor_is_contiguous(grad)) return;
    /* autocast's low-precision copy of a weight: its gradient is the weight's gradient (counted with
     * the parameters), not an activation's */
    if (op == AMP_OP_CAST && out->grad_fn && out->grad_fn->n_in > 0 && out->grad_fn->in[0] && out->grad_fn->in[0]->is_leaf)
        return;
    const int64_t n = amp_tensor_numel(grad);
    if (grad->dtype == AMP_F32) {
        count_act(r, op, grad->data, n);
        return;
    }
    if (!r->gs_buf && !(r->gs_buf = amp_malloc(GS_CHUNK * sizeof *r->gs_buf))) {
        r->act_oom = true;
        return;
    }
    const size_t esize = amp_dtype_size(grad->dtype);
    for (int64_t at = 0; at < n; at += GS_CHUNK) {
        const int64_t m = n - at < GS_CHUNK ? n - at : GS_CHUNK;
        if (amp_convert(r->gs_buf, AMP_F32, (const char *)grad->data + (size_t)at * esize, grad->dtype, (size_t)m) != AMP_OK)
            return;
        count_act(r, op, r->gs_buf, m);
    }
}

void amp_train_act_stats_arm(amp_train_run_state *r, float scale) {
    memset(r->act.act_count, 0, sizeof r->act.act_count);
    memset(r->act.act_zeros, 0, sizeof r->act.act_zeros);
    memset(r->act.act_underflow, 0, sizeof r->act.act_underflow);
    memset(r->act.act_bins, 0, sizeof r->act.act_bins);
    r->act_scale = scale;
    r->act_oom = false;
    amp_ctx_set_backward_grad_hook(r->ctx, on_backward_grad, r);
}

int amp_train_act_stats_done(amp_train_run_state *r) {
    amp_ctx_set_backward_grad_hook(r->ctx, NULL, NULL);
    return r->act_oom ? amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "out of memory for the gradient statistics") : AMP_OK;
}
