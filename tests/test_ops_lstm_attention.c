/* The fused LSTM cell and causal attention against double-precision references written here
 * (gradcheck.h, f32, f16 and bf16), plus the causal property, the op/compute_dtype fields and the
 * shape errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "harness.h"
#include "tests.h"

/* A gradcheck input: rank n, then the dims; values in [-1, 1] (designated, so clang's
 * -Wmissing-field-initializers stays quiet). */
#define IN(n, ...) {.ndim = (n), .shape = {__VA_ARGS__}}

/* gradcheck_run_all_dtypes with one factor for f32 and another for f16 and bf16: in f32 the error
 * is not a rounding to the dtype but the fp32 arithmetic inside the op (sums, expf, tanhf,
 * cancellations), a larger multiple of the tiny fp32 u than the dtype roundings are of u16 or u_bf16. */
static void run_all_dtypes(gradcheck c, double f32_factor, double low_factor) {
    c.rtol_factor = c.atol_factor = f32_factor;
    gradcheck_run(&c, AMP_F32);
    c.rtol_factor = c.atol_factor = low_factor;
    gradcheck_run(&c, AMP_F16);
    gradcheck_run(&c, AMP_BF16);
}

/* ---- LSTM cell: B = 2, I = 3, H = 4, and a larger B = 3, I = 9, H = 8 ---- */

enum { LB = 2, LI = 3, LH = 4, LG = 4 * LH, LMAX_B = 4, LMAX_H = 8 };

typedef struct {
    int which;     /* 0: h', 1: c', 2: concat(h', c') along dim 1, 3: two steps, concat(h'', c'') */
    bool bias;     /* inputs 5 and 6 are b_ih, b_hh */
    int B, I, H;   /* B <= LMAX_B, H <= LMAX_H */
} lstm_user;

static amp_tensor *build_lstm(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    const lstm_user *u = user;
    amp_tensor *b_ih = u->bias ? in[5] : NULL, *b_hh = u->bias ? in[6] : NULL;
    amp_tensor *hn = NULL, *cn = NULL;
    if (amp_lstm_cell(ctx, in[0], in[1], in[2], in[3], in[4], b_ih, b_hh, &hn, &cn) != AMP_OK) return NULL;
    if (u->which == 3) { /* the same x and weights again, from the first step's state */
        amp_tensor *h1 = hn, *c1 = cn;
        if (amp_lstm_cell(ctx, in[0], h1, c1, in[3], in[4], b_ih, b_hh, &hn, &cn) != AMP_OK) return NULL;
    }
    if (u->which == 0) return hn;
    if (u->which == 1) return cn;
    amp_tensor *both[2] = {hn, cn};
    return amp_concat(ctx, both, 2, 1);
}

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

/* One step in double: x [B, I], h and c [B, H], weights [4H, I] and [4H, H], biases [4H] or NULL. */
static void lstm_step_ref(const lstm_user *u, const double *x, const double *h, const double *c, const double *w_ih,
                          const double *w_hh, const double *b_ih, const double *b_hh, double *h_out, double *c_out) {
    const int I = u->I, H = u->H;
    for (int b = 0; b < u->B; b++) {
        double gates[4 * LMAX_H];
        for (int r = 0; r < 4 * H; r++) {
            double s = (b_ih ? b_ih[r] : 0.0) + (b_hh ? b_hh[r] : 0.0);
            for (int p = 0; p < I; p++) s += x[b * I + p] * w_ih[r * I + p];
            for (int p = 0; p < H; p++) s += h[b * H + p] * w_hh[r * H + p];
            gates[r] = s;
        }
        for (int j = 0; j < H; j++) {
            const double i = sigmoid_d(gates[j]), f = sigmoid_d(gates[H + j]), g = tanh(gates[2 * H + j]),
                         o = sigmoid_d(gates[3 * H + j]);
            const double cn = f * c[b * H + j] + i * g;
            c_out[b * H + j] = cn;
            h_out[b * H + j] = o * tanh(cn);
        }
    }
}

static void ref_lstm(const double *const *in, double *out, const void *user) {
    const lstm_user *u = user;
    const int B = u->B, H = u->H;
    const double *b_ih = u->bias ? in[5] : NULL, *b_hh = u->bias ? in[6] : NULL;
    double h1[LMAX_B * LMAX_H], c1[LMAX_B * LMAX_H], h2[LMAX_B * LMAX_H], c2[LMAX_B * LMAX_H];
    lstm_step_ref(u, in[0], in[1], in[2], in[3], in[4], b_ih, b_hh, h1, c1);
    const double *hn = h1, *cn = c1;
    if (u->which == 3) {
        lstm_step_ref(u, in[0], h1, c1, in[3], in[4], b_ih, b_hh, h2, c2);
        hn = h2, cn = c2;
    }
    if (u->which == 0) memcpy(out, hn, (size_t)(B * H) * sizeof *out);
    if (u->which == 1) memcpy(out, cn, (size_t)(B * H) * sizeof *out);
    if (u->which >= 2)
        for (int b = 0; b < B; b++)
            for (int j = 0; j < 2 * H; j++) out[b * 2 * H + j] = j < H ? hn[b * H + j] : cn[b * H + j - H];
}

void test_ops_lstm_cell(void) {
    const lstm_user users[] = {{0, true, LB, LI, LH},  {1, true, LB, LI, LH}, {2, true, LB, LI, LH},
                               {2, false, LB, LI, LH}, {3, true, LB, LI, LH}, {2, true, 3, 9, 8}};
    const char *names[] = {"lstm h'",        "lstm c'",        "lstm h'+c'", "lstm h'+c' no bias, no h/c grad",
                           "lstm two steps", "lstm B=3 I=9 H=8"};
    for (size_t v = 0; v < sizeof users / sizeof users[0]; v++) {
        /* Tolerance factors, in units of the dtype's roundoff u (in parentheses the worst case
         * measured over 1000 seeds on each GEMM path, ref, avx2 and avx512).
         * bf16 (8, two steps 12; measured 3.2 and 4.6): h' and c' are rounded once from fp32
         * gate math (~0.5 u); backward rounds the gate gradient once to the compute dtype for the
         * GEMMs (as matmul's backward reads its gradient), sums 4H (dx, dh) or B (dW) products in
         * fp32, terms that can cancel, and rounds the result once; the bias gradients are fp32 sums
         * of the unrounded gate gradient. Two steps feed the rounded h', c' and a rounded dh', dc'
         * through a second cell.
         * f16 (32, two steps 48; measured up to 15 over 300 seeds on each path, where 8 failed 4% of
         * the seeds): as bf16, and the saved activations are bf16 whatever the dtype (act16,
         * src/ops/lstm_cell.c: f16's range would flush small gates under loss scaling), so their 2^-8 =
         * 8 u16 relative error enters each gate gradient, and dx, dh sum 4H such terms that can cancel.
         * f32 (32; measured 10.2 forward, 8.6 backward): no rounding to the dtype dominates but the
         * fp32 arithmetic itself: a gate is an fp32 sum of I + H + 2 terms of up to 1 (error ~ that
         * many u times their absolute sum, against |h'| < 1), and the sigmoid derivative s (1 - s)
         * from the saved s loses log2(1 / (1 - s)) bits to cancellation, on top of expf/tanhf's own
         * ulp errors.
         * The larger shape draws weights in [-0.35, 0.35] (PyTorch's init is U(-1/sqrt(H), 1/sqrt(H))),
         * so its gates stay in the same range. */
        const lstm_user *u = &users[v];
        const int G = 4 * u->H;
        const bool large = u->I > LI;
        const float wr = large ? 0.35f : 0.0f; /* 0: the default [-1, 1] */
        gradcheck c = {.name = names[v],
                       .n_inputs = u->bias ? 7 : 5,
                       .inputs = {IN(2, u->B, u->I), IN(2, u->B, u->H), IN(2, u->B, u->H),
                                  {.ndim = 2, .shape = {G, u->I}, .lo = -wr, .hi = wr},
                                  {.ndim = 2, .shape = {G, u->H}, .lo = -wr, .hi = wr}, IN(1, G), IN(1, G)},
                       .build = build_lstm,
                       .reference = ref_lstm,
                       .user = u};
        /* the usual zero initial state: no gradient for h and c (backward skips them) */
        c.inputs[1].no_grad = c.inputs[2].no_grad = !u->bias;
        const double steps = u->which == 3 ? 1.5 : 1.0;
        c.rtol_factor = c.atol_factor = 32;
        gradcheck_run(&c, AMP_F32);
        c.rtol_factor = c.atol_factor = 32 * steps;
        gradcheck_run(&c, AMP_F16);
        c.rtol_factor = c.atol_factor = 8 * steps;
        gradcheck_run(&c, AMP_BF16);
    }
}

/* Output fields, mixed dtypes, grad mode off, and argument errors. */
void test_ops_lstm_cell_api(void) {
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    const int64_t sx[2] = {LB, LI}, sh[2] = {LB, LH}, swi[2] = {LG, LI}, swh[2] = {LG, LH}, sb[1] = {LG};
    amp_tensor *x = amp_tensor_zeros(ctx, AMP_F16, 2, sx), *h = amp_tensor_zeros(ctx, AMP_F16, 2, sh);
    amp_tensor *c = amp_tensor_zeros(ctx, AMP_F16, 2, sh), *wi = amp_tensor_zeros(ctx, AMP_F16, 2, swi);
    amp_tensor *wh = amp_tensor_zeros(ctx, AMP_F16, 2, swh), *bi = amp_tensor_zeros(ctx, AMP_F16, 1, sb);
    amp_tensor *bh = amp_tensor_zeros(ctx, AMP_BF16, 1, sb), *wi32 = amp_tensor_zeros(ctx, AMP_F32, 2, swi);
    amp_tensor *hn = NULL, *cn = NULL;

    /* all f16: computes and returns f16; zero inputs give c' = 0 and h' = 0 */
    CHECK_EQ_INT(amp_lstm_cell(ctx, x, h, c, wi, wh, bi, NULL, &hn, &cn), AMP_OK);
    if (CHECK(hn && cn)) {
        CHECK_EQ_INT(hn->op, AMP_OP_LSTM_CELL);
        CHECK_EQ_INT(cn->op, AMP_OP_LSTM_CELL);
        CHECK_EQ_INT(hn->compute_dtype, AMP_F16);
        CHECK_EQ_INT(cn->dtype, AMP_F16);
        CHECK_EQ_INT(hn->ndim, 2);
        CHECK_EQ_INT(hn->shape[0], LB);
        CHECK_EQ_INT(hn->shape[1], LH);
        CHECK(amp_tensor_is_contiguous(hn) && amp_tensor_is_contiguous(cn));
        CHECK(!hn->requires_grad && !hn->is_leaf);
        CHECK(amp_tensor_get(hn, 0) == 0.0f && amp_tensor_get(cn, LB * LH - 1) == 0.0f);
    }
    /* f16 with a bf16 bias (and an f32 weight) promotes to f32 */
    CHECK_EQ_INT(amp_lstm_cell(ctx, x, h, c, wi, wh, bi, bh, &hn, &cn), AMP_OK);
    if (CHECK(hn && cn)) CHECK(hn->compute_dtype == AMP_F32 && cn->dtype == AMP_F32);
    CHECK_EQ_INT(amp_lstm_cell(ctx, x, h, c, wi32, wh, NULL, NULL, &hn, &cn), AMP_OK);
    if (CHECK(hn)) CHECK_EQ_INT(hn->compute_dtype, AMP_F32);
    /* grad mode off: nothing recorded, fields still set */
    amp_tensor_set_requires_grad(wi, true);
    bool was = amp_set_grad_enabled(ctx, false);
    CHECK_EQ_INT(amp_lstm_cell(ctx, x, h, c, wi, wh, NULL, NULL, &hn, &cn), AMP_OK);
    if (CHECK(hn && cn)) CHECK(hn->op == AMP_OP_LSTM_CELL && !hn->requires_grad && !hn->grad_fn && !cn->grad_fn);
    amp_set_grad_enabled(ctx, was);
    CHECK_EQ_INT(amp_lstm_cell(ctx, x, h, c, wi, wh, NULL, NULL, &hn, &cn), AMP_OK);
    if (CHECK(hn && cn)) CHECK(hn->requires_grad && cn->requires_grad && hn->grad_fn && cn->grad_fn);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_OK);

    /* shape errors: each returns the status, records it, and leaves the outputs NULL */
    const int64_t bad_h[2] = {LB, LH + 1}, bad_b[1] = {LG - 1}, bad_x[2] = {LB + 1, LI};
    amp_tensor *hbad = amp_tensor_zeros(ctx, AMP_F16, 2, bad_h), *bbad = amp_tensor_zeros(ctx, AMP_F16, 1, bad_b);
    amp_tensor *xbad = amp_tensor_zeros(ctx, AMP_F16, 2, bad_x);
    struct {
        amp_tensor *x, *h, *c, *wi, *wh, *bi;
    } cases[] = {{x, hbad, c, wi, wh, NULL}, {x, h, hbad, wi, wh, NULL}, {x, h, c, wh, wh, NULL},
                 {x, h, c, wi, wi, NULL},    {x, h, c, wi, wh, bbad},   {xbad, h, c, wi, wh, NULL},
                 {x, h, c, x, wh, NULL}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hn = cn = x; /* overwritten with NULL */
        const int st = amp_lstm_cell(ctx, cases[i].x, cases[i].h, cases[i].c, cases[i].wi, cases[i].wh, cases[i].bi,
                                     NULL, &hn, &cn);
        CHECK_MSG(st == AMP_ERR_INVALID_ARGUMENT && amp_ctx_status(ctx) == AMP_ERR_INVALID_ARGUMENT,
                  "lstm shape case %zu: status %d, ctx %d (%s)", i, st, amp_ctx_status(ctx), amp_ctx_error(ctx));
        CHECK(hn == NULL && cn == NULL);
        amp_ctx_clear_error(ctx);
    }
    /* a NULL input or output pointer: AMP_ERR_NULL_POINTER; sticky: a later error keeps the first */
    CHECK_EQ_INT(amp_lstm_cell(ctx, x, NULL, c, wi, wh, NULL, NULL, &hn, &cn), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_lstm_cell(ctx, x, hbad, c, wi, wh, NULL, NULL, &hn, &cn), AMP_ERR_NULL_POINTER);
    amp_ctx_clear_error(ctx);
    CHECK_EQ_INT(amp_lstm_cell(ctx, x, h, c, wi, wh, NULL, NULL, NULL, &cn), AMP_ERR_NULL_POINTER);
    amp_ctx_clear_error(ctx);
    CHECK_EQ_INT(amp_lstm_cell(NULL, x, h, c, wi, wh, NULL, NULL, &hn, &cn), AMP_ERR_NULL_POINTER);
    amp_ctx_free(ctx);
}

/* ---- causal attention: [B, 2, 5, 4], and a larger [1, 2, 19, 8] ---- */

enum { AH = 2, AT = 5, AD = 4, AMAX_T = 19 };

typedef struct {
    int batch;
    int variant; /* 0: q, k, v separate; 1: one input as q, k and v; 2: q a transposed view of [B, T, H, D] */
    int T, D;    /* T <= AMAX_T */
    bool only_v; /* q and k do not require grad (backward skips dP and dS) */
} attn_user;

static amp_tensor *build_attention(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    const attn_user *u = user;
    if (u->variant == 1) return amp_causal_attention(ctx, in[0], in[0], in[0]);
    if (u->variant == 2) return amp_causal_attention(ctx, amp_transpose(ctx, in[0], 1, 2), in[1], in[2]);
    return amp_causal_attention(ctx, in[0], in[1], in[2]);
}

static void ref_attention(const double *const *in, double *out, const void *user) {
    const attn_user *u = user;
    const int T = u->T, D = u->D;
    const double *q = in[0], *k = u->variant == 1 ? in[0] : in[1], *v = u->variant == 1 ? in[0] : in[2];
    const double scale = 1.0 / sqrt((double)D);
    for (int b = 0; b < u->batch; b++)
        for (int hd = 0; hd < AH; hd++) {
            const int base = (b * AH + hd) * T * D;
            for (int i = 0; i < T; i++) {
                /* q row i: [b, hd, i, :], or [b, i, hd, :] of the untransposed input */
                const double *qi = u->variant == 2 ? q + ((b * T + i) * AH + hd) * D : q + base + i * D;
                double s[AMAX_T], m = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    double d = 0.0;
                    for (int p = 0; p < D; p++) d += qi[p] * k[base + j * D + p];
                    s[j] = d * scale;
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j <= i; j++) sum += (s[j] = exp(s[j] - m));
                for (int p = 0; p < D; p++) {
                    double o = 0.0;
                    for (int j = 0; j <= i; j++) o += s[j] / sum * v[base + j * D + p];
                    out[base + i * D + p] = o;
                }
            }
        }
}

void test_ops_causal_attention(void) {
    const attn_user users[] = {{1, 0, AT, AD, false}, {2, 0, AT, AD, false}, {2, 1, AT, AD, false},
                               {2, 2, AT, AD, false}, {1, 0, 19, 8, false},  {2, 0, AT, AD, true}};
    const char *names[] = {"attention B=1",      "attention B=2",      "attention q=k=v",
                           "attention q transposed view", "attention T=19 D=8", "attention only v grad"};
    for (size_t v = 0; v < sizeof users / sizeof users[0]; v++) {
        const attn_user *u = &users[v];
        const int B = u->batch;
        /* Tolerance factors in units of u (in parentheses the worst case measured over 1000 seeds on
         * each GEMM path, ref, avx2 and avx512).
         * f16/bf16 (8; measured 0.8 forward, 4.0 backward): forward, P is rounded once to the compute
         * dtype before O = P v (a convex combination: error ~ u max|v|), then O once. Backward:
         * dP = dO V^T and dV = P^T dO read the rounded P and dO; dS = P (dP - rowsum(dP P)) cancels
         * (its terms sum to zero per row) and is rounded once before dQ = dS K and dK = dS^T Q, and
         * each gradient is rounded once; with q = k = v three such gradients add into one rounded
         * sum.
         * f32 (16; measured 1.8 forward, 5.0 backward): fp32 expf, the D-term dot products and the
         * cancellation in dP - rowsum dominate. */
        gradcheck c = {.name = names[v],
                       .n_inputs = u->variant == 1 ? 1 : 3,
                       .inputs = {IN(4, B, AH, u->T, u->D), IN(4, B, AH, u->T, u->D), IN(4, B, AH, u->T, u->D)},
                       .build = build_attention,
                       .reference = ref_attention,
                       .user = u};
        if (u->variant == 2) c.inputs[0] = (gradcheck_input)IN(4, B, u->T, AH, u->D);
        c.inputs[0].no_grad = c.inputs[1].no_grad = u->only_v;
        run_all_dtypes(c, 16, 8);
    }
}

/* Changing k or v at position j leaves every output at i < j bit-identical (the masked P_ij is an
 * exact 0), and changes some output at i >= j. */
static void check_causal(amp_dtype dtype) {
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    const int64_t shape[4] = {2, AH, AT, AD};
    enum { N = 2 * AH * AT * AD };
    float qv[N], kv[N], vv[N], base[N], got[N];
    uint64_t s = harness_seed() ^ 0xA77E17ull;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        qv[i] = (float)((s >> 40) & 0xFFFF) / 32768.0f - 1.0f;
        kv[i] = (float)((s >> 20) & 0xFFFF) / 32768.0f - 1.0f;
        vv[i] = (float)((s >> 4) & 0xFFFF) / 32768.0f - 1.0f;
    }
    amp_tensor *q = amp_tensor_from(ctx, dtype, 4, shape, qv, AMP_F32);
    amp_tensor *o = amp_causal_attention(ctx, q, amp_tensor_from(ctx, dtype, 4, shape, kv, AMP_F32),
                                         amp_tensor_from(ctx, dtype, 4, shape, vv, AMP_F32));
    if (!CHECK_MSG(o != NULL, "attention failed: %s", amp_ctx_error(ctx))) {
        amp_ctx_free(ctx);
        return;
    }
    CHECK_EQ_INT(o->op, AMP_OP_ATTENTION);
    CHECK_EQ_INT(o->compute_dtype, dtype);
    amp_tensor_read(o, base, AMP_F32);
    for (int which = 0; which < 2; which++)
        for (int j = 1; j < AT; j++) {
            float kc[N], vc[N];
            memcpy(kc, kv, sizeof kc);
            memcpy(vc, vv, sizeof vc);
            for (int bh = 0; bh < 2 * AH; bh++)
                for (int p = 0; p < AD; p++) {
                    float *t = which ? vc : kc;
                    t[(bh * AT + j) * AD + p] = 3.0f + (float)p; /* far from the [-1, 1] draws */
                }
            amp_tensor *o2 = amp_causal_attention(ctx, q, amp_tensor_from(ctx, dtype, 4, shape, kc, AMP_F32),
                                                  amp_tensor_from(ctx, dtype, 4, shape, vc, AMP_F32));
            if (!CHECK(o2 != NULL)) break;
            amp_tensor_read(o2, got, AMP_F32);
            int same_before = 1, changed_after = 0;
            for (int bh = 0; bh < 2 * AH; bh++)
                for (int i = 0; i < AT; i++)
                    for (int p = 0; p < AD; p++) {
                        const int e = (bh * AT + i) * AD + p;
                        if (i < j) same_before &= memcmp(&got[e], &base[e], sizeof got[e]) == 0;
                        else changed_after |= got[e] != base[e];
                    }
            CHECK_MSG(same_before, "%s: changing %s at position %d changed an earlier output",
                      amp_dtype_name(dtype), which ? "v" : "k", j);
            CHECK_MSG(changed_after, "%s: changing %s at position %d changed nothing", amp_dtype_name(dtype),
                      which ? "v" : "k", j);
        }
    amp_ctx_free(ctx);
}

void test_ops_attention_api(void) {
    check_causal(AMP_F32);
    check_causal(AMP_F16);
    check_causal(AMP_BF16);

    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    const int64_t s4[4] = {1, AH, AT, AD}, s4t[4] = {1, AH, AT + 1, AD}, s4d[4] = {1, AH, AT, AD + 1},
                  s3[3] = {AH, AT, AD};
    amp_tensor *a = amp_tensor_zeros(ctx, AMP_F16, 4, s4), *b = amp_tensor_zeros(ctx, AMP_BF16, 4, s4);
    /* promotion: f16 with bf16 computes in f32 */
    amp_tensor *o = amp_causal_attention(ctx, a, a, b);
    if (CHECK(o)) CHECK(o->op == AMP_OP_ATTENTION && o->compute_dtype == AMP_F32 && o->dtype == AMP_F32);
    o = amp_causal_attention(ctx, a, a, a);
    if (CHECK(o)) CHECK(o->compute_dtype == AMP_F16 && o->dtype == AMP_F16);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_OK);
    amp_tensor *bad[3] = {amp_tensor_zeros(ctx, AMP_F16, 4, s4t), amp_tensor_zeros(ctx, AMP_F16, 4, s4d),
                          amp_tensor_zeros(ctx, AMP_F16, 3, s3)};
    for (int i = 0; i < 3; i++) {
        amp_tensor *args[3][3] = {{bad[i], a, a}, {a, bad[i], a}, {a, a, bad[i]}};
        for (int p = 0; p < 3; p++) {
            CHECK(amp_causal_attention(ctx, args[p][0], args[p][1], args[p][2]) == NULL);
            CHECK_MSG(amp_ctx_status(ctx) == AMP_ERR_INVALID_ARGUMENT, "attention bad shape %d at %d: %d", i, p,
                      amp_ctx_status(ctx));
            amp_ctx_clear_error(ctx);
        }
    }
    /* q = k = v all 3-D: still an error */
    CHECK(amp_causal_attention(ctx, bad[2], bad[2], bad[2]) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    CHECK(amp_causal_attention(ctx, a, NULL, a) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_NULL_POINTER);
    amp_ctx_free(ctx);
}
