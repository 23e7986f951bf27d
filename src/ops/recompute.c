/* Recomputed regions (amp/recompute.h): run a function, keep its result, release its activations;
 * in backward, run it again under the forward's autocast state and random streams and backpropagate
 * through the recomputed nodes. */
#include <string.h>

#include "amp/autocast.h"
#include "amp/recompute.h"
#include "../tensor/autograd.h"

/* What the region's node keeps (arena memory). */
typedef struct recompute_saved {
    amp_recompute_fn fn;
    void *user;
    bool autocast_on;           /* the forward's autocast state */
    amp_dtype autocast_dtype;
    uint64_t rng[AMP_RNG_STREAMS]; /* the context's random streams before the forward */
} recompute_saved;

/* The state fn runs in: grad mode on, its own tape, the autocast state of the forward, no cast
 * cache (its entries would point into memory the region releases). */
typedef struct region_state {
    amp_node *outer_tape;
    bool grad, cache;
    int32_t out_uses[AMP_NODE_MAX_INPUTS]; /* the inputs' producers' use counts before fn */
} region_state;

static void save_out_uses(amp_tensor *const *in, int n_in, region_state *rs) {
    for (int i = 0; i < n_in; i++) rs->out_uses[i] = in[i]->grad_fn ? in[i]->grad_fn->out_uses : 0;
}

static void restore_out_uses(amp_tensor *const *in, int n_in, const region_state *rs) {
    for (int i = 0; i < n_in; i++)
        if (in[i]->grad_fn) in[i]->grad_fn->out_uses = rs->out_uses[i];
}

static int region_enter(amp_ctx *ctx, region_state *rs, const recompute_saved *s) {
    if (s) {
        const int st = s->autocast_on ? amp_autocast_enter(s->autocast_dtype) : amp_autocast_enter_disabled();
        if (st != AMP_OK) return amp_ctx_fail(ctx, st, "amp_recompute: cannot restore the forward's autocast state");
    }
    rs->outer_tape = ctx->tape;
    ctx->tape = NULL;
    rs->grad = amp_set_grad_enabled(ctx, true);
    rs->cache = amp_autocast_cache_enabled();
    amp_autocast_set_cache_enabled(false);
    return AMP_OK;
}

/* Leaves the region's state; returns the region's tape. The inputs' producers keep the use counts
 * they had (fn's nodes are released with the region). */
static amp_node *region_exit(amp_ctx *ctx, region_state *rs, bool restored_autocast) {
    amp_autocast_set_cache_enabled(rs->cache);
    amp_set_grad_enabled(ctx, rs->grad);
    if (restored_autocast) amp_autocast_exit();
    amp_node *tape = ctx->tape;
    ctx->tape = rs->outer_tape;
    return tape;
}


/* Parameter slots that the nodes of `tape` take as inputs, one entry per use, into scratch. */
static int32_t *param_uses(amp_ctx *ctx, const amp_node *tape, int32_t *n) {
    int64_t count = 0;
    for (const amp_node *node = tape; node; node = node->prev)
        for (int i = 0; i < node->n_in; i++) count += amp_ctx_param_index(ctx, node->in[i]) >= 0;
    for (const amp_node *node = tape; node; node = node->prev) count += node->n_param_uses;
    int32_t *uses = amp_scratch_alloc(ctx, (size_t)(count > 0 ? count : 1) * sizeof *uses);
    if (!uses) return NULL;
    int64_t k = 0;
    for (const amp_node *node = tape; node; node = node->prev) {
        for (int i = 0; i < node->n_in; i++) {
            const int64_t p = amp_ctx_param_index(ctx, node->in[i]);
            if (p >= 0) uses[k++] = (int32_t)p;
        }
        for (int32_t u = 0; u < node->n_param_uses; u++) uses[k++] = node->param_uses[u];
    }
    *n = (int32_t)count;
    return uses;
}

/* Releases the arena past m, keeping the data of t (an arena tensor's contiguous data that may lie
 * past m): copied aside, released, allocated again. */
static void release_keeping(amp_ctx *ctx, amp_arena_mark m, amp_tensor *const *keep, int n_keep) {
    const amp_arena_mark sm = amp_scratch_mark(ctx);
    void *aside[AMP_NODE_MAX_INPUTS] = {0};
    size_t bytes[AMP_NODE_MAX_INPUTS] = {0};
    for (int i = 0; i < n_keep; i++) {
        const amp_tensor *t = keep[i];
        if (!t || !t->data || !amp_ctx_arena_after(ctx, m, t->data)) continue;
        bytes[i] = (size_t)amp_tensor_numel(t) * amp_dtype_size(t->dtype);
        if ((aside[i] = amp_scratch_alloc(ctx, bytes[i] ? bytes[i] : 1))) memcpy(aside[i], t->data, bytes[i]);
    }
    amp_ctx_arena_release(ctx, m);
    for (int i = 0; i < n_keep; i++) {
        if (!aside[i]) continue;
        void *data = amp_ctx_alloc(ctx, bytes[i] ? bytes[i] : 1);
        if (data) memcpy(data, aside[i], bytes[i]);
        keep[i]->data = data;
    }
    amp_scratch_release(ctx, sm);
}

static void recompute_backward(amp_ctx *ctx, amp_node *node) {
    const recompute_saved *s = node->saved;
    amp_tensor *out = node->out;
    const amp_arena_mark m = amp_ctx_arena_mark(ctx);
    uint64_t rng_now[AMP_RNG_STREAMS];
    memcpy(rng_now, ctx->rng, sizeof rng_now);
    memcpy(ctx->rng, s->rng, sizeof rng_now);
    region_state rs = {0};
    save_out_uses(node->in, node->n_in, &rs);
    /* the node's own use of each input is replaced by the recomputed nodes' uses */
    for (int i = 0; i < node->n_in; i++)
        if (node->in[i]->grad_fn) node->in[i]->grad_fn->out_uses--;
    if (region_enter(ctx, &rs, s) != AMP_OK) {
        restore_out_uses(node->in, node->n_in, &rs);
        memcpy(ctx->rng, rng_now, sizeof rng_now);
        return;
    }
    ctx->replaying++;
    amp_tensor *y = s->fn(ctx, node->in, node->n_in, s->user);
    ctx->replaying--;
    amp_node *tape = region_exit(ctx, &rs, true);
    memcpy(ctx->rng, rng_now, sizeof rng_now);
    if (y && (y->dtype != out->dtype || !amp_same_shape(y, out)))
        amp_ctx_fail(ctx, AMP_ERR_STATE, "amp_recompute: the recomputed result differs in shape or dtype from the forward's");
    if (y && ctx->status == AMP_OK && y->requires_grad) {
        y->grad = out->grad; /* the region's gradient flows into the recomputed result */
        y->retains_grad = out->retains_grad;
        if (!out->retains_grad) out->grad = NULL;
        amp_autograd_run_nodes(ctx, tape);
    } else if (!y && ctx->status == AMP_OK) {
        amp_ctx_fail(ctx, AMP_ERR_STATE, "amp_recompute: the function returned NULL in backward");
    }
    restore_out_uses(node->in, node->n_in, &rs);
    amp_tensor *grads[AMP_NODE_MAX_INPUTS] = {0};
    for (int i = 0; i < node->n_in; i++) {
        grads[i] = node->in[i]->grad;
        for (int j = 0; j < i; j++)
            if (grads[j] == grads[i]) grads[i] = NULL; /* an input given twice: one gradient */
    }
    release_keeping(ctx, m, grads, node->n_in);
}

amp_tensor *amp_recompute(amp_ctx *ctx, amp_recompute_fn fn, amp_tensor *const *in, int n_in, void *user) {
    if (!ctx) return NULL;
    if (ctx->status != AMP_OK) return NULL;
    if (!fn || n_in < 0 || n_in > AMP_NODE_MAX_INPUTS || (n_in > 0 && !in)) {
        amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "amp_recompute: needs a function and 0 to %d inputs",
                     AMP_NODE_MAX_INPUTS);
        return NULL;
    }
    for (int i = 0; i < n_in; i++)
        if (!amp_ctx_input_ok(ctx, "amp_recompute", in[i])) return NULL;
    if (!ctx->grad_enabled) return fn(ctx, in, n_in, user);

    recompute_saved s = {.fn = fn, .user = user, .autocast_on = amp_autocast_enabled(),
                         .autocast_dtype = amp_autocast_dtype()};
    memcpy(s.rng, ctx->rng, sizeof s.rng);
    const amp_arena_mark m = amp_ctx_arena_mark(ctx);
    region_state rs = {0};
    save_out_uses(in, n_in, &rs);
    region_enter(ctx, &rs, NULL); /* (grad mode is on already) */
    amp_tensor *y = fn(ctx, in, n_in, user);
    amp_node *tape = region_exit(ctx, &rs, false);
    restore_out_uses(in, n_in, &rs);
    if (!y) {
        amp_ctx_arena_release(ctx, m);
        if (ctx->status == AMP_OK) amp_ctx_fail(ctx, AMP_ERR_STATE, "amp_recompute: the function returned NULL");
        return NULL;
    }
    /* keep the result and the parameter uses; release the rest */
    const amp_arena_mark sm = amp_scratch_mark(ctx);
    int32_t n_uses = 0;
    int32_t *uses = param_uses(ctx, tape, &n_uses);
    const size_t bytes = (size_t)amp_tensor_numel(y) * amp_dtype_size(y->dtype);
    void *aside = uses ? amp_scratch_alloc(ctx, bytes ? bytes : 1) : NULL;
    amp_tensor *out = NULL;
    if (aside && amp_tensor_read(y, aside, y->dtype) == AMP_OK) {
        const amp_op op = y->op;
        const amp_dtype compute = y->compute_dtype;
        amp_ctx_arena_release(ctx, m);
        out = amp_ctx_new_tensor(ctx, y->dtype, y->ndim, y->shape, true);
        recompute_saved *kept = out ? amp_ctx_alloc(ctx, sizeof *kept) : NULL;
        if (kept) {
            memcpy(out->data, aside, bytes);
            *kept = s;
            amp_node *node = amp_autograd_record_recompute(ctx, op, compute, out, in, n_in, recompute_backward, uses, n_uses);
            if (node) node->saved = kept;
            if (ctx->status != AMP_OK) out = NULL;
        } else {
            out = NULL;
        }
    } else {
        amp_ctx_arena_release(ctx, m);
        if (ctx->status == AMP_OK) amp_ctx_fail(ctx, AMP_ERR_OUT_OF_MEMORY, "amp_recompute: out of memory");
    }
    amp_scratch_release(ctx, sm);
    return out;
}
