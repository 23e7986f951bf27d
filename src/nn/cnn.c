/* cnn: nn.Sequential(Conv2d(C, c1, k, padding=k/2), ReLU, MaxPool2d(2), Conv2d(c1, c2, k, padding=k/2),
 * ReLU, MaxPool2d(2), Flatten, Linear(c2 * (H/4) * (W/4), h), ReLU, Linear(h, classes)),
 * c1 = 32, c2 = 64, k = 5, h = 1024. Parameters at Sequential indices 0, 3, 7, 9. */
#include "nn_internal.h"

/* The layers in declaration order: Sequential 0 (conv1), 3 (conv2), 7 (hidden), 9 (output). */
typedef struct cnn_layers {
    amp_conv2d_layer conv1, conv2;
    amp_linear_layer hidden, out;
} cnn_layers;

static int cnn_validate(amp_ctx *ctx, const amp_model_config *c) {
    const int64_t cap = NN_SIZE_CAP;
    NN_NEED(ctx, c->conv1_channels > 0 && c->conv1_channels <= cap && c->conv2_channels > 0 && c->conv2_channels <= cap,
            "cnn: conv channels out of range");
    NN_NEED(ctx, c->kernel > 0 && c->kernel % 2 == 1 && c->kernel <= 63,
            "cnn: kernel %lld must be odd (padding kernel/2 keeps the size)", (long long)c->kernel);
    NN_NEED(ctx, c->image_rows >= 4 && c->image_cols >= 4, "cnn: images must be at least 4x4 (two 2x2 pools)");
    return AMP_OK;
}

static int cnn_declare(amp_model *m) {
    const amp_model_config *c = &m->cfg;
    const int64_t k = c->kernel, flat = c->conv2_channels * (c->image_rows / 4) * (c->image_cols / 4);
    const int pad = (int)(k / 2);
    const amp_dtype dt = c->param_dtype;
    cnn_layers *L = m->layers = nn_layers_alloc(m, sizeof *L);
    if (!L) return AMP_ERR_OUT_OF_MEMORY;
    int st = amp_conv2d_layer_declare(m->ctx, &L->conv1, "0", c->in_channels, c->conv1_channels, k, 1, pad, true, dt);
    if (st == AMP_OK)
        st = amp_conv2d_layer_declare(m->ctx, &L->conv2, "3", c->conv1_channels, c->conv2_channels, k, 1, pad, true, dt);
    if (st == AMP_OK) st = amp_linear_layer_declare(m->ctx, &L->hidden, "7", flat, c->hidden, true, dt);
    if (st == AMP_OK) st = amp_linear_layer_declare(m->ctx, &L->out, "9", c->hidden, c->classes, true, dt);
    return st;
}

static int cnn_init(amp_model *m, amp_rng *rng) {
    cnn_layers *L = m->layers;
    int st = amp_conv2d_layer_init(m->ctx, &L->conv1, rng);
    if (st == AMP_OK) st = amp_conv2d_layer_init(m->ctx, &L->conv2, rng);
    if (st == AMP_OK) st = amp_linear_layer_init(m->ctx, &L->hidden, rng);
    if (st == AMP_OK) st = amp_linear_layer_init(m->ctx, &L->out, rng);
    return st;
}

/* x [B, C, H, W] (or any shape with those elements) -> logits [B, classes] */
static amp_tensor *cnn_forward(amp_model *m, amp_ctx *ctx, amp_tensor *x, const int32_t *tokens, int64_t batch) {
    (void)tokens;
    const amp_model_config *c = &m->cfg;
    const cnn_layers *L = m->layers;
    if (x->ndim != 4)
        x = amp_reshape(ctx, x, 4, (const int64_t[]){batch, c->in_channels, c->image_rows, c->image_cols});
    /* relu(max_pool(h)) is max_pool(relu(h)) exactly (relu is monotone: the window's max stays the
     * max, values and gradients alike; where the max is <= 0 both give 0 and a zero gradient), and
     * on a quarter of the elements: relu's activation and gradient tensors shrink 4x. */
    amp_tensor *h = amp_conv2d_layer_forward(ctx, &L->conv1, x);                  /* [B, c1, H, W] */
    h = amp_relu(ctx, amp_max_pool2d(ctx, h, 2, 2));                              /* [B, c1, H/2, W/2] */
    h = amp_conv2d_layer_forward(ctx, &L->conv2, h);                              /* [B, c2, H/2, W/2] */
    h = amp_relu(ctx, amp_max_pool2d(ctx, h, 2, 2));                              /* [B, c2, H/4, W/4] */
    h = amp_linear_layer_forward_act(ctx, &L->hidden, amp_flatten(ctx, h, 1), AMP_ACT_RELU); /* [B, h] */
    return amp_linear_layer_forward(ctx, &L->out, h);                             /* [B, classes] */
}

static double cnn_flops(const amp_model_config *c) {
    const double kk = (double)(c->kernel * c->kernel), h2 = (double)(c->image_rows / 2), w2 = (double)(c->image_cols / 2);
    const double flat = (double)(c->conv2_channels * (c->image_rows / 4) * (c->image_cols / 4));
    const double macs = (double)c->image_rows * (double)c->image_cols * (double)c->conv1_channels *
                            (double)c->in_channels * kk +
                        h2 * w2 * (double)c->conv2_channels * (double)c->conv1_channels * kk +
                        flat * (double)c->hidden + (double)c->hidden * (double)c->classes;
    return 3.0 * 2.0 * macs;
}

const nn_model nn_model_cnn = {
    .name = "cnn",
    .task = NN_IMAGE_CLASSIFIER,
    .validate = cnn_validate,
    .declare = cnn_declare,
    .init = cnn_init,
    .forward = cnn_forward,
    .flops = cnn_flops,
};
