/* mlp: nn.Sequential(Flatten, Linear(in, h), ReLU, Linear(h, h), ReLU, Linear(h, classes)), h = 1024.
 * Sequential indices 1, 3, 5 hold the parameters: 1.weight [h, in], 1.bias [h], 3.*, 5.* */
#include "nn_internal.h"

static int64_t mlp_in(const amp_model_config *c) { return c->in_channels * c->image_rows * c->image_cols; }

static int mlp_declare(amp_model *m) {
    const amp_model_config *c = &m->cfg;
    const int64_t sizes[4] = {mlp_in(c), c->hidden, c->hidden, c->classes};
    for (int l = 0; l < 3; l++) {
        const nn_init init = nn_fan_in_uniform(sizes[l]);
        const int index = 1 + 2 * l;
        if (!nn_param(m, init, 2, (const int64_t[]){sizes[l + 1], sizes[l]}, "%d.weight", index) ||
            !nn_param(m, init, 1, (const int64_t[]){sizes[l + 1]}, "%d.bias", index))
            return amp_ctx_status(m->ctx);
    }
    return AMP_OK;
}

/* x [B, C, H, W] or [B, C*H*W] -> logits [B, classes] */
static amp_tensor *mlp_forward(amp_model *m, amp_ctx *ctx, amp_tensor *x, const int32_t *tokens, int64_t batch) {
    (void)tokens, (void)batch;
    amp_tensor *h = amp_flatten(ctx, x, 1);
    /* Linear + ReLU fused (amp_linear_relu: the same bits, one pass over each hidden activation less,
     * and its pre-activation not kept for backward) */
    for (int l = 0; l < 3; l++) {
        amp_tensor *w = nn_p(m, 2 * (size_t)l), *b = nn_p(m, 2 * (size_t)l + 1);
        h = l < 2 ? amp_linear_relu(ctx, h, w, b) : amp_linear(ctx, h, w, b);
    }
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
    .forward = mlp_forward,
    .flops = mlp_flops,
};
