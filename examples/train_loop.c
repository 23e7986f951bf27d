/* The canonical mixed-precision training loop, line for line beside PyTorch's:
 *
 *   PyTorch                                          amp
 *   model = MLP().cuda()                             amp_param_new(...) x4; amp_ctx_alloc_params
 *   opt = torch.optim.SGD(model.parameters(), ...)   amp_optimizer_create(ctx, &cfg, &opt)
 *   scaler = torch.amp.GradScaler()                  amp_scaler_create(NULL, &scaler)
 *   for x, y in data:                                for (step ...) {
 *       opt.zero_grad()                                  amp_ctx_reset(ctx); amp_zero_grad(ctx);
 *       with torch.autocast("cuda", torch.float16):      amp_autocast_enter(AMP_F16);
 *           loss = F.cross_entropy(model(x), y)              loss = amp_cross_entropy(ctx, mlp(x), y);
 *                                                        amp_autocast_exit();
 *       scaler.scale(loss).backward()                    amp_scaler_backward(scaler, ctx, loss);
 *       scaler.step(opt)                                 amp_scaler_step(scaler, opt, &report);
 *       scaler.update()                                  amp_scaler_update(scaler);
 *
 * Built and run by `make test`: it must learn the task (accuracy well above chance). */
#include <stdio.h>

#include <amp.h>

#include "example_data.h"

static amp_tensor *w1, *b1, *w2, *b2;

static amp_tensor *mlp(amp_ctx *ctx, amp_tensor *x) {
    return amp_linear(ctx, amp_relu(ctx, amp_linear(ctx, x, w1, b1)), w2, b2);
}

int main(void) {
    amp_ctx *ctx;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return 1;
    w1 = amp_param_new(ctx, "0.weight", AMP_F32, 2, (const int64_t[]){EX_HIDDEN, EX_IN});
    b1 = amp_param_new(ctx, "0.bias", AMP_F32, 1, (const int64_t[]){EX_HIDDEN});
    w2 = amp_param_new(ctx, "2.weight", AMP_F32, 2, (const int64_t[]){EX_CLASSES, EX_HIDDEN});
    b2 = amp_param_new(ctx, "2.bias", AMP_F32, 1, (const int64_t[]){EX_CLASSES});
    if (amp_ctx_alloc_params(ctx) != AMP_OK) return 1;
    ex_init(w1->data, EX_HIDDEN * EX_IN, EX_IN, 1);
    ex_init(w2->data, EX_CLASSES * EX_HIDDEN, EX_HIDDEN, 2);

    amp_optim_config cfg = amp_optim_default_config(AMP_OPTIM_SGD);
    cfg.lr = 0.1f;
    cfg.momentum = 0.9f;
    amp_optimizer *opt;
    amp_scaler *scaler;
    if (amp_optimizer_create(ctx, &cfg, &opt) != AMP_OK || amp_scaler_create(NULL, &scaler) != AMP_OK) return 1;

    float x[EX_BATCH * EX_IN];
    int32_t y[EX_BATCH];
    int correct = 0, seen = 0, skipped = 0;
    for (int step = 0; step < 300; step++) {
        amp_ctx_reset(ctx);
        amp_zero_grad(ctx);
        ex_batch((uint64_t)step, x, y);
        amp_tensor *xt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){EX_BATCH, EX_IN}, x, AMP_F32);
        amp_autocast_enter(AMP_F16);
        amp_tensor *logits = mlp(ctx, xt);
        amp_tensor *loss = amp_cross_entropy(ctx, logits, y);
        amp_autocast_exit();
        if (!loss) {
            fprintf(stderr, "forward failed: %s\n", amp_ctx_error(ctx));
            return 1;
        }
        amp_step_report report;
        if (amp_scaler_backward(scaler, ctx, loss) != AMP_OK || amp_scaler_step(scaler, opt, &report) != AMP_OK ||
            amp_scaler_update(scaler) != AMP_OK) {
            fprintf(stderr, "step %d failed: %s %s\n", step, amp_ctx_error(ctx), amp_scaler_error(scaler));
            return 1;
        }
        skipped += report.skipped;
        if (step >= 250) { /* accuracy on the last 50 batches, measured before their update */
            for (int b = 0; b < EX_BATCH; b++) {
                int best = 0;
                for (int c = 1; c < EX_CLASSES; c++)
                    if (amp_tensor_get(logits, b * EX_CLASSES + c) > amp_tensor_get(logits, b * EX_CLASSES + best))
                        best = c;
                correct += best == y[b];
                seen++;
            }
        }
        if (step % 100 == 0 || step == 299)
            printf("step %3d  loss %.4f  scale %g  skipped %d\n", step, amp_tensor_get(loss, 0),
                   amp_scaler_get_scale(scaler), skipped);
    }
    const double accuracy = (double)correct / seen;
    printf("accuracy over the last 50 batches: %.1f%% (chance: 25%%)\n", 100.0 * accuracy);
    amp_scaler_free(scaler);
    amp_optimizer_free(opt);
    amp_ctx_free(ctx);
    return accuracy > 0.6 ? 0 : 1;
}
