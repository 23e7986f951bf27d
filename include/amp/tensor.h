/* Tensors, the context that owns their memory, and reverse-mode autograd.
 *
 * Memory (STYLE.md, llm.c's layout):
 *   - Parameters are declared with amp_param_new, then amp_ctx_alloc_params gives all of them one
 *     contiguous buffer and their gradients a second one (zero-grad is one memset; a checkpoint is one
 *     write). Persistent non-trainable state (batch-norm running statistics) lives in a third buffer,
 *     declared with amp_buffer_new.
 *   - Everything made during a step (activations, the autograd tape, intermediate gradients, op
 *     scratch) comes from the context's arena. amp_ctx_reset starts a new step and rewinds the arena:
 *     every tensor made since the last reset dies there. The arena grows while a step needs more and
 *     then keeps its size, so a steady-state training step makes no heap allocation
 *     (amp_ctx_heap_allocations counts them).
 * Ownership: the context owns every tensor; users never free one. A tensor pointer stays valid until
 * the next amp_ctx_reset (arena tensors) or amp_ctx_free (parameters and buffers).
 *
 * Lifetime and state checks (always on; each costs a comparison or a walk of the tape per backward):
 *   - every arena tensor carries the step it was made in (`generation`); an op or a backward given a
 *     tensor from before the last amp_ctx_reset refuses it with an error that names the op and
 *     describes the tensor. The tensors of the step just ended keep their headers until the step
 *     after next, so using one of them is always caught; an older pointer may already name a tensor
 *     of this step (its header's memory reused), and is then that tensor;
 *   - an op given a declared parameter or buffer before amp_ctx_alloc_params names it and says so;
 *   - a graph is backpropagated once (amp_backward, amp_set_retain_graph);
 *   - amp_ctx_reset inside an open autocast region is refused (amp/autocast.h).
 *
 * Errors are sticky within a step (ggml's way): an op that fails records a status and a message in
 * the context and returns NULL, and every later op returns NULL without overwriting that first
 * error, so one check of amp_ctx_status after building a graph suffices. The error is reported where
 * it happened and ends with its step: amp_ctx_reset clears it (a new step starts clean, as PyTorch
 * reports an error once, where it is raised); amp_ctx_clear_error clears it within a step. */
#ifndef AMP_TENSOR_H
#define AMP_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "ops_list.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { AMP_MAX_DIMS = 6 };

typedef struct amp_ctx amp_ctx;
typedef struct amp_node amp_node;
typedef struct amp_tensor amp_tensor;

struct amp_tensor {
    amp_dtype dtype;
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    int64_t stride[AMP_MAX_DIMS]; /* in elements; row-major contiguous unless a view made it otherwise */
    void *data;                   /* first element; owned by the context */
    const char *name;             /* parameters and buffers: the name given; others: NULL */

    bool requires_grad;
    bool is_leaf;        /* parameters and user-made tensors; op results are not leaves */
    bool retains_grad;   /* a non-leaf whose grad is kept after backward (amp_tensor_retain_grad) */
    amp_tensor *grad;    /* after backward: leaves with requires_grad, and retained non-leaves;
                            same shape and dtype as the tensor */
    amp_node *grad_fn;   /* the tape node that made this tensor, when autograd recorded one */

    amp_op op;               /* the op that produced it (AMP_OP_NONE for leaves) */
    amp_dtype compute_dtype; /* the dtype that op computed in: its inputs' dtype after any cast
                                (accumulation is always fp32); autocast tests read this */
    uint64_t generation;     /* the context's step that made it (amp_ctx_reset starts the next one):
                                ops refuse a tensor of an earlier step. 0 for parameters, buffers and
                                tensors not made by a context, which never go stale */
    uint64_t version;        /* PyTorch's _version: advanced by every write the library makes to the
                                values (amp_tensor_write, the optimizers' steps, checkpoint and model
                                loads, amp_ctx_param_memory and amp_optimizer_master handing out
                                writable memory). Code that writes through data itself calls
                                amp_tensor_bump_version afterwards: a parameter's cast copy
                                (amp_ctx_keep_cast_copies) is trusted only at the version it was made at */
};

/* A caller-replaceable allocator (libuv's idea). alloc returns memory aligned to `align` (a power of
 * two) or NULL; free accepts NULL. */
typedef struct amp_allocator {
    void *(*alloc)(size_t size, size_t align, void *user);
    void (*free)(void *ptr, void *user);
    void *user;
} amp_allocator;

typedef struct amp_ctx_config {
    size_t arena_bytes;      /* initial arena size; it grows on demand (default 64 MiB) */
    uint64_t seed;           /* seeds the context's generators (dropout) */
    amp_allocator allocator; /* default: aligned malloc/free */
} amp_ctx_config;

amp_ctx_config amp_ctx_default_config(void);
/* Creates a context. Returns AMP_OK, AMP_ERR_OUT_OF_MEMORY or AMP_ERR_INVALID_ARGUMENT. */
int amp_ctx_create(const amp_ctx_config *config, amp_ctx **out);
/* Frees the context and everything it owns. NULL is fine. */
void amp_ctx_free(amp_ctx *ctx);

/* The first error since the last clear or reset (AMP_OK if none), and its message ("" if none). A
 * NULL ctx gives AMP_ERR_NULL_POINTER and "null context". */
int amp_ctx_status(const amp_ctx *ctx);
const char *amp_ctx_error(const amp_ctx *ctx);
void amp_ctx_clear_error(amp_ctx *ctx);

/* Starts a new step: rewinds the arena (every non-parameter tensor dies), clears the tape and the
 * sticky error. Refused (AMP_ERR_STATE, recorded, nothing reset) while this thread is inside an
 * autocast region: a step ends outside the regions it entered (amp_autocast_depth() == 0), so a
 * region left open by mistake is reported at the next step instead of making later fp32 code
 * compute in fp16. Returns AMP_OK, AMP_ERR_STATE or AMP_ERR_NULL_POINTER. */
int amp_ctx_reset(amp_ctx *ctx);
/* Heap allocations the context has made since creation (arena growth, parameter buffers). */
uint64_t amp_ctx_heap_allocations(const amp_ctx *ctx);
/* Bytes of arena in use now, and the high-water mark since creation. */
size_t amp_ctx_arena_used(const amp_ctx *ctx);
size_t amp_ctx_arena_peak(const amp_ctx *ctx);
/* The high-water mark of the ops' temporary memory (fp32 staging, packed panels) since creation. */
size_t amp_ctx_scratch_peak(const amp_ctx *ctx);
/* Random bits from the context's generator for `purpose` (0: dropout; others free for users):
 * one independent stream per purpose, so drawing from one never shifts another. */
uint64_t amp_ctx_random(amp_ctx *ctx, unsigned purpose);

/* ---- parameters and buffers ---- */

/* Declares a trainable parameter (a leaf with requires_grad). data is NULL until amp_ctx_alloc_params
 * (an op given it before then refuses it, naming it). The context keeps its own copy of name (NULL:
 * unnamed). After allocation no more parameters can be declared (AMP_ERR_INVALID_ARGUMENT). */
amp_tensor *amp_param_new(amp_ctx *ctx, const char *name, amp_dtype dtype, int ndim, const int64_t *shape);
/* Declares persistent state without a gradient (e.g. running statistics), allocated with the params. */
amp_tensor *amp_buffer_new(amp_ctx *ctx, const char *name, amp_dtype dtype, int ndim, const int64_t *shape);
/* Allocates one zeroed buffer for all parameters, one for their gradients and one for buffers.
 * Refused (with that declaration's status) after a failed amp_param_new or amp_buffer_new, since the
 * model would be incomplete; AMP_ERR_INVALID_ARGUMENT the second time. */
int amp_ctx_alloc_params(amp_ctx *ctx);
size_t amp_ctx_num_params(const amp_ctx *ctx);
amp_tensor *amp_ctx_param(const amp_ctx *ctx, size_t index);
/* The parameter and gradient buffers as flat byte ranges (for one-pass optimizers and checkpoints).
 * The parameters' memory is writable: every parameter's version is advanced. */
void *amp_ctx_param_memory(const amp_ctx *ctx, size_t *bytes);
void *amp_ctx_grad_memory(const amp_ctx *ctx, size_t *bytes);
/* Cast copies: a `dtype` (F16 or BF16) copy of each fp32 parameter, kept beside it so that the next
 * forward's autocast cast of the parameter need not be made again. The optimizers write a parameter's
 * copy in the pass that updates it (the same rounding as the cast, amp_convert's round to nearest
 * even, from the new value) once autocast has cast the parameter to `dtype`; autocast's cache
 * (amp/autocast.h) then takes the copy as the cast, with no conversion and no arena memory, while the
 * parameter's version (amp_tensor.version) is still the one the copy was written at, and casts into
 * the copy otherwise (the first step, a write since the update), or into the arena as usual where a
 * graph of this step took the copy already. An optimizer step that a graph of this step can still read the copy through (a
 * tape with nodes whose backward has not run, as with amp_set_retain_graph) leaves the copy stale
 * instead of rewriting it. One allocation of 2 bytes per fp32 parameter element (each copy 64-byte
 * aligned): amp_ctx_cast_copy_bytes. AMP_F32 frees them (off, the default). After
 * amp_ctx_alloc_params (AMP_ERR_STATE before); AMP_ERR_UNSUPPORTED_DTYPE for other dtypes;
 * AMP_ERR_OUT_OF_MEMORY. Same bits with or without: only the work and the memory differ. */
int amp_ctx_keep_cast_copies(amp_ctx *ctx, amp_dtype dtype);
/* The cast copies' bytes (0 when off). */
size_t amp_ctx_cast_copy_bytes(const amp_ctx *ctx);
/* Advances t's version (amp_tensor.version): for code that wrote t->data directly. NULL is fine. */
void amp_tensor_bump_version(amp_tensor *t);
/* Zeroes every parameter gradient. The zeros are not written here: each gradient is marked empty,
 * the next backward's first write into it stores instead of adding, and what the backward does not
 * reach is zeroed when it completes (or, during it, when the grad-ready hook reports the parameter).
 * amp_ctx_grad_memory and the optimizer and scaler write any pending zeros before they read. Only a
 * read of p->grad->data between amp_zero_grad and the next backward sees the old values. */
void amp_zero_grad(amp_ctx *ctx);
/* The inf/NaN check made where backward writes the gradients (off by default). On, each parameter
 * gradient that a GEMM's epilogue writes whole (a linear's or matmul's weight, directly or under
 * autocast into its fp32 master's) gets a note of its largest |value| (NaN above inf), taken from
 * the values as they are written, and amp_optimizer_fused_step (so amp_scaler_step_fused) takes the
 * inf/NaN check of those gradients from the notes instead of reading them all once more before the
 * update: one read pass over most of the gradients less per step (their norm comes from the update's
 * own pass, the same bits). Every other write amp makes to a gradient drops its note (accumulations,
 * a parameter reported to the grad-ready hook, unscaling, clipping, the fused step,
 * amp_ctx_grad_memory); a program that writes gradient data itself between backward and the step
 * (by pointer, or with a function that takes no context, such as amp_tensor_write or
 * amp_non_finite_check_and_unscale) must call amp_ctx_grads_changed after it, or leave this off.
 * Switching it drops every note. */
void amp_ctx_set_backward_grad_check(amp_ctx *ctx, bool on);
/* Drops every note of the backward check: the gradients were written outside amp. */
void amp_ctx_grads_changed(amp_ctx *ctx);
/* The parameter's byte offset in the parameter (and gradient) buffer. */
size_t amp_ctx_param_offset(const amp_ctx *ctx, size_t index);

/* Called during backward as soon as parameter `index`'s gradient is complete for this backward (no
 * op left on the tape uses the parameter), so data-parallel training can start sending it while
 * backward goes on (PyTorch DDP's bucket hooks). Parameters the backward never reaches are not
 * reported. NULL removes the hook. Costs a pass over the tape per backward when set. */
typedef void (*amp_grad_ready_fn)(amp_ctx *ctx, size_t index, void *user);
void amp_ctx_set_grad_ready_hook(amp_ctx *ctx, amp_grad_ready_fn fn, void *user);

/* Called during backward for every tape node a gradient reached, just before the node's backward
 * runs, with the node's output and the gradient flowing into it (the output's shape and dtype, so an
 * fp16 op's gradient is fp16): the activation gradients, for diagnostics such as amp train's
 * per-op underflow statistics. NULL removes the hook. */
typedef void (*amp_backward_grad_fn)(amp_ctx *ctx, const amp_tensor *out, const amp_tensor *grad, void *user);
void amp_ctx_set_backward_grad_hook(amp_ctx *ctx, amp_backward_grad_fn fn, void *user);

/* ---- arena tensors ---- */

/* A new contiguous tensor in the arena with uninitialized data (a leaf, no grad). */
amp_tensor *amp_tensor_new(amp_ctx *ctx, amp_dtype dtype, int ndim, const int64_t *shape);
amp_tensor *amp_tensor_zeros(amp_ctx *ctx, amp_dtype dtype, int ndim, const int64_t *shape);
/* A new tensor holding a copy of `data` (n elements of src_dtype, converted to dtype). */
amp_tensor *amp_tensor_from(amp_ctx *ctx, amp_dtype dtype, int ndim, const int64_t *shape, const void *data,
                            amp_dtype src_dtype);
/* A scalar (0-dimensional) tensor. */
amp_tensor *amp_tensor_scalar(amp_ctx *ctx, amp_dtype dtype, float value);
/* Marks a leaf as requiring grad (inputs whose gradient a test or a diagnostic wants). */
void amp_tensor_set_requires_grad(amp_tensor *t, bool requires_grad);
/* Keeps a non-leaf's gradient after backward (PyTorch's retain_grad). */
void amp_tensor_retain_grad(amp_tensor *t);

int64_t amp_tensor_numel(const amp_tensor *t); /* 0 for NULL */
bool amp_tensor_is_contiguous(const amp_tensor *t);
/* Element i (row-major logical index, 0 <= i < numel) read as fp32; works for views. NaN when i is
 * out of range, t is NULL or has no storage (a parameter before amp_ctx_alloc_params); these
 * functions take no context, so they record no error: amp_tensor_get_checked says which. */
float amp_tensor_get(const amp_tensor *t, int64_t i);
/* amp_tensor_get with a status: AMP_OK and the value in *out, or AMP_ERR_INVALID_ARGUMENT (i out of
 * range), AMP_ERR_NULL_POINTER (t or out NULL, or no storage), with *out NaN. */
int amp_tensor_get_checked(const amp_tensor *t, int64_t i, float *out);
/* Copies the tensor's elements, in row-major logical order, into dst as dst_dtype. */
int amp_tensor_read(const amp_tensor *t, void *dst, amp_dtype dst_dtype);
/* Overwrites the tensor's elements from src (numel elements of src_dtype, row-major); advances its
 * version. */
int amp_tensor_write(amp_tensor *t, const void *src, amp_dtype src_dtype);

/* ---- autograd ---- */

/* Grad mode (on by default): while off, ops record nothing. Returns the previous mode. */
bool amp_set_grad_enabled(amp_ctx *ctx, bool enabled);
bool amp_grad_enabled(const amp_ctx *ctx);
/* Back-propagates from `loss`: with seed == NULL the loss must have one element and its gradient is
 * 1; otherwise seed has the loss's shape and is its gradient. Gradients accumulate (+=) into leaves'
 * grad. Returns AMP_OK or an error (also recorded in the context).
 * A graph is backpropagated once, as in PyTorch: a backward that would go again through a node an
 * earlier backward of this step ran is refused before it changes anything (AMP_ERR_STATE, "amp_backward:
 * Trying to backward through the graph a second time ..."), since it would add that node's gradients
 * a second time. Nodes for which PyTorch keeps no tensors (cast, contiguous, reshape, transpose,
 * concat, add, sub, scale, sum, mean) may be passed again, as there: two losses that share only a
 * cast weight or a sum may each be backpropagated. Backward inside an autocast region is allowed. */
int amp_backward(amp_ctx *ctx, amp_tensor *loss, const amp_tensor *seed);
/* amp_backward with a scalar seed: d(loss)/d(loss) = seed. Loss scaling passes the scale here. */
int amp_backward_scaled(amp_ctx *ctx, amp_tensor *loss, float seed);
/* PyTorch's retain_graph: while on, backward leaves the nodes it runs usable by a later backward
 * (whose gradients then add to these). Off by default; returns the previous setting. */
bool amp_set_retain_graph(amp_ctx *ctx, bool retain);

#ifdef __cplusplus
}
#endif
#endif /* AMP_TENSOR_H */
