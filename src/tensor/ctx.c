/* The context: allocator, arena, sticky errors, parameters and buffers, random streams. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctx_internal.h"
#include "../core/alloc_internal.h"

static void *default_alloc(size_t size, size_t align, void *user) {
    (void)user;
    return amp_aligned_alloc(align, size); /* through the process-wide hooks (amp/alloc.h) */
}

static void default_free(void *ptr, void *user) {
    (void)user;
    amp_free(ptr);
}

amp_ctx_config amp_ctx_default_config(void) {
    amp_ctx_config c;
    memset(&c, 0, sizeof c);
    c.arena_bytes = (size_t)64 << 20;
    c.seed = 0;
    c.allocator.alloc = default_alloc;
    c.allocator.free = default_free;
    return c;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

_Thread_local int amp_ctx_autocast_depth;

/* Frees what amp_ctx_create made so far (the arenas of a zeroed context are empty) and ctx itself. */
static void destroy(amp_ctx *ctx) {
    const amp_allocator a = ctx->allocator;
    amp_arena_destroy(&ctx->arena);
    amp_arena_destroy(&ctx->scratch);
    amp_arena_destroy(&ctx->headers[0]);
    amp_arena_destroy(&ctx->headers[1]);
    a.free(ctx, a.user);
}

int amp_ctx_create(const amp_ctx_config *config, amp_ctx **out) {
    if (!out) return AMP_ERR_NULL_POINTER;
    *out = NULL;
    amp_ctx_config cfg = config ? *config : amp_ctx_default_config();
    if (!cfg.allocator.alloc || !cfg.allocator.free) {
        if (cfg.allocator.alloc || cfg.allocator.free) return AMP_ERR_INVALID_ARGUMENT; /* half a pair */
        cfg.allocator.alloc = default_alloc;
        cfg.allocator.free = default_free;
    }
    amp_ctx *ctx = cfg.allocator.alloc(sizeof *ctx, 64, cfg.allocator.user);
    if (!ctx) return AMP_ERR_OUT_OF_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    ctx->allocator = cfg.allocator;
    ctx->grad_enabled = true;
    ctx->grad_epoch = 1;
    ctx->copy_dtype = AMP_F32;
    ctx->generation = 1;
    /* A header is under 256 bytes; a step makes a few thousand at most (each arena grows if not). */
    if (amp_arena_init(&ctx->arena, &ctx->allocator, cfg.arena_bytes) != 0 ||
        amp_arena_init(&ctx->scratch, &ctx->allocator, cfg.arena_bytes / 4) != 0 ||
        amp_arena_init(&ctx->headers[0], &ctx->allocator, cfg.arena_bytes / 64) != 0 ||
        amp_arena_init(&ctx->headers[1], &ctx->allocator, cfg.arena_bytes / 64) != 0) {
        destroy(ctx);
        return AMP_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < AMP_RNG_STREAMS; i++) {
        uint64_t s = cfg.seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(i + 1));
        ctx->rng[i] = splitmix64(&s);
    }
    *out = ctx;
    return AMP_OK;
}

static void free_slots(amp_ctx *ctx, amp_param_slot *slots, size_t n) {
    for (size_t i = 0; i < n; i++) {
        ctx->allocator.free(slots[i].tensor, ctx->allocator.user);
        ctx->allocator.free(slots[i].grad, ctx->allocator.user);
    }
    ctx->allocator.free(slots, ctx->allocator.user);
}

void amp_ctx_free(amp_ctx *ctx) {
    if (!ctx) return;
    free_slots(ctx, ctx->params, ctx->n_params);
    free_slots(ctx, ctx->buffers, ctx->n_buffers);
    ctx->allocator.free(ctx->param_memory, ctx->allocator.user);
    ctx->allocator.free(ctx->grad_memory, ctx->allocator.user);
    ctx->allocator.free(ctx->buffer_memory, ctx->allocator.user);
    ctx->allocator.free(ctx->copy_memory, ctx->allocator.user);
    destroy(ctx);
}

int amp_ctx_fail(amp_ctx *ctx, int status, const char *fmt, ...) {
    if (ctx->status == AMP_OK) {
        ctx->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
        va_end(ap);
    }
    return status;
}

int amp_ctx_status(const amp_ctx *ctx) { return ctx ? ctx->status : AMP_ERR_NULL_POINTER; }
const char *amp_ctx_error(const amp_ctx *ctx) { return ctx ? ctx->error : "null context"; }
void amp_ctx_clear_error(amp_ctx *ctx) {
    if (!ctx) return;
    ctx->status = AMP_OK;
    ctx->error[0] = '\0';
}

const char *amp_tensor_describe(const amp_ctx *ctx, const amp_tensor *t, char *buf, size_t size) {
    char shape[96];
    amp_shape_str(t, shape, sizeof shape);
    const char *dt = amp_dtype_name(t->dtype);
    bool param = false; /* a declared one, whether allocated or not (an error path: a plain search) */
    for (size_t k = 0; ctx && k < ctx->n_params && !param; k++) param = ctx->params[k].tensor == t;
    if (t->name)
        snprintf(buf, size, "%s '%s' (%s %s)", param ? "parameter" : "buffer", t->name, shape, dt);
    else if (t->op != AMP_OP_NONE)
        snprintf(buf, size, "the %s %s result of %s", shape, dt, amp_op_name(t->op));
    else
        snprintf(buf, size, "a %s %s tensor", shape, dt);
    return buf;
}

int amp_ctx_fail_stale(amp_ctx *ctx, const char *what, const char *role, const amp_tensor *t) {
    char d[160];
    amp_tensor_describe(ctx, t, d, sizeof d);
    return amp_ctx_fail(ctx, AMP_ERR_STATE,
                        "%s: %s (%s) was made before the last amp_ctx_reset and is no longer valid: a step's "
                        "tensors live until the next reset (parameters and buffers stay)",
                        what, role ? role : "an input", d);
}

int amp_ctx_fail_unallocated(amp_ctx *ctx, const char *what, const amp_tensor *t) {
    char d[160];
    amp_tensor_describe(ctx, t, d, sizeof d);
    return amp_ctx_fail(ctx, AMP_ERR_STATE,
                        "%s: %s has no storage: call amp_ctx_alloc_params after declaring the parameters and "
                        "buffers, before using them",
                        what, d);
}

void *amp_ctx_alloc(amp_ctx *ctx, size_t bytes) {
    void *p = amp_arena_alloc(&ctx->arena, bytes);
    if (!p) amp_ctx_fail(ctx, AMP_ERR_OUT_OF_MEMORY, "out of memory: the arena could not grow by %zu bytes", bytes);
    return p;
}

void *amp_scratch_alloc(amp_ctx *ctx, size_t bytes) {
    void *p = amp_arena_alloc(&ctx->scratch, bytes);
    if (!p) amp_ctx_fail(ctx, AMP_ERR_OUT_OF_MEMORY, "out of memory: scratch could not grow by %zu bytes", bytes);
    return p;
}

int amp_ctx_reset(amp_ctx *ctx) {
    if (!ctx) return AMP_ERR_NULL_POINTER;
    amp_ctx_clear_error(ctx); /* a new step starts clean (a refusal records only its own error) */
    if (amp_ctx_autocast_depth > 0)
        return amp_ctx_fail(ctx, AMP_ERR_STATE,
                            "amp_ctx_reset: %d autocast region%s still open in this thread: call amp_autocast_exit "
                            "for each amp_autocast_enter before the step ends (nothing was reset)",
                            amp_ctx_autocast_depth, amp_ctx_autocast_depth == 1 ? " is" : "s are");
    amp_arena_reset(&ctx->arena);
    amp_arena_reset(&ctx->scratch);
    ctx->tape = NULL;
    ctx->n_grad_free = 0;
    ctx->generation++;
    amp_arena_rewind(&ctx->headers[ctx->generation & 1]); /* the other one keeps the last step's */
    return AMP_OK;
}

uint64_t amp_ctx_heap_allocations(const amp_ctx *ctx) {
    if (!ctx) return 0;
    return ctx->arena.heap_allocations + ctx->scratch.heap_allocations + ctx->headers[0].heap_allocations +
           ctx->headers[1].heap_allocations + ctx->persistent_allocations;
}
/* The arena's bytes and those of the step's tensor headers. */
size_t amp_ctx_arena_used(const amp_ctx *ctx) {
    return ctx ? amp_arena_used(&ctx->arena) + amp_arena_used(&ctx->headers[ctx->generation & 1]) : 0;
}
size_t amp_ctx_arena_peak(const amp_ctx *ctx) {
    if (!ctx) return 0;
    const size_t h0 = ctx->headers[0].peak, h1 = ctx->headers[1].peak;
    return ctx->arena.peak + (h0 > h1 ? h0 : h1);
}

amp_arena_mark amp_ctx_arena_mark(const amp_ctx *ctx) { return amp_arena_get_mark(&ctx->arena); }

bool amp_ctx_arena_after(const amp_ctx *ctx, amp_arena_mark m, const void *p) {
    const unsigned char *q = p;
    for (int i = m.chunk; i < ctx->arena.n_chunks; i++) {
        const amp_arena_chunk *c = &ctx->arena.chunks[i];
        if (q >= c->base && q < c->base + c->size) return i > m.chunk || (size_t)(q - c->base) >= m.used;
    }
    return false;
}

void amp_ctx_arena_release(amp_ctx *ctx, amp_arena_mark m) {
    int kept = 0;
    for (int i = 0; i < ctx->n_grad_free; i++)
        if (!amp_ctx_arena_after(ctx, m, ctx->grad_free[i].data)) ctx->grad_free[kept++] = ctx->grad_free[i];
    ctx->n_grad_free = kept;
    amp_arena_release(&ctx->arena, m);
}

size_t amp_ctx_scratch_peak(const amp_ctx *ctx) { return ctx ? ctx->scratch.peak : 0; }

uint64_t amp_ctx_random(amp_ctx *ctx, unsigned purpose) {
    return ctx ? splitmix64(&ctx->rng[purpose % AMP_RNG_STREAMS]) : 0;
}

bool amp_set_grad_enabled(amp_ctx *ctx, bool enabled) {
    if (!ctx) return false;
    bool prev = ctx->grad_enabled;
    ctx->grad_enabled = enabled;
    return prev;
}
bool amp_grad_enabled(const amp_ctx *ctx) { return ctx && ctx->grad_enabled; }

bool amp_set_retain_graph(amp_ctx *ctx, bool retain) {
    if (!ctx) return false;
    const bool prev = ctx->retain_graph;
    ctx->retain_graph = retain;
    return prev;
}

/* ---- parameters and buffers ---- */

static amp_tensor *declare_slot(amp_ctx *ctx, bool trainable, const char *name, amp_dtype dtype, int ndim,
                                const int64_t *shape) {
    const char *what = trainable ? "amp_param_new" : "amp_buffer_new";
    if (ctx->params_allocated) {
        amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT,
                     "%s: '%s' is declared after amp_ctx_alloc_params: declare every parameter and buffer first",
                     what, name ? name : "(unnamed)");
        return NULL;
    }
    if (!amp_shape_valid(ctx, what, dtype, ndim, shape)) return NULL;
    amp_param_slot **slots = trainable ? &ctx->params : &ctx->buffers;
    size_t *n = trainable ? &ctx->n_params : &ctx->n_buffers, *cap = trainable ? &ctx->cap_params : &ctx->cap_buffers;
    if (*n == *cap) {
        size_t new_cap = *cap ? *cap * 2 : 16;
        amp_param_slot *grown = ctx->allocator.alloc(new_cap * sizeof *grown, 64, ctx->allocator.user);
        if (!grown) {
            amp_ctx_fail(ctx, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
            return NULL;
        }
        ctx->persistent_allocations++;
        if (*n) memcpy(grown, *slots, *n * sizeof *grown);
        ctx->allocator.free(*slots, ctx->allocator.user);
        *slots = grown;
        *cap = new_cap;
    }
    /* The name is copied behind the tensor, in the same block, so the context owns it: the caller's
     * string may die (and a model that fails half-way has nothing left to leak). */
    const size_t name_bytes = name ? strlen(name) + 1 : 0;
    amp_tensor *t = ctx->allocator.alloc(sizeof *t + name_bytes, 64, ctx->allocator.user);
    amp_tensor *g = trainable ? ctx->allocator.alloc(sizeof *g, 64, ctx->allocator.user) : NULL;
    if (!t || (trainable && !g)) {
        ctx->allocator.free(t, ctx->allocator.user);
        ctx->allocator.free(g, ctx->allocator.user);
        amp_ctx_fail(ctx, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
        return NULL;
    }
    ctx->persistent_allocations += trainable ? 2 : 1;
    amp_tensor_init_leaf(t, dtype, ndim, shape);
    t->name = name ? memcpy(t + 1, name, name_bytes) : NULL;
    t->requires_grad = trainable;
    if (g) {
        *g = *t;
        g->requires_grad = false;
        g->name = NULL;
        t->grad = g;
    }
    (*slots)[(*n)++] = (amp_param_slot){.tensor = t, .grad = g};
    return t;
}

/* Declares a parameter or buffer; the first failure is kept for amp_ctx_alloc_params, which then
 * refuses to allocate an incomplete model. */
static amp_tensor *declare(amp_ctx *ctx, bool trainable, const char *name, amp_dtype dtype, int ndim,
                           const int64_t *shape) {
    if (!ctx) return NULL;
    amp_tensor *t = declare_slot(ctx, trainable, name, dtype, ndim, shape);
    if (!t && ctx->declare_status == AMP_OK)
        ctx->declare_status = ctx->status != AMP_OK ? ctx->status : AMP_ERR_INVALID_ARGUMENT;
    return t;
}

amp_tensor *amp_param_new(amp_ctx *ctx, const char *name, amp_dtype dtype, int ndim, const int64_t *shape) {
    return declare(ctx, true, name, dtype, ndim, shape);
}

amp_tensor *amp_buffer_new(amp_ctx *ctx, const char *name, amp_dtype dtype, int ndim, const int64_t *shape) {
    return declare(ctx, false, name, dtype, ndim, shape);
}

/* Lays the slots out back to back, each 64-byte aligned; returns the total bytes. */
static size_t layout(amp_param_slot *slots, size_t n) {
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        slots[i].offset = off;
        size_t bytes = (size_t)amp_tensor_numel(slots[i].tensor) * amp_dtype_size(slots[i].tensor->dtype);
        off += (bytes + 63) & ~(size_t)63;
    }
    return off;
}

int amp_ctx_alloc_params(amp_ctx *ctx) {
    if (!ctx) return AMP_ERR_NULL_POINTER;
    if (ctx->declare_status != AMP_OK && !ctx->params_allocated) return ctx->declare_status;
    if (ctx->params_allocated)
        return amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "amp_ctx_alloc_params: the parameters are already allocated");
    ctx->param_bytes = layout(ctx->params, ctx->n_params);
    ctx->buffer_bytes = layout(ctx->buffers, ctx->n_buffers);
    const size_t pb = ctx->param_bytes ? ctx->param_bytes : 64, bb = ctx->buffer_bytes ? ctx->buffer_bytes : 64;
    ctx->param_memory = ctx->allocator.alloc(pb, 64, ctx->allocator.user);
    ctx->grad_memory = ctx->allocator.alloc(pb, 64, ctx->allocator.user);
    ctx->buffer_memory = ctx->allocator.alloc(bb, 64, ctx->allocator.user);
    if (!ctx->param_memory || !ctx->grad_memory || !ctx->buffer_memory) {
        ctx->allocator.free(ctx->param_memory, ctx->allocator.user);
        ctx->allocator.free(ctx->grad_memory, ctx->allocator.user);
        ctx->allocator.free(ctx->buffer_memory, ctx->allocator.user);
        ctx->param_memory = ctx->grad_memory = ctx->buffer_memory = NULL;
        return amp_ctx_fail(ctx, AMP_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes of parameters", pb);
    }
    ctx->persistent_allocations += 3;
    memset(ctx->param_memory, 0, pb);
    memset(ctx->grad_memory, 0, pb);
    memset(ctx->buffer_memory, 0, bb);
    for (size_t i = 0; i < ctx->n_params; i++) {
        ctx->params[i].tensor->data = (unsigned char *)ctx->param_memory + ctx->params[i].offset;
        ctx->params[i].grad->data = (unsigned char *)ctx->grad_memory + ctx->params[i].offset;
    }
    for (size_t i = 0; i < ctx->n_buffers; i++)
        ctx->buffers[i].tensor->data = (unsigned char *)ctx->buffer_memory + ctx->buffers[i].offset;
    ctx->params_allocated = true;
    return AMP_OK;
}

size_t amp_ctx_num_params(const amp_ctx *ctx) { return ctx ? ctx->n_params : 0; }
amp_tensor *amp_ctx_param(const amp_ctx *ctx, size_t index) {
    return (ctx && index < ctx->n_params) ? ctx->params[index].tensor : NULL;
}
void *amp_ctx_param_memory(const amp_ctx *ctx, size_t *bytes) {
    if (bytes) *bytes = ctx ? ctx->param_bytes : 0;
    if (!ctx) return NULL;
    for (size_t i = 0; i < ctx->n_params; i++) amp_tensor_bump_version(ctx->params[i].tensor); /* writable */
    return ctx->param_memory;
}
void *amp_ctx_grad_memory(const amp_ctx *ctx, size_t *bytes) {
    if (bytes) *bytes = ctx ? ctx->param_bytes : 0;
    if (!ctx) return NULL;
    /* The pending zeros are part of the gradients' value: written before anyone reads the buffer.
     * (The context is never a const object: the caller's pointer is const, not the memory.) */
    amp_ctx_settle_grads((amp_ctx *)ctx);
    amp_ctx_grads_changed((amp_ctx *)ctx); /* writable: the backward check's notes no longer hold */
    return ctx->grad_memory;
}
size_t amp_ctx_param_offset(const amp_ctx *ctx, size_t index) {
    return (ctx && index < ctx->n_params) ? ctx->params[index].offset : 0;
}
void amp_ctx_set_grad_ready_hook(amp_ctx *ctx, amp_grad_ready_fn fn, void *user) {
    if (!ctx) return;
    ctx->grad_ready = fn;
    ctx->grad_ready_user = user;
}
void amp_ctx_set_backward_grad_hook(amp_ctx *ctx, amp_backward_grad_fn fn, void *user) {
    if (!ctx) return;
    ctx->backward_grad = fn;
    ctx->backward_grad_user = user;
}
void amp_ctx_settle_grad(amp_ctx *ctx, size_t k) {
    amp_param_slot *s = &ctx->params[k];
    if (!s->grad_empty) return;
    memset(s->grad->data, 0, (size_t)amp_tensor_numel(s->grad) * amp_dtype_size(s->grad->dtype));
    s->grad_empty = false;
    ctx->n_grads_empty--;
}

void amp_ctx_settle_grads(amp_ctx *ctx) {
    for (size_t k = 0; ctx && ctx->n_grads_empty && k < ctx->n_params; k++) amp_ctx_settle_grad(ctx, k);
}

/* Marks every gradient empty instead of writing zeros (ctx_internal.h): the backward that follows
 * writes each gradient it reaches anyway, so a memset of the whole buffer would be a pass for
 * nothing. */
void amp_zero_grad(amp_ctx *ctx) {
    if (!ctx || !ctx->grad_memory) return;
    for (size_t k = 0; k < ctx->n_params; k++) {
        ctx->params[k].grad_empty = true;
        amp_ctx_grad_note(ctx, (int64_t)k, 0); /* zeros, whenever they are written */
    }
    ctx->n_grads_empty = ctx->n_params;
}

void amp_ctx_set_backward_grad_check(amp_ctx *ctx, bool on) {
    if (!ctx) return;
    ctx->backward_grad_check = on;
    amp_ctx_grads_changed(ctx); /* notes start with the next backward (or amp_zero_grad) */
}

void amp_ctx_grads_changed(amp_ctx *ctx) {
    if (ctx) ctx->grad_epoch++;
}
