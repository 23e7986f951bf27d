#include "op_util.h"

#include <stdarg.h>
#include <stdio.h>

#include "../core/parallel.h"
#include "grad_sink_gemm.h"

bool amp_op_input_ok(amp_ctx *ctx, amp_op op, const amp_tensor *x) {
    return ctx && amp_ctx_input_ok(ctx, amp_op_name(op), x);
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

/* ---- amp_grad_chunks_parallel (grad_sink_gemm.h) ---- */

typedef struct chunks_job {
    const amp_grad_chunks *gc;
    float *bufs; /* a chunk per thread where gc's buffer is not the whole gradient */
    int64_t chunk;
    amp_grad_chunk_fn fn;
    const void *arg;
} chunks_job;

static void chunks_range(void *arg, int64_t i0, int64_t i1, int thread_id) {
    const chunks_job *j = arg;
    for (int64_t off = i0; off < i1; off += j->chunk) {
        const int64_t len = i1 - off < j->chunk ? i1 - off : j->chunk;
        float *dst = j->gc->whole ? j->gc->buf + off : j->bufs + (int64_t)thread_id * j->chunk;
        j->fn(j->arg, dst, off, len);
        amp_grad_chunk_put_from(j->gc, dst, off, len);
    }
}

void amp_grad_chunks_parallel(amp_ctx *ctx, amp_tensor *t, int64_t n, int64_t chunk, int64_t min_per_thread,
                              amp_grad_chunk_fn fn, const void *arg) {
    amp_grad_chunks gc;
    amp_grad_chunks_open(ctx, t, n, chunk, &gc);
    const int threads = n / min_per_thread > 1 ? amp_parallel_max_threads() : 1;
    chunks_job job = {&gc, gc.buf, chunk, fn, arg};
    if (gc.buf && !gc.whole && threads > 1) job.bufs = amp_f32_scratch(ctx, (int64_t)threads * chunk);
    if (job.bufs) amp_parallel_range(n, min_per_thread, chunk, chunks_range, &job);
    amp_grad_chunks_close(ctx, t, &gc);
}
