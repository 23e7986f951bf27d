/* Internal: the state of one amp_train_run, shared by train.c and anomaly.c. */
#ifndef AMP_TRAIN_INTERNAL_H
#define AMP_TRAIN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp.h"
#include "amp/train.h"

/* The counting pass of the gradient statistics (grad_stats.c): amp_train_tally_add counts n fp32
 * values x (a gradient times the loss scale S) with inv_scale = 1/S (exact or rounded, in double):
 * each nonzero finite x into the histogram bin of floor(log2 g), g = |x| * inv_scale in double, with
 * amp_grad_stats' binning; zeros and non-finite values into slots of their own; and the fp16 counts.
 * The slots are kept in AMP_TRAIN_TALLY_WAYS interleaved copies (value i goes to copy i % WAYS) so
 * that runs of one bin do not wait on each other's increments; amp_train_tally_slot sums them. The
 * counts add up over calls; zero the struct to start. */
enum {
    AMP_TRAIN_TALLY_ZERO = AMP_GRAD_HIST_BINS, /* the slot of x == 0 */
    AMP_TRAIN_TALLY_NONFINITE,                 /* the slot of inf and NaN */
    AMP_TRAIN_TALLY_SLOTS,
    AMP_TRAIN_TALLY_WAYS = 4
};
typedef struct amp_train_tally {
    int64_t slot[AMP_TRAIN_TALLY_WAYS][AMP_TRAIN_TALLY_SLOTS];
    int64_t under_unscaled; /* nonzero finite, g <= 2^-25 */
    int64_t under_scaled;   /* nonzero, |x| <= 2^-25 */
    int64_t over_scaled;    /* |x| >= 65520, or x not finite */
} amp_train_tally;
void amp_train_tally_add(amp_train_tally *t, const float *x, int64_t n, double inv_scale);
int64_t amp_train_tally_slot(const amp_train_tally *t, int slot);

typedef struct amp_train_run_state {
    amp_train_config cfg; /* resolved: model sizes from the data, scaler mode never DEFAULT */
    const amp_precision_info *prec; /* the preset's, or prec_override when cfg.param_dtype_override is set */
    amp_precision_info prec_override; /* the preset with the overridden parameter dtype and masters */
    bool text;
    char *err;
    size_t err_size;

    amp_image_dataset train_set, test_set;
    float mean, std; /* image normalisation, from the training pixels */
    amp_text_corpus corpus;
    int64_t micro_per_epoch; /* micro-batches per pass over the training data */
    uint64_t data_seed, text_seed;
    bool token_corpus;       /* token shards or BPE text (amp/data.h): bits/char from the tokens' bytes */
    int64_t eval_windows;    /* sequential order: held-out batches per pass */
    amp_token_cache_status token_cache;
    char data_note[1280];    /* the first progress callback's data_note ("" for none) */

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
    int64_t total_steps;     /* the run's optimizer steps (the schedule's length) */

    /* Loss bookkeeping (saved in checkpoints so a resumed run reports the same numbers). */
    double loss_ema;    /* smoothed loss, NaN before the first step */
    double window_sum;  /* this epoch's step losses so far */
    int64_t window_n;

    /* Gradient statistics: sums of the sampled fractions (amp_grad_stats' fields of the same names),
     * the number of samples, the latest. */
    struct {
        double underflow_fp16_unscaled, underflow_fp16_scaled, overflow_fp16_scaled;
    } gs_sum;
    int64_t gs_samples;
    amp_grad_stats gs_last;
    float *gs_buf; /* conversion buffer for F16/BF16 gradients */
    /* Stalled updates (pure presets, sampled steps): the parameters before the step, and the sum and
     * count of the sampled fractions. */
    unsigned char *us_before;
    double us_sum;
    int64_t us_samples;
    /* Activation-gradient statistics of the sampled step being computed (the hook's target), and the
       sum of their fractions over the samples. */
    amp_grad_stats act;
    amp_train_tally act_tally; /* the hook's counts, folded into act's bins when it is removed */
    float act_scale;
    bool act_oom;
    double act_sum;

    /* Data parallel (distributed.c); rank 0 of 1 without a communicator. */
    int rank, ranks;
    int64_t local_batch;            /* samples of each global micro-batch this rank computes */
    struct amp_train_bucket *buckets; /* gradient buckets, in launch order (last parameters first) */
    int n_buckets, next_bucket;     /* buckets; the next one to launch */
    int *bucket_of;                 /* [params]: the bucket holding each parameter */
    int *bucket_pending;            /* [buckets]: parameters not ready yet in this backward */
    int dist_status;                /* the first failure inside the grad-ready hook */
    struct amp_wire_fp8 *wire8;     /* [buckets] with grad_wire AMP_F8E5M2: each bucket's e5m2 sum
                                       (zero_stage 1, which uses no buckets: [0] for its reduce-scatter) */
    size_t *wire8_seg;              /* [params]: each bucket's segment ends (its parameters), in order */
    size_t *wire8_flat;             /* [params]: the same over the whole gradient buffer (zero_stage 1) */
    int64_t wire_bytes;             /* bytes this rank sent for the gradient sums (amp_wire_bytes) */
    int64_t injected;               /* steps with an injected inf/NaN */
    struct amp_train_zero *zero;    /* zero_stage 1 (zero.c); NULL otherwise */

    /* FP8 (fp8.c): the fp8 layers' states and layers, and (DELAYED) per layer and role the buffers
     * that carry the amax history and the scale in checkpoints. */
    amp_fp8_linear **fp8;
    amp_linear_layer **fp8_layers;
    amp_tensor **fp8_buf; /* [(layer * roles + role) * 2 + {0: history, 1: scale}] */
    size_t n_fp8;
    char fp8_word[96]; /* the precision as checkpoints record it where not the preset's name (set up by
                          amp_train_fp8_setup; amp_train_fp8_precision_word) */
    amp_train_fp8_layer *fp8_stats; /* [n_fp8]: the progress callback's view, refreshed every step */
} amp_train_run_state;

/* splitmix64's finaliser: a counter-based generator (the value for counter k depends only on k). */
static inline uint64_t amp_train_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

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

/* llm.c's model files (llmc_run.c): cfg.init_from's sizes into cfg.model (after the data set the
 * vocabulary; before the model is made), its weights into the made model (before the optimizer copies
 * them), and cfg.save_llmc and cfg.save_hf written from the trained one. Each is AMP_OK when the path is NULL. */
int amp_train_llmc_configure(amp_train_run_state *r);
int amp_train_llmc_load(amp_train_run_state *r);
int amp_train_llmc_save(amp_train_run_state *r);

/* Generation (sample.c). model_meta: the model's sizes as "vocab=V,context=T,hidden=C,layers=L,
 * heads=H,embed=E,vocab_padded=P,positions=N" into sizes; for text models whose tokens spell bytes,
 * the corpus's vocabulary as amp/vocab.h's metadata value into *vocab (amp_vocab_meta_free; else
 * NULL) and, for BPE, the pattern's name into *pattern (else NULL). AMP_OK or amp_vocab_to_meta's
 * status. sample: cfg.sample_tokens greedy tokens of the gpt or gpt2 after the first held-out token,
 * spelled into *text (*bytes bytes, amp_free; NULL and 0 when there is nothing to sample); resets the
 * context. AMP_OK or an error reported in r->err. */
int amp_train_model_meta(const amp_train_run_state *r, char *sizes, size_t sizes_len, char **vocab,
                         const char **pattern);
int amp_train_sample(amp_train_run_state *r, char **text, size_t *bytes);

/* Gradient statistics (grad_stats.c): true when step `done` (1-based) is sampled; samples the
 * gradients now in the parameters (carrying loss scale `scale`) into r->gs_last and the sums. */
bool amp_train_grad_stats_due(const amp_train_run_state *r, int64_t done);
int amp_train_grad_stats_sample(amp_train_run_state *r, int64_t done, float scale);

/* Data parallel (distributed.c). All are no-ops (AMP_OK) without a communicator.
 * setup: checks batch % ranks, sets rank, ranks, local_batch (batch without one) and the buckets.
 * arm: before the backward of a step's last micro-batch: the grad-ready hook starts buckets.
 * finish: after it: starts what backward did not, waits for every sum, removes the hook.
 * sum: in-place SUM of n doubles over ranks. any_found: MAX of a flag (NaN counts as found).
 * check_replicas: AMP_ERR_STATE when the parameters or masters differ across ranks. */
int amp_train_dist_setup(amp_train_run_state *r);
void amp_train_dist_arm(amp_train_run_state *r);
int amp_train_dist_finish(amp_train_run_state *r);
int amp_train_dist_sum(amp_train_run_state *r, double *v, size_t n);
int amp_train_dist_any_found(amp_train_run_state *r, float found, bool *any);
int amp_train_dist_check_replicas(amp_train_run_state *r);
void amp_train_dist_free(amp_train_run_state *r);

/* ZeRO stage 1 (zero.c; amp/train.h's zero_stage). All are no-ops (AMP_OK) when r->zero is NULL,
 * except setup, which makes it when cfg.zero_stage is 1.
 * setup: after the optimizer is made (and a resume loaded into it): replaces r->opt by an optimizer
 *   over this rank's slice only (a context of its own holding the slice's parameters and gradients)
 *   and frees the whole one.
 * reduce: after the last backward: the gradient sums of this rank's slice (whole: of every slice,
 *   for the gradient statistics).
 * update: the step (scaler, clipping, optimizer) on the slice, then the parameters all-gathered.
 * checkpoint: collective: the state gathered to rank 0, which writes cfg.checkpoint.
 * free: releases it (after r->opt is freed). */
int amp_train_zero_setup(amp_train_run_state *r);
int amp_train_zero_reduce(amp_train_run_state *r, bool whole);
int amp_train_zero_update(amp_train_run_state *r);
int amp_train_zero_checkpoint(amp_train_run_state *r);
void amp_train_zero_free(amp_train_run_state *r);

/* Fault injection (inject.c): with probability cfg.inject_nonfinite, writes +inf, -inf or NaN into
 * one gradient value for step `done` (1-based); returns true when it did. */
bool amp_train_inject_nonfinite(amp_train_run_state *r, int64_t done);

/* Activation gradients (grad_stats.c), on sampled steps: arm before the backward of the step's last
 * micro-batch (scale: the loss scale it carries) sets the backward-grad hook and clears r->act; done
 * removes the hook. amp_train_grad_stats_sample then copies r->act's counts into the sample. */
void amp_train_act_stats_arm(amp_train_run_state *r, float scale);
int amp_train_act_stats_done(amp_train_run_state *r);

/* Stalled updates (grad_stats.c), pure presets on sampled steps: begin snapshots the parameters
 * before the optimizer step; end counts, among the values whose fp32 update was nonzero, those the
 * rounded low-precision parameter did not keep (it did not move), into us_sum / us_samples.
 * Needs r->gs_buf (the gradient sample of the same step allocates it). */
int amp_train_update_stats_begin(amp_train_run_state *r);
void amp_train_update_stats_end(amp_train_run_state *r);

/* FP8 (fp8.c), all no-ops for the other presets. setup: after the model is declared, before the
 * parameters are allocated: states for the chosen layers, their checkpoint buffers. pass: after each
 * micro-batch's forward and after its backward (delayed scaling's updates, TE's points). step: after
 * the optimizer's step. recording: off around evaluation. to_buffers: before a checkpoint is written;
 * from_buffers: after one is loaded. report: the per-layer statistics into the result. */
int amp_train_fp8_setup(amp_train_run_state *r);
/* The precision as checkpoints record it: the preset's name, "mxfp8 with FLOOR scales", or
 * fp8-delayed with its non-default settings ("fp8-delayed (history 16, most recent, margin 2)"). */
const char *amp_train_fp8_precision_word(const amp_train_run_state *r);
void amp_train_fp8_free(amp_train_run_state *r);
int amp_train_fp8_pass(amp_train_run_state *r, amp_fp8_pass pass);
int amp_train_fp8_step(amp_train_run_state *r);
void amp_train_fp8_recording(amp_train_run_state *r, bool on);
void amp_train_fp8_to_buffers(amp_train_run_state *r);
int amp_train_fp8_from_buffers(amp_train_run_state *r);
void amp_train_fp8_report(const amp_train_run_state *r, amp_train_result *result);
/* The layers' statistics into r->fp8_stats (for the progress callback); its count. */
int amp_train_fp8_progress(amp_train_run_state *r);

/* --detect-anomaly: AMP_OK, or AMP_ERR_STATE with a message naming the first op on the tape (in
 * creation order) whose output holds inf/NaN, or the parameter whose gradient does. */
int amp_train_check_forward(amp_train_run_state *r);
int amp_train_check_backward(amp_train_run_state *r);

#endif
