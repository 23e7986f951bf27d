/* amp_linear_fp8 (amp/fp8.h): each recipe's forward, input gradient and weight gradient against a
 * double-precision reference that quantizes with amp/fp8.h's own functions (amp_fp8_quantize,
 * amp_mx_quantize, amp_fp8_block_quantize and their dequantize twins) and multiplies in double;
 * delayed scaling's history roll and scale update over several steps against a closed-form replay;
 * fp8-noscale's saturation and flushing; MXFP8's FLOOR and RCEIL scale rules on a block where they differ; a weight reload's reset of the weight's delayed state; the
 * layer hook (amp_linear_layer.fp8) in a transformer block. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

/* A value of random sign and magnitude in [2^lo, 2^hi). */
static float spread(test_rng *rng, int lo, int hi) {
    const double m = 1.0 + (double)test_rng_below(rng, 1u << 20) / (double)(1u << 20);
    const int e = lo + (int)test_rng_below(rng, (uint32_t)(hi - lo));
    return (float)((test_rng_below(rng, 2) ? -1.0 : 1.0) * ldexp(m, e));
}

/* ---- the reference quantization ------------------------------------------------------------------ */

static amp_dtype ref_dtype(amp_fp8_recipe r, amp_fp8_tensor_role role) {
    if (r == AMP_FP8_RECIPE_MXFP8 || r == AMP_FP8_RECIPE_BLOCK) return AMP_F8E4M3;
    return role == AMP_FP8_DY ? AMP_F8E5M2 : AMP_F8E4M3;
}

/* out[i] = the value src[i] stands for after the recipe's cast of src ([rows, cols] row-major) for a
 * GEMM whose k runs along src's rows (k_rows) or columns; per-tensor recipes with `scale`. */
static void ref_quant(amp_fp8_recipe r, amp_fp8_tensor_role role, const float *src, int64_t rows, int64_t cols,
                      bool k_rows, float scale, double *out) {
    const size_t n = (size_t)(rows * cols);
    const amp_dtype d = ref_dtype(r, role);
    uint8_t *q = malloc(n + 64);
    float *back = malloc(n * sizeof *back);
    if (r == AMP_FP8_RECIPE_MXFP8) {
        /* k-major rows, padded with zeros to a multiple of 32 */
        const int64_t R = k_rows ? cols : rows, K = k_rows ? rows : cols, KP = (K + 31) / 32 * 32;
        float *t = calloc((size_t)(R * KP), sizeof *t), *tb = malloc((size_t)(R * KP) * sizeof *tb);
        uint8_t *tq = malloc((size_t)(R * KP)), *e = malloc((size_t)(R * KP / 32));
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < K; j++) t[i * KP + j] = k_rows ? src[j * cols + i] : src[i * cols + j];
        CHECK(amp_mx_quantize(tq, e, t, (size_t)(R * KP), AMP_F8E4M3, AMP_MX_RCEIL) == AMP_OK);
        CHECK(amp_mx_dequantize(tb, tq, e, (size_t)(R * KP), AMP_F8E4M3) == AMP_OK);
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < K; j++) {
                const double v = tb[i * KP + j];
                if (k_rows) out[j * cols + i] = v;
                else out[i * cols + j] = v;
            }
        free(t), free(tb), free(tq), free(e);
    } else if (r == AMP_FP8_RECIPE_BLOCK) {
        const amp_fp8_block_shape sh = role == AMP_FP8_W ? AMP_FP8_BLOCK_128X128
                                       : k_rows         ? AMP_FP8_BLOCK_128X1
                                                        : AMP_FP8_BLOCK_1X128;
        float *si = malloc(amp_fp8_block_scale_count((size_t)rows, (size_t)cols, sh) * sizeof *si);
        CHECK(amp_fp8_block_quantize(q, si, src, (size_t)rows, (size_t)cols, d, sh) == AMP_OK);
        CHECK(amp_fp8_block_dequantize(back, q, si, (size_t)rows, (size_t)cols, d, sh) == AMP_OK);
        for (size_t i = 0; i < n; i++) out[i] = back[i];
        free(si);
    } else {
        CHECK(amp_fp8_quantize(q, d, src, n, scale) == AMP_OK);
        CHECK(amp_fp8_dequantize(back, q, d, n, 1.0f) == AMP_OK);
        const double inv = (double)(1.0f / scale); /* the op's scale_inv, an fp32 */
        for (size_t i = 0; i < n; i++) out[i] = (double)back[i] * inv;
    }
    free(q), free(back);
}

/* The scale a per-tensor recipe casts src with (DELAYED: `delayed`). */
static float ref_scale(amp_fp8_recipe r, amp_fp8_tensor_role role, const float *src, size_t n, float delayed) {
    if (r == AMP_FP8_RECIPE_NOSCALE) return 1.0f;
    if (r == AMP_FP8_RECIPE_DELAYED) return delayed;
    float amax = 0;
    amp_fp8_amax(&amax, NULL, src, n);
    return amp_fp8_current_scale(amax, ref_dtype(r, role), 0.0f, false);
}

/* got within a tolerance of ref: fp32 accumulation of |terms| (bound), and the fp32 factor. */
static bool close_to(float got, double ref, double bound) {
    return fabs((double)got - ref) <= 1e-5 * bound + 1e-30;
}

/* How many entries of got (rows x cols, row-major) are off their double reference
 * bias[c] + sum over k of a[r * a_row + k * a_k] * b[c * b_col + k * b_k] (no bias when NULL), each
 * within close_to's bound from the terms' magnitudes. */
static int64_t off_product(const float *got, int64_t rows, int64_t cols, int64_t depth, const double *a, int64_t a_row,
                           int64_t a_k, const double *b, int64_t b_col, int64_t b_k, const float *bias) {
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double ref = bias ? bias[c] : 0, bound = bias ? fabs(bias[c]) : 0;
            for (int64_t k = 0; k < depth; k++) {
                const double t = a[r * a_row + k * a_k] * b[c * b_col + k * b_k];
                ref += t, bound += fabs(t);
            }
            bad += !close_to(got[r * cols + c], ref, bound);
        }
    return bad;
}

/* ---- one recipe's op against the reference -------------------------------------------------------- */

typedef struct case_shape {
    int64_t rows, in, out;
} case_shape;

static void check_recipe(amp_fp8_recipe recipe, case_shape sh, test_rng *rng) {
    const int64_t R = sh.rows, I = sh.in, O = sh.out;
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    amp_tensor *x = amp_param_new(ctx, "x", AMP_F32, 2, (const int64_t[]){R, I});
    amp_tensor *w = amp_param_new(ctx, "w", AMP_F32, 2, (const int64_t[]){O, I});
    amp_tensor *b = amp_param_new(ctx, "b", AMP_F32, 1, (const int64_t[]){O});
    amp_fp8_linear *s = NULL;
    CHECK(amp_fp8_linear_create(&s, recipe, NULL) == AMP_OK);
    if (!CHECK(amp_ctx_alloc_params(ctx) == AMP_OK) || !s) goto out;
    float *xv = x->data, *wv = w->data, *bv = b->data;
    float *g = malloc((size_t)(R * O) * sizeof *g);
    /* activations around 1 with a few outliers, weights around 2^-5, gradients around 2^-18: the
     * gradients are far below e5m2's normal range without a scale */
    for (int64_t i = 0; i < R * I; i++) xv[i] = spread(rng, -6, 2);
    xv[test_rng_below(rng, (uint32_t)(R * I))] = 40.0f;
    for (int64_t i = 0; i < O * I; i++) wv[i] = spread(rng, -9, -3);
    for (int64_t i = 0; i < O; i++) bv[i] = spread(rng, -4, 0);
    for (int64_t i = 0; i < R * O; i++) g[i] = spread(rng, -22, -15);
    /* delayed: scales already learned (as after some steps) */
    const float ds[AMP_FP8_ROLES] = {8.0f, 3000.0f, 65536.0f * 1024.0f};
    if (recipe == AMP_FP8_RECIPE_DELAYED)
        for (int role = 0; role < AMP_FP8_ROLES; role++) {
            const float *h;
            size_t len;
            amp_fp8_delayed *d = amp_fp8_linear_delayed(s, role);
            amp_fp8_delayed_history(d, &h, &len);
            float *zeros = calloc(len, sizeof *zeros);
            CHECK(amp_fp8_delayed_load(d, zeros, len, ds[role]) == AMP_OK);
            free(zeros);
        }
    amp_tensor *y = amp_linear_fp8(ctx, x, w, b, s);
    amp_tensor *gt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){R, O}, g, AMP_F32);
    amp_tensor *loss = y && gt ? amp_sum_all(ctx, amp_mul(ctx, y, gt)) : NULL;
    if (!CHECK_MSG(loss && amp_backward(ctx, loss, NULL) == AMP_OK, "%s: %s", amp_fp8_recipe_name(recipe),
                   amp_ctx_error(ctx)))
        goto out_g;
    /* the reference */
    const bool pt = recipe != AMP_FP8_RECIPE_MXFP8 && recipe != AMP_FP8_RECIPE_BLOCK;
    double *xq = malloc((size_t)(R * I) * sizeof *xq), *xq_r = malloc((size_t)(R * I) * sizeof *xq);
    double *wq = malloc((size_t)(O * I) * sizeof *wq), *wq_r = malloc((size_t)(O * I) * sizeof *wq);
    double *gq = malloc((size_t)(R * O) * sizeof *gq), *gq_r = malloc((size_t)(R * O) * sizeof *gq);
    const float sx = ref_scale(recipe, AMP_FP8_X, xv, (size_t)(R * I), ds[0]);
    const float sw = ref_scale(recipe, AMP_FP8_W, wv, (size_t)(O * I), ds[1]);
    const float sg = ref_scale(recipe, AMP_FP8_DY, g, (size_t)(R * O), ds[2]);
    ref_quant(recipe, AMP_FP8_X, xv, R, I, false, sx, xq);
    ref_quant(recipe, AMP_FP8_X, xv, R, I, !pt, sx, xq_r);
    ref_quant(recipe, AMP_FP8_W, wv, O, I, false, sw, wq);
    ref_quant(recipe, AMP_FP8_W, wv, O, I, recipe == AMP_FP8_RECIPE_MXFP8, sw, wq_r);
    ref_quant(recipe, AMP_FP8_DY, g, R, O, false, sg, gq);
    ref_quant(recipe, AMP_FP8_DY, g, R, O, !pt, sg, gq_r);
    float *got = malloc((size_t)((R > O ? R : O) * (I > O ? I : O)) * sizeof *got);
    amp_tensor_read(y, got, AMP_F32);
    int64_t bad = off_product(got, R, O, I, xq, I, 1, wq, I, 1, bv);
    CHECK_MSG(bad == 0, "%s forward: %lld values off the reference", amp_fp8_recipe_name(recipe), (long long)bad);
    amp_tensor_read(x->grad, got, AMP_F32);
    bad = off_product(got, R, I, O, gq, O, 1, wq_r, 1, I, NULL);
    CHECK_MSG(bad == 0, "%s dX: %lld values off the reference", amp_fp8_recipe_name(recipe), (long long)bad);
    amp_tensor_read(w->grad, got, AMP_F32);
    bad = off_product(got, O, I, R, gq_r, 1, O, xq_r, 1, I, NULL);
    CHECK_MSG(bad == 0, "%s dW: %lld values off the reference", amp_fp8_recipe_name(recipe), (long long)bad);
    bad = 0;
    amp_tensor_read(b->grad, got, AMP_F32);
    for (int64_t j = 0; j < O; j++) {
        double ref = 0, bound = 0;
        for (int64_t r = 0; r < R; r++) ref += g[r * O + j], bound += fabs(g[r * O + j]);
        bad += !close_to(got[j], ref, bound);
    }
    CHECK_MSG(bad == 0, "%s db: %lld values off the column sums of dY", amp_fp8_recipe_name(recipe), (long long)bad);
    /* without a scale the gradients (about 2^-18) flush in e5m2 (smallest subnormal 2^-16): the
     * input gradient is then mostly zeros, which the reference reproduces */
    amp_fp8_cast_stats dy;
    amp_fp8_linear_step(s);
    amp_fp8_linear_stats(s, AMP_FP8_DY, &dy, NULL);
    if (recipe == AMP_FP8_RECIPE_NOSCALE)
        CHECK_MSG(dy.flushed > dy.count / 2, "noscale: %lld of %lld gradients flushed", (long long)dy.flushed,
                  (long long)dy.count);
    else CHECK_MSG(dy.flushed < dy.count / 50, "%s: %lld of %lld gradients flushed", amp_fp8_recipe_name(recipe),
                   (long long)dy.flushed, (long long)dy.count);
    free(xq), free(xq_r), free(wq), free(wq_r), free(gq), free(gq_r), free(got);
out_g:
    free(g);
out:
    amp_fp8_linear_free(s);
    amp_ctx_free(ctx);
}

void test_fp8_linear_recipes(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed};
    /* partial 32-blocks and 128-tiles along every dimension; and aligned ones; odd sizes (no multiple
     * of 8 or 16 anywhere: the kernels' tails) */
    const case_shape shapes[] = {{70, 96, 40}, {160, 200, 136}, {128, 128, 64}, {33, 45, 27}};
    for (int r = 0; r < AMP_FP8_RECIPE_COUNT; r++)
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) check_recipe((amp_fp8_recipe)r, shapes[k], &rng);
}

/* ---- delayed scaling over steps ------------------------------------------------------------------ */

/* Steps with known amaxes through the op: x is zeros except one value a_t, W likewise w_t, dY g_t.
 * TE's order: each step casts with the scale of the previous update and records its amax into slot
 * 0; after the step the scale comes from the window's max (this step's included), then the roll. So
 * the scale used at step t is 448 / max(a over steps t-L .. t-1) (1 at step 1), and after step t the
 * history's last slot holds a_t, the one before a_{t-1}, ... */
/* A context with parameters x and w [n, n] and a delayed-scaling state of config dc; false (checked)
 * when one cannot be made. */
static bool delayed_fixture(const amp_fp8_delayed_config *dc, int64_t n, amp_ctx **ctx, amp_fp8_linear **s,
                            amp_tensor **x, amp_tensor **w) {
    *ctx = NULL, *s = NULL;
    if (!CHECK(amp_ctx_create(NULL, ctx) == AMP_OK) || !CHECK(amp_fp8_linear_create(s, AMP_FP8_RECIPE_DELAYED, dc) == AMP_OK))
        return false;
    *x = amp_param_new(*ctx, "x", AMP_F32, 2, (const int64_t[]){n, n});
    *w = amp_param_new(*ctx, "w", AMP_F32, 2, (const int64_t[]){n, n});
    return CHECK(amp_ctx_alloc_params(*ctx) == AMP_OK);
}

static void delayed_replay(bool amax_init) {
    enum { L = 3, STEPS = 7, N = 4 };
    const amp_fp8_delayed_config dc = {L, AMP_FP8_AMAX_MAX, 0, AMP_FP8_HYBRID, amax_init};
    amp_ctx *ctx;
    amp_fp8_linear *s;
    amp_tensor *x, *w;
    if (!delayed_fixture(&dc, N, &ctx, &s, &x, &w)) goto out;
    const float ax[STEPS] = {2.0f, 0.5f, 8.0f, 0.25f, 0.25f, 0.25f, 3.0f};
    const float aw[STEPS] = {0.01f, 0.02f, 0.015f, 0.03f, 0.001f, 0.001f, 0.001f};
    const float ag[STEPS] = {1e-6f, 3e-5f, 2e-7f, 2e-7f, 2e-7f, 5e-4f, 1e-6f};
    const float *amax_of[AMP_FP8_ROLES] = {ax, aw, ag};
    const float fmax[AMP_FP8_ROLES] = {448.0f, 448.0f, 57344.0f};
    for (int t = 0; t < STEPS; t++) {
        amp_ctx_reset(ctx);
        memset(x->data, 0, sizeof(float) * N * N);
        memset(w->data, 0, sizeof(float) * N * N);
        ((float *)x->data)[5] = -ax[t];
        ((float *)w->data)[7] = aw[t];
        float g[N * N] = {0};
        g[3] = ag[t];
        amp_tensor *y = amp_linear_fp8(ctx, x, w, NULL, s);
        amp_tensor *gt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){N, N}, g, AMP_F32);
        amp_tensor *loss = y ? amp_sum_all(ctx, amp_mul(ctx, y, gt)) : NULL;
        if (!CHECK_MSG(loss && amp_backward(ctx, loss, NULL) == AMP_OK, "step %d: %s", t + 1, amp_ctx_error(ctx))) break;
        amp_fp8_linear_step(s);
        /* the scale this step used: the closed form over the earlier steps' amaxes */
        for (int role = 0; role < AMP_FP8_ROLES; role++) {
            float m = 0.0f;
            for (int u = t - L; u < t; u++)
                if (u >= 0 && amax_of[role][u] > m) m = amax_of[role][u];
            const float want = t > 0 ? fmax[role] / m : amax_init ? fmax[role] / amax_of[role][0] : 1.0f;
            amp_fp8_cast_stats st;
            amp_fp8_linear_stats(s, role, &st, NULL);
            CHECK_MSG(st.scale_min == want && st.scale_max == want && st.amax == amax_of[role][t],
                      "step %d role %s: scale %.9g (want %.9g), amax %.9g (want %.9g)", t + 1,
                      amp_fp8_tensor_role_name(role), (double)st.scale_min, (double)want, (double)st.amax,
                      (double)amax_of[role][t]);
        }
        /* after the update: the history holds the last L steps, oldest in slot 1, newest last; slot 0
         * is zero; the scale is from their max */
        for (int role = 0; role < AMP_FP8_ROLES; role++) {
            const float *h;
            size_t len;
            amp_fp8_delayed *d = amp_fp8_linear_delayed(s, role);
            amp_fp8_delayed_history(d, &h, &len);
            bool ok = len == L && h[0] == 0.0f;
            float m = 0.0f;
            for (int k = 1; k < L; k++) {
                const int u = t - (L - 1 - k); /* slot k holds step u (0-based), k = L-1 the newest */
                ok &= h[k] == (u >= 0 ? amax_of[role][u] : 0.0f);
            }
            for (int u = t - L + 1; u <= t; u++)
                if (u >= 0 && amax_of[role][u] > m) m = amax_of[role][u];
            ok &= amp_fp8_delayed_scale(d) == fmax[role] / m;
            CHECK_MSG(ok, "step %d role %s: history or scale off the replay (amax init %d)", t + 1,
                      amp_fp8_tensor_role_name(role), (int)amax_init);
        }
    }
out:
    amp_fp8_linear_free(s);
    amp_ctx_free(ctx);
}

/* TE's replay; and torchao's amax init, where step 1 casts with the scales of its own amaxes and
 * every later step as TE's (the init adds nothing to the history). */
void test_fp8_linear_delayed_replay(void) {
    delayed_replay(false);
    delayed_replay(true);
}

/* TE's update points under gradient accumulation: each forward updates x's and W's scales and each
 * backward dY's (amp_fp8_linear_update), so a step's second micro-batch casts with the first's amax
 * and the history holds one slot per micro-batch; amp_fp8_linear_step then updates nothing more.
 * History 4, two steps of two micro-batches, x's amaxes 2, 0.5, 8, 1: the scales used are 1, 448/2,
 * 448/2, 448/8, and after the fourth update the history is {0, 0.5, 8, 1} with scale 448/8. */
void test_fp8_linear_delayed_micro_batches(void) {
    enum { N = 4, MB = 4 };
    const amp_fp8_delayed_config dc = {4, AMP_FP8_AMAX_MAX, 0, AMP_FP8_HYBRID, false};
    amp_ctx *ctx;
    amp_fp8_linear *s;
    amp_tensor *x, *w;
    if (!delayed_fixture(&dc, N, &ctx, &s, &x, &w)) goto out;
    const float ax[MB] = {2.0f, 0.5f, 8.0f, 1.0f};
    const float want_min[2] = {1.0f, 56.0f}, want_max[2] = {224.0f, 224.0f};
    for (int mb = 0; mb < MB; mb++) {
        amp_ctx_reset(ctx);
        memset(x->data, 0, sizeof(float) * N * N);
        memset(w->data, 0, sizeof(float) * N * N);
        ((float *)x->data)[2] = ax[mb];
        ((float *)w->data)[2] = 0.5f;
        float g[N * N] = {0};
        g[0] = 1e-3f;
        amp_tensor *y = amp_linear_fp8(ctx, x, w, NULL, s);
        if (!CHECK_MSG(y != NULL, "%s", amp_ctx_error(ctx))) break;
        CHECK_EQ_INT(amp_fp8_linear_update(s, AMP_FP8_PASS_FORWARD), AMP_OK);
        amp_tensor *gt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){N, N}, g, AMP_F32);
        amp_tensor *loss = amp_sum_all(ctx, amp_mul(ctx, y, gt));
        if (!CHECK_MSG(loss && amp_backward(ctx, loss, NULL) == AMP_OK, "micro-batch %d: %s", mb + 1, amp_ctx_error(ctx)))
            break;
        CHECK_EQ_INT(amp_fp8_linear_update(s, AMP_FP8_PASS_BACKWARD), AMP_OK);
        if (mb % 2 == 0) continue;
        CHECK_EQ_INT(amp_fp8_linear_step(s), AMP_OK);
        amp_fp8_cast_stats st;
        amp_fp8_linear_stats(s, AMP_FP8_X, &st, NULL);
        CHECK_MSG(st.casts == 2 && st.scale_min == want_min[mb / 2] && st.scale_max == want_max[mb / 2],
                  "step %d: %lld casts of x, scales %g..%g (want %g..%g)", mb / 2 + 1, (long long)st.casts,
                  (double)st.scale_min, (double)st.scale_max, (double)want_min[mb / 2], (double)want_max[mb / 2]);
    }
    const float *h;
    size_t len;
    amp_fp8_delayed *d = amp_fp8_linear_delayed(s, AMP_FP8_X);
    amp_fp8_delayed_history(d, &h, &len);
    CHECK_MSG(len == 4 && h[0] == 0.0f && h[1] == 0.5f && h[2] == 8.0f && h[3] == 1.0f && amp_fp8_delayed_scale(d) == 56.0f,
              "history {%g, %g, %g, %g}, scale %g", (double)h[0], (double)h[1], (double)h[2], (double)h[3],
              (double)amp_fp8_delayed_scale(d));
    CHECK_EQ_INT(amp_fp8_linear_update(s, (amp_fp8_pass)2), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_fp8_linear_update(NULL, AMP_FP8_PASS_FORWARD), AMP_ERR_NULL_POINTER);
out:
    amp_fp8_linear_free(s);
    amp_ctx_free(ctx);
}

/* The amax init through the op: an evaluation pass before the first step (recording off) casts with
 * the scales of its own amaxes and leaves the state fresh; the first training step asks the reduce
 * hook once per role (a fake group whose amaxes are 4 times this rank's) and casts with the group's
 * scales; the second step asks nothing and casts with the history's. */
typedef struct fake_group { int calls; } fake_group;
static int fake_group_max(void *arg, float *amax) {
    ((fake_group *)arg)->calls++;
    *amax *= 4.0f;
    return AMP_OK;
}

void test_fp8_linear_amax_init(void) {
    enum { N = 4 };
    const amp_fp8_delayed_config dc = {8, AMP_FP8_AMAX_MAX, 0, AMP_FP8_HYBRID, true};
    amp_ctx *ctx;
    amp_fp8_linear *s;
    amp_tensor *x, *w;
    fake_group group = {0};
    if (!delayed_fixture(&dc, N, &ctx, &s, &x, &w)) goto out;
    CHECK_EQ_INT(amp_fp8_linear_set_amax_reduce(s, fake_group_max, &group), AMP_OK);
    /* x holds 1e-4 (under e4m3's smallest subnormal 2^-9 at scale 1), W 0.5, dY 2^-20 (under e5m2's 2^-16) */
    float xv[N * N] = {0}, wv[N * N] = {0}, gv[N * N] = {0};
    xv[1] = 1e-4f, wv[1] = 0.5f, gv[0] = 0x1p-20f;
    memcpy(x->data, xv, sizeof xv);
    memcpy(w->data, wv, sizeof wv);
    amp_fp8_linear_set_recording(s, false);
    amp_tensor *y = amp_linear_fp8(ctx, x, w, NULL, s);
    if (!CHECK_MSG(y != NULL, "%s", amp_ctx_error(ctx))) goto out;
    float got[N * N];
    amp_tensor_read(y, got, AMP_F32);
    CHECK_MSG(fabsf(got[0] - 5e-5f) < 5e-5f * 0x1p-3f, "evaluation: y[0][0] %g, want about 5e-5 (x not flushed)", (double)got[0]);
    CHECK(group.calls == 0);
    for (int role = 0; role < AMP_FP8_ROLES; role++) {
        amp_fp8_delayed *d = amp_fp8_linear_delayed(s, role);
        CHECK(amp_fp8_delayed_needs_init(d) && amp_fp8_delayed_scale(d) == 1.0f);
    }
    amp_fp8_linear_set_recording(s, true);
    const float fmax[AMP_FP8_ROLES] = {448.0f, 448.0f, 57344.0f};
    const float amax[AMP_FP8_ROLES] = {1e-4f, 0.5f, 0x1p-20f};
    for (int t = 0; t < 2; t++) {
        amp_ctx_reset(ctx);
        amp_tensor *gt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){N, N}, gv, AMP_F32);
        y = amp_linear_fp8(ctx, x, w, NULL, s);
        amp_tensor *loss = y ? amp_sum_all(ctx, amp_mul(ctx, y, gt)) : NULL;
        if (!CHECK_MSG(loss && amp_backward(ctx, loss, NULL) == AMP_OK, "step %d: %s", t + 1, amp_ctx_error(ctx))) break;
        CHECK_EQ_INT(amp_fp8_linear_step(s), AMP_OK);
        CHECK_MSG(group.calls == AMP_FP8_ROLES, "step %d: the hook ran %d times", t + 1, group.calls);
        for (int role = 0; role < AMP_FP8_ROLES; role++) {
            amp_fp8_cast_stats st;
            amp_fp8_linear_stats(s, role, &st, NULL);
            /* step 1: the group's amax (4 times this rank's); step 2: the history's max (the rank's own
             * amax, recorded by step 1's cast; the group's all-reduce of slot 0 is the training loop's) */
            const float want = t == 0 ? fmax[role] / (4.0f * amax[role]) : fmax[role] / amax[role];
            CHECK_MSG(st.scale_min == want && st.scale_max == want && st.flushed == 0,
                      "step %d role %s: scale %g (want %g), %llu flushed", t + 1, amp_fp8_tensor_role_name(role),
                      (double)st.scale_min, (double)want, (unsigned long long)st.flushed);
        }
    }
    CHECK_EQ_INT(amp_fp8_linear_set_amax_reduce(NULL, fake_group_max, &group), AMP_ERR_NULL_POINTER);
out:
    amp_fp8_linear_free(s);
    amp_ctx_free(ctx);
    if (!CHECK(amp_fp8_linear_create(&s, AMP_FP8_RECIPE_CURRENT, NULL) == AMP_OK)) return;
    CHECK_EQ_INT(amp_fp8_linear_set_amax_reduce(s, fake_group_max, &group), AMP_ERR_INVALID_ARGUMENT);
    amp_fp8_linear_free(s);
}

/* ---- no scaling: saturation and flushing ----------------------------------------------------------- */

void test_fp8_linear_noscale_saturation(void) {
    enum { R = 4, I = 8, O = 2 };
    amp_ctx *ctx = NULL;
    amp_fp8_linear *s = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK) || !CHECK(amp_fp8_linear_create(&s, AMP_FP8_RECIPE_NOSCALE, NULL) == AMP_OK))
        goto out;
    float xv[R * I], wv[O * I];
    for (int i = 0; i < R * I; i++) xv[i] = (i % 3 == 0) ? 1000.0f * (float)(i + 1) : 1e-4f; /* 1e-4 < 2^-10: to 0 */
    for (int i = 0; i < O * I; i++) wv[i] = 1.0f;
    amp_tensor *x = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){R, I}, xv, AMP_F32);
    amp_tensor *w = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){O, I}, wv, AMP_F32);
    amp_tensor *y = amp_linear_fp8(ctx, x, w, NULL, s);
    if (!CHECK_MSG(y != NULL, "%s", amp_ctx_error(ctx))) goto out;
    float got[R * O];
    amp_tensor_read(y, got, AMP_F32);
    for (int r = 0; r < R; r++) {
        int big = 0;
        for (int k = 0; k < I; k++) big += (r * I + k) % 3 == 0;
        CHECK_MSG(got[r * O] == 448.0f * (float)big, "row %d: %g, want %d x 448 (saturated, the small ones flushed)", r,
                  (double)got[r * O], big);
    }
    amp_fp8_cast_stats st;
    amp_fp8_linear_step(s);
    amp_fp8_linear_stats(s, AMP_FP8_X, &st, NULL);
    int sat = 0;
    for (int i = 0; i < R * I; i++) sat += i % 3 == 0;
    CHECK_MSG(st.saturated == sat && st.flushed == R * I - sat && st.count == R * I,
              "saturated %lld (want %d), flushed %lld (want %d)", (long long)st.saturated, sat, (long long)st.flushed,
              R * I - sat);
out:
    amp_fp8_linear_free(s);
    amp_ctx_free(ctx);
}

/* ---- MXFP8's scale rule: RCEIL (default) or FLOOR -------------------------------------------------- */

/* One row x = [500, 3, 0, ...] (32 values, one block) times W = ones: RCEIL's scale is 500 / 448
 * rounded up, 2, so 500 -> 250 -> e4m3 256 (x 2 = 512) and 3 -> 1.5 (x 2 = 3): y = 515, nothing
 * saturated; FLOOR's is 2^(E(500) - 8) = 1, so 500 saturates to 448: y = 451, one value saturated.
 * The rule can be set on MXFP8 only, to FLOOR or RCEIL. */
static float mx_rule_run(amp_mx_scale_mode mode, int64_t *saturated) {
    enum { I = 32 };
    amp_ctx *ctx = NULL;
    amp_fp8_linear *s = NULL;
    float got = NAN;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK) || !CHECK(amp_fp8_linear_create(&s, AMP_FP8_RECIPE_MXFP8, NULL) == AMP_OK))
        goto out;
    if (mode != AMP_MX_RCEIL) CHECK(amp_fp8_linear_set_mx_scale(s, mode) == AMP_OK);
    CHECK(amp_fp8_linear_mx_scale(s) == mode);
    float xv[I] = {500.0f, 3.0f}, wv[I];
    for (int i = 0; i < I; i++) wv[i] = 1.0f;
    amp_tensor *x = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){1, I}, xv, AMP_F32);
    amp_tensor *w = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){1, I}, wv, AMP_F32);
    amp_tensor *y = amp_linear_fp8(ctx, x, w, NULL, s);
    if (!CHECK_MSG(y != NULL, "%s", amp_ctx_error(ctx))) goto out;
    amp_tensor_read(y, &got, AMP_F32);
    amp_fp8_cast_stats st;
    amp_fp8_linear_step(s);
    amp_fp8_linear_stats(s, AMP_FP8_X, &st, NULL);
    *saturated = st.saturated;
out:
    amp_fp8_linear_free(s);
    amp_ctx_free(ctx);
    return got;
}

void test_fp8_linear_mx_scale_rule(void) {
    int64_t sat_rceil = -1, sat_floor = -1;
    const float rceil = mx_rule_run(AMP_MX_RCEIL, &sat_rceil), floor_ = mx_rule_run(AMP_MX_FLOOR, &sat_floor);
    CHECK_MSG(rceil == 515.0f && sat_rceil == 0, "RCEIL: y %g (want 515), %lld saturated (want 0)", (double)rceil,
              (long long)sat_rceil);
    CHECK_MSG(floor_ == 451.0f && sat_floor == 1, "FLOOR: y %g (want 451), %lld saturated (want 1)", (double)floor_,
              (long long)sat_floor);
    amp_fp8_linear *s = NULL;
    if (CHECK(amp_fp8_linear_create(&s, AMP_FP8_RECIPE_MXFP8, NULL) == AMP_OK)) {
        CHECK(amp_fp8_linear_set_mx_scale(s, AMP_MX_CEIL) == AMP_ERR_INVALID_ARGUMENT);
        CHECK(amp_fp8_linear_mx_scale(s) == AMP_MX_RCEIL);
        amp_fp8_linear_free(s);
    }
    if (CHECK(amp_fp8_linear_create(&s, AMP_FP8_RECIPE_BLOCK, NULL) == AMP_OK)) {
        CHECK(amp_fp8_linear_set_mx_scale(s, AMP_MX_FLOOR) == AMP_ERR_INVALID_ARGUMENT);
        amp_fp8_linear_free(s);
    }
    CHECK(amp_fp8_linear_set_mx_scale(NULL, AMP_MX_FLOOR) == AMP_ERR_NULL_POINTER);
}

/* ---- loading weights resets the weight's delayed state (TE PR #567) ------------------------------- */

/* Two steps with small weights, then a larger weight: the stale history's scale clips it; after
 * amp_fp8_linear_weights_changed the weight's scale is 448 / its amax and nothing clips. */
static int64_t reload_run(const float *xv, const float *small, const float *big, int n, bool reset, float *scale) {
    amp_ctx *ctx = NULL;
    amp_fp8_linear *s = NULL;
    amp_fp8_cast_stats st = {0};
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK) || !CHECK(amp_fp8_linear_create(&s, AMP_FP8_RECIPE_DELAYED, NULL) == AMP_OK))
        goto out;
    for (int t = 0; t < 3; t++) {
        if (t == 2 && reset) CHECK(amp_fp8_linear_weights_changed(s, big, (size_t)n * n) == AMP_OK);
        if (t == 2) *scale = amp_fp8_delayed_scale(amp_fp8_linear_delayed(s, AMP_FP8_W));
        amp_ctx_reset(ctx);
        amp_tensor *x = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){n, n}, xv, AMP_F32);
        amp_tensor *w = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){n, n}, t < 2 ? small : big, AMP_F32);
        CHECK(amp_linear_fp8(ctx, x, w, NULL, s) != NULL);
        amp_fp8_linear_step(s);
    }
    amp_fp8_linear_stats(s, AMP_FP8_W, &st, NULL);
out:
    amp_fp8_linear_free(s);
    amp_ctx_free(ctx);
    return st.saturated;
}

void test_fp8_linear_weights_reload(void) {
    enum { N = 64 };
    static float xv[N * N], small[N * N], big[N * N];
    test_rng rng = {7};
    for (int i = 0; i < N * N; i++) xv[i] = spread(&rng, -3, 1), small[i] = spread(&rng, -12, -7), big[i] = spread(&rng, -3, 0);
    float amax = 0, scale = 0;
    amp_fp8_amax(&amax, NULL, big, N * N);
    const int64_t stale = reload_run(xv, small, big, N, false, &scale);
    CHECK_MSG(stale > N * N / 2, "stale history: only %lld of %d weight values clipped", (long long)stale, N * N);
    const int64_t fresh = reload_run(xv, small, big, N, true, &scale);
    CHECK_MSG(fresh == 0, "after the reset %lld weight values clipped", (long long)fresh);
    CHECK_MSG(scale == 448.0f / amax, "the reloaded weight's scale %g, want 448 / %g", (double)scale, (double)amax);
}

/* ---- the layer hook ------------------------------------------------------------------------------ */

/* The fused forwards take the fp8 path when a layer has a state: a transformer block casts through
 * all four of its Linear layers (linear_gelu and linear_residual unfused: amp_linear_fp8, then the
 * activation or the add), and linear + GELU equals amp_linear_fp8 then amp_gelu bit for bit
 * (current scaling: the same inputs give the same scales). */
void test_fp8_linear_layer_hook(void) {
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    amp_transformer_block blk;
    amp_linear_layer fc;
    CHECK(amp_transformer_block_declare(ctx, &blk, "h.0", 32, 4, AMP_F32) == AMP_OK);
    CHECK(amp_linear_layer_declare(ctx, &fc, "p", 32, 48, true, AMP_F32) == AMP_OK && fc.fp8 == NULL);
    amp_fp8_linear *st[6] = {0};
    for (int k = 0; k < 6; k++) CHECK(amp_fp8_linear_create(&st[k], AMP_FP8_RECIPE_CURRENT, NULL) == AMP_OK);
    if (!CHECK(amp_ctx_alloc_params(ctx) == AMP_OK)) goto out;
    amp_rng r;
    amp_rng_seed(&r, 3);
    CHECK(amp_transformer_block_init(ctx, &blk, &r) == AMP_OK && amp_linear_layer_init(ctx, &fc, &r) == AMP_OK);
    float xv[2 * 8 * 32];
    test_rng rng = {11};
    for (int i = 0; i < 2 * 8 * 32; i++) xv[i] = spread(&rng, -4, 1);
    amp_tensor *x = amp_tensor_from(ctx, AMP_F32, 3, (const int64_t[]){2, 8, 32}, xv, AMP_F32);
    amp_tensor *y0 = amp_transformer_block_forward(ctx, &blk, x);
    blk.attn.c_attn.fp8 = st[0], blk.attn.c_proj.fp8 = st[1], blk.mlp_fc.fp8 = st[2], blk.mlp_proj.fp8 = st[3];
    amp_tensor *y = amp_transformer_block_forward(ctx, &blk, x);
    if (CHECK_MSG(y0 && y, "%s", amp_ctx_error(ctx))) {
        float a[2 * 8 * 32], b[2 * 8 * 32];
        amp_tensor_read(y0, a, AMP_F32);
        amp_tensor_read(y, b, AMP_F32);
        CHECK_MSG(memcmp(a, b, sizeof a) != 0, "the fp8 block gave the bf16/fp32 block's bits");
    }
    for (int k = 0; k < 4; k++) {
        amp_fp8_cast_stats cs;
        amp_fp8_linear_step(st[k]);
        amp_fp8_linear_stats(st[k], AMP_FP8_X, &cs, NULL);
        CHECK_MSG(cs.casts == 1 && cs.count == 2 * 8 * (k == 3 ? 128 : 32), "block linear %d: %lld casts of %lld values",
                  k, (long long)cs.casts, (long long)cs.count);
    }
    fc.fp8 = st[4];
    amp_tensor *g1 = amp_linear_layer_forward_act(ctx, &fc, x, AMP_ACT_GELU);
    amp_tensor *g2 = amp_gelu(ctx, amp_linear_fp8(ctx, x, fc.weight, fc.bias, st[5]));
    if (CHECK_MSG(g1 && g2, "%s", amp_ctx_error(ctx))) {
        static float a[2 * 8 * 48], b[2 * 8 * 48];
        amp_tensor_read(g1, a, AMP_F32);
        amp_tensor_read(g2, b, AMP_F32);
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "linear_gelu's fp8 path differs from amp_linear_fp8 + amp_gelu");
    }
out:
    for (int k = 0; k < 6; k++) amp_fp8_linear_free(st[k]);
    amp_ctx_free(ctx);
}

/* ---- a 16-bit source ------------------------------------------------------------------------------ */

/* The rounded results of one run: y, dX, dW, db (each rounded to `dt` and decoded) and the cast
 * statistics of the three roles. */
typedef struct src_run {
    float *y, *dx, *dw, *db;
    amp_fp8_cast_stats st[AMP_FP8_ROLES];
    bool ok;
} src_run;

static float *rounded(const amp_tensor *t, amp_dtype dt, size_t n) {
    float *v = malloc(n * sizeof *v);
    uint16_t *h = malloc(n * sizeof *h);
    if (v && h && t) {
        amp_tensor_read(t, v, AMP_F32);
        amp_convert(h, dt, v, AMP_F32, n);
        amp_convert(v, AMP_F32, h, dt, n);
    }
    free(h);
    return v;
}

/* amp_linear_fp8 on x, W and b in `pdt` (holding the values of xv, wv, bv, which are exact in dt) with
 * the gradient g (exact in dt too: the output's gradient has the output's dtype); results rounded to
 * dt. */
static src_run source_run(amp_fp8_recipe recipe, amp_dtype pdt, amp_dtype dt, case_shape sh, const float *xv,
                          const float *wv, const float *bv, const float *g, bool bias_only) {
    src_run r = {0};
    const int64_t R = sh.rows, I = sh.in, O = sh.out;
    amp_ctx *ctx = NULL;
    amp_fp8_linear *s = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return r;
    amp_tensor *x = amp_param_new(ctx, "x", pdt, 2, (const int64_t[]){R, I});
    amp_tensor *w = amp_param_new(ctx, "w", pdt, 2, (const int64_t[]){O, I});
    amp_tensor *b = amp_param_new(ctx, "b", pdt, 1, (const int64_t[]){O});
    if (CHECK(amp_fp8_linear_create(&s, recipe, NULL) == AMP_OK) && CHECK(amp_ctx_alloc_params(ctx) == AMP_OK)) {
        amp_tensor_write(x, xv, AMP_F32), amp_tensor_write(w, wv, AMP_F32), amp_tensor_write(b, bv, AMP_F32);
        if (bias_only) x->requires_grad = w->requires_grad = false; /* no cast of dY: the sums alone */
        amp_tensor *y = amp_linear_fp8(ctx, x, w, b, s);
        amp_tensor *gt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){R, O}, g, AMP_F32);
        amp_tensor *loss = y && gt ? amp_sum_all(ctx, amp_mul(ctx, y, gt)) : NULL;
        r.ok = CHECK_MSG(loss && amp_backward(ctx, loss, NULL) == AMP_OK, "%s: %s", amp_fp8_recipe_name(recipe),
                         amp_ctx_error(ctx));
        if (r.ok) {
            r.y = rounded(y, dt, (size_t)(R * O)), r.db = rounded(b->grad, dt, (size_t)O);
            r.dx = bias_only ? NULL : rounded(x->grad, dt, (size_t)(R * I));
            r.dw = bias_only ? NULL : rounded(w->grad, dt, (size_t)(O * I));
            amp_fp8_linear_step(s);
            for (int role = 0; role < AMP_FP8_ROLES; role++) amp_fp8_linear_stats(s, role, &r.st[role], NULL);
        }
    }
    amp_fp8_linear_free(s);
    amp_ctx_free(ctx);
    return r;
}

static bool same_stats(const amp_fp8_cast_stats *a, const amp_fp8_cast_stats *b) {
    return memcmp(&a->amax, &b->amax, sizeof a->amax) == 0 && a->scale_min == b->scale_min &&
           a->scale_max == b->scale_max && a->count == b->count && a->saturated == b->saturated &&
           a->flushed == b->flushed && a->casts == b->casts;
}

/* x, W and b in bf16 or fp16 (cast a band of rows at a time, never decoded whole; the output rounded
 * once with the bias in the same pass) give the bits and statistics of the same values in fp32, the
 * results rounded to the 16-bit dtype: rows spanning several bands and a partial one, for x and W. */
void test_fp8_linear_16bit_source(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed};
    const case_shape shapes[] = {{300, 200, 72}, {72, 160, 290}};
    const amp_dtype dts[] = {AMP_BF16, AMP_F16};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const case_shape sh = shapes[k];
        const int64_t R = sh.rows, I = sh.in, O = sh.out;
        float *xv = malloc((size_t)(R * I) * sizeof *xv), *wv = malloc((size_t)(O * I) * sizeof *wv);
        float *bv = malloc((size_t)O * sizeof *bv), *g = malloc((size_t)(R * O) * sizeof *g);
        for (size_t d = 0; d < 2; d++) {
            const amp_dtype dt = dts[d];
            for (int64_t i = 0; i < R * I; i++) xv[i] = spread(&rng, -6, 2);
            for (int64_t i = 0; i < O * I; i++) wv[i] = spread(&rng, -9, -3);
            for (int64_t i = 0; i < O; i++) bv[i] = spread(&rng, -4, 0);
            for (int64_t i = 0; i < R * O; i++) g[i] = spread(&rng, -12, -6);
            uint16_t *h = malloc((size_t)(R * (I > O ? I : O) + O * I) * sizeof *h); /* the values exact in dt */
            amp_convert(h, dt, g, AMP_F32, (size_t)(R * O)), amp_convert(g, AMP_F32, h, dt, (size_t)(R * O));
            amp_convert(h, dt, xv, AMP_F32, (size_t)(R * I)), amp_convert(xv, AMP_F32, h, dt, (size_t)(R * I));
            amp_convert(h, dt, wv, AMP_F32, (size_t)(O * I)), amp_convert(wv, AMP_F32, h, dt, (size_t)(O * I));
            amp_convert(h, dt, bv, AMP_F32, (size_t)O), amp_convert(bv, AMP_F32, h, dt, (size_t)O);
            free(h);
            for (int rc = 0; rc < AMP_FP8_RECIPE_COUNT; rc++) {
                const amp_fp8_recipe recipe = (amp_fp8_recipe)rc;
                src_run a = source_run(recipe, dt, dt, sh, xv, wv, bv, g, false);
                src_run b = source_run(recipe, AMP_F32, dt, sh, xv, wv, bv, g, false);
                if (a.ok && b.ok) {
                    const char *name = amp_fp8_recipe_name(recipe), *dn = amp_dtype_name(dt);
                    CHECK_MSG(memcmp(a.y, b.y, (size_t)(R * O) * sizeof(float)) == 0, "%s %s: y differs", name, dn);
                    CHECK_MSG(memcmp(a.dx, b.dx, (size_t)(R * I) * sizeof(float)) == 0, "%s %s: dX differs", name, dn);
                    CHECK_MSG(memcmp(a.dw, b.dw, (size_t)(O * I) * sizeof(float)) == 0, "%s %s: dW differs", name, dn);
                    CHECK_MSG(memcmp(a.db, b.db, (size_t)O * sizeof(float)) == 0, "%s %s: db differs", name, dn);
                    for (int role = 0; role < AMP_FP8_ROLES; role++)
                        CHECK_MSG(same_stats(&a.st[role], &b.st[role]), "%s %s: %s's statistics differ", name, dn,
                                  amp_fp8_tensor_role_name(role));
                }
                free(a.y), free(a.dx), free(a.dw), free(a.db), free(b.y), free(b.dx), free(b.dw), free(b.db);
                a = source_run(recipe, dt, dt, sh, xv, wv, bv, g, true);
                b = source_run(recipe, AMP_F32, dt, sh, xv, wv, bv, g, true);
                if (a.ok && b.ok)
                    CHECK_MSG(memcmp(a.db, b.db, (size_t)O * sizeof(float)) == 0, "%s %s: db alone differs",
                              amp_fp8_recipe_name(recipe), amp_dtype_name(dt));
                free(a.y), free(a.dx), free(a.dw), free(a.db), free(b.y), free(b.dx), free(b.dw), free(b.db);
            }
        }
        free(xv), free(wv), free(bv), free(g);
    }
}
