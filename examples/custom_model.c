/* Your own model with amp's layers: 64-256-LayerNorm-GELU-256-ReLU-10 on 8x8 images, PyTorch's default
 * initialization, trained with fp16 autocast, the dynamic GradScaler, AdamW and gradient clipping,
 * evaluated under no-grad, saved to a checkpoint and reloaded. custom_model.py is its PyTorch twin
 * (the same data, byte for byte; the checkpoint loads there with load_state_dict, strict=False).
 * Built through pkg-config and run by `make test`: it exits non-zero unless training raised the test
 * accuracy by 30 points and the reloaded model evaluates to the same bits. */
#include <stdio.h>
#include <unistd.h>

#include <amp.h>

enum { PIXELS = 64, CLASSES = 10, TRAIN = 4096, TEST = 1024, BATCH = 64, EPOCHS = 4, NOISE = 160 };

/* The model, named as nn.Sequential(Linear, LayerNorm, GELU, Linear, ReLU, Linear) names it. */
typedef struct net {
    amp_linear_layer fc1, fc2, fc3;
    amp_layer_norm_layer ln;
} net;

/* A context holding the model, its parameters initialized as PyTorch's modules do. */
static int build(amp_ctx **ctx, net *n) {
    amp_rng rng;
    amp_rng_seed(&rng, 1);
    return amp_ctx_create(NULL, ctx) || amp_linear_layer_declare(*ctx, &n->fc1, "0", PIXELS, 256, true, AMP_F32) ||
           amp_layer_norm_layer_declare(*ctx, &n->ln, "1", 256, AMP_F32) ||
           amp_linear_layer_declare(*ctx, &n->fc2, "3", 256, 256, true, AMP_F32) ||
           amp_linear_layer_declare(*ctx, &n->fc3, "5", 256, CLASSES, true, AMP_F32) || amp_ctx_alloc_params(*ctx) ||
           amp_linear_layer_init(*ctx, &n->fc1, &rng) || amp_layer_norm_layer_init(*ctx, &n->ln) ||
           amp_linear_layer_init(*ctx, &n->fc2, &rng) || amp_linear_layer_init(*ctx, &n->fc3, &rng);
}

static amp_tensor *forward(amp_ctx *ctx, amp_tensor *x, void *model) {
    net *n = model;
    amp_tensor *h = amp_layer_norm_layer_forward(ctx, &n->ln, amp_linear_layer_forward(ctx, &n->fc1, x));
    h = amp_linear_layer_forward_act(ctx, &n->fc2, amp_gelu(ctx, h), AMP_ACT_RELU); /* linear + relu, fused */
    return amp_linear_layer_forward(ctx, &n->fc3, h);
}

/* The test set's loss and accuracy, under no-grad (count 0 on an error). */
static amp_eval_totals evaluate(amp_ctx *ctx, net *n, const float *x, const int32_t *y) {
    amp_eval_totals t = {0};
    amp_ctx_reset(ctx);
    amp_tensor *xt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){TEST, PIXELS}, x, AMP_F32);
    if (amp_evaluate_batch(ctx, forward, n, xt, y, &t) != AMP_OK) t.count = 0;
    return t;
}

/* The data's generator (a 64-bit LCG, as custom_model.py's): its top byte. */
static unsigned next_byte(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(*state >> 56);
}

int main(void) {
    /* 8x8 class patterns; each pixel of an image replaced by a random byte with probability 160/256 */
    static uint8_t protos[CLASSES * PIXELS], pixels[(TRAIN + TEST) * PIXELS], labels[TRAIN + TEST];
    static float x_test[TEST * PIXELS], x[BATCH * PIXELS];
    static int32_t y_test[TEST], y[BATCH];
    static int64_t order[TRAIN];
    uint64_t state = 1;
    for (int i = 0; i < CLASSES * PIXELS; i++) protos[i] = (uint8_t)next_byte(&state);
    for (int i = 0; i < TRAIN + TEST; i++) {
        labels[i] = (uint8_t)(next_byte(&state) % CLASSES);
        for (int p = 0; p < PIXELS; p++)
            pixels[i * PIXELS + p] = (uint8_t)(next_byte(&state) < NOISE ? next_byte(&state) : protos[labels[i] * PIXELS + p]);
    }
    amp_image_dataset train = {.count = TRAIN, .rows = 8, .cols = 8, .classes = CLASSES, .pixels = pixels, .labels = labels};
    amp_image_dataset test = train;
    test.count = TEST, test.pixels += TRAIN * PIXELS, test.labels += TRAIN;
    double mean, std; /* the training set's, as torchvision's Normalize takes them */
    for (int i = 0; i < TEST; i++) order[i] = i;
    if (amp_image_dataset_mean_std(&train, &mean, &std) ||
        amp_image_dataset_batch(&test, order, TEST, (float)mean, (float)std, x_test, y_test))
        return 1;

    amp_ctx *ctx, *ctx2 = NULL;
    net n, n2;
    amp_optimizer *opt;
    amp_scaler *scaler; /* PyTorch's defaults: scale 2^16, x2 every 2000 clean steps, /2 on overflow */
    amp_optim_config cfg = amp_optim_default_config(AMP_OPTIM_ADAMW);
    cfg.lr = 2e-3f;
    if (build(&ctx, &n) || amp_optimizer_create(ctx, &cfg, &opt) || amp_scaler_create(NULL, &scaler)) return 1;
    const amp_eval_totals before = evaluate(ctx, &n, x_test, y_test);
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        amp_shuffle_indices(order, TRAIN, 1, (uint64_t)epoch);
        for (int b = 0; b < TRAIN; b += BATCH) {
            amp_ctx_reset(ctx); /* the step's tensors start from an empty arena */
            amp_zero_grad(ctx);
            amp_image_dataset_batch(&train, order + b, BATCH, (float)mean, (float)std, x, y);
            amp_tensor *xt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){BATCH, PIXELS}, x, AMP_F32);
            amp_autocast_enter(AMP_F16);
            amp_tensor *loss = amp_cross_entropy(ctx, forward(ctx, xt, &n), y);
            amp_autocast_exit();
            if (!loss || amp_scaler_backward(scaler, ctx, loss) || /* backward from loss * scale */
                amp_scaler_step_fused(scaler, opt, 1.0f, NULL) ||  /* unscale, check, clip to 1, AdamW */
                amp_scaler_update(scaler)) {                      /* the next scale */
                fprintf(stderr, "epoch %d: %s %s\n", epoch, amp_ctx_error(ctx), amp_scaler_error(scaler));
                return 1;
            }
        }
    }
    const amp_eval_totals after = evaluate(ctx, &n, x_test, y_test);

    /* save, and reload into a model built anew */
    char path[64], err[256] = "";
    snprintf(path, sizeof path, "/tmp/amp_custom_model_%ld.safetensors", (long)getpid());
    amp_eval_totals again = {0};
    if (!amp_checkpoint_save(path, ctx, opt, scaler, NULL, err, sizeof err) && !build(&ctx2, &n2) &&
        !amp_checkpoint_load(path, ctx2, NULL, NULL, NULL, err, sizeof err))
        again = evaluate(ctx2, &n2, x_test, y_test);
    remove(path);
    printf("test loss %.4f -> %.4f, accuracy %.4f -> %.4f; reloaded: %.4f %s\n", before.loss_sum / TEST,
           after.loss_sum / TEST, (double)before.correct / TEST, (double)after.correct / TEST,
           (double)again.correct / TEST, err);
    const bool improved = after.count == TEST && after.correct > before.correct + 3 * TEST / 10;
    const bool same = again.count == TEST && again.correct == after.correct && again.loss_sum == after.loss_sum;
    amp_scaler_free(scaler), amp_optimizer_free(opt), amp_ctx_free(ctx), amp_ctx_free(ctx2);
    return improved && same ? 0 : 1;
}
