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

/* torch.nn.utils.clip_grad_norm_'s factor for a global norm (amp_optimizer_clip_grad_norm's rule):
 * min(1, max_norm / (norm + 1e-6)) in fp32; 1 when max_norm <= 0. */
float optim_clip_coef(double norm, float max_norm);

#endif
