/* Internal: the memory a training run needs, estimated before anything large is allocated, and the
 * memory the machine has (amp_train_config.skip_memory_check says what amp_train_run does with them). */
#ifndef AMP_TRAIN_MEMORY_CHECK_H
#define AMP_TRAIN_MEMORY_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "amp.h"
#include "train_internal.h"

/* What one rank holds at its peak, in bytes. */
typedef struct amp_train_memory_need {
    int64_t params;      /* the parameters' storage, in their dtype */
    int64_t grads;       /* their gradients: as much again */
    int64_t optimizer;   /* fp32 masters of 16-bit parameters, momentum or Adam's two moments; divided
                            by the ranks under zero_stage 1 */
    int64_t casts;       /* autocast's 16-bit copies of fp32 weights, made each step (in the arena) */
    int64_t cast_copies; /* or kept beside the parameters and written by the optimizer
                            (amp_train_cast_copies_on): 2 bytes per parameter, and then no casts */
    int64_t activations; /* the rest of the arena's peak: what forward keeps for backward (with
                            recompute, each block's input and one block at a time) and backward's
                            gradients */
    int64_t scratch;     /* the ops' temporary fp32 staging */
    int64_t first_step;  /* what the first step leaves resident beyond the arena's and the scratch's peaks
                            (the blocks they grew through), which the process's peak RSS holds */
    int64_t total;       /* the sum */
} amp_train_memory_need;

/* The estimate for model m (its sizes final: vocabulary and context from the data, an llm.c file's
 * shapes) with num_params parameters, trained in preset prec with the optimizer `optim` on `batch`
 * samples per rank and `threads` threads (attention's scratch is per thread), over `ranks` ranks with
 * ZeRO stage zero_stage. Models outside the table: zeros. */
void amp_train_memory_estimate(const amp_model_config *m, int64_t num_params, const amp_precision_info *prec,
                               const amp_optim_config *optim, int64_t batch, int threads, int ranks, int zero_stage,
                               amp_train_memory_need *out);

/* Whether a run in preset prec keeps its parameters' 16-bit cast copies (amp_ctx_keep_cast_copies):
 * under 16-bit autocast with fp32 parameters, outside the fp8 presets (whose linears quantize the
 * masters themselves) and ZeRO (whose ranks each update a slice, then gather the parameters). */
bool amp_train_cast_copies_on(const amp_precision_info *prec, int zero_stage);

/* The bytes this process may still allocate: AMP_MEMORY_AVAILABLE when set (bytes, or with a K, M,
 * G or T suffix, powers of 1024), else the smaller of /proc/meminfo's MemAvailable and the cgroup's
 * memory.max less memory.current (cgroup v2). -1: unknown (no such files; a malformed variable). */
int64_t amp_train_memory_available(void);

/* amp_train_run's check, after the model is declared and before its parameters are allocated:
 * AMP_OK, or AMP_ERR_OUT_OF_MEMORY with the one-line message in r's err. Does nothing with
 * cfg.skip_memory_check, AMP_MEMORY_CHECK=0, or where the available memory is unknown. */
int amp_train_memory_check(amp_train_run_state *r);

#endif
