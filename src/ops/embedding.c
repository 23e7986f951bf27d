/* Embedding: a gather of weight rows by index. The forward copies rows bit for bit (no arithmetic,
 * so no rounding: the output has the weight's dtype); the backward scatter-adds the output gradient
 * into an fp32 [V, D] buffer, so repeated indices accumulate in fp32, and rounds once into dweight.
 * When dweight exists already (a parameter's gradient, or the tied head's part of it), the buffer
 * is a block of rows at a time instead of all V (the same additions in the same order: the same
 * bits; src/ops/grad_range.h). */
#include <stdlib.h>
#include <string.h>

#include "../core/parallel.h"
#include "../kernels/elem_kernels.h"
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

/* An fp32 dweight's block of rows [r0, r1) that no index reads: the whole-table pass added +0 to each of
 * its elements, which changes only a -0 (to +0) or a signalling NaN (quieted); the block is read to
 * find either (and a NaN of any kind, to be safe), and only then gets the adds. GPT-2's table is 38M
 * values of which a batch touches a few hundred rows: one read instead of a read and a write of
 * 154 MB per step. Returns the block's absmax_bits after (kernels/elem_kernels.h). */
static uint32_t untouched_rows(const amp_elem_kernels *ek, float *g, int64_t n) {
    uint32_t special = 0;
    const uint32_t *u = (const uint32_t *)(const void *)g;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) /* blocks of 16 with a fixed count: what gcc's -O2 vectorizer takes */
        for (int q = 0; q < 16; q++) special |= u[i + q] == 0x80000000u;
    for (; i < n; i++) special |= u[i] == 0x80000000u;
    const uint32_t m = n > 0 ? ek->absmax_bits(g, (size_t)n) : 0;
    if (!special && m <= 0x7f800000u) return m;
    for (int64_t j = 0; j < n; j++) g[j] += 0.0f; /* amp_acc_f32's add of a zero (no -ffast-math: kept) */
    return n > 0 ? ek->absmax_bits(g, (size_t)n) : 0;
}

typedef struct untouched_job {
    const amp_elem_kernels *ek;
    float *grad;       /* [V, D] fp32 */
    const bool *used;  /* per block: some index reads it */
    uint32_t *absmax;  /* per thread */
    int64_t rows, v, d;
} untouched_job;

static void untouched_range(void *arg, int64_t b0, int64_t b1, int thread_id) {
    const untouched_job *j = arg;
    uint32_t m = j->absmax[thread_id];
    for (int64_t b = b0; b < b1; b++) {
        if (j->used[b]) continue;
        const int64_t r0 = b * j->rows, r1 = j->v - r0 < j->rows ? j->v : r0 + j->rows;
        const uint32_t bm = untouched_rows(j->ek, j->grad + r0 * j->d, (r1 - r0) * j->d);
        m = bm > m ? bm : m;
    }
    j->absmax[thread_id] = m;
}

/* dweight (grad: [V, D], any float dtype) += the scatter-add of g by index, a block of rows at a
 * time: each block's fp32 sums start at 0 and take their positions in order, then are added into
 * grad (one rounding per element; untouched rows add 0, as the whole-table buffer's zeros did; fp32
 * ones only where that changes a bit: untouched_rows). An fp32 dweight's largest |value| comes out
 * of the same passes, so with the backward check on (amp/tensor.h) the parameter's gradient is noted
 * as checked (slot k >= 0), and the optimizer's fused step need not read the table again. */
static void embedding_backward_rows(amp_ctx *ctx, amp_tensor *grad, const embedding_saved *s, const float *g,
                                    int64_t v, int64_t d, int64_t k) {
    const int64_t rows = d > 0 && d < AMP_GRAD_RANGE_CHUNK ? AMP_GRAD_RANGE_CHUNK / d : 1;
    const int64_t blocks = (v + rows - 1) / rows;
    const bool f32 = grad->dtype == AMP_F32;
    const int threads = amp_parallel_max_threads();
    amp_arena_mark m = amp_scratch_mark(ctx);
    embedding_use *uses = amp_scratch_alloc(ctx, (size_t)(s->count > 0 ? s->count : 1) * sizeof *uses);
    float *buf = amp_f32_scratch(ctx, rows * d), *acc = amp_f32_scratch(ctx, rows * d);
    bool *used = f32 ? amp_scratch_alloc(ctx, (size_t)(blocks > 0 ? blocks : 1)) : NULL;
    uint32_t *absmax = f32 ? amp_scratch_alloc(ctx, (size_t)threads * sizeof *absmax) : NULL;
    if (!uses || !buf || !acc || (f32 && (!used || !absmax))) {
        amp_scratch_release(ctx, m);
        return;
    }
    if (f32) {
        memset(used, 0, (size_t)blocks);
        memset(absmax, 0, (size_t)threads * sizeof *absmax);
    }
    for (int64_t t = 0; t < s->count; t++) uses[t] = (embedding_use){s->indices[t], t};
    if (s->count > 1) qsort(uses, (size_t)s->count, sizeof *uses, embedding_use_cmp);
    const amp_elem_kernels *ek = amp_elem_active();
    uint32_t touched_max = 0;
    int64_t u = 0;
    for (int64_t r0 = 0; r0 < v; r0 += rows) {
        const int64_t r1 = v - r0 < rows ? v : r0 + rows;
        if (f32 && (u == s->count || uses[u].row >= r1)) continue; /* untouched: below */
        memset(buf, 0, (size_t)((r1 - r0) * d) * sizeof *buf);
        for (; u < s->count && uses[u].row < r1; u++) {
            float *row = buf + (uses[u].row - r0) * d;
            const float *gr = g + uses[u].t * d;
            for (int64_t j = 0; j < d; j++) row[j] += gr[j];
        }
        amp_grad_range_add(grad, acc, buf, r0 * d, (r1 - r0) * d);
        if (f32) {
            used[r0 / rows] = true;
            const uint32_t bm = ek->absmax_bits((const float *)grad->data + r0 * d, (size_t)((r1 - r0) * d));
            touched_max = bm > touched_max ? bm : touched_max;
        }
    }
    if (f32) {
        untouched_job job = {ek, grad->data, used, absmax, rows, v, d};
        amp_parallel_range(blocks, 1, 1, untouched_range, &job);
        for (int t = 0; t < threads; t++) touched_max = absmax[t] > touched_max ? absmax[t] : touched_max;
        if (k >= 0 && d > 0) amp_ctx_grad_note(ctx, k, touched_max); /* every element's value seen above */
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
        embedding_backward_rows(ctx, grad, s, g, v, d, amp_ctx_param_index(ctx, w));
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
