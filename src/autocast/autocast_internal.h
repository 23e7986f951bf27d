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

#endif
