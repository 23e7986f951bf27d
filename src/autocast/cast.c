/* The cast op: x's values in another float dtype, recorded on the tape; its backward hands the
 * gradient back to x in x's dtype.
 *
 * It lives in autocast/, not ops/, because autocast inserts it: every op consults autocast on entry
 * (src/ops/op_util.h), so autocast calls no op, and the cast needs nothing above the tensor layer
 * (a conversion and a tape node). Its input checks are ops' (amp_ctx_input_ok). */
#include "amp/dtype.h"
#include "amp/formats.h"
#include "amp/ops.h"
#include "../core/accumulate.h"
#include "../core/parallel.h"
#include "../tensor/autograd.h"
#include "../tensor/ctx_internal.h"
#include "autocast_internal.h"

static bool is_float(amp_dtype dtype) { return dtype == AMP_F32 || dtype == AMP_F16 || dtype == AMP_BF16; }

/* A 16-bit gradient g decoded into an fp32 x's gradient through a sink (amp_grad_sink, whose
 * out_dtype is then fp32: its rounding is a copy): a new gradient takes the decoded values straight
 * (one conversion pass, split between threads, where amp_grad_accumulate_grad decoded into scratch
 * and copied the scratch into the new gradient: at GPT-2's tied head, 38M values, two passes of
 * 154 MB less); an existing one (or a parameter's, through master_of) adds them chunk by chunk from
 * the stack instead of from a whole fp32 copy. Each element: its exact decode, stored or added once
 * (0 + v into an empty parameter gradient), which are amp_grad_accumulate_grad's bits. */
enum { DECODE_CHUNK = 4096, DECODE_MIN_PER_THREAD = 65536 };

typedef struct decode_add_job {
    float *acc;
    const void *g;
    amp_dtype dt;
    bool store;
} decode_add_job;

static void decode_add_range(void *arg, int64_t i0, int64_t i1, int thread_id) {
    (void)thread_id;
    const decode_add_job *j = arg;
    float buf[DECODE_CHUNK];
    const size_t es = amp_dtype_size(j->dt);
    for (int64_t at = i0; at < i1; at += DECODE_CHUNK) {
        const int64_t len = i1 - at < DECODE_CHUNK ? i1 - at : DECODE_CHUNK;
        amp_convert(buf, AMP_F32, (const unsigned char *)j->g + (size_t)at * es, j->dt, (size_t)len);
        amp_acc_f32(j->acc + at, buf, len, j->store);
    }
}

/* True when g went into x's gradient this way; false (nothing done): amp_grad_accumulate_grad. */
static bool decode_into_grad(amp_ctx *ctx, amp_tensor *x, const amp_tensor *g) {
    const int64_t n = amp_tensor_numel(x);
    if (!x->requires_grad || x->dtype != AMP_F32 || !g || !g->data || (g->dtype != AMP_F16 && g->dtype != AMP_BF16) ||
        !amp_tensor_is_contiguous(g) || amp_tensor_numel(g) != n)
        return false;
    amp_grad_sink s;
    if (!amp_grad_sink_open(ctx, x, &s)) return false;
    if (s.out_dtype == AMP_F32 && s.out && !s.acc) {
        amp_convert(s.out, AMP_F32, g->data, g->dtype, (size_t)n);
    } else if (s.out_dtype == AMP_F32 && s.acc && !s.out) {
        decode_add_job job = {s.acc, g->data, g->dtype, s.acc_store};
        amp_parallel_range(n, DECODE_MIN_PER_THREAD, DECODE_CHUNK, decode_add_range, &job);
    } else { /* no such sink for an fp32 x (amp_grad_sink_open): refuse rather than guess */
        amp_ctx_fail(ctx, AMP_ERR_STATE, "%s: unexpected gradient sink", amp_op_name(AMP_OP_CAST));
    }
    amp_grad_sink_close(ctx, &s);
    return true;
}

static void cast_backward(amp_ctx *ctx, amp_node *node) {
    if (amp_grad_hand_over(ctx, node)) return;
    if (!decode_into_grad(ctx, node->in[0], node->out->grad))
        amp_grad_accumulate_grad(ctx, node->in[0], node->out->grad);
}

amp_tensor *amp_autocast_cast_from_copy(amp_ctx *ctx, amp_tensor *x, amp_dtype dtype, const void *copy) {
    amp_tensor *out = amp_ctx_new_tensor(ctx, dtype, x->ndim, x->shape, false);
    if (!out) return NULL;
    out->data = (void *)copy; /* read only: a cast's result is never written in place */
    amp_autograd_record(ctx, AMP_OP_CAST, dtype, out, &x, 1, cast_backward);
    return out;
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
