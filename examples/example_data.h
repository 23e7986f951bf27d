/* Shared by the examples: a small synthetic classification task (no dataset to download), so each
 * example trains a real model for a few hundred steps in well under a second. Points in 16-D are
 * labelled by which of 4 random hyperplanes scores highest: learnable by a 2-layer MLP. */
#ifndef AMP_EXAMPLE_DATA_H
#define AMP_EXAMPLE_DATA_H

#include <stdint.h>

enum { EX_IN = 16, EX_HIDDEN = 64, EX_CLASSES = 4, EX_BATCH = 32 };

static inline float ex_uniform(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)(*s >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* Fills x [EX_BATCH, EX_IN] and labels [EX_BATCH] for batch number `step` (deterministic). */
static inline void ex_batch(uint64_t step, float *x, int32_t *labels) {
    uint64_t teacher = 0x5DEECE66Dull, s = 0x9E3779B97F4A7C15ull ^ (step * 0xD1B54A32D192ED03ull);
    float w[EX_CLASSES][EX_IN];
    for (int c = 0; c < EX_CLASSES; c++)
        for (int i = 0; i < EX_IN; i++) w[c][i] = ex_uniform(&teacher);
    for (int b = 0; b < EX_BATCH; b++) {
        int best = 0;
        float best_score = -1e30f;
        for (int i = 0; i < EX_IN; i++) x[b * EX_IN + i] = ex_uniform(&s);
        for (int c = 0; c < EX_CLASSES; c++) {
            float score = 0;
            for (int i = 0; i < EX_IN; i++) score += w[c][i] * x[b * EX_IN + i];
            if (score > best_score) best_score = score, best = c;
        }
        labels[b] = best;
    }
}

/* He-style deterministic initialization of a [rows, cols] fp32 weight. */
static inline void ex_init(float *w, int64_t n, int64_t fan_in, uint64_t seed) {
    float bound = 1.0f;
    for (int64_t k = 1; k * k < fan_in; k++) bound = 1.0f / (float)(k + 1);
    for (int64_t i = 0; i < n; i++) w[i] = ex_uniform(&seed) * bound * 1.7f;
}

#endif
