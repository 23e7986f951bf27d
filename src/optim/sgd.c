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
 * fp32. Each line of the element loop (kernels/ref/update_ref.c, amp_sgd_update_ref, and its SIMD twins)
 * is that operation, so an fp32 parameter follows torch bit for bit; this file computes the scalars. */
#include "optim_internal.h"

void optim_sgd_scalars_init(const amp_optimizer *opt, amp_sgd_scalars *s) {
    const amp_optim_config *c = &opt->config;
    *s = (amp_sgd_scalars){
        .neg_lr = -c->lr,
        .weight_decay = c->weight_decay,
        .momentum = c->momentum,
        .one_minus_damp = (float)(1.0 - (double)c->dampening),
        .use_momentum = c->momentum != 0.0f,
        .nesterov = c->nesterov,
        .first = opt->step_count == 0,
    };
}
