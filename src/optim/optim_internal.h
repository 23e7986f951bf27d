/* Internal: the optimizer's layout, shared by the files of src/optim.
 *
 * Layout. One allocation (`state`) holds every fp32 state role back to back: the master weights of
 * the F16/BF16 parameters, then SGD's momentum buffers, then Adam's exp_avg, then exp_avg_sq. Within
 * a role the parameters follow the optimizer's order, each slice padded to 64 bytes (16 floats), like
 * the context's parameter buffer. A role the configuration does not need takes no space.
 *
 * Work units. The update sweeps fixed segments of at most OPTIM_SEGMENT elements, each inside one
 * parameter, made at create time; the thread pool (if used) runs whole segments. The norm's fp64
 * partial sums are kept per segment and added in segment order, so the result does not depend on the
 * thread count. Inside a segment the work goes in blocks of OPTIM_BLOCK elements through stack
 * buffers (the gradient read as fp32, the gradient the update uses). */
#ifndef AMP_OPTIM_INTERNAL_H
#define AMP_OPTIM_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/optim.h"
#include "../kernels/update_kernels.h"

enum {
    OPTIM_SEGMENT = 1 << 15, /* elements per work unit (128 KiB of fp32): the thread pool's grain */
    OPTIM_BLOCK = 512,       /* elements per stack block inside a segment (2 KiB per fp32 buffer) */
    OPTIM_ALIGN_FLOATS = 16, /* every state slice starts on a 64-byte boundary */
    OPTIM_PARALLEL_MIN = 1 << 20 /* elements from which the sweeps use the thread pool */
};

/* torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6), in the gradients'
 * dtype (fp32); the 1e-6 is a Python float (double) converted to fp32 there. */
#define OPTIM_CLIP_EPS 1e-6

typedef struct optim_param {
    amp_tensor *tensor;    /* the parameter: data of tensor->dtype (F32, F16 or BF16), contiguous */
    amp_tensor *grad;      /* its gradient: F32, F16 or BF16, same numel */
    int64_t numel;
    uint64_t first_index;  /* index of element 0 in the optimizer's flat order (stochastic rounding) */
    float *master;         /* numel fp32: tensor->data when F32, else a slice of the master role */
    float *momentum;       /* SGD with momentum != 0, else NULL */
    float *exp_avg;        /* Adam/AdamW, else NULL */
    float *exp_avg_sq;
    /* the fused step's, for one step: the backward check's note of the gradient holds
     * (amp_ctx_set_backward_grad_check; an fp32 gradient), and its absmax_bits */
    bool grad_noted;
    uint32_t grad_absmax;
    /* the update's, for one update: the parameter's cast copy to rewrite beside the master
     * (amp_ctx_keep_cast_copies; an fp32 parameter), or NULL, and its dtype */
    void *cast_copy;
    amp_dtype copy_dtype;
} optim_param;

typedef struct optim_segment {
    size_t param;          /* index into amp_optimizer.params */
    int64_t start, len;    /* elements [start, start + len) of that parameter */
} optim_segment;

struct amp_optimizer {
    amp_ctx *ctx;
    amp_allocator allocator; /* the context's, copied: the optimizer's memory comes from it */
    amp_optim_config config;
    int64_t step_count;      /* updates taken; skipped fused steps do not count */
    size_t n_params;
    int64_t total_numel;     /* elements over all parameters */
    optim_param *params;
    optim_segment *segments;
    size_t n_segments;
    double *partial;         /* n_segments fp64 sums of squares (the fused pass's norm) */
    int64_t noted_numel;     /* the last fused step: gradient elements checked by backward's notes (tests) */
    float *state;            /* the state roles described above */
    size_t state_bytes;
    /* Sharded training (optim_shard.h): the next clip or fused step takes the clip coefficient from
     * this fp64 sum of squares over every rank's gradients instead of its own (set, used once). */
    bool norm_sum_given;
    double norm_sum;
};

/* Writes the gradients' pending zeros (amp_zero_grad's, src/tensor/ctx_internal.h) before a pass
 * reads them: every sweep of the optimizer, and the scaler's unscale. */
void optim_settle_grads(const amp_optimizer *opt);

/* amp_optimizer_fused_step, with want_norm false where the caller will not read result->grad_norm:
 * then, where the backward check's notes replace the first pass (no clipping), the update's pass does
 * not add up the noted gradients' squares either, and grad_norm is NaN. Everything else, the update
 * and found_inf included, is the same. */
int optim_fused_step(amp_optimizer *opt, float inv_scale, float max_norm, bool want_norm, amp_fused_result *result);

/* ---- per-step scalars, fixed for one update (kernels/update_kernels.h; computed once, as torch
 * computes them) ---- */

void optim_sgd_scalars_init(const amp_optimizer *opt, amp_sgd_scalars *s);
void optim_adam_scalars_init(const amp_optimizer *opt, amp_adam_scalars *s);

/* ---- stochastic rounding (stochastic_round.c) ---- */

/* The stream key of one update: a hash of (seed, step). */
uint64_t optim_sr_key(uint64_t seed, uint64_t step);
/* 32 random bits for element `index` of the update keyed by `key` (splitmix64 at that counter). */
uint32_t optim_sr_bits(uint64_t key, uint64_t index);
/* x rounded to bf16 / f16 up or down with probability proportional to proximity, driven by the 32
 * random bits r: unbiased (E[result] = x exactly, for f16 subnormals to within 2^-32 of the spacing
 * when |x| < 2^-33); inf and NaN round to nearest even. */
uint16_t optim_sr_bf16(float x, uint32_t r);
uint16_t optim_sr_fp16(float x, uint32_t r);
/* Writes n fp32 values from src into dst (F16 or BF16) stochastically rounded; element i uses the
 * random bits of index first_index + i. */
void optim_sr_write(void *dst, amp_dtype dtype, const float *src, int64_t n, uint64_t key, uint64_t first_index);

#endif /* AMP_OPTIM_INTERNAL_H */
