/* Ops whose work is split between threads (elementwise passes by amp_parallel_range, attention heads
 * as tasks): every output and every gradient at 3 threads must be the 1-thread value bit for bit, in
 * fp32 and bf16, with the gradient both new and accumulated into an existing one (the sinks' two
 * ways). Elementwise sizes are over the split threshold and not multiples of the ranges' alignment,
 * so each thread gets a range and the last a ragged end. A failing case names the op, dtype and how
 * many values differ. */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amp/formats.h"
#include "amp/threads.h"
#include "../src/core/parallel.h"
#include "../src/ops/op_util.h"
#include "harness.h"
#include "tests.h"

typedef amp_tensor *(*op_fn)(amp_ctx *ctx, amp_tensor *x);

/* causal self-attention over x [B, T, 3C] with 4 heads */
static amp_tensor *attention4(amp_ctx *ctx, amp_tensor *x) { return amp_causal_self_attention(ctx, x, 4); }

/* cross-entropy of x [N, C] against fixed targets: one value */
static int32_t ce_targets[4096];
static amp_tensor *cross_entropy(amp_ctx *ctx, amp_tensor *x) { return amp_cross_entropy(ctx, x, ce_targets); }

static amp_tensor *pow3(amp_ctx *ctx, amp_tensor *x) { return amp_pow(ctx, x, 3.0f); }
/* x + x: add's row kernel forward; backward its 0 + g pass twice, the second into the gradient the first made */
static amp_tensor *add_self(amp_ctx *ctx, amp_tensor *x) { return amp_add(ctx, x, x); }
/* x [R, 97] + a row of 97: a period of the output (the row kernel in pieces) */
static amp_tensor *add_row(amp_ctx *ctx, amp_tensor *x) {
    float r[97];
    for (int i = 0; i < 97; i++) r[i] = (float)(i % 13) * 0.25f - 1.5f;
    return amp_add(ctx, x, amp_tensor_from(ctx, x->dtype, 1, (const int64_t[]){97}, r, AMP_F32));
}
static amp_tensor *log_abs(amp_ctx *ctx, amp_tensor *x) { return amp_log(ctx, amp_exp(ctx, x)); }
/* 2 x 2 max pooling, stride 2: its planes split between threads */
static amp_tensor *max_pool2(amp_ctx *ctx, amp_tensor *x) { return amp_max_pool2d(ctx, x, 2, 2); }

static float urand(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)(*s >> 40) / (float)(1 << 24) * 8.0f - 4.0f;
}

/* y = f(x) (at most x's elements), loss = sum(y * r), backward twice (the second into the existing
 * gradient): y and x's gradient after each backward, as fp32, into out [3n] */
static bool run_op(int threads, op_fn f, amp_dtype dt, int ndim, const int64_t *shape, float *out) {
    const int64_t n = amp_shape_numel(ndim, shape);
    amp_ctx *ctx = NULL;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return false;
    amp_set_num_threads(threads);
    float *v = malloc(sizeof(float) * (size_t)n), *r = malloc(sizeof(float) * (size_t)n);
    uint64_t s = 0xE1E7u + (uint64_t)n;
    for (int64_t i = 0; v && r && i < n; i++) v[i] = urand(&s), r[i] = urand(&s);
    bool ok = v && r;
    amp_tensor *x = ok ? amp_tensor_from(ctx, dt, ndim, shape, v, AMP_F32) : NULL;
    ok = x != NULL;
    if (ok) amp_tensor_set_requires_grad(x, true);
    for (int pass = 0; ok && pass < 2; pass++) {
        amp_tensor *y = f(ctx, x);
        const int64_t n_out = y ? amp_tensor_numel(y) : 0;
        amp_tensor *R = y && n_out <= n ? amp_tensor_from(ctx, dt, 1, (const int64_t[]){n_out}, r, AMP_F32) : NULL;
        amp_tensor *yf = R ? amp_reshape(ctx, y, 1, (const int64_t[]){n_out}) : NULL;
        amp_tensor *loss = yf ? amp_sum_all(ctx, amp_mul(ctx, yf, R)) : NULL;
        ok = loss && amp_backward(ctx, loss, NULL) == AMP_OK && amp_tensor_read(y, out, AMP_F32) == AMP_OK &&
             x->grad && amp_tensor_read(x->grad, out + n_out + pass * n, AMP_F32) == AMP_OK;
    }
    amp_set_num_threads(0);
    free(v), free(r);
    amp_ctx_free(ctx);
    return ok;
}

static void check_op(const char *name, op_fn f, amp_dtype dt, int ndim, const int64_t *shape) {
    const int64_t n = amp_shape_numel(ndim, shape), total = 3 * n;
    float *a = calloc((size_t)total, sizeof(float)), *b = calloc((size_t)total, sizeof(float));
    if (CHECK(a && b) && CHECK_MSG(run_op(1, f, dt, ndim, shape, a) && run_op(3, f, dt, ndim, shape, b),
                                   "%s failed to run", name)) {
        int64_t bad = 0;
        for (int64_t i = 0; i < total; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
        CHECK_MSG(bad == 0, "%s %s n=%lld: %lld of y, dx, dx+dx differ between 1 and 3 threads", name,
                  amp_dtype_name(dt), (long long)n, (long long)bad);
    }
    free(a), free(b);
}

void test_threads_elementwise(void) {
    const struct {
        const char *name;
        op_fn f;
    } ops[] = {{"gelu", amp_gelu}, {"tanh", amp_tanh}, {"sigmoid", amp_sigmoid}, {"exp", amp_exp},
               {"pow", pow3},      {"log", log_abs},   {"relu", amp_relu}, {"add", add_self}};
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    const int64_t n = 3 * 32768 + 16384 + 7;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (int d = 0; d < 2; d++) check_op(ops[o].name, ops[o].f, dts[d], 1, &n);
    for (int d = 0; d < 2; d++) check_op("add (a row)", add_row, dts[d], 2, (const int64_t[]){1351, 97});
}

/* Max pooling's planes split between threads, forward and backward: 8 x 16 planes of 28 x 28 (the
 * cnn's shape), and 5 x 7 of 27 x 27, whose last row and column floor mode leaves out (their
 * gradient +0), the planes not a multiple of the threads. f16 decodes a block at a time. */
void test_threads_pool(void) {
    const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int d = 0; d < 3; d++) {
        check_op("max_pool2d", max_pool2, dts[d], 4, (const int64_t[]){8, 16, 28, 28});
        check_op("max_pool2d (odd)", max_pool2, dts[d], 4, (const int64_t[]){5, 7, 27, 27});
    }
}

void test_threads_convert(void) {
    /* every pair of dtypes over the split threshold (2 x 65536 elements a thread), ragged */
    const int64_t n = 2 * 65536 * 3 + 77;
    float *v = malloc(sizeof(float) * (size_t)n);
    unsigned char *src = malloc((size_t)n * 4), *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
    if (!CHECK(v && src && a && b)) goto out;
    uint64_t s = 0xC0417u;
    for (int64_t i = 0; i < n; i++) v[i] = urand(&s) * (float)(1 << (i % 24)) * 0x1p-12f;
    for (int d0 = 0; d0 < AMP_DTYPE_COUNT; d0++)
        for (int d1 = 0; d1 < AMP_DTYPE_COUNT; d1++) {
            if (d0 == d1 || !CHECK(amp_convert(src, (amp_dtype)d0, v, AMP_F32, (size_t)n) == AMP_OK)) continue;
            for (int sat = 0; sat < 2; sat++) {
                memset(a, 0, (size_t)n * 4), memset(b, 0xAB, (size_t)n * 4);
                amp_set_num_threads(1);
                const int s1 = sat ? amp_convert_sat(a, (amp_dtype)d1, src, (amp_dtype)d0, (size_t)n)
                                   : amp_convert(a, (amp_dtype)d1, src, (amp_dtype)d0, (size_t)n);
                amp_set_num_threads(3);
                const int s3 = sat ? amp_convert_sat(b, (amp_dtype)d1, src, (amp_dtype)d0, (size_t)n)
                                   : amp_convert(b, (amp_dtype)d1, src, (amp_dtype)d0, (size_t)n);
                amp_set_num_threads(0);
                CHECK_MSG(s1 == AMP_OK && s3 == AMP_OK &&
                              memcmp(a, b, (size_t)n * amp_dtype_size((amp_dtype)d1)) == 0,
                          "convert %s -> %s%s: 3 threads differ from 1", amp_dtype_name((amp_dtype)d0),
                          amp_dtype_name((amp_dtype)d1), sat ? " (saturating)" : "");
            }
        }
out:
    free(v), free(src), free(a), free(b);
}

void test_threads_loss(void) {
    for (int i = 0; i < 4096; i++) ce_targets[i] = (int32_t)((i * 37) % 250);
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    for (int d = 0; d < 2; d++) check_op("cross-entropy", cross_entropy, dts[d], 2, (const int64_t[]){1031, 250});
}

void test_threads_attention(void) {
    /* B = 3, T = 100 (ragged causal blocks), C = 32, 4 heads */
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    for (int d = 0; d < 2; d++) check_op("self-attention", attention4, dts[d], 3, (const int64_t[]){3, 100, 96});
}

/* amp_parallel_range's split: ranges cover [0, n) exactly once, bounds on the alignment, at most
 * amp_parallel_max_threads() ranges with thread ids below it, one call (thread 0) under the minimum
 * per thread or inside a region */
typedef struct range_probe {
    unsigned char *seen;
    int64_t n, align;
    int bad, max_id;
} range_probe;

static void probe_range(void *arg, int64_t i0, int64_t i1, int thread_id) {
    range_probe *p = arg; /* ranges are disjoint, so the marks are too; the counters race only on failure paths */
    for (int64_t i = i0; i < i1; i++) p->seen[i]++;
    if (i0 % p->align != 0 || (i1 != p->n && i1 % p->align != 0) || thread_id < 0 || thread_id >= p->max_id) p->bad = 1;
}

static void nested_range(void *arg, int64_t task, int thread_id) {
    (void)task, (void)thread_id;
    range_probe *p = arg;
    p->max_id = 1;
    amp_parallel_range(p->n, 1, p->align, probe_range, p);
}

void test_threads_range(void) {
    const int64_t sizes[4] = {1, 1000, 4097, 100003};
    for (int threads = 1; threads <= 3; threads++)
        for (int k = 0; k < 4; k++) {
            const int64_t n = sizes[k];
            unsigned char *seen = calloc((size_t)n, 1);
            if (!CHECK(seen)) return;
            amp_set_num_threads(threads);
            range_probe p = {seen, n, 16, 0, threads};
            amp_parallel_range(n, 100, 16, probe_range, &p);
            int64_t wrong = 0;
            for (int64_t i = 0; i < n; i++) wrong += seen[i] != 1;
            CHECK_MSG(wrong == 0 && !p.bad, "range n=%lld at %d threads: %lld elements not covered once, bad %d",
                      (long long)n, threads, (long long)wrong, p.bad);
            for (int64_t i = 0; i < n; i++) seen[i] = 0;
            amp_parallel_for(1, nested_range, &p); /* inside a region: one range, thread 0 */
            wrong = 0;
            for (int64_t i = 0; i < n; i++) wrong += seen[i] != 1;
            CHECK_MSG(wrong == 0 && !p.bad, "nested range n=%lld: %lld elements not covered once, bad %d",
                      (long long)n, (long long)wrong, p.bad);
            amp_set_num_threads(0);
            free(seen);
        }
}

/* amp_parallel_gang: each task arrives, then waits until every task has arrived (with a time limit, so
 * that a task left to run after another fails the check instead of hanging the test); task i on
 * thread i. */
typedef struct gang_probe {
    atomic_int arrived, timed_out, bad_id, ran;
    int64_t n;
} gang_probe;

static void gang_task(void *arg, int64_t task, int thread_id) {
    gang_probe *g = arg;
    atomic_fetch_add(&g->ran, 1);
    if (thread_id != task) atomic_store(&g->bad_id, 1);
    atomic_fetch_add(&g->arrived, 1);
    const time_t start = time(NULL);
    while (atomic_load(&g->arrived) < g->n)
        if (time(NULL) - start > 10) {
            atomic_store(&g->timed_out, 1);
            return;
        } else {
            sched_yield();
        }
}

static void nested_gang(void *arg, int64_t task, int thread_id) {
    (void)task, (void)thread_id;
    gang_probe *g = arg;
    if (amp_parallel_gang(2, gang_task, g)) atomic_store(&g->bad_id, 1); /* inside a region: refused */
}

void test_threads_gang(void) {
    for (int threads = 1; threads <= 4; threads++) {
        amp_set_num_threads(threads);
        for (int64_t n = 1; n <= threads; n++) {
            gang_probe g = {.n = n};
            const bool ran = amp_parallel_gang(n, gang_task, &g);
            CHECK_MSG(ran && atomic_load(&g.ran) == n && !atomic_load(&g.timed_out) && !atomic_load(&g.bad_id),
                      "gang of %lld at %d threads: ran %d, %d tasks, timed out %d, wrong thread %d", (long long)n,
                      threads, ran, atomic_load(&g.ran), atomic_load(&g.timed_out), atomic_load(&g.bad_id));
        }
        gang_probe g = {.n = threads + 1};
        CHECK_MSG(!amp_parallel_gang(threads + 1, gang_task, &g) && atomic_load(&g.ran) == 0,
                  "a gang of %d at %d threads ran", threads + 1, threads);
        gang_probe h = {.n = 1};
        amp_parallel_for(1, nested_gang, &h);
        CHECK_MSG(!atomic_load(&h.bad_id) && atomic_load(&h.ran) == 0, "a gang inside a region ran");
    }
    amp_set_num_threads(0);
}

/* linear's bias gradient (column sums of the output gradient, the columns split between threads):
 * at 3 threads the 1-thread bits, fp32 and bf16, the gradient new and then accumulated */
static bool run_linear_bias(int threads, amp_dtype dt, float *out) {
    enum { ROWS = 300, IN = 8, OUT = 700 };
    amp_ctx *ctx = NULL;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return false;
    amp_set_num_threads(threads);
    static float xv[ROWS * IN], wv[OUT * IN], bv[OUT], rv[ROWS * OUT];
    uint64_t s = 0xB1A5u;
    for (int i = 0; i < ROWS * IN; i++) xv[i] = urand(&s);
    for (int i = 0; i < OUT * IN; i++) wv[i] = urand(&s);
    for (int i = 0; i < OUT; i++) bv[i] = urand(&s);
    for (int i = 0; i < ROWS * OUT; i++) rv[i] = urand(&s);
    amp_tensor *x = amp_tensor_from(ctx, dt, 2, (const int64_t[]){ROWS, IN}, xv, AMP_F32);
    amp_tensor *w = amp_tensor_from(ctx, dt, 2, (const int64_t[]){OUT, IN}, wv, AMP_F32);
    amp_tensor *b = amp_tensor_from(ctx, dt, 1, (const int64_t[]){OUT}, bv, AMP_F32);
    amp_tensor *r = amp_tensor_from(ctx, dt, 2, (const int64_t[]){ROWS, OUT}, rv, AMP_F32);
    bool ok = x && w && b && r;
    if (ok) amp_tensor_set_requires_grad(b, true);
    for (int pass = 0; ok && pass < 2; pass++) {
        amp_tensor *loss = amp_sum_all(ctx, amp_mul(ctx, amp_linear(ctx, x, w, b), r));
        ok = loss && amp_backward(ctx, loss, NULL) == AMP_OK && b->grad &&
             amp_tensor_read(b->grad, out + pass * OUT, AMP_F32) == AMP_OK;
    }
    amp_set_num_threads(0);
    amp_ctx_free(ctx);
    return ok;
}

void test_threads_linear_bias(void) {
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    for (int d = 0; d < 2; d++) {
        float a[2 * 700], b[2 * 700];
        if (!CHECK_MSG(run_linear_bias(1, dts[d], a) && run_linear_bias(3, dts[d], b), "linear bias %s failed to run",
                       amp_dtype_name(dts[d])))
            continue;
        int bad = 0;
        for (int i = 0; i < 2 * 700; i++) bad += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
        CHECK_MSG(bad == 0, "linear bias gradient %s: %d of 1400 values differ between 1 and 3 threads",
                  amp_dtype_name(dts[d]), bad);
    }
}
