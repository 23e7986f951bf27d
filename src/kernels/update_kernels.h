/* Internal: the optimizer's element loops (SGD, Adam/AdamW, the fused step's scale and the gradient
 * norm's sum of squares), one table per SIMD path.
 *
 * The reference twins (kernels/ref/update_ref.c) are torch's per-element operations, one statement
 * each (src/optim/sgd.c and adam.c give the torch lines). A SIMD path does the same IEEE operations on
 * each element, in the same order, with the same fused multiply-adds (fmaf in the twin, an FMA
 * instruction there) and nothing else fused, so every path gives the reference's bits; the tests
 * (tests/test_optim.c) run the optimizer on every path. A SIMD loop hands its remainder to the twin. */
#ifndef AMP_UPDATE_KERNELS_H
#define AMP_UPDATE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/cpu.h"

/* Per-step scalars, fixed for one update (computed once, as torch computes them: src/optim). */
typedef struct amp_sgd_scalars {
    float neg_lr;         /* param.add_(grad, alpha=-lr): (float)(-lr) */
    float weight_decay;   /* grad.add(param, alpha=weight_decay) */
    float momentum;       /* buf.mul_(momentum) */
    float one_minus_damp; /* buf.add_(grad, alpha=1 - dampening): (float)(1.0 - (double)dampening) */
    bool use_momentum, nesterov, first; /* first: the buffers start as the gradient (torch's None) */
} amp_sgd_scalars;

typedef struct amp_adam_scalars {
    float weight_decay;   /* Adam: L2 added to the gradient; 0 for AdamW (decoupled below) */
    float decay_factor;   /* AdamW: param.mul_(1 - lr * weight_decay); 1 when unused */
    bool decoupled;
    float lerp_weight;    /* exp_avg.lerp_(grad, 1 - beta1) */
    float beta2;          /* exp_avg_sq.mul_(beta2) */
    float one_minus_beta2; /* .addcmul_(grad, grad, value=1 - beta2) */
    float bc2_sqrt;       /* (1 - beta2^t) ** 0.5, as the fp32 divisor */
    float eps;
    float neg_step_size;  /* addcdiv_ value: -(lr / (1 - beta1^t)) */
} amp_adam_scalars;

/* The norm's fp64 accumulators: element i of a block goes to lane i % 32. 32 independent sums rather
 * than 8, so that a SIMD loop is bound by its loads, not by the latency of its adds. */
enum { AMP_UPDATE_LANES = 32 };

typedef void (*amp_sgd_update_fn)(const amp_sgd_scalars *s, float *p, const float *g, float *momentum_buf, int64_t n);
typedef void (*amp_adam_update_fn)(const amp_adam_scalars *s, float *p, const float *g, float *exp_avg,
                                   float *exp_avg_sq, int64_t n);
typedef void (*amp_sgd_scaled_update_fn)(const amp_sgd_scalars *s, float *p, float *g, float a, float b,
                                         float *momentum_buf, int64_t n);
typedef void (*amp_sum_squares_fn)(const float *g, int64_t n, float inv_scale, double acc[AMP_UPDATE_LANES]);
typedef void (*amp_scale_fn)(float *dst, const float *src, int64_t n, float a, float b);

typedef struct amp_update_kernels {
    /* Updates n elements in place: p (fp32 master), g (the gradient the update uses, fp32, read
     * only; it may be the same memory as nothing else), and the state slices. */
    amp_sgd_update_fn sgd;
    amp_adam_update_fn adam;
    /* scale then sgd in one sweep: g[i] = (g[i] * a) * b stored back, and the update with it. One pass
     * over an fp32 gradient instead of two (the fused step's unscale of fp32 gradients). */
    amp_sgd_scaled_update_fn sgd_scaled;
    /* acc[i % AMP_UPDATE_LANES] += (double)(g[i] * inv_scale)^2, as a multiply then an add, i < n */
    amp_sum_squares_fn sum_squares;
    /* dst[i] = (src[i] * a) * b (dst may be src) */
    amp_scale_fn scale;
} amp_update_kernels;

/* The reference loops (kernels/ref/update_ref.c): every other path must match them bit for bit, and
 * the SIMD loops run their remainders through them. */
void amp_sgd_update_ref(const amp_sgd_scalars *s, float *p, const float *g, float *momentum_buf, int64_t n);
void amp_adam_update_ref(const amp_adam_scalars *s, float *p, const float *g, float *exp_avg, float *exp_avg_sq,
                         int64_t n);
void amp_sgd_scaled_update_ref(const amp_sgd_scalars *s, float *p, float *g, float a, float b, float *momentum_buf,
                               int64_t n);
void amp_sum_squares_ref(const float *g, int64_t n, float inv_scale, double acc[AMP_UPDATE_LANES]);
void amp_scale_ref(float *dst, const float *src, int64_t n, float a, float b);

void amp_update_kernels_ref(amp_update_kernels *k);
#if defined(__x86_64__)
void amp_update_kernels_avx2(amp_update_kernels *k);   /* AVX2 + FMA: every entry */
void amp_update_kernels_avx512(amp_update_kernels *k); /* AVX-512F: sum_squares only */
#endif

/* The kernels for `isa` (a path the CPU lacks, or an invalid one, gets the reference's). */
const amp_update_kernels *amp_update_kernels_for(amp_isa isa);
/* The kernels of the active path (AMP_ISA, amp_isa_set). */
static inline const amp_update_kernels *amp_update_active(void) { return amp_update_kernels_for(amp_isa_active()); }

#endif /* AMP_UPDATE_KERNELS_H */
