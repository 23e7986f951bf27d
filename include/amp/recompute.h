/* Activation recomputation (gradient checkpointing): a region of ops whose intermediate results are
 * not kept for backward but computed again when backward reaches the region, trading one more
 * forward of the region for its activations' memory (Chen et al. 2016, torch.utils.checkpoint).
 *
 *     static amp_tensor *block(amp_ctx *ctx, amp_tensor *const *in, int n_in, void *user) {
 *         return amp_transformer_block_forward(ctx, user, in[0]);
 *     }
 *     x = amp_recompute(ctx, block, &x, 1, &blocks[l]);   // instead of the block's forward
 *
 * Forward: with grad mode on, fn runs as usual (recorded onto a tape of its own), then everything it
 * allocated in the context's arena (activations, saved data, its tape) is released; only its result
 * is kept, copied into a fresh contiguous tensor, and one node is recorded for the region (it takes
 * the inputs, and counts the parameters fn used, so gradient-ready hooks fire when they would
 * without recomputation). With grad mode off fn simply runs.
 * Backward: when the region's node is reached, fn runs again on the same inputs with grad mode on,
 * under the autocast state (on or off, and the dtype) that was current at the forward, with the
 * context's random streams as they were at the forward (so dropout draws the same masks); the
 * result's gradient is handed to the recomputed result and backward runs through the recomputed
 * nodes, newest first, as it would have through the originals; then the region's memory is released
 * again, keeping the gradients of the inputs. The same ops in the same order: gradients are bit for
 * bit those of the plain forward (tests/test_recompute.c, fp32, bf16 and fp16 autocast).
 *
 * Contract for fn: a pure function of its inputs and the context's parameters (whatever else it
 * reads must not change between the forward and the backward); it returns one tensor or NULL with
 * the context's error set; n_in <= 8. Casts inside the region are not cached by autocast (the cache
 * would outlive the released memory), so a weight used twice inside a region is cast twice (the
 * gradient then reaches it through two cast nodes rather than one); a weight used once, as in a
 * transformer block, is unaffected. The tape of a backward that is not the first (retain_graph)
 * recomputes the region again. The backward-gradient hook (amp_ctx_set_backward_grad_hook) sees
 * the recomputed nodes' outputs, not the region's node.
 * Memory: at most one region's activations exist at a time besides the kept results (the inputs
 * and outputs of the regions), plus, in backward, that region's gradients. */
#ifndef AMP_RECOMPUTE_H
#define AMP_RECOMPUTE_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef amp_tensor *(*amp_recompute_fn)(amp_ctx *ctx, amp_tensor *const *in, int n_in, void *user);

/* fn(ctx, in, n_in, user) as a recomputed region (see above). Returns its result, or NULL with the
 * context's error set (a NULL ctx or fn, n_in outside 0..8, a bad input, fn's own failure). */
amp_tensor *amp_recompute(amp_ctx *ctx, amp_recompute_fn fn, amp_tensor *const *in, int n_in, void *user);

#ifdef __cplusplus
}
#endif
#endif /* AMP_RECOMPUTE_H */
