/* FP8 scaling recipes: the rules that give every fp8 tensor (or block of one) its scale, exactly as
 * their authors define them, and the scaled casts that use those scales.
 *
 *   delayed scaling   Transformer Engine (TE) DelayedScaling: per tensor an amax history; the scale of
 *                     step t comes from the amaxes of earlier steps
 *   current scaling   TE Float8CurrentScaling, torchao "tensorwise": the scale from the tensor's own
 *                     amax, computed just before the cast
 *   MXFP8             OCP Microscaling: blocks of 32 values, one E8M0 (power-of-2) scale each
 *   block scaling     DeepSeek-V3, TE Float8BlockScaling: 1x128 tiles or 128x128 blocks, power-of-2
 *                     fp32 scales
 *
 * Conventions (TE's): `scale` multiplies a high-precision value into the fp8 range (q = fp8(x *
 * scale)); `scale_inv` multiplies the fp8 value back (x ~ q * scale_inv). Every cast to fp8 rounds
 * x * scale (one fp32 multiplication) to nearest, ties to even, and saturates: a value past the
 * format's largest finite value, and +-inf, become +-max finite (448 in e4m3, 57344 in e5m2); NaN stays
 * NaN (amp's canonical fp8 NaNs, amp/formats.h). Only AMP_F8E4M3 and AMP_F8E5M2 are fp8 dtypes here.
 *
 * Every function that can fail returns an amp status and never prints; the two scale rules, whose
 * signatures return the scale, return NaN for an invalid argument (no valid input gives NaN). */
#ifndef AMP_FP8_H
#define AMP_FP8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- scale rules ---------------------------------------------------------------------------- */

/* Delayed scaling's rule (TE delayed_scaling.cu): scale = (fp8_max * 2^-margin) / amax, the numerator
 * computed in fp32 and the quotient one correctly rounded fp32 division; an amax that is not finite
 * or is <= 0 keeps prev_scale; a quotient that overflows to inf becomes FLT_MAX (and one that
 * underflows, only possible with a margin near 127, becomes 0, as in TE).
 * fp8: AMP_F8E4M3 (max 448) or AMP_F8E5M2 (max 57344); margin in [-127, 127]; otherwise NaN. */
float amp_fp8_scale_from_amax(float amax, float prev_scale, amp_dtype fp8, int margin);

/* Current scaling's rule (TE recipe_common.cuh compute_scale_from_amax, fp32 input): an amax below
 * amax_epsilon is raised to it; then an amax that is inf, NaN or 0 gives 1; otherwise scale =
 * fp8_max / amax correctly rounded, an infinite quotient becomes FLT_MAX; with pow2 the scale's
 * mantissa bits are cleared (the scale rounds down to a power of 2; FLT_MAX becomes 2^127).
 * amax_epsilon must be finite and >= 0 (TE's default is 0; torchao's float8 uses 1e-12), fp8 an fp8
 * dtype; otherwise NaN. */
float amp_fp8_current_scale(float amax, amp_dtype fp8, float amax_epsilon, bool pow2);

/* ---- tensor-wise casts ----------------------------------------------------------------------- */

/* *amax = the largest |src[i]|, 0 for n == 0. NaNs are skipped, as TE's amax kernels skip them
 * (fmaxf): an all-NaN array has amax 0. An infinity gives inf, which the scale rules treat as "no
 * new scale" (delayed) or scale 1 (current). *saw_nan, when not NULL, says whether src held a NaN. */
int amp_fp8_amax(float *amax, bool *saw_nan, const float *src, size_t n);

/* dst[i] = fp8(src[i] * scale), saturating (above); dst holds n bytes. scale must be finite and > 0
 * (AMP_ERR_INVALID_ARGUMENT otherwise); fp8 an fp8 dtype (AMP_ERR_UNSUPPORTED_DTYPE otherwise). */
int amp_fp8_quantize(void *dst, amp_dtype fp8, const float *src, size_t n, float scale);

/* dst[i] = decode(src[i]) * scale_inv in fp32 (exact when scale_inv is a power of 2 and the product
 * stays normal). scale_inv must be finite and > 0. */
int amp_fp8_dequantize(float *dst, const void *src, amp_dtype fp8, size_t n, float scale_inv);

/* ---- delayed scaling ------------------------------------------------------------------------- */

/* HYBRID: e4m3 for the forward tensors (activations, weights), e5m2 for gradients. E4M3: e4m3 for
 * all. (TE refuses pure E5M2, and so does amp: it is not in the enum.) */
typedef enum amp_fp8_format { AMP_FP8_HYBRID = 0, AMP_FP8_E4M3 = 1 } amp_fp8_format;
/* The role of a tensor under a format. */
typedef enum amp_fp8_role { AMP_FP8_FORWARD = 0, AMP_FP8_GRADIENT = 1 } amp_fp8_role;
/* The amax a scale is computed from: the largest in the history window, or the newest. */
typedef enum amp_fp8_amax_algo { AMP_FP8_AMAX_MAX = 0, AMP_FP8_AMAX_MOST_RECENT = 1 } amp_fp8_amax_algo;

/* The fp8 dtype `format` gives a tensor of `role`, or AMP_DTYPE_COUNT for values outside the enums. */
amp_dtype amp_fp8_format_dtype(amp_fp8_format format, amp_fp8_role role);

typedef struct amp_fp8_delayed_config {
    int history_len;            /* amax history length, >= 1; TE's default 1024 */
    amp_fp8_amax_algo algo;     /* TE's default AMP_FP8_AMAX_MAX */
    int margin;                 /* in [-127, 127]; TE's default 0 */
    amp_fp8_format format;      /* TE's default AMP_FP8_HYBRID */
    /* false (TE): a fresh state casts with scale 1 until its first update. true (torchao's delayed
     * scaling, Float8LinearConfig.enable_amax_init): the first cast of a fresh state measures its own
     * tensor's amax and takes the scale the rule gives it (amp_fp8_delayed_init), so the first pass's
     * casts are scaled too; small gradients are not flushed at scale 1 in e5m2. */
    bool amax_init;
} amp_fp8_delayed_config;

/* TE DelayedScaling's defaults: history 1024, max, margin 0, HYBRID, no amax init. */
#define AMP_FP8_DELAYED_CONFIG_DEFAULT {1024, AMP_FP8_AMAX_MAX, 0, AMP_FP8_HYBRID, false}

/* One tensor's delayed-scaling state: its amax history, scale and scale_inv (opaque). */
typedef struct amp_fp8_delayed amp_fp8_delayed;

/* A new state for a tensor of `role`: history all zeros, scale 1, scale_inv 1 (TE's initial state).
 * AMP_ERR_INVALID_ARGUMENT for a config out of range, AMP_ERR_OUT_OF_MEMORY. */
int amp_fp8_delayed_create(amp_fp8_delayed **out, const amp_fp8_delayed_config *config, amp_fp8_role role);
void amp_fp8_delayed_free(amp_fp8_delayed *state); /* NULL is fine */

/* Records a cast's amax into slot 0, the current pass's slot: slot0 = fmaxf(slot0, amax), so several
 * casts in one pass keep their maximum (TE's cast kernels atomic-max into history[0]) and a NaN is
 * ignored. amax must be >= 0 or NaN (AMP_ERR_INVALID_ARGUMENT otherwise); +inf is recorded. */
int amp_fp8_delayed_record(amp_fp8_delayed *state, float amax);

/* An update (TE amax_and_scale_update; amp_fp8_linear_update calls it after each pass), in this
 * order:
 *   1. amax = max over all history_len slots (AMP_FP8_AMAX_MAX) or slot 0 (MOST_RECENT), read BEFORE
 *      the roll, so slot 0 (this pass's amax) takes part;
 *   2. scale = amp_fp8_scale_from_amax(amax, scale, dtype, margin); scale_inv = 1 / scale in fp32;
 *   3. the history rolls one slot toward slot 0 (torch.roll(h, -1)): slot i takes slot i+1, the last
 *      slot takes the old slot 0, and slot 0 is then zeroed for the next pass. So after the update
 *      the last slot holds the pass just finished, the one before it the pass before, and slot 1 the
 *      oldest amax still in the window; the old slot 1 (the oldest) has left it. */
int amp_fp8_delayed_update(amp_fp8_delayed *state);

float amp_fp8_delayed_scale(const amp_fp8_delayed *state);     /* NaN for NULL */
float amp_fp8_delayed_scale_inv(const amp_fp8_delayed *state); /* NaN for NULL */
amp_dtype amp_fp8_delayed_dtype(const amp_fp8_delayed *state); /* AMP_DTYPE_COUNT for NULL */
/* A read-only view of the history (history_len floats, slot 0 first), valid until the state is
 * freed. */
int amp_fp8_delayed_history(const amp_fp8_delayed *state, const float **history, size_t *len);
/* Replaces the history and the scale with saved ones (a checkpoint's), so that the steps that follow
 * are bit-identical to the run that saved them; scale_inv becomes 1 / scale. len must equal the
 * state's history_len, every slot be >= 0 (inf allowed, NaN not), scale finite and >= 0
 * (AMP_ERR_INVALID_ARGUMENT otherwise, and the state is unchanged). */
int amp_fp8_delayed_load(amp_fp8_delayed *state, const float *history, size_t len, float scale);

/* Whether the state still wants its amax init: its config asks for one and it has neither been
 * initialized, nor updated, nor loaded (a loaded state is the saved run's, calibrated by it). */
bool amp_fp8_delayed_needs_init(const amp_fp8_delayed *state);
/* The amax init (config.amax_init): scale = amp_fp8_scale_from_amax(amax, scale, dtype, margin), so
 * an amax of 0, inf or NaN keeps scale 1; scale_inv = 1 / scale. The history is unchanged: the cast
 * that follows records its amax as any other. AMP_ERR_INVALID_ARGUMENT where the state does not
 * need its init (amp_fp8_delayed_needs_init). */
int amp_fp8_delayed_init(amp_fp8_delayed *state, float amax);

/* ---- MXFP8 ------------------------------------------------------------------------------------ */

enum { AMP_MX_BLOCK = 32 }; /* values per E8M0 scale */

/* How a block's E8M0 exponent comes from its amax (torchao ScaleCalculationMode). With emax the
 * exponent of the element type's largest power of 2 (8 for e4m3, 15 for e5m2) and E(a) the unbiased
 * fp32 exponent field of a (-127 for zeros and subnormals):
 *   FLOOR  E(amax) - emax (the OCP spec's rule; torchao's default);
 *   CEIL   E(amax) + (amax's mantissa != 0) - emax;
 *   EVEN   E(amax rounded to the element's mantissa width on the bits: half an ulp added, the
 *          mantissa then cleared, so ties go up) - emax;
 *   RCEIL  the exponent of amax / fp8_max (one fp32 division) rounded up to a power of 2 (TE's and
 *          cuBLAS's rule, the hardware's cvt.rp.satfinite.ue8m0x2.f32), 0 when <= 2^-127.
 * then clamped below at -127 (byte 0) and biased by 127. A NaN amax gives byte 0xFF; an infinite amax
 * gives 128 - emax in FLOOR/CEIL/EVEN (bytes 247, 240) and byte 0xFE in RCEIL. */
typedef enum amp_mx_scale_mode { AMP_MX_FLOOR = 0, AMP_MX_RCEIL = 1, AMP_MX_CEIL = 2, AMP_MX_EVEN = 3 } amp_mx_scale_mode;

/* Quantizes n values (n a multiple of 32, else AMP_ERR_INVALID_ARGUMENT) into n payload bytes of
 * elem (AMP_F8E4M3 or AMP_F8E5M2) and n / 32 E8M0 scale bytes: payload = fp8(x / 2^(byte-127)),
 * saturating. Bit-identical to torchao 0.18's to_mx(data, elem, 32, mode) on the CPU, except:
 *   - a block with byte 0 (scale 2^-127): amp's payload is x * 2^127 (the OCP definition); torchao
 *     uses 2^-126 in FLOOR/CEIL/EVEN and 1 in RCEIL (as TE's exp2f_rcp does);
 *   - RCEIL: amp rounds exactly (the hardware rule above); torchao's eager fallback computes
 *     ceil(log2(descale)) in fp32, which misses a mantissa too small to move the rounded log2
 *     (descale = 2^k (1 + a few ulps), |k| >= 4): there torchao's byte is one lower;
 *   - e5m2 NaN payloads are amp's canonical 0x7E | sign (torch writes 0x7F | sign).
 * In a NaN block (byte 0xFF) the payload decodes to NaN whatever it holds; amp writes torchao's
 * bits on x86: FLOOR/CEIL/EVEN x / inf (finite x: a zero of x's sign; NaN: NaN of x's sign; +-inf: the
 * negative NaN), RCEIL the positive NaN everywhere. */
int amp_mx_quantize(void *dst, uint8_t *scales_e8m0, const float *src, size_t n, amp_dtype elem,
                    amp_mx_scale_mode mode);

/* dst[i] = decode(src[i]) * 2^(byte-127) in fp32 (exact, or +-inf past FLT_MAX); byte 0xFF gives NaN
 * for the whole block. n a multiple of 32. */
int amp_mx_dequantize(float *dst, const void *src, const uint8_t *scales_e8m0, size_t n, amp_dtype elem);

/* ---- block scaling (DeepSeek-V3, TE Float8BlockScaling) --------------------------------------- */

/* The tiles of a row-major [rows, cols] matrix that share one scale: 1x128 (a row's 128 consecutive
 * values: activations and gradients), 128x128 (weights), or 128x1 (a column's 128 consecutive values:
 * the column-wise copy a GEMM's other operand order needs, quantized from the high-precision source,
 * never from the row-wise copy). Tiles at the right and bottom edges are partial: their amax is over
 * the values present. */
typedef enum amp_fp8_block_shape {
    AMP_FP8_BLOCK_1X128 = 0,
    AMP_FP8_BLOCK_128X128 = 1,
    AMP_FP8_BLOCK_128X1 = 2
} amp_fp8_block_shape;

enum { AMP_FP8_BLOCK_TILE = 128 };

/* The number of scales, row-major over the tiles (TE's compact layout, without its padding):
 * rows x ceil(cols/128) for 1x128, ceil(rows/128) x ceil(cols/128) for 128x128, ceil(rows/128) x cols
 * for 128x1; 0 for an invalid shape. */
size_t amp_fp8_block_scale_count(size_t rows, size_t cols, amp_fp8_block_shape shape);

/* Per tile: scale = amp_fp8_current_scale(amax, fp8, 0, true) (TE Float8BlockScaling's defaults:
 * amax_epsilon 0, power-of-2 scales: fp8_max / amax rounded down to a power of 2; an all-zero tile
 * gets 1), scale_inv[tile] = 1 / scale (exact), dst = fp8(x * scale) saturating. fp8 is AMP_F8E4M3
 * for DeepSeek-V3; AMP_F8E5M2 is accepted too. */
int amp_fp8_block_quantize(void *dst, float *scale_inv, const float *src, size_t rows, size_t cols,
                           amp_dtype fp8, amp_fp8_block_shape shape);
/* dst = decode(src) * scale_inv[tile], per tile. */
int amp_fp8_block_dequantize(float *dst, const void *src, const float *scale_inv, size_t rows,
                             size_t cols, amp_dtype fp8, amp_fp8_block_shape shape);


/* ---- training: the fp8 linear ------------------------------------------------------------------ */

/* The recipes a Linear layer's three GEMMs (forward y = x W^T, input gradient dX = dY W, weight
 * gradient dW = dY^T X) run under. Every GEMM takes fp8 operands, accumulates in fp32 and writes a
 * high-precision result; the gradient of each quantization is straight-through (as TE and torchao).
 *   DELAYED  TE DelayedScaling (AMP_FP8_DELAYED_CONFIG_DEFAULT): per-tensor scales from each
 *            tensor's amax history (x, W, dY one state each); HYBRID: e4m3 x and W, e5m2 dY
 *   CURRENT  TE Float8CurrentScaling: per-tensor scales from the tensor's own amax (epsilon 0, no
 *            pow2), HYBRID
 *   MXFP8    TE MXFP8BlockScaling: blocks of 32 along each GEMM's k dimension, E8M0 scales by RCEIL
 *            (TE's and the hardware's rule: a block's scaled amax never exceeds 448, so nothing
 *            saturates; or the OCP spec's FLOOR, amp_fp8_linear_set_mx_scale), e4m3 payloads for all three tensors; each GEMM's copy (row-wise or
 *            column-wise) is quantized from the high-precision source; k is zero-padded to a
 *            multiple of 32 where it is not one (zeros change neither a block's amax nor a product)
 *   BLOCK    DeepSeek-V3 / TE Float8BlockScaling: 1x128 tiles along k for x and dY (so 128x1 tiles
 *            for the weight gradient, whose k is the batch), 128x128 blocks for W, e4m3, power-of-2
 *            scales (amp_fp8_block_quantize)
 *   NOSCALE  every scale 1, HYBRID, saturating casts: the control that shows why scaling is needed */
typedef enum amp_fp8_recipe {
    AMP_FP8_RECIPE_DELAYED = 0,
    AMP_FP8_RECIPE_CURRENT = 1,
    AMP_FP8_RECIPE_MXFP8 = 2,
    AMP_FP8_RECIPE_BLOCK = 3,
    AMP_FP8_RECIPE_NOSCALE = 4,
    AMP_FP8_RECIPE_COUNT
} amp_fp8_recipe;

/* "delayed", "current", "mxfp8", "block", "noscale"; "invalid" outside the enum. */
const char *amp_fp8_recipe_name(amp_fp8_recipe recipe);

/* The three tensors of a Linear's GEMMs. */
typedef enum amp_fp8_tensor_role { AMP_FP8_X = 0, AMP_FP8_W = 1, AMP_FP8_DY = 2, AMP_FP8_ROLES = 3 } amp_fp8_tensor_role;
/* "x", "w", "dy". */
const char *amp_fp8_tensor_role_name(amp_fp8_tensor_role role);

/* What the casts of one tensor role did over a span of steps. Fractions are of `count`. */
typedef struct amp_fp8_cast_stats {
    float amax;         /* the largest |value| cast (NaNs skipped) */
    float scale_min;    /* the smallest and largest scale used (per-tensor recipes: the tensor's; block */
    float scale_max;    /* recipes: over the blocks; fp32 value of the E8M0 scale for MXFP8) */
    int64_t count;      /* values cast */
    int64_t saturated;  /* finite values whose scaled magnitude exceeded the fp8 maximum (clipped) */
    int64_t flushed;    /* nonzero finite values that became +-0 in fp8 */
    int64_t casts;      /* casts made */
} amp_fp8_cast_stats;

/* One Linear layer's fp8 state: the recipe, for DELAYED the three amax histories and scales, and the
 * cast statistics (opaque). A layer uses it through amp_linear_fp8 (or amp_linear_layer.fp8). */
typedef struct amp_fp8_linear amp_fp8_linear;

/* A new state. delayed: DELAYED's configuration (NULL: TE's defaults); its format must be HYBRID.
 * AMP_ERR_INVALID_ARGUMENT (a recipe outside the enum, a bad config), AMP_ERR_OUT_OF_MEMORY. */
int amp_fp8_linear_create(amp_fp8_linear **out, amp_fp8_recipe recipe, const amp_fp8_delayed_config *delayed);
void amp_fp8_linear_free(amp_fp8_linear *s); /* NULL is fine */
amp_fp8_recipe amp_fp8_linear_recipe(const amp_fp8_linear *s); /* AMP_FP8_RECIPE_COUNT for NULL */
/* DELAYED's state of a role (NULL for the other recipes): read its scale and history, or load one. */
amp_fp8_delayed *amp_fp8_linear_delayed(amp_fp8_linear *s, amp_fp8_tensor_role role);

/* MXFP8: how the E8M0 block scales are chosen (amp_mx_scale_mode): AMP_MX_RCEIL (the default: TE's
 * and the hardware's rule; a block's scaled amax never exceeds 448) or AMP_MX_FLOOR (the OCP spec's
 * rule and torchao's default: the block's largest values may saturate). AMP_ERR_INVALID_ARGUMENT for
 * another mode or another recipe. Set it before the first cast; a run keeps one mode. */
int amp_fp8_linear_set_mx_scale(amp_fp8_linear *s, amp_mx_scale_mode mode);
/* The MXFP8 scale mode (AMP_MX_RCEIL for the other recipes and NULL). */
amp_mx_scale_mode amp_fp8_linear_mx_scale(const amp_fp8_linear *s);

/* TE's update points for DELAYED: after each forward pass (TE's fp8_autocast exit: x and W) and
 * after each backward pass (dY), each pass's roles update their scales from their histories and roll
 * them (amp_fp8_delayed_update), so under gradient accumulation every micro-batch is a history slot,
 * as in TE. A forward update keeps the scales x and W were cast with, for the recomputed forward
 * that backward may replay (amp/recompute.h: its casts are then the first forward's, as TE's
 * recompute copies of the fp8 meta make them). Other recipes: nothing to update. */
typedef enum amp_fp8_pass { AMP_FP8_PASS_FORWARD = 0, AMP_FP8_PASS_BACKWARD = 1 } amp_fp8_pass;
int amp_fp8_linear_update(amp_fp8_linear *s, amp_fp8_pass pass);
/* The end of an optimizer step: DELAYED updates the roles that no amp_fp8_linear_update has updated
 * since the last step (a caller that never calls it gets one update per optimizer step); every
 * recipe moves this step's statistics to the `last` slot and adds them to the run's totals. */
int amp_fp8_linear_step(amp_fp8_linear *s);
/* The statistics of a role: of the last finished step (last), and over every step so far (total:
 * counts summed, amax the maximum, scales the extremes). Zeros before the first step. */
int amp_fp8_linear_stats(const amp_fp8_linear *s, amp_fp8_tensor_role role, amp_fp8_cast_stats *last,
                         amp_fp8_cast_stats *total);

/* Whether casts record their amaxes and statistics (true after create). Off, the casts use the
 * current scales and leave the state as it is: evaluation passes between training steps (so that
 * they change neither the histories nor the training statistics). */
void amp_fp8_linear_set_recording(amp_fp8_linear *s, bool on);

/* Data parallel under DELAYED with the amax init: fn(arg, &amax) makes a first cast's amax the
 * group's (an all-reduce with MAX, NaN counted as inf) before the init takes its scale, so every rank
 * starts from the same scales. It runs inside the cast, once per role and layer, in the same order
 * on every rank; not while recording is off (evaluation keeps its rank's own amax and leaves the
 * state as it is). fn NULL: the rank's own amax. AMP_ERR_INVALID_ARGUMENT for other recipes. */
typedef int (*amp_fp8_amax_reduce_fn)(void *arg, float *amax);
int amp_fp8_linear_set_amax_reduce(amp_fp8_linear *s, amp_fp8_amax_reduce_fn fn, void *arg);

/* The layer's weight was replaced (loaded from a file, or set by hand) and is no longer the weight
 * the history describes: DELAYED clears the weight's amax history and sets its scale from the new
 * weight's amax (w: n fp32 values), so the next cast neither clips a larger weight with a scale made
 * for a smaller one nor flushes a smaller one (Transformer Engine PR #567). Other recipes: nothing to
 * do (their weight scales come from the weight itself). The x and dY states are kept. */
int amp_fp8_linear_weights_changed(amp_fp8_linear *s, const float *w, size_t n);


/* The Linear op under s's recipe: x [..., in], weight [out, in] (f32, f16 or bf16; the fp32 master
 * weight normally), bias [out] or NULL -> [..., out]. Forward quantizes x and W (and, when a gradient
 * will be needed, the column-wise copies MXFP8 and block scaling take from the high-precision
 * source), multiplies them with fp32 accumulation, adds the bias in fp32 and rounds once to the
 * output dtype: the autocast dtype where autocast lowers linear, else the inputs' promoted dtype.
 * Backward quantizes dY (e5m2 under HYBRID) and runs dX = dY W and dW = dY^T X in fp8 the same way;
 * the bias gradient is the column sums of the unquantized dY; the quantizations pass gradients
 * straight through. Every cast records its amax (DELAYED: into the role's history) and statistics
 * in s; call amp_fp8_linear_update after each pass (TE's points) and amp_fp8_linear_step once per
 * optimizer step. Returns NULL with the error in ctx, as every
 * op. The GEMMs are amp_gemm_fp8's (amp/gemm.h). */
amp_tensor *amp_linear_fp8(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias, amp_fp8_linear *s);

#ifdef __cplusplus
}
#endif
#endif /* AMP_FP8_H */
