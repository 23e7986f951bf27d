/* Precision modes: the named presets a training loop (and `amp train --precision`) picks from. Each
 * says which dtype the model's parameters are stored in, whether ops run under autocast and in which
 * dtype, whether the optimizer keeps fp32 master weights, whether batch-norm stays fp32, and which
 * loss scaling suits it by default.
 *
 *   fp32         everything fp32 (the baseline).
 *   amp-fp16     fp32 parameters, autocast to fp16, dynamic loss scaling: PyTorch AMP, Apex O1.
 *   amp-bf16     fp32 parameters, autocast to bf16, no scaler (bf16 has fp32's range).
 *   fp16-master  fp16 parameters (and activations), fp32 master weights in the optimizer, batch-norm
 *                kept in fp32, dynamic loss scaling: Apex O2.
 *   fp16-pure    fp16 parameters, no master weights, no scaler: Apex O3 — kept to show the failure
 *                (updates below 2^-11 of a weight vanish; small gradients flush to zero).
 *   bf16-pure    bf16 parameters, no master weights, no scaler (updates below 2^-8 vanish).
 *   fp8-delayed, fp8-current, mxfp8, fp8-block, fp8-noscale
 *                amp-bf16 (fp32 master weights, bf16 autocast, no scaler) with the Linear layers'
 *                three GEMMs in fp8 under the recipe of that name (amp/fp8.h, amp_fp8_recipe:
 *                Transformer Engine's DelayedScaling and Float8CurrentScaling, MXFP8BlockScaling,
 *                DeepSeek-V3's block scaling, and no scaling at all as the control); attention,
 *                norms, softmax, losses and the optimizer stay as in amp-bf16. Which layers: see
 *                amp_train_config.fp8_all_layers (the first and last Linear stay bf16 by default). */
#ifndef AMP_PRECISION_H
#define AMP_PRECISION_H

#include <stdbool.h>

#include "dtype.h"
#include "fp8.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum amp_precision {
    AMP_PRECISION_FP32,
    AMP_PRECISION_AMP_FP16,
    AMP_PRECISION_AMP_BF16,
    AMP_PRECISION_FP16_MASTER,
    AMP_PRECISION_FP16_PURE,
    AMP_PRECISION_BF16_PURE,
    AMP_PRECISION_FP8_DELAYED,
    AMP_PRECISION_FP8_CURRENT,
    AMP_PRECISION_MXFP8,
    AMP_PRECISION_FP8_BLOCK,
    AMP_PRECISION_FP8_NOSCALE,
    AMP_PRECISION_COUNT
} amp_precision;

typedef struct amp_precision_info {
    const char *name;         /* "amp-fp16", as on the command line */
    const char *summary;      /* one line: what it casts and keeps */
    const char *also_known_as; /* "PyTorch AMP / Apex O1", or "" */
    amp_dtype param_dtype;    /* storage dtype of the model's parameters */
    amp_dtype autocast_dtype; /* AMP_F32: no autocast region */
    bool master_weights;      /* the optimizer keeps fp32 copies of low-precision parameters */
    bool batch_norm_fp32;     /* batch-norm parameters and statistics stay fp32 */
    bool dynamic_scaling;     /* the default loss scaling: dynamic (true) or none */
    bool fp8;                 /* the Linear layers' GEMMs run in fp8 under fp8_recipe */
    amp_fp8_recipe fp8_recipe; /* (amp/fp8.h) meaningful when fp8 */
} amp_precision_info;

/* The preset's description, or NULL outside the enum. */
const amp_precision_info *amp_precision_get_info(amp_precision precision);
/* Parses "fp32", "amp-fp16", "amp-bf16", "fp16-master", "fp16-pure", "bf16-pure", "fp8-delayed",
 * "fp8-current", "mxfp8", "fp8-block", "fp8-noscale". Returns AMP_OK or
 * AMP_ERR_INVALID_ARGUMENT. */
int amp_precision_from_name(const char *name, amp_precision *out);

#ifdef __cplusplus
}
#endif
#endif /* AMP_PRECISION_H */
