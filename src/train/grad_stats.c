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

/* ---- the counting pass ------------------------------------------------------------------------- */

/* fp32 bit patterns of |x|: the thresholds above, and the smallest non-finite one (inf). */
#define F32_UNDERFLOW_MAX_BITS 0x33000000u /* 2^-25 */
#define F32_OVERFLOW_MIN_BITS 0x477FF000u  /* 65520 */
#define F32_INF_BITS 0x7F800000u

/* The bin of g = floor(log2 g) - AMP_GRAD_HIST_MIN_EXP, clamped to the bins, read from the exponent
 * field of the double g (for a normal double g = 1.f * 2^(E - 1023), floor(log2 g) = E - 1023). Only
 * for normal g: amp_train_tally_add makes sure every g it bins is one. */
static inline int64_t bin_of_normal(double g) {
    uint64_t b;
    memcpy(&b, &g, sizeof b);
    const int64_t k = (int64_t)(b >> 52) - (1023 + AMP_GRAD_HIST_MIN_EXP);
    return k < 0 ? 0 : k >= AMP_GRAD_HIST_BINS ? AMP_GRAD_HIST_BINS - 1 : k;
}

/* The same for any g >= 0 by frexp (g = m * 2^e, m in [0.5, 1), floor(log2 g) = e - 1; frexp(0) gives
 * e = 0): the definition, for scales whose g may be zero or subnormal. */
static int64_t bin_of_any(double g) {
    int e;
    (void)frexp(g, &e);
    const int64_t k = (int64_t)(e - 1) - AMP_GRAD_HIST_MIN_EXP;
    return k < 0 ? 0 : k >= AMP_GRAD_HIST_BINS ? AMP_GRAD_HIST_BINS - 1 : k;
}

static void tally_any(amp_train_tally *t, const float *v, int64_t n, double inv_scale) {
    for (int64_t i = 0; i < n; i++) {
        const double x = v[i];
        if (x == 0) {
            t->slot[0][AMP_TRAIN_TALLY_ZERO]++;
            continue;
        }
        if (!isfinite(x)) {
            t->slot[0][AMP_TRAIN_TALLY_NONFINITE]++;
            t->over_scaled++;
            continue;
        }
        const double ax = fabs(x), g = ax * inv_scale;
        t->under_scaled += ax <= FP16_UNDERFLOW_MAX;
        t->over_scaled += ax >= FP16_OVERFLOW_MIN;
        t->under_unscaled += g <= FP16_UNDERFLOW_MAX;
        t->slot[0][bin_of_any(g)]++;
    }
}

/* One value, without branches (zeros are common in ReLU gradients and would be mispredicted): its
 * slot, and its fp16 counts added to the three sums. |x| is read on the bits; g = |x| * inv_scale in
 * double as the definition has it. */
static inline int64_t tally_one(uint32_t bits, double inv_scale, int64_t *uu, int64_t *us, int64_t *os) {
    const uint32_t u = bits & 0x7FFFFFFFu;
    float ax;
    memcpy(&ax, &u, sizeof ax);
    const double g = (double)ax * inv_scale;
    *us += u - 1u < F32_UNDERFLOW_MAX_BITS; /* 0 < |x| <= 2^-25 (u = 0 wraps around) */
    *os += u >= F32_OVERFLOW_MIN_BITS;      /* |x| >= 65520, inf and NaN */
    *uu += (g <= FP16_UNDERFLOW_MAX) & (u != 0); /* NaN compares false, inf is large */
    const int64_t k = bin_of_normal(g);
    return u == 0 ? AMP_TRAIN_TALLY_ZERO : u >= F32_INF_BITS ? AMP_TRAIN_TALLY_NONFINITE : k;
}

/* Any inv_scale in [2^-200, 2^200], one value at a time. */
static void tally_general(amp_train_tally *t, const float *v, int64_t n, double inv_scale) {
    int64_t uu = 0, us = 0, os = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, v + i, sizeof b);
        t->slot[i % AMP_TRAIN_TALLY_WAYS][tally_one(b, inv_scale, &uu, &us, &os)]++;
    }
    t->under_unscaled += uu;
    t->under_scaled += us;
    t->over_scaled += os;
}

_Static_assert(AMP_TRAIN_TALLY_WAYS == 4, "tally_pow2 spells out four ways");

/* Values per block of the power-of-two path: a fixed count, so that the compiler vectorizes its
 * first loop. */
enum { TALLY_BLOCK = 1024 };

/* The bin of a nonzero subnormal |x| (bits u < 2^23, x = u * 2^-149) at inv_scale = 2^s:
 * floor(log2 u) - 149 + s, floor(log2 u) read from u converted to fp32 (exact below 2^24). */
static int64_t bin_of_subnormal(uint32_t u, int32_t s) {
    const float f = (float)(int32_t)u;
    uint32_t fb;
    memcpy(&fb, &f, sizeof fb);
    const int64_t k = (int64_t)(fb >> 23) - 127 - 149 + s - AMP_GRAD_HIST_MIN_EXP;
    return k < 0 ? 0 : k >= AMP_GRAD_HIST_BINS ? AMP_GRAD_HIST_BINS - 1 : k;
}

/* inv_scale = 2^s (-200 <= s <= 200): g = |x| * 2^s is exact, so floor(log2 g) is floor(log2 |x|) + s,
 * read from the fp32 exponent field for normal x, and g <= 2^-25 is |x| <= 2^(-25 - s), whose bits
 * are uu_max (0 when no fp32 is that small, the largest finite when every one is). Whole blocks:
 * first every value's slot (normal values; zeros and non-finite ones; subnormals, marked, get theirs
 * after) and the counts, on the bits without branches; then the histogram. */
static void tally_pow2(amp_train_tally *t, const float *v, int64_t blocks, int32_t s, uint32_t uu_max) {
    const int32_t off = s - 127 - AMP_GRAD_HIST_MIN_EXP; /* bin = exponent field + off */
    uint32_t slot[TALLY_BLOCK];
    for (int64_t b = 0; b < blocks; b++) {
        const float *x = v + b * TALLY_BLOCK;
        uint32_t uu = 0, us = 0, os = 0, subnormals = 0;
        for (int j = 0; j < TALLY_BLOCK; j++) {
            uint32_t u;
            memcpy(&u, x + j, sizeof u);
            u &= 0x7FFFFFFFu;
            uu += u - 1u < uu_max; /* 0 < |x| <= 2^(-25 - s) */
            us += u - 1u < F32_UNDERFLOW_MAX_BITS;
            os += u >= F32_OVERFLOW_MIN_BITS;
            subnormals |= u - 1u < 0x007FFFFFu;
            int32_t k = (int32_t)(u >> 23) + off;
            k = k < 0 ? 0 : k;
            k = k > AMP_GRAD_HIST_BINS - 1 ? AMP_GRAD_HIST_BINS - 1 : k;
            k = u >= F32_INF_BITS ? AMP_TRAIN_TALLY_NONFINITE : k;
            slot[j] = (uint32_t)(u == 0 ? AMP_TRAIN_TALLY_ZERO : k);
        }
        if (subnormals)
            for (int j = 0; j < TALLY_BLOCK; j++) {
                uint32_t u;
                memcpy(&u, x + j, sizeof u);
                u &= 0x7FFFFFFFu;
                if (u - 1u < 0x007FFFFFu) slot[j] = (uint32_t)bin_of_subnormal(u, s);
            }
        for (int j = 0; j < TALLY_BLOCK; j += 4) { /* AMP_TRAIN_TALLY_WAYS, spelled out */
            t->slot[0][slot[j]]++;
            t->slot[1][slot[j + 1]]++;
            t->slot[2][slot[j + 2]]++;
            t->slot[3][slot[j + 3]]++;
        }
        t->under_unscaled += uu;
        t->under_scaled += us;
        t->over_scaled += os;
    }
}

/* The bits of the largest fp32 |x| <= 2^p, for `u - 1 < bits` (0 < u <= bits): 0 when 2^p is below
 * the smallest subnormal (no value), the largest finite when 2^p is above it (every finite value). */
static uint32_t f32_pow2_floor_bits(int32_t p) {
    if (p < -149) return 0;
    if (p < -126) return 1u << (p + 149);
    if (p > 127) return 0x7F7FFFFFu;
    return (uint32_t)(p + 127) << 23;
}

void amp_train_tally_add(amp_train_tally *t, const float *v, int64_t n, double inv_scale) {
    /* With 2^-200 <= inv_scale <= 2^200, g of a nonzero finite fp32 (2^-149 <= |x| < 2^128) lies in
     * [2^-349, 2^328], always a normal double. (1/S of a finite fp32 scale S > 0 is in
     * [2^-128, 2^149].) Other scales (an infinite S gives 0) take the definition's loop. */
    if (!(inv_scale >= 0x1p-200 && inv_scale <= 0x1p200)) {
        tally_any(t, v, n, inv_scale);
        return;
    }
    uint64_t ib;
    memcpy(&ib, &inv_scale, sizeof ib);
    int64_t done = 0;
    if ((ib & 0x000FFFFFFFFFFFFFull) == 0) { /* 2^s: the scaler off, or dynamic scaling */
        const int32_t s = (int32_t)(ib >> 52) - 1023;
        done = n / TALLY_BLOCK * TALLY_BLOCK;
        tally_pow2(t, v, n / TALLY_BLOCK, s, f32_pow2_floor_bits(-25 - s));
    }
    tally_general(t, v + done, n - done, inv_scale);
}

int64_t amp_train_tally_slot(const amp_train_tally *t, int slot) {
    int64_t sum = 0;
    for (int w = 0; w < AMP_TRAIN_TALLY_WAYS; w++) sum += t->slot[w][slot];
    return sum;
}

/* ---- parameter gradients ----------------------------------------------------------------------- */

int amp_train_grad_stats_sample(amp_train_run_state *r, int64_t done, float scale) {
    amp_grad_stats *s = &r->gs_last;
    memset(s, 0, sizeof *s);
    s->step = done;
    s->scale = scale;
    amp_train_tally t;
    memset(&t, 0, sizeof t);
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
            amp_train_tally_add(&t, g->data, n, inv_scale);
            continue;
        }
        if (!r->gs_buf && !(r->gs_buf = amp_malloc(GS_CHUNK * sizeof *r->gs_buf)))
            return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "out of memory for the gradient statistics");
        const size_t esize = amp_dtype_size(g->dtype);
        for (int64_t at = 0; at < n; at += GS_CHUNK) {
            const int64_t m = n - at < GS_CHUNK ? n - at : GS_CHUNK;
            int st = amp_convert(r->gs_buf, AMP_F32, (const char *)g->data + (size_t)at * esize, g->dtype, (size_t)m);
            if (st != AMP_OK) return amp_train_fail(r, st, "gradient statistics: cannot read a %s gradient", amp_dtype_name(g->dtype));
            amp_train_tally_add(&t, r->gs_buf, m, inv_scale);
        }
    }
    for (int k = 0; k < AMP_GRAD_HIST_BINS; k++) s->bins[k] = amp_train_tally_slot(&t, k);
    s->zeros = amp_train_tally_slot(&t, AMP_TRAIN_TALLY_ZERO);
    s->nonfinite = amp_train_tally_slot(&t, AMP_TRAIN_TALLY_NONFINITE);
    const int64_t nonzero = s->count - s->zeros;
    const double denom = nonzero > 0 ? (double)nonzero : 1.0;
    /* Non-finite values cannot be unscaled: they count as overflowed, not as underflowed. */
    s->underflow_fp16_unscaled = nonzero > 0 ? (double)t.under_unscaled / denom : 0;
    s->underflow_fp16_scaled = nonzero > 0 ? (double)t.under_scaled / denom : 0;
    s->overflow_fp16_scaled = nonzero > 0 ? (double)t.over_scaled / denom : 0;
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

/* Among the m values whose fp32 update was nonzero (master != before, the master having started the
 * step equal to the parameter), adds to *intended and to *stalled those whose rounded parameter did
 * not move (after == before, compared on the bits). Branch-free: most values move. */
static void count_stalled(const float *master, const float *before_f32, const unsigned char *before,
                          const unsigned char *after, size_t esize, int64_t m, int64_t *intended, int64_t *stalled) {
    int64_t in = 0, st = 0;
    if (esize == 2) {
        for (int64_t j = 0; j < m; j++) {
            uint16_t b, a;
            memcpy(&b, before + 2 * j, 2);
            memcpy(&a, after + 2 * j, 2);
            const int moved = master[j] != before_f32[j];
            in += moved;
            st += moved & (a == b);
        }
    } else {
        for (int64_t j = 0; j < m; j++) {
            const int moved = master[j] != before_f32[j];
            in += moved;
            st += moved && !memcmp(before + (size_t)j * esize, after + (size_t)j * esize, esize);
        }
    }
    *intended += in;
    *stalled += st;
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
            const size_t off = (size_t)at * esize;
            amp_convert(r->gs_buf, AMP_F32, before + off, p->dtype, (size_t)m);
            count_stalled(master + at, r->gs_buf, before + off, after + off, esize, m, &intended, &stalled);
        }
    }
    if (intended == 0) return; /* a skipped step, or nothing moved: no sample */
    r->us_sum += (double)stalled / (double)intended;
    r->us_samples++;
}

/* ---- activation gradients ---------------------------------------------------------------------- */

static void count_act(amp_train_run_state *r, amp_op op, const float *v, int64_t n) {
    const double inv = r->act_scale > 0 ? 1.0 / (double)r->act_scale : 1.0;
    amp_train_tally *t = &r->act_tally;
    const int64_t zeros = amp_train_tally_slot(t, AMP_TRAIN_TALLY_ZERO), under = t->under_unscaled;
    amp_train_tally_add(t, v, n, inv);
    r->act.act_count[op] += n;
    r->act.act_zeros[op] += amp_train_tally_slot(t, AMP_TRAIN_TALLY_ZERO) - zeros;
    r->act.act_underflow[op] += t->under_unscaled - under;
}

/* Whether t is made by a cast of a leaf (autocast's low-precision copy of a weight). */
static bool cast_of_leaf(const amp_tensor *t) {
    const amp_node *n = t->grad_fn;
    return t->op == AMP_OP_CAST && n && n->n_in > 0 && n->in[0] && n->in[0]->is_leaf;
}

/* grad's values counted as op's activation gradient */
static void count_grad(amp_train_run_state *r, amp_op op, const amp_tensor *grad) {
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

static void on_backward_grad(amp_ctx *ctx, const amp_tensor *out, const amp_tensor *grad, void *user) {
    (void)ctx;
    amp_train_run_state *r = user;
    const amp_op op = out->op >= 0 && out->op < AMP_OP_COUNT ? out->op : AMP_OP_NONE;
    if (!grad->data || !amp_tensor_is_contiguous(grad)) return;
    /* autocast's low-precision copy of a weight: its gradient is the weight's gradient (counted with
     * the parameters), not an activation's */
    if (cast_of_leaf(out)) return;
    /* gpt2's tied head, wte's first V rows of wte's cast: these counts have always taken its gradient
     * as two activations' (when the rows were cast: as the cast's, then as the fp32 rows'), and still
     * do, the same values under both ops */
    if (out->grad_fn && out->grad_fn->prefix_view && out->grad_fn->in[0] && cast_of_leaf(out->grad_fn->in[0]))
        count_grad(r, AMP_OP_CAST, grad);
    count_grad(r, op, grad);
}

void amp_train_act_stats_arm(amp_train_run_state *r, float scale) {
    memset(r->act.act_count, 0, sizeof r->act.act_count);
    memset(r->act.act_zeros, 0, sizeof r->act.act_zeros);
    memset(r->act.act_underflow, 0, sizeof r->act.act_underflow);
    memset(r->act.act_bins, 0, sizeof r->act.act_bins);
    memset(&r->act_tally, 0, sizeof r->act_tally);
    r->act_scale = scale;
    r->act_oom = false;
    amp_ctx_set_backward_grad_hook(r->ctx, on_backward_grad, r);
}

int amp_train_act_stats_done(amp_train_run_state *r) {
    amp_ctx_set_backward_grad_hook(r->ctx, NULL, NULL);
    for (int k = 0; k < AMP_GRAD_HIST_BINS; k++) r->act.act_bins[k] = amp_train_tally_slot(&r->act_tally, k);
    return r->act_oom ? amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "out of memory for the gradient statistics") : AMP_OK;
}
