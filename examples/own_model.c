/* A model of your own: amp's ops are the layers, the model is a C function.
 *
 * A 2-layer MLP with a layer norm and GELU that is not one of amp's built-in models, its parameters
 * declared one by one and initialized with amp/init.h's PyTorch defaults, trained on synthetic data
 * generated here: fp16 autocast, the dynamic GradScaler and AdamW. The parameters are fp32 (they are
 * the master weights); autocast runs the linears in fp16, the layer norm and the loss in fp32 (`amp
 * policy` lists every op), and GELU in its input's dtype. (custom_model.c writes a model with the
 * layer structs of amp/layers.h instead.) Built through pkg-config and run by `make test`: it exits
 * non-zero unless the loss falls. */
#include <stdio.h>

#include <amp.h>

enum { IN = 8, HIDDEN = 64, CLASSES = 4, BATCH = 64, STEPS = 300, WINDOW = 25 };

typedef struct model {
    amp_tensor *fc1_w, *fc1_b, *ln_w, *ln_b, *fc2_w, *fc2_b;
} model;

static amp_tensor *forward(amp_ctx *ctx, const model *m, amp_tensor *x) {
    amp_tensor *h = amp_linear(ctx, x, m->fc1_w, m->fc1_b);      /* [B, HIDDEN] */
    h = amp_gelu(ctx, amp_layer_norm(ctx, h, m->ln_w, m->ln_b, 1e-5f));
    return amp_linear(ctx, h, m->fc2_w, m->fc2_b);               /* [B, CLASSES] logits */
}

static float uniform(uint64_t *s) { /* xorshift64: [-1, 1) */
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)(*s >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* The task: four classes from the signs of x0*x1 and of x2 + x3^2 - 0.3 (not linearly separable). */
static void make_batch(uint64_t *seed, float *x, int32_t *y) {
    for (int b = 0; b < BATCH; b++) {
        float *r = x + b * IN;
        for (int i = 0; i < IN; i++) r[i] = uniform(seed);
        y[b] = (r[0] * r[1] > 0) + 2 * (r[2] + r[3] * r[3] > 0.3f);
    }
}

int main(void) {
    amp_ctx *ctx;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return 1;
    model m = {
        .fc1_w = amp_param_new(ctx, "fc1.weight", AMP_F32, 2, (const int64_t[]){HIDDEN, IN}),
        .fc1_b = amp_param_new(ctx, "fc1.bias", AMP_F32, 1, (const int64_t[]){HIDDEN}),
        .ln_w = amp_param_new(ctx, "ln.weight", AMP_F32, 1, (const int64_t[]){HIDDEN}),
        .ln_b = amp_param_new(ctx, "ln.bias", AMP_F32, 1, (const int64_t[]){HIDDEN}),
        .fc2_w = amp_param_new(ctx, "fc2.weight", AMP_F32, 2, (const int64_t[]){CLASSES, HIDDEN}),
        .fc2_b = amp_param_new(ctx, "fc2.bias", AMP_F32, 1, (const int64_t[]){CLASSES}),
    };
    if (amp_ctx_alloc_params(ctx) != AMP_OK) return 1; /* one buffer for all of them, zeroed */
    amp_rng rng; /* nn.Linear's U(-1/sqrt(in), 1/sqrt(in)), nn.LayerNorm's ones and zeros */
    amp_rng_seed(&rng, 42);
    if (amp_init_linear(ctx, m.fc1_w, m.fc1_b, &rng) != AMP_OK || amp_init_layer_norm(ctx, m.ln_w, m.ln_b) != AMP_OK ||
        amp_init_linear(ctx, m.fc2_w, m.fc2_b, &rng) != AMP_OK) {
        fprintf(stderr, "%s\n", amp_ctx_error(ctx));
        return 1;
    }
    uint64_t seed = 42;

    amp_optim_config cfg = amp_optim_default_config(AMP_OPTIM_ADAMW); /* weight decay 0.01 */
    cfg.lr = 3e-3f;
    amp_optimizer *opt;
    amp_scaler *scaler; /* PyTorch's defaults: scale 2^16, x2 every 2000 clean steps, /2 on overflow */
    if (amp_optimizer_create(ctx, &cfg, &opt) != AMP_OK || amp_scaler_create(NULL, &scaler) != AMP_OK) return 1;

    float x[BATCH * IN], first = 0, last = 0;
    int32_t y[BATCH];
    int skipped = 0;
    for (int step = 0; step < STEPS; step++) {
        amp_ctx_reset(ctx);  /* the step's tensors start from an empty arena */
        amp_zero_grad(ctx);
        make_batch(&seed, x, y);
        amp_tensor *xt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){BATCH, IN}, x, AMP_F32);
        amp_autocast_enter(AMP_F16);
        amp_tensor *loss = amp_cross_entropy(ctx, forward(ctx, &m, xt), y);
        amp_autocast_exit();
        amp_step_report r;
        if (!loss || amp_scaler_backward(scaler, ctx, loss) != AMP_OK ||          /* backward from loss * scale */
            amp_scaler_step_fused(scaler, opt, 1.0f, &r) != AMP_OK ||              /* unscale, check, clip, AdamW */
            amp_scaler_update(scaler) != AMP_OK) {                                 /* the next scale */
            fprintf(stderr, "step %d: %s %s\n", step, amp_ctx_error(ctx), amp_scaler_error(scaler));
            return 1;
        }
        skipped += r.skipped;
        const float l = amp_tensor_get(loss, 0);
        if (step < WINDOW) first += l / WINDOW;
        if (step >= STEPS - WINDOW) last += l / WINDOW;
        if (step % 100 == 0 || step == STEPS - 1)
            printf("step %3d  loss %.4f  scale %g  grad norm %.3f\n", step, l, amp_scaler_get_scale(scaler),
                   r.grad_norm);
    }
    printf("mean loss: first %d steps %.4f, last %d steps %.4f; %d steps skipped\n", WINDOW, first, WINDOW, last,
           skipped);
    amp_scaler_free(scaler);
    amp_optimizer_free(opt);
    amp_ctx_free(ctx);
    return last < 0.5f * first ? 0 : 1;
}
