/* Delayed scaling (TE DelayedScaling): one tensor's amax history, scale and scale_inv.
 *
 * Slot 0 is the current pass's: every cast of the pass max-es its amax into it. Each update reads
 * the amax (the window's max, or slot 0) before it rolls the history one slot toward 0, which moves
 * slot 0 to the end and zeroes slot 0 for the next pass (TE's amax_and_scale_update
 * kernel, and its PyTorch twin _default_get_amax_and_update_history + _update_amax_history).
 * With the amax init (torchao's delayed scaling) a fresh state's first cast takes its scale from its
 * own tensor's amax instead of TE's initial 1. */
#include <math.h>
#include <string.h>

#include "amp/fp8.h"
#include "amp/status.h"
#include "../core/alloc_internal.h"
#include "fp8_internal.h"

struct amp_fp8_delayed {
    amp_fp8_delayed_config config;
    amp_dtype dtype;
    float scale, scale_inv;
    float *history; /* config.history_len slots, slot 0 the current pass's */
    bool calibrated; /* initialized, updated or loaded: no amax init due (config.amax_init) */
};

int amp_fp8_delayed_create(amp_fp8_delayed **out, const amp_fp8_delayed_config *config, amp_fp8_role role) {
    if (!out || !config) return AMP_ERR_NULL_POINTER;
    *out = NULL;
    const amp_dtype dtype = amp_fp8_format_dtype(config->format, role);
    if (dtype == AMP_DTYPE_COUNT || config->history_len < 1 || config->margin < -127 ||
        config->margin > 127 || (unsigned)config->algo > AMP_FP8_AMAX_MOST_RECENT)
        return AMP_ERR_INVALID_ARGUMENT;
    amp_fp8_delayed *s = amp_calloc(1, sizeof *s);
    if (!s) return AMP_ERR_OUT_OF_MEMORY;
    s->history = amp_calloc((size_t)config->history_len, sizeof *s->history);
    if (!s->history) {
        amp_free(s);
        return AMP_ERR_OUT_OF_MEMORY;
    }
    s->config = *config;
    s->dtype = dtype;
    s->scale = 1.0f;
    s->scale_inv = 1.0f;
    *out = s;
    return AMP_OK;
}

void amp_fp8_delayed_free(amp_fp8_delayed *state) {
    if (!state) return;
    amp_free(state->history);
    amp_free(state);
}

int amp_fp8_delayed_record(amp_fp8_delayed *state, float amax) {
    if (!state) return AMP_ERR_NULL_POINTER;
    if (amax < 0.0f) return AMP_ERR_INVALID_ARGUMENT;
    if (amax > state->history[0]) state->history[0] = amax; /* fmaxf: a NaN is ignored */
    return AMP_OK;
}

int amp_fp8_delayed_update(amp_fp8_delayed *state) {
    if (!state) return AMP_ERR_NULL_POINTER;
    float *h = state->history;
    const size_t len = (size_t)state->config.history_len;
    float amax = h[0];
    if (state->config.algo == AMP_FP8_AMAX_MAX)
        for (size_t i = 1; i < len; i++) amax = fmaxf(amax, h[i]);
    state->scale = amp_fp8_scale_from_amax(amax, state->scale, state->dtype, state->config.margin);
    state->scale_inv = 1.0f / state->scale;
    const float newest = h[0];
    memmove(h, h + 1, (len - 1) * sizeof *h);
    h[len - 1] = newest;
    h[0] = 0.0f;
    state->calibrated = true;
    return AMP_OK;
}

float amp_fp8_delayed_scale(const amp_fp8_delayed *state) { return state ? state->scale : NAN; }
float amp_fp8_delayed_scale_inv(const amp_fp8_delayed *state) { return state ? state->scale_inv : NAN; }
amp_dtype amp_fp8_delayed_dtype(const amp_fp8_delayed *state) { return state ? state->dtype : AMP_DTYPE_COUNT; }

int amp_fp8_delayed_history(const amp_fp8_delayed *state, const float **history, size_t *len) {
    if (!state || !history || !len) return AMP_ERR_NULL_POINTER;
    *history = state->history;
    *len = (size_t)state->config.history_len;
    return AMP_OK;
}

int amp_fp8_delayed_load(amp_fp8_delayed *state, const float *history, size_t len, float scale) {
    if (!state || !history) return AMP_ERR_NULL_POINTER;
    if (len != (size_t)state->config.history_len || !(isfinite(scale) && scale > 0.0f)) /* a scale of 0 has no inverse */
        return AMP_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < len; i++)
        if (!(history[i] >= 0.0f)) return AMP_ERR_INVALID_ARGUMENT;
    memcpy(state->history, history, len * sizeof *history);
    state->scale = scale;
    state->scale_inv = 1.0f / scale;
    state->calibrated = true;
    return AMP_OK;
}

bool amp_fp8_delayed_needs_init(const amp_fp8_delayed *state) {
    return state && state->config.amax_init && !state->calibrated;
}

float amp_fp8_delayed_init_scale(const amp_fp8_delayed *state, float amax) {
    return amp_fp8_scale_from_amax(amax, state->scale, state->dtype, state->config.margin);
}

int amp_fp8_delayed_init(amp_fp8_delayed *state, float amax) {
    if (!state) return AMP_ERR_NULL_POINTER;
    if (!amp_fp8_delayed_needs_init(state)) return AMP_ERR_INVALID_ARGUMENT;
    state->scale = amp_fp8_delayed_init_scale(state, amax);
    state->scale_inv = 1.0f / state->scale;
    state->calibrated = true;
    return AMP_OK;
}
