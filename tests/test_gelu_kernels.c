/* The fused gelu kernels (kernels/vecmath.h: gelu, gelu_grad, gelu_deriv and the tanh
 * approximation's gelu_tanh, gelu_tanh_grad, gelu_tanh_deriv) of every path, the reference included,
 * against the composition they replace (amp_vmath_gelu_composed, amp_vmath_gelu_grad_composed and the
 * amp_vmath_gelu_tanh_*_composed on the same table: its erfc, exp or tanh with the scalar
 * arithmetic), bit for bit, any NaN matching any NaN (payloads are not compared); gelu_deriv's y against the first and
 * g times its d against the second: a strided sweep of the fp32 patterns (every 65537th, so every
 * binade of both signs, NaNs and infinities) with gradients from a generator, named edges (+-0,
 * +-inf, NaN, the largest finite, subnormals, where erfc and exp saturate), and lengths 0..70 (tails). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/vecmath.h"
#include "harness.h"
#include "tests.h"

enum { CHUNK = 4096 };

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The same bits, or both NaN: which NaN's payload a multiply passes on depends on its operand order,
 * which the compiler may swap (it does at -O1), so payloads are not compared. */
static bool same(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof *a) != 0 && !(isnan(a[i]) && isnan(b[i]))) return false;
    return true;
}

static float y_deriv[CHUNK], d_deriv[CHUNK];

/* One GELU's fused kernels and the compositions they replace */
typedef struct gelu_variant {
    amp_vmath_kernel value;
    amp_vmath_grad_kernel grad;
    amp_vmath_deriv_kernel deriv;
    void (*value_composed)(const amp_vmath_kernels *k, float *y, const float *x, size_t n);
    void (*grad_composed)(const amp_vmath_kernels *k, float *dx, const float *g, const float *x, size_t n);
} gelu_variant;

/* how many checks (of four) of one variant's fused kernels differ from the composition: the value,
 * the gradient, and deriv's y (computed in place over a copy of x) against the value and g * d
 * against the gradient; d_deriv keeps deriv's d */
static int64_t compare_variant(const amp_vmath_kernels *k, const gelu_variant *v, const float *x, const float *g,
                               size_t n, float *a, float *b) {
    int64_t bad = 0;
    v->value(a, x, n);
    v->value_composed(k, b, x, n);
    bad += !same(a, b, n);
    memcpy(y_deriv, x, n * sizeof *x);
    v->deriv(y_deriv, d_deriv, y_deriv, n);
    bad += !same(y_deriv, b, n);
    v->grad(a, g, x, n);
    v->grad_composed(k, b, g, x, n);
    bad += !same(a, b, n);
    for (size_t i = 0; i < n; i++) a[i] = g[i] * d_deriv[i];
    bad += !same(a, b, n);
    return bad;
}

/* how many checks (of nine) differ: both variants, and the tanh approximation's d against its
 * composed deriv's */
static int64_t compare(const amp_vmath_kernels *k, const float *x, const float *g, size_t n, float *a, float *b) {
    const gelu_variant exact = {k->gelu, k->gelu_grad, k->gelu_deriv, amp_vmath_gelu_composed,
                                amp_vmath_gelu_grad_composed};
    const gelu_variant tanh_approx = {k->gelu_tanh, k->gelu_tanh_grad, k->gelu_tanh_deriv, amp_vmath_gelu_tanh_composed,
                                      amp_vmath_gelu_tanh_grad_composed};
    int64_t bad = compare_variant(k, &exact, x, g, n, a, b) + compare_variant(k, &tanh_approx, x, g, n, a, b);
    amp_vmath_gelu_tanh_deriv_composed(k, b, a, x, n); /* d_deriv: the tanh deriv's, from the call above */
    bad += !same(d_deriv, a, n);
    return bad;
}

void test_gelu_kernels(void) {
    float *x = malloc(CHUNK * sizeof *x), *g = malloc(CHUNK * sizeof *g);
    float *a = malloc(CHUNK * sizeof *a), *b = malloc(CHUNK * sizeof *b);
    if (!CHECK(x && g && a && b)) goto out;
    static const float edges[] = {0.0f,     -0.0f,    INFINITY, -INFINITY, NAN,    3.4028235e38f, -3.4028235e38f,
                                  1e-45f,   -1e-45f,  1e-38f,   -1e-38f,   1.0f,   -1.0f,         5.0f,
                                  -5.0f,    10.0f,    -10.0f,   13.2f,     -13.2f, 14.0f,         -14.0f,
                                  26.5f,    -26.5f,   1e4f,     -1e4f,     0.5f,   -0.5f,         1e-20f};
    const size_t n_edges = sizeof edges / sizeof edges[0];
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!amp_isa_supported((amp_isa)isa)) continue;
        const amp_vmath_kernels *k = amp_vmath_kernels_for((amp_isa)isa);
        int64_t bad = 0;
        uint64_t s = 0x243f6a8885a308d3ull;
        /* the sweep, CHUNK values per call */
        size_t m = 0;
        for (uint64_t u = 0; u <= UINT32_MAX; u += 65537) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            x[m] = from_bits((uint32_t)u);
            g[m] = (float)(int64_t)(s >> 40) / (float)(1 << 20) - 8.0f;
            if (++m == CHUNK) bad += compare(k, x, g, m, a, b), m = 0;
        }
        if (m) bad += compare(k, x, g, m, a, b);
        /* edges against every gradient edge */
        for (size_t i = 0; i < n_edges; i++)
            for (size_t j = 0; j < n_edges; j++) x[i * n_edges + j] = edges[i], g[i * n_edges + j] = edges[j];
        bad += compare(k, x, g, n_edges * n_edges, a, b);
        /* every length to 70 */
        for (size_t n = 0; n <= 70; n++) {
            for (size_t i = 0; i < n; i++) x[i] = (float)i * 0.37f - 13.0f, g[i] = 1.0f - (float)i * 0.01f;
            bad += compare(k, x, g, n, a, b);
        }
        CHECK_MSG(bad == 0, "gelu kernels %s: %lld checks differ from the composition", amp_isa_name((amp_isa)isa),
                  (long long)bad);
    }
out:
    free(x), free(g), free(a), free(b);
}
