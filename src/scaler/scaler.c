/* The scaler object: PyTorch's GradScaler state machine (torch/amp/grad_scaler.py), and amp's extras
 * on top of it (amp/scaler.h lists both). */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scaler_internal.h"
#include "../optim/optim_internal.h"
#include "../tensor/ctx_internal.h"
#include "../core/alloc_internal.h"

/* PyTorch's messages (GradScaler.unscale_, step, update, _check_scale_growth_tracker, __init__),
 * each after the name of the amp function that failed ("amp_scaler_step: ..."); where PyTorch's
 * text names scaler.scale(loss), amp's names the C functions that do it. */
#define MSG_UNSCALE_TWICE "unscale_() has already been called on this optimizer since the last update()."
#define MSG_UNSCALE_AFTER_STEP "unscale_() is being called after step()."
#define MSG_STEP_TWICE "step() has already been called since the last update()."
#define MSG_NO_SCALE                                                                                  \
    "Attempted %s but _scale is None.  This may indicate your script did not use amp_scaler_backward " \
    "(or amp_scaler_scale) earlier in the iteration."
#define MSG_NO_CHECKS_OPT                                                                               \
    "No inf checks were recorded for this optimizer. (None of its parameters has a gradient: no backward " \
    "since amp_zero_grad?)"
#define MSG_NO_CHECKS_UPDATE "No inf checks were recorded prior to update."
#define MSG_GROWTH "The growth factor must be > 1.0."
#define MSG_BACKOFF "The backoff factor must be < 1.0."

amp_scaler_config amp_scaler_default_config(void) {
    return (amp_scaler_config){
        .init_scale = 65536.0f, /* 2.0**16 */
        .growth_factor = 2.0,
        .backoff_factor = 0.5,
        .growth_interval = 2000,
        .enabled = true,
        .min_scale = 0.0f,
        .max_scale = 0.0f,
        .hysteresis = 1,
        .hysteresis_mode = AMP_HYSTERESIS_DEEPSPEED,
        .safe = false,
        .floor_patience = 0,
    };
}

/* PyTorch checks only the two factors, and only when enabled; the extras' checks are amp's. */
static const char *config_error(const amp_scaler_config *c, bool enabled) {
    if (enabled && c->growth_factor <= 1.0) return MSG_GROWTH;
    if (enabled && c->backoff_factor >= 1.0) return MSG_BACKOFF;
    if (!(c->min_scale >= 0.0f) || !(c->max_scale >= 0.0f)) return "min_scale and max_scale must be >= 0 (0: off).";
    if (c->min_scale > 0.0f && c->max_scale > 0.0f && c->min_scale > c->max_scale)
        return "min_scale must not exceed max_scale.";
    if (c->hysteresis < 0) return "hysteresis must be >= 0 (0 or 1: off).";
    if ((unsigned)c->hysteresis_mode > (unsigned)AMP_HYSTERESIS_MEGATRON) return "unknown hysteresis_mode.";
    if (c->floor_patience < 0) return "floor_patience must be >= 0 (0: off).";
    return NULL;
}

const char *amp_scaler_config_error(const amp_scaler_config *config) {
    if (!config) return "config is NULL.";
    return config_error(config, config->enabled);
}

int amp_scaler_create(const amp_scaler_config *config, amp_scaler **out) {
    if (!out) return AMP_ERR_NULL_POINTER;
    *out = NULL;
    const amp_scaler_config c = config ? *config : amp_scaler_default_config();
    if (config_error(&c, c.enabled)) return AMP_ERR_INVALID_ARGUMENT;
    amp_scaler *s = amp_calloc(1, sizeof *s);
    if (!s) return AMP_ERR_OUT_OF_MEMORY;
    s->config = c;
    s->enabled = c.enabled;
    s->scale = c.init_scale;
    s->growth_tracker = 0;
    s->hysteresis_tracker = scaler_hysteresis_full(&c);
    *out = s;
    return AMP_OK;
}

void amp_scaler_free(amp_scaler *s) { amp_free(s); }

/* ---- errors ---- */

/* Records "fn: message" as the scaler's error; returns status. */
static int fail(amp_scaler *s, const char *fn, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static int fail(amp_scaler *s, const char *fn, int status, const char *fmt, ...) {
    s->status = status;
    int n = snprintf(s->error, sizeof s->error, "%s: ", fn);
    if (n < 0 || (size_t)n >= sizeof s->error) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->error + n, sizeof s->error - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

const char *amp_scaler_error(const amp_scaler *s) { return s ? s->error : "scaler is NULL"; }
int amp_scaler_status(const amp_scaler *s) { return s ? s->status : AMP_ERR_NULL_POINTER; }
void amp_scaler_clear_error(amp_scaler *s) {
    if (!s) return;
    s->status = AMP_OK;
    s->error[0] = '\0';
}

/* ---- enabling ---- */

bool amp_scaler_is_enabled(const amp_scaler *s) { return s && s->enabled; }

int amp_scaler_set_enabled(amp_scaler *s, bool enabled) {
    if (!s) return AMP_ERR_NULL_POINTER;
    if (s->enabled == enabled) return AMP_OK;
    if (s->n_states > 0)
        return fail(s, "amp_scaler_set_enabled", AMP_ERR_STATE,
                    "the scaler can be enabled or disabled only between iterations (after amp_scaler_update).");
    if (enabled) {
        const char *why = config_error(&s->config, true);
        if (why) return fail(s, "amp_scaler_set_enabled", AMP_ERR_INVALID_ARGUMENT, "%s", why);
    }
    s->enabled = enabled;
    return AMP_OK;
}

/* ---- per-optimizer states ---- */

static scaler_opt_state *find_state(const amp_scaler *s, const amp_optimizer *opt) {
    for (int i = 0; i < s->n_states; i++)
        if (s->states[i].opt == opt) return (scaler_opt_state *)&s->states[i];
    return NULL;
}

/* PyTorch's defaultdict access: the optimizer's state, made READY on first use in an iteration. */
static scaler_opt_state *get_state(amp_scaler *s, const char *fn, const amp_optimizer *opt) {
    scaler_opt_state *st = find_state(s, opt);
    if (st) return st;
    if (s->n_states == SCALER_MAX_OPTIMIZERS) {
        fail(s, fn, AMP_ERR_STATE, "more than %d optimizers used with one scaler in one iteration.",
             SCALER_MAX_OPTIMIZERS);
        return NULL;
    }
    st = &s->states[s->n_states++];
    *st = (scaler_opt_state){.opt = opt, .stage = AMP_STAGE_READY};
    return st;
}

amp_scaler_stage amp_scaler_get_stage(const amp_scaler *s, const amp_optimizer *opt) {
    const scaler_opt_state *st = s ? find_state(s, opt) : NULL;
    return st ? st->stage : AMP_STAGE_READY;
}

float amp_scaler_found_inf(const amp_scaler *s, const amp_optimizer *opt) {
    const scaler_opt_state *st = s ? find_state(s, opt) : NULL;
    if (!st) return 0.0f;
    return st->found_inf != 0.0f || (st->after_counts && st->found_after != 0.0f) ? 1.0f : 0.0f;
}

/* The value this optimizer contributes to the update's found_inf: PyTorch's per-device found_inf
 * (0 or 1), or 1 when amp's post-unscale check made it skip. */
static float state_found(const scaler_opt_state *st) {
    if (st->after_counts && st->found_after != 0.0f) return 1.0f;
    return st->found_inf;
}

/* _check_scale_growth_tracker: fn is amp's function, funcname PyTorch's. */
static int check_initialized(amp_scaler *s, const char *fn, const char *funcname) {
    if (!s->initialized) return fail(s, fn, AMP_ERR_STATE, MSG_NO_SCALE, funcname);
    return AMP_OK;
}

/* ---- scale ---- */

float amp_scaler_scale(amp_scaler *s) {
    if (!s || !s->enabled) return 1.0f;
    s->initialized = true;
    return s->scale;
}

int amp_scaler_backward(amp_scaler *s, amp_ctx *ctx, amp_tensor *loss) {
    if (!s || !ctx) return AMP_ERR_NULL_POINTER;
    if (!s->enabled) return amp_backward(ctx, loss, NULL);
    return amp_backward_scaled(ctx, loss, amp_scaler_scale(s));
}

/* ---- unscale ---- */

/* True when p's gradient is amp_zero_grad's pending zeros (src/tensor/ctx_internal.h): no backward
 * has written it since, which is PyTorch's p.grad is None after zero_grad(). */
static bool grad_unset(const amp_optimizer *opt, const amp_tensor *p) {
    const amp_ctx *ctx = opt->ctx;
    if (!ctx || !ctx->n_grads_empty) return false;
    const int64_t k = amp_ctx_param_index(ctx, p);
    return k >= 0 && ctx->params[k].grad_empty;
}

/* Checks every gradient before touching any (PyTorch raises before its first kernel call). Returns
 * the number of gradients checked (those written since amp_zero_grad), or a negative status. */
static int validate_grads(amp_scaler *s, const char *fn, const amp_optimizer *opt) {
    const size_t n = amp_optimizer_num_params(opt);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        const amp_tensor *p = amp_optimizer_param(opt, i);
        const amp_tensor *g = p ? p->grad : NULL;
        if (!g) continue;
        if (g->dtype != AMP_F32 && g->dtype != AMP_F16 && g->dtype != AMP_BF16)
            return fail(s, fn, AMP_ERR_UNSUPPORTED_DTYPE, "cannot unscale %s gradients (parameter %zu%s%s).",
                        amp_dtype_name(g->dtype), i, p->name ? " " : "", p->name ? p->name : "");
        if (!amp_tensor_is_contiguous(g) || (!g->data && amp_tensor_numel(g) > 0))
            return fail(s, fn, AMP_ERR_INVALID_ARGUMENT, "gradient of parameter %zu is not a contiguous buffer.", i);
        count += !grad_unset(opt, p);
    }
    return count;
}

/* Runs the unscale kernel over every gradient of opt with the given inv_scale; ORs the flags. */
static void unscale_grads(const amp_optimizer *opt, float inv_scale, float *found_inf, float *found_after) {
    optim_settle_grads(opt);
    const size_t n = amp_optimizer_num_params(opt);
    for (size_t i = 0; i < n; i++) {
        const amp_tensor *p = amp_optimizer_param(opt, i);
        const amp_tensor *g = p ? p->grad : NULL;
        if (!g) continue;
        amp_non_finite_check_and_unscale_safe(g->data, g->dtype, (size_t)amp_tensor_numel(g), found_inf,
                                              found_after, inv_scale);
    }
    if (inv_scale != 1.0f) amp_ctx_grads_changed(opt->ctx); /* the backward check's notes: amp/tensor.h */
}

/* GradScaler.unscale_ after the enabled and stage checks. */
static int do_unscale(amp_scaler *s, const char *fn, const amp_optimizer *opt, scaler_opt_state *st) {
    const int count = validate_grads(s, fn, opt);
    if (count < 0) return count;
    float found_inf = 0.0f, found_after = 0.0f;
    unscale_grads(opt, amp_inv_scale(s->scale), &found_inf, s->config.safe ? &found_after : NULL);
    st->has_checks = count > 0;
    st->found_inf = found_inf;
    st->found_after = found_after;
    st->after_counts = s->config.safe;
    st->stage = AMP_STAGE_UNSCALED;
    return AMP_OK;
}

int amp_scaler_unscale(amp_scaler *s, amp_optimizer *opt) {
    static const char fn[] = "amp_scaler_unscale";
    if (!s || !opt) return AMP_ERR_NULL_POINTER;
    if (!s->enabled) return AMP_OK;
    int st_code = check_initialized(s, fn, "unscale_");
    if (st_code != AMP_OK) return st_code;
    scaler_opt_state *st = get_state(s, fn, opt);
    if (!st) return s->status;
    if (st->stage == AMP_STAGE_UNSCALED) return fail(s, fn, AMP_ERR_STATE, MSG_UNSCALE_TWICE);
    if (st->stage == AMP_STAGE_STEPPED) return fail(s, fn, AMP_ERR_STATE, MSG_UNSCALE_AFTER_STEP);
    return do_unscale(s, fn, opt, st);
}

int amp_scaler_record_found_inf(amp_scaler *s, const amp_optimizer *opt) {
    if (!s || !opt) return AMP_ERR_NULL_POINTER;
    if (!s->enabled) return AMP_OK;
    scaler_opt_state *st = find_state(s, opt);
    if (!st || st->stage != AMP_STAGE_UNSCALED)
        return fail(s, "amp_scaler_record_found_inf", AMP_ERR_STATE,
                    "needs amp_scaler_unscale (unscale_()) first in this iteration.");
    st->found_inf = 1.0f;
    st->has_checks = true;
    return AMP_OK;
}

/* ---- step ---- */

const char *amp_skip_reason_name(amp_skip_reason reason) {
    switch (reason) {
    case AMP_SKIP_NONE: return "none";
    case AMP_SKIP_FOUND_INF: return "found_inf";
    case AMP_SKIP_NONFINITE_AFTER_UNSCALE: return "nonfinite_after_unscale";
    default: return "invalid";
    }
}

static amp_step_report base_report(float scale) {
    return (amp_step_report){.skipped = false,
                             .reason = AMP_SKIP_NONE,
                             .found_inf = 0.0f,
                             .scale = scale,
                             .inv_scale = amp_inv_scale(scale),
                             .fused = false,
                             .grad_norm = NAN,
                             .clip_coef = 1.0f};
}

static void count_step(amp_scaler *s, bool skipped) {
    if (skipped)
        s->stats.steps_skipped++;
    else
        s->stats.steps_taken++;
}

int amp_scaler_step(amp_scaler *s, amp_optimizer *opt, amp_step_report *report) {
    static const char fn[] = "amp_scaler_step";
    amp_step_report r = base_report(1.0f);
    if (report) *report = r;
    if (!s || !opt) return AMP_ERR_NULL_POINTER;
    if (!s->enabled) return amp_optimizer_step(opt);
    int code = check_initialized(s, fn, "step");
    if (code != AMP_OK) return code;
    scaler_opt_state *st = get_state(s, fn, opt);
    if (!st) return s->status;
    if (st->stage == AMP_STAGE_STEPPED) return fail(s, fn, AMP_ERR_STATE, MSG_STEP_TWICE);
    r = base_report(s->scale);
    if (st->stage == AMP_STAGE_READY) {
        code = do_unscale(s, fn, opt, st);
        if (code != AMP_OK) return code;
    }
    if (!st->has_checks) return fail(s, fn, AMP_ERR_STATE, MSG_NO_CHECKS_OPT);
    /* _maybe_opt_step: the optimizer runs only when nothing was found. */
    if (st->found_inf != 0.0f) {
        r.skipped = true;
        r.reason = AMP_SKIP_FOUND_INF;
    } else if (st->after_counts && st->found_after != 0.0f) {
        r.skipped = true;
        r.reason = AMP_SKIP_NONFINITE_AFTER_UNSCALE;
    }
    r.found_inf = state_found(st);
    if (!r.skipped) {
        code = amp_optimizer_step(opt);
        if (code != AMP_OK) return fail(s, fn, code, "the optimizer's step failed: %s", amp_status_str(code));
    }
    st->stage = AMP_STAGE_STEPPED;
    count_step(s, r.skipped);
    if (report) *report = r;
    return AMP_OK;
}

/* After the fused pass skipped: were the scaled gradients (left untouched) already non-finite, or did
 * they become so when unscaled? A read-only pass (inv_scale 1), paid only on skipped steps. */
static amp_skip_reason classify_fused_skip(const amp_optimizer *opt) {
    float found = 0.0f;
    unscale_grads(opt, 1.0f, &found, NULL);
    return found != 0.0f ? AMP_SKIP_FOUND_INF : AMP_SKIP_NONFINITE_AFTER_UNSCALE;
}

int amp_scaler_step_fused(amp_scaler *s, amp_optimizer *opt, float max_norm, amp_step_report *report) {
    static const char fn[] = "amp_scaler_step_fused";
    amp_step_report r = base_report(1.0f);
    if (report) *report = r;
    if (!s || !opt) return AMP_ERR_NULL_POINTER;
    amp_fused_result res = {.found_inf = false, .grad_norm = NAN, .clip_coef = 1.0f};
    if (!s->enabled) {
        const int code = optim_fused_step(opt, 1.0f, max_norm, report != NULL, &res);
        if (code != AMP_OK) return code;
        r.fused = true;
        r.grad_norm = res.grad_norm;
        r.clip_coef = res.clip_coef;
        if (res.found_inf) {
            r.skipped = true;
            r.reason = AMP_SKIP_FOUND_INF;
            r.found_inf = 1.0f;
        }
        if (report) *report = r;
        return AMP_OK;
    }
    int code = check_initialized(s, fn, "step");
    if (code != AMP_OK) return code;
    scaler_opt_state *st = get_state(s, fn, opt);
    if (!st) return s->status;
    if (st->stage == AMP_STAGE_STEPPED) return fail(s, fn, AMP_ERR_STATE, MSG_STEP_TWICE);
    r = base_report(s->scale);
    if (st->stage == AMP_STAGE_READY) {
        /* PyTorch's fused-optimizer branch asserts nothing here, and its optimizer then skips the
         * parameters whose grad is None. amp's flat pass cannot skip them (it would decay and move
         * them as if their gradients were zeros), so a step with no gradient at all is refused with
         * the unfused step's error; the stage stays READY. */
        const int count = validate_grads(s, fn, opt);
        if (count < 0) return count;
        if (count == 0 && amp_optimizer_num_params(opt) > 0) return fail(s, fn, AMP_ERR_STATE, MSG_NO_CHECKS_OPT);
        code = optim_fused_step(opt, r.inv_scale, max_norm, report != NULL, &res);
        if (code != AMP_OK) return fail(s, fn, code, "the optimizer's fused step failed: %s", amp_status_str(code));
        r.fused = true;
        st->has_checks = count > 0;
        st->after_counts = true; /* the optimizer refused the step either way */
        if (res.found_inf) {
            r.skipped = true;
            r.reason = classify_fused_skip(opt);
            if (r.reason == AMP_SKIP_FOUND_INF)
                st->found_inf = 1.0f;
            else
                st->found_after = 1.0f;
        }
    } else { /* UNSCALED: the gradients are unscaled already */
        if (st->found_inf != 0.0f) {
            r.skipped = true;
            r.reason = AMP_SKIP_FOUND_INF;
        } else if (st->after_counts && st->found_after != 0.0f) {
            r.skipped = true;
            r.reason = AMP_SKIP_NONFINITE_AFTER_UNSCALE;
        } else {
            code = optim_fused_step(opt, 1.0f, max_norm, report != NULL, &res);
            if (code != AMP_OK) return fail(s, fn, code, "the optimizer's fused step failed: %s", amp_status_str(code));
            r.fused = true;
            if (res.found_inf) { /* non-finite after the unscale: a post-unscale overflow or user edits */
                r.skipped = true;
                r.reason = AMP_SKIP_NONFINITE_AFTER_UNSCALE;
                st->found_after = 1.0f;
                st->after_counts = true;
            }
        }
    }
    if (r.fused) {
        r.grad_norm = res.grad_norm;
        r.clip_coef = res.clip_coef;
    }
    r.found_inf = state_found(st);
    st->stage = AMP_STAGE_STEPPED;
    count_step(s, r.skipped);
    if (report) *report = r;
    return AMP_OK;
}

/* ---- update ---- */

static float backoff(float scale, double factor) { return (float)((double)scale * factor); }

/* amp_update_scale with hysteresis (config.hysteresis >= 2). Growth is PyTorch's (double multiply,
 * refused when not finite); the hysteresis tracker follows the chosen system's rule. Returns true
 * when an overflow was absorbed. */
static bool update_with_hysteresis(amp_scaler *s, float found_inf) {
    const amp_scaler_config *c = &s->config;
    const int32_t full = scaler_hysteresis_full(c);
    if (found_inf != 0.0f) {
        s->growth_tracker = 0; /* the growth window restarts on every overflow, absorbed or not */
        if (c->hysteresis_mode == AMP_HYSTERESIS_MEGATRON) {
            /* grad_scaler.py: hysteresis_tracker -= 1; if hysteresis_tracker <= 0: back off */
            s->hysteresis_tracker--;
            if (s->hysteresis_tracker > 0) return true;
        } else {
            /* loss_scaler.py: if delayed_shift == 1 or cur_hysteresis == 1: back off (it stays 1),
             * else cur_hysteresis -= 1 */
            if (s->hysteresis_tracker > 1) {
                s->hysteresis_tracker--;
                return true;
            }
        }
        s->scale = backoff(s->scale, c->backoff_factor);
        return false;
    }
    if (c->hysteresis_mode == AMP_HYSTERESIS_DEEPSPEED_CONSECUTIVE) s->hysteresis_tracker = full;
    const int32_t successful = (int32_t)(uint32_t)((uint32_t)s->growth_tracker + 1u);
    if (successful == c->growth_interval) {
        const float grown = (float)((double)s->scale * c->growth_factor);
        if (isfinite(grown)) s->scale = grown;
        s->growth_tracker = 0;
        s->hysteresis_tracker = full; /* refilled on growth (a no-op in the consecutive mode) */
    } else {
        s->growth_tracker = successful;
    }
    return false;
}

int amp_scaler_update(amp_scaler *s) {
    static const char fn[] = "amp_scaler_update";
    if (!s) return AMP_ERR_NULL_POINTER;
    if (!s->enabled) return AMP_OK;
    int code = check_initialized(s, fn, "update");
    if (code != AMP_OK) return code;
    /* found_inf_combined: the sum over every optimizer that recorded a check */
    float found_inf = 0.0f;
    int checks = 0;
    for (int i = 0; i < s->n_states; i++) {
        if (!s->states[i].has_checks) continue;
        found_inf = checks == 0 ? state_found(&s->states[i]) : found_inf + state_found(&s->states[i]);
        checks++;
    }
    if (checks == 0) return fail(s, fn, AMP_ERR_STATE, MSG_NO_CHECKS_UPDATE);

    const amp_scaler_config *c = &s->config;
    const float old_scale = s->scale;
    bool absorbed = false;
    if (c->hysteresis >= 2)
        absorbed = update_with_hysteresis(s, found_inf);
    else
        amp_update_scale(&s->scale, &s->growth_tracker, found_inf, c->growth_factor, c->backoff_factor,
                         c->growth_interval);
    if (c->min_scale > 0.0f && !(s->scale >= c->min_scale)) s->scale = c->min_scale;
    if (c->max_scale > 0.0f && s->scale > c->max_scale) s->scale = c->max_scale;

    amp_scaler_stats *st = &s->stats;
    st->iterations++;
    const bool skipped = found_inf != 0.0f;
    const float floor = c->min_scale > 0.0f ? c->min_scale : FLT_TRUE_MIN;
    if (skipped) {
        st->iterations_skipped++;
        st->consecutive_skipped++;
        if (absorbed) st->overflows_absorbed++;
        st->floor_streak = old_scale <= floor ? st->floor_streak + 1 : 0;
    } else {
        st->consecutive_skipped = 0;
        st->floor_streak = 0;
    }
    s->n_states = 0;
    if (c->floor_patience > 0 && st->floor_streak >= c->floor_patience)
        return fail(s, fn, AMP_ERR_SCALE_FLOOR,
                    "Current loss scale already at minimum (%g) for %lld consecutive skipped steps - cannot decrease "
                    "scale anymore.",
                    (double)old_scale, (long long)st->floor_streak);
    return AMP_OK;
}

int amp_scaler_update_to(amp_scaler *s, float new_scale) {
    if (!s) return AMP_ERR_NULL_POINTER;
    if (!s->enabled) return AMP_OK;
    const int code = check_initialized(s, "amp_scaler_update_to", "update");
    if (code != AMP_OK) return code;
    s->scale = new_scale;
    s->n_states = 0;
    return AMP_OK;
}

/* ---- getters and setters ---- */

float amp_scaler_get_scale(const amp_scaler *s) { return s && s->enabled ? s->scale : 1.0f; }
int32_t amp_scaler_get_growth_tracker(const amp_scaler *s) { return s && s->enabled ? s->growth_tracker : 0; }
double amp_scaler_get_growth_factor(const amp_scaler *s) { return s ? s->config.growth_factor : 0.0; }
double amp_scaler_get_backoff_factor(const amp_scaler *s) { return s ? s->config.backoff_factor : 0.0; }
int32_t amp_scaler_get_growth_interval(const amp_scaler *s) { return s ? s->config.growth_interval : 0; }
void amp_scaler_set_growth_factor(amp_scaler *s, double growth_factor) {
    if (s) s->config.growth_factor = growth_factor;
}
void amp_scaler_set_backoff_factor(amp_scaler *s, double backoff_factor) {
    if (s) s->config.backoff_factor = backoff_factor;
}
void amp_scaler_set_growth_interval(amp_scaler *s, int32_t growth_interval) {
    if (s) s->config.growth_interval = growth_interval;
}

void amp_scaler_get_stats(const amp_scaler *s, amp_scaler_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!s) return;
    *out = s->stats;
    out->hysteresis_tracker = s->hysteresis_tracker;
}
