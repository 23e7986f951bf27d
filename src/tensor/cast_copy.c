/* Cast copies (amp/tensor.h, amp_ctx_keep_cast_copies): a 16-bit copy of each fp32 parameter that
 * the optimizers write as they update the parameter and autocast's cache takes as the parameter's
 * cast in the next forward.
 *
 * When a copy holds the parameter's values: the optimizer writes it from the new values in the pass
 * that writes them and records the version the parameter then has; every other write to the values
 * advances the version (amp_tensor.version), so a copy whose recorded version is not the parameter's
 * is stale, and autocast's cast (the first step's too) is then made into the copy: the arena never
 * holds the weights' casts. Where a graph of this step took the copy already, the cast goes to the
 * arena as without copies. A copy is the cast's memory for every op of the step that took
 * it, so it must not change while a graph of that step can still be read: an optimizer step made while
 * the tape holds a node whose backward has not run (backward before the step, retain_graph off,
 * spends them all), or inside an autocast region (whose cache keeps handing out the casts it made),
 * leaves a copy lent to this step stale rather than rewriting it. */
#include <string.h>

#include "ctx_internal.h"

static bool copy_dtype_ok(amp_dtype d) { return d == AMP_F16 || d == AMP_BF16; }

int amp_ctx_keep_cast_copies(amp_ctx *ctx, amp_dtype dtype) {
    if (!ctx) return AMP_ERR_NULL_POINTER;
    if (dtype != AMP_F32 && !copy_dtype_ok(dtype)) return AMP_ERR_UNSUPPORTED_DTYPE;
    if (!ctx->params_allocated)
        return amp_ctx_fail(ctx, AMP_ERR_STATE, "amp_ctx_keep_cast_copies: call amp_ctx_alloc_params first");
    if (dtype == ctx->copy_dtype) return AMP_OK;
    size_t total = 0;
    for (size_t i = 0; dtype != AMP_F32 && i < ctx->n_params; i++)
        if (ctx->params[i].tensor->dtype == AMP_F32)
            total += ((size_t)amp_tensor_numel(ctx->params[i].tensor) * amp_dtype_size(dtype) + 63) & ~(size_t)63;
    unsigned char *mem = NULL;
    if (total > 0 && !(mem = ctx->allocator.alloc(total, 64, ctx->allocator.user)))
        return amp_ctx_fail(ctx, AMP_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes of cast copies", total);
    ctx->allocator.free(ctx->copy_memory, ctx->allocator.user);
    ctx->copy_memory = mem;
    ctx->copy_bytes = total;
    ctx->copy_dtype = dtype;
    if (mem) ctx->persistent_allocations++;
    size_t off = 0;
    for (size_t i = 0; i < ctx->n_params; i++) {
        amp_param_slot *s = &ctx->params[i];
        s->cast_copy = NULL;
        s->copy_valid = s->cast_seen = false;
        s->copy_version = s->lent_generation = 0;
        if (!mem || s->tensor->dtype != AMP_F32) continue;
        s->cast_copy = mem + off;
        off += ((size_t)amp_tensor_numel(s->tensor) * amp_dtype_size(dtype) + 63) & ~(size_t)63;
    }
    return AMP_OK;
}

size_t amp_ctx_cast_copy_bytes(const amp_ctx *ctx) { return ctx ? ctx->copy_bytes : 0; }

void amp_tensor_bump_version(amp_tensor *t) {
    if (t) t->version++;
}

static amp_param_slot *slot_of(const amp_ctx *ctx, const amp_tensor *t) {
    if (!ctx->copy_memory) return NULL;
    const int64_t k = amp_ctx_param_index(ctx, t);
    if (k < 0) return NULL;
    amp_param_slot *s = &ctx->params[k];
    return s->tensor == t && s->cast_copy ? s : NULL;
}

const void *amp_ctx_cast_copy_take(amp_ctx *ctx, const amp_tensor *t, amp_dtype dtype, bool *converted) {
    amp_param_slot *s = dtype == ctx->copy_dtype ? slot_of(ctx, t) : NULL;
    *converted = false;
    if (!s) return NULL;
    s->cast_seen = true;
    if (!s->copy_valid || s->copy_version != t->version) {
        *converted = true;
        /* Stale (the first step, a write since the update): cast into the copy itself, unless a graph
         * of this step took the old one (then the caller casts into the arena). */
        if (s->lent_generation == ctx->generation) return NULL;
        s->copy_valid = false;
        if (amp_tensor_read(t, s->cast_copy, dtype) != AMP_OK) return NULL;
        s->copy_valid = true;
        s->copy_version = t->version;
    }
    s->lent_generation = ctx->generation;
    return s->cast_copy;
}

/* A cast's backward reads its output's gradient, never its output, and so does a prefix view's
 * (amp_narrow_rows: it adds its output's gradient into its input's): the nodes that can read a copy
 * are the ops that took the cast (or a view of it). (Both are often left unspent: the consumer's
 * backward added the gradient straight into the parameter's, past the view and the cast: autograd.c's
 * master_of. A view left counting as live kept the optimizer from writing any copy: GPT-2's head
 * takes its first 50257 rows of the padded tied embedding's cast.) */
bool amp_ctx_graph_live(const amp_ctx *ctx) {
    for (const amp_node *n = ctx->tape; n; n = n->prev)
        if (!n->spent && n->op != AMP_OP_CAST && !n->prefix_view) return true;
    return false;
}

void *amp_ctx_cast_copy_for_update(amp_ctx *ctx, const amp_tensor *t, bool live, amp_dtype *dtype) {
    amp_param_slot *s = slot_of(ctx, t);
    if (!s) return NULL;
    s->copy_valid = false; /* until amp_ctx_cast_copy_written says otherwise */
    /* Lent to this step: its graph, or an open autocast region's cache (which hands out the cast it
     * made, PyTorch's stale one, until the region ends), may still read it. */
    const bool lent_now = s->lent_generation == ctx->generation;
    if (!s->cast_seen || (lent_now && (live || amp_ctx_autocast_depth > 0))) return NULL;
    *dtype = ctx->copy_dtype;
    return s->cast_copy;
}

void amp_ctx_cast_copy_written(amp_ctx *ctx, amp_tensor *t, bool copy_written) {
    t->version++;
    amp_param_slot *s = copy_written ? slot_of(ctx, t) : NULL;
    if (!s) return;
    s->copy_version = t->version;
    s->copy_valid = true;
}
