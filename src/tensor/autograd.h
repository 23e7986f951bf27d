/* Internal: what ops need from autograd, and fp32 staging of tensor data.
 *
 * An op computes its result, then calls amp_autograd_record, which appends a node to the tape when
 * grad mode is on and an input requires grad. Backward walks the tape newest-first (eager recording
 * is already a topological order) and calls each node whose output received a gradient. */
#ifndef AMP_AUTOGRAD_H
#define AMP_AUTOGRAD_H

#include "ctx_internal.h"

/* Marks `out` as the result of `op` computed in `compute_dtype`, and records a node when needed.
 * Returns the node (fill its saved data, f[], i[]) or NULL when nothing was recorded (or on OOM,
 * which is recorded in the context). */
amp_node *amp_autograd_record(amp_ctx *ctx, amp_op op, amp_dtype compute_dtype, amp_tensor *out,
                              amp_tensor *const *in, int n_in, amp_backward_fn backward);

/* amp_autograd_record for a recomputed region (amp/recompute.h): records whenever grad mode is on
 * (the region's parameters may need gradients even when no input does), with the region's
 * parameter uses (uses[n_uses] slots, copied into the arena) and out taking requires_grad. */
amp_node *amp_autograd_record_recompute(amp_ctx *ctx, amp_op op, amp_dtype compute_dtype, amp_tensor *out,
                                        amp_tensor *const *in, int n_in, amp_backward_fn backward,
                                        const int32_t *uses, int32_t n_uses);
/* Runs the backward of the nodes of `tape` (newest first, as amp_backward does), during a backward
 * (ctx->backward_pending set): a recomputed region's inner tape. Returns the context's status. */
int amp_autograd_run_nodes(amp_ctx *ctx, amp_node *tape);

/* True when amp_autograd_record would record a node for these inputs now (grad mode on and an input
 * requires grad): ops that save data for backward straight into the arena ask this first. */
bool amp_autograd_will_record(const amp_ctx *ctx, amp_tensor *const *in, int n_in);

/* Adds g (numel(t) fp32 values in row-major logical order) into t's gradient, rounding once to the
 * gradient's dtype (t's dtype). Does nothing when t is NULL or does not require grad. */
int amp_grad_accumulate(amp_ctx *ctx, amp_tensor *t, const float *g);

/* amp_grad_accumulate with the gradient g as a tensor of t's shape, in any float dtype (the same
 * values as amp_grad_accumulate(ctx, t, amp_f32_view(ctx, g))); a contiguous bf16 g goes into an
 * fp32 gradient in one pass, with no fp32 staging. */
int amp_grad_accumulate_grad(amp_ctx *ctx, amp_tensor *t, const amp_tensor *g);

/* For a node whose backward passes its output's gradient on unchanged to its one input, in[0] (a
 * reshape, a contiguous copy, a cast to the same dtype): when in[0] has no gradient yet and the
 * output's gradient is contiguous, of in[0]'s dtype and number of elements, and dropped after this
 * node (not retained), in[0] takes that gradient's memory as its own (a header of its shape) and the
 * output's is cleared, instead of amp_grad_accumulate_grad copying it (what amp_grad_accumulate would
 * write: the same values, NaN payloads as they were). True when it did. */
bool amp_grad_hand_over(amp_ctx *ctx, amp_node *node);
/* The same for input t of a node whose backward passes its output's gradient on unchanged to t
 * (amp_linear_residual's residual): called after everything else in that backward has read the
 * output's gradient, which is then t's. */
bool amp_grad_hand_over_to(amp_ctx *ctx, amp_node *node, amp_tensor *t);

/* A gradient of t that a backward computes in fp32 and writes straight to where it goes (a GEMM's
 * epilogue, src/gemm/gemm_fused.h), instead of through fp32 scratch and amp_grad_accumulate. When
 * amp_grad_sink_open returns true the caller writes every element g[i] of the gradient (numel(t),
 * row-major logical order) as:
 *   out[i] = g[i] rounded to out_dtype                          (when out is not NULL)
 *   acc[i] += g[i] rounded to out_dtype, decoded to fp32         (when acc is not NULL; with
 *                                                                acc_store, acc[i] = 0 + that value)
 * then calls amp_grad_sink_close. The bits are those of amp_grad_accumulate(ctx, t, g). Cases: t's
 * gradient exists in fp32 (acc, out_dtype f32); t is a cast's copy of a parameter that may take the
 * gradient directly (acc: the parameter's, out_dtype t's; see master_of in autograd.c); t has
 * no gradient yet (out: its new gradient). False (nothing to close): use amp_grad_accumulate. */
typedef struct amp_grad_sink {
    void *out;           /* numel(t) contiguous values in out_dtype, or NULL */
    amp_dtype out_dtype;
    float *acc;          /* numel(t) contiguous fp32 values, or NULL */
    bool acc_store;
    int64_t numel;
    /* with acc and the backward check on (amp_ctx_set_backward_grad_check): the parameter slot whose
     * gradient acc is (its note dropped by the open; amp_ctx_grad_note after a write that took every
     * element's maximum), else -1 */
    int64_t slot;
    amp_tensor *t, *grad; /* private: the new gradient amp_grad_sink_close gives t */
} amp_grad_sink;
bool amp_grad_sink_open(amp_ctx *ctx, amp_tensor *t, amp_grad_sink *s);
void amp_grad_sink_close(amp_ctx *ctx, amp_grad_sink *s);

/* fp32 staging (scratch memory: valid until the caller's scratch release). */
/* t's elements, contiguous fp32 in row-major logical order; may return t->data itself: read only. */
const float *amp_f32_view(amp_ctx *ctx, const amp_tensor *t);
/* A writable copy of t's elements as contiguous fp32. */
float *amp_f32_copy(amp_ctx *ctx, const amp_tensor *t);
/* Uninitialized fp32 scratch for n values. */
float *amp_f32_scratch(amp_ctx *ctx, int64_t n);
/* Writes numel(t) fp32 values into contiguous t, rounding to t's dtype. */
int amp_store_f32(amp_ctx *ctx, amp_tensor *t, const float *src);
/* The gradient flowing into node->out, as contiguous fp32 (read only). */
const float *amp_grad_out(amp_ctx *ctx, const amp_node *node);

#endif
