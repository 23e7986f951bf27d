/* The helpers around a model: argmax and the count of correct rows against hand-computed cases
 * (ties, NaN, narrow dtypes, views), one batch evaluated under no-grad against the loss computed
 * directly, and the mean/std of amp/data.h against closed forms and a two-pass long double
 * computation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "harness.h"
#include "tests.h"

static amp_ctx *new_ctx(void) {
    amp_ctx *ctx = NULL;
    return CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK) ? ctx : NULL;
}

void test_eval_argmax_accuracy(void) {
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    /* rows: a plain maximum; a tie (the first wins); a NaN (wins, as torch.argmax); all negative;
     * -inf and a NaN later (the NaN) */
    const float logits[5 * 3] = {1, 3, 2, 5, 5, 1, 0, NAN, 2, -1, -3, -2, -INFINITY, 4, NAN};
    const int32_t want[5] = {1, 0, 1, 0, 2}, labels[5] = {1, 1, 1, 2, 2};
    const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int d = 0; d < 3; d++) {
        amp_tensor *t = amp_tensor_from(ctx, dts[d], 2, (const int64_t[]){5, 3}, logits, AMP_F32);
        int32_t got[5] = {-1, -1, -1, -1, -1};
        CHECK(amp_argmax_rows(t, got) == AMP_OK);
        for (int i = 0; i < 5; i++) CHECK_MSG(got[i] == want[i], "%s row %d: %d, want %d", amp_dtype_name(dts[d]), i, got[i], want[i]);
        CHECK_EQ_INT(amp_count_correct(t, labels), 3);
    }
    /* a transposed view: columns of [3, 5] become the rows */
    const float cols[3 * 4] = {0, 9, 2, 7, 1, 8, 3, 7, 2, 7, 1, 7}; /* [3, 4]; transposed rows: (0,1,2) (9,8,7) (2,3,1) (7,7,7) */
    amp_tensor *base = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){3, 4}, cols, AMP_F32);
    amp_tensor *view = amp_transpose(ctx, base, 0, 1);
    int32_t got[4];
    CHECK(amp_argmax_rows(view, got) == AMP_OK && got[0] == 2 && got[1] == 0 && got[2] == 1 && got[3] == 0);
    /* refusals */
    CHECK(amp_argmax_rows(NULL, got) == AMP_ERR_NULL_POINTER && amp_argmax_rows(base, NULL) == AMP_ERR_NULL_POINTER);
    amp_tensor *flat = amp_tensor_from(ctx, AMP_F32, 1, (const int64_t[]){4}, cols, AMP_F32);
    CHECK(amp_argmax_rows(flat, got) == AMP_ERR_INVALID_ARGUMENT && amp_count_correct(flat, labels) == -1);
    CHECK(amp_count_correct(base, NULL) == -1);
    amp_ctx_free(ctx);
}

typedef struct probe {
    amp_linear_layer *fc;
    bool grad_seen; /* grad mode inside the forward */
    bool fail;      /* return NULL with an error */
} probe;

static amp_tensor *probe_forward(amp_ctx *ctx, amp_tensor *x, void *user) {
    probe *p = user;
    p->grad_seen = amp_grad_enabled(ctx);
    if (p->fail) return amp_reshape(ctx, x, 1, (const int64_t[]){-7}); /* an invalid-argument error */
    return amp_linear_layer_forward(ctx, p->fc, x);
}

void test_eval_batch_no_grad(void) {
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    amp_linear_layer fc;
    if (!CHECK(amp_linear_layer_declare(ctx, &fc, "fc", 4, 3, true, AMP_F32) == AMP_OK) ||
        !CHECK(amp_ctx_alloc_params(ctx) == AMP_OK)) {
        amp_ctx_free(ctx);
        return;
    }
    amp_rng rng;
    amp_rng_seed(&rng, 2);
    CHECK(amp_linear_layer_init(ctx, &fc, &rng) == AMP_OK);
    float xs[6 * 4];
    for (int i = 0; i < 24; i++) xs[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    const int32_t labels[6] = {0, 1, 2, 2, 1, 0};
    amp_tensor *x = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){6, 4}, xs, AMP_F32);
    /* the reference: the same forward with grad on, its loss and correct rows */
    amp_tensor *logits = amp_linear_layer_forward(ctx, &fc, x);
    amp_tensor *loss = amp_cross_entropy(ctx, logits, labels);
    const double want_loss = amp_tensor_get(loss, 0);
    const int64_t want_correct = amp_count_correct(logits, labels);
    CHECK(loss->grad_fn != NULL); /* recorded with grad on */
    probe p = {.fc = &fc};
    amp_eval_totals totals = {0};
    CHECK(amp_evaluate_batch(ctx, probe_forward, &p, x, labels, &totals) == AMP_OK);
    CHECK(!p.grad_seen && amp_grad_enabled(ctx)); /* off inside, restored after */
    CHECK(amp_evaluate_batch(ctx, probe_forward, &p, x, labels, &totals) == AMP_OK); /* sums */
    CHECK_EQ_INT(totals.count, 12);
    CHECK_EQ_INT(totals.correct, 2 * want_correct);
    CHECK_MSG(totals.loss_sum == 12.0 * want_loss, "loss sum %.9g, want %.9g", totals.loss_sum, 12.0 * want_loss);
    /* grad mode off before: stays off */
    amp_set_grad_enabled(ctx, false);
    CHECK(amp_evaluate_batch(ctx, probe_forward, &p, x, labels, &totals) == AMP_OK && !amp_grad_enabled(ctx));
    amp_set_grad_enabled(ctx, true);
    /* a failing forward: its error, totals unchanged, grad mode restored */
    const amp_eval_totals before = totals;
    p.fail = true;
    CHECK(amp_evaluate_batch(ctx, probe_forward, &p, x, labels, &totals) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(!memcmp(&before, &totals, sizeof totals) && amp_grad_enabled(ctx));
    amp_ctx_clear_error(ctx);
    CHECK(amp_evaluate_batch(ctx, NULL, &p, x, labels, &totals) == AMP_ERR_NULL_POINTER);
    CHECK(amp_evaluate_batch(NULL, probe_forward, &p, x, labels, &totals) == AMP_ERR_NULL_POINTER);
    amp_ctx_free(ctx);
}

/* mean and unbiased std in long double, two passes */
static void reference(const float *x, int64_t n, long double *mean, long double *std) {
    long double s = 0, q = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int64_t i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
    *std = sqrtl(q / (n - 1));
}

void test_eval_mean_std(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    enum { N = 100001 };
    float *x = malloc(N * sizeof *x);
    uint8_t *pixels = malloc(N);
    if (!CHECK(x && pixels)) {
        free(x), free(pixels);
        return;
    }
    /* 0, 1, ..., n-1: mean (n-1)/2, unbiased variance n(n+1)/12 */
    for (int i = 0; i < N; i++) x[i] = (float)i;
    double mean = 0, std = 0;
    CHECK(amp_mean_std(x, N, &mean, &std) == AMP_OK);
    CHECK_MSG(mean == (N - 1) / 2.0 && fabs(std - sqrt((double)N * (N + 1) / 12.0)) < 1e-9 * std, "0..n-1: %.17g %.17g",
              mean, std);
    /* random values with a large offset (a one-pass formula would lose digits) */
    uint64_t s = seed | 1;
    for (int i = 0; i < N; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = 1000.0f + (float)(s >> 40) / (float)(1 << 24);
        pixels[i] = (uint8_t)(s >> 56);
    }
    long double rm, rs;
    reference(x, N, &rm, &rs);
    CHECK(amp_mean_std(x, N, &mean, &std) == AMP_OK);
    CHECK_MSG(fabsl(mean - rm) < 1e-12L * rm && fabsl(std - rs) < 1e-9L * rs, "offset: %.17g %.17g vs %.17Lg %.17Lg",
              mean, std, rm, rs);
    /* an image set of ubyte pixels: the statistics of pixel / 255 */
    amp_image_dataset d = {.count = 1, .rows = 1, .cols = N, .classes = 1, .pixels = pixels};
    for (int i = 0; i < N; i++) x[i] = (float)((double)pixels[i] / 255.0);
    reference(x, N, &rm, &rs);
    CHECK(amp_image_dataset_mean_std(&d, &mean, &std) == AMP_OK);
    CHECK_MSG(fabsl(mean - rm) < 1e-7L * rm && fabsl(std - rs) < 1e-7L * rs, "pixels: %.17g %.17g vs %.17Lg %.17Lg",
              mean, std, rm, rs);
    /* float images: their values */
    d = (amp_image_dataset){.count = 7, .rows = 1, .cols = N / 7, .classes = 1, .values = x};
    const int64_t used = 7 * (N / 7);
    reference(x, used, &rm, &rs);
    CHECK(amp_image_dataset_mean_std(&d, &mean, &std) == AMP_OK);
    CHECK_MSG(fabsl(mean - rm) < 1e-12L * rm && fabsl(std - rs) < 1e-9L * rs, "values: %.17g %.17g", mean, std);
    /* refusals write nothing */
    mean = std = -1;
    CHECK(amp_mean_std(x, 1, &mean, &std) == AMP_ERR_INVALID_ARGUMENT && mean == -1 && std == -1);
    CHECK(amp_mean_std(NULL, 5, &mean, &std) == AMP_ERR_NULL_POINTER);
    CHECK(amp_image_dataset_mean_std(&(amp_image_dataset){0}, &mean, &std) == AMP_ERR_NULL_POINTER);
    free(x), free(pixels);
}
