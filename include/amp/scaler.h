/* Dynamic loss scaling: PyTorch's GradScaler (torch.amp.GradScaler), its two kernels, and opt-in
 * extras from Apex, DeepSpeed and Megatron-LM.
 *
 * Why: fp16 gradients of small magnitude underflow to zero. Multiplying the loss by a scale S before
 * the backward pass multiplies every gradient by S; the scaler divides it out again ("unscales")
 * before the optimizer step, skips the step when a scaled gradient overflowed to inf/NaN, and adapts
 * S: it backs off (S *= backoff_factor) after an overflow and grows (S *= growth_factor) after
 * growth_interval clean iterations in a row.
 *
 * A training iteration, as in PyTorch (one scaler, any number of losses and optimizers):
 *     amp_scaler_backward(s, ctx, loss);        // scaler.scale(loss).backward(); once per loss
 *     amp_scaler_unscale(s, opt);               // optional: scaler.unscale_(opt), e.g. before clipping
 *     amp_scaler_step(s, opt, &report);         // scaler.step(opt): skipped on inf/NaN; once per opt
 *     amp_scaler_update(s);                     // scaler.update(): once per iteration, after all steps
 * The defaults and every state transition, error and number are PyTorch's (torch 2.x,
 * torch/amp/grad_scaler.py and aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp):
 *   - the scale is an fp32 value; inv_scale = (float)(1.0 / (double)scale), the reciprocal in fp64;
 *   - each optimizer has a stage for the current iteration: ready -> unscaled -> stepped, reset to
 *     ready for every optimizer by amp_scaler_update / amp_scaler_update_to. Misuse returns
 *     AMP_ERR_STATE and amp_scaler_error() gives the amp function that refused, then PyTorch's
 *     message (where it names scaler.scale(loss), the C functions that do it):
 *         unscale twice     "amp_scaler_unscale: unscale_() has already been called on this optimizer
 *                           since the last update()."
 *         unscale after step "amp_scaler_unscale: unscale_() is being called after step()."
 *         step twice        "amp_scaler_step: step() has already been called since the last update()."
 *         before any scale  "amp_scaler_step: Attempted step but _scale is None.  This may indicate your
 *                           script did not use amp_scaler_backward (or amp_scaler_scale) earlier in the
 *                           iteration." (and amp_scaler_unscale / amp_scaler_update, naming unscale_ /
 *                           update)
 *         no gradients      "amp_scaler_step: No inf checks were recorded for this optimizer. (...)"
 *                           "amp_scaler_update: No inf checks were recorded prior to update."
 *     Every other error of the scaler starts with its function's name too. "No gradients" means
 *     none of the optimizer's parameters has a gradient written since amp_zero_grad (PyTorch's
 *     p.grad is None after zero_grad()): a step after amp_zero_grad without a backward is refused
 *     and changes nothing, the fused step's too (amp_scaler_step_fused: its flat pass would decay
 *     the weights as if the gradients were zeros; PyTorch's fused optimizers skip such parameters).
 *     A step after an explicit unscale is allowed (it does not unscale again); an update without any
 *     step is an error only when no optimizer was unscaled or stepped.
 *   - amp_scaler_update backs off when any optimizer of the iteration saw inf/NaN (found_inf is
 *     their sum, as in PyTorch); the tracker counts clean updates, not optimizer steps.
 *   - disabled (config.enabled = false): amp_scaler_backward is a plain backward, amp_scaler_step is
 *     amp_optimizer_step, everything else does nothing; amp_scaler_get_scale() is 1 and the state
 *     dict is empty.
 *
 * Where amp differs from PyTorch (each deliberate):
 *   - fp16 gradients are accepted. PyTorch's unscale_ refuses them ("Attempting to unscale FP16
 *     gradients."), although its CPU kernel handles them, because an fp16 gradient is unscaled in
 *     fp16: g * inv_scale is computed in fp32 but rounded back to fp16, so an unscaled magnitude
 *     below 2^-24 (about 6e-8) flushes to zero and one below 2^-14 loses precision (subnormal). That
 *     is safe only when the unscaled gradients are well inside fp16's range, e.g. when an optimizer
 *     with fp32 master weights consumes them at once; prefer fp32 gradients (fp32 parameters with
 *     autocast) or the fused step, which unscales in fp32 without writing fp16 back first.
 *   - the unscale kernel writes NaNs as PyTorch's does when it runs as one piece (one thread, or at
 *     most 32768 elements): f16 payloads kept, bf16 NaNs 0xFFFF or 0x7FC0 by the element's index
 *     (src/kernels/unscale_kernels.h has the rule). PyTorch with several threads splits a longer
 *     tensor into pieces whose own tails take 0x7FC0. Finite values never depend on this.
 *   - the fused step (amp_scaler_step_fused) lets the optimizer skip when a gradient is non-finite
 *     before or after unscaling, and such a skip counts as an overflow for the update.
 *
 * Extras (all off by default, so the defaults reproduce PyTorch bit for bit):
 *   - min_scale / max_scale clamp the scale after each automatic update (Apex, DeepSpeed, Megatron
 *     have a floor; Apex a cap of 2^24).
 *   - hysteresis H >= 2: only the H-th overflow backs off, the earlier ones are absorbed (the step is
 *     still skipped and the growth tracker still reset). Two refill rules exist; see
 *     amp_hysteresis_mode.
 *   - safe mode: a finite scaled gradient that becomes inf/NaN when multiplied by inv_scale (an
 *     inv_scale > 1 after the scale fell below 1 or was set lower with update_to, an inf inv_scale
 *     from a zero scale, pytorch#99640) also skips the step and counts as an overflow. PyTorch
 *     checks only the scaled values and steps on such gradients.
 *   - floor_patience N: amp_scaler_update returns AMP_ERR_SCALE_FLOOR when N iterations in a row were
 *     skipped while the scale sat at its floor (min_scale, or without one the smallest positive
 *     float 2^-149 or zero), i.e. backing off can no longer help (DeepSpeed raises on the first).
 *   - every step reports whether it was skipped and why (amp_step_report); counters in
 *     amp_scaler_stats.
 *
 * A scaler is not thread-safe; use one per training loop. */
#ifndef AMP_SCALER_H
#define AMP_SCALER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "optim.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the kernels (PyTorch's, bit for bit) ---- */

/* Like torch._amp_foreach_non_finite_check_and_unscale_ on one buffer: for each element (read as
 * fp32), a non-finite value sets *found_inf = 1.0f (never cleared here); then the element is
 * multiplied by inv_scale in place (not when inv_scale == 1). dtype: AMP_F32, AMP_F16, AMP_BF16
 * (any other dtype, n == 0 or grads == NULL: nothing happens). f16/bf16 elements are multiplied in
 * fp32 and written back rounded to nearest even; every bit is PyTorch's single-threaded result,
 * NaNs included: f16 NaNs keep their sign and payload (quieted), bf16 NaNs are 0xFFFF in the first
 * n - n % 32 elements and 0x7FC0 in the rest (PyTorch's vector loop and scalar tail), also at
 * inv_scale == 1. grads needs only its element alignment (4 or 2 bytes), no vector alignment.
 * Single-threaded. */
void amp_non_finite_check_and_unscale(void *grads, amp_dtype dtype, size_t n, float *found_inf, float inv_scale);
/* The same, and additionally *found_after = 1.0f when a finite element became inf/NaN through the
 * multiply (safe mode). Either flag pointer may be NULL. */
void amp_non_finite_check_and_unscale_safe(void *grads, amp_dtype dtype, size_t n, float *found_inf,
                                           float *found_after, float inv_scale);
/* Exactly torch._amp_update_scale_: backoff and reset the tracker when found_inf != 0; otherwise
 * count, and grow (refusing a non-finite result) when the count reaches growth_interval. Both
 * multiplies are done in double and rounded to float, as PyTorch does. */
void amp_update_scale(float *scale, int32_t *growth_tracker, float found_inf, double growth_factor,
                      double backoff_factor, int32_t growth_interval);
/* The unscale factor PyTorch uses for `scale`: (float)(1.0 / (double)scale). */
float amp_inv_scale(float scale);

/* ---- the scaler ---- */

/* When hysteresis H >= 2 absorbs overflows, and when the allowance comes back. In every mode the
 * tracker starts at H, an absorbed overflow decrements it, and an overflow that finds it at 1 (or
 * below) backs off. (other_mixed_precision_systems.md sections 2.2 and 3.2.) */
typedef enum amp_hysteresis_mode {
    /* DeepSpeed DynamicLossScaler with consecutive_hysteresis=False (its default): refilled only
     * when the growth tracker reaches growth_interval; the tracker never drops below 1. So after the
     * first H-1 overflows since the last growth every further overflow backs off. */
    AMP_HYSTERESIS_DEEPSPEED = 0,
    /* DeepSpeed with consecutive_hysteresis=True (and Apex's update_scale_hysteresis kernel):
     * refilled by every clean iteration, so only H overflows in a row back off. */
    AMP_HYSTERESIS_DEEPSPEED_CONSECUTIVE = 1,
    /* Megatron-LM DynamicGradScaler: refilled only on growth, like AMP_HYSTERESIS_DEEPSPEED, but the
     * tracker keeps decrementing (0, -1, ...) and is saved as such. Same scales as DEEPSPEED. */
    AMP_HYSTERESIS_MEGATRON = 2
} amp_hysteresis_mode;

typedef struct amp_scaler_config {
    /* PyTorch's arguments and defaults */
    float init_scale;        /* 65536 (2^16) */
    double growth_factor;    /* 2.0; must be > 1 when enabled */
    double backoff_factor;   /* 0.5; must be < 1 when enabled (not checked >= 0, as in PyTorch) */
    int32_t growth_interval; /* 2000; <= 0 means the scale never grows (PyTorch's arithmetic) */
    bool enabled;            /* true */
    /* amp's extras, all off by default */
    float min_scale;         /* > 0: after each automatic update, scale = max(scale, min_scale) */
    float max_scale;         /* > 0: after each automatic update, scale = min(scale, max_scale) */
    int32_t hysteresis;      /* >= 2: tolerate hysteresis - 1 overflows before backing off; 0 or 1: off */
    amp_hysteresis_mode hysteresis_mode;
    bool safe;               /* also skip steps whose gradients became non-finite after unscaling */
    int32_t floor_patience;  /* > 0: AMP_ERR_SCALE_FLOOR after this many skipped iterations in a row
                                at the floor; 0: off */
} amp_scaler_config;

amp_scaler_config amp_scaler_default_config(void);
/* NULL if config is acceptable, else the reason (PyTorch's text for its two checks: "The growth
 * factor must be > 1.0.", "The backoff factor must be < 1.0."). */
const char *amp_scaler_config_error(const amp_scaler_config *config);

typedef struct amp_scaler amp_scaler;

/* config NULL: the defaults. Returns AMP_OK, AMP_ERR_INVALID_ARGUMENT (amp_scaler_config_error says
 * why), AMP_ERR_NULL_POINTER, AMP_ERR_OUT_OF_MEMORY. */
int amp_scaler_create(const amp_scaler_config *config, amp_scaler **out);
/* NULL is fine. */
void amp_scaler_free(amp_scaler *s);

bool amp_scaler_is_enabled(const amp_scaler *s);
/* Turns scaling on or off between iterations (AMP_ERR_STATE while any optimizer has been unscaled or
 * stepped since the last update). Enabling checks the factors (AMP_ERR_INVALID_ARGUMENT) and keeps
 * the scale and tracker the scaler had. */
int amp_scaler_set_enabled(amp_scaler *s, bool enabled);

/* The message of the last failed call ("" if none), and its status (AMP_OK if none). */
const char *amp_scaler_error(const amp_scaler *s);
int amp_scaler_status(const amp_scaler *s);
void amp_scaler_clear_error(amp_scaler *s);

/* The loss seed for this iteration: PyTorch's scale(loss) is loss * amp_scaler_scale(s). Marks the
 * scale as in use (PyTorch's lazy initialisation, which unscale/step/update require). 1 when
 * disabled. */
float amp_scaler_scale(amp_scaler *s);
/* A scaled backward: amp_backward_scaled(ctx, loss, amp_scaler_scale(s)); disabled: amp_backward
 * with seed 1. Call once per loss; gradients accumulate. */
int amp_scaler_backward(amp_scaler *s, amp_ctx *ctx, amp_tensor *loss);

/* unscale_: checks every gradient of opt's parameters (parameters without a gradient are skipped)
 * and multiplies it by inv_scale in place; records this optimizer's found_inf. Gradients must be
 * F32, F16 or BF16 and contiguous (AMP_ERR_UNSUPPORTED_DTYPE / AMP_ERR_INVALID_ARGUMENT, nothing
 * touched). Disabled: does nothing. */
int amp_scaler_unscale(amp_scaler *s, amp_optimizer *opt);

/* Data-parallel training: after amp_scaler_unscale, records that another rank found inf/NaN in its
 * gradients this iteration (the found_inf all-reduce of PyTorch's ShardedGradScaler), so step skips
 * and update backs off here too. AMP_ERR_STATE unless opt is unscaled and not stepped. Disabled:
 * does nothing. */
int amp_scaler_record_found_inf(amp_scaler *s, const amp_optimizer *opt);

typedef enum amp_skip_reason {
    AMP_SKIP_NONE = 0,
    AMP_SKIP_FOUND_INF = 1,               /* a scaled gradient was inf/NaN before unscaling (PyTorch's skip) */
    AMP_SKIP_NONFINITE_AFTER_UNSCALE = 2  /* all were finite, but one became inf/NaN when unscaled
                                             (safe mode, or the fused optimizer refusing it) */
} amp_skip_reason;

/* "none", "found_inf", "nonfinite_after_unscale"; "invalid" otherwise. */
const char *amp_skip_reason_name(amp_skip_reason reason);

typedef struct amp_step_report {
    bool skipped;           /* the optimizer did not update anything */
    amp_skip_reason reason;
    float found_inf;        /* this optimizer's found_inf for the update: 0 or 1 */
    float scale;            /* the scale the gradients carried (1 when disabled) */
    float inv_scale;        /* the factor they were unscaled by */
    bool fused;             /* the fused pass ran: grad_norm and clip_coef are its results */
    double grad_norm;       /* fused: global L2 norm of the unscaled gradients; else NaN */
    float clip_coef;        /* fused: factor applied after unscaling; else 1 */
} amp_step_report;

/* step: unscales first unless amp_scaler_unscale already did, then calls amp_optimizer_step unless
 * this optimizer found inf/NaN (then the optimizer is not called at all, so its step count does not
 * advance). report may be NULL. Disabled: amp_optimizer_step. */
int amp_scaler_step(amp_scaler *s, amp_optimizer *opt, amp_step_report *report);
/* step through amp_optimizer_fused_step (unscale, check, clip to max_norm (<= 0: no clipping) and
 * update in one pass) when opt has not been unscaled in this iteration (AMP_ERR_STATE, "No inf
 * checks were recorded for this optimizer.", when none of its gradients was written since
 * amp_zero_grad); after an explicit unscale,
 * the same pass with inv_scale 1 (or no call when inf/NaN was found). Disabled: the fused pass with
 * inv_scale 1. With amp_ctx_set_backward_grad_check on (amp/tensor.h) and no clipping, the check of
 * the weight gradients backward noted comes from the notes, and those gradients are read once, by the
 * update. report may be NULL: the global norm is then not computed where nothing but the report needs
 * it (no clipping and backward's notes: the noted gradients' sum of squares is left out of the update's
 * pass); what is updated is the same. */
int amp_scaler_step_fused(amp_scaler *s, amp_optimizer *opt, float max_norm, amp_step_report *report);

/* update: the new scale from this iteration's found_inf (amp_update_scale, then the extras), and
 * every optimizer back to ready. Returns AMP_ERR_SCALE_FLOOR (after updating) when floor_patience
 * is reached. Disabled: does nothing. */
int amp_scaler_update(amp_scaler *s);
/* update(new_scale): sets the scale as given (no clamping, no check), leaves the growth tracker,
 * and every optimizer back to ready. */
int amp_scaler_update_to(amp_scaler *s, float new_scale);

typedef enum amp_scaler_stage { AMP_STAGE_READY = 0, AMP_STAGE_UNSCALED = 1, AMP_STAGE_STEPPED = 2 } amp_scaler_stage;
/* opt's stage in the current iteration (READY when not seen since the last update). */
amp_scaler_stage amp_scaler_get_stage(const amp_scaler *s, const amp_optimizer *opt);
/* opt's found_inf in the current iteration (0 when not checked yet). */
float amp_scaler_found_inf(const amp_scaler *s, const amp_optimizer *opt);

/* Getters (get_scale is 1 when disabled, the tracker 0) and PyTorch's unchecked setters. */
float amp_scaler_get_scale(const amp_scaler *s);
int32_t amp_scaler_get_growth_tracker(const amp_scaler *s);
double amp_scaler_get_growth_factor(const amp_scaler *s);
double amp_scaler_get_backoff_factor(const amp_scaler *s);
int32_t amp_scaler_get_growth_interval(const amp_scaler *s);
void amp_scaler_set_growth_factor(amp_scaler *s, double growth_factor);
void amp_scaler_set_backoff_factor(amp_scaler *s, double backoff_factor);
void amp_scaler_set_growth_interval(amp_scaler *s, int32_t growth_interval);

typedef struct amp_scaler_stats {
    int64_t steps_taken;         /* optimizer steps the scaler let through */
    int64_t steps_skipped;       /* optimizer steps it skipped */
    int64_t iterations;          /* automatic updates */
    int64_t iterations_skipped;  /* updates that saw found_inf (backed off or absorbed) */
    int64_t consecutive_skipped; /* the current run of such updates (0 after a clean one) */
    int64_t overflows_absorbed;  /* by hysteresis */
    int64_t floor_streak;        /* the current run of skipped updates with the scale at its floor */
    int32_t hysteresis_tracker;  /* overflows left before a backoff (hysteresis >= 2) */
} amp_scaler_stats;

void amp_scaler_get_stats(const amp_scaler *s, amp_scaler_stats *out);

/* ---- saving and loading ---- */

/* PyTorch's state_dict (its five keys) plus amp's counters. */
typedef struct amp_scaler_state {
    bool empty;             /* a disabled scaler's state: PyTorch's {} */
    double scale;           /* "scale" (an fp32 value) */
    double growth_factor;   /* "growth_factor" */
    double backoff_factor;  /* "backoff_factor" */
    int32_t growth_interval; /* "growth_interval" */
    int32_t growth_tracker; /* "_growth_tracker" */
    bool has_amp;           /* the amp_* keys below are present (a PyTorch dict has none) */
    int32_t hysteresis_tracker;  /* "amp_hysteresis_tracker" */
    int64_t steps_taken, steps_skipped, iterations, iterations_skipped, consecutive_skipped, overflows_absorbed,
        floor_streak;       /* "amp_steps_taken", ... (amp_scaler_stats' names) */
} amp_scaler_state;

/* state_dict(): disabled gives empty = true. Best called after update (the per-optimizer stages are
 * not saved, as in PyTorch). */
void amp_scaler_state_dict(const amp_scaler *s, amp_scaler_state *out);
/* load_state_dict(): disabled: nothing. An empty state gives AMP_ERR_INVALID_ARGUMENT with
 * PyTorch's message after the function's name: "amp_scaler_load_state_dict: The source state dict is
 * empty, possibly because it was saved from a disabled instance of GradScaler.". No other check, as
 * in PyTorch; the scale is rounded to fp32. Without
 * amp keys the counters restart at 0 and the hysteresis tracker at its configured value. */
int amp_scaler_load_state_dict(amp_scaler *s, const amp_scaler_state *state);

/* JSON text: {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
 * "_growth_tracker": 0, "amp_...": ...} - the five keys as Python's json.dumps(scaler.state_dict())
 * writes them, then amp's keys when has_amp; {} when empty. Numbers are the shortest decimal that
 * reads back exactly; non-finite ones Python's way (Infinity, -Infinity, NaN). Writes at most size
 * bytes including the NUL and returns the length the whole text needs (snprintf's convention). */
size_t amp_scaler_state_format(const amp_scaler_state *state, char *buf, size_t size);
/* Parses that text, or the output of json.dumps(torch_scaler.state_dict()): one JSON object of
 * numbers, keys in any order, the five PyTorch keys required, the amp keys all or none, no other
 * key. Integers must be integral and in range. Returns AMP_OK or AMP_ERR_FORMAT with a message in
 * err (may be NULL). */
int amp_scaler_state_parse(const char *text, size_t len, amp_scaler_state *out, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif /* AMP_SCALER_H */
