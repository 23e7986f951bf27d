/* Evaluation helpers (amp/layers.h): argmax over logits rows, the count of correct rows, one batch
 * evaluated with grad mode off. */
#include <math.h>

#include "nn_internal.h"
#include "../tensor/ctx_internal.h"

static bool logits_ok(const amp_tensor *t) { return t->ndim == 2 && t->shape[1] > 0 && t->shape[1] <= INT32_MAX; }

/* Row r's argmax: the first maximum, or the first NaN (torch.argmax). */
static int32_t row_argmax(const amp_tensor *t, int64_t r) {
    const int64_t cols = t->shape[1];
    int64_t best = 0;
    float most = amp_tensor_get(t, r * cols);
    for (int64_t c = 1; c < cols && !isnan(most); c++) {
        const float v = amp_tensor_get(t, r * cols + c);
        if (v > most || isnan(v)) most = v, best = c;
    }
    return (int32_t)best;
}

int amp_argmax_rows(const amp_tensor *logits, int32_t *out) {
    if (!logits || !out) return AMP_ERR_NULL_POINTER;
    if (!logits_ok(logits)) return AMP_ERR_INVALID_ARGUMENT;
    for (int64_t r = 0; r < logits->shape[0]; r++) out[r] = row_argmax(logits, r);
    return AMP_OK;
}

int64_t amp_count_correct(const amp_tensor *logits, const int32_t *labels) {
    if (!logits || !labels || !logits_ok(logits)) return -1;
    int64_t correct = 0;
    for (int64_t r = 0; r < logits->shape[0]; r++) correct += row_argmax(logits, r) == labels[r];
    return correct;
}

int amp_evaluate_batch(amp_ctx *ctx, amp_forward_fn forward, void *user, amp_tensor *x, const int32_t *labels,
                       amp_eval_totals *totals) {
    if (!ctx) return AMP_ERR_NULL_POINTER;
    if (!forward || !labels || !totals)
        return amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "amp_evaluate_batch: forward, labels and totals must not be NULL");
    const bool was = amp_set_grad_enabled(ctx, false);
    amp_tensor *logits = forward(ctx, x, user);
    amp_tensor *loss = logits ? amp_cross_entropy(ctx, logits, labels) : NULL;
    amp_set_grad_enabled(ctx, was);
    if (!loss) {
        const int st = amp_ctx_status(ctx);
        return st != AMP_OK ? st : nn_layer_fail(ctx, "amp_evaluate_batch", "the forward returned no logits");
    }
    if (!logits_ok(logits))
        return nn_layer_fail(ctx, "amp_evaluate_batch", "the logits must be [rows, classes], not %d-D", logits->ndim);
    const int64_t rows = logits->shape[0];
    totals->loss_sum += (double)amp_tensor_get(loss, 0) * (double)rows;
    totals->correct += amp_count_correct(logits, labels);
    totals->count += rows;
    return AMP_OK;
}
