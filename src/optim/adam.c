/* Adam (L2 weight decay) and AdamW (decoupled weight decay): torch.optim.Adam / AdamW, step for step.
 *
 * torch/optim/adam.py `_single_tensor_adam` (torch 2.15; AdamW is Adam with
 * decoupled_weight_decay=True), per parameter, at step t = 1, 2, ...:
 *     param.mul_(1 - lr * weight_decay)                 AdamW (a Python double, then fp32)
 *     grad = grad.add(param, alpha=weight_decay)        Adam, weight_decay != 0: fma(param, wd, grad)
 *     exp_avg.lerp_(grad, 1 - beta1)                    fma(w, grad - m, m), w < 0.5
 *                                                       fma(w - 1, grad - m, grad) otherwise
 *     exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
 *                                                       v = v * beta2; v = fma(value * grad, grad, v)
 *     bias_correction1 = 1 - beta1 ** t                 Python doubles: pow() from libm
 *     bias_correction2 = 1 - beta2 ** t
 *     step_size = lr / bias_correction1
 *     bias_correction2_sqrt = bias_correction2 ** 0.5   pow(x, 0.5), not sqrt
 *     denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
 *     param.addcdiv_(exp_avg, denom, value=-step_size)  param + ((value * m) / denom), not fused
 * Python scalars become fp32 where they meet a tensor; the doubles above are computed here exactly
 * as Python computes them (same libm), from the fp32 configuration values widened to double.
 * The one operation that can differ is the square root: amp's sqrtf is correctly rounded, while
 * PyTorch builds that use MKL's vsSqrt (VML_HA) are faithful but sometimes one ulp off; see
 * tests/test_optim.c for what that does to the parameters. This file computes the scalars; the element
 * loop is kernels/ref/update_ref.c's amp_adam_update_ref and its SIMD twins. */
#include <math.h>

#include "optim_internal.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* 1 - lr * weight_decay: a multiply, then a subtract, as Python does */
#endif

void optim_adam_scalars_init(const amp_optimizer *opt, amp_adam_scalars *s) {
    const amp_optim_config *c = &opt->config;
    const double t = (double)(opt->step_count + 1);
    const double lr = c->lr, beta1 = c->beta1, beta2 = c->beta2, wd = c->weight_decay;
    const double bias_correction1 = 1.0 - pow(beta1, t);
    const double bias_correction2 = 1.0 - pow(beta2, t);
    const double step_size = lr / bias_correction1;
    const bool decoupled = c->kind == AMP_OPTIM_ADAMW;
    *s = (amp_adam_scalars){
        .weight_decay = decoupled ? 0.0f : c->weight_decay,
        .decay_factor = decoupled ? (float)(1.0 - lr * wd) : 1.0f,
        .decoupled = decoupled && wd != 0.0,
        .lerp_weight = (float)(1.0 - beta1),
        .beta2 = c->beta2,
        .one_minus_beta2 = (float)(1.0 - beta2),
        .bc2_sqrt = (float)pow(bias_correction2, 0.5),
        .eps = c->eps,
        .neg_step_size = (float)(-step_size),
    };
}
