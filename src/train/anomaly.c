/* --detect-anomaly: find the first op whose output became non-finite (forward), or the parameter
 * gradient that did (backward), and name it. Reads the context's tape (library-internal), newest
 * node first, so the last hit while walking is the first in creation order. Slow (every element is
 * read back as fp32): a debugging aid, off by default, as torch.autograd.detect_anomaly is. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../tensor/ctx_internal.h"
#include "train_internal.h"

/* Index of the first non-finite element of t, or -1. */
static int64_t first_nonfinite(const amp_tensor *t) {
    if (!t || !t->data) return -1;
    const int64_t n = amp_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(amp_tensor_get(t, i))) return i;
    return -1;
}

/* The parameter behind an op input: the input itself, or what an autocast cast node read. */
static const char *param_name(const amp_tensor *in) {
    if (!in) return NULL;
    if (in->name) return in->name;
    if (in->op == AMP_OP_CAST && in->grad_fn && in->grad_fn->n_in > 0 && in->grad_fn->in[0])
        return in->grad_fn->in[0]->name;
    return NULL;
}

/* ", params 1.weight 1.bias" for the node's parameter inputs, into buf. */
static void describe_params(const amp_node *node, char *buf, size_t size) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < node->n_in && len < size; i++) {
        const char *name = param_name(node->in[i]);
        if (!name) continue;
        int w = snprintf(buf + len, size - len, "%s%s", len == 0 ? " (parameters " : " ", name);
        if (w < 0) break;
        len += (size_t)w;
    }
    if (len > 0 && len < size) snprintf(buf + len, size - len, ")");
}

static const char *value_kind(float v) { return isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"); }

int amp_train_check_forward(amp_train_run_state *r) {
    const amp_node *hit = NULL;
    int64_t hit_index = -1;
    for (const amp_node *n = r->ctx->tape; n; n = n->prev) {
        const int64_t i = first_nonfinite(n->out);
        if (i >= 0) hit = n, hit_index = i;
    }
    if (!hit) return AMP_OK;
    char params[256], shape[96];
    describe_params(hit, params, sizeof params);
    size_t len = (size_t)snprintf(shape, sizeof shape, "[");
    for (int d = 0; d < hit->out->ndim && len < sizeof shape; d++)
        len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%lld", d ? ", " : "", (long long)hit->out->shape[d]);
    if (len < sizeof shape) snprintf(shape + len, sizeof shape - len, "]");
    return amp_train_fail(r, AMP_ERR_STATE,
                          "anomaly at step %lld, forward: op '%s'%s produced %s at element %lld of its %s %s output",
                          (long long)r->step + 1, amp_op_name(hit->op), params,
                          value_kind(amp_tensor_get(hit->out, hit_index)), (long long)hit_index, shape,
                          amp_dtype_name(hit->out->dtype));
}

int amp_train_check_backward(amp_train_run_state *r) {
    /* Backward runs from the loss towards the inputs: the first gradient to go bad belongs to the
     * parameter used by the newest op. */
    for (const amp_node *n = r->ctx->tape; n; n = n->prev) {
        for (int k = 0; k < n->n_in; k++) {
            const amp_tensor *in = n->in[k];
            if (!in) continue;
            const amp_tensor *p = in->name ? in : (param_name(in) ? in->grad_fn->in[0] : NULL);
            if (!p || !p->grad) continue;
            const int64_t i = first_nonfinite(p->grad);
            if (i >= 0)
                return amp_train_fail(r, AMP_ERR_STATE,
                                      "anomaly at step %lld, backward: the gradient of parameter '%s' (input of op "
                                      "'%s') holds %s at element %lld",
                                      (long long)r->step + 1, p->name, amp_op_name(n->op),
                                      value_kind(amp_tensor_get(p->grad, i)), (long long)i);
        }
    }
    const size_t np = amp_ctx_num_params(r->ctx);
    for (size_t j = 0; j < np; j++) {
        const amp_tensor *p = amp_ctx_param(r->ctx, j);
        const int64_t i = first_nonfinite(p->grad);
        if (i >= 0)
            return amp_train_fail(r, AMP_ERR_STATE,
                                  "anomaly at step %lld, backward: the gradient of parameter '%s' holds %s at element %lld",
                                  (long long)r->step + 1, p->name, value_kind(amp_tensor_get(p->grad, i)), (long long)i);
    }
    return AMP_OK;
}
