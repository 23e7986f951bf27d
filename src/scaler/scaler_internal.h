/* Internal: the scaler object, shared by the files of src/scaler.
 *
 * PyTorch keeps `_per_optimizer_states` as a dict keyed by id(optimizer) that every update() replaces
 * by an empty one. amp keeps a small fixed table keyed by the optimizer pointer: an optimizer gets a
 * slot the first time unscale or step sees it in an iteration, and update empties the table. */
#ifndef AMP_SCALER_INTERNAL_H
#define AMP_SCALER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/scaler.h"
#include "amp/status.h"

enum {
    SCALER_MAX_OPTIMIZERS = 32, /* distinct optimizers per iteration */
    SCALER_ERROR_SIZE = 256
};

typedef struct scaler_opt_state {
    const amp_optimizer *opt;
    amp_scaler_stage stage;
    bool has_checks;   /* PyTorch's found_inf_per_device is non-empty: some gradient was checked */
    float found_inf;   /* a scaled gradient was inf/NaN (PyTorch's found_inf) */
    float found_after; /* a finite one became inf/NaN when unscaled (safe mode or a fused skip) */
    bool after_counts; /* found_after skips the step and counts for the update */
} scaler_opt_state;

struct amp_scaler {
    amp_scaler_config config; /* growth_factor, backoff_factor and growth_interval live here too */
    bool enabled;
    bool initialized;          /* PyTorch's _scale is not None: scale() or backward was called */
    float scale;
    int32_t growth_tracker;
    int32_t hysteresis_tracker;
    amp_scaler_stats stats;    /* its hysteresis_tracker field is filled in by the getter */
    int n_states;
    scaler_opt_state states[SCALER_MAX_OPTIMIZERS];
    int status;
    char error[SCALER_ERROR_SIZE];
};

/* The hysteresis tracker's starting value: H when hysteresis is on, else 1. */
static inline int32_t scaler_hysteresis_full(const amp_scaler_config *c) {
    return c->hysteresis >= 2 ? c->hysteresis : 1;
}

#endif
