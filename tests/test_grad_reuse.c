/* Reuse of dropped gradients (src/tensor/autograd.c): backward drops each non-leaf gradient after its
 * node has run and later first gradients take its arena block. A chain of ops on tensors large enough
 * to be pooled (in f32 and bf16), once with every intermediate retaining its gradient (nothing pooled)
 * and once without: the leaf gradients must be the same bits, the second step's arena high-water mark
 * lower. One node takes two first gradients at once, one of them from the pool: a pool handing one
 * block out twice fails here. Two steps run, the pool emptied by amp_ctx_reset between them. */
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "harness.h"
#include "tests.h"

enum { ROWS = 64, COLS = 96 }; /* 6144 elements: 24 KiB in f32, 12 KiB in bf16 (under the pool's minimum) */

/* loss = sum(tanh(tanh(x w) gelu(x + w)) r) over [rows, COLS]; writes x's gradient (fp32) and the peak. */
static int run(amp_dtype dt, bool retain, int rows, float *gx, size_t *peak) {
    amp_ctx *ctx = NULL;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return -1;
    int rc = -1;
    const int64_t n = (int64_t)rows * COLS, shape[2] = {rows, COLS};
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) goto out;
    for (int step = 0; step < 2; step++) { /* the second step reuses what the first grew */
        amp_ctx_reset(ctx);
        for (int64_t i = 0; i < n; i++) v[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
        amp_tensor *x = amp_tensor_from(ctx, dt, 2, shape, v, AMP_F32);
        for (int64_t i = 0; i < n; i++) v[i] = (float)((i * 53) % 89) / 44.0f - 1.0f;
        amp_tensor *w = amp_tensor_from(ctx, dt, 2, shape, v, AMP_F32);
        amp_tensor *r = amp_tensor_from(ctx, dt, 2, shape, v, AMP_F32);
        if (!x || !w || !r) goto out;
        amp_tensor_set_requires_grad(x, true);
        /* c = a b takes two first gradients at once (one from the pool): both must stay distinct */
        amp_tensor *a = amp_tanh(ctx, amp_mul(ctx, x, w)), *b = amp_gelu(ctx, amp_add(ctx, x, w));
        amp_tensor *c = amp_mul(ctx, a, b), *d = amp_tanh(ctx, c), *e = amp_mul(ctx, d, r);
        if (!e) goto out;
        if (retain) {
            amp_tensor *keep[5] = {a, b, c, d, e};
            for (int i = 0; i < 5; i++) amp_tensor_retain_grad(keep[i]);
        }
        if (amp_backward_scaled(ctx, amp_sum_all(ctx, e), 1.0f) != AMP_OK || !x->grad ||
            amp_tensor_read(x->grad, gx, AMP_F32) != AMP_OK)
            goto out;
        if (!retain && (a->grad || b->grad || c->grad || d->grad)) goto out; /* dropped, as PyTorch does */
    }
    *peak = amp_ctx_arena_peak(ctx);
    rc = 0;
out:
    free(v);
    amp_ctx_free(ctx);
    return rc;
}

void test_grad_reuse(void) {
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    const int rows[2] = {ROWS, 4 * ROWS}; /* bf16 pooled from 4x the rows */
    float *g1 = malloc(4 * ROWS * COLS * sizeof *g1), *g2 = malloc(4 * ROWS * COLS * sizeof *g2);
    if (!CHECK(g1 && g2)) goto out;
    for (int d = 0; d < 2; d++) {
        size_t peak_keep = 0, peak_reuse = 0;
        const size_t n = (size_t)rows[d] * COLS;
        if (!CHECK(run(dts[d], true, rows[d], g1, &peak_keep) == 0 && run(dts[d], false, rows[d], g2, &peak_reuse) == 0))
            continue;
        CHECK_MSG(memcmp(g1, g2, n * sizeof *g1) == 0, "%s: gradients differ with reuse", amp_dtype_name(dts[d]));
        CHECK_MSG(peak_reuse < peak_keep, "%s: arena peak %zu with reuse, %zu without", amp_dtype_name(dts[d]),
                  peak_reuse, peak_keep);
    }
out:
    free(g1), free(g2);
}

/* A reshape's or contiguous copy's gradient handed over to its input (amp_grad_hand_over) instead of
 * copied: loss = sum(tanh(contiguous(transpose(reshape(x)))) r), run once as is and once with the
 * reshape's and the copy's outputs retaining their gradients (which forces the copy path). x's
 * gradient must be the same bits; in the handed-over run x's gradient must be the very memory the
 * reshape's output had (seen by the backward hook), in the copy run other memory. */
typedef struct hook_seen {
    const amp_tensor *xs;
    const void *data; /* xs's gradient's data when backward reached it */
} hook_seen;

static void see_grad(amp_ctx *ctx, const amp_tensor *out, const amp_tensor *grad, void *user) {
    (void)ctx;
    hook_seen *h = user;
    if (out == h->xs) h->data = grad->data;
}

static int run_hand_over(amp_dtype dt, bool retain, float *gx, bool *same_memory) {
    amp_ctx *ctx = NULL;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return -1;
    int rc = -1;
    const int64_t n = ROWS * COLS;
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) goto out;
    for (int64_t i = 0; i < n; i++) v[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    amp_tensor *x = amp_tensor_from(ctx, dt, 1, (const int64_t[]){n}, v, AMP_F32);
    for (int64_t i = 0; i < n; i++) v[i] = (float)((i * 53) % 89) / 44.0f - 1.0f;
    amp_tensor *r = amp_tensor_from(ctx, dt, 2, (const int64_t[]){COLS, ROWS}, v, AMP_F32);
    if (!x || !r) goto out;
    amp_tensor_set_requires_grad(x, true);
    amp_tensor *xs = amp_reshape(ctx, x, 2, (const int64_t[]){ROWS, COLS});
    amp_tensor *xc = xs ? amp_contiguous(ctx, amp_transpose(ctx, xs, 0, 1)) : NULL;
    amp_tensor *y = xc ? amp_mul(ctx, amp_tanh(ctx, xc), r) : NULL;
    if (!y) goto out;
    if (retain) amp_tensor_retain_grad(xs), amp_tensor_retain_grad(xc);
    hook_seen seen = {xs, NULL};
    amp_ctx_set_backward_grad_hook(ctx, see_grad, &seen);
    if (amp_backward_scaled(ctx, amp_sum_all(ctx, y), 1.0f) != AMP_OK || !x->grad ||
        amp_tensor_read(x->grad, gx, AMP_F32) != AMP_OK || !seen.data)
        goto out;
    *same_memory = x->grad->data == seen.data;
    rc = 0;
out:
    free(v);
    amp_ctx_free(ctx);
    return rc;
}

void test_grad_hand_over(void) {
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    float *g1 = malloc(ROWS * COLS * sizeof *g1), *g2 = malloc(ROWS * COLS * sizeof *g2);
    if (!CHECK(g1 && g2)) goto out;
    for (int d = 0; d < 2; d++) {
        bool same_copy = true, same_hand = false;
        if (!CHECK(run_hand_over(dts[d], true, g1, &same_copy) == 0 && run_hand_over(dts[d], false, g2, &same_hand) == 0))
            continue;
        CHECK_MSG(memcmp(g1, g2, ROWS * COLS * sizeof *g1) == 0, "%s: handed-over gradient differs from the copy",
                  amp_dtype_name(dts[d]));
        CHECK_MSG(same_hand && !same_copy, "%s: x's gradient is the reshape's memory: %d handed over, %d copied (want 1, 0)",
                  amp_dtype_name(dts[d]), same_hand, same_copy);
    }
out:
    free(g1), free(g2);
}
