/* amp_lstm_sequence (the lstm model's fused T-step LSTM, src/ops/lstm_sequence.c) against its reference twin:
 * T amp_lstm_cell calls on the same values, forward outputs and every gradient, in f32, f16 and bf16.
 *
 * The forward pass is the same arithmetic: h must match bit for bit. Gradient tolerances, normwise
 * (max |a - b| against max |reference| of the whole tensor; measured worst in parentheses): f32 2e-6
 * (3e-7), the fp32 sums in another order (the weight gradients summed over time inside one GEMM instead of T
 * accumulations); f16 and bf16 8 units of their roundoff 2^-11, 2^-8 (2.4 u), because the cell chain
 * also rounds each step's hidden-state gradient and each weight-gradient accumulation to the dtype
 * while the sequence keeps them in fp32 until the end. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "amp/gemm.h"
#include "amp/threads.h"
#include "../src/core/parallel.h"
#include "../src/ops/op_util.h"
#include "harness.h"
#include "tests.h"

static float urand(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)(*s >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

static amp_tensor *leaf(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape, const float *v) {
    amp_tensor *t = amp_tensor_from(ctx, dt, ndim, shape, v, AMP_F32);
    if (t) amp_tensor_set_requires_grad(t, true);
    return t;
}

/* normwise difference of n values of tensors a and b (read as fp32) */
static double rel_diff(const amp_tensor *a, const amp_tensor *b, float *ta, float *tb, int64_t n) {
    if (!a || !b || amp_tensor_read(a, ta, AMP_F32) != AMP_OK || amp_tensor_read(b, tb, AMP_F32) != AMP_OK) return INFINITY;
    double d = 0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)ta[i] - (double)tb[i]));
        m = fmax(m, fabs((double)tb[i]));
    }
    return d / m;
}

static void check_shape_dtype(int64_t B, int64_t T, int64_t I, int64_t H, amp_dtype dt, double tol) {
    const int64_t G = 4 * H;
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    float *xv = malloc(sizeof(float) * (size_t)(B * T * I)), *rv = malloc(sizeof(float) * (size_t)(B * T * H));
    float *wi = malloc(sizeof(float) * (size_t)(G * I)), *wh = malloc(sizeof(float) * (size_t)(G * H));
    float *bi = malloc(sizeof(float) * (size_t)G), *bh = malloc(sizeof(float) * (size_t)G);
    float *xt = malloc(sizeof(float) * (size_t)(B * I)), *rt = malloc(sizeof(float) * (size_t)(B * H));
    float *ta = malloc(sizeof(float) * (size_t)(B * T * (I > H ? I : H) + G * (I > H ? I : H)));
    float *tb = malloc(sizeof(float) * (size_t)(B * T * (I > H ? I : H) + G * (I > H ? I : H)));
    if (!CHECK(xv && rv && wi && wh && bi && bh && xt && rt && ta && tb)) goto out;
    uint64_t s = 0x1234567ull + (uint64_t)(B * 1000 + T * 100 + I * 10 + H);
    const float wr = 1.0f / sqrtf((float)H);
    for (int64_t i = 0; i < B * T * I; i++) xv[i] = urand(&s);
    for (int64_t i = 0; i < B * T * H; i++) rv[i] = urand(&s);
    for (int64_t i = 0; i < G * I; i++) wi[i] = wr * urand(&s);
    for (int64_t i = 0; i < G * H; i++) wh[i] = wr * urand(&s);
    for (int64_t i = 0; i < G; i++) bi[i] = wr * urand(&s), bh[i] = wr * urand(&s);

    /* the sequence */
    amp_tensor *X = leaf(ctx, dt, 3, (const int64_t[]){B, T, I}, xv);
    amp_tensor *Wi = leaf(ctx, dt, 2, (const int64_t[]){G, I}, wi), *Wh = leaf(ctx, dt, 2, (const int64_t[]){G, H}, wh);
    amp_tensor *Bi = leaf(ctx, dt, 1, (const int64_t[]){G}, bi), *Bh = leaf(ctx, dt, 1, (const int64_t[]){G}, bh);
    amp_tensor *R = amp_tensor_from(ctx, dt, 3, (const int64_t[]){B, T, H}, rv, AMP_F32);
    amp_tensor *out = amp_lstm_sequence(ctx, X, Wi, Wh, Bi, Bh);
    amp_tensor *loss = out ? amp_sum_all(ctx, amp_mul(ctx, out, R)) : NULL;
    if (!CHECK_MSG(loss && amp_backward_scaled(ctx, loss, 1.0f) == AMP_OK, "sequence: %s", amp_ctx_error(ctx))) goto out;
    CHECK(out->op == AMP_OP_LSTM_CELL && out->compute_dtype == dt);

    /* the twin: T cells, x_t and r_t copied out of the same values */
    amp_tensor *Wi2 = leaf(ctx, dt, 2, (const int64_t[]){G, I}, wi), *Wh2 = leaf(ctx, dt, 2, (const int64_t[]){G, H}, wh);
    amp_tensor *Bi2 = leaf(ctx, dt, 1, (const int64_t[]){G}, bi), *Bh2 = leaf(ctx, dt, 1, (const int64_t[]){G}, bh);
    amp_tensor *h = amp_tensor_zeros(ctx, dt, 2, (const int64_t[]){B, H}), *c = amp_tensor_zeros(ctx, dt, 2, (const int64_t[]){B, H});
    amp_tensor *xs[64], *hs[64], *total = NULL;
    for (int64_t t = 0; t < T; t++) {
        for (int64_t b = 0; b < B; b++) {
            for (int64_t i = 0; i < I; i++) xt[b * I + i] = xv[(b * T + t) * I + i];
            for (int64_t j = 0; j < H; j++) rt[b * H + j] = rv[(b * T + t) * H + j];
        }
        xs[t] = leaf(ctx, dt, 2, (const int64_t[]){B, I}, xt);
        amp_tensor *rtt = amp_tensor_from(ctx, dt, 2, (const int64_t[]){B, H}, rt, AMP_F32);
        amp_tensor *hn = NULL, *cn = NULL;
        if (!CHECK(amp_lstm_cell(ctx, xs[t], h, c, Wi2, Wh2, Bi2, Bh2, &hn, &cn) == AMP_OK)) goto out;
        h = hs[t] = hn, c = cn;
        amp_tensor *term = amp_sum_all(ctx, amp_mul(ctx, hn, rtt));
        total = total ? amp_add(ctx, total, term) : term;
    }
    if (!CHECK_MSG(total && amp_backward_scaled(ctx, total, 1.0f) == AMP_OK, "cells: %s", amp_ctx_error(ctx))) goto out;

    /* h_t against out[:, t, :], dx_t against dX[:, t, :] */
    double dh = 0, dx = 0;
    for (int64_t t = 0; t < T; t++) {
        float *ho = ta, *hc = tb;
        if (amp_tensor_read(out, ho, AMP_F32) != AMP_OK || amp_tensor_read(hs[t], hc, AMP_F32) != AMP_OK) dh = INFINITY;
        double d = 0, m = 1e-30;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < H; j++) {
                d = fmax(d, fabs((double)ho[(b * T + t) * H + j] - (double)hc[b * H + j]));
                m = fmax(m, fabs((double)hc[b * H + j]));
            }
        dh = fmax(dh, d / m);
    }
    {
        float *gx = ta, *gt = tb;
        double d = 0, m = 1e-30;
        if (!X->grad || amp_tensor_read(X->grad, gx, AMP_F32) != AMP_OK) d = INFINITY;
        for (int64_t t = 0; t < T && isfinite(d); t++) {
            if (!xs[t]->grad || amp_tensor_read(xs[t]->grad, gt, AMP_F32) != AMP_OK) { d = INFINITY; break; }
            for (int64_t b = 0; b < B; b++)
                for (int64_t i = 0; i < I; i++) {
                    d = fmax(d, fabs((double)gx[(b * T + t) * I + i] - (double)gt[b * I + i]));
                    m = fmax(m, fabs((double)gt[b * I + i]));
                }
        }
        dx = d / m;
    }
    const double dwi = rel_diff(Wi->grad, Wi2->grad, ta, tb, G * I), dwh = rel_diff(Wh->grad, Wh2->grad, ta, tb, G * H);
    const double dbi = rel_diff(Bi->grad, Bi2->grad, ta, tb, G), dbh = rel_diff(Bh->grad, Bh2->grad, ta, tb, G);
    CHECK_MSG(dh == 0 && dx <= tol && dwi <= tol && dwh <= tol && dbi <= tol && dbh <= tol,
              "lstm_sequence %s B=%lld T=%lld I=%lld H=%lld vs cells: h %.3g dx %.3g dW_ih %.3g dW_hh %.3g db %.3g %.3g "
              "(tol %.3g)",
              amp_dtype_name(dt), (long long)B, (long long)T, (long long)I, (long long)H, dh, dx, dwi, dwh, dbi, dbh, tol);
out:
    free(xv), free(rv), free(wi), free(wh), free(bi), free(bh), free(xt), free(rt), free(ta), free(tb);
    amp_ctx_free(ctx);
}

/* The backward's gradient routes (lstm_sequence_backward.c: the combined [dW_ih | dW_hh] product sent to two sinks, a
 * weight gradient alone, dX inside or outside the recurrence, a gradient that already exists): with
 * a subset of x, w_ih, w_hh requiring grad, each gradient bit for bit that of the run where all do;
 * a second backward into existing gradients gives exactly twice the first. */
static void check_grad_routes(int64_t B, int64_t T, int64_t I, int64_t H, amp_dtype dt) {
    const int64_t G = 4 * H, n[3] = {B * T * I, G * I, G * H};
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    float *v[3], *ref[3], *got = malloc(sizeof(float) * (size_t)(n[0] + n[1] + n[2]));
    float *rv = malloc(sizeof(float) * (size_t)(B * T * H));
    uint64_t s = 0x9876543ull + (uint64_t)(B * 1000 + T * 100 + I * 10 + H);
    for (int k = 0; k < 3; k++) {
        v[k] = malloc(sizeof(float) * (size_t)n[k]), ref[k] = malloc(sizeof(float) * (size_t)n[k]);
        for (int64_t i = 0; v[k] && i < n[k]; i++) v[k][i] = (k ? 0.5f : 1.0f) * urand(&s);
    }
    for (int64_t i = 0; rv && i < B * T * H; i++) rv[i] = urand(&s);
    if (!CHECK(got && rv && v[0] && v[1] && v[2] && ref[0] && ref[1] && ref[2])) goto out;
    const int64_t *shape[3] = {(const int64_t[]){B, T, I}, (const int64_t[]){G, I}, (const int64_t[]){G, H}};
    const int masks[5] = {7, 6, 2, 4, 7}; /* bit k: input k requires grad; the last: backward twice */
    for (int m = 0; m < 5; m++) {
        amp_tensor *in[3];
        for (int k = 0; k < 3; k++) {
            in[k] = amp_tensor_from(ctx, dt, k ? 2 : 3, shape[k], v[k], AMP_F32);
            if (in[k] && (masks[m] >> k & 1)) amp_tensor_set_requires_grad(in[k], true);
        }
        amp_tensor *R = amp_tensor_from(ctx, dt, 3, (const int64_t[]){B, T, H}, rv, AMP_F32);
        for (int pass = 0; pass < (m == 4 ? 2 : 1); pass++) {
            amp_tensor *out = amp_lstm_sequence(ctx, in[0], in[1], in[2], NULL, NULL);
            amp_tensor *loss = out ? amp_sum_all(ctx, amp_mul(ctx, out, R)) : NULL;
            if (!CHECK_MSG(loss && amp_backward_scaled(ctx, loss, 1.0f) == AMP_OK, "routes: %s", amp_ctx_error(ctx)))
                goto out;
        }
        for (int k = 0; k < 3; k++) {
            if (!(masks[m] >> k & 1)) continue;
            float *dst = m == 0 ? ref[k] : got;
            if (!CHECK(in[k]->grad && amp_tensor_read(in[k]->grad, dst, AMP_F32) == AMP_OK)) goto out;
            if (m == 0) continue;
            int64_t bad = 0;
            for (int64_t i = 0; i < n[k]; i++) bad += got[i] != (m == 4 ? 2.0f * ref[k][i] : ref[k][i]);
            CHECK_MSG(bad == 0, "%s B=%lld T=%lld I=%lld H=%lld mask %d: gradient of input %d differs in %lld elements",
                      amp_dtype_name(dt), (long long)B, (long long)T, (long long)I, (long long)H, masks[m], k,
                      (long long)bad);
        }
    }
out:
    for (int k = 0; k < 3; k++) free(v[k]), free(ref[k]);
    free(got), free(rv);
    amp_ctx_free(ctx);
}

/* One run of the sequence with biases, every input requiring grad (or, with_grad false, the forward
 * alone), at `threads` threads: out, then the gradients of x, w_ih, w_hh, b_ih, b_hh, as fp32 into v. */
static bool run_at(int threads, int64_t B, int64_t T, int64_t I, int64_t H, amp_dtype dt, bool with_grad, float *v) {
    const int64_t G = 4 * H, n[5] = {B * T * I, G * I, G * H, G, G};
    const int64_t *shape[5] = {(const int64_t[]){B, T, I}, (const int64_t[]){G, I}, (const int64_t[]){G, H},
                               (const int64_t[]){G}, (const int64_t[]){G}};
    amp_ctx *ctx = NULL;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return false;
    amp_set_num_threads(threads);
    bool ok = true;
    uint64_t s = 0x5eed0ull + (uint64_t)(B * 1000 + H);
    amp_tensor *in[5];
    for (int k = 0; k < 5 && ok; k++) {
        float *buf = malloc(sizeof(float) * (size_t)n[k]);
        ok = buf != NULL;
        for (int64_t i = 0; ok && i < n[k]; i++) buf[i] = (k ? 0.3f : 1.0f) * urand(&s);
        in[k] = ok ? amp_tensor_from(ctx, dt, k == 0 ? 3 : k < 3 ? 2 : 1, shape[k], buf, AMP_F32) : NULL;
        if (in[k]) amp_tensor_set_requires_grad(in[k], with_grad);
        ok = ok && in[k];
        free(buf);
    }
    amp_tensor *out = ok ? amp_lstm_sequence(ctx, in[0], in[1], in[2], in[3], in[4]) : NULL;
    ok = out && amp_tensor_read(out, v, AMP_F32) == AMP_OK;
    v += B * T * H;
    if (ok && with_grad) {
        float *r = malloc(sizeof(float) * (size_t)(B * T * H));
        for (int64_t i = 0; r && i < B * T * H; i++) r[i] = urand(&s);
        amp_tensor *R = r ? amp_tensor_from(ctx, dt, 3, (const int64_t[]){B, T, H}, r, AMP_F32) : NULL;
        free(r);
        amp_tensor *loss = R ? amp_sum_all(ctx, amp_mul(ctx, out, R)) : NULL;
        ok = loss && amp_backward_scaled(ctx, loss, 1.0f) == AMP_OK;
        for (int k = 0; k < 5 && ok; v += n[k], k++)
            ok = in[k]->grad && amp_tensor_read(in[k]->grad, v, AMP_F32) == AMP_OK;
    }
    amp_set_num_threads(0);
    amp_ctx_free(ctx);
    return ok;
}

/* The rows of each step's pointwise passes are split between threads (lstm_sequence.c fwd_row, lstm_sequence_backward.c bwd_row), or
 * each thread runs its rows through every step (bwd_lane; fwd_lanes with tokens, check_tokens): every
 * value, forward and backward, must be the one-thread value bit for bit. */
static void check_threads(int64_t B, int64_t T, int64_t I, int64_t H, amp_dtype dt, bool with_grad) {
    const int64_t G = 4 * H, total = B * T * H + B * T * I + G * I + G * H + 2 * G;
    float *a = calloc((size_t)total, sizeof(float)), *b = calloc((size_t)total, sizeof(float));
    if (CHECK(a && b) && CHECK(run_at(1, B, T, I, H, dt, with_grad, a)) &&
        CHECK(run_at(3, B, T, I, H, dt, with_grad, b))) {
        int64_t bad = 0;
        for (int64_t i = 0; i < total; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
        CHECK_MSG(bad == 0, "lstm_sequence %s B=%lld H=%lld%s: %lld values differ between 1 and 3 threads",
                  amp_dtype_name(dt), (long long)B, (long long)H, with_grad ? "" : " (forward only)", (long long)bad);
    }
    free(a), free(b);
}

/* Another user thread owns the thread pool (its job waits for a flag): the backward's lanes are
 * refused (amp_parallel_gang), so it runs its steps the other way, serially, and must still give the
 * one-thread values bit for bit. */
typedef struct pool_holder {
    atomic_int holding, release;
} pool_holder;

static void hold_task(void *arg, int64_t task, int thread_id) {
    (void)thread_id;
    pool_holder *h = arg;
    if (task != 0) return;
    atomic_store(&h->holding, 1);
    while (!atomic_load(&h->release)) sched_yield();
}

static void *hold_pool(void *arg) {
    amp_parallel_for(2, hold_task, arg);
    return NULL;
}

static void check_threads_pool_held(int64_t B, int64_t T, int64_t I, int64_t H, amp_dtype dt) {
    const int64_t G = 4 * H, total = B * T * H + B * T * I + G * I + G * H + 2 * G;
    float *a = calloc((size_t)total, sizeof(float)), *b = calloc((size_t)total, sizeof(float));
    pool_holder h = {0};
    pthread_t th;
    if (!CHECK(a && b) || !CHECK(run_at(1, B, T, I, H, dt, true, a))) goto out;
    amp_set_num_threads(3);
    if (!CHECK(pthread_create(&th, NULL, hold_pool, &h) == 0)) goto out;
    while (!atomic_load(&h.holding)) sched_yield();
    const bool ran = run_at(3, B, T, I, H, dt, true, b);
    atomic_store(&h.release, 1);
    pthread_join(th, NULL);
    amp_set_num_threads(0);
    if (CHECK(ran)) {
        int64_t bad = 0;
        for (int64_t i = 0; i < total; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
        CHECK_MSG(bad == 0, "lstm_sequence %s B=%lld H=%lld, pool held by another thread: %lld values differ",
                  amp_dtype_name(dt), (long long)B, (long long)H, (long long)bad);
    }
out:
    free(a), free(b);
}

/* amp_lstm_sequence_tokens (the embedding folded into the sequence: the input projection of the V
 * embedding rows once, the gradients of W_ih and E from rows of dG summed by token) against its
 * twin, amp_embedding then amp_lstm_sequence, on the same values: dt leaves, or (autocast true) fp32
 * leaves under bf16 autocast as the lstm model runs. h must match bit for bit (the same products and
 * cell), and so must dW_hh (the same dG and product). dW_ih, dE and the biases are sums in another
 * order (the biases as column sums of the per-token sums); for a narrow dt dW_ih and dE also read dG
 * before its rounding and dE skips dx's, so the tolerance is that of the cells, normwise. V < B*T and
 * the tokens drawn from a few values so that rows repeat. A third run, the tokens path at 3 threads,
 * must give the one-thread values bit for bit (output and every gradient). */
static void check_tokens(int64_t B, int64_t T, int64_t V, int64_t I, int64_t H, amp_dtype dt, bool autocast,
                         double tol) {
    const int64_t G = 4 * H, R = B * T, n[5] = {V * I, G * I, G * H, G, G};
    const int64_t *shape[5] = {(const int64_t[]){V, I}, (const int64_t[]){G, I}, (const int64_t[]){G, H},
                               (const int64_t[]){G}, (const int64_t[]){G}};
    const amp_dtype leaf_dt = autocast ? AMP_F32 : dt;
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    float *v[5] = {0}, *rv = malloc(sizeof(float) * (size_t)(R * H));
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)R);
    int64_t big = R * H > G * H ? R * H : G * H;
    if (V * I > big) big = V * I;
    if (G * I > big) big = G * I;
    float *ta = malloc(sizeof(float) * (size_t)big), *tb = malloc(sizeof(float) * (size_t)big);
    uint64_t s = 0x70c3ull + (uint64_t)(B * 1000 + T * 100 + V * 10 + H);
    bool ok = rv && tok && ta && tb;
    for (int k = 0; k < 5 && ok; k++) {
        ok = (v[k] = malloc(sizeof(float) * (size_t)n[k])) != NULL;
        for (int64_t i = 0; ok && i < n[k]; i++) v[k][i] = (k ? 0.5f : 1.0f) * urand(&s);
    }
    for (int64_t i = 0; ok && i < R * H; i++) rv[i] = urand(&s);
    for (int64_t r = 0; ok && r < R; r++) tok[r] = (int32_t)((urand(&s) + 1.0f) * 0.5f * (float)V) % (int32_t)V;
    if (!CHECK(ok)) goto out;
    if (autocast) amp_autocast_enter(dt);
    amp_tensor *p[3][5], *outs[3];
    for (int w = 0; w < 3; w++) {
        amp_set_num_threads(w == 2 ? 3 : 1);
        for (int k = 0; k < 5; k++) p[w][k] = leaf(ctx, leaf_dt, k > 2 ? 1 : 2, shape[k], v[k]);
        amp_tensor *x = w == 1 ? amp_embedding(ctx, p[w][0], tok, 2, (const int64_t[]){B, T}) : NULL;
        outs[w] = w == 1 ? (x ? amp_lstm_sequence(ctx, x, p[w][1], p[w][2], p[w][3], p[w][4]) : NULL)
                    : amp_lstm_sequence_tokens(ctx, p[w][0], tok, B, T, p[w][1], p[w][2], p[w][3], p[w][4]);
        amp_tensor *rt = amp_tensor_from(ctx, outs[w] ? outs[w]->dtype : dt, 3, (const int64_t[]){B, T, H}, rv, AMP_F32);
        amp_tensor *loss = outs[w] && rt ? amp_sum_all(ctx, amp_mul(ctx, outs[w], rt)) : NULL;
        if (!CHECK_MSG(loss && amp_backward_scaled(ctx, loss, 1.0f) == AMP_OK, "tokens %d: %s", w, amp_ctx_error(ctx)))
            break;
    }
    amp_set_num_threads(0);
    if (autocast) amp_autocast_exit();
    if (ctx->status != AMP_OK) goto out;
    int64_t bad_threads = 0;
    for (int k = -1; k < 5; k++) { /* k = -1: the output */
        const amp_tensor *a = k < 0 ? outs[0] : p[0][k]->grad, *b = k < 0 ? outs[2] : p[2][k]->grad;
        const int64_t cnt = k < 0 ? R * H : n[k];
        if (!CHECK(a && b && amp_tensor_read(a, ta, AMP_F32) == AMP_OK && amp_tensor_read(b, tb, AMP_F32) == AMP_OK))
            goto out;
        for (int64_t i = 0; i < cnt; i++) bad_threads += memcmp(&ta[i], &tb[i], sizeof *ta) != 0;
    }
    CHECK_MSG(bad_threads == 0, "lstm_sequence_tokens %s B=%lld H=%lld: %lld values differ between 1 and 3 threads",
              amp_dtype_name(dt), (long long)B, (long long)H, (long long)bad_threads);
    CHECK(outs[0]->op == AMP_OP_LSTM_CELL && outs[0]->compute_dtype == dt);
    int64_t bad_h = 0, bad_wh = 0;
    if (!CHECK(amp_tensor_read(outs[0], ta, AMP_F32) == AMP_OK && amp_tensor_read(outs[1], tb, AMP_F32) == AMP_OK))
        goto out;
    for (int64_t i = 0; i < R * H; i++) bad_h += memcmp(&ta[i], &tb[i], sizeof *ta) != 0;
    if (!CHECK(p[0][2]->grad && p[1][2]->grad && amp_tensor_read(p[0][2]->grad, ta, AMP_F32) == AMP_OK &&
               amp_tensor_read(p[1][2]->grad, tb, AMP_F32) == AMP_OK))
        goto out;
    for (int64_t i = 0; i < G * H; i++) bad_wh += memcmp(&ta[i], &tb[i], sizeof *ta) != 0;
    const double de = rel_diff(p[0][0]->grad, p[1][0]->grad, ta, tb, n[0]);
    const double dwi = rel_diff(p[0][1]->grad, p[1][1]->grad, ta, tb, n[1]);
    const double dbi = rel_diff(p[0][3]->grad, p[1][3]->grad, ta, tb, G), dbh = rel_diff(p[0][4]->grad, p[1][4]->grad, ta, tb, G);
    CHECK_MSG(bad_h == 0 && bad_wh == 0 && de <= tol && dwi <= tol && dbi <= tol && dbh <= tol,
              "lstm_sequence_tokens %s%s B=%lld T=%lld V=%lld I=%lld H=%lld vs embedding + sequence: h %lld and dW_hh "
              "%lld values differ; dE %.3g dW_ih %.3g db %.3g %.3g (tol %.3g)",
              amp_dtype_name(dt), autocast ? " (autocast)" : "", (long long)B, (long long)T, (long long)V, (long long)I,
              (long long)H, (long long)bad_h, (long long)bad_wh, de, dwi, dbi, dbh, tol);
out:
    for (int k = 0; k < 5; k++) free(v[k]);
    free(rv), free(tok), free(ta), free(tb);
    amp_ctx_free(ctx);
}

/* Bad tokens and shapes: an error that names them, nothing recorded. */
static void check_tokens_errors(void) {
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    amp_tensor *e = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){5, 3});
    amp_tensor *wi = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){8, 3});
    amp_tensor *wh = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){8, 2});
    const int32_t good[4] = {0, 4, 1, 2}, bad[4] = {0, 4, 5, 2};
    CHECK(amp_lstm_sequence_tokens(ctx, e, good, 2, 2, wi, wh, NULL, NULL) != NULL);
    CHECK(amp_lstm_sequence_tokens(ctx, e, bad, 2, 2, wi, wh, NULL, NULL) == NULL &&
          strstr(amp_ctx_error(ctx), "token 5 (position 2) is out of range [0, 5)"));
    amp_ctx_clear_error(ctx);
    CHECK(amp_lstm_sequence_tokens(ctx, e, NULL, 2, 2, wi, wh, NULL, NULL) == NULL && amp_ctx_status(ctx) != AMP_OK);
    amp_ctx_clear_error(ctx);
    CHECK(amp_lstm_sequence_tokens(ctx, e, good, 0, 2, wi, wh, NULL, NULL) == NULL && amp_ctx_status(ctx) != AMP_OK);
    amp_ctx_clear_error(ctx);
    CHECK(amp_lstm_sequence_tokens(ctx, wi, good, 2, 2, e, wh, NULL, NULL) == NULL &&
          strstr(amp_ctx_error(ctx), "w_ih"));
    amp_ctx_free(ctx);
}

void test_lstm_sequence(void) {
    check_tokens_errors();
    {
        const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
        const double tol[3] = {2e-6, 8 * 0x1p-11, 8 * 0x1p-8};
        for (int d = 0; d < 3; d++) {
            check_tokens(3, 5, 4, 6, 4, dts[d], false, tol[d]);
            check_tokens(32, 4, 7, 5, 40, dts[d], false, tol[d]);
            check_tokens(13, 3, 9, 5, 272, dts[d], false, tol[d]);
            check_tokens(2, 1, 3, 3, 5, dts[d], false, tol[d]); /* one step */
        }
        /* H over the fp32 k block of every path (512): W_hh's product runs in two k blocks, so the
         * looked-up rows are copied into the gates for it to add (on the reference path, whose k block
         * is 256, also H = 272 above) */
        check_tokens(3, 3, 5, 4, 520, AMP_F32, false, tol[0]);
        check_tokens(32, 4, 7, 64, 64, AMP_BF16, true, tol[2]);
        check_tokens(32, 4, 7, 64, 64, AMP_F16, true, tol[1]);
    }
    for (int g = 0; g < 2; g++) {
        check_threads(7, 4, 5, 40, AMP_F32, g);
        check_threads(7, 4, 5, 40, AMP_BF16, g);
        check_threads(32, 3, 6, 64, AMP_F32, g);
        check_threads(32, 3, 6, 64, AMP_BF16, g);
        /* [W_ih | W_hh] 96 wide: the backward's product on the 8-row kernel where the path has one
         * (AVX-512: bf16 pairs, and fp32's fed by f16 decoded), so its rows split into lanes at 3
         * threads (lstm_sequence_backward.c bwd_lane), dx_t rows included */
        check_threads(32, 3, 32, 64, AMP_BF16, g);
        /* f16 (and bf16 on a path without the fused bf16 cell): the composed cell's rows split between
         * the threads too, each thread with its own row temporaries */
        check_threads(32, 3, 32, 64, AMP_F16, g);
        /* bf16 under the FMA method (bf16 decoded to fp32 while packing, the 8-row fp32 kernel): the
         * default on cores whose VDPBF16PS is slower than their FMA */
        const amp_gemm_bf16_method method = amp_gemm_bf16_method_active();
        if (method != AMP_GEMM_BF16_FMA && amp_gemm_bf16_method_set(AMP_GEMM_BF16_FMA) == AMP_OK) {
            check_threads(32, 3, 6, 64, AMP_BF16, g);
            check_threads(32, 3, 32, 64, AMP_BF16, g);
            amp_gemm_bf16_method_set(method);
        }
    }
    check_threads_pool_held(32, 3, 32, 64, AMP_BF16);
    check_grad_routes(4, 9, 7, 16, AMP_F32);
    check_grad_routes(4, 9, 7, 16, AMP_BF16);
    check_grad_routes(32, 3, 5, 40, AMP_F32);
    check_grad_routes(32, 3, 5, 40, AMP_BF16);
    const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
    const double tol[3] = {2e-6, 8 * 0x1p-11, 8 * 0x1p-8};
    for (int d = 0; d < 3; d++) {
        check_shape_dtype(3, 5, 6, 4, dts[d], tol[d]);
        check_shape_dtype(4, 9, 7, 16, dts[d], tol[d]);
        check_shape_dtype(2, 1, 3, 5, dts[d], tol[d]); /* one step: no recurrent GEMM */
        /* 4H = 1088 is over every path's k block (fp32 512, bf16 pairs 1024): the recurrent products
         * with W_hh packed once (dh_{t-1} = dG_t W_hh has k = 4H) add several blocks as amp_gemm does */
        check_shape_dtype(13, 3, 5, 272, dts[d], tol[d]);
        /* B near 32 rows: the recurrent products run transposed (C^T = W X^T, ukernel_ct) from
         * k = 128 (the first: the backward's k = 4H = 160, one k block; the second: several), direct
         * below it (k = I = 5, the forward's k = H = 40) */
        check_shape_dtype(32, 3, 5, 40, dts[d], tol[d]);
        check_shape_dtype(31, 3, 5, 272, dts[d], tol[d]);
    }
}
