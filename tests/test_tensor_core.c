/* The context, arena, parameters and autograd engine: memory roles, steady-state allocation,
 * grad mode, retained gradients, sticky errors, and allocation failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests.h"
#include "amp.h"

static amp_ctx *new_ctx(size_t arena_bytes) {
    amp_ctx_config cfg = amp_ctx_default_config();
    cfg.arena_bytes = arena_bytes;
    amp_ctx *ctx = NULL;
    CHECK(amp_ctx_create(&cfg, &ctx) == AMP_OK);
    return ctx;
}

/* A two-layer MLP step on fixed data: linear, relu-free (only core ops), mean of squares. */
static amp_tensor *mlp_loss(amp_ctx *ctx, amp_tensor *w1, amp_tensor *b1, amp_tensor *w2, const float *xdata) {
    amp_tensor *x = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){4, 3}, xdata, AMP_F32);
    amp_tensor *h = amp_linear(ctx, x, w1, b1);
    amp_tensor *y = amp_linear(ctx, amp_mul(ctx, h, h), w2, NULL);
    return amp_mean_all(ctx, amp_mul(ctx, y, y));
}

void test_tensor_params_and_steady_state(void) {
    amp_ctx *ctx = new_ctx(4096); /* deliberately small: the first step must grow the arena */
    amp_tensor *w1 = amp_param_new(ctx, "w1", AMP_F32, 2, (const int64_t[]){5, 3});
    amp_tensor *b1 = amp_param_new(ctx, "b1", AMP_F32, 1, (const int64_t[]){5});
    amp_tensor *w2 = amp_param_new(ctx, "w2", AMP_F32, 2, (const int64_t[]){2, 5});
    amp_tensor *rm = amp_buffer_new(ctx, "running", AMP_F32, 1, (const int64_t[]){7});
    CHECK(w1 && b1 && w2 && rm && w1->data == NULL);
    CHECK_EQ_INT(amp_ctx_alloc_params(ctx), AMP_OK);
    CHECK_EQ_INT(amp_ctx_num_params(ctx), 3);
    CHECK(amp_ctx_param(ctx, 1) == b1 && amp_ctx_param(ctx, 3) == NULL);
    size_t pbytes = 0, gbytes = 0;
    unsigned char *pm = amp_ctx_param_memory(ctx, &pbytes), *gm = amp_ctx_grad_memory(ctx, &gbytes);
    /* one buffer per role: every parameter's data (and grad) lies inside it, in declaration order */
    CHECK(pm && gm && pbytes == gbytes && pbytes >= (15 + 5 + 10) * sizeof(float));
    CHECK((unsigned char *)w1->data == pm && (unsigned char *)w1->grad->data == gm);
    CHECK((unsigned char *)b1->data > (unsigned char *)w1->data && (unsigned char *)w2->data < pm + pbytes);
    CHECK(w1->requires_grad && w1->is_leaf && !rm->requires_grad && rm->data != NULL);
    /* a late declaration is refused */
    CHECK(amp_param_new(ctx, "late", AMP_F32, 1, (const int64_t[]){1}) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);

    float init[30];
    for (int i = 0; i < 30; i++) init[i] = 0.1f * (float)((i * 7) % 11) - 0.5f;
    memcpy(w1->data, init, 15 * sizeof(float));
    memcpy(b1->data, init + 15, 5 * sizeof(float));
    memcpy(w2->data, init + 20, 10 * sizeof(float));
    const float x[12] = {1, 2, 3, -1, 0.5f, 0.25f, 0, 1, -2, 3, 1, 1};

    uint64_t allocs_after_warmup = 0;
    float first_grad = 0;
    for (int step = 0; step < 5; step++) {
        amp_ctx_reset(ctx);
        amp_zero_grad(ctx);
        amp_tensor *loss = mlp_loss(ctx, w1, b1, w2, x);
        CHECK_EQ_INT(amp_backward(ctx, loss, NULL), AMP_OK);
        const float g = ((float *)w1->grad->data)[0];
        if (step == 0) first_grad = g;
        CHECK_MSG(g == first_grad, "step %d: gradient %g differs from step 0's %g (zero_grad or arena reuse)", step,
                  (double)g, (double)first_grad);
        if (step == 1) allocs_after_warmup = amp_ctx_heap_allocations(ctx);
        if (step > 1)
            CHECK_MSG(amp_ctx_heap_allocations(ctx) == allocs_after_warmup,
                      "step %d made %llu heap allocations; the steady state makes none", step,
                      (unsigned long long)(amp_ctx_heap_allocations(ctx) - allocs_after_warmup));
    }
    CHECK(first_grad != 0.0f);
    CHECK(amp_ctx_arena_peak(ctx) > 4096);
    /* Accumulation without zero_grad: a second backward of the same loss is refused (the graph went
     * once already) and leaves the gradient as it was; with the graph retained it doubles it, and a
     * second forward in the same step accumulates the same way. */
    amp_ctx_reset(ctx);
    amp_zero_grad(ctx);
    amp_tensor *loss = mlp_loss(ctx, w1, b1, w2, x);
    CHECK_EQ_INT(amp_backward(ctx, loss, NULL), AMP_OK);
    CHECK_EQ_INT(amp_backward(ctx, loss, NULL), AMP_ERR_STATE);
    CHECK_MSG(strstr(amp_ctx_error(ctx), "amp_backward: Trying to backward through the graph a second time"),
              "message: %s", amp_ctx_error(ctx));
    CHECK(((float *)w1->grad->data)[0] == first_grad);
    amp_ctx_reset(ctx);
    amp_zero_grad(ctx);
    CHECK(!amp_set_retain_graph(ctx, true));
    loss = mlp_loss(ctx, w1, b1, w2, x);
    CHECK_EQ_INT(amp_backward(ctx, loss, NULL), AMP_OK);
    CHECK(amp_set_retain_graph(ctx, false));
    CHECK_EQ_INT(amp_backward(ctx, loss, NULL), AMP_OK);
    CHECK(((float *)w1->grad->data)[0] == 2.0f * first_grad);
    CHECK_EQ_INT(amp_backward(ctx, loss, NULL), AMP_ERR_STATE); /* the last one did not retain it */
    CHECK(((float *)w1->grad->data)[0] == 2.0f * first_grad);
    amp_ctx_reset(ctx);
    amp_zero_grad(ctx);
    CHECK_EQ_INT(amp_backward(ctx, mlp_loss(ctx, w1, b1, w2, x), NULL), AMP_OK);
    CHECK_EQ_INT(amp_backward(ctx, mlp_loss(ctx, w1, b1, w2, x), NULL), AMP_OK);
    CHECK(((float *)w1->grad->data)[0] == 2.0f * first_grad);
    amp_ctx_free(ctx);
}

void test_tensor_grad_mode_and_retain(void) {
    amp_ctx *ctx = new_ctx(1 << 16);
    const float xv[3] = {1, 2, 3};
    amp_tensor *x = amp_tensor_from(ctx, AMP_F32, 1, (const int64_t[]){3}, xv, AMP_F32);
    amp_tensor_set_requires_grad(x, true);
    /* no-grad region: nothing recorded, the result does not require grad */
    bool was = amp_set_grad_enabled(ctx, false);
    CHECK(was == true && !amp_grad_enabled(ctx));
    amp_tensor *y0 = amp_scale(ctx, x, 2.0f);
    CHECK(y0 && !y0->requires_grad && y0->grad_fn == NULL && y0->op == AMP_OP_SCALE);
    amp_set_grad_enabled(ctx, true);
    CHECK(amp_backward(ctx, amp_sum_all(ctx, y0), NULL) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(strstr(amp_ctx_error(ctx), "does not require grad") != NULL);
    amp_ctx_clear_error(ctx);
    /* retain_grad keeps an intermediate's gradient; others are dropped after use */
    amp_tensor *y = amp_scale(ctx, x, 3.0f);
    amp_tensor *z = amp_mul(ctx, y, y);
    amp_tensor_retain_grad(y);
    amp_tensor *loss = amp_sum_all(ctx, z);
    CHECK_EQ_INT(amp_backward(ctx, loss, NULL), AMP_OK);
    CHECK(y->grad != NULL && z->grad == NULL && !y->is_leaf);
    for (int i = 0; i < 3; i++) {
        CHECK(amp_tensor_get(y->grad, i) == 2.0f * 3.0f * xv[i]);  /* dL/dy = 2y */
        CHECK(amp_tensor_get(x->grad, i) == 18.0f * xv[i]);        /* dL/dx = 2y * 3 */
    }
    /* a seed gradient scales everything (loss scaling) */
    amp_ctx_reset(ctx);
    x = amp_tensor_from(ctx, AMP_F32, 1, (const int64_t[]){3}, xv, AMP_F32);
    amp_tensor_set_requires_grad(x, true);
    CHECK_EQ_INT(amp_backward_scaled(ctx, amp_sum_all(ctx, amp_scale(ctx, x, 0.5f)), 1024.0f), AMP_OK);
    CHECK(amp_tensor_get(x->grad, 2) == 512.0f);
    /* a non-scalar loss needs a seed of its shape */
    amp_tensor *v = amp_scale(ctx, x, 1.0f);
    CHECK(amp_backward(ctx, v, NULL) == AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    amp_ctx_free(ctx);
}

void test_tensor_errors_are_sticky(void) {
    amp_ctx *ctx = new_ctx(1 << 16);
    amp_tensor *a = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){2, 3});
    amp_tensor *b = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){4, 5});
    CHECK(amp_matmul(ctx, a, b) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(amp_ctx_error(ctx), "matmul") && strstr(amp_ctx_error(ctx), "[2, 3]"), "message: %s",
              amp_ctx_error(ctx));
    /* later ops of the step fail fast and keep the first message */
    char first[256];
    snprintf(first, sizeof first, "%s", amp_ctx_error(ctx));
    CHECK(amp_add(ctx, a, NULL) == NULL);
    CHECK(amp_add(ctx, a, a) == NULL);
    CHECK_STR_EQ(amp_ctx_error(ctx), first);
    amp_ctx_clear_error(ctx);
    CHECK(amp_add(ctx, a, a) != NULL);
    /* the error ends with its step: amp_ctx_reset clears it */
    CHECK(amp_matmul(ctx, a, b) == NULL && amp_ctx_status(ctx) == AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_ctx_reset(ctx), AMP_OK);
    CHECK(amp_ctx_status(ctx) == AMP_OK && amp_ctx_error(ctx)[0] == '\0');
    a = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){2, 3});
    b = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){4, 5});
    CHECK(amp_add(ctx, a, a) != NULL);
    /* broadcast mismatch, bad dims, bad reshape, fp8 inputs */
    CHECK(amp_add(ctx, a, b) == NULL && strstr(amp_ctx_error(ctx), "broadcast"));
    amp_ctx_clear_error(ctx);
    CHECK(amp_sum(ctx, a, 2, false) == NULL && strstr(amp_ctx_error(ctx), "dim 2"));
    amp_ctx_clear_error(ctx);
    CHECK(amp_reshape(ctx, a, 2, (const int64_t[]){4, -1}) == NULL);
    amp_ctx_clear_error(ctx);
    amp_tensor *f8 = amp_tensor_zeros(ctx, AMP_F8E4M3, 1, (const int64_t[]){4});
    CHECK(f8 && amp_scale(ctx, f8, 2.0f) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_UNSUPPORTED_DTYPE);
    amp_ctx_free(ctx);
    amp_ctx_free(NULL); /* free(NULL) is fine */
}

/* An allocator that fails after a budget of successful allocations. */
typedef struct {
    int budget, live;
} failing;

static void *failing_alloc(size_t size, size_t align, void *user) {
    failing *f = user;
    if (f->budget-- <= 0) return NULL;
    void *p = NULL;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1) != 0) return NULL;
    f->live++;
    return p;
}

static void failing_free(void *ptr, void *user) {
    failing *f = user;
    if (ptr) f->live--;
    free(ptr);
}

void test_tensor_allocation_failure(void) {
    /* Every allocation point of create + declare + alloc_params + a step fails in turn: each must
     * report an error status (never crash) and leak nothing once the context is freed. */
    int completed = 0;
    for (int budget = 0; budget < 64 && !completed; budget++) {
        failing f = {budget, 0};
        amp_ctx_config cfg = amp_ctx_default_config();
        cfg.arena_bytes = 256; /* tiny, so the step must grow it */
        cfg.allocator = (amp_allocator){failing_alloc, failing_free, &f};
        amp_ctx *ctx = NULL;
        int st = amp_ctx_create(&cfg, &ctx);
        if (st == AMP_OK) {
            amp_tensor *w = amp_param_new(ctx, "w", AMP_F32, 2, (const int64_t[]){8, 8});
            amp_tensor *b = amp_param_new(ctx, "b", AMP_F32, 1, (const int64_t[]){8});
            st = amp_ctx_alloc_params(ctx);
            if (st == AMP_OK && w && b) {
                amp_tensor *x = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){16, 8});
                amp_tensor *loss = amp_sum_all(ctx, amp_linear(ctx, x, w, b));
                st = loss ? amp_backward(ctx, loss, NULL) : amp_ctx_status(ctx);
                if (st == AMP_OK) completed = 1;
            }
            CHECK_MSG(st == AMP_OK || st == AMP_ERR_OUT_OF_MEMORY || amp_ctx_status(ctx) == AMP_ERR_OUT_OF_MEMORY,
                      "budget %d: status %d (%s)", budget, st, amp_ctx_error(ctx));
        } else {
            CHECK_MSG(st == AMP_ERR_OUT_OF_MEMORY && ctx == NULL, "budget %d: create returned %d", budget, st);
        }
        amp_ctx_free(ctx);
        CHECK_MSG(f.live == 0, "budget %d: %d allocations leaked", budget, f.live);
    }
    CHECK_MSG(completed, "no budget below 64 allocations was enough to run the step");
}

void test_tensor_views_and_access(void) {
    amp_ctx *ctx = new_ctx(1 << 16);
    const float v[6] = {0, 1, 2, 3, 4, 5};
    amp_tensor *a = amp_tensor_from(ctx, AMP_BF16, 2, (const int64_t[]){2, 3}, v, AMP_F32);
    amp_tensor *t = amp_transpose(ctx, a, 0, 1);
    CHECK(t && t->data == a->data && !amp_tensor_is_contiguous(t) && t->shape[0] == 3 && t->shape[1] == 2);
    float got[6];
    CHECK_EQ_INT(amp_tensor_read(t, got, AMP_F32), AMP_OK);
    const float want[6] = {0, 3, 1, 4, 2, 5};
    CHECK(memcmp(got, want, sizeof got) == 0);
    amp_tensor *r = amp_reshape(ctx, a, 1, (const int64_t[]){-1});
    CHECK(r && r->data == a->data && r->shape[0] == 6); /* a view of a contiguous tensor */
    amp_tensor *rt = amp_reshape(ctx, t, 1, (const int64_t[]){6});
    CHECK(rt && rt->data != a->data && amp_tensor_get(rt, 1) == 3.0f); /* a view of a view needs a copy */
    amp_tensor *s = amp_tensor_scalar(ctx, AMP_F16, 2.5f);
    CHECK(s && s->ndim == 0 && amp_tensor_numel(s) == 1 && amp_tensor_get(s, 0) == 2.5f);
    CHECK_STR_EQ(amp_op_name(AMP_OP_LAYER_NORM), "layer_norm");
    CHECK_STR_EQ(amp_op_name(AMP_OP_COUNT), "invalid");
    amp_ctx_free(ctx);
}
