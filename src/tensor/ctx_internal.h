/* Internal: the context's layout, shared by src/tensor and src/ops. */
#ifndef AMP_CTX_INTERNAL_H
#define AMP_CTX_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/ops.h"
#include "amp/status.h"
#include "amp/tensor.h"
#include "arena.h"

enum { AMP_RNG_STREAMS = 8, AMP_NODE_MAX_INPUTS = 8 };

typedef void (*amp_backward_fn)(amp_ctx *ctx, amp_node *node);

/* One recorded op on the tape. Backward reads out->grad and accumulates into in[i]'s gradients. */
struct amp_node {
    amp_op op;
    amp_backward_fn backward;
    amp_tensor *out;
    amp_tensor *in[AMP_NODE_MAX_INPUTS];
    int n_in;
    void *saved;      /* op-specific data in the arena (masks, statistics, indices) */
    float f[4];       /* op scalars (scale, exponent, eps, ...) */
    int64_t i[8];     /* op integers (dims, stride, padding, ...) */
    int32_t out_uses; /* tape nodes recorded with out as an input (each input slot counts) */
    bool spent;       /* its backward ran in a backward that did not retain the graph */
    uint64_t reach;   /* the backward that last found it reachable from its loss (ctx->backward_serial) */
    amp_node *prev;   /* the tape, newest first */
    /* A recomputed region's node (amp/recompute.h): the parameter slots its region's ops take as
     * inputs, one entry per use (backward counts them as this node's own uses, and the recomputed
     * nodes release them as they run), and whether it is one (the backward-gradient hook skips it:
     * the recomputed nodes report their own outputs). */
    const int32_t *param_uses;
    int32_t n_param_uses;
    bool recompute;
    /* out is in[0]'s first numel(out) elements (amp_narrow_rows): backward adds out's gradient into
     * them and zeros into the rest (autograd.c's master_of may do that for it) */
    bool prefix_view;
};

/* A declared parameter or buffer. */
typedef struct amp_param_slot {
    amp_tensor *tensor;
    amp_tensor *grad; /* NULL for buffers */
    size_t offset;    /* bytes into the role's buffer */
    bool grad_empty;  /* amp_zero_grad's zeros not written yet (see amp_ctx_settle_grads) */
    /* The backward check's note (amp_ctx_set_backward_grad_check): absmax_bits of the gradient's
     * values (kernels/elem_kernels.h), valid while grad_note_epoch equals the context's grad_epoch */
    uint32_t grad_absmax;
    uint64_t grad_note_epoch;
    /* The cast copy (amp_ctx_keep_cast_copies; NULL when off or not fp32): the copy dtype's rounding of
     * the values at tensor->version == copy_version, when copy_valid. cast_seen: autocast has cast the
     * parameter to the copy dtype (the optimizers write copies only of those). lent_generation: the
     * last step whose autocast took the copy as a cast (its graph may read it: cast_copy.c). */
    void *cast_copy;
    uint64_t copy_version, lent_generation;
    bool copy_valid, cast_seen;
} amp_param_slot;

/* How many dropped gradient blocks a step can hold for reuse (amp_grad_accumulate). */
enum { AMP_GRAD_FREE_MAX = 64 };

typedef struct amp_grad_block {
    unsigned char *data; /* arena memory, 64-byte aligned */
    size_t bytes;
} amp_grad_block;

struct amp_ctx {
    amp_allocator allocator;
    amp_arena arena;   /* the step's tensor data, tape and gradients; rewound by amp_ctx_reset */
    amp_arena scratch; /* op-local temporaries, stack discipline (amp_scratch_mark/release) */
    /* The step's tensor headers (the amp_tensor structs), in headers[generation & 1]: a reset rewinds
     * the other one, so the headers of the step just ended stay as they were (with their generation)
     * for one more step, and a tensor of that step used after the reset is caught even when new
     * tensors were made since. Only headers live there, so a pointer into either holds a whole
     * header. Rewound, never coalesced: no chunk an old pointer may point into is freed before
     * amp_ctx_free. */
    amp_arena headers[2];
    int status;
    char error[256];
    bool grad_enabled;
    amp_node *tape;
    /* Arena blocks of the non-leaf gradients backward has dropped (PyTorch frees them after use),
     * reused for later first gradients of the same step; emptied by amp_ctx_reset. */
    amp_grad_block grad_free[AMP_GRAD_FREE_MAX];
    int n_grad_free;
    /* the current step, from 1 (0 marks tensors outside the arena): amp_ctx_reset increments it; each
     * arena tensor keeps the value it was made under (amp_tensor_stale), and autocast's cache keys on it */
    uint64_t generation;
    bool retain_graph;       /* amp_set_retain_graph */
    /* > 0 while backward runs a recomputed region's forward again (ops/recompute.c): an op that
     * records statistics of its forward (the fp8 linear's casts) counts them at the first run only */
    int replaying;
    uint64_t backward_serial; /* backward calls since creation (amp_node.reach) */

    amp_param_slot *params, *buffers;
    size_t n_params, cap_params, n_buffers, cap_buffers;
    bool params_allocated;
    int declare_status; /* the first failed amp_param_new / amp_buffer_new (AMP_OK: none) */
    void *param_memory, *grad_memory, *buffer_memory;
    size_t param_bytes, buffer_bytes;
    void *copy_memory;     /* amp_ctx_keep_cast_copies: the slots' cast copies, one allocation */
    size_t copy_bytes;
    amp_dtype copy_dtype;  /* AMP_F32: off */
    uint64_t persistent_allocations;
    size_t n_grads_empty; /* slots with grad_empty set */

    amp_grad_ready_fn grad_ready; /* amp_ctx_set_grad_ready_hook */
    void *grad_ready_user;
    /* During backward: per parameter, the tape nodes still to run that take it as an input
     * (scratch; NULL outside backward). */
    int32_t *backward_pending;
    const amp_node *running; /* during backward: the node whose backward runs (NULL outside) */
    uint64_t grads_direct; /* weight gradients added straight into a master's (amp_grad_sink_open); tests read it */
    amp_backward_grad_fn backward_grad; /* amp_ctx_set_backward_grad_hook */
    void *backward_grad_user;

    uint64_t rng[AMP_RNG_STREAMS];

    /* amp_ctx_set_backward_grad_check: on, and the epoch of the notes that still hold (starts at 1; a
     * slot's epoch 0 is never valid; amp_ctx_grads_changed advances it, dropping every note) */
    bool backward_grad_check;
    uint64_t grad_epoch;
};

/* The calling thread's open autocast regions. src/autocast keeps it (it sits above this layer, which
 * cannot ask it), so that amp_ctx_reset can refuse to end a step inside a region. */
extern _Thread_local int amp_ctx_autocast_depth;

/* True when t is an arena tensor of an earlier step of ctx: made before the last amp_ctx_reset, its
 * memory is being reused. Parameters, buffers and tensors not made by a context (generation 0) never
 * are. */
static inline bool amp_tensor_stale(const amp_ctx *ctx, const amp_tensor *t) {
    return t->generation != 0 && t->generation != ctx->generation;
}
/* Records "<what>: an input (...) was made before the last amp_ctx_reset ..." (`role` names the
 * tensor instead of "an input" when not NULL: "the loss"); returns AMP_ERR_STATE. */
int amp_ctx_fail_stale(amp_ctx *ctx, const char *what, const char *role, const amp_tensor *t);
/* Records "<what>: parameter 'name' has no storage: call amp_ctx_alloc_params ..." for a declared
 * tensor whose data is NULL; returns AMP_ERR_STATE. */
int amp_ctx_fail_unallocated(amp_ctx *ctx, const char *what, const amp_tensor *t);
/* The checks of an op's input (ops' amp_op_input_ok, the cast): false, with "<what>: ..." recorded
 * unless an error is there already, when x is NULL, stale (amp_tensor_stale), a parameter or buffer
 * without storage, or not f32, f16 or bf16; false too when the context holds an error. */
bool amp_ctx_input_ok(amp_ctx *ctx, const char *what, const amp_tensor *x);
/* "a [2, 3] f32 tensor", "the [2, 3] f16 result of gelu", "parameter 'fc1.weight' ([4, 8] f32)". */
const char *amp_tensor_describe(const amp_ctx *ctx, const amp_tensor *t, char *buf, size_t size);

/* Records the first error (later ones are dropped) and returns `status`. */
int amp_ctx_fail(amp_ctx *ctx, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Arena memory for this step; records AMP_ERR_OUT_OF_MEMORY and returns NULL on failure. */
void *amp_ctx_alloc(amp_ctx *ctx, size_t bytes);
/* Op-local temporary memory: take a mark on entry, release it before returning. */
void *amp_scratch_alloc(amp_ctx *ctx, size_t bytes);
static inline amp_arena_mark amp_scratch_mark(amp_ctx *ctx) { return amp_arena_get_mark(&ctx->scratch); }
static inline void amp_scratch_release(amp_ctx *ctx, amp_arena_mark m) { amp_arena_release(&ctx->scratch, m); }

/* Parameter gradients "empty until first written". amp_zero_grad does not write the zeros: it marks
 * every gradient empty, and the first accumulation into an empty one (autograd.c, through
 * claim_empty) stores 0 + g instead of loading zeros and adding g (the same bits). Whatever
 * is still empty is written as zeros by amp_ctx_settle_grads, which every reader calls first: the end
 * of every backward (and each parameter's grad-ready point), amp_ctx_grad_memory, and the optimizer's
 * and scaler's passes. Between amp_zero_grad and the next backward a gradient read through its tensor
 * struct holds the old values (amp/tensor.h). */
void amp_ctx_settle_grads(amp_ctx *ctx);
/* amp_ctx_settle_grads for parameter slot k only. */
void amp_ctx_settle_grad(amp_ctx *ctx, size_t k);

/* The backward check's notes (amp_ctx_set_backward_grad_check). Every write amp makes to a parameter
 * gradient outside the GEMM epilogues that note their maximum drops that gradient's note
 * (amp_ctx_grad_note_drop: autograd.c's accumulations and sinks, the grad-ready hook's parameter);
 * writes to all of them (unscaling, clipping, the fused step's unscaled gradients, the gradient
 * buffer handed out) advance the epoch (amp_ctx_grads_changed). */
static inline void amp_ctx_grad_note_drop(amp_ctx *ctx, int64_t k) {
    if (k >= 0) ctx->params[k].grad_note_epoch = 0;
}
static inline void amp_ctx_grad_note(amp_ctx *ctx, int64_t k, uint32_t absmax) {
    if (k < 0 || !ctx->backward_grad_check) return;
    ctx->params[k].grad_absmax = absmax;
    ctx->params[k].grad_note_epoch = ctx->grad_epoch;
}
/* Slot k's note: true and its absmax_bits in *absmax when the check is on and the note holds. */
static inline bool amp_ctx_grad_noted(const amp_ctx *ctx, int64_t k, uint32_t *absmax) {
    if (k < 0 || !ctx->backward_grad_check || ctx->params[k].grad_note_epoch != ctx->grad_epoch) return false;
    *absmax = ctx->params[k].grad_absmax;
    return true;
}
/* The arena's position now, whether p lies in memory allocated after mark m, and the release of
 * everything after m (amp/recompute.h's regions): the dropped-gradient blocks past m leave the reuse
 * pool first. */
amp_arena_mark amp_ctx_arena_mark(const amp_ctx *ctx);
bool amp_ctx_arena_after(const amp_ctx *ctx, amp_arena_mark m, const void *p);
void amp_ctx_arena_release(amp_ctx *ctx, amp_arena_mark m);

/* The parameter slot whose tensor is t, or -1. */
int64_t amp_ctx_param_index(const amp_ctx *ctx, const amp_tensor *t);

/* Cast copies (amp_ctx_keep_cast_copies; tensor/cast_copy.c). */
/* t's copy in `dtype` holding t's values now: as it is when valid at t's version, else cast into it
 * (amp_tensor_read's conversion) unless a graph of this step took it before; NULL then, and when t
 * has no copy in dtype. *converted: it was cast into. Marks t as cast to dtype (the optimizers keep its copy from then on) and, when
 * a copy is returned, lent to this step. */
const void *amp_ctx_cast_copy_take(amp_ctx *ctx, const amp_tensor *t, amp_dtype dtype, bool *converted);
/* Whether a graph of this step may still read copies lent to it: a tape node other than a cast or a
 * prefix view (amp_narrow_rows) whose backward has not run (computed once per optimizer step). */
bool amp_ctx_graph_live(const amp_ctx *ctx);
/* For an optimizer about to rewrite t (a parameter slot's tensor): the copy to write beside it (its
 * values then valid at t's next version, amp_ctx_cast_copy_written), or NULL (none, not cast, or lent
 * to a live graph: then the copy is marked stale). `live`: amp_ctx_graph_live's answer. */
void *amp_ctx_cast_copy_for_update(amp_ctx *ctx, const amp_tensor *t, bool live, amp_dtype *dtype);
/* After the update: t's version advanced; the copy returned for it, when one was, is valid at it. */
void amp_ctx_cast_copy_written(amp_ctx *ctx, amp_tensor *t, bool copy_written);

/* Checks a dtype and shape (0..AMP_MAX_DIMS dims, no negative size, numel * 16 within int64);
 * records "what: problem" and returns false when they are not acceptable. */
bool amp_shape_valid(amp_ctx *ctx, const char *what, amp_dtype dtype, int ndim, const int64_t *shape);
/* Fills *t as a contiguous leaf of that dtype and shape, with no data, name or grad. */
void amp_tensor_init_leaf(amp_tensor *t, amp_dtype dtype, int ndim, const int64_t *shape);

/* A fresh arena tensor struct with contiguous strides; data allocated unless `with_data` is false. */
amp_tensor *amp_ctx_new_tensor(amp_ctx *ctx, amp_dtype dtype, int ndim, const int64_t *shape, bool with_data);

/* Shape helpers. */
int64_t amp_shape_numel(int ndim, const int64_t *shape);
void amp_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
bool amp_same_shape(const amp_tensor *a, const amp_tensor *b);
/* "[2, 3, 4]" into buf. */
const char *amp_shape_str(const amp_tensor *t, char *buf, size_t size);

#endif
