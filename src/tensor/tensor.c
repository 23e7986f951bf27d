/* Arena tensors: creation, shape helpers, element access (views included). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "amp/formats.h"
#include "ctx_internal.h"

const char *amp_op_name(amp_op op) {
    static const char *const names[AMP_OP_COUNT] = {
#define AMP_OP_NAME_(e, name) [e] = name,
        AMP_OP_LIST(AMP_OP_NAME_)
#undef AMP_OP_NAME_
    };
    return ((unsigned)op < AMP_OP_COUNT) ? names[op] : "invalid";
}

int64_t amp_shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

void amp_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i];
    }
}

bool amp_same_shape(const amp_tensor *a, const amp_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

const char *amp_shape_str(const amp_tensor *t, char *buf, size_t size) {
    size_t off = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < t->ndim && off < size; i++)
        off += (size_t)snprintf(buf + off, size - off, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (off < size) snprintf(buf + off, size - off, "]");
    return buf;
}

int64_t amp_tensor_numel(const amp_tensor *t) { return t ? amp_shape_numel(t->ndim, t->shape) : 0; }

bool amp_tensor_is_contiguous(const amp_tensor *t) {
    if (!t) return false;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

bool amp_shape_valid(amp_ctx *ctx, const char *what, amp_dtype dtype, int ndim, const int64_t *shape) {
    if ((unsigned)dtype >= AMP_DTYPE_COUNT) {
        amp_ctx_fail(ctx, AMP_ERR_UNSUPPORTED_DTYPE, "%s: invalid dtype %d", what, (int)dtype);
        return false;
    }
    if (ndim < 0 || ndim > AMP_MAX_DIMS || (ndim > 0 && !shape)) {
        amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "%s: a tensor has 0 to %d dimensions, not %d", what, AMP_MAX_DIMS,
                     ndim);
        return false;
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] > 0 && n > (INT64_MAX / 16) / shape[i])) {
            amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "%s: bad tensor dimension %lld", what, (long long)shape[i]);
            return false;
        }
        n *= shape[i];
    }
    return true;
}

bool amp_ctx_input_ok(amp_ctx *ctx, const char *what, const amp_tensor *x) {
    if (!x) {
        if (ctx->status == AMP_OK) amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "%s: an input is NULL", what);
        return false;
    }
    /* the lifetime checks (amp/tensor.h): a tensor of an earlier step, a parameter not allocated */
    if (amp_tensor_stale(ctx, x)) {
        amp_ctx_fail_stale(ctx, what, NULL, x);
        return false;
    }
    if (!x->data) {
        amp_ctx_fail_unallocated(ctx, what, x);
        return false;
    }
    if (x->dtype != AMP_F32 && x->dtype != AMP_F16 && x->dtype != AMP_BF16) {
        amp_ctx_fail(ctx, AMP_ERR_UNSUPPORTED_DTYPE, "%s: inputs must be f32, f16 or bf16, not %s", what,
                     amp_dtype_name(x->dtype));
        return false;
    }
    return ctx->status == AMP_OK;
}

void amp_tensor_init_leaf(amp_tensor *t, amp_dtype dtype, int ndim, const int64_t *shape) {
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    amp_contiguous_strides(ndim, t->shape, t->stride);
    t->is_leaf = true;
    t->compute_dtype = dtype;
}

amp_tensor *amp_ctx_new_tensor(amp_ctx *ctx, amp_dtype dtype, int ndim, const int64_t *shape, bool with_data) {
    if (!amp_shape_valid(ctx, "tensor", dtype, ndim, shape)) return NULL;
    /* the header in this step's header arena (ctx_internal.h), the data in the arena */
    amp_tensor *t = amp_arena_alloc(&ctx->headers[ctx->generation & 1], sizeof *t);
    if (!t) {
        amp_ctx_fail(ctx, AMP_ERR_OUT_OF_MEMORY, "out of memory: the tensor headers could not grow");
        return NULL;
    }
    amp_tensor_init_leaf(t, dtype, ndim, shape);
    t->generation = ctx->generation;
    if (with_data) {
        t->data = amp_ctx_alloc(ctx, (size_t)amp_shape_numel(ndim, shape) * amp_dtype_size(dtype));
        if (!t->data) return NULL;
    }
    return t;
}

amp_tensor *amp_tensor_new(amp_ctx *ctx, amp_dtype dtype, int ndim, const int64_t *shape) {
    return ctx ? amp_ctx_new_tensor(ctx, dtype, ndim, shape, true) : NULL;
}

amp_tensor *amp_tensor_zeros(amp_ctx *ctx, amp_dtype dtype, int ndim, const int64_t *shape) {
    amp_tensor *t = amp_tensor_new(ctx, dtype, ndim, shape);
    if (t) memset(t->data, 0, (size_t)amp_tensor_numel(t) * amp_dtype_size(dtype));
    return t;
}

amp_tensor *amp_tensor_from(amp_ctx *ctx, amp_dtype dtype, int ndim, const int64_t *shape, const void *data,
                            amp_dtype src_dtype) {
    amp_tensor *t = amp_tensor_new(ctx, dtype, ndim, shape);
    if (!t) return NULL;
    int st = amp_convert(t->data, dtype, data, src_dtype, (size_t)amp_tensor_numel(t));
    if (st != AMP_OK) {
        amp_ctx_fail(ctx, st, "amp_tensor_from: %s", amp_status_str(st));
        return NULL;
    }
    return t;
}

amp_tensor *amp_tensor_scalar(amp_ctx *ctx, amp_dtype dtype, float value) {
    return amp_tensor_from(ctx, dtype, 0, NULL, &value, AMP_F32);
}

void amp_tensor_set_requires_grad(amp_tensor *t, bool requires_grad) {
    if (t && t->is_leaf) t->requires_grad = requires_grad;
}

void amp_tensor_retain_grad(amp_tensor *t) {
    if (t && !t->is_leaf) t->retains_grad = true;
}

/* Byte offset of logical (row-major) element i in a possibly strided tensor. */
static int64_t element_offset(const amp_tensor *t, int64_t i) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t idx = i % t->shape[d];
        i /= t->shape[d];
        off += idx * t->stride[d];
    }
    return off;
}

int amp_tensor_get_checked(const amp_tensor *t, int64_t i, float *out) {
    if (out) *out = NAN;
    if (!t || !out || !t->data) return AMP_ERR_NULL_POINTER;
    if (i < 0 || i >= amp_tensor_numel(t)) return AMP_ERR_INVALID_ARGUMENT;
    const size_t es = amp_dtype_size(t->dtype);
    return amp_convert(out, AMP_F32, (const unsigned char *)t->data + element_offset(t, i) * (int64_t)es, t->dtype, 1);
}

float amp_tensor_get(const amp_tensor *t, int64_t i) {
    float v;
    return amp_tensor_get_checked(t, i, &v) == AMP_OK ? v : NAN;
}

int amp_tensor_read(const amp_tensor *t, void *dst, amp_dtype dst_dtype) {
    if (!t || !dst) return AMP_ERR_NULL_POINTER;
    const int64_t n = amp_tensor_numel(t);
    if (amp_tensor_is_contiguous(t)) return amp_convert(dst, dst_dtype, t->data, t->dtype, (size_t)n);
    const size_t es = amp_dtype_size(t->dtype), ds = amp_dtype_size(dst_dtype);
    if (ds == 0) return AMP_ERR_UNSUPPORTED_DTYPE;
    /* Row by row along the last dimension: one conversion call per row when its elements are
     * adjacent (the common view: a transpose of outer dims, a column slice), element by element
     * otherwise. Conversions are elementwise, so the bits are those of one call per element. */
    const int64_t inner = t->shape[t->ndim - 1], step = t->stride[t->ndim - 1];
    for (int64_t i = 0; i < n; i += inner) {
        const unsigned char *src = (const unsigned char *)t->data + element_offset(t, i) * (int64_t)es;
        unsigned char *out = (unsigned char *)dst + i * (int64_t)ds;
        for (int64_t j = 0; j < inner; j += step == 1 ? inner : 1) {
            const int64_t len = step == 1 ? inner : 1;
            int st = amp_convert(out + j * (int64_t)ds, dst_dtype, src + j * step * (int64_t)es, t->dtype, (size_t)len);
            if (st != AMP_OK) return st;
        }
    }
    return AMP_OK;
}

int amp_tensor_write(amp_tensor *t, const void *src, amp_dtype src_dtype) {
    if (!t || !src) return AMP_ERR_NULL_POINTER;
    const int64_t n = amp_tensor_numel(t);
    t->version++; /* before any element changes: a failure part way has changed some */
    if (amp_tensor_is_contiguous(t)) return amp_convert(t->data, t->dtype, src, src_dtype, (size_t)n);
    const size_t es = amp_dtype_size(t->dtype), ss = amp_dtype_size(src_dtype);
    if (ss == 0) return AMP_ERR_UNSUPPORTED_DTYPE;
    const int64_t inner = t->shape[t->ndim - 1], step = t->stride[t->ndim - 1]; /* as amp_tensor_read */
    for (int64_t i = 0; i < n; i += inner) {
        unsigned char *dst = (unsigned char *)t->data + element_offset(t, i) * (int64_t)es;
        const unsigned char *in = (const unsigned char *)src + i * (int64_t)ss;
        for (int64_t j = 0; j < inner; j += step == 1 ? inner : 1) {
            const int64_t len = step == 1 ? inner : 1;
            int st = amp_convert(dst + j * step * (int64_t)es, t->dtype, in + j * (int64_t)ss, src_dtype, (size_t)len);
            if (st != AMP_OK) return st;
        }
    }
    return AMP_OK;
}
