#include "op_util.h"

#include <stdarg.h>
#include <stdio.h>

bool amp_op_input_ok(amp_ctx *ctx, amp_op op, const amp_tensor *x) {
    if (!ctx) return false;
    if (!x) {
        if (ctx->status == AMP_OK) amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "%s: an input is NULL", amp_op_name(op));
        return false;
    }
    if (x->dtype != AMP_F32 && x->dtype != AMP_F16 && x->dtype != AMP_BF16) {
        amp_ctx_fail(ctx, AMP_ERR_UNSUPPORTED_DTYPE, "%s: inputs must be f32, f16 or bf16, not %s", amp_op_name(op),
                     amp_dtype_name(x->dtype));
        return false;
    }
    return ctx->status == AMP_OK;
}

amp_dtype amp_promote(amp_dtype a, amp_dtype b) { return a == b ? a : AMP_F32; }

int amp_op_dim(amp_ctx *ctx, amp_op op, const amp_tensor *x, int dim) {
    int d = dim < 0 ? dim + x->ndim : dim;
    if (d < 0 || d >= x->ndim) {
        amp_op_fail(ctx, op, "dim %d is out of range for a %d-dimensional tensor", dim, x->ndim);
        return -1;
    }
    return d;
}

amp_tensor *amp_op_fail(amp_ctx *ctx, amp_op op, const char *fmt, ...) {
    if (ctx->status != AMP_OK) return NULL;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "%s: %s", amp_op_name(op), msg);
    return NULL;
}

amp_tensor *amp_op_as(amp_ctx *ctx, amp_tensor *x, amp_dtype dtype) {
    return (x && x->dtype != dtype) ? amp_cast(ctx, x, dtype) : x;
}
