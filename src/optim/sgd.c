/* SGD with momentum, dampening, Nesterov and L2 weight decay: torch.optim.SGD, step for step.
 *
 * torch/optim/sgd.py `_single_tensor_sgd` (torch 2.15), per parameter:
 *     grad = grad.add(param, alpha=weight_decay)          if weight_decay != 0
 *     buf  = grad.clone()                                  first step (the buffer is None)
 *     buf.mul_(momentum).add_(grad, alpha=1 - dampening)   later steps
 *     grad = grad.add(buf, alpha=momentum) if nesterov else buf
 *     param.add_(grad, alpha=-lr)
 * On the CPU, `a.add(b, alpha=s)` is one fused multiply-add, fma(b, s, a) (ATen's ufunc add, vector
 * and scalar paths alike); `mul_` is an fp32 multiply; the Python scalars reach the kernel rounded to
 * fp32. Each line below is that operation, so an fp32 parameter follows torch bit for bit. */
#include <math.h>

#include "optim_internal.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* the fused multiply-adds are explicit (fmaf); nothing else may fuse */
#endif

void optim_sgd_scalars_init(const amp_optimizer *opt, optim_sgd_scalars *s) {
    const amp_optim_config *c = &opt->config;
    *s = (optim_sgd_scalars){
        .neg_lr = -c->lr,
        .weight_decay = c->weight_decay,
        .momentum = c->momentum,
        .one_minus_damp = (float)(1.0 - (double)c->dampening),
        .use_momentum = c->momentum != 0.0f,
        .nesterov = c->nesterov,
        .first = opt->step_count == 0,
    };
}

void optim_sgd_update(const optim_sgd_scalars *s, float *p, const float *g, float *buf, int64_t n) {
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

void optim_sgd_scaled_update(const optim_sgd_scalars *s, float *p, float *g, float a, float b, float *buf, int64_t n) {
    optim_scale(g, g, n, a, b);
    optim_sgd_update(s, p, g, buf, n);
}
