/* --inject-nonfinite: a fault drill. Writes +inf, -inf or NaN into one gradient value at random steps,
 * so a run shows that the scaler skips those steps and training recovers (and, data-parallel, that
 * every rank skips together when only one rank saw the fault). */
#include <math.h>

#include "amp.h"
#include "train_internal.h"

enum { RNG_INJECT = 3 };

bool amp_train_inject_nonfinite(amp_train_run_state *r, int64_t done) {
    const amp_train_config *c = &r->cfg;
    if (!(c->inject_nonfinite > 0)) return false;
    if (c->inject_rank >= 0 && c->inject_rank != r->rank) return false;
    /* One draw per (seed, step, rank): the same run injects at the same steps, and resuming does not
     * shift the draws. */
    uint64_t h = amp_train_mix64(c->seed ^ amp_train_mix64(RNG_INJECT));
    h = amp_train_mix64(h ^ (uint64_t)done);
    h = amp_train_mix64(h ^ (uint64_t)(r->rank + 1));
    const double u = (double)(h >> 11) * 0x1.0p-53;
    if (u >= c->inject_nonfinite) return false;

    const size_t n = amp_ctx_num_params(r->ctx);
    if (n == 0) return false;
    const uint64_t pick = amp_train_mix64(h);
    amp_tensor *p = amp_ctx_param(r->ctx, (size_t)(pick % n));
    amp_tensor *g = p->grad;
    const int64_t count = g ? amp_tensor_numel(g) : 0;
    if (count == 0) return false;
    const int64_t at = (int64_t)(amp_train_mix64(pick) % (uint64_t)count);
    const float values[3] = {INFINITY, -INFINITY, NAN};
    const float v = values[(pick >> 32) % 3];
    amp_convert((unsigned char *)g->data + (size_t)at * amp_dtype_size(g->dtype), g->dtype, &v, AMP_F32, 1);
    amp_ctx_grads_changed(r->ctx); /* a write outside backward: its check must see it (amp/tensor.h) */
    return true;
}
