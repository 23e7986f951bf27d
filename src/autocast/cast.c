/* The cast op: x's values in another float dtype, recorded on the tape; its backward hands the
 * gradient back to x in x's dtype.
 *
 * It lives in autocast/, not ops/, because autocast inserts it: every op consults autocast on entry
 * (src/ops/op_util.h), so autocast calls no op, and the cast needs nothing above the tensor layer
 * (a conversion and a tape node). Its input checks are ops' (amp_ctx_input_ok). */
#include "amp/dtype.h"
#include "amp/ops.h"
#include "../tensor/autograd.h"

static bool is_float(amp_dtype dtype) { return dtype == AMP_F32 || dtype == AMP_F16 || dtype == AMP_BF16; }

static void cast_backward(amp_ctx *ctx, amp_node *node) {
    if (!amp_grad_hand_over(ctx, node)) amp_grad_accumulate_grad(ctx, node->in[0], node->out->grad);
}

amp_tensor *amp_cast(amp_ctx *ctx, amp_tensor *x, amp_dtype dtype) {
    if (!ctx || !amp_ctx_input_ok(ctx, amp_op_name(AMP_OP_CAST), x)) return NULL;
    if (!is_float(dtype)) {
        amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "%s: target dtype must be f32, f16 or bf16, not %s",
                     amp_op_name(AMP_OP_CAST), amp_dtype_name(dtype));
        return NULL;
    }
    amp_tensor *out = amp_ctx_new_tensor(ctx, dtype, x->ndim, x->shape, true);
    if (!out) return NULL;
    if (amp_tensor_read(x, out->data, dtype) != AMP_OK) {
        if (ctx->status == AMP_OK)
            amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "%s: cannot convert", amp_op_name(AMP_OP_CAST));
        return NULL;
    }
    amp_autograd_record(ctx, AMP_OP_CAST, dtype, out, &x, 1, cast_backward);
    return out;
}
