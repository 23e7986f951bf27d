/* Internal: the fp8 linear's state (amp/fp8.h, amp_fp8_linear) and the quantization of one GEMM
 * operand under its recipe, shared by src/fp8 and the op that runs the GEMMs (src/ops/linear_fp8.c). */
#ifndef AMP_FP8_LINEAR_H
#define AMP_FP8_LINEAR_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/fp8.h"

struct amp_fp8_linear {
    amp_fp8_recipe recipe;
    bool paused; /* amp_fp8_linear_set_recording(false) */
    bool replaying; /* the cast belongs to a recomputed forward (set by the op with paused) */
    bool updated[AMP_FP8_ROLES];    /* DELAYED: updated by amp_fp8_linear_update since the last step */
    bool have_replay;               /* replay_scale holds the last forward's x and W scales */
    float replay_scale[AMP_FP8_ROLES];
    amp_mx_scale_mode mx_scale; /* MXFP8's scale rule (AMP_MX_RCEIL unless set) */
    amp_fp8_delayed *delayed[AMP_FP8_ROLES]; /* DELAYED only */
    amp_fp8_amax_reduce_fn amax_reduce;      /* DELAYED's amax init across ranks, or NULL */
    void *amax_reduce_arg;
    amp_fp8_cast_stats step[AMP_FP8_ROLES];  /* the step being computed */
    amp_fp8_cast_stats last[AMP_FP8_ROLES];  /* the last finished step */
    amp_fp8_cast_stats total[AMP_FP8_ROLES]; /* every finished step */
};

/* A quantized matrix as a GEMM operand: the stored matrix is row-major [rows, cols] fp8 (ld cols), in
 * the layout of its source, with k along its rows or its columns (zero-padded under MXFP8: rows or
 * cols is then the source's rounded up to 32). Scales: block_rows == block_cols == 0: one factor
 * scale_inv[0] for the whole matrix (applied to the product after accumulation); else
 * scale_inv[(i / block_rows) * ld_scale + j / block_cols] multiplies element (i, j) at decode. */
typedef struct amp_fp8_qmat {
    amp_dtype dtype;
    void *data;
    int64_t rows, cols;
    float *scale_inv;
    int64_t block_rows, block_cols, ld_scale;
    float scale; /* per-tensor: the scale the cast multiplied by (scale_inv[0] is 1 / scale) */
} amp_fp8_qmat;

/* Memory for a quantized matrix: the caller's (the op's arena); NULL on failure. */
typedef void *(*amp_fp8_alloc_fn)(void *user, size_t bytes);

/* Quantizes src (row-major [rows, cols] in src_dtype: fp32, bf16 or fp16, every value exact in fp32)
 * as tensor `role` of s's recipe for a GEMM whose k dimension runs along src's columns (k_along_rows
 * false) or rows (true), records the cast's amax (DELAYED: into the role's history) and statistics
 * into s->step[role]. A 16-bit src gives the bits its fp32 decoding would (decoded a band of rows at a
 * time, never whole). Every recipe stores src's layout; MXFP8 pads k to a multiple of 32 with zeros
 * (32 x 1 blocks with k along rows, 1 x 32 along columns). AMP_OK or an error status
 * (AMP_ERR_OUT_OF_MEMORY; AMP_ERR_UNSUPPORTED_DTYPE for another src_dtype). */
int amp_fp8_linear_quantize(amp_fp8_linear *s, amp_fp8_tensor_role role, const void *src, amp_dtype src_dtype,
                            int64_t rows, int64_t cols, bool k_along_rows, amp_fp8_alloc_fn alloc, void *user,
                            amp_fp8_qmat *out);

/* Called with each band of the source's rows as fp32 (rows [r0, r0 + n), row-major), bands in order
 * and each once. */
typedef void (*amp_fp8_band_fn)(void *arg, const float *rows, int64_t r0, int64_t n);

/* amp_fp8_linear_quantize for k along src's columns into *by_cols and along its rows into *by_rows
 * (either may be NULL, not both), from one pass over src (a 16-bit src's bands decoded once for both,
 * and handed to fn, if not NULL, for whatever else reads src: the bias gradient's column sums): the
 * bits and statistics of the two calls, by_cols's first. Per-tensor recipes make the one cast both
 * serve (recorded once). */
int amp_fp8_linear_quantize2(amp_fp8_linear *s, amp_fp8_tensor_role role, const void *src, amp_dtype src_dtype,
                             int64_t rows, int64_t cols, amp_fp8_alloc_fn alloc, void *user, amp_fp8_qmat *by_cols,
                             amp_fp8_qmat *by_rows, amp_fp8_band_fn fn, void *fn_arg);

#endif
