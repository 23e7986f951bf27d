/* The optimizer object: configuration and its checks, the one allocation that holds everything a
 * step needs (so a step allocates nothing), master weights, and the accessors. The sweeps themselves
 * are in fused.c; the update rules in sgd.c and adam.c. */
#include <math.h>
#include <string.h>

#include "../tensor/ctx_internal.h"
#include "amp/formats.h"
#include "amp/status.h"
#include "optim_internal.h"

amp_optim_config amp_optim_default_config(amp_optim_kind kind) {
    /* torch.optim defaults (torch 2.15): SGD(lr=1e-3, momentum=0, dampening=0, weight_decay=0,
     * nesterov=False); Adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0);
     * AdamW(..., weight_decay=1e-2). */
    return (amp_optim_config){
        .kind = kind,
        .lr = 1e-3f,
        .weight_decay = kind == AMP_OPTIM_ADAMW ? 1e-2f : 0.0f,
        .momentum = 0.0f,
        .dampening = 0.0f,
        .nesterov = false,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .stochastic_rounding = false,
        .seed = 0,
    };
}

static bool finite_nonneg(float x) { return isfinite(x) && x >= 0.0f; }

/* torch's constructor checks (0.0 <= lr, 0.0 <= momentum, 0.0 <= weight_decay, 0.0 <= eps,
 * 0.0 <= beta < 1.0, Nesterov needs momentum > 0 and dampening 0), plus: everything finite. */
static bool config_valid(const amp_optim_config *c) {
    if (c->kind != AMP_OPTIM_SGD && c->kind != AMP_OPTIM_ADAM && c->kind != AMP_OPTIM_ADAMW) return false;
    if (!finite_nonneg(c->lr) || !finite_nonneg(c->weight_decay)) return false;
    if (c->kind == AMP_OPTIM_SGD) {
        if (!finite_nonneg(c->momentum) || !isfinite(c->dampening)) return false;
        if (c->nesterov && (c->momentum <= 0.0f || c->dampening != 0.0f)) return false;
    } else {
        if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f)) return false;
        if (!finite_nonneg(c->eps)) return false;
    }
    return true;
}

static bool dtype_ok(amp_dtype d) { return d == AMP_F32 || d == AMP_F16 || d == AMP_BF16; }

static size_t padded(int64_t numel) {
    return ((size_t)numel + OPTIM_ALIGN_FLOATS - 1) / OPTIM_ALIGN_FLOATS * OPTIM_ALIGN_FLOATS;
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* The parameters to optimize: `given` (n of them) or, when given is NULL, all of ctx's. */
static amp_tensor *param_at(const amp_ctx *ctx, amp_tensor *const *given, size_t i) {
    return given ? given[i] : ctx->params[i].tensor;
}

/* Checks that every parameter is one of ctx's (trainable, allocated, a supported dtype) and that
 * none appears twice. The duplicate check marks slots in a temporary array. */
static int check_params(amp_ctx *ctx, amp_tensor *const *given, size_t n) {
    if (given == NULL) return AMP_OK; /* ctx's own list: valid by construction (dtypes checked below) */
    bool *seen = ctx->allocator.alloc(ctx->n_params ? ctx->n_params : 1, 16, ctx->allocator.user);
    if (!seen) return AMP_ERR_OUT_OF_MEMORY;
    memset(seen, 0, ctx->n_params ? ctx->n_params : 1);
    int status = AMP_OK;
    for (size_t i = 0; i < n && status == AMP_OK; i++) {
        if (!given[i]) {
            status = AMP_ERR_NULL_POINTER;
            break;
        }
        size_t slot = ctx->n_params;
        for (size_t j = 0; j < ctx->n_params; j++)
            if (ctx->params[j].tensor == given[i]) {
                slot = j;
                break;
            }
        if (slot == ctx->n_params || seen[slot])
            status = AMP_ERR_INVALID_ARGUMENT; /* not ctx's, or twice */
        else
            seen[slot] = true;
    }
    ctx->allocator.free(seen, ctx->allocator.user);
    return status;
}

static int create(amp_ctx *ctx, const amp_optim_config *config, amp_tensor *const *given, size_t n,
                  amp_optimizer **out) {
    if (!out) return AMP_ERR_NULL_POINTER;
    *out = NULL;
    if (!ctx || !config) return AMP_ERR_NULL_POINTER;
    if (!ctx->params_allocated && n > 0)
        return amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT,
                            "amp_optimizer_create: the parameters have no storage yet: call amp_ctx_alloc_params "
                            "before creating the optimizer");
    if (!config_valid(config) || !ctx->params_allocated || n == 0) return AMP_ERR_INVALID_ARGUMENT;
    int status = check_params(ctx, given, n);
    if (status != AMP_OK) return status;

    /* Sizes: the segments, and the floats of each state role. */
    size_t n_segments = 0, master_floats = 0, all_floats = 0;
    for (size_t i = 0; i < n; i++) {
        const amp_tensor *p = param_at(ctx, given, i);
        if (!dtype_ok(p->dtype) || !p->grad || !dtype_ok(p->grad->dtype)) return AMP_ERR_UNSUPPORTED_DTYPE;
        if (!p->data || !p->grad->data) return AMP_ERR_INVALID_ARGUMENT;
        const int64_t numel = amp_tensor_numel(p);
        n_segments += (size_t)((numel + OPTIM_SEGMENT - 1) / OPTIM_SEGMENT);
        all_floats += padded(numel);
        if (p->dtype != AMP_F32) master_floats += padded(numel);
    }
    const bool sgd = config->kind == AMP_OPTIM_SGD;
    const size_t momentum_floats = (sgd && config->momentum != 0.0f) ? all_floats : 0;
    const size_t moment_floats = sgd ? 0 : all_floats; /* each of exp_avg and exp_avg_sq */
    const size_t state_floats = master_floats + momentum_floats + 2 * moment_floats;

    /* One block: the struct, the parameter table, the segments, the partial sums, then the state. */
    size_t off = align_up(sizeof(amp_optimizer), 64);
    const size_t params_off = off;
    off = align_up(off + n * sizeof(optim_param), 64);
    const size_t segments_off = off;
    off = align_up(off + n_segments * sizeof(optim_segment), 64);
    const size_t partial_off = off;
    off = align_up(off + n_segments * sizeof(double), 64);
    const size_t state_off = off;
    const size_t total = off + state_floats * sizeof(float);
    unsigned char *block = ctx->allocator.alloc(total, 64, ctx->allocator.user);
    if (!block) return AMP_ERR_OUT_OF_MEMORY;
    memset(block, 0, total);

    amp_optimizer *opt = (amp_optimizer *)block;
    opt->ctx = ctx;
    opt->allocator = ctx->allocator;
    opt->config = *config;
    opt->n_params = n;
    opt->params = (optim_param *)(block + params_off);
    opt->segments = (optim_segment *)(block + segments_off);
    opt->n_segments = n_segments;
    opt->partial = (double *)(block + partial_off);
    opt->state = state_floats ? (float *)(block + state_off) : NULL;
    opt->state_bytes = state_floats * sizeof(float);
    float *cursor[4] = {NULL, NULL, NULL, NULL};
    if (opt->state) {
        float *s = opt->state;
        if (master_floats) cursor[AMP_OPTIM_STATE_MASTER] = s, s += master_floats;
        if (momentum_floats) cursor[AMP_OPTIM_STATE_MOMENTUM] = s, s += momentum_floats;
        if (moment_floats) {
            cursor[AMP_OPTIM_STATE_EXP_AVG] = s, s += moment_floats;
            cursor[AMP_OPTIM_STATE_EXP_AVG_SQ] = s;
        }
    }

    uint64_t first_index = 0;
    size_t seg = 0;
    for (size_t i = 0; i < n; i++) {
        amp_tensor *p = param_at(ctx, given, i);
        optim_param *q = &opt->params[i];
        const int64_t numel = amp_tensor_numel(p);
        *q = (optim_param){.tensor = p, .grad = p->grad, .numel = numel, .first_index = first_index};
        first_index += (uint64_t)numel;
        if (p->dtype == AMP_F32) {
            q->master = p->data;
        } else {
            q->master = cursor[AMP_OPTIM_STATE_MASTER];
            cursor[AMP_OPTIM_STATE_MASTER] += padded(numel);
            amp_convert(q->master, AMP_F32, p->data, p->dtype, (size_t)numel); /* exact */
        }
        if (momentum_floats) {
            q->momentum = cursor[AMP_OPTIM_STATE_MOMENTUM];
            cursor[AMP_OPTIM_STATE_MOMENTUM] += padded(numel);
        }
        if (moment_floats) {
            q->exp_avg = cursor[AMP_OPTIM_STATE_EXP_AVG];
            q->exp_avg_sq = cursor[AMP_OPTIM_STATE_EXP_AVG_SQ];
            cursor[AMP_OPTIM_STATE_EXP_AVG] += padded(numel);
            cursor[AMP_OPTIM_STATE_EXP_AVG_SQ] += padded(numel);
        }
        for (int64_t start = 0; start < numel; start += OPTIM_SEGMENT) {
            const int64_t len = numel - start < OPTIM_SEGMENT ? numel - start : OPTIM_SEGMENT;
            opt->segments[seg++] = (optim_segment){.param = i, .start = start, .len = len};
        }
    }
    opt->total_numel = (int64_t)first_index;
    *out = opt;
    return AMP_OK;
}

int amp_optimizer_create(amp_ctx *ctx, const amp_optim_config *config, amp_optimizer **out) {
    return create(ctx, config, NULL, ctx ? ctx->n_params : 0, out);
}

int amp_optimizer_create_for(amp_ctx *ctx, const amp_optim_config *config, amp_tensor *const *params, size_t n,
                             amp_optimizer **out) {
    if (!params && n > 0) { /* (NULL, 0) is an empty list: refused in create, like torch's */
        if (out) *out = NULL;
        return AMP_ERR_NULL_POINTER;
    }
    return create(ctx, config, params, n, out);
}

void amp_optimizer_free(amp_optimizer *opt) {
    if (!opt) return;
    const amp_allocator a = opt->allocator;
    a.free(opt, a.user);
}

size_t amp_optimizer_num_params(const amp_optimizer *opt) { return opt ? opt->n_params : 0; }

amp_tensor *amp_optimizer_param(const amp_optimizer *opt, size_t index) {
    return (opt && index < opt->n_params) ? opt->params[index].tensor : NULL;
}

int64_t amp_optimizer_step_count(const amp_optimizer *opt) { return opt ? opt->step_count : 0; }

int amp_optimizer_set_step_count(amp_optimizer *opt, int64_t step) {
    if (!opt) return AMP_ERR_NULL_POINTER;
    if (step < 0) return AMP_ERR_INVALID_ARGUMENT;
    opt->step_count = step;
    return AMP_OK;
}

float amp_optimizer_get_lr(const amp_optimizer *opt) { return opt ? opt->config.lr : 0.0f; }

void amp_optimizer_set_lr(amp_optimizer *opt, float lr) {
    if (opt && finite_nonneg(lr)) opt->config.lr = lr;
}

float *amp_optimizer_master(const amp_optimizer *opt, size_t index) {
    if (!opt || index >= opt->n_params) return NULL;
    amp_tensor_bump_version(opt->params[index].tensor); /* writable: an fp32 parameter's own values */
    return opt->params[index].master;
}

float *amp_optimizer_state(const amp_optimizer *opt, amp_optim_state which, size_t index) {
    if (!opt || index >= opt->n_params) return NULL;
    const optim_param *q = &opt->params[index];
    switch (which) {
    case AMP_OPTIM_STATE_MASTER: return q->tensor->dtype == AMP_F32 ? NULL : q->master;
    case AMP_OPTIM_STATE_MOMENTUM: return q->momentum;
    case AMP_OPTIM_STATE_EXP_AVG: return q->exp_avg;
    case AMP_OPTIM_STATE_EXP_AVG_SQ: return q->exp_avg_sq;
    }
    return NULL;
}

void *amp_optimizer_state_memory(const amp_optimizer *opt, size_t *bytes) {
    if (bytes) *bytes = opt ? opt->state_bytes : 0;
    return opt ? opt->state : NULL;
}
