#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

double gradcheck_unit_roundoff(amp_dtype dtype) {
    switch (dtype) {
    case AMP_F16: return ldexp(1.0, -11);
    case AMP_BF16: return ldexp(1.0, -8);
    default: return ldexp(1.0, -24);
    }
}

static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s, double lo, double hi) {
    return lo + (hi - lo) * (double)(mix(s) >> 11) * 0x1.0p-53;
}

/* v rounded to dtype (and back), so the double reference sees exactly what amp computes on. */
static float representable(amp_dtype dtype, float v) {
    float out = v;
    unsigned char tmp[4];
    amp_convert(tmp, dtype, &v, AMP_F32, 1);
    amp_convert(&out, AMP_F32, tmp, dtype, 1);
    return out;
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static double loss_of(const gradcheck *c, const double *const *in, double *out, const double *w, int64_t n_out) {
    c->reference(in, out, c->user);
    double l = 0.0;
    for (int64_t i = 0; i < n_out; i++) l += out[i] * w[i];
    return l;
}

/* |got - want| <= atol * scale + rtol * size_i, reporting the first few mismatches. size_i is |want[i]|,
 * or with `terms` (a gradient) the larger of that and terms[i]: the magnitude of the sum the element is
 * (see gradcheck.h), which the rounding error of that sum scales with, however much it cancels. */
static bool compare(const char *what, const char *name, amp_dtype dtype, const float *got, const double *want,
                    const double *terms, int64_t n, double rtol, double atol, double floor) {
    double scale = floor;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double size = terms ? fmax(fabs(want[i]), terms[i]) : fabs(want[i]);
        const double tol = atol * scale + rtol * size;
        if (!(fabs((double)got[i] - want[i]) <= tol)) { /* NaN fails */
            if (bad < 3)
                CHECK_MSG(false, "%s %s (%s) element %lld: amp %.9g, reference %.9g, tolerance %.3g", name, what,
                          amp_dtype_name(dtype), (long long)i, (double)got[i], want[i], tol);
            bad++;
        }
    }
    if (bad == 0) harness_pass(1);
    return bad == 0;
}

bool gradcheck_run(const gradcheck *c, amp_dtype dtype) {
    static bool seed_noted;
    if (!seed_noted) {
        harness_note("gradcheck seed %llu", (unsigned long long)harness_seed());
        seed_noted = true;
    }
    uint64_t rng = harness_seed() ^ name_hash(c->name) ^ (uint64_t)dtype * 0x9E37ull;
    amp_ctx_config cfg = amp_ctx_default_config();
    cfg.arena_bytes = 1 << 20;
    cfg.seed = rng;
    amp_ctx *ctx = NULL;
    if (!CHECK_MSG(amp_ctx_create(&cfg, &ctx) == AMP_OK, "%s: amp_ctx_create failed", c->name)) return false;

    double *xs[GRADCHECK_MAX_INPUTS] = {0};
    amp_tensor *ts[GRADCHECK_MAX_INPUTS] = {0};
    int64_t numel[GRADCHECK_MAX_INPUTS];
    bool ok = true;
    for (int k = 0; k < c->n_inputs; k++) {
        const gradcheck_input *spec = &c->inputs[k];
        numel[k] = 1;
        for (int d = 0; d < spec->ndim; d++) numel[k] *= spec->shape[d];
        xs[k] = malloc((size_t)(numel[k] > 0 ? numel[k] : 1) * sizeof(double));
        float *tmp = malloc((size_t)(numel[k] > 0 ? numel[k] : 1) * sizeof(float));
        const double lo = (spec->lo == 0 && spec->hi == 0) ? -1.0 : spec->lo;
        const double hi = (spec->lo == 0 && spec->hi == 0) ? 1.0 : spec->hi;
        for (int64_t i = 0; i < numel[k]; i++) {
            double v = uniform(&rng, lo, hi);
            if (spec->keep_away_from_zero && fabs(v) < 0.1) v += v < 0 ? -0.1 : 0.1;
            tmp[i] = representable(dtype, (float)v);
            xs[k][i] = tmp[i];
        }
        ts[k] = amp_tensor_from(ctx, dtype, spec->ndim, spec->shape, tmp, AMP_F32);
        free(tmp);
        if (ts[k]) amp_tensor_set_requires_grad(ts[k], !spec->no_grad);
    }
    amp_tensor *out = c->build(ctx, ts, c->user);
    if (!CHECK_MSG(out && amp_ctx_status(ctx) == AMP_OK, "%s (%s): build failed: %s", c->name, amp_dtype_name(dtype),
                   amp_ctx_error(ctx))) {
        ok = false;
        goto done;
    }
    const double u = gradcheck_unit_roundoff(dtype);
    const double rtol = c->rtol_factor * u, atol = (c->atol_factor > 0 ? c->atol_factor : c->rtol_factor) * u;
    const int64_t n_out = amp_tensor_numel(out);
    double *ref = malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof(double));
    double *w = malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof(double));
    float *got = malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof(float));
    float *wf = malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof(float));
    double *out_p = malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof(double));
    double *out_m = malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof(double));
    c->reference((const double *const *)xs, ref, c->user);
    amp_tensor_read(out, got, AMP_F32);
    ok &= compare("forward", c->name, dtype, got, ref, NULL, n_out, rtol, atol, c->atol_floor);

    for (int64_t i = 0; i < n_out; i++) {
        wf[i] = representable(out->dtype, (float)uniform(&rng, -1.0, 1.0));
        w[i] = wf[i];
    }
    if (out->requires_grad) {
        amp_tensor *seed = amp_tensor_from(ctx, out->dtype, out->ndim, out->shape, wf, AMP_F32);
        int st = amp_backward(ctx, out, seed);
        if (!CHECK_MSG(st == AMP_OK, "%s (%s): backward failed: %s", c->name, amp_dtype_name(dtype), amp_ctx_error(ctx)))
            ok = false;
        for (int k = 0; ok && k < c->n_inputs; k++) {
            if (c->inputs[k].no_grad) continue;
            double *num = malloc((size_t)(numel[k] > 0 ? numel[k] : 1) * sizeof(double));
            double *terms = malloc((size_t)(numel[k] > 0 ? numel[k] : 1) * sizeof(double));
            float *ana = malloc((size_t)(numel[k] > 0 ? numel[k] : 1) * sizeof(float));
            for (int64_t i = 0; i < numel[k]; i++) {
                const double x0 = xs[k][i], h = 1e-6 * fmax(1.0, fabs(x0));
                xs[k][i] = x0 + h;
                const double lp = loss_of(c, (const double *const *)xs, out_p, w, n_out);
                xs[k][i] = x0 - h;
                const double lm = loss_of(c, (const double *const *)xs, out_m, w, n_out);
                xs[k][i] = x0;
                num[i] = (lp - lm) / (2 * h);
                terms[i] = 0.0; /* sum over outputs j of |w_j d out_j / d x_i| */
                for (int64_t j = 0; j < n_out; j++) terms[i] += fabs(w[j] * (out_p[j] - out_m[j])) / (2 * h);
            }
            if (!CHECK_MSG(ts[k]->grad != NULL, "%s (%s): input %d got no gradient", c->name, amp_dtype_name(dtype), k)) {
                ok = false;
            } else {
                amp_tensor_read(ts[k]->grad, ana, AMP_F32);
                char what[32];
                snprintf(what, sizeof what, "d/d input %d", k);
                ok &= compare(what, c->name, dtype, ana, num, terms, numel[k], rtol, atol, c->atol_floor);
            }
            free(num);
            free(terms);
            free(ana);
        }
    }
    free(ref), free(w), free(got), free(wf), free(out_p), free(out_m);
done:
    for (int k = 0; k < c->n_inputs; k++) free(xs[k]);
    amp_ctx_free(ctx);
    return ok;
}

bool gradcheck_run_all_dtypes(const gradcheck *c) {
    bool ok = gradcheck_run(c, AMP_F32);
    ok &= gradcheck_run(c, AMP_F16);
    ok &= gradcheck_run(c, AMP_BF16);
    return ok;
}
