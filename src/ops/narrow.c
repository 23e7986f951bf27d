/* amp_narrow_rows: the first rows of a tensor as a view (a tied output head over a padded embedding
 * table reads the table's first V rows of Vp). Recorded as AMP_OP_RESHAPE: like a reshape it is the
 * same elements in the same row-major order, here a prefix of them, and its backward needs no tensor. */
#include <string.h>

#include "grad_range.h"
#include "grad_sink_gemm.h"
#include "op_util.h"

typedef struct narrow_job {
    const float *g; /* the view's gradient, [rows * inner] */
    int64_t n;      /* rows * inner: the elements the view covers */
} narrow_job;

/* amp_grad_chunk_fn: x's gradient is the view's on its first n elements and zero past them */
static void narrow_chunk(const void *arg, float *dst, int64_t off, int64_t len) {
    const narrow_job *j = arg;
    for (int64_t i = 0; i < len; i++) dst[i] = off + i < j->n ? j->g[off + i] : 0.0f;
}

/* From this many values per thread the gradient's pass is split between threads. */
enum { NARROW_CHUNK = 16384, NARROW_MIN_PER_THREAD = 65536 };

/* x's gradient in fp16/bf16 (a tied head over bf16 parameters): the view's gradient g (n values, any
 * dtype, contiguous) then zeros are added into it chunk by chunk, with no fp32 copy of either whole. */
static void narrow_backward_lowp(amp_ctx *ctx, amp_tensor *grad, const amp_tensor *g, int64_t n) {
    const int64_t numel = amp_tensor_numel(grad), chunk = AMP_GRAD_RANGE_CHUNK;
    const size_t gs = amp_dtype_size(g->dtype);
    amp_arena_mark m = amp_scratch_mark(ctx);
    float *acc = amp_f32_scratch(ctx, chunk), *add = amp_f32_scratch(ctx, chunk);
    for (int64_t at = 0; acc && add && at < numel; at += chunk) {
        const int64_t len = numel - at < chunk ? numel - at : chunk;
        const int64_t have = at >= n ? 0 : n - at < len ? n - at : len;
        if (have) amp_convert(add, AMP_F32, (const unsigned char *)g->data + (size_t)at * gs, g->dtype, (size_t)have);
        if (have < len) memset(add + have, 0, (size_t)(len - have) * sizeof *add);
        amp_grad_range_add(grad, acc, add, at, len);
    }
    amp_scratch_release(ctx, m);
}

static void narrow_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0], *grad;
    const amp_tensor *g = node->out->grad;
    if (g && g->data && amp_tensor_is_contiguous(g) && amp_grad_range_open(ctx, x, false, &grad)) {
        narrow_backward_lowp(ctx, grad, g, amp_tensor_numel(node->out));
        return;
    }
    narrow_job job = {amp_grad_out(ctx, node), amp_tensor_numel(node->out)};
    if (!job.g) return;
    amp_grad_chunks_parallel(ctx, x, amp_tensor_numel(x), NARROW_CHUNK, NARROW_MIN_PER_THREAD, narrow_chunk, &job);
}

amp_tensor *amp_narrow_rows(amp_ctx *ctx, amp_tensor *x, int64_t rows) {
    if (!amp_op_input_ok(ctx, AMP_OP_RESHAPE, x)) return NULL;
    if (x->ndim < 1 || rows < 0 || rows > x->shape[0]) {
        char sh[64];
        return amp_op_fail(ctx, AMP_OP_RESHAPE, "narrow_rows: %lld rows of %s", (long long)rows,
                           amp_shape_str(x, sh, sizeof sh));
    }
    amp_tensor *src = amp_contiguous(ctx, x);
    if (!src) return NULL;
    int64_t shape[AMP_MAX_DIMS];
    for (int d = 0; d < src->ndim; d++) shape[d] = src->shape[d];
    shape[0] = rows;
    amp_tensor *out = amp_ctx_new_tensor(ctx, src->dtype, src->ndim, shape, false);
    if (!out) return NULL;
    out->data = src->data; /* a view: the first rows * inner elements */
    amp_node *node = amp_autograd_record(ctx, AMP_OP_RESHAPE, src->dtype, out, &src, 1, narrow_backward);
    if (node) node->prefix_view = true;
    return out;
}
