/* mlp: nn.Sequential(Flatten, Linear(in, h), ReLU, Linear(h, h), ReLU, Linear(h, classes)), h = 1024.
 * Sequential indices 1, 3, 5 hold the parameters: 1.weight [h, in], 1.bias [h], 3.*, 5.* */
#include <stdio.h>

#include "nn_internal.h"

static int64_t mlp_in(const amp_model_config *c) { return c->in_channels * c->image_rows * c->image_cols; }

/* The three linear layers, Sequential indices 1, 3, 5. */
typedef struct mlp_layers {
    amp_linear_layer fc[3];
} mlp_layers;

static int mlp_declare(amp_model *m) {
    const amp_model_config *c = &m->cfg;
    const int64_t sizes[4] = {mlp_in(c), c->hidden, c->hidden, c->classes};
    mlp_layers *L = m->layers = nn_layers_alloc(m, sizeof *L);
    if (!L) return AMP_ERR_OUT_OF_MEMORY;
    for (int l = 0; l < 3; l++) {
        char prefix[8];
        snprintf(prefix, sizeof prefix, "%d", 1 + 2 * l);
        const int st = amp_linear_layer_declare(m->ctx, &L->fc[l], prefix, sizes[l], sizes[l + 1], true, c->param_dtype);
        if (st != AMP_OK) return st;
    }
    return AMP_OK;
}

static int mlp_init(amp_model *m, amp_rng *rng) {
    mlp_layers *L = m->layers;
    for (int l = 0; l < 3; l++) {
        const int st = amp_linear_layer_init(m->ctx, &L->fc[l], rng);
        if (st != AMP_OK) return st;
    }
    return AMP_OK;
}

/* x [B, C, H, W] or [B, C*H*W] -> logits [B, classes] */
static amp_tensor *mlp_forward(amp_model *m, amp_ctx *ctx, amp_tensor *x, const int32_t *tokens, int64_t batch) {
    (void)tokens, (void)batch;
    const mlp_layers *L = m->layers;
    amp_tensor *h = amp_flatten(ctx, x, 1);
    /* Linear + ReLU fused (amp_linear_relu: the same bits, one pass over each hidden activation less,
     * and its pre-activation not kept for backward) */
    for (int l = 0; l < 3; l++) h = amp_linear_layer_forward_act(ctx, &L->fc[l], h, l < 2 ? AMP_ACT_RELU : AMP_ACT_NONE);
    return h;
}

static double mlp_flops(const amp_model_config *c) {
    const double macs = (double)mlp_in(c) * (double)c->hidden + (double)c->hidden * (double)c->hidden +
                        (double)c->hidden * (double)c->classes;
    return 3.0 * 2.0 * macs;
}

const nn_model nn_model_mlp = {
    .name = "mlp",
    .task = NN_IMAGE_CLASSIFIER,
    .declare = mlp_declare,
    .init = mlp_init,
    .forward = mlp_forward,
    .flops = mlp_flops,
};
