/* Reference optimizer loops (kernels/update_kernels.h): the scalar twins every SIMD path matches bit
 * for bit. Always built; the optimizer's results under AMP_ISA=ref.
 *
 * Each statement is one of torch's per-element operations (src/optim/sgd.c and adam.c list them):
 * `a.add(b, alpha=s)` is one fused multiply-add, fmaf(b, s, a), as in ATen's ufunc add; `mul_` an fp32
 * multiply; lerp the small-weight or large-weight form by |w| < 0.5 (at::native::is_lerp_weight_small);
 * addcdiv `param + ((value * m) / denom)`, not fused. */
#include <math.h>

#include "../update_kernels.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* the fused multiply-adds are explicit (fmaf); nothing else may fuse */
#endif

void amp_sgd_update_ref(const amp_sgd_scalars *s, float *p, const float *g, float *buf, int64_t n) {
    const float wd = s->weight_decay, mom = s->momentum, damp1 = s->one_minus_damp, neg_lr = s->neg_lr;
    if (!s->use_momentum) {
        for (int64_t i = 0; i < n; i++) {
            const float d = wd != 0.0f ? fmaf(p[i], wd, g[i]) : g[i];
            p[i] = fmaf(d, neg_lr, p[i]);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        const float d = wd != 0.0f ? fmaf(p[i], wd, g[i]) : g[i];
        const float b = s->first ? d : fmaf(d, damp1, buf[i] * mom);
        buf[i] = b;
        const float step = s->nesterov ? fmaf(b, mom, d) : b;
        p[i] = fmaf(step, neg_lr, p[i]);
    }
}

void amp_sgd_scaled_update_ref(const amp_sgd_scalars *s, float *p, float *g, float a, float b, float *buf,
                               int64_t n) {
    amp_scale_ref(g, g, n, a, b);
    amp_sgd_update_ref(s, p, g, buf, n);
}

void amp_adam_update_ref(const amp_adam_scalars *s, float *p, const float *g, float *m, float *v, int64_t n) {
    const float wd = s->weight_decay, decay = s->decay_factor, w = s->lerp_weight, b2 = s->beta2;
    const float value2 = s->one_minus_beta2, bc2 = s->bc2_sqrt, eps = s->eps, neg_step = s->neg_step_size;
    /* ATen's lerp: the small-weight form when |w| < 0.5 (at::native::is_lerp_weight_small). */
    const bool small = fabsf(w) < 0.5f;
    const float w_minus_1 = w - 1.0f;
    for (int64_t i = 0; i < n; i++) {
        float param = p[i];
        if (s->decoupled) param = param * decay;
        const float grad = wd != 0.0f ? fmaf(param, wd, g[i]) : g[i];
        const float diff = grad - m[i];
        const float mi = small ? fmaf(w, diff, m[i]) : fmaf(w_minus_1, diff, grad);
        const float vi = fmaf(value2 * grad, grad, v[i] * b2);
        m[i] = mi;
        v[i] = vi;
        const float denom = sqrtf(vi) / bc2 + eps;
        p[i] = param + (neg_step * mi) / denom;
    }
}

void amp_sum_squares_ref(const float *g, int64_t n, float inv_scale, double acc[AMP_UPDATE_LANES]) {
    for (int64_t i = 0; i < n; i++) {
        const double u = (double)(g[i] * inv_scale);
        acc[i % AMP_UPDATE_LANES] += u * u;
    }
}

void amp_scale_ref(float *dst, const float *src, int64_t n, float a, float b) {
    for (int64_t i = 0; i < n; i++) dst[i] = (src[i] * a) * b;
}

void amp_update_kernels_ref(amp_update_kernels *k) {
    k->sgd = amp_sgd_update_ref;
    k->adam = amp_adam_update_ref;
    k->sgd_scaled = amp_sgd_scaled_update_ref;
    k->sum_squares = amp_sum_squares_ref;
    k->scale = amp_scale_ref;
}
