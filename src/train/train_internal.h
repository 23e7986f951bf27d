/* Internal: the state of one amp_train_run, shared by train.c and anomaly.c. */
#ifndef AMP_TRAIN_INTERNAL_H
#define AMP_TRAIN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp.h"
#include "amp/train.h"

typedef struct amp_train_run_state {
    amp_train_config cfg; /* resolved: model sizes from the data, scaler mode never DEFAULT */
    const amp_precision_info *prec;
    bool text;
    char *err;
    size_t err_size;

    amp_image_dataset train_set, test_set;
    float mean, std; /* image normalisation, from the training pixels */
    amp_text_corpus corpus;
    int64_t micro_per_epoch; /* micro-batches per pass over the training data */
    uint64_t data_seed, text_seed;

    amp_ctx *ctx;
    amp_model *model;
    amp_optimizer *opt;
    amp_scaler *scaler;

    float *x;            /* [batch, rows*cols] images */
    int32_t *tokens;     /* [batch, context] */
    int32_t *y;          /* [batch] labels or [batch, context] next tokens */
    int64_t *starts;     /* [batch] text windows */
    int64_t *order;      /* [train count]: this epoch's permutation */
    int64_t order_epoch; /* which epoch `order` holds (-1: none) */
    int64_t *order_eval; /* [batch] test indices */
    float *logits;       /* [batch, classes] evaluation logits */

    int64_t step;    /* optimizer steps done */
    int64_t skipped; /* of which skipped by the scaler */
    int64_t start_step;      /* 0, or the step a resumed run started from */
    int64_t steps_per_epoch; /* optimizer steps per epoch (>= 1) */

    /* Loss bookkeeping (saved in checkpoints so a resumed run reports the same numbers). */
    double loss_ema;    /* smoothed loss, NaN before the first step */
    double window_sum;  /* this epoch's step losses so far */
    int64_t window_n;

    /* Gradient statistics: sums of the sampled fractions, the number of samples, the latest. */
    double gs_sum[3];
    int64_t gs_samples;
    amp_grad_stats gs_last;
    float *gs_buf; /* conversion buffer for F16/BF16 gradients */
} amp_train_run_state;

/* Writes the message into the run's err buffer and returns status. */
int amp_train_fail(amp_train_run_state *r, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Checkpoints (checkpoint.c): writes cfg.checkpoint for the state after r->step steps; loads
 * cfg.resume into a set-up run (model, optimizer, scaler, r->step and the bookkeeping above). */
int amp_train_save_checkpoint(amp_train_run_state *r);
int amp_train_resume(amp_train_run_state *r);

/* Gradient statistics (grad_stats.c): true when step `done` (1-based) is sampled; samples the
 * gradients now in the parameters (carrying loss scale `scale`) into r->gs_last and the sums. */
bool amp_train_grad_stats_due(const amp_train_run_state *r, int64_t done);
int amp_train_grad_stats_sample(amp_train_run_state *r, int64_t done, float scale);

/* --detect-anomaly: AMP_OK, or AMP_ERR_STATE with a message naming the first op on the tape (in
 * creation order) whose output holds inf/NaN, or the parameter whose gradient does. */
int amp_train_check_forward(amp_train_run_state *r);
int amp_train_check_backward(amp_train_run_state *r);

#endif
