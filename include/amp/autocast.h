/* Autocast: regions in which each op casts its inputs to the dtype its policy says, as
 * torch.autocast does.
 *
 *     amp_autocast_enter(AMP_BF16);          // with torch.autocast("cuda", dtype=torch.bfloat16):
 *     logits = amp_linear(ctx, x, w, b);      //   bf16 GEMM (fp32 accumulation), bf16 result
 *     loss = amp_cross_entropy(ctx, logits, y);  // fp32
 *     amp_autocast_exit();
 *     amp_backward(...)                       // backward outside the region, as PyTorch advises
 *
 * State is thread-local, like PyTorch's: each thread enters its own regions. Regions nest; an inner
 * region may change the dtype or disable autocast, and exiting restores the outer state. Backward
 * inside a region is allowed (as in PyTorch); ending the step is not: amp_ctx_reset refuses while a
 * region is open, so an enter without its exit shows up at the next step.
 *
 * Policies (amp_cast_policy), one per op in a process-wide table that `amp policy` prints and
 * amp_autocast_set_policy changes at run time:
 *   LOWER    cast every float input to the region's dtype (f16 or bf16);
 *   FP32     cast every float input to f32;
 *   PROMOTE  cast every float input to the widest dtype among them (f32 > f16/bf16; f16 with bf16
 *            gives f32 where PyTorch raises an error);
 *   NONE     leave inputs as they are (the op runs in its inputs' dtype).
 * A cast is not always a tensor: where it would only be read once, some ops read the input in place
 * and give the cast's values, result dtype and gradients without keeping a copy until backward:
 * add/sub/mul/div and the losses, whose arithmetic is fp32 from any float dtype, skip casts to f32
 * (exact widenings; casts that round are made), and linear under LOWER reads an fp32 input that
 * needs no gradient, rounding it into scratch in forward and again in backward. No cast node is
 * recorded for those inputs.
 * The default table follows PyTorch's CUDA lists for the ops amp has (AMP_POLICY_TABLE_CUDA); the
 * CPU lists are available too (AMP_POLICY_TABLE_CPU). Where amp's default departs from PyTorch's CUDA
 * list, amp_autocast_policy_note(op) says so and why (e.g. mean is FP32 in amp, unlisted in PyTorch).
 *
 * The cast cache. Within the outermost region, an fp32 leaf tensor that requires grad (a parameter)
 * is cast to the region's low dtype once, and the cast is reused by every later op in the region; the
 * cache is emptied when the outermost region exits (and a cast of an earlier step of its context is
 * never reused). Unlike PyTorch (pytorch#65766, pytorch#112583), a cast made while grad mode was off is never
 * reused while it is on: the weight would silently get no gradient. */
#ifndef AMP_AUTOCAST_H
#define AMP_AUTOCAST_H

#include <stdbool.h>
#include <stddef.h>

#include "dtype.h"
#include "ops_list.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum amp_cast_policy {
    AMP_POLICY_NONE = 0,
    AMP_POLICY_LOWER = 1,
    AMP_POLICY_FP32 = 2,
    AMP_POLICY_PROMOTE = 3,
    AMP_POLICY_COUNT
} amp_cast_policy;

typedef enum amp_policy_table { AMP_POLICY_TABLE_CUDA = 0, AMP_POLICY_TABLE_CPU = 1 } amp_policy_table;

/* Enters a region casting to `dtype`: AMP_F16 or AMP_BF16, or AMP_F32 for a region with autocast off
 * (amp_autocast_enter_disabled: ops run in their inputs' dtypes), so that one code path serves every
 * precision; amp_autocast_exit leaves it like any other. Any other dtype is AMP_ERR_UNSUPPORTED_DTYPE
 * and enters nothing; AMP_ERR_INVALID_ARGUMENT past 64 nested regions. */
int amp_autocast_enter(amp_dtype dtype);
/* Enters a nested region with autocast off (torch.autocast(enabled=False)). */
int amp_autocast_enter_disabled(void);
/* Leaves the innermost region. AMP_ERR_INVALID_ARGUMENT when not in one. */
int amp_autocast_exit(void);
/* Whether casting is on now in this thread, and to which dtype (AMP_F32 when off). */
bool amp_autocast_enabled(void);
amp_dtype amp_autocast_dtype(void);
/* Region nesting depth in this thread (enabled and disabled regions both count): 0 between steps.
 * A step ends outside its regions: amp_ctx_reset refuses to run while one is open (amp/tensor.h), so
 * a region never exited is reported at the next step; a program may also assert this is 0. */
int amp_autocast_depth(void);
/* Turns the cast cache on or off for this thread (on by default). */
void amp_autocast_set_cache_enabled(bool enabled);
/* Whether the cast cache is on for this thread. */
bool amp_autocast_cache_enabled(void);
/* Empties this thread's cast cache now. */
void amp_autocast_clear_cache(void);
/* Casts served from the cache / made and stored since the thread started (for tests and reports). */
void amp_autocast_cache_stats(unsigned long long *hits, unsigned long long *stores);
/* Bytes of the low-precision weight copies in this thread's cast cache now (what autocast holds
 * per step besides activations; read it before the outermost region exits, which empties the cache).
 * Casts taken from parameters' cast copies (below) hold no arena memory and are not counted: they are
 * amp_ctx_cast_copy_bytes. */
size_t amp_autocast_cache_bytes(void);
/* Cached casts this thread took from a parameter's cast copy (amp_ctx_keep_cast_copies, amp/tensor.h)
 * as it was, without converting: a cacheable cast (above) of an fp32 parameter whose copy, in the
 * region's dtype, holds the parameter's current version. (A stale copy is cast into instead, not
 * counted here.) The tensor returned is a view of the copy either way, recorded on the tape as the
 * cast (its backward is the cast's). Counted since the thread started. */
unsigned long long amp_autocast_copy_hits(void);

amp_cast_policy amp_autocast_get_policy(amp_op op);
/* Changes one op's policy for the whole process (not thread-safe against running ops: set it at
 * start-up). cast, contiguous, reshape and transpose are fixed at NONE (autocast is built from them).
 * Returns AMP_OK or AMP_ERR_INVALID_ARGUMENT. */
int amp_autocast_set_policy(amp_op op, amp_cast_policy policy);
/* Loads one of the built-in tables (the default is AMP_POLICY_TABLE_CUDA). */
int amp_autocast_load_policy_table(amp_policy_table table);
/* PyTorch's policy for `op` in the given table, and a note when amp's default differs ("" if not). */
amp_cast_policy amp_autocast_pytorch_policy(amp_policy_table table, amp_op op);
const char *amp_autocast_policy_note(amp_op op);
/* "none", "lower", "fp32", "promote". */
const char *amp_cast_policy_name(amp_cast_policy policy);

#ifdef __cplusplus
}
#endif
#endif /* AMP_AUTOCAST_H */
