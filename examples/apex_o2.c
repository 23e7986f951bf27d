/* Apex's O2 mode with amp: fp16 model weights, fp32 master weights in the optimizer, dynamic loss
 * scaling. The Apex code it replaces:
 *
 *   model, opt = amp.initialize(model, opt, opt_level="O2")   // fp16 params, fp32 master copies
 *   with amp.scale_loss(loss, opt) as scaled_loss:            // loss * scale
 *       scaled_loss.backward()
 *   opt.step()                                                // unscale, skip on overflow, update
 *
 * In amp the preset AMP_PRECISION_FP16_MASTER says what to do: parameters are declared in fp16, the
 * optimizer (which sees fp16 parameters) keeps fp32 master weights by itself, inputs are cast to fp16,
 * and the scaler does scale_loss and the skipping. Built and run by `make test`. */
#include <stdio.h>

#include <amp.h>

#include "example_data.h"

int main(void) {
    const amp_precision_info *p = amp_precision_get_info(AMP_PRECISION_FP16_MASTER);
    printf("preset %s (%s): %s\n", p->name, p->also_known_as, p->summary);
    amp_ctx *ctx;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return 1;
    amp_tensor *w1 = amp_param_new(ctx, "0.weight", p->param_dtype, 2, (const int64_t[]){EX_HIDDEN, EX_IN});
    amp_tensor *b1 = amp_param_new(ctx, "0.bias", p->param_dtype, 1, (const int64_t[]){EX_HIDDEN});
    amp_tensor *w2 = amp_param_new(ctx, "2.weight", p->param_dtype, 2, (const int64_t[]){EX_CLASSES, EX_HIDDEN});
    amp_tensor *b2 = amp_param_new(ctx, "2.bias", p->param_dtype, 1, (const int64_t[]){EX_CLASSES});
    if (amp_ctx_alloc_params(ctx) != AMP_OK) return 1;
    float init[EX_HIDDEN * EX_IN];
    ex_init(init, EX_HIDDEN * EX_IN, EX_IN, 1);
    amp_tensor_write(w1, init, AMP_F32); /* rounded to fp16 once; the master copy starts from it */
    ex_init(init, EX_CLASSES * EX_HIDDEN, EX_HIDDEN, 2);
    amp_tensor_write(w2, init, AMP_F32);

    amp_optim_config cfg = amp_optim_default_config(AMP_OPTIM_SGD);
    cfg.lr = 0.05f;
    cfg.momentum = 0.9f;
    amp_optimizer *opt;
    amp_scaler *scaler;
    if (amp_optimizer_create(ctx, &cfg, &opt) != AMP_OK || amp_scaler_create(NULL, &scaler) != AMP_OK) return 1;

    float x[EX_BATCH * EX_IN];
    int32_t y[EX_BATCH];
    float loss_value = 0;
    for (int step = 0; step < 300; step++) {
        amp_ctx_reset(ctx);
        amp_zero_grad(ctx);
        ex_batch((uint64_t)step, x, y);
        amp_tensor *xt = amp_tensor_from(ctx, p->param_dtype, 2, (const int64_t[]){EX_BATCH, EX_IN}, x, AMP_F32);
        amp_tensor *logits = amp_linear(ctx, amp_relu(ctx, amp_linear(ctx, xt, w1, b1)), w2, b2);
        amp_tensor *loss = amp_cross_entropy(ctx, logits, y); /* computed in fp32 from fp16 logits */
        if (!loss || amp_scaler_backward(scaler, ctx, loss) != AMP_OK || amp_scaler_step(scaler, opt, NULL) != AMP_OK ||
            amp_scaler_update(scaler) != AMP_OK) {
            fprintf(stderr, "step %d failed: %s %s\n", step, amp_ctx_error(ctx), amp_scaler_error(scaler));
            return 1;
        }
        loss_value = amp_tensor_get(loss, 0);
    }
    /* The fp16 weight is the master weight rounded to nearest: check one. */
    const float master = amp_optimizer_master(opt, 0)[0];
    const float weight = amp_tensor_get(w1, 0);
    printf("final loss %.4f; w1[0]: fp16 %.6f, fp32 master %.8f; scale %g\n", loss_value, weight, master,
           amp_scaler_get_scale(scaler));
    amp_scaler_free(scaler);
    amp_optimizer_free(opt);
    amp_ctx_free(ctx);
    return (loss_value < 0.8f && amp_fp16_to_fp32(amp_fp16_from_fp32(master)) == weight) ? 0 : 1;
}
