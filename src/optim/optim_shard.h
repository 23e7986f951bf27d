/* Internal: what sharded training (src/train/zero.c, ZeRO stage 1) needs from an optimizer beyond
 * amp/optim.h. */
#ifndef AMP_OPTIM_SHARD_H
#define AMP_OPTIM_SHARD_H

#include <stdint.h>

#include "amp/optim.h"

/* An optimizer over one rank's slice numbers its elements from 0; the slice starts at element
 * `base` of the whole model's flat order, and stochastic rounding draws by that global index (so a
 * sharded run rounds as the unsharded one). Adds base to every parameter's first index. */
void optim_shard_set_base_index(amp_optimizer *opt, uint64_t base);

/* The fp64 sum of the squares of the optimizer's gradients, as its clipping and fused step add
 * them (each rank's share of the global norm). */
double optim_grad_sum_of_squares(amp_optimizer *opt);

/* The sum of squares over every rank's slice (the global norm's square): the next
 * amp_optimizer_clip_grad_norm or amp_optimizer_fused_step (so amp_scaler_step_fused) computes its
 * clip coefficient and reported norm from it instead of from its own gradients, then forgets it. The
 * fused step still checks its own gradients for inf/NaN. */
void optim_shard_set_norm_sum(amp_optimizer *opt, double sum);

#endif
