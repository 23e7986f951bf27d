/* Internal helpers for sharded training (optim_shard.h). */
#include "optim_internal.h"
#include "optim_shard.h"

void optim_shard_set_base_index(amp_optimizer *opt, uint64_t base) {
    for (size_t i = 0; opt && i < opt->n_params; i++) opt->params[i].first_index += base;
}

void optim_shard_set_norm_sum(amp_optimizer *opt, double sum) {
    if (!opt) return;
    opt->norm_sum_given = true;
    opt->norm_sum = sum;
}
