/* The precision presets (amp/precision.h): one table, the single source of truth. */
#include <assert.h>
#include <string.h>

#include "amp/precision.h"
#include "amp/status.h"

static const amp_precision_info presets[AMP_PRECISION_COUNT] = {
    [AMP_PRECISION_FP32] = {"fp32", "fp32 parameters, activations, gradients and optimizer state", "", AMP_F32,
                            AMP_F32, false, true, false, false, AMP_FP8_RECIPE_COUNT},
    [AMP_PRECISION_AMP_FP16] = {"amp-fp16",
                                "fp32 parameters; autocast runs matmul/linear/conv/LSTM/attention in fp16 and "
                                "reductions, softmax, norms and losses in fp32; dynamic loss scaling",
                                "PyTorch autocast + GradScaler, Apex O1", AMP_F32, AMP_F16, false, true, true, false,
                                AMP_FP8_RECIPE_COUNT},
    [AMP_PRECISION_AMP_BF16] = {"amp-bf16", "as amp-fp16 with bf16, and no loss scaling (bf16 has fp32's range)",
                                "PyTorch autocast(dtype=torch.bfloat16)", AMP_F32, AMP_BF16, false, true, false, false,
                                AMP_FP8_RECIPE_COUNT},
    [AMP_PRECISION_FP16_MASTER] = {"fp16-master",
                                   "fp16 parameters and activations, fp32 master weights in the optimizer, "
                                   "batch-norm in fp32, dynamic loss scaling",
                                   "Apex O2", AMP_F16, AMP_F32, true, true, true, false, AMP_FP8_RECIPE_COUNT},
    [AMP_PRECISION_FP16_PURE] = {"fp16-pure",
                                 "everything fp16, no master weights, no loss scaling: kept to show the failure",
                                 "Apex O3", AMP_F16, AMP_F32, false, false, false, false, AMP_FP8_RECIPE_COUNT},
    [AMP_PRECISION_BF16_PURE] = {"bf16-pure", "everything bf16, no master weights, no loss scaling", "", AMP_BF16,
                                 AMP_F32, false, false, false, false, AMP_FP8_RECIPE_COUNT},
    [AMP_PRECISION_FP8_DELAYED] = {"fp8-delayed",
                                   "amp-bf16 with the Linear GEMMs in fp8: per-tensor scales from a 1024-step amax "
                                   "history (max), e4m3 x and W, e5m2 dY",
                                   "Transformer Engine DelayedScaling", AMP_F32, AMP_BF16, false, true, false, true,
                                   AMP_FP8_RECIPE_DELAYED},
    [AMP_PRECISION_FP8_CURRENT] = {"fp8-current",
                                   "amp-bf16 with the Linear GEMMs in fp8: per-tensor scales from each tensor's own "
                                   "amax, e4m3 x and W, e5m2 dY",
                                   "Transformer Engine Float8CurrentScaling, torchao tensorwise", AMP_F32, AMP_BF16,
                                   false, true, false, true, AMP_FP8_RECIPE_CURRENT},
    [AMP_PRECISION_MXFP8] = {"mxfp8",
                             "amp-bf16 with the Linear GEMMs in fp8: e4m3 in blocks of 32 along k, E8M0 scales "
                             "(RCEIL)",
                             "Transformer Engine MXFP8BlockScaling, OCP MX", AMP_F32, AMP_BF16, false, true, false,
                             true, AMP_FP8_RECIPE_MXFP8},
    [AMP_PRECISION_FP8_BLOCK] = {"fp8-block",
                                 "amp-bf16 with the Linear GEMMs in fp8: e4m3, 1x128 tiles for activations and "
                                 "gradients, 128x128 blocks for weights, power-of-2 scales",
                                 "DeepSeek-V3, Transformer Engine Float8BlockScaling", AMP_F32, AMP_BF16, false, true,
                                 false, true, AMP_FP8_RECIPE_BLOCK},
    [AMP_PRECISION_FP8_NOSCALE] = {"fp8-noscale",
                                   "amp-bf16 with the Linear GEMMs in fp8 with every scale 1 (e4m3 x and W, e5m2 dY, "
                                   "saturating): kept to show why fp8 needs scales",
                                   "", AMP_F32, AMP_BF16, false, true, false, true, AMP_FP8_RECIPE_NOSCALE},
};
static_assert(AMP_PRECISION_COUNT == 11, "describe the new preset in the table above");

const amp_precision_info *amp_precision_get_info(amp_precision precision) {
    return (unsigned)precision < AMP_PRECISION_COUNT ? &presets[precision] : NULL;
}

int amp_precision_from_name(const char *name, amp_precision *out) {
    if (!name || !out) return AMP_ERR_NULL_POINTER;
    for (int i = 0; i < AMP_PRECISION_COUNT; i++) {
        if (strcmp(name, presets[i].name) == 0) {
            *out = (amp_precision)i;
            return AMP_OK;
        }
    }
    return AMP_ERR_INVALID_ARGUMENT;
}
