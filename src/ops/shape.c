/* Shape ops: contiguous, reshape/flatten (views), transpose (a strided view), concat. The cast op is
 * src/autocast/cast.c, which autocast inserts below every op. */
#include <string.h>

#include "amp/formats.h"
#include "op_util.h"

/* The backward of an op whose output's gradient is its input's, unchanged (a contiguous copy, a
 * reshape view): the gradient's memory is handed over when it can be, else added. */
static void pass_backward(amp_ctx *ctx, amp_node *node) {
    if (!amp_grad_hand_over(ctx, node)) amp_grad_accumulate_grad(ctx, node->in[0], node->out->grad);
}

/* ---- contiguous ---- */

amp_tensor *amp_contiguous(amp_ctx *ctx, amp_tensor *x) {
    if (!amp_op_input_ok(ctx, AMP_OP_CONTIGUOUS, x)) return NULL;
    if (amp_tensor_is_contiguous(x)) return x;
    amp_tensor *out = amp_ctx_new_tensor(ctx, x->dtype, x->ndim, x->shape, true);
    if (!out) return NULL;
    amp_tensor_read(x, out->data, x->dtype);
    amp_autograd_record(ctx, AMP_OP_CONTIGUOUS, x->dtype, out, &x, 1, pass_backward);
    return out;
}

/* ---- reshape ---- */

amp_tensor *amp_reshape(amp_ctx *ctx, amp_tensor *x, int ndim, const int64_t *shape) {
    if (!amp_op_input_ok(ctx, AMP_OP_RESHAPE, x)) return NULL;
    if (ndim < 0 || ndim > AMP_MAX_DIMS || (ndim > 0 && !shape))
        return amp_op_fail(ctx, AMP_OP_RESHAPE, "%d dimensions (at most %d)", ndim, AMP_MAX_DIMS);
    int64_t resolved[AMP_MAX_DIMS], known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        resolved[i] = shape[i];
        if (shape[i] == -1) {
            if (infer >= 0) return amp_op_fail(ctx, AMP_OP_RESHAPE, "more than one -1 in the shape");
            infer = i;
        } else if (shape[i] < 0) {
            return amp_op_fail(ctx, AMP_OP_RESHAPE, "negative dimension %lld", (long long)shape[i]);
        } else {
            known *= shape[i];
        }
    }
    const int64_t n = amp_tensor_numel(x);
    if (infer >= 0) {
        if (known == 0 || n % known != 0)
            return amp_op_fail(ctx, AMP_OP_RESHAPE, "cannot infer -1: %lld elements into blocks of %lld", (long long)n,
                               (long long)known);
        resolved[infer] = n / known;
        known = n;
    }
    if (known != n)
        return amp_op_fail(ctx, AMP_OP_RESHAPE, "%lld elements do not fit a shape of %lld", (long long)n,
                           (long long)known);
    amp_tensor *src = amp_contiguous(ctx, x);
    if (!src) return NULL;
    amp_tensor *out = amp_ctx_new_tensor(ctx, src->dtype, ndim, resolved, false);
    if (!out) return NULL;
    out->data = src->data; /* a view: same elements, same row-major order */
    amp_autograd_record(ctx, AMP_OP_RESHAPE, src->dtype, out, &src, 1, pass_backward);
    return out;
}

amp_tensor *amp_flatten(amp_ctx *ctx, amp_tensor *x, int start_dim) {
    if (!amp_op_input_ok(ctx, AMP_OP_RESHAPE, x)) return NULL;
    if (x->ndim == 0) return amp_reshape(ctx, x, 1, (const int64_t[]){1});
    int d = amp_op_dim(ctx, AMP_OP_RESHAPE, x, start_dim);
    if (d < 0) return NULL;
    int64_t shape[AMP_MAX_DIMS];
    for (int i = 0; i < d; i++) shape[i] = x->shape[i];
    shape[d] = 1;
    for (int i = d; i < x->ndim; i++) shape[d] *= x->shape[i];
    return amp_reshape(ctx, x, d + 1, shape);
}

/* ---- transpose ---- */

/* Adds g (laid out in y's logical order, y = x with dims a and b swapped) into dx in x's order. */
static void transpose_scatter(const amp_tensor *y, int a, int b, const float *g, float *dx) {
    const int nd = y->ndim;
    int64_t xstride[AMP_MAX_DIMS], xshape[AMP_MAX_DIMS], idx[AMP_MAX_DIMS] = {0};
    for (int i = 0; i < nd; i++) xshape[i] = y->shape[i];
    xshape[a] = y->shape[b];
    xshape[b] = y->shape[a];
    amp_contiguous_strides(nd, xshape, xstride);
    const int64_t n = amp_tensor_numel(y);
    /* When the last dim is not one of the swapped two, a row of y along it is a contiguous run of x
     * too: walk rows (the odometer over the outer dims) and add each run. Every dx element gets
     * exactly one addition either way. */
    const int inner_dims = a != nd - 1 && b != nd - 1 ? 1 : 0;
    const int64_t run = inner_dims ? y->shape[nd - 1] : 1;
    if (run == 0) return;
    for (int64_t i = 0; i < n; i += run) {
        /* idx: y's coordinates of element i; x's coordinates are idx with a and b swapped */
        int64_t off = 0;
        for (int d = 0; d < nd; d++) off += idx[d] * xstride[d == a ? b : d == b ? a : d];
        for (int64_t j = 0; j < run; j++) dx[off + j] += g[i + j];
        for (int d = nd - 1 - inner_dims; d >= 0; d--) {
            if (++idx[d] < y->shape[d]) break;
            idx[d] = 0;
        }
    }
}

static void transpose_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0];
    float *dx = amp_f32_scratch(ctx, amp_tensor_numel(x));
    if (!dx) return;
    memset(dx, 0, (size_t)amp_tensor_numel(x) * sizeof *dx);
    transpose_scatter(node->out, (int)node->i[0], (int)node->i[1], amp_grad_out(ctx, node), dx);
    amp_grad_accumulate(ctx, x, dx);
}

amp_tensor *amp_transpose(amp_ctx *ctx, amp_tensor *x, int dim0, int dim1) {
    if (!amp_op_input_ok(ctx, AMP_OP_TRANSPOSE, x)) return NULL;
    int a = amp_op_dim(ctx, AMP_OP_TRANSPOSE, x, dim0), b = amp_op_dim(ctx, AMP_OP_TRANSPOSE, x, dim1);
    if (a < 0 || b < 0) return NULL;
    amp_tensor *out = amp_ctx_new_tensor(ctx, x->dtype, x->ndim, x->shape, false);
    if (!out) return NULL;
    memcpy(out->stride, x->stride, sizeof out->stride);
    out->shape[a] = x->shape[b], out->shape[b] = x->shape[a];
    out->stride[a] = x->stride[b], out->stride[b] = x->stride[a];
    out->data = x->data;
    amp_node *node = amp_autograd_record(ctx, AMP_OP_TRANSPOSE, x->dtype, out, &x, 1, transpose_backward);
    if (node) node->i[0] = a, node->i[1] = b;
    return out;
}

/* ---- concat ---- */

/* Views a tensor of `shape` as [outer, dim_size * inner] around `dim`. */
static void split_at(const int64_t *shape, int ndim, int dim, int64_t *outer, int64_t *inner) {
    *outer = 1, *inner = 1;
    for (int i = 0; i < dim; i++) *outer *= shape[i];
    for (int i = dim + 1; i < ndim; i++) *inner *= shape[i];
}

static void concat_backward(amp_ctx *ctx, amp_node *node) {
    const float *g = amp_grad_out(ctx, node);
    const int dim = (int)node->i[0];
    int64_t outer, inner, offset = 0;
    split_at(node->out->shape, node->out->ndim, dim, &outer, &inner);
    const int64_t out_row = node->out->shape[dim] * inner;
    for (int t = 0; t < node->n_in; t++) {
        amp_tensor *x = node->in[t];
        const int64_t row = x->shape[dim] * inner;
        if (x->requires_grad) {
            float *dx = amp_f32_scratch(ctx, outer * row);
            if (!dx) return;
            for (int64_t o = 0; o < outer; o++) memcpy(dx + o * row, g + o * out_row + offset, (size_t)row * sizeof *dx);
            amp_grad_accumulate(ctx, x, dx);
        }
        offset += row;
    }
}

amp_tensor *amp_concat(amp_ctx *ctx, amp_tensor *const *xs, int n, int dim) {
    if (!ctx) return NULL;
    if (!xs || n < 1 || n > AMP_NODE_MAX_INPUTS)
        return amp_op_fail(ctx, AMP_OP_CONCAT, "needs 1 to %d tensors, got %d", AMP_NODE_MAX_INPUTS, n);
    for (int t = 0; t < n; t++)
        if (!amp_op_input_ok(ctx, AMP_OP_CONCAT, xs[t])) return NULL;
    int d = amp_op_dim(ctx, AMP_OP_CONCAT, xs[0], dim);
    if (d < 0) return NULL;
    amp_dtype dtype = xs[0]->dtype;
    int64_t shape[AMP_MAX_DIMS];
    memcpy(shape, xs[0]->shape, sizeof shape);
    for (int t = 1; t < n; t++) {
        if (xs[t]->ndim != xs[0]->ndim) return amp_op_fail(ctx, AMP_OP_CONCAT, "tensors differ in rank");
        for (int i = 0; i < xs[0]->ndim; i++)
            if (i != d && xs[t]->shape[i] != xs[0]->shape[i])
                return amp_op_fail(ctx, AMP_OP_CONCAT, "tensor %d differs in dimension %d (%lld vs %lld)", t, i,
                                   (long long)xs[t]->shape[i], (long long)xs[0]->shape[i]);
        shape[d] += xs[t]->shape[d];
        dtype = amp_promote(dtype, xs[t]->dtype);
    }
    amp_tensor *in[AMP_NODE_MAX_INPUTS];
    for (int t = 0; t < n; t++) in[t] = xs[t];
    if (!amp_autocast_inputs(ctx, AMP_OP_CONCAT, in, n)) return NULL;
    dtype = in[0]->dtype;
    for (int t = 1; t < n; t++) dtype = amp_promote(dtype, in[t]->dtype);
    for (int t = 0; t < n; t++)
        if (!(in[t] = amp_op_as(ctx, in[t], dtype))) return NULL;
    amp_tensor *out = amp_ctx_new_tensor(ctx, dtype, xs[0]->ndim, shape, true);
    if (!out) return NULL;
    int64_t outer, inner, offset = 0;
    split_at(shape, out->ndim, d, &outer, &inner);
    const size_t es = amp_dtype_size(dtype);
    const int64_t out_row = shape[d] * inner;
    amp_arena_mark m = amp_scratch_mark(ctx);
    for (int t = 0; t < n; t++) {
        const int64_t row = in[t]->shape[d] * inner;
        const unsigned char *src = in[t]->data;
        amp_tensor *c = in[t];
        if (!amp_tensor_is_contiguous(c)) {
            void *tmp = amp_scratch_alloc(ctx, (size_t)(outer * row) * es);
            if (!tmp) {
                amp_scratch_release(ctx, m);
                return NULL;
            }
            amp_tensor_read(c, tmp, dtype);
            src = tmp;
        }
        for (int64_t o = 0; o < outer; o++)
            memcpy((unsigned char *)out->data + (size_t)(o * out_row + offset) * es, src + (size_t)(o * row) * es,
                   (size_t)row * es);
        offset += row;
    }
    amp_scratch_release(ctx, m);
    amp_node *node = amp_autograd_record(ctx, AMP_OP_CONCAT, dtype, out, in, n, concat_backward);
    if (node) node->i[0] = d;
    return out;
}
