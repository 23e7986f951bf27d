/* The tape, the backward engine, gradient accumulation and fp32 staging. */
#include <string.h>

#include "amp/formats.h"
#include "../core/accumulate.h"
#include "autograd.h"

bool amp_autograd_will_record(const amp_ctx *ctx, amp_tensor *const *in, int n_in) {
    if (!ctx->grad_enabled) return false;
    for (int i = 0; i < n_in; i++)
        if (in[i] && in[i]->requires_grad) return true;
    return false;
}

/* A new node on the tape whose result is `out`: each input's own node gains a use. NULL when the
 * arena is full (nothing is then linked). */
static amp_node *push_node(amp_ctx *ctx, amp_op op, amp_tensor *out, amp_tensor *const *in, int n_in,
                           amp_backward_fn backward) {
    amp_node *node = amp_ctx_alloc(ctx, sizeof *node);
    if (!node) return NULL;
    memset(node, 0, sizeof *node);
    node->op = op;
    node->backward = backward;
    node->out = out;
    node->n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        node->in[i] = in[i];
        if (in[i] && in[i]->grad_fn) in[i]->grad_fn->out_uses++;
    }
    node->prev = ctx->tape;
    ctx->tape = node;
    out->requires_grad = true;
    out->grad_fn = node;
    return node;
}

amp_node *amp_autograd_record(amp_ctx *ctx, amp_op op, amp_dtype compute_dtype, amp_tensor *out,
                              amp_tensor *const *in, int n_in, amp_backward_fn backward) {
    out->op = op;
    out->compute_dtype = compute_dtype;
    out->is_leaf = false;
    if (!amp_autograd_will_record(ctx, in, n_in)) return NULL;
    return push_node(ctx, op, out, in, n_in, backward);
}

amp_node *amp_autograd_record_recompute(amp_ctx *ctx, amp_op op, amp_dtype compute_dtype, amp_tensor *out,
                                        amp_tensor *const *in, int n_in, amp_backward_fn backward,
                                        const int32_t *uses, int32_t n_uses) {
    out->op = op;
    out->compute_dtype = compute_dtype;
    out->is_leaf = false;
    if (!ctx->grad_enabled || (n_uses == 0 && !amp_autograd_will_record(ctx, in, n_in))) return NULL;
    int32_t *copy = n_uses > 0 ? amp_ctx_alloc(ctx, (size_t)n_uses * sizeof *copy) : NULL;
    if (n_uses > 0 && !copy) return NULL;
    if (n_uses > 0) memcpy(copy, uses, (size_t)n_uses * sizeof *copy);
    amp_node *node = push_node(ctx, op, out, in, n_in, backward);
    if (!node) return NULL;
    node->param_uses = copy;
    node->n_param_uses = n_uses;
    node->recompute = true;
    return node;
}

/* d[i] = decode(h[i]) + g[i] for bf16 h: amp_convert to fp32 then amp_acc_f32, in one pass. */
static void decode_add_bf16(float *restrict d, const uint16_t *restrict h, const float *restrict g, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) d[i + k] = amp_f32_from_bits(amp_bf16_decode(h[i + k])) + g[i + k];
    for (; i < n; i++) d[i] = amp_f32_from_bits(amp_bf16_decode(h[i])) + g[i];
}

/* ---- reuse of dropped gradients ----
 * Backward drops each non-leaf gradient once its node has run; the arena cannot free it, so without
 * reuse every activation's gradient stays until the step ends and the arena holds the forward's
 * activations plus all their gradients. Dropped blocks go to a small pool (ctx->grad_free) and the
 * next first gradient takes the smallest block that fits (the rest of it goes back), so the step's
 * high-water mark holds only the gradients alive at once. A block is reused only after its tensor's
 * node has run (nothing reads a dropped gradient: no gradient is an operand, and ops read only their
 * output's), every element is written before it is read, and the order is the tape's: the values and
 * the determinism are unchanged. Blocks under GRAD_REUSE_MIN bytes are not pooled (not worth a slot). */
enum { GRAD_REUSE_MIN = 16384, GRAD_ALIGN = 64 };

static void grad_block_push(amp_ctx *ctx, unsigned char *data, size_t bytes) {
    if (!data || bytes < GRAD_REUSE_MIN) return;
    if (ctx->n_grad_free == AMP_GRAD_FREE_MAX) { /* full: replace the smallest block if this one is larger */
        int small = 0;
        for (int i = 1; i < ctx->n_grad_free; i++)
            if (ctx->grad_free[i].bytes < ctx->grad_free[small].bytes) small = i;
        if (ctx->grad_free[small].bytes < bytes) ctx->grad_free[small] = (amp_grad_block){data, bytes};
        return;
    }
    ctx->grad_free[ctx->n_grad_free++] = (amp_grad_block){data, bytes};
}

/* Arena memory for a gradient's data: a pooled block when one fits, else fresh arena memory. */
static void *grad_data_alloc(amp_ctx *ctx, size_t bytes) {
    const size_t need = (bytes + GRAD_ALIGN - 1) & ~(size_t)(GRAD_ALIGN - 1);
    int best = -1;
    for (int i = 0; i < ctx->n_grad_free; i++)
        if (ctx->grad_free[i].bytes >= need && (best < 0 || ctx->grad_free[i].bytes < ctx->grad_free[best].bytes))
            best = i;
    if (best < 0) return amp_ctx_alloc(ctx, bytes > 0 ? bytes : 1);
    const amp_grad_block b = ctx->grad_free[best];
    ctx->grad_free[best] = ctx->grad_free[--ctx->n_grad_free];
    grad_block_push(ctx, b.data + need, b.bytes - need);
    return b.data;
}

/* Drops a non-leaf tensor's gradient after its node has run, its data block to the pool. */
static void grad_drop(amp_ctx *ctx, amp_tensor *t) {
    amp_tensor *g = t->grad;
    t->grad = NULL;
    if (g && g->data && amp_tensor_is_contiguous(g))
        grad_block_push(ctx, g->data, (size_t)amp_tensor_numel(g) * amp_dtype_size(g->dtype) & ~(size_t)(GRAD_ALIGN - 1));
}

/* t's first gradient: a contiguous tensor of t's shape and dtype, data uninitialized. Parameters
 * always have one (in the gradient buffer), so this is an arena tensor. NULL on OOM (recorded). */
static amp_tensor *new_grad(amp_ctx *ctx, const amp_tensor *t) {
    amp_tensor *grad = amp_ctx_new_tensor(ctx, t->dtype, t->ndim, t->shape, false);
    if (!grad || !(grad->data = grad_data_alloc(ctx, (size_t)amp_tensor_numel(t) * amp_dtype_size(t->dtype))))
        return NULL;
    return grad;
}

static int64_t param_index(const amp_ctx *ctx, const amp_tensor *t);

/* The backward check's note of t's gradient (ctx_internal.h) no longer holds: t's gradient is being
 * written by something that does not note its maximum. */
static void drop_note(amp_ctx *ctx, const amp_tensor *t) {
    if (ctx->backward_grad_check) amp_ctx_grad_note_drop(ctx, param_index(ctx, t));
}

/* True when t is a parameter whose gradient amp_zero_grad left empty (ctx_internal.h); the flag is
 * cleared, and the caller must then write every element as 0 + value (amp_acc_* with store). */
static bool claim_empty(amp_ctx *ctx, const amp_tensor *t) {
    if (!ctx->n_grads_empty) return false;
    const int64_t k = param_index(ctx, t);
    if (k < 0 || !ctx->params[k].grad_empty) return false;
    ctx->params[k].grad_empty = false;
    ctx->n_grads_empty--;
    return true;
}

/* Writes the zeros of an empty parameter gradient before a read-modify-write that has no store form. */
static void settle_param(amp_ctx *ctx, const amp_tensor *t) {
    if (!ctx->n_grads_empty) return;
    const int64_t k = param_index(ctx, t);
    if (k >= 0) amp_ctx_settle_grad(ctx, (size_t)k);
}

/* grad (contiguous F16/BF16, n values) += g, elementwise: decoded to fp32, added, rounded once, as
 * one pass over the whole tensor would; in chunks, so the fp32 staging stays small whatever the
 * tensor's size (a bf16 embedding's gradient is 38M values at GPT-2's vocabulary). The addend is
 * g (fp32) or, when g is NULL, gh (contiguous, any float dtype, n values). */
enum { ADD_CHUNK = 16384 };
static void low_precision_add(amp_ctx *ctx, amp_tensor *grad, const float *g, const amp_tensor *gh, int64_t n) {
    amp_arena_mark m = amp_scratch_mark(ctx);
    float *acc = amp_f32_scratch(ctx, n < ADD_CHUNK ? n : ADD_CHUNK);
    float *add = gh ? amp_f32_scratch(ctx, n < ADD_CHUNK ? n : ADD_CHUNK) : NULL;
    const size_t gs = amp_dtype_size(grad->dtype), hs = gh ? amp_dtype_size(gh->dtype) : 0;
    for (int64_t at = 0; acc && (!gh || add) && at < n; at += ADD_CHUNK) {
        const int64_t len = n - at < ADD_CHUNK ? n - at : ADD_CHUNK;
        unsigned char *gd = (unsigned char *)grad->data + (size_t)at * gs;
        const float *v = g ? g + at : add;
        if (gh) amp_convert(add, AMP_F32, (const unsigned char *)gh->data + (size_t)at * hs, gh->dtype, (size_t)len);
        if (grad->dtype == AMP_BF16) {
            decode_add_bf16(acc, (const uint16_t *)gd, v, len);
        } else {
            amp_convert(acc, AMP_F32, gd, grad->dtype, (size_t)len);
            amp_acc_f32(acc, v, len, false);
        }
        amp_convert(gd, grad->dtype, acc, AMP_F32, (size_t)len);
    }
    amp_scratch_release(ctx, m);
}

int amp_grad_accumulate(amp_ctx *ctx, amp_tensor *t, const float *g) {
    if (!t || !t->requires_grad) return AMP_OK;
    const int64_t n = amp_tensor_numel(t);
    if (!t->grad) { /* first gradient: rounded once */
        amp_tensor *grad = new_grad(ctx, t);
        if (!grad) return ctx->status;
        amp_convert(grad->data, grad->dtype, g, AMP_F32, (size_t)n);
        t->grad = grad;
        return AMP_OK;
    }
    amp_tensor *grad = t->grad;
    drop_note(ctx, t);
    if (grad->dtype == AMP_F32) {
        amp_acc_f32(grad->data, g, n, claim_empty(ctx, t));
        return AMP_OK;
    }
    settle_param(ctx, t);
    low_precision_add(ctx, grad, g, NULL, n);
    return ctx->status;
}

int amp_grad_accumulate_grad(amp_ctx *ctx, amp_tensor *t, const amp_tensor *g) {
    if (!t || !t->requires_grad) return AMP_OK;
    /* An fp32 gradient (a parameter's, or one already started) taking a contiguous bf16 one: decode
     * and add in one pass. The gradient tensors made here are contiguous; a parameter's is too. */
    if (g->dtype == AMP_BF16 && amp_tensor_is_contiguous(g) && t->grad && t->grad->dtype == AMP_F32 &&
        amp_tensor_is_contiguous(t->grad) && amp_tensor_numel(g) == amp_tensor_numel(t)) {
        drop_note(ctx, t);
        amp_acc_bf16(t->grad->data, g->data, amp_tensor_numel(t), claim_empty(ctx, t));
        return AMP_OK;
    }
    /* A low-precision gradient taking a contiguous one of the same length: chunk by chunk. */
    if (t->grad && t->grad->dtype != AMP_F32 && amp_tensor_is_contiguous(t->grad) && amp_tensor_is_contiguous(g) &&
        amp_tensor_numel(g) == amp_tensor_numel(t)) {
        drop_note(ctx, t);
        settle_param(ctx, t);
        low_precision_add(ctx, t->grad, NULL, g, amp_tensor_numel(t));
        return ctx->status;
    }
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *f = amp_f32_view(ctx, g);
    int st = f ? amp_grad_accumulate(ctx, t, f) : ctx->status;
    amp_scratch_release(ctx, m);
    return st;
}

bool amp_grad_hand_over(amp_ctx *ctx, amp_node *node) {
    return node->n_in == 1 && amp_grad_hand_over_to(ctx, node, node->in[0]);
}

bool amp_grad_hand_over_to(amp_ctx *ctx, amp_node *node, amp_tensor *t) {
    amp_tensor *out = node->out, *g = out->grad;
    if (!t->requires_grad || t->grad || !g || !g->data || out->retains_grad ||
        g->dtype != t->dtype || amp_tensor_numel(g) != amp_tensor_numel(t) || !amp_tensor_is_contiguous(g) ||
        ctx->status != AMP_OK)
        return false;
    amp_tensor *grad = amp_ctx_new_tensor(ctx, t->dtype, t->ndim, t->shape, false);
    if (!grad) return false; /* recorded; the caller's copy path reports nothing new */
    grad->data = g->data;
    t->grad = grad;
    out->grad = NULL; /* its memory is t's now: not dropped to the pool after this node */
    return true;
}

static bool lone_output(const amp_tensor *t, const amp_node *node) {
    return !t->grad && !t->is_leaf && !t->retains_grad && node && node->out == t && node->n_in == 1 &&
           node->out_uses == 1 && amp_tensor_is_contiguous(t);
}

/* Whether a tape node recorded between the running node and `cast` (they run between them) takes
 * parameter slot k as an input: its gradient would then be added before the cast's, which the caller
 * would overtake. Bounded: a longer stretch counts as yes. */
static bool param_used_between(const amp_ctx *ctx, const amp_node *cast, int64_t k) {
    if (!ctx->running) return true;
    int left = 64;
    for (const amp_node *n = ctx->running->prev; n != cast; n = n->prev) {
        if (!n || --left == 0) return true;
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] && param_index(ctx, n->in[i]) == k) return true;
        for (int32_t u = 0; u < n->n_param_uses; u++)
            if (n->param_uses[u] == k) return true;
    }
    return false;
}

/* The fp32 gradient of the parameter that t is autocast's (or any cast's) copy of, when t's gradient
 * may skip the copy and go straight into it: t is a cast's output with no gradient yet, read by
 * exactly one tape node (the caller's), not retained, and no hook looks at it; the parameter's
 * gradient is fp32 and no tape node still to run but the cast adds into it. Then the cast's backward
 * would be the only thing to read t's gradient, adding decode(gradient) into the parameter's: the
 * same additions, in the same order, as the caller adding them now. The cast node then finds no
 * gradient and is skipped (the grad-ready hook still counts it).
 * The same for t a prefix view (amp_narrow_rows) of such a copy, read by exactly one node (the
 * caller's), the copy read by the view alone (a tied head: wte's cast, its first V rows): the view's
 * backward would add its gradient into the copy's first numel(t) elements and zeros into the rest, the
 * cast's add the copy's gradient into the parameter's. The caller adds into the parameter's first
 * numel(t) elements what the cast would; *rest: the elements past them, which take the zeros
 * (amp_grad_sink_open adds them). The parameter may have other uses (the embedding's lookup) where they
 * run after the cast; none between the caller and the cast. */
static amp_tensor *master_of(const amp_ctx *ctx, const amp_tensor *t, int64_t *rest) {
    *rest = 0;
    if (ctx->backward_grad || !ctx->backward_pending || !t->grad_fn) return NULL;
    const amp_node *view = t->grad_fn->prefix_view ? t->grad_fn : NULL;
    if (view && !lone_output(t, view)) return NULL;
    const amp_tensor *c = view ? view->in[0] : t;
    const amp_node *cast = c->grad_fn;
    if (!lone_output(c, cast) || cast->op != AMP_OP_CAST) return NULL;
    const amp_tensor *p = cast->in[0];
    const int64_t k = param_index(ctx, p);
    if (k < 0 || !p->requires_grad || !p->grad || p->grad->dtype != AMP_F32 || !amp_tensor_is_contiguous(p->grad) ||
        amp_tensor_numel(p->grad) != amp_tensor_numel(c) || !p->grad->data || amp_tensor_numel(t) > amp_tensor_numel(c))
        return NULL;
    if (view ? (param_used_between(ctx, cast, k)) : ctx->backward_pending[k] != 1) return NULL;
    *rest = amp_tensor_numel(c) - amp_tensor_numel(t);
    return cast->in[0];
}

bool amp_grad_sink_open(amp_ctx *ctx, amp_tensor *t, amp_grad_sink *s) {
    memset(s, 0, sizeof *s);
    s->slot = -1;
    if (!t || !t->requires_grad || ctx->status != AMP_OK) return false;
    s->out_dtype = t->dtype;
    if (t->grad) { /* an fp32 gradient takes the additions of amp_acc_f32 in place */
        if (t->grad->dtype != AMP_F32 || !amp_tensor_is_contiguous(t->grad)) return false;
        s->acc = t->grad->data;
        s->out_dtype = AMP_F32;
        s->acc_store = claim_empty(ctx, t);
        s->numel = amp_tensor_numel(t);
        if (ctx->backward_grad_check) amp_ctx_grad_note_drop(ctx, s->slot = param_index(ctx, t));
        return true;
    }
    int64_t rest;
    amp_tensor *master = master_of(ctx, t, &rest);
    if (master) {
        s->acc = master->grad->data;
        s->acc_store = claim_empty(ctx, master);
        s->numel = amp_tensor_numel(t);
        if (ctx->backward_grad_check) amp_ctx_grad_note_drop(ctx, s->slot = param_index(ctx, master));
        /* a prefix view's zeros past it, as amp_acc_f32 adds them (0 + 0 into an empty gradient); the
         * caller's note covers its elements only: kept where the rest is those zeros */
        float *tail = s->acc + s->numel;
        if (s->acc_store) memset(tail, 0, (size_t)rest * sizeof *tail);
        else
            for (int64_t i = 0; i < rest; i++) tail[i] += 0.0f;
        if (rest > 0 && !s->acc_store) s->slot = -1;
        ctx->grads_direct++;
        return true;
    }
    if (!(s->grad = new_grad(ctx, t))) return false;
    s->t = t;
    s->out = s->grad->data;
    return true;
}

void amp_grad_sink_close(amp_ctx *ctx, amp_grad_sink *s) {
    if (s->t && ctx->status == AMP_OK) s->t->grad = s->grad;
    /* a claimed empty gradient the failed product may have left half written: zeros, as it was */
    if (s->acc_store && ctx->status != AMP_OK) memset(s->acc, 0, (size_t)s->numel * sizeof(float));
    s->t = NULL;
}

float *amp_f32_scratch(amp_ctx *ctx, int64_t n) {
    return amp_scratch_alloc(ctx, (size_t)(n > 0 ? n : 1) * sizeof(float));
}

float *amp_f32_copy(amp_ctx *ctx, const amp_tensor *t) {
    float *p = amp_f32_scratch(ctx, amp_tensor_numel(t));
    if (p && amp_tensor_read(t, p, AMP_F32) != AMP_OK) {
        amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "cannot read a tensor of dtype %s", amp_dtype_name(t->dtype));
        return NULL;
    }
    return p;
}

const float *amp_f32_view(amp_ctx *ctx, const amp_tensor *t) {
    if (t->dtype == AMP_F32 && amp_tensor_is_contiguous(t)) return t->data;
    return amp_f32_copy(ctx, t);
}

int amp_store_f32(amp_ctx *ctx, amp_tensor *t, const float *src) {
    int st = amp_tensor_write(t, src, AMP_F32);
    if (st != AMP_OK) amp_ctx_fail(ctx, st, "cannot store into a tensor of dtype %s", amp_dtype_name(t->dtype));
    return st;
}

const float *amp_grad_out(amp_ctx *ctx, const amp_node *node) { return amp_f32_view(ctx, node->out->grad); }

/* ---- backward ---- */

/* The parameter slot whose tensor is t, or -1 (parameters are laid out in index order, so their data
 * pointers are sorted). */
int64_t amp_ctx_param_index(const amp_ctx *ctx, const amp_tensor *t) { return param_index(ctx, t); }

static int64_t param_index(const amp_ctx *ctx, const amp_tensor *t) {
    if (!t || !t->is_leaf || !ctx->param_memory || !t->data) return -1;
    const unsigned char *d = t->data, *base = ctx->param_memory;
    if (d < base || d >= base + ctx->param_bytes) return -1;
    const size_t off = (size_t)(d - base);
    size_t lo = 0, hi = ctx->n_params;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (ctx->params[mid].offset < off) lo = mid + 1;
        else hi = mid;
    }
    return lo < ctx->n_params && ctx->params[lo].tensor == t ? (int64_t)lo : -1;
}

/* For the grad-ready hook: how many tape nodes still have to run for each parameter (scratch). */
static int32_t *count_param_uses(amp_ctx *ctx) {
    int32_t *pending = amp_scratch_alloc(ctx, (ctx->n_params ? ctx->n_params : 1) * sizeof *pending);
    if (!pending) return NULL;
    memset(pending, 0, (ctx->n_params ? ctx->n_params : 1) * sizeof *pending);
    for (const amp_node *node = ctx->tape; node; node = node->prev) {
        for (int i = 0; i < node->n_in; i++) {
            const int64_t k = param_index(ctx, node->in[i]);
            if (k >= 0) pending[k]++;
        }
        for (int32_t u = 0; u < node->n_param_uses; u++) pending[node->param_uses[u]]++;
    }
    return pending;
}

/* One parameter use done: the gradient-ready hook when it was the last. */
static void release_param_use(amp_ctx *ctx, int64_t k, int32_t *pending) {
    if (k >= 0 && --pending[k] == 0 && ctx->grad_ready) {
        amp_ctx_settle_grad(ctx, (size_t)k); /* a gradient no node wrote is complete as zeros */
        ctx->grad_ready(ctx, (size_t)k, ctx->grad_ready_user);
        amp_ctx_grad_note_drop(ctx, k); /* the hook may have written it (data-parallel sums do) */
    }
}

static void release_param_uses(amp_ctx *ctx, const amp_node *node, int32_t *pending) {
    for (int i = 0; i < node->n_in; i++) release_param_use(ctx, param_index(ctx, node->in[i]), pending);
}

/* Ops for which PyTorch keeps no tensors for backward (their backward needs only the output's
 * gradient and shapes), so that a second backward may pass through their nodes there. */
static bool keeps_no_tensors(amp_op op) {
    switch (op) {
    case AMP_OP_CAST:
    case AMP_OP_CONTIGUOUS:
    case AMP_OP_RESHAPE:
    case AMP_OP_TRANSPOSE:
    case AMP_OP_CONCAT:
    case AMP_OP_ADD:
    case AMP_OP_SUB:
    case AMP_OP_SCALE:
    case AMP_OP_SUM:
    case AMP_OP_MEAN: return true;
    default: return false;
    }
}

/* The newest node reachable from loss that an earlier backward of this step ran without retaining
 * the graph (and that PyTorch would have freed), or NULL. One walk of the tape: newest first, a node
 * reached marks the nodes that made its inputs (recording order is a topological order). */
static const amp_node *spent_reachable(amp_ctx *ctx, const amp_tensor *loss) {
    if (!loss->grad_fn) return NULL;
    const uint64_t mark = ++ctx->backward_serial;
    loss->grad_fn->reach = mark;
    for (amp_node *node = ctx->tape; node; node = node->prev) {
        if (node->reach != mark) continue;
        if (node->spent && !keeps_no_tensors(node->op)) return node;
        for (int i = 0; i < node->n_in; i++)
            if (node->in[i] && node->in[i]->grad_fn) node->in[i]->grad_fn->reach = mark;
    }
    return NULL;
}

int amp_autograd_run_nodes(amp_ctx *ctx, amp_node *tape) {
    int32_t *pending = ctx->backward_pending;
    for (amp_node *node = tape; node; node = node->prev) {
        amp_tensor *out = node->out;
        if (out->grad) { /* else no gradient reached this node */
            if (ctx->backward_grad && !node->recompute) ctx->backward_grad(ctx, out, out->grad, ctx->backward_grad_user);
            const amp_arena_mark m = amp_scratch_mark(ctx);
            ctx->running = node;
            node->backward(ctx, node);
            ctx->running = NULL;
            amp_scratch_release(ctx, m);
            node->spent = !ctx->retain_graph;
            if (ctx->status != AMP_OK) break;
            if (!out->retains_grad) grad_drop(ctx, out); /* PyTorch frees non-leaf gradients after use */
        } else {
            /* a region never recomputed: its parameters' uses are done all the same */
            for (int32_t u = 0; u < node->n_param_uses; u++) release_param_use(ctx, node->param_uses[u], pending);
        }
        release_param_uses(ctx, node, pending);
    }
    return ctx->status;
}

static int backward_tape(amp_ctx *ctx, const char *what, amp_tensor *loss, const float *seed) {
    if (ctx->status != AMP_OK) return ctx->status;
    if (!loss->requires_grad)
        return amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT,
                            "%s: the loss does not require grad (no parameter or input with requires_grad "
                            "reached it, or grad mode was off)",
                            what);
    const amp_node *spent = spent_reachable(ctx, loss);
    if (spent)
        return amp_ctx_fail(ctx, AMP_ERR_STATE,
                            "%s: Trying to backward through the graph a second time: its %s node already ran in "
                            "an earlier backward, whose gradients this one would add again. Call "
                            "amp_set_retain_graph(ctx, true) before the first backward if you need to backward "
                            "through the graph a second time",
                            what, amp_op_name(spent->op));
    const amp_arena_mark outer = amp_scratch_mark(ctx);
    /* (every backward: amp_grad_sink_open reads it too) */
    int32_t *pending = count_param_uses(ctx);
    if (!pending) return ctx->status;
    ctx->backward_pending = pending;
    amp_arena_mark m = amp_scratch_mark(ctx);
    /* The seed becomes the loss's gradient (kept only if the loss is a leaf or retains its grad). */
    if (!loss->is_leaf) loss->grad = NULL;
    int st = amp_grad_accumulate(ctx, loss, seed);
    amp_scratch_release(ctx, m);
    if (st == AMP_OK) st = amp_autograd_run_nodes(ctx, ctx->tape);
    ctx->backward_pending = NULL;
    amp_scratch_release(ctx, outer);
    return st != AMP_OK ? st : ctx->status;
}

static int run_backward(amp_ctx *ctx, const char *what, amp_tensor *loss, const float *seed) {
    const int st = backward_tape(ctx, what, loss, seed);
    /* Whatever this backward did not write is complete as zeros, whichever way it returned. */
    amp_ctx_settle_grads(ctx);
    return st;
}

/* The checks every backward makes of its loss (and seed) before reading them. */
static int loss_ok(amp_ctx *ctx, const char *what, const amp_tensor *loss, const amp_tensor *seed) {
    /* a NULL loss is usually a failed forward's: its error is the one to return */
    if (!loss)
        return ctx->status != AMP_OK ? ctx->status : amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "%s: loss is NULL", what);
    if (amp_tensor_stale(ctx, loss)) return amp_ctx_fail_stale(ctx, what, "the loss", loss);
    if (seed && amp_tensor_stale(ctx, seed)) return amp_ctx_fail_stale(ctx, what, "the seed", seed);
    return AMP_OK;
}

int amp_backward(amp_ctx *ctx, amp_tensor *loss, const amp_tensor *seed) {
    static const char what[] = "amp_backward";
    if (!ctx) return AMP_ERR_NULL_POINTER;
    const int ok = loss_ok(ctx, what, loss, seed);
    if (ok != AMP_OK) return ok;
    if (!seed) {
        if (amp_tensor_numel(loss) != 1)
            return amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT,
                                "%s: the loss has %lld elements; pass a seed gradient of its shape", what,
                                (long long)amp_tensor_numel(loss));
        const float one = 1.0f;
        return run_backward(ctx, what, loss, &one);
    }
    if (!amp_same_shape(loss, seed)) {
        char a[64], b[64];
        return amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "%s: seed shape %s differs from the loss's %s", what,
                            amp_shape_str(seed, b, sizeof b), amp_shape_str(loss, a, sizeof a));
    }
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *s = amp_f32_view(ctx, seed);
    int st = s ? run_backward(ctx, what, loss, s) : ctx->status;
    amp_scratch_release(ctx, m);
    return st;
}

int amp_backward_scaled(amp_ctx *ctx, amp_tensor *loss, float seed) {
    static const char what[] = "amp_backward_scaled";
    if (!ctx) return AMP_ERR_NULL_POINTER;
    const int ok = loss_ok(ctx, what, loss, NULL);
    if (ok != AMP_OK) return ok;
    if (amp_tensor_numel(loss) != 1)
        return amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "%s: a scalar seed needs a one-element loss, not %lld",
                            what, (long long)amp_tensor_numel(loss));
    return run_backward(ctx, what, loss, &seed);
}
