/* The fp8 linear's state (amp/fp8.h): recipe, delayed-scaling histories, cast statistics. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "amp/status.h"
#include "../core/alloc_internal.h"
#include "fp8_internal.h"
#include "fp8_linear.h"

const char *amp_fp8_recipe_name(amp_fp8_recipe recipe) {
    switch (recipe) {
    case AMP_FP8_RECIPE_DELAYED: return "delayed";
    case AMP_FP8_RECIPE_CURRENT: return "current";
    case AMP_FP8_RECIPE_MXFP8: return "mxfp8";
    case AMP_FP8_RECIPE_BLOCK: return "block";
    case AMP_FP8_RECIPE_NOSCALE: return "noscale";
    case AMP_FP8_RECIPE_COUNT: break;
    }
    return "invalid";
}

const char *amp_fp8_tensor_role_name(amp_fp8_tensor_role role) {
    switch (role) {
    case AMP_FP8_X: return "x";
    case AMP_FP8_W: return "w";
    case AMP_FP8_DY: return "dy";
    case AMP_FP8_ROLES: break;
    }
    return "invalid";
}

int amp_fp8_linear_create(amp_fp8_linear **out, amp_fp8_recipe recipe, const amp_fp8_delayed_config *delayed) {
    if (!out) return AMP_ERR_NULL_POINTER;
    *out = NULL;
    if ((unsigned)recipe >= AMP_FP8_RECIPE_COUNT) return AMP_ERR_INVALID_ARGUMENT;
    const amp_fp8_delayed_config def = AMP_FP8_DELAYED_CONFIG_DEFAULT;
    const amp_fp8_delayed_config *dc = delayed ? delayed : &def;
    if (recipe == AMP_FP8_RECIPE_DELAYED && dc->format != AMP_FP8_HYBRID) return AMP_ERR_INVALID_ARGUMENT;
    amp_fp8_linear *s = amp_calloc(1, sizeof *s);
    if (!s) return AMP_ERR_OUT_OF_MEMORY;
    s->recipe = recipe;
    s->mx_scale = AMP_MX_RCEIL;
    for (int r = 0; r < AMP_FP8_ROLES && recipe == AMP_FP8_RECIPE_DELAYED; r++) {
        const int st = amp_fp8_delayed_create(&s->delayed[r], dc, r == AMP_FP8_DY ? AMP_FP8_GRADIENT : AMP_FP8_FORWARD);
        if (st != AMP_OK) {
            amp_fp8_linear_free(s);
            return st;
        }
    }
    *out = s;
    return AMP_OK;
}

void amp_fp8_linear_free(amp_fp8_linear *s) {
    if (!s) return;
    for (int r = 0; r < AMP_FP8_ROLES; r++) amp_fp8_delayed_free(s->delayed[r]);
    amp_free(s);
}

amp_fp8_recipe amp_fp8_linear_recipe(const amp_fp8_linear *s) { return s ? s->recipe : AMP_FP8_RECIPE_COUNT; }

int amp_fp8_linear_set_mx_scale(amp_fp8_linear *s, amp_mx_scale_mode mode) {
    if (!s) return AMP_ERR_NULL_POINTER;
    if (s->recipe != AMP_FP8_RECIPE_MXFP8 || (mode != AMP_MX_RCEIL && mode != AMP_MX_FLOOR)) return AMP_ERR_INVALID_ARGUMENT;
    s->mx_scale = mode;
    return AMP_OK;
}

amp_mx_scale_mode amp_fp8_linear_mx_scale(const amp_fp8_linear *s) { return s ? s->mx_scale : AMP_MX_RCEIL; }

amp_fp8_delayed *amp_fp8_linear_delayed(amp_fp8_linear *s, amp_fp8_tensor_role role) {
    return s && (unsigned)role < AMP_FP8_ROLES ? s->delayed[role] : NULL;
}

/* total += step: counts summed, amax the larger, scales the extremes (a step without casts adds nothing) */
static void stats_add(amp_fp8_cast_stats *total, const amp_fp8_cast_stats *step) {
    if (step->casts == 0) return;
    if (total->casts == 0) {
        *total = *step;
        return;
    }
    total->amax = fmaxf(total->amax, step->amax);
    total->scale_min = fminf(total->scale_min, step->scale_min);
    total->scale_max = fmaxf(total->scale_max, step->scale_max);
    total->count += step->count, total->saturated += step->saturated, total->flushed += step->flushed;
    total->casts += step->casts;
}

int amp_fp8_linear_update(amp_fp8_linear *s, amp_fp8_pass pass) {
    if (!s) return AMP_ERR_NULL_POINTER;
    if (pass != AMP_FP8_PASS_FORWARD && pass != AMP_FP8_PASS_BACKWARD) return AMP_ERR_INVALID_ARGUMENT;
    if (s->recipe != AMP_FP8_RECIPE_DELAYED) return AMP_OK;
    const int lo = pass == AMP_FP8_PASS_FORWARD ? AMP_FP8_X : AMP_FP8_DY;
    const int hi = pass == AMP_FP8_PASS_FORWARD ? AMP_FP8_W : AMP_FP8_DY;
    for (int r = lo; r <= hi; r++) {
        if (pass == AMP_FP8_PASS_FORWARD) s->replay_scale[r] = amp_fp8_delayed_scale(s->delayed[r]);
        const int st = amp_fp8_delayed_update(s->delayed[r]);
        if (st != AMP_OK) return st;
        s->updated[r] = true;
    }
    if (pass == AMP_FP8_PASS_FORWARD) s->have_replay = true;
    return AMP_OK;
}

int amp_fp8_linear_step(amp_fp8_linear *s) {
    if (!s) return AMP_ERR_NULL_POINTER;
    s->have_replay = false;
    for (int r = 0; r < AMP_FP8_ROLES; r++) {
        if (s->delayed[r] && !s->updated[r]) {
            const int st = amp_fp8_delayed_update(s->delayed[r]);
            if (st != AMP_OK) return st;
        }
        s->updated[r] = false;
        s->last[r] = s->step[r];
        stats_add(&s->total[r], &s->step[r]);
        memset(&s->step[r], 0, sizeof s->step[r]);
    }
    return AMP_OK;
}

int amp_fp8_linear_stats(const amp_fp8_linear *s, amp_fp8_tensor_role role, amp_fp8_cast_stats *last,
                         amp_fp8_cast_stats *total) {
    if (!s) return AMP_ERR_NULL_POINTER;
    if ((unsigned)role >= AMP_FP8_ROLES) return AMP_ERR_INVALID_ARGUMENT;
    if (last) *last = s->last[role];
    if (total) *total = s->total[role];
    return AMP_OK;
}

void amp_fp8_linear_set_recording(amp_fp8_linear *s, bool on) {
    if (s) s->paused = !on;
}

int amp_fp8_linear_set_amax_reduce(amp_fp8_linear *s, amp_fp8_amax_reduce_fn fn, void *arg) {
    if (!s) return AMP_ERR_NULL_POINTER;
    if (s->recipe != AMP_FP8_RECIPE_DELAYED) return AMP_ERR_INVALID_ARGUMENT;
    s->amax_reduce = fn, s->amax_reduce_arg = arg;
    return AMP_OK;
}

int amp_fp8_linear_weights_changed(amp_fp8_linear *s, const float *w, size_t n) {
    if (!s || (!w && n)) return AMP_ERR_NULL_POINTER;
    amp_fp8_delayed *d = s->delayed[AMP_FP8_W];
    if (!d) return AMP_OK;
    float amax = 0.0f;
    const int st = amp_fp8_amax(&amax, NULL, w, n);
    if (st != AMP_OK) return st;
    const float *h;
    size_t len;
    amp_fp8_delayed_history(d, &h, &len);
    float *zeros = amp_calloc(len, sizeof *zeros);
    if (!zeros) return AMP_ERR_OUT_OF_MEMORY;
    /* the scale the new weight's own amax gives (an all-zero or non-finite weight: 1, a fresh state's) */
    float scale = amp_fp8_scale_from_amax(amax, 1.0f, amp_fp8_delayed_dtype(d), 0);
    const int lst = amp_fp8_delayed_load(d, zeros, len, scale);
    amp_free(zeros);
    return lst;
}
