/* Internal helpers for sharded training (optim_shard.h). */
#include <math.h>

#include "optim_internal.h"
#include "optim_shard.h"

void optim_shard_set_base_index(amp_optimizer *opt, uint64_t base) {
    for (size_t i = 0; opt && i < opt->n_params; i++) opt->params[i].first_index += base;
}

/* The same arithmetic as fused.c's clip_coef. */
float optim_clip_coef(double norm, float max_norm) {
    if (!(max_norm > 0.0f)) return 1.0f;
    const float total = (float)norm;
    float coef = max_norm / (total + (float)OPTIM_CLIP_EPS);
    if (isinf(total)) coef = (float)((double)max_norm / norm); /* finite gradients past fp32's range */
    return coef < 1.0f ? coef : 1.0f;
}
