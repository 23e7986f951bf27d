/* Optimizers over the context's parameters, with fp32 master weights, and the fused flat pass that
 * mixed precision wants (unscale, inf/NaN check, global-norm clipping and the update in one sweep
 * over contiguous buffers).
 *
 * Master weights. An F32 parameter is its own master weight and is updated in place. An F16 or BF16
 * parameter (the fp16-master and pure presets) gets an fp32 master copy, made from it when the
 * optimizer is created; each step updates the master copy and writes it back rounded to nearest even
 * (or stochastically rounded, when asked: seeded and reproducible after a resume).
 * Memory. The optimizer's state (master weights, momentum, Adam moments) lives in one contiguous fp32
 * buffer per role, in the order of its parameters, like the context's parameter buffer; all roles lie
 * back to back in one allocation from the context's allocator, made at create time, so a step
 * allocates nothing. Free the optimizer before its context (it points at the context's tensors).
 * Semantics follow torch.optim (SGD, Adam, AdamW; their defaults below), step by step: for fp32
 * parameters every operation is the fp32 operation torch's single-tensor CPU path performs, in its
 * order (fused multiply-adds where ATen fuses), with torch's Python-double scalars (1 - beta1,
 * lr / (1 - beta1^t), ...) computed in double from the fp32 configuration values. SGD then matches
 * torch bit for bit; Adam and AdamW match in their moments, and in their parameters except where a
 * PyTorch build's square root is not correctly rounded (MKL's; amp's is): see tests/test_optim.c.
 * Gradients are read as fp32 whatever their dtype (F32, F16 or BF16). Results do not depend on the
 * thread count or the SIMD path. One thread at a time per optimizer. */
#ifndef AMP_OPTIM_H
#define AMP_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum amp_optim_kind { AMP_OPTIM_SGD, AMP_OPTIM_ADAM, AMP_OPTIM_ADAMW } amp_optim_kind;

typedef struct amp_optim_config {
    amp_optim_kind kind;
    float lr;
    float weight_decay; /* SGD/Adam: L2 added to the gradient; AdamW: decoupled, lr * wd * param */
    /* SGD */
    float momentum, dampening;
    bool nesterov;
    /* Adam, AdamW */
    float beta1, beta2, eps;
    /* Writing low-precision parameters from their fp32 master weights. */
    bool stochastic_rounding; /* F16/BF16 parameters: round up or down with probability by proximity
                                 (unbiased) instead of to nearest even; F32 parameters: no effect */
    uint64_t seed; /* stochastic rounding's generator: a hash of (seed, step count before the update,
                      the element's index in the optimizer's order: its parameters' elements counted
                      one after another), so a resumed run rounds exactly as the uninterrupted one */
} amp_optim_config;

/* torch.optim's defaults for `kind`: SGD lr 1e-3 (torch requires one; 1e-3 is its documented default
 * since 2.x), momentum 0, dampening 0, no Nesterov, weight decay 0; Adam lr 1e-3, betas (0.9, 0.999),
 * eps 1e-8, weight decay 0; AdamW the same with weight decay 1e-2. */
amp_optim_config amp_optim_default_config(amp_optim_kind kind);

typedef struct amp_optimizer amp_optimizer;

/* An optimizer over all of ctx's parameters (after amp_ctx_alloc_params), or over the n given ones
 * (several optimizers may share a context, as several torch optimizers share a model). Returns AMP_OK,
 * AMP_ERR_NULL_POINTER (ctx, config, out, or a listed parameter is NULL; params NULL with n > 0),
 * AMP_ERR_INVALID_ARGUMENT (bad config: a non-finite value, lr < 0, weight_decay < 0, momentum < 0,
 * betas outside [0, 1), eps < 0, Nesterov without momentum or with dampening, an unknown kind; the
 * parameters are not allocated yet; no parameters; a tensor that is not one of ctx's parameters, or one
 * listed twice), AMP_ERR_UNSUPPORTED_DTYPE (a parameter or gradient that is not F32, F16 or BF16),
 * AMP_ERR_OUT_OF_MEMORY. On failure *out is NULL. */
int amp_optimizer_create(amp_ctx *ctx, const amp_optim_config *config, amp_optimizer **out);
int amp_optimizer_create_for(amp_ctx *ctx, const amp_optim_config *config, amp_tensor *const *params, size_t n,
                             amp_optimizer **out);
void amp_optimizer_free(amp_optimizer *opt);

size_t amp_optimizer_num_params(const amp_optimizer *opt);
amp_tensor *amp_optimizer_param(const amp_optimizer *opt, size_t index);
/* The number of updates applied so far (skipped steps do not count). */
int64_t amp_optimizer_step_count(const amp_optimizer *opt);
float amp_optimizer_get_lr(const amp_optimizer *opt);
/* Sets the lr the next steps use (e.g. amp_lr_at(&schedule, amp_optimizer_step_count(opt))); a
 * negative or non-finite lr is ignored. */
void amp_optimizer_set_lr(amp_optimizer *opt, float lr);
/* The fp32 master copy of parameter `index` (its own data when the parameter is F32). Writable: the
 * parameter's version (amp_tensor.version) is advanced. */
float *amp_optimizer_master(const amp_optimizer *opt, size_t index);

/* The optimizer's per-element fp32 state. */
typedef enum amp_optim_state {
    AMP_OPTIM_STATE_MASTER,     /* master weights of F16/BF16 parameters (F32 ones: NULL here) */
    AMP_OPTIM_STATE_MOMENTUM,   /* SGD with momentum != 0: torch's momentum_buffer */
    AMP_OPTIM_STATE_EXP_AVG,    /* Adam, AdamW: torch's exp_avg (first moment) */
    AMP_OPTIM_STATE_EXP_AVG_SQ  /* Adam, AdamW: torch's exp_avg_sq (second moment) */
} amp_optim_state;

/* Parameter `index`'s slice of one state buffer (numel fp32 values), or NULL when this optimizer
 * has no such state for it (or the arguments are out of range). Writable: a test or a loader may
 * set the state. */
float *amp_optimizer_state(const amp_optimizer *opt, amp_optim_state which, size_t index);
/* All of the optimizer's fp32 state (every role above, back to back, padded) as one flat byte range:
 * a checkpoint saves it with amp_optimizer_step_count and the context's parameter memory; writing
 * all three back into an optimizer created with the same configuration over the same parameters
 * resumes the run bit for bit (stochastic rounding included). */
void *amp_optimizer_state_memory(const amp_optimizer *opt, size_t *bytes);
/* Sets the number of updates taken (a resumed run's count; Adam's bias correction and stochastic
 * rounding depend on it; SGD initialises its momentum buffers from the gradient at count 0).
 * Returns AMP_OK, AMP_ERR_NULL_POINTER or AMP_ERR_INVALID_ARGUMENT (step < 0). */
int amp_optimizer_set_step_count(amp_optimizer *opt, int64_t step);

/* One update from the gradients as they are (already unscaled), without looking at them: like torch,
 * non-finite gradients reach the parameters (the fused step below checks). Returns AMP_OK, or
 * AMP_ERR_NULL_POINTER. */
int amp_optimizer_step(amp_optimizer *opt);

/* Global L2 norm of the gradients (fp64 accumulation) and, when max_norm > 0, clipping as
 * torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (norm + 1e-6), computed in fp32 from the norm
 * rounded to fp32, and when it is below 1 every gradient is multiplied by it (in fp32, stored in the
 * gradient's dtype). Returns the norm (inf or NaN when a gradient is not finite: unlike torch, the
 * gradients are then left as they are; NaN for a NULL optimizer). */
double amp_optimizer_clip_grad_norm(amp_optimizer *opt, float max_norm);

typedef struct amp_fused_result {
    bool found_inf;   /* a gradient was inf/NaN before or after unscaling: nothing was updated */
    double grad_norm; /* global L2 norm of the unscaled gradients (before clipping) */
    float clip_coef;  /* the factor applied to the unscaled gradients (1 without clipping) */
} amp_fused_result;

/* The fused pass: reads each gradient g once to form g * inv_scale, checks it for inf/NaN and
 * accumulates the global norm; then, unless something was non-finite, applies the update with the
 * unscaled, clipped gradient (max_norm <= 0: no clipping) and writes the low-precision parameter
 * copies. The gradients themselves are left unscaled in memory (g * inv_scale * clip_coef) when the
 * step is taken, untouched when it is skipped.
 * Exactly: u = g * inv_scale (fp32 multiply) for every element, the norm is sqrt of the fp64 sum of
 * u^2, and found_inf is that sum not being finite (any u inf or NaN: a non-finite g, an overflow such as
 * 3e38 * 16, an inv_scale of inf). When found_inf, nothing changes: parameters, masters, optimizer state,
 * gradients, step count. Otherwise clip_coef is amp_optimizer_clip_grad_norm's, each gradient becomes
 * (u * clip_coef) and the update uses that fp32 value (stored back rounded for F16/BF16 gradients):
 * for fp32 gradients the same bits as multiplying the gradients by inv_scale, then
 * amp_optimizer_clip_grad_norm, then amp_optimizer_step. Two read passes over the gradients (the norm
 * must be complete before the first update), the first one read-only; without clipping, gradients
 * that backward checked as it wrote them (amp_ctx_set_backward_grad_check, amp/tensor.h) skip the
 * first, their check taken from backward's notes and their share of the norm from the update's pass
 * (the same bits). result may be NULL. Returns
 * AMP_OK (also when the step was skipped), AMP_ERR_NULL_POINTER, AMP_ERR_INVALID_ARGUMENT (max_norm
 * NaN). */
int amp_optimizer_fused_step(amp_optimizer *opt, float inv_scale, float max_norm, amp_fused_result *result);

/* ---- learning-rate schedules (evaluated at the optimizer's step count) ---- */

typedef enum amp_lr_kind { AMP_LR_CONSTANT, AMP_LR_STEP, AMP_LR_COSINE } amp_lr_kind;

typedef struct amp_lr_schedule {
    amp_lr_kind kind;
    float base_lr;
    int64_t warmup_steps; /* linear warmup from base_lr / warmup_steps (any kind); 0: none */
    int64_t step_size;    /* AMP_LR_STEP: multiply by gamma every step_size steps (torch StepLR); <= 0: never */
    float gamma;
    int64_t total_steps;  /* AMP_LR_COSINE: cosine from base_lr to min_lr over total_steps (after warmup),
                             then min_lr; <= 0: base_lr */
    float min_lr;
} amp_lr_schedule;

/* The learning rate for the given optimizer step (0-based count of updates taken; < 0 counts as 0),
 * computed in double and rounded once to fp32. With W = warmup_steps and s = step - W:
 *     step < W:         base_lr * (step + 1) / W              (reaches base_lr on step W - 1)
 *     AMP_LR_CONSTANT:  base_lr
 *     AMP_LR_STEP:      base_lr * gamma^floor(s / step_size)
 *     AMP_LR_COSINE:    min_lr + (base_lr - min_lr) * (1 + cos(pi * s / total_steps)) / 2, s < total_steps
 * In torch terms: the warmup is LinearLR(start_factor=1/W, end_factor=1, total_iters=W-1), followed by
 * StepLR(step_size, gamma) or CosineAnnealingLR(T_max=total_steps, eta_min=min_lr) through
 * SequentialLR(milestones=[W]) (torch's cosine rises again after T_max; this one stays at min_lr).
 * NULL gives 0. */
float amp_lr_at(const amp_lr_schedule *schedule, int64_t step);

#ifdef __cplusplus
}
#endif
#endif /* AMP_OPTIM_H */
