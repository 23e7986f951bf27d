/* Elementwise add, sub, mul, div with NumPy/PyTorch broadcasting, and multiplication by a scalar.
 * Inputs are promoted to a common dtype, the result's (inputs are read in place, each in its own
 * dtype: amp_autocast_inputs_exact; gradients flow back in each input's own dtype); arithmetic is
 * fp32; the result is rounded once. */
#include <string.h>

#include "../core/parallel.h"
#include "../kernels/elem_kernels.h"
#include "grad_sink_gemm.h"
#include "op_util.h"

typedef struct {
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    int64_t sa[AMP_MAX_DIMS], sb[AMP_MAX_DIMS]; /* element strides of a and b in the output's index
                                                   space; 0 along broadcast dimensions */
} bcast;

/* Right-aligned broadcasting; false when a dimension pair is neither equal nor 1. */
static bool make_bcast(const amp_tensor *a, const amp_tensor *b, bcast *bc) {
    const int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t ca[AMP_MAX_DIMS], cb[AMP_MAX_DIMS]; /* contiguous strides of a and b */
    amp_contiguous_strides(a->ndim, a->shape, ca);
    amp_contiguous_strides(b->ndim, b->shape, cb);
    bc->ndim = nd;
    for (int i = 0; i < nd; i++) {
        const int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        const int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) return false;
        bc->shape[i] = da > db ? da : db;
        if (da == 0 || db == 0) bc->shape[i] = 0;
        bc->sa[i] = (ia >= 0 && da != 1) ? ca[ia] : 0;
        bc->sb[i] = (ib >= 0 && db != 1) ? cb[ib] : 0;
    }
    return true;
}

/* Calls body(i, ia, ib) for every output element i with the matching a and b element indices. */
#define BCAST_FOR(bc, n, body)                                                        \
    do {                                                                              \
        int64_t idx_[AMP_MAX_DIMS] = {0}, ia = 0, ib = 0;                             \
        for (int64_t i = 0; i < (n); i++) {                                           \
            body;                                                                     \
            for (int d_ = (bc)->ndim - 1; d_ >= 0; d_--) {                            \
                ia += (bc)->sa[d_], ib += (bc)->sb[d_];                               \
                if (++idx_[d_] < (bc)->shape[d_]) break;                              \
                ia -= (bc)->sa[d_] * idx_[d_], ib -= (bc)->sb[d_] * idx_[d_];         \
                idx_[d_] = 0;                                                         \
            }                                                                         \
        }                                                                             \
    } while (0)

/* The element count of x's period when x's index is the output's index modulo it: x has the
 * output's trailing dimensions from some point on and is broadcast along all before it (x = the
 * output's shape is the period n; a residual add, or a [T, C] position table added to [B, T, C]);
 * 0 when x is broadcast otherwise. */
static int64_t bcast_period(const bcast *bc, const int64_t *sx, int64_t n) {
    int64_t period = 1;
    int d = bc->ndim - 1;
    for (; d >= 0 && (sx[d] != 0 || bc->shape[d] == 1); d--) period *= bc->shape[d];
    for (; d >= 0; d--)
        if (sx[d] != 0) return 0;
    return n > 0 && period > 0 && n % period == 0 ? period : 0;
}

/* values per chunk of a full-shape gradient: 64 KiB of fp32, in L2 */
enum { ADD_GRAD_CHUNK = 16384 };
/* The row kernels' passes below split between threads from this many elements per thread: each
 * element's result depends on its own values alone (add's forward, 0 + g), so the bits stay. On one
 * thread, the other threads would wait through them (the gpt's residual adds are that large). */
enum { ADD_MIN_PER_THREAD = 32768 };

/* add's forward on the row kernel, y[i] = a[i % pa] + b[i % pb] (pa and pb periods of n, the smaller
 * dividing the larger), over [i0, i1) in pieces that do not cross a multiple of the smaller */
typedef struct add_job {
    float *y;
    const float *a, *b;
    int64_t pa, pb;
} add_job;

static void add_range(void *arg, int64_t i0, int64_t i1, int thread_id) {
    (void)thread_id;
    const add_job *j = arg;
    const amp_elem_kernels *ek = amp_elem_active();
    const int64_t p = j->pa < j->pb ? j->pa : j->pb;
    for (int64_t i = i0, len; i < i1; i += len) {
        len = p - i % p < i1 - i ? p - i % p : i1 - i;
        ek->add(j->y + i, j->a + i % j->pa, j->b + i % j->pb, (size_t)len);
    }
}

/* amp_grad_chunk_fn: 0 + g on elements [off, off + len) (arg: g) */
static void pass_chunk(const void *arg, float *dst, int64_t off, int64_t len) {
    amp_elem_active()->add_scalar(dst, (const float *)arg + off, 0.0f, (size_t)len);
}

/* add's backward when each input is the output's shape or a period of it (bcast_period): the
 * row kernels give the generic loop's bits (0 + g, and a period's gradient summed over the
 * periods in the same order), without its index arithmetic. false: not that case. */
static bool add_backward_rows(amp_ctx *ctx, amp_node *node, const bcast *bc, int64_t n, const float *g, float *da,
                              float *db) {
    const int64_t pa = bcast_period(bc, bc->sa, n), pb = bcast_period(bc, bc->sb, n);
    if (!pa || !pb) return false;
    const amp_elem_kernels *ek = amp_elem_active();
    float *const d[2] = {da, db};
    const int64_t p[2] = {pa, pb};
    for (int k = 0; k < 2; k++) {
        if (!d[k]) continue;
        if (p[k] == n) { /* 0 + g, straight where the input's gradient goes, a chunk at a time */
            amp_grad_chunks_parallel(ctx, node->in[k], n, ADD_GRAD_CHUNK, ADD_MIN_PER_THREAD, pass_chunk, g);
        } else {
            memset(d[k], 0, (size_t)p[k] * sizeof *d[k]);
            for (int64_t i = 0; i < n; i += p[k]) ek->acc(d[k], g + i, (size_t)p[k]);
            amp_grad_accumulate(ctx, node->in[k], d[k]);
        }
    }
    return true;
}

static void binary_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *a = node->in[0], *b = node->in[1];
    const bcast *bc = node->saved;
    const int64_t n = amp_tensor_numel(node->out);
    const float *g = amp_grad_out(ctx, node);
    const float *av = amp_f32_view(ctx, a), *bv = amp_f32_view(ctx, b);
    float *da = a->requires_grad ? amp_f32_scratch(ctx, amp_tensor_numel(a)) : NULL;
    float *db = b->requires_grad ? amp_f32_scratch(ctx, amp_tensor_numel(b)) : NULL;
    if (!g || !av || !bv || ctx->status != AMP_OK) return;
    if (node->op == AMP_OP_ADD && add_backward_rows(ctx, node, bc, n, g, da, db)) return;
    if (da) memset(da, 0, (size_t)amp_tensor_numel(a) * sizeof *da);
    if (db) memset(db, 0, (size_t)amp_tensor_numel(b) * sizeof *db);
    switch (node->op) {
    case AMP_OP_ADD:
        BCAST_FOR(bc, n, { if (da) da[ia] += g[i]; if (db) db[ib] += g[i]; });
        break;
    case AMP_OP_SUB:
        BCAST_FOR(bc, n, { if (da) da[ia] += g[i]; if (db) db[ib] -= g[i]; });
        break;
    case AMP_OP_MUL:
        BCAST_FOR(bc, n, { if (da) da[ia] += g[i] * bv[ib]; if (db) db[ib] += g[i] * av[ia]; });
        break;
    default: /* div: d(a/b)/da = 1/b, d(a/b)/db = -a/b^2 */
        BCAST_FOR(bc, n, {
            if (da) da[ia] += g[i] / bv[ib];
            if (db) db[ib] -= g[i] * av[ia] / (bv[ib] * bv[ib]);
        });
        break;
    }
    if (da) amp_grad_accumulate(ctx, a, da);
    if (db) amp_grad_accumulate(ctx, b, db);
}

static amp_tensor *binary(amp_ctx *ctx, amp_op op, amp_tensor *a, amp_tensor *b) {
    if (!amp_op_input_ok(ctx, op, a) || !amp_op_input_ok(ctx, op, b)) return NULL;
    amp_tensor *cast_in[2] = {a, b};
    amp_dtype target;
    if (!amp_autocast_inputs_exact(ctx, op, cast_in, 2, &target)) return NULL;
    a = cast_in[0], b = cast_in[1];
    /* Inputs of two dtypes are read in place, each in its own: promotion (amp_promote, or autocast's
     * promote and fp32 policies) only widens, to f32, whose values the f32 arithmetic reads anyway. A
     * cast would be a copy kept until backward (the gpt's residual adds: a bf16 linear output plus the
     * fp32 stream, 2 MiB a layer) and a pass over it. */
    const amp_dtype dtype = target == AMP_F32 ? AMP_F32 : amp_promote(a->dtype, b->dtype);
    bcast bc;
    if (!make_bcast(a, b, &bc)) {
        char sa[64], sb[64];
        return amp_op_fail(ctx, op, "shapes %s and %s do not broadcast", amp_shape_str(a, sa, sizeof sa),
                           amp_shape_str(b, sb, sizeof sb));
    }
    amp_tensor *out = amp_ctx_new_tensor(ctx, dtype, bc.ndim, bc.shape, true);
    if (!out) return NULL;
    const int64_t n = amp_tensor_numel(out);
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *av = amp_f32_view(ctx, a), *bv = amp_f32_view(ctx, b);
    float *y = dtype == AMP_F32 ? out->data : amp_f32_scratch(ctx, n);
    if (!av || !bv || !y) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    const int64_t pa = bcast_period(&bc, bc.sa, n), pb = bcast_period(&bc, bc.sb, n);
    if (op == AMP_OP_ADD && pa && pb) { /* the same bits as BCAST_FOR, a row kernel per period */
        add_job job = {y, av, bv, pa, pb};
        amp_parallel_range(n, ADD_MIN_PER_THREAD, 16, add_range, &job);
    } else switch (op) {
    case AMP_OP_ADD: BCAST_FOR(&bc, n, y[i] = av[ia] + bv[ib]); break;
    case AMP_OP_SUB: BCAST_FOR(&bc, n, y[i] = av[ia] - bv[ib]); break;
    case AMP_OP_MUL: BCAST_FOR(&bc, n, y[i] = av[ia] * bv[ib]); break;
    default: BCAST_FOR(&bc, n, y[i] = av[ia] / bv[ib]); break;
    }
    if (dtype != AMP_F32) amp_store_f32(ctx, out, y);
    amp_scratch_release(ctx, m);
    amp_tensor *in[2] = {a, b};
    amp_node *node = amp_autograd_record(ctx, op, dtype, out, in, 2, binary_backward);
    if (node) {
        bcast *saved = amp_ctx_alloc(ctx, sizeof bc);
        if (!saved) return NULL;
        *saved = bc;
        node->saved = saved;
    }
    return out;
}

amp_tensor *amp_add(amp_ctx *ctx, amp_tensor *a, amp_tensor *b) { return binary(ctx, AMP_OP_ADD, a, b); }
amp_tensor *amp_sub(amp_ctx *ctx, amp_tensor *a, amp_tensor *b) { return binary(ctx, AMP_OP_SUB, a, b); }
amp_tensor *amp_mul(amp_ctx *ctx, amp_tensor *a, amp_tensor *b) { return binary(ctx, AMP_OP_MUL, a, b); }
amp_tensor *amp_div(amp_ctx *ctx, amp_tensor *a, amp_tensor *b) { return binary(ctx, AMP_OP_DIV, a, b); }

/* ---- scale ---- */

static void scale_backward(amp_ctx *ctx, amp_node *node) {
    const int64_t n = amp_tensor_numel(node->out);
    const float *g = amp_grad_out(ctx, node);
    float *dx = amp_f32_scratch(ctx, n);
    if (!g || !dx) return;
    for (int64_t i = 0; i < n; i++) dx[i] = g[i] * node->f[0];
    amp_grad_accumulate(ctx, node->in[0], dx);
}

amp_tensor *amp_scale(amp_ctx *ctx, amp_tensor *x, float s) {
    if (!amp_op_input_ok(ctx, AMP_OP_SCALE, x) || !amp_autocast_inputs(ctx, AMP_OP_SCALE, &x, 1)) return NULL;
    amp_tensor *out = amp_ctx_new_tensor(ctx, x->dtype, x->ndim, x->shape, true);
    if (!out) return NULL;
    const int64_t n = amp_tensor_numel(x);
    amp_arena_mark m = amp_scratch_mark(ctx);
    float *y = amp_f32_copy(ctx, x);
    if (!y) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) y[i] *= s;
    amp_store_f32(ctx, out, y);
    amp_scratch_release(ctx, m);
    amp_node *node = amp_autograd_record(ctx, AMP_OP_SCALE, x->dtype, out, &x, 1, scale_backward);
    if (node) node->f[0] = s;
    return out;
}
