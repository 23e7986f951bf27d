/* Gradient and forward checks of ops against an independent double-precision reference.
 *
 * A check describes an op twice: `build` makes the output with amp's ops from input tensors, and
 * `reference` computes the same function in double from the inputs' values (written in the test, not
 * with amp). gradcheck then
 *   1. draws random inputs (seeded; values representable in the dtype under test),
 *   2. runs amp forward and backward with the seed gradient w (random, representable), i.e. the
 *      gradient of L = sum(out * w),
 *   3. compares amp's output with the reference output, and amp's input gradients with central finite
 *      differences of L computed in double through `reference` (step h = 1e-6 * max(1, |x|), error
 *      about h^2 * L''' + 1e-16 / h, far below every tolerance here),
 * with tolerances |amp - ref| <= atol * scale + rtol * size, where scale is the largest |ref| of that
 * quantity (at least atol_floor), and (rtol, atol) come from the dtype: the unit roundoff u of the dtype (2^-24 fp32,
 * 2^-11 fp16, 2^-8 bf16) times a per-check factor the test states (how many roundings the op's
 * formula compounds). size is |ref| for outputs; for a gradient it is the magnitude of the sum that
 * gradient element is, sum over outputs j of |w_j d out_j / d x_i| (each term's finite difference,
 * from the same two reference calls), at least |ref|: a gradient summed over a broadcast or a
 * reduction errs in proportion to its terms, not to what is left after they cancel (div's
 * d/db = -sum g a / b^2 over 8 terms of size up to 4 came to 0.077 and erred by 7.8 u of that). */
#ifndef AMP_TESTS_GRADCHECK_H
#define AMP_TESTS_GRADCHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "amp.h"

enum { GRADCHECK_MAX_INPUTS = 8 };

typedef struct gradcheck_input {
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    float lo, hi;          /* uniform range of the random values (lo == hi == 0: [-1, 1]) */
    bool no_grad;          /* an input that is not differentiated (e.g. running statistics) */
    bool keep_away_from_zero; /* |x| >= 0.1 (log, div, pow with fractional exponents; relu's kink) */
} gradcheck_input;

typedef struct gradcheck {
    const char *name;
    int n_inputs;
    gradcheck_input inputs[GRADCHECK_MAX_INPUTS];
    /* Builds the output from amp tensors in[0..n_inputs) (all of the dtype under test). */
    amp_tensor *(*build)(amp_ctx *ctx, amp_tensor *const *in, const void *user);
    /* Computes the output in double from the inputs' values (row-major); writes n_out values. */
    void (*reference)(const double *const *in, double *out, const void *user);
    const void *user;      /* op parameters shared by build and reference */
    double rtol_factor;    /* tolerance = factor * u(dtype) (relative) */
    double atol_factor;    /* ... and factor * u(dtype) * max|ref| (absolute); 0 means rtol_factor */
    double atol_floor;     /* the absolute part uses max(max|ref|, atol_floor): for results that
                              cancel (a sum of n terms of size ~1 errs by ~n u however small it is) */
} gradcheck;

/* Runs the check in `dtype` (AMP_F32, AMP_F16 or AMP_BF16), recording CHECKs in the harness.
 * Returns true when everything matched. */
bool gradcheck_run(const gradcheck *check, amp_dtype dtype);
/* Runs it in f32, f16 and bf16. */
bool gradcheck_run_all_dtypes(const gradcheck *check);
/* Unit roundoff of a dtype: 2^-24, 2^-11, 2^-8. */
double gradcheck_unit_roundoff(amp_dtype dtype);

#endif
