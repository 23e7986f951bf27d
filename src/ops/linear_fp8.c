/* amp_linear_fp8 (amp/fp8.h): a Linear whose three GEMMs take fp8 operands quantized under the
 * layer's recipe (src/fp8/linear_quant.c) and accumulate in fp32.
 *
 *   forward   y  = x W^T          x quantized with k = in along its rows' values, W likewise
 *   dgrad     dX = dY W           dY quantized along out (k), W along out (MXFP8's column-wise copy)
 *   wgrad     dW = dY^T X         dY and x quantized along the batch rows (k): per-tensor recipes
 *                                 reuse the one cast; MXFP8 and block scaling make column-wise copies
 *                                 from the high-precision source (forward makes x's, saved for this)
 *
 * The result is written in the autocast dtype where autocast lowers linear (bf16 under amp-bf16),
 * else in the inputs' promoted dtype; the bias is added in fp32 before that single rounding, both in
 * one pass over the GEMM's fp32 result (gemm_fused.h's epilogue), and its gradient is the column sums
 * of the high-precision dY. The quantization's gradient is straight-through. The forward's quantized x and W are kept in the arena until backward (as TE keeps
 * its fp8 copies): 1 byte per value, or 2 where a column-wise copy is made too. */
#include <math.h>
#include <string.h>

#include "amp/autocast.h"
#include "amp/formats.h"
#include "amp/fp8.h"
#include "amp/gemm.h"
#include "../fp8/fp8_linear.h"
#include "../gemm/gemm_fused.h"
#include "../kernels/elem_kernels.h"
#include "grad_sink_gemm.h"
#include "op_util.h"

/* What forward keeps for backward (in the arena). */
typedef struct fp8_saved {
    amp_fp8_linear *state;
    amp_fp8_qmat x, w;     /* forward's operands */
    amp_fp8_qmat x_k_rows; /* x quantized along the batch rows for wgrad (== x for per-tensor recipes) */
    amp_fp8_qmat w_k_rows; /* W quantized along out for dgrad (== w except under MXFP8) */
} fp8_saved;

static void *arena_alloc(void *user, size_t bytes) { return amp_ctx_alloc(user, bytes ? bytes : 1); }
static void *scratch_alloc(void *user, size_t bytes) { return amp_scratch_alloc(user, bytes ? bytes : 1); }

/* One GEMM operand: a quantized matrix (stored in its source's layout) read as the logical [r, c]
 * operand, where the source's layout is [r, c] (source_is_logical) or [c, r]. */
typedef struct fp8_operand {
    const amp_fp8_qmat *q;
    bool trans;
} fp8_operand;

static fp8_operand operand_of(const amp_fp8_qmat *q, bool source_is_logical) {
    return (fp8_operand){q, !source_is_logical};
}

/* The operand as amp_gemm_fp8 takes it. */
static amp_gemm_fp8_operand gemm_operand(fp8_operand o) {
    const amp_fp8_qmat *q = o.q;
    return (amp_gemm_fp8_operand){.dtype = q->dtype, .data = q->data, .ld = q->cols, .trans = o.trans,
                                  .scale_inv = q->scale_inv, .block_rows = q->block_rows,
                                  .block_cols = q->block_cols, .ld_scale = q->ld_scale};
}

/* c [m, n] = A [m, k] B [k, n]: amp_gemm_fp8 (products exact, fp32 accumulation, per-tensor factors
 * applied to the sums, block factors at decode); k is the operands' stored k (padded under MXFP8). */
static int fp8_gemm(amp_ctx *ctx, int64_t m, int64_t n, fp8_operand a, fp8_operand b, float *c) {
    const int64_t k = a.trans ? a.q->rows : a.q->cols;
    const amp_gemm_fp8_operand ga = gemm_operand(a), gb = gemm_operand(b);
    const int st = amp_gemm_fp8(m, n, k, 1.0f, &ga, &gb, 0.0f, c, n);
    if (st != AMP_OK) amp_ctx_fail(ctx, st, "linear_fp8: GEMM failed: %s", amp_status_str(st));
    return st;
}

/* A quantize's source: a tensor's own contiguous fp32, bf16 or fp16 values (the cast decodes 16-bit ones
 * a band at a time: no fp32 copy of the whole), or an fp32 copy in scratch. */
typedef struct fp8_source {
    const void *data;
    amp_dtype dtype;
} fp8_source;

static fp8_source source_of(amp_ctx *ctx, const amp_tensor *t) {
    if (amp_tensor_is_contiguous(t) && (t->dtype == AMP_F32 || t->dtype == AMP_BF16 || t->dtype == AMP_F16))
        return (fp8_source){t->data, t->dtype};
    return (fp8_source){amp_f32_view(ctx, t), AMP_F32};
}


/* src cast for k along its columns into *by_cols and/or along its rows into *by_rows (NULL: not
 * wanted), in one pass over src (amp_fp8_linear_quantize2). */
static int quantize(amp_ctx *ctx, amp_fp8_linear *s, amp_fp8_tensor_role role, fp8_source src, int64_t rows,
                    int64_t cols, bool keep, amp_fp8_qmat *by_cols, amp_fp8_qmat *by_rows, amp_fp8_band_fn fn,
                    void *fn_arg) {
    const int st = amp_fp8_linear_quantize2(s, role, src.data, src.dtype, rows, cols, keep ? arena_alloc : scratch_alloc,
                                            ctx, by_cols, by_rows, fn, fn_arg);
    if (st != AMP_OK && amp_ctx_status(ctx) == AMP_OK)
        amp_ctx_fail(ctx, st, "linear_fp8: cannot quantize %s: %s", amp_fp8_tensor_role_name(role), amp_status_str(st));
    return st;
}

static bool per_tensor(amp_fp8_recipe r) { return r != AMP_FP8_RECIPE_MXFP8 && r != AMP_FP8_RECIPE_BLOCK; }

/* t's gradient += c [m, n] = A B (amp_gemm_fp8), to where amp_grad_gemm_open says (grad_sink_gemm.h):
 * by one epilogue pass over C after the whole product (amp_gemm_fp8 takes no epilogue), or by the
 * GEMM itself where the sink is a new fp32 gradient. The bits are amp_grad_accumulate's. */
static int fp8_gemm_into_grad(amp_ctx *ctx, int64_t m, int64_t n, fp8_operand a, fp8_operand b, amp_tensor *t) {
    amp_grad_gemm g;
    float *c = amp_grad_gemm_open(ctx, t, m, n, &g);
    if (c && fp8_gemm(ctx, m, n, a, b, c) == AMP_OK && amp_grad_gemm_epilogue_needed(&g))
        amp_gemm_epilogue_apply(&g.ep, c, n, m, n);
    return amp_grad_gemm_close(ctx, t, &g, c);
}

/* The bias gradient db [out]: the column sums of dY, rows in order (acc: db[j] += row[j]), added a
 * band of rows at a time as dY's cast decodes them (amp_fp8_band_fn). */
typedef struct bias_sums {
    float *db;
    int64_t cols;
} bias_sums;

static void add_rows(void *arg, const float *rows, int64_t r0, int64_t n) {
    const bias_sums *b = arg;
    const amp_elem_kernels *ek = amp_elem_active();
    (void)r0;
    for (int64_t r = 0; r < n; r++) ek->acc(b->db, rows + r * b->cols, (size_t)b->cols);
}

enum { DB_BAND = 32 }; /* rows of a 16-bit dY decoded at a time where no cast reads dY */

/* add_rows over all of dY (fp32, bf16 or fp16) where no cast decodes it; false when out of memory. */
static bool bias_sums_alone(amp_ctx *ctx, fp8_source g, int64_t rows, bias_sums *b) {
    if (g.dtype == AMP_F32) return add_rows(b, g.data, 0, rows), true;
    float *buf = amp_f32_scratch(ctx, (rows < DB_BAND ? rows : DB_BAND) * b->cols);
    if (!buf) return false;
    for (int64_t r0 = 0; r0 < rows; r0 += DB_BAND) {
        const int64_t n = rows - r0 < DB_BAND ? rows - r0 : DB_BAND;
        amp_convert(buf, AMP_F32, (const char *)g.data + (size_t)(r0 * b->cols) * amp_dtype_size(g.dtype), g.dtype,
                    (size_t)(n * b->cols));
        add_rows(b, buf, r0, n);
    }
    return true;
}

/* saved i[]: rows, in, out */
static void linear_fp8_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0], *w = node->in[1], *bias = node->n_in > 2 ? node->in[2] : NULL;
    const int64_t rows = node->i[0], in_f = node->i[1], out_f = node->i[2];
    fp8_saved *sv = node->saved;
    const fp8_source g = source_of(ctx, node->out->grad); /* [rows, out]: a 16-bit dY is cast as it is */
    if (!g.data) return;
    amp_fp8_linear *s = sv->state;
    const bool pt = per_tensor(amp_fp8_linear_recipe(s));
    amp_fp8_qmat gq, gq_rows; /* dY with k along out (dgrad) and along the rows (wgrad): one cast per-tensor */
    const bool dx = x->requires_grad, dw = w->requires_grad, dbias = bias && bias->requires_grad;
    bias_sums bs = {.db = dbias ? amp_f32_scratch(ctx, out_f) : NULL, .cols = out_f};
    if (dbias && !bs.db) return;
    for (int64_t j = 0; dbias && j < out_f; j++) bs.db[j] = 0.0f;
    if ((dx || dw) && quantize(ctx, s, AMP_FP8_DY, g, rows, out_f, false, dx || pt ? &gq : NULL,
                               dw && !pt ? &gq_rows : NULL, dbias ? add_rows : NULL, &bs))
        return;
    if (pt && dw) gq_rows = gq;
    /* dX [rows, in] = dY [rows, out] W [out, in] */
    if (dx && fp8_gemm_into_grad(ctx, rows, in_f, operand_of(&gq, true), operand_of(&sv->w_k_rows, true), x)) return;
    /* dW [out, in] = dY^T [out, rows] X [rows, in] */
    if (dw && fp8_gemm_into_grad(ctx, out_f, in_f, operand_of(&gq_rows, false), operand_of(&sv->x_k_rows, true), w))
        return;
    if (dbias && (dx || dw || bias_sums_alone(ctx, g, rows, &bs))) amp_grad_accumulate(ctx, bias, bs.db);
}

/* The forward's checks; the output dtype into *dt. */
static bool check_inputs(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias, amp_fp8_linear *s,
                         amp_dtype *dt) {
    if (!amp_op_input_ok(ctx, AMP_OP_LINEAR, x) || !amp_op_input_ok(ctx, AMP_OP_LINEAR, weight)) return false;
    if (bias && !amp_op_input_ok(ctx, AMP_OP_LINEAR, bias)) return false;
    char sx[64], sw[64];
    if (!s) return amp_op_fail(ctx, AMP_OP_LINEAR, "linear_fp8: no fp8 state (NULL)"), false;
    const int64_t in_f = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (x->ndim < 1 || weight->ndim != 2 || weight->shape[1] != in_f || amp_tensor_numel(x) == 0)
        return amp_op_fail(ctx, AMP_OP_LINEAR, "linear_fp8: input %s does not match weight %s ([out, in])",
                           amp_shape_str(x, sx, sizeof sx), amp_shape_str(weight, sw, sizeof sw)),
               false;
    if (bias && (bias->ndim != 1 || bias->shape[0] != weight->shape[0]))
        return amp_op_fail(ctx, AMP_OP_LINEAR, "linear_fp8: bias %s does not match %lld outputs",
                           amp_shape_str(bias, sx, sizeof sx), (long long)weight->shape[0]),
               false;
    const bool lowered = amp_autocast_enabled() && amp_autocast_get_policy(AMP_OP_LINEAR) == AMP_POLICY_LOWER;
    *dt = lowered ? amp_autocast_dtype() : amp_promote(x->dtype, weight->dtype);
    return true;
}

amp_tensor *amp_linear_fp8(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias, amp_fp8_linear *s) {
    amp_dtype dt;
    if (!check_inputs(ctx, x, weight, bias, s, &dt)) return NULL;
    const int64_t in_f = weight->shape[1], out_f = weight->shape[0], rows = amp_tensor_numel(x) / in_f;
    amp_tensor *in[3] = {x, weight, bias};
    const int n_in = bias ? 3 : 2;
    const bool keep = amp_autograd_will_record(ctx, in, n_in);
    fp8_saved *sv = keep ? amp_ctx_alloc(ctx, sizeof *sv) : NULL;
    if (keep && !sv) return NULL;
    fp8_saved local;
    if (!sv) sv = &local;
    memset(sv, 0, sizeof *sv);
    sv->state = s;
    int64_t shape[AMP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = out_f;
    amp_tensor *out = amp_ctx_new_tensor(ctx, dt, x->ndim, shape, true);
    if (!out) return NULL;
    amp_arena_mark mk = amp_scratch_mark(ctx);
    const fp8_source xs = source_of(ctx, x), ws = xs.data ? source_of(ctx, weight) : (fp8_source){0};
    const float *b32 = bias && ws.data ? amp_f32_view(ctx, bias) : NULL;
    /* an fp32 output is the GEMM's C itself; else C is scratch, rounded into the output by the epilogue */
    float *c = !ws.data ? NULL : dt == AMP_F32 ? out->data : amp_f32_scratch(ctx, rows * out_f);
    const bool pt = per_tensor(amp_fp8_linear_recipe(s)), mx = amp_fp8_linear_recipe(s) == AMP_FP8_RECIPE_MXFP8;
    int st = c && (!bias || b32) ? AMP_OK : AMP_ERR_OUT_OF_MEMORY;
    /* a recomputed region's second forward casts what the first cast (the same values, the same
     * scales: delayed scaling's from before the forward's update) and records nothing: amaxes and
     * statistics once */
    const bool was_paused = s->paused;
    if (ctx->replaying) s->paused = true, s->replaying = true;
    /* the column-wise copies (x for wgrad, MXFP8's W for dgrad) from the same pass as the forward's casts */
    const bool x_rows = keep && weight->requires_grad && !pt, w_rows = keep && x->requires_grad && mx;
    if (st == AMP_OK) st = quantize(ctx, s, AMP_FP8_X, xs, rows, in_f, keep, &sv->x, x_rows ? &sv->x_k_rows : NULL, NULL, NULL);
    if (st == AMP_OK) st = quantize(ctx, s, AMP_FP8_W, ws, out_f, in_f, keep, &sv->w, w_rows ? &sv->w_k_rows : NULL, NULL,
                                    NULL);
    if (st == AMP_OK) st = fp8_gemm(ctx, rows, out_f, operand_of(&sv->x, true), operand_of(&sv->w, false), c);
    if (!x_rows) sv->x_k_rows = sv->x;
    if (!w_rows) sv->w_k_rows = sv->w;
    s->paused = was_paused, s->replaying = false;
    if (st == AMP_OK) { /* one pass over C: c[j] + b[j] (the one IEEE add per value), then the single rounding */
        const bool half = dt == AMP_F16 || dt == AMP_BF16; /* other dtypes: amp_store_f32 (its checks) */
        const amp_gemm_epilogue ep = {.bias = b32, .out = half ? out->data : NULL, .out_dtype = dt, .ldo = out_f};
        amp_gemm_epilogue_apply(&ep, c, out_f, rows, out_f);
        if (!half && dt != AMP_F32) st = amp_store_f32(ctx, out, c);
    }
    amp_scratch_release(ctx, mk);
    if (st != AMP_OK) {
        if (amp_ctx_status(ctx) == AMP_OK) amp_ctx_fail(ctx, st, "linear_fp8: %s", amp_status_str(st));
        return NULL;
    }
    amp_node *node = amp_autograd_record(ctx, AMP_OP_LINEAR, dt, out, in, n_in, linear_fp8_backward);
    if (node) {
        node->i[0] = rows, node->i[1] = in_f, node->i[2] = out_f;
        node->saved = sv;
    }
    return out;
}
