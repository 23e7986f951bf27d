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
 *   bf16-pure    bf16 parameters, no master weights, no scaler (updates below 2^-8 vanish). */
#ifndef AMP_PRECISION_H
#define AMP_PRECISION_H

#include <stdbool.h>

#include "dtype.h"

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
} amp_precision_info;

/* The preset's description, or NULL outside the enum. */
const amp_precision_info *amp_precision_get_info(amp_precision precision);
/* Parses "fp32", "amp-fp16", "amp-bf16", "fp16-master", "fp16-pure", "bf16-pure". Returns AMP_OK or
 * AMP_ERR_INVALID_ARGUMENT. */
int amp_precision_from_name(const char *name, amp_precision *out);

#ifdef __cplusplus
}
#endif
#endif /* AMP_PRECISION_H */
