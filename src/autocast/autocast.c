/* Autocast regions (thread-local state) and the cast cache. */
#include <stdlib.h>
#include <string.h>

#include "../tensor/ctx_internal.h"
#include "amp/ops.h" /* amp_cast: cast.c */
#include "autocast_internal.h"
#include "../core/alloc_internal.h"

enum { MAX_DEPTH = 64 };

typedef struct {
    const amp_tensor *src;
    const amp_ctx *ctx;
    uint64_t generation; /* the ctx's step: casts live in its arena, which a reset rewinds */
    amp_dtype dtype;
    bool grad;           /* made with grad mode on (so it carries a node back to src) */
    bool from_copy;      /* the parameter's cast copy: no arena memory */
    amp_tensor *cast;
} cache_entry;

typedef struct {
    int depth;
    bool enabled[MAX_DEPTH + 1];
    amp_dtype dtype[MAX_DEPTH + 1];
    bool cache_off;
    cache_entry *cache;
    size_t n_cache, cap_cache;
    unsigned long long hits, stores, copy_hits;
    bool applying; /* inside amp_autocast_inputs: the casts it makes are not autocast again */
} autocast_state;

static _Thread_local autocast_state state;

/* Opens a region; the tensor layer's copy of the depth lets amp_ctx_reset see it (ctx_internal.h). */
static int enter(bool enabled, amp_dtype dtype) {
    if (state.depth == MAX_DEPTH) return AMP_ERR_INVALID_ARGUMENT;
    state.depth++;
    state.enabled[state.depth] = enabled;
    state.dtype[state.depth] = dtype;
    amp_ctx_autocast_depth = state.depth;
    return AMP_OK;
}

int amp_autocast_enter(amp_dtype dtype) {
    if (dtype == AMP_F32) return enter(false, AMP_F32); /* one code path for every precision */
    if (dtype != AMP_F16 && dtype != AMP_BF16) return AMP_ERR_UNSUPPORTED_DTYPE;
    return enter(true, dtype);
}

int amp_autocast_enter_disabled(void) { return enter(false, AMP_F32); }

int amp_autocast_exit(void) {
    if (state.depth == 0) return AMP_ERR_INVALID_ARGUMENT;
    state.depth--;
    amp_ctx_autocast_depth = state.depth;
    if (state.depth == 0) amp_autocast_clear_cache(); /* PyTorch: cleared when the outermost exits */
    return AMP_OK;
}

bool amp_autocast_enabled(void) { return state.depth > 0 && state.enabled[state.depth]; }
amp_dtype amp_autocast_dtype(void) { return amp_autocast_enabled() ? state.dtype[state.depth] : AMP_F32; }
int amp_autocast_depth(void) { return state.depth; }
void amp_autocast_set_cache_enabled(bool enabled) { state.cache_off = !enabled; }
bool amp_autocast_cache_enabled(void) { return !state.cache_off; }

/* Keeps the entries' memory: the cache is emptied every step, and a steady-state step must not
 * allocate. (The table is per thread, from malloc, and lives as long as the thread.) */
void amp_autocast_clear_cache(void) { state.n_cache = 0; }

void amp_autocast_cache_stats(unsigned long long *hits, unsigned long long *stores) {
    if (hits) *hits = state.hits;
    if (stores) *stores = state.stores;
}

unsigned long long amp_autocast_copy_hits(void) { return state.copy_hits; }

size_t amp_autocast_cache_bytes(void) {
    size_t sum = 0;
    for (size_t i = 0; i < state.n_cache; i++) {
        const cache_entry *e = &state.cache[i];
        /* entries from an earlier step of their context died with its arena */
        if (e->cast && e->generation == e->ctx->generation && !e->from_copy)
            sum += (size_t)amp_tensor_numel(e->cast) * amp_dtype_size(e->cast->dtype);
    }
    return sum;
}

/* PyTorch's cacheable rule: casting an fp32 leaf that requires grad down to the region's dtype. The
 * casts it names are cached (unless the cache is off) and may come from the parameter's cast copy. */
static bool cacheable(const amp_tensor *x, amp_dtype to) {
    return x->dtype == AMP_F32 && x->is_leaf && x->requires_grad && to == amp_autocast_dtype();
}

/* A cacheable cast made: the parameter's cast copy when it has one (amp_ctx_keep_cast_copies: no
 * arena memory, and no conversion while the copy holds the parameter's version), else amp_cast. */
static amp_tensor *cast_made(amp_ctx *ctx, amp_tensor *x, amp_dtype to, bool *from_copy) {
    bool converted;
    const void *copy = amp_ctx_cast_copy_take(ctx, x, to, &converted);
    *from_copy = copy != NULL;
    if (!copy) return amp_cast(ctx, x, to);
    amp_tensor *c = amp_autocast_cast_from_copy(ctx, x, to, copy);
    if (c && !converted) state.copy_hits++;
    return c;
}

static bool is_low(amp_dtype d) { return d == AMP_F16 || d == AMP_BF16; }

static amp_tensor *cast_to(amp_ctx *ctx, amp_tensor *x, amp_dtype to) {
    if (x->dtype == to) return x;
    if (!cacheable(x, to)) return amp_cast(ctx, x, to);
    bool copy;
    if (state.cache_off) return cast_made(ctx, x, to, &copy); /* (a recomputed region's forward) */
    const bool grad = amp_grad_enabled(ctx);
    for (size_t i = 0; i < state.n_cache; i++) {
        cache_entry *e = &state.cache[i];
        if (e->src == x && e->dtype == to && e->ctx == ctx && e->generation == ctx->generation && e->grad == grad) {
            state.hits++;
            return e->cast;
        }
    }
    amp_tensor *c = cast_made(ctx, x, to, &copy);
    if (!c) return NULL;
    /* Drop entries of older steps (their arena memory is gone) before growing. */
    size_t kept = 0;
    for (size_t i = 0; i < state.n_cache; i++)
        if (state.cache[i].ctx != ctx || state.cache[i].generation == ctx->generation) state.cache[kept++] = state.cache[i];
    state.n_cache = kept;
    if (state.n_cache == state.cap_cache) {
        size_t cap = state.cap_cache ? state.cap_cache * 2 : 64;
        cache_entry *grown = amp_realloc(state.cache, cap * sizeof *grown);
        if (!grown) return c; /* no cache: still correct */
        state.cache = grown;
        state.cap_cache = cap;
    }
    state.cache[state.n_cache++] = (cache_entry){x, ctx, ctx->generation, to, grad, copy, c};
    state.stores++;
    return c;
}

amp_tensor *amp_autocast_weight(amp_ctx *ctx, amp_op op, amp_tensor *x) {
    if (!x || !amp_autocast_enabled() || state.applying || !is_low(amp_autocast_dtype()) || x->dtype != AMP_F32 ||
        amp_autocast_get_policy(op) != AMP_POLICY_LOWER)
        return x;
    return cast_to(ctx, x, amp_autocast_dtype());
}

static bool is_float(const amp_tensor *t) {
    return t->dtype == AMP_F32 || t->dtype == AMP_F16 || t->dtype == AMP_BF16;
}

/* amp_autocast_inputs and amp_autocast_inputs_exact: *target is the dtype op's policy casts to
 * (AMP_DTYPE_COUNT: none); with widen_in_place, casts to f32 (exact) are left to the op. */
static bool apply_policy(amp_ctx *ctx, amp_op op, amp_tensor **in, int n, bool widen_in_place, amp_dtype *target) {
    *target = AMP_DTYPE_COUNT;
    if (!amp_autocast_enabled() || state.applying) return true;
    const amp_cast_policy policy = amp_autocast_get_policy(op);
    if (policy == AMP_POLICY_NONE) return true;
    amp_dtype to = amp_autocast_dtype();
    if (policy == AMP_POLICY_FP32) {
        to = AMP_F32;
    } else if (policy == AMP_POLICY_PROMOTE) {
        /* PyTorch's prioritize(): start at the region's dtype; any f32 makes it f32; two different low
         * dtypes make it f32 too (PyTorch raises there). */
        to = AMP_DTYPE_COUNT;
        for (int i = 0; i < n; i++) {
            if (!in[i] || !is_float(in[i])) continue;
            to = (to == AMP_DTYPE_COUNT || to == in[i]->dtype) ? in[i]->dtype : AMP_F32;
        }
        if (to == AMP_DTYPE_COUNT) return true;
    }
    *target = to;
    if (widen_in_place && to == AMP_F32) return true;
    bool ok = true;
    state.applying = true;
    for (int i = 0; ok && i < n; i++) {
        if (!in[i] || !is_float(in[i]) || in[i]->dtype == to) continue;
        amp_tensor *c = cast_to(ctx, in[i], to);
        if (c)
            in[i] = c;
        else
            ok = false;
    }
    state.applying = false;
    return ok;
}

bool amp_autocast_inputs(amp_ctx *ctx, amp_op op, amp_tensor **in, int n) {
    amp_dtype target;
    return apply_policy(ctx, op, in, n, false, &target);
}

bool amp_autocast_inputs_exact(amp_ctx *ctx, amp_op op, amp_tensor **in, int n, amp_dtype *target) {
    return apply_policy(ctx, op, in, n, true, target);
}
