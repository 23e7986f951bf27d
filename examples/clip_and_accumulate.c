/* Two variants of the canonical loop that PyTorch documents (notes/amp_examples):
 *
 * 1. Gradient clipping: unscale first, so the threshold applies to the true gradients.
 *       scaler.scale(loss).backward()                amp_scaler_backward(scaler, ctx, loss);
 *       scaler.unscale_(opt)                         amp_scaler_unscale(scaler, opt);
 *       clip_grad_norm_(model.parameters(), 1.0)     amp_optimizer_clip_grad_norm(opt, 1.0f);
 *       scaler.step(opt); scaler.update()            amp_scaler_step(...); amp_scaler_update(...);
 *    (amp_scaler_step_fused does the same in one flat pass over the gradient buffer.)
 *
 * 2. Gradient accumulation over ACCUM micro-batches, one scale per effective batch: the loss of each
 *    micro-batch is divided by ACCUM and back-propagated with the same scale; step and update happen
 *    once, after the last micro-batch.
 *       for i, (x, y) in enumerate(data):
 *           with autocast(): loss = loss_fn(model(x), y) / ACCUM
 *           scaler.scale(loss).backward()
 *           if (i + 1) % ACCUM == 0:
 *               scaler.step(opt); scaler.update(); opt.zero_grad()
 *
 * Built and run by `make test`; both variants must learn the task. */
#include <stdio.h>

#include <amp.h>

#include "example_data.h"

enum { ACCUM = 4 };

static amp_tensor *w1, *b1, *w2, *b2;

static int train(int variant) {
    amp_ctx *ctx;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return 1;
    w1 = amp_param_new(ctx, "0.weight", AMP_F32, 2, (const int64_t[]){EX_HIDDEN, EX_IN});
    b1 = amp_param_new(ctx, "0.bias", AMP_F32, 1, (const int64_t[]){EX_HIDDEN});
    w2 = amp_param_new(ctx, "2.weight", AMP_F32, 2, (const int64_t[]){EX_CLASSES, EX_HIDDEN});
    b2 = amp_param_new(ctx, "2.bias", AMP_F32, 1, (const int64_t[]){EX_CLASSES});
    if (amp_ctx_alloc_params(ctx) != AMP_OK) return 1;
    ex_init(w1->data, EX_HIDDEN * EX_IN, EX_IN, 1);
    ex_init(w2->data, EX_CLASSES * EX_HIDDEN, EX_HIDDEN, 2);
    amp_optim_config cfg = amp_optim_default_config(AMP_OPTIM_ADAMW);
    cfg.lr = 3e-3f;
    amp_optimizer *opt;
    amp_scaler *scaler;
    if (amp_optimizer_create(ctx, &cfg, &opt) != AMP_OK || amp_scaler_create(NULL, &scaler) != AMP_OK) return 1;

    float x[EX_BATCH * EX_IN];
    int32_t y[EX_BATCH];
    float last_loss = 0;
    const int updates = 150, micro = variant == 2 ? ACCUM : 1;
    for (int u = 0; u < updates; u++) {
        amp_zero_grad(ctx);
        float loss_sum = 0;
        for (int m = 0; m < micro; m++) {
            amp_ctx_reset(ctx); /* activations die per micro-batch; gradients accumulate in the grad buffer */
            ex_batch((uint64_t)(u * micro + m), x, y);
            amp_tensor *xt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){EX_BATCH, EX_IN}, x, AMP_F32);
            amp_autocast_enter(AMP_F16);
            amp_tensor *logits = amp_linear(ctx, amp_relu(ctx, amp_linear(ctx, xt, w1, b1)), w2, b2);
            amp_tensor *loss = amp_scale(ctx, amp_cross_entropy(ctx, logits, y), 1.0f / (float)micro);
            amp_autocast_exit();
            if (!loss || amp_scaler_backward(scaler, ctx, loss) != AMP_OK) {
                fprintf(stderr, "micro-batch failed: %s\n", amp_ctx_error(ctx));
                return 1;
            }
            loss_sum += amp_tensor_get(loss, 0);
        }
        amp_step_report report;
        int st;
        if (variant == 1) {
            st = amp_scaler_unscale(scaler, opt);
            if (st == AMP_OK) amp_optimizer_clip_grad_norm(opt, 1.0f);
            if (st == AMP_OK) st = amp_scaler_step(scaler, opt, &report);
        } else {
            st = amp_scaler_step(scaler, opt, &report);
        }
        if (st == AMP_OK) st = amp_scaler_update(scaler);
        if (st != AMP_OK) {
            fprintf(stderr, "update %d failed: %s\n", u, amp_scaler_error(scaler));
            return 1;
        }
        last_loss = loss_sum;
    }
    printf("%s: final loss %.4f after %lld optimizer steps, scale %g\n",
           variant == 1 ? "clipping" : "accumulation x4", last_loss, (long long)amp_optimizer_step_count(opt),
           amp_scaler_get_scale(scaler));
    amp_scaler_free(scaler);
    amp_optimizer_free(opt);
    amp_ctx_free(ctx);
    return last_loss < 0.8f ? 0 : 1; /* chance level is log(4) = 1.39 */
}

int main(void) { return train(1) || train(2); }
