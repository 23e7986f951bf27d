/* matmul and linear on amp_gemm: operands in the compute dtype (f32, f16 or bf16), products
 * accumulated in fp32, the result rounded once (after the bias is added, for linear). Backward runs
 * two more GEMMs in the same dtype: the output gradient is stored in that dtype already, so reading
 * it as such loses nothing. */
#include <string.h>

#include "amp/formats.h"
#include "amp/gemm.h"
#include "../core/accumulate.h"
#include "../core/parallel.h"
#include "../gemm/gemm_fused.h"
#include "../kernels/vecmath.h"
#include "grad_sink_gemm.h"
#include "op_util.h"

/* A matrix operand: the last two dims of a tensor, row-major or (a transposed view) column-major. */
typedef struct {
    const void *data;
    bool trans; /* stored as the transpose: element (r, c) at data[c * ld + r] */
    int64_t ld;
} mat;

static bool as_matrix(const amp_tensor *t, mat *out) {
    const int nd = t->ndim;
    const int64_t rows = t->shape[nd - 2], cols = t->shape[nd - 1];
    if (nd != 2) return false;
    if (t->stride[1] == 1 && (t->stride[0] >= cols || rows <= 1)) {
        *out = (mat){t->data, false, rows <= 1 ? (cols > 0 ? cols : 1) : t->stride[0]};
        return true;
    }
    if (t->stride[0] == 1 && (t->stride[1] >= rows || cols <= 1)) {
        *out = (mat){t->data, true, cols <= 1 ? (rows > 0 ? rows : 1) : t->stride[1]};
        return true;
    }
    return false;
}

static int gemm(amp_ctx *ctx, amp_op op, amp_dtype dt, mat a, bool ta, mat b, bool tb, int64_t m, int64_t n,
                int64_t k, float *c, float beta) {
    int st = amp_gemm(dt, a.trans != ta, b.trans != tb, m, n, k, 1.0f, a.data, a.ld, b.data, b.ld, beta, c,
                      n > 0 ? n : 1);
    if (st != AMP_OK) amp_ctx_fail(ctx, st, "%s: amp_gemm failed: %s", amp_op_name(op), amp_status_str(st));
    return st;
}

/* amp_gemm_into_grad_masked (grad_sink_gemm.h) for matrix operands, no row sums */
static int gemm_grad(amp_ctx *ctx, amp_op op, amp_dtype dt, mat a, bool ta, mat b, bool tb, int64_t m, int64_t n,
                     int64_t k, amp_tensor *t, const amp_tensor *relu_mask, const float *grad_mul) {
    return amp_gemm_into_grad_masked(ctx, op, dt, a.trans != ta, b.trans != tb, m, n, k, a.data, a.ld, b.data, b.ld, t,
                                     NULL, relu_mask, grad_mul);
}

/* The output gradient of a node as a row-major matrix in the compute dtype. */
static mat grad_matrix(amp_ctx *ctx, const amp_node *node, int64_t cols, amp_dtype dt) {
    const amp_tensor *g = node->out->grad;
    if (g->dtype == dt && amp_tensor_is_contiguous(g)) return (mat){g->data, false, cols > 0 ? cols : 1};
    void *tmp = amp_scratch_alloc(ctx, (size_t)amp_tensor_numel(g) * amp_dtype_size(dt));
    if (tmp) amp_tensor_read(g, tmp, dt);
    return (mat){tmp, false, cols > 0 ? cols : 1};
}

/* ---- matmul ---- */

/* The matrix descriptor of a recorded operand: a 2-D tensor (possibly a transposed view) or batch
 * element i of a contiguous batched one. */
static mat operand(const amp_tensor *t, int64_t i, int64_t rows, int64_t cols) {
    mat d;
    if (t->ndim == 2 && as_matrix(t, &d)) return d;
    return (mat){(const char *)t->data + (size_t)(i * rows * cols) * amp_dtype_size(t->dtype), false,
                 cols > 0 ? cols : 1};
}

/* saved i[]: batch, m, n, k, b_batched */
static void matmul_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *a = node->in[0], *b = node->in[1];
    const int64_t batch = node->i[0], m = node->i[1], n = node->i[2], k = node->i[3];
    const bool b_batched = node->i[4] != 0;
    const amp_dtype dt = node->out->compute_dtype;
    const size_t es = amp_dtype_size(dt);
    mat g = grad_matrix(ctx, node, n, dt);
    if (!g.data) return;
    /* With a shared (2-D) b, a's batch folds into the rows: one GEMM each way. */
    const int64_t nb = b_batched ? batch : 1, rows = b_batched ? m : batch * m;
    if (a->requires_grad) { /* dA = G B^T */
        float *da = amp_f32_scratch(ctx, batch * m * k);
        if (!da) return;
        for (int64_t i = 0; i < nb; i++) {
            mat gi = {(const char *)g.data + (size_t)(i * rows * n) * es, false, g.ld};
            if (gemm(ctx, AMP_OP_MATMUL, dt, gi, false, operand(b, i, k, n), true, rows, k, n, da + i * rows * k, 0.0f))
                return;
        }
        amp_grad_accumulate(ctx, a, da);
    }
    if (b->requires_grad) { /* dB = A^T G */
        float *db = amp_f32_scratch(ctx, nb * k * n);
        if (!db) return;
        for (int64_t i = 0; i < nb; i++) {
            mat gi = {(const char *)g.data + (size_t)(i * rows * n) * es, false, g.ld};
            if (gemm(ctx, AMP_OP_MATMUL, dt, operand(a, i, rows, k), true, gi, false, k, n, rows, db + i * k * n, 0.0f))
                return;
        }
        amp_grad_accumulate(ctx, b, db);
    }
}

amp_tensor *amp_matmul(amp_ctx *ctx, amp_tensor *a, amp_tensor *b) {
    if (!amp_op_input_ok(ctx, AMP_OP_MATMUL, a) || !amp_op_input_ok(ctx, AMP_OP_MATMUL, b)) return NULL;
    amp_tensor *cast_in[2] = {a, b};
    if (!amp_autocast_inputs(ctx, AMP_OP_MATMUL, cast_in, 2)) return NULL;
    a = cast_in[0], b = cast_in[1];
    char sa[64], sb[64];
    if (a->ndim < 2 || b->ndim < 2)
        return amp_op_fail(ctx, AMP_OP_MATMUL, "needs matrices, got %s and %s", amp_shape_str(a, sa, sizeof sa),
                           amp_shape_str(b, sb, sizeof sb));
    const int64_t m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1], n = b->shape[b->ndim - 1];
    bool shapes_ok = b->shape[b->ndim - 2] == k && (b->ndim == 2 || b->ndim == a->ndim);
    for (int i = 0; shapes_ok && b->ndim > 2 && i < a->ndim - 2; i++) shapes_ok = a->shape[i] == b->shape[i];
    if (!shapes_ok)
        return amp_op_fail(ctx, AMP_OP_MATMUL, "shapes %s and %s do not multiply", amp_shape_str(a, sa, sizeof sa),
                           amp_shape_str(b, sb, sizeof sb));
    const amp_dtype dt = amp_promote(a->dtype, b->dtype);
    if (!(a = amp_op_as(ctx, a, dt)) || !(b = amp_op_as(ctx, b, dt))) return NULL;
    const int64_t batch = amp_shape_numel(a->ndim - 2, a->shape);
    const bool b_batched = b->ndim > 2;
    /* 2-D operands may be transposed views (GEMM reads them as they are); others are made contiguous. */
    mat tmp;
    if (!(a->ndim == 2 && as_matrix(a, &tmp)) && !(a = amp_contiguous(ctx, a))) return NULL;
    if (!(b->ndim == 2 && as_matrix(b, &tmp)) && !(b = amp_contiguous(ctx, b))) return NULL;
    int64_t shape[AMP_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[a->ndim - 1] = n;
    amp_tensor *out = amp_ctx_new_tensor(ctx, dt, a->ndim, shape, true);
    if (!out) return NULL;
    amp_arena_mark mk = amp_scratch_mark(ctx);
    float *c = dt == AMP_F32 ? out->data : amp_f32_scratch(ctx, batch * m * n);
    const int64_t nb = b_batched ? batch : 1, rows = b_batched ? m : batch * m;
    for (int64_t i = 0; c && i < nb; i++)
        if (gemm(ctx, AMP_OP_MATMUL, dt, operand(a, i, rows, k), false, operand(b, i, k, n), false, rows, n, k,
                 c + i * rows * n, 0.0f))
            break;
    if (c && dt != AMP_F32 && ctx->status == AMP_OK) amp_store_f32(ctx, out, c);
    amp_scratch_release(ctx, mk);
    if (ctx->status != AMP_OK) return NULL;
    amp_tensor *in[2] = {a, b};
    amp_node *node = amp_autograd_record(ctx, AMP_OP_MATMUL, dt, out, in, 2, matmul_backward);
    if (node) node->i[0] = batch, node->i[1] = m, node->i[2] = n, node->i[3] = k, node->i[4] = b_batched;
    return out;
}

/* ---- linear ---- */

/* db[j] += g[r, j] over the rows r in increasing order, g [rows, cols] contiguous in dt: each row is
 * decoded exactly to fp32 a chunk at a time on the stack (the sums of a full fp32 copy of g, without
 * writing one), and added with a fixed-length inner loop that the compilers vectorize. The columns
 * are split between threads from COLUMN_MIN_PER_THREAD values of g per thread: each column's sum is
 * the same additions in the same order wherever it runs (the mlp's amp-bf16 step at two threads, Zen
 * 4: 0.6% of the samples on one thread while the other waited). */
#define COLUMN_CHUNK 1024
enum { COLUMN_MIN_PER_THREAD = 65536 };

typedef struct column_job {
    float *db;
    const void *g;
    amp_dtype dt;
    int64_t rows, cols;
} column_job;

static void column_range(void *arg, int64_t j0, int64_t j1, int thread_id) {
    (void)thread_id;
    const column_job *j = arg;
    float buf[COLUMN_CHUNK];
    const size_t es = amp_dtype_size(j->dt);
    for (int64_t r = 0; r < j->rows; r++)
        for (int64_t c0 = j0; c0 < j1; c0 += COLUMN_CHUNK) {
            const int64_t len = j1 - c0 < COLUMN_CHUNK ? j1 - c0 : COLUMN_CHUNK;
            const char *src = (const char *)j->g + (size_t)(r * j->cols + c0) * es;
            if (j->dt == AMP_F32) amp_acc_f32(j->db + c0, (const float *)src, len, false);
            else {
                amp_convert(buf, AMP_F32, src, j->dt, (size_t)len);
                amp_acc_f32(j->db + c0, buf, len, false);
            }
        }
}

static void column_sums(float *db, const void *g, amp_dtype dt, int64_t rows, int64_t cols) {
    column_job job = {db, g, dt, rows, cols};
    const int64_t per_col = rows > 0 ? rows : 1; /* values of g per column: the threads' minimum in columns */
    amp_parallel_range(cols, (COLUMN_MIN_PER_THREAD + per_col - 1) / per_col, 16, column_range, &job);
}

/* x's elements rounded to dt, contiguous, in scratch; NULL (error recorded) when out of memory. */
static void *narrow_copy(amp_ctx *ctx, const amp_tensor *x, amp_dtype dt) {
    void *p = amp_scratch_alloc(ctx, (size_t)amp_tensor_numel(x) * amp_dtype_size(dt));
    if (p && amp_tensor_read(x, p, dt) != AMP_OK) {
        amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "%s: cannot convert the input", amp_op_name(AMP_OP_LINEAR));
        return NULL;
    }
    return p;
}

/* Whether linear reads x in place, in fp32, though autocast lowers the op: x needs no gradient (a
 * batch of data: the first layer's input). Autocast's copy of x in the region's dtype would be kept
 * until backward, for the weight gradient, next to x itself (the mlp: 0.38 MiB beside the 0.77 MiB
 * batch); instead forward and backward each round x into scratch, the bits of the copy, at the
 * price of one more conversion pass (x's size: a small share of the two GEMMs that read it). */
static bool linear_reads_in_place(const amp_tensor *x) {
    return amp_autocast_enabled() && amp_autocast_get_policy(AMP_OP_LINEAR) == AMP_POLICY_LOWER &&
           amp_autocast_dtype() != AMP_F32 && x->dtype == AMP_F32 && !x->requires_grad && x->ndim >= 1 &&
           amp_tensor_is_contiguous(x);
}

/* The activation a linear applies to its output in its GEMM's epilogue (node i[3]). */
typedef enum { ACT_NONE, ACT_RELU, ACT_GELU, ACT_GELU_TANH } linear_act;

/* The gelus: a derivative stored in forward, multiplied in backward */
static bool act_is_gelu(int64_t act) { return act == ACT_GELU || act == ACT_GELU_TANH; }

/* relu's gradient for amp_linear_relu: G = the output's gradient masked where the output y (stored in
 * dt, relu's result) is not positive, in scratch in dt: the gradient amp_relu's backward would have
 * given the linear's output in the unfused pair (in that output's dtype, dt). */
static mat relu_masked(amp_ctx *ctx, const amp_node *node, mat g, int64_t rows, int64_t out_f, amp_dtype dt) {
    const int64_t n = rows * out_f;
    void *dz = amp_scratch_alloc(ctx, (size_t)n * amp_dtype_size(dt));
    if (!dz) return (mat){NULL, false, 1};
    amp_relu_grad_run(dz, node->out->data, g.data, n, dt);
    return (mat){dz, false, g.ld};
}

/* gelu's gradient for amp_linear_gelu: G = the output's gradient (fp32) times the derivative its
 * forward stored (node->saved), in fp32 scratch: the gradient amp_gelu's backward would have given the
 * fp32 linear output in the unfused pair. Split between threads; each element is one multiply. */
enum { GELU_MUL_MIN_PER_THREAD = 32768 };

typedef struct gelu_mul_job {
    float *dz;
    const float *g, *d;
} gelu_mul_job;

static void gelu_mul_range(void *arg, int64_t i0, int64_t i1, int thread_id) {
    (void)thread_id;
    const gelu_mul_job *j = arg;
    float *restrict dz = j->dz;
    const float *restrict g = j->g, *restrict d = j->d;
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) /* blocks of 16 with a fixed count: what gcc's -O2 vectorizer takes */
        for (int q = 0; q < 16; q++) dz[i + q] = g[i + q] * d[i + q];
    for (; i < i1; i++) dz[i] = g[i] * d[i];
}

static mat gelu_multiplied(amp_ctx *ctx, const amp_node *node, mat g, int64_t rows, int64_t out_f) {
    const int64_t n = rows * out_f;
    float *dz = amp_f32_scratch(ctx, n);
    if (!dz) return (mat){NULL, false, 1};
    gelu_mul_job job = {dz, g.data, node->saved};
    amp_parallel_range(n, GELU_MUL_MIN_PER_THREAD, 16, gelu_mul_range, &job);
    return (mat){dz, false, g.ld};
}

/* amp_linear_gelu_tanh's activation on the fp32 product (bias added), in place, with its derivative
 * into d when d is not NULL: one pass after the GEMM (the tanh approximation has no epilogue of its
 * own), split between threads; each element's bits depend on its value alone. */
typedef struct gelu_tanh_job {
    float *y, *d;
} gelu_tanh_job;

static void gelu_tanh_range(void *arg, int64_t i0, int64_t i1, int thread_id) {
    (void)thread_id;
    const gelu_tanh_job *j = arg;
    const amp_vmath_kernels *k = amp_vmath_active();
    if (j->d) k->gelu_tanh_deriv(j->y + i0, j->d + i0, j->y + i0, (size_t)(i1 - i0));
    else k->gelu_tanh(j->y + i0, j->y + i0, (size_t)(i1 - i0));
}

static void gelu_tanh_pass(float *y, float *d, int64_t n) {
    gelu_tanh_job job = {y, d};
    amp_parallel_range(n, GELU_MUL_MIN_PER_THREAD, 16, gelu_tanh_range, &job);
}

static void linear_backward(amp_ctx *ctx, amp_node *node);

/* Whether x, the input of a linear whose backward is about to produce x's gradient, is the output of
 * an amp_linear_relu or amp_linear_gelu whose backward will be the only reader of that gradient: x
 * has no gradient yet, is read by this one node, not retained, and no hook looks at gradients. Then
 * the gradient GEMM applies the activation's backward in its epilogue (grad_sink_gemm.h: relu's mask,
 * or the product with gelu's stored derivative), and the producer's backward finds it done (i[4])
 * instead of making a masked copy: one pass over the gradient less (mlp fp32, one thread: ~1% of the
 * step). The stored gradient is the activation's input gradient, which nothing else sees. */
static bool act_premask_ok(const amp_ctx *ctx, const amp_tensor *x) {
    const amp_node *p = x->grad_fn;
    return p && p->backward == linear_backward && p->i[3] != ACT_NONE && p->out == x && p->out_uses == 1 &&
           !x->grad && !x->retains_grad && !ctx->backward_grad && amp_tensor_is_contiguous(x);
}

/* saved i[]: rows (the flattened leading dims), in, out, the activation (linear_act: amp_linear_relu,
 * the output is relu's; amp_linear_gelu, gelu's, with its derivative at the pre-activation in
 * node->saved, fp32), premasked (set by the next linear's backward: the output's gradient is the
 * activation's backward already), residual (amp_linear_residual: the output is that input, the last
 * of in[], plus the linear's) */
static void linear_backward(amp_ctx *ctx, amp_node *node) {
    const bool has_res = node->i[5] != 0;
    amp_tensor *x = node->in[0], *w = node->in[1], *bias = node->n_in > 2 + has_res ? node->in[2] : NULL;
    amp_tensor *res = has_res ? node->in[node->n_in - 1] : NULL;
    const int64_t rows = node->i[0], in_f = node->i[1], out_f = node->i[2];
    const linear_act act = (linear_act)node->i[3];
    const bool premasked = node->i[4] != 0;
    node->i[4] = 0; /* this backward's alone: another backward over the tape decides afresh */
    const amp_dtype dt = node->out->compute_dtype;
    mat g = grad_matrix(ctx, node, out_f, dt);
    if (!g.data) return;
    if (act == ACT_RELU && !premasked && !(g = relu_masked(ctx, node, g, rows, out_f, dt)).data) return;
    if (act_is_gelu(act) && !premasked && !(g = gelu_multiplied(ctx, node, g, rows, out_f)).data) return;
    const mat wm = {w->data, false, in_f > 0 ? in_f : 1};
    /* dx [rows, in] = G [rows, out] W [out, in];  dW [out, in] = G^T [out, rows] x [rows, in] */
    if (x->requires_grad) {
        amp_node *p = act_premask_ok(ctx, x) ? x->grad_fn : NULL;
        if (gemm_grad(ctx, AMP_OP_LINEAR, dt, g, false, wm, false, rows, in_f, out_f, x,
                      p && p->i[3] == ACT_RELU ? x : NULL, p && act_is_gelu(p->i[3]) ? p->saved : NULL))
            return;
        if (p) p->i[4] = 1;
    }
    /* db = column sums of G in fp32: of G in dt when that is exact (the output gradient itself), else
     * of its fp32 values. With the weight gradient G^T x, whose packed G^T panels hold exactly G in
     * fp32 where the kernel packs fp32 (amp_gemm_sums_a_fused), the GEMM adds them from there while
     * they are in cache (the same additions in the same order as column_sums): G, 2-8 MB at the gpt's
     * shapes, is not read from memory a third time. */
    /* exact: G is the output's gradient in dt as it is (with an activation: its backward on it, what
     * the unfused activation's backward would have stored as the linear output's gradient; with a
     * residual: the sum's gradient rounded to dt, what amp_add's backward stored as the linear's) */
    const bool want_db = bias && bias->requires_grad;
    const bool exact = act != ACT_NONE || has_res || g.data == node->out->grad->data;
    float *db = want_db ? amp_f32_scratch(ctx, out_f) : NULL;
    if (want_db && !db) return;
    if (db) memset(db, 0, (size_t)out_f * sizeof *db);
    bool db_done = false;
    if (w->requires_grad) {
        /* x in its own dtype is an input read in place (linear_reads_in_place): rounded again, as in forward */
        const void *xd = x->dtype == dt ? x->data : narrow_copy(ctx, x, dt);
        const mat xm = {xd, false, in_f > 0 ? in_f : 1};
        db_done = db && exact && amp_gemm_sums_a_fused(dt, out_f, in_f, rows);
        if (!xd || amp_gemm_into_grad_sums(ctx, AMP_OP_LINEAR, dt, true, false, out_f, in_f, rows, g.data, g.ld,
                                           xm.data, xm.ld, w, db_done ? db : NULL))
            return;
    }
    if (want_db) {
        if (!db_done) {
            const void *src = exact ? g.data : (const void *)amp_grad_out(ctx, node);
            if (!src) return;
            column_sums(db, src, exact ? dt : AMP_F32, rows, out_f);
        }
        amp_grad_accumulate(ctx, bias, db);
    }
    /* The residual's gradient is the sum's as it is: handed over (no copy) where it is the residual's
     * first and nothing else keeps it, else added; last, since the products above read it. */
    if (res && res->requires_grad && ctx->status == AMP_OK && !amp_grad_hand_over_to(ctx, node, res))
        amp_grad_accumulate_grad(ctx, res, node->out->grad);
}

/* Whether amp_linear_residual adds the residual in the product's epilogue: an fp32 residual, contiguous,
 * of the output's shape (no broadcasting). The linear's result, in its compute dtype, is then rounded
 * there and added in fp32, as amp_add promotes. Else the pair. */
static bool residual_fusable(const amp_tensor *res, const amp_tensor *x, const amp_tensor *weight) {
    if (res->dtype != AMP_F32 || !amp_tensor_is_contiguous(res) || weight->ndim != 2 || x->ndim < 1 ||
        res->ndim != x->ndim)
        return false;
    for (int d = 0; d < x->ndim; d++)
        if (res->shape[d] != (d == x->ndim - 1 ? weight->shape[0] : x->shape[d])) return false;
    return true;
}

static amp_tensor *linear(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias, linear_act act,
                          amp_tensor *res) {
    if (!amp_op_input_ok(ctx, AMP_OP_LINEAR, x) || !amp_op_input_ok(ctx, AMP_OP_LINEAR, weight)) return NULL;
    if (bias && !amp_op_input_ok(ctx, AMP_OP_LINEAR, bias)) return NULL;
    const bool x_in_place = linear_reads_in_place(x);
    amp_tensor *cast_in[3] = {x_in_place ? NULL : x, weight, bias};
    if (!amp_autocast_inputs(ctx, AMP_OP_LINEAR, cast_in, 3)) return NULL;
    x = x_in_place ? x : cast_in[0], weight = cast_in[1], bias = cast_in[2];
    char sx[64], sw[64];
    const int64_t in_f = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (x->ndim < 1 || weight->ndim != 2 || weight->shape[1] != in_f)
        return amp_op_fail(ctx, AMP_OP_LINEAR, "input %s does not match weight %s ([out, in])",
                           amp_shape_str(x, sx, sizeof sx), amp_shape_str(weight, sw, sizeof sw));
    const int64_t out_f = weight->shape[0];
    if (bias && (bias->ndim != 1 || bias->shape[0] != out_f))
        return amp_op_fail(ctx, AMP_OP_LINEAR, "bias %s does not match %lld outputs", amp_shape_str(bias, sx, sizeof sx),
                           (long long)out_f);
    amp_dtype dt = x_in_place ? amp_autocast_dtype() : amp_promote(x->dtype, weight->dtype);
    if (bias) dt = amp_promote(dt, bias->dtype);
    if (!x_in_place && !(x = amp_op_as(ctx, x, dt))) return NULL;
    if (!(weight = amp_op_as(ctx, weight, dt))) return NULL;
    if (bias && !(bias = amp_op_as(ctx, bias, dt))) return NULL;
    if (!(x = amp_contiguous(ctx, x)) || !(weight = amp_contiguous(ctx, weight))) return NULL;
    /* gelu in the epilogue where the linear's result is fp32 (its bits there are amp_gelu's on it);
     * under autocast amp_gelu on the rounded output, as the unfused pair computes it */
    const bool gelu_after = act_is_gelu(act) && dt != AMP_F32;
    const bool tanh_after = gelu_after && act == ACT_GELU_TANH;
    if (gelu_after) act = ACT_NONE;
    const int64_t rows = amp_shape_numel(x->ndim - 1, x->shape);
    int64_t shape[AMP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = out_f;
    /* with a residual the output is fp32 (amp_add's promotion), the linear's rounded to dt on the way */
    amp_tensor *out = amp_ctx_new_tensor(ctx, res ? AMP_F32 : dt, x->ndim, shape, true);
    if (!out) return NULL;
    amp_tensor *in[4] = {x, weight, bias ? bias : res, bias ? res : NULL};
    const int n_in = 2 + (bias != NULL) + (res != NULL);
    /* gelu's derivative at the pre-activation, for backward (which then needs neither erfc again nor the
     * pre-activation): in the arena, where the unfused pair kept the pre-activation */
    float *deriv = NULL;
    if (act_is_gelu(act) && amp_autograd_will_record(ctx, in, n_in) &&
        !(deriv = amp_ctx_alloc(ctx, (size_t)(rows * out_f > 0 ? rows * out_f : 1) * sizeof(float))))
        return NULL;
    amp_arena_mark mk = amp_scratch_mark(ctx);
    float *c = dt == AMP_F32 || res ? out->data : amp_f32_scratch(ctx, rows * out_f);
    /* The bias is added in fp32 before the single rounding to dt, both in the GEMM's epilogue while
     * each block of C is in cache (the bits of a separate add pass and amp_convert). */
    const float *bv = bias ? amp_f32_view(ctx, bias) : NULL;
    const int64_t ldc = out_f > 0 ? out_f : 1;
    const amp_gemm_epilogue ep = {.bias = bv,
                                  .relu = act == ACT_RELU,
                                  .gelu = act == ACT_GELU,
                                  .gelu_deriv = act == ACT_GELU ? deriv : NULL,
                                  .ldderiv = ldc,
                                  .residual = res ? res->data : NULL,
                                  .ldres = ldc,
                                  .res_round = dt,
                                  .out = dt != AMP_F32 && !res ? out->data : NULL,
                                  .out_dtype = dt,
                                  .ldo = ldc};
    const void *xd = x->dtype == dt ? x->data : narrow_copy(ctx, x, dt);
    if (c && xd && (!bias || bv)) {
        int st = amp_gemm_fused(dt, false, true, rows, out_f, in_f, 1.0f, xd, in_f > 0 ? in_f : 1, weight->data,
                                in_f > 0 ? in_f : 1, 0.0f, c, ldc, bv || act != ACT_NONE || ep.out || res ? &ep : NULL);
        if (st != AMP_OK) amp_ctx_fail(ctx, st, "%s: amp_gemm failed: %s", amp_op_name(AMP_OP_LINEAR), amp_status_str(st));
        else if (act == ACT_GELU_TANH) gelu_tanh_pass(c, deriv, rows * out_f);
    }
    amp_scratch_release(ctx, mk);
    if (ctx->status != AMP_OK) return NULL;
    amp_node *node = amp_autograd_record(ctx, AMP_OP_LINEAR, dt, out, in, n_in, linear_backward);
    if (node) {
        node->i[0] = rows, node->i[1] = in_f, node->i[2] = out_f, node->i[3] = act, node->i[5] = res != NULL;
        node->saved = deriv;
    }
    if (!gelu_after) return out;
    return tanh_after ? amp_gelu_tanh(ctx, out) : amp_gelu(ctx, out);
}

amp_tensor *amp_linear(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias) {
    return linear(ctx, x, weight, bias, ACT_NONE, NULL);
}

amp_tensor *amp_linear_relu(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias) {
    return linear(ctx, x, weight, bias, ACT_RELU, NULL);
}

amp_tensor *amp_linear_gelu(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias) {
    return linear(ctx, x, weight, bias, ACT_GELU, NULL);
}

amp_tensor *amp_linear_gelu_tanh(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias) {
    return linear(ctx, x, weight, bias, ACT_GELU_TANH, NULL);
}

amp_tensor *amp_linear_residual(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias,
                                amp_tensor *residual) {
    if (!amp_op_input_ok(ctx, AMP_OP_ADD, residual) || !amp_op_input_ok(ctx, AMP_OP_LINEAR, x) ||
        !amp_op_input_ok(ctx, AMP_OP_LINEAR, weight))
        return NULL;
    if (residual_fusable(residual, x, weight)) return linear(ctx, x, weight, bias, ACT_NONE, residual);
    amp_tensor *y = amp_linear(ctx, x, weight, bias);
    return y ? amp_add(ctx, residual, y) : NULL;
}
