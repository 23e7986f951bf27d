/* Embedding: a gather of weight rows by index. The forward copies rows bit for bit (no arithmetic,
 * so no rounding: the output has the weight's dtype); the backward scatter-adds the output gradient
 * into an fp32 [V, D] buffer, so repeated indices accumulate in fp32, and rounds once into dweight.
 * When dweight exists already (a parameter's gradient, or the tied head's part of it), the buffer
 * is a block of rows at a time instead of all V (the same additions in the same order: the same
 * bits; src/ops/grad_range.h). */
#include <stdlib.h>
#include <string.h>

#include "grad_range.h"
#include "op_util.h"

typedef struct {
    int32_t *indices; /* [count], copied into the arena: the caller's array may change before backward */
    int64_t count;
} embedding_saved;

/* A position of the indices with its row: sorted by row, then position, so each row's gradient
 * takes its positions' rows in position order, as the whole-table pass adds them. */
typedef struct {
    int32_t row;
    int64_t t;
} embedding_use;

static int embedding_use_cmp(const void *a, const void *b) {
    const embedding_use *x = a, *y = b;
    if (x->row != y->row) return x->row < y->row ? -1 : 1;
    return (x->t > y->t) - (x->t < y->t);
}

/* dweight (grad: [V, D], any float dtype) += the scatter-add of g by index, a block of rows at a
 * time: each block's fp32 sums start at 0 and take their positions in order, then are added into
 * grad (one rounding per element; untouched rows add 0, as the whole-table buffer's zeros did). */
static void embedding_backward_rows(amp_ctx *ctx, amp_tensor *grad, const embedding_saved *s, const float *g,
                                    int64_t v, int64_t d) {
    const int64_t rows = d > 0 && d < AMP_GRAD_RANGE_CHUNK ? AMP_GRAD_RANGE_CHUNK / d : 1;
    amp_arena_mark m = amp_scratch_mark(ctx);
    embedding_use *uses = amp_scratch_alloc(ctx, (size_t)(s->count > 0 ? s->count : 1) * sizeof *uses);
    float *buf = amp_f32_scratch(ctx, rows * d), *acc = amp_f32_scratch(ctx, rows * d);
    if (!uses || !buf || !acc) {
        amp_scratch_release(ctx, m);
        return;
    }
    for (int64_t t = 0; t < s->count; t++) uses[t] = (embedding_use){s->indices[t], t};
    if (s->count > 1) qsort(uses, (size_t)s->count, sizeof *uses, embedding_use_cmp);
    int64_t u = 0;
    for (int64_t r0 = 0; r0 < v; r0 += rows) {
        const int64_t r1 = v - r0 < rows ? v : r0 + rows;
        memset(buf, 0, (size_t)((r1 - r0) * d) * sizeof *buf);
        for (; u < s->count && uses[u].row < r1; u++) {
            float *row = buf + (uses[u].row - r0) * d;
            const float *gr = g + uses[u].t * d;
            for (int64_t j = 0; j < d; j++) row[j] += gr[j];
        }
        amp_grad_range_add(grad, acc, buf, r0 * d, (r1 - r0) * d);
    }
    amp_scratch_release(ctx, m);
}

/* saved i[]: V, D */
static void embedding_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *w = node->in[0], *grad;
    const embedding_saved *s = node->saved;
    const int64_t v = node->i[0], d = node->i[1];
    const float *g = amp_grad_out(ctx, node);
    if (g && amp_grad_range_open(ctx, w, true, &grad)) {
        embedding_backward_rows(ctx, grad, s, g, v, d);
        return;
    }
    float *dw = amp_f32_scratch(ctx, v * d);
    if (!g || !dw) return;
    memset(dw, 0, (size_t)(v * d) * sizeof *dw);
    for (int64_t t = 0; t < s->count; t++) {
        float *row = dw + (int64_t)s->indices[t] * d;
        const float *gr = g + t * d;
        for (int64_t j = 0; j < d; j++) row[j] += gr[j];
    }
    amp_grad_accumulate(ctx, w, dw);
}

amp_tensor *amp_embedding(amp_ctx *ctx, amp_tensor *weight, const int32_t *indices, int ndim, const int64_t *shape) {
    const amp_op op = AMP_OP_EMBEDDING;
    if (!amp_op_input_ok(ctx, op, weight) || !amp_autocast_inputs(ctx, op, &weight, 1)) return NULL;
    char sw[64];
    if (weight->ndim != 2)
        return amp_op_fail(ctx, op, "weight %s must be [V, D]", amp_shape_str(weight, sw, sizeof sw));
    if (ndim < 0 || ndim > AMP_MAX_DIMS - 1 || (ndim > 0 && !shape))
        return amp_op_fail(ctx, op, "indices have 0 to %d dimensions, not %d", AMP_MAX_DIMS - 1, ndim);
    int64_t out_shape[AMP_MAX_DIMS], count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] > 0 && count > (INT64_MAX / 16) / shape[i]))
            return amp_op_fail(ctx, op, "bad index dimension %lld", (long long)shape[i]);
        out_shape[i] = shape[i];
        count *= shape[i];
    }
    const int64_t v = weight->shape[0], d = weight->shape[1];
    out_shape[ndim] = d;
    if (count > 0 && !indices) {
        amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "embedding: indices are NULL");
        return NULL;
    }
    for (int64_t t = 0; t < count; t++)
        if (indices[t] < 0 || indices[t] >= v)
            return amp_op_fail(ctx, op, "index %d (position %lld) is out of range [0, %lld)", (int)indices[t],
                               (long long)t, (long long)v);
    if (!(weight = amp_contiguous(ctx, weight))) return NULL;
    amp_tensor *out = amp_ctx_new_tensor(ctx, weight->dtype, ndim + 1, out_shape, true);
    if (!out) return NULL;
    const size_t row_bytes = (size_t)d * amp_dtype_size(weight->dtype);
    for (int64_t t = 0; t < count; t++)
        if (row_bytes)
            memcpy((char *)out->data + (size_t)t * row_bytes,
                   (const char *)weight->data + (size_t)indices[t] * row_bytes, row_bytes);
    amp_node *node = amp_autograd_record(ctx, op, weight->dtype, out, &weight, 1, embedding_backward);
    if (node) {
        embedding_saved *s = amp_ctx_alloc(ctx, sizeof *s);
        int32_t *copy = amp_ctx_alloc(ctx, (size_t)(count > 0 ? count : 1) * sizeof *copy);
        if (!s || !copy) return NULL;
        if (count > 0) memcpy(copy, indices, (size_t)count * sizeof *copy);
        s->indices = copy, s->count = count;
        node->saved = s;
        node->i[0] = v, node->i[1] = d;
    }
    return out;
}
