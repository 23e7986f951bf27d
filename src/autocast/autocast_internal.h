/* Internal: the hook every op calls on entry. */
#ifndef AMP_AUTOCAST_INTERNAL_H
#define AMP_AUTOCAST_INTERNAL_H

#include <stdbool.h>

#include "amp/autocast.h"
#include "amp/tensor.h"

/* Applies op's policy to in[0..n) when autocast is on in this thread: each non-NULL float input is
 * replaced by its cast (a differentiable amp_cast, or a cached one). Returns false when a cast
 * failed (the error is in ctx). */
bool amp_autocast_inputs(amp_ctx *ctx, amp_op op, amp_tensor **in, int n);

/* amp_autocast_inputs for an op whose arithmetic is fp32 from inputs of any float dtype (add, sub,
 * mul, div, the losses). A cast to f32 only widens, so it gives the values the op reads anyway: such
 * inputs are left to be read in place, with no copy kept until backward and no cast node (their
 * gradients reach them rounded once to their own dtype, as the cast's backward would round them).
 * Casts that round (to the region's low dtype) are made as usual. *target: the dtype the policy
 * casts to (AMP_F32 then means "read in place, compute and return fp32"), or AMP_DTYPE_COUNT when
 * autocast leaves the op alone. */
bool amp_autocast_inputs_exact(amp_ctx *ctx, amp_op op, amp_tensor **in, int n, amp_dtype *target);

/* fp32 x as this thread's autocast region would hand it to `op` when op's policy casts to the
 * region's low dtype (AMP_POLICY_LOWER): the cacheable cast of a parameter (cached; the parameter's
 * cast copy where it has one); x itself otherwise (no 16-bit region, another policy, x not fp32). A
 * model that narrows a parameter before op reads it (gpt2's tied head: wte's first V rows) casts it
 * first so: the narrowed values are the same, and the cast is the cached one. NULL when the cast
 * failed (the error is in ctx). */
amp_tensor *amp_autocast_weight(amp_ctx *ctx, amp_op op, amp_tensor *x);

/* The cast of x (an fp32 parameter) to dtype made from its cast copy (amp_ctx_cast_copy_take: the
 * same values amp_cast would convert), recorded on the tape as amp_cast records it: a tensor whose
 * data is the copy. NULL when the context failed. */
amp_tensor *amp_autocast_cast_from_copy(amp_ctx *ctx, amp_tensor *x, amp_dtype dtype, const void *copy);

#endif
