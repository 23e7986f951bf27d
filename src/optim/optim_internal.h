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
};

/* Writes the gradients' pending zeros (amp_zero_grad's, src/tensor/ctx_internal.h) before a pass
 * reads them: every sweep of the optimizer, and the scaler's unscale. */
void optim_settle_grads(const amp_optimizer *opt);

/* ---- per-step scalars, fixed for one update (computed once, as torch computes them) ---- */

typedef struct optim_sgd_scalars {
    float neg_lr;         /* param.add_(grad, alpha=-lr): (float)(-lr) */
    float weight_decay;   /* grad.add(param, alpha=weight_decay) */
    float momentum;       /* buf.mul_(momentum) */
    float one_minus_damp; /* buf.add_(grad, alpha=1 - dampening): (float)(1.0 - (double)dampening) */
    bool use_momentum, nesterov, first; /* first: the buffers start as the gradient (torch's None) */
} optim_sgd_scalars;

typedef struct optim_adam_scalars {
    float weight_decay;   /* Adam: L2 added to the gradient; 0 for AdamW (decoupled below) */
    float decay_factor;   /* AdamW: param.mul_(1 - lr * weight_decay); 1 when unused */
    bool decoupled;
    float lerp_weight;    /* exp_avg.lerp_(grad, 1 - beta1) */
    float beta2;          /* exp_avg_sq.mul_(beta2) */
    float one_minus_beta2; /* .addcmul_(grad, grad, value=1 - beta2) */
    float bc2_sqrt;       /* (1 - beta2^t) ** 0.5, as the fp32 divisor */
    float eps;
    float neg_step_size;  /* addcdiv_ value: -(lr / (1 - beta1^t)) */
} optim_adam_scalars;

void optim_sgd_scalars_init(const amp_optimizer *opt, optim_sgd_scalars *s);
void optim_adam_scalars_init(const amp_optimizer *opt, optim_adam_scalars *s);

/* ---- the element loops, once per SIMD path (every path gives the same bits) ---- */

/* The norm's fp64 accumulators: element i of a block goes to lane i % 32. 32 independent sums, not 8,
 * so the SIMD loop is not bound by the add's latency: 8 lanes (two AVX2 chains) ran at 21 GB/s from
 * cache on an Emerald Rapids core, where a plain read runs at 30. */
enum { OPTIM_LANES = 32 };

typedef struct optim_kernels {
    /* Updates n elements in place: p (fp32 master), g (the gradient the update uses, fp32, read
     * only; it may be the same memory as nothing else), and the state slices. */
    void (*sgd)(const optim_sgd_scalars *s, float *p, const float *g, float *momentum_buf, int64_t n);
    void (*adam)(const optim_adam_scalars *s, float *p, const float *g, float *exp_avg, float *exp_avg_sq, int64_t n);
    /* scale then sgd in one sweep: g[i] = (g[i] * a) * b stored back, and the update with it. One pass
     * over an fp32 gradient instead of two (the fused step's unscale of fp32 gradients). */
    void (*sgd_scaled)(const optim_sgd_scalars *s, float *p, float *g, float a, float b, float *momentum_buf,
                       int64_t n);
    /* acc[i % OPTIM_LANES] += (double)(g[i] * inv_scale)^2, as a multiply then an add, for i in [0, n) */
    void (*sum_squares)(const float *g, int64_t n, float inv_scale, double acc[OPTIM_LANES]);
    /* dst[i] = (src[i] * a) * b (dst may be src) */
    void (*scale)(float *dst, const float *src, int64_t n, float a, float b);
} optim_kernels;

/* The scalar loops: the reference every other path must match bit for bit. */
void optim_sgd_update(const optim_sgd_scalars *s, float *p, const float *g, float *momentum_buf, int64_t n);
void optim_adam_update(const optim_adam_scalars *s, float *p, const float *g, float *exp_avg, float *exp_avg_sq,
                       int64_t n);
void optim_sum_squares(const float *g, int64_t n, float inv_scale, double acc[OPTIM_LANES]);
void optim_scale(float *dst, const float *src, int64_t n, float a, float b);
void optim_sgd_scaled_update(const optim_sgd_scalars *s, float *p, float *g, float a, float b, float *momentum_buf,
                             int64_t n);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define OPTIM_HAVE_AVX2 1
/* AVX2 + FMA versions (update_avx2.c); call only when amp_isa_supported(AMP_ISA_AVX2). */
void optim_sgd_update_avx2(const optim_sgd_scalars *s, float *p, const float *g, float *momentum_buf, int64_t n);
void optim_adam_update_avx2(const optim_adam_scalars *s, float *p, const float *g, float *exp_avg,
                            float *exp_avg_sq, int64_t n);
void optim_sum_squares_avx2(const float *g, int64_t n, float inv_scale, double acc[OPTIM_LANES]);
void optim_scale_avx2(float *dst, const float *src, int64_t n, float a, float b);
void optim_sgd_scaled_update_avx2(const optim_sgd_scalars *s, float *p, float *g, float a, float b,
                                  float *momentum_buf, int64_t n);
/* AVX-512F (update_avx512.c); call only when amp_isa_supported(AMP_ISA_AVX512). */
void optim_sum_squares_avx512(const float *g, int64_t n, float inv_scale, double acc[OPTIM_LANES]);
#endif

/* The loops of the active path (amp_isa_active()). */
const optim_kernels *optim_kernels_active(void);

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
