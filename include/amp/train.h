/* A training run: one model, one dataset, one precision preset, start to finish. `amp train` is this
 * call plus argument parsing and printing; `amp compare` calls it once per configuration.
 *
 *     amp_train_config cfg = amp_train_default_config(AMP_MODEL_MLP);
 *     cfg.precision = AMP_PRECISION_AMP_FP16;  cfg.steps = 500;
 *     amp_train_result r;  char err[256];
 *     if (amp_train_run(&cfg, NULL, &r, err, sizeof err) != AMP_OK) fprintf(stderr, "%s\n", err);
 *
 * What a run does, per optimizer step (the loop of examples/train_loop.c):
 *   for each of `accum` micro-batches of `batch` samples:
 *       reset the context; inputs in the preset's param_dtype (fp32 for the amp-* presets);
 *       autocast region (when the preset's autocast_dtype is not fp32) around forward + cross-entropy;
 *       backward with seed scale / accum (the loss of the effective batch is the mean of the micro-batch
 *       losses; one scaler iteration per optimizer step);
 *   then: scaler enabled: amp_scaler_step_fused (unscale in fp32, inf/NaN check, clip, update) and
 *   amp_scaler_update (dynamic) or amp_scaler_update_to(static scale) (static);
 *   scaler off: amp_optimizer_clip_grad_norm (when clipping) and amp_optimizer_step, as PyTorch without
 *   a GradScaler: nothing is checked, a non-finite gradient reaches the weights.
 * Parameters are stored in the preset's param_dtype. The optimizer keeps fp32 master weights of f16/bf16
 * parameters by itself; for the pure presets (master_weights false) the masters are reloaded from the
 * low-precision parameters before every update, so the update is computed in fp32 and rounded once
 * into the parameter, and an update below half a unit in the last place is lost (Apex O3). Optimizer
 * moments stay fp32 in every preset.
 *
 * Data. Image models read DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (amp/data.h); inputs
 * are normalised with the training set's own pixel mean and standard deviation, so any dataset in
 * that layout works; classes and image size come from the files. An epoch is floor(train images /
 * batch) micro-batches in the order amp_shuffle_indices(seed, epoch) gives (the last partial batch
 * is dropped). Text models read a file or directory (amp_text_corpus_load, last 10% held out); a
 * micro-batch is `batch` windows of context + 1 tokens at random starts; an epoch is
 * floor(training tokens / (batch * context)) micro-batches (at least 1).
 *
 * Evaluation ("test" numbers): the whole t10k set for image models; eval_batches batches of `batch`
 * windows at evenly spaced starts of the held-out text, the same every time, for text models. Run
 * under the training precision (same input dtype and autocast), with grad mode off, after every epoch
 * and at the end.
 *
 * Determinism: generators are seeded from `seed` one per purpose (model init, data order, text
 * starts); with the same configuration and thread count, two runs give the same bits.
 *
 * The library never prints: progress goes to the callbacks. Not thread-safe: the thread count and the
 * autocast state are per process / per thread. */
#ifndef AMP_TRAIN_H
#define AMP_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nn.h"
#include "optim.h"
#include "precision.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum amp_scaler_mode {
    AMP_SCALER_DEFAULT = 0, /* what the preset says: dynamic for amp-fp16 and fp16-master, else off */
    AMP_SCALER_DYNAMIC,     /* PyTorch's GradScaler with its defaults (init 2^16, x2 every 2000, x0.5) */
    AMP_SCALER_OFF,         /* no loss scaling, no inf/NaN check */
    AMP_SCALER_STATIC       /* a fixed scale (static_scale): steps with inf/NaN gradients are skipped,
                               the scale never changes (Apex's static loss_scale) */
} amp_scaler_mode;

/* "default", "dynamic", "off", "static". */
const char *amp_scaler_mode_name(amp_scaler_mode mode);

/* Defaults per model kind: */
#define AMP_TRAIN_IMAGE_LR 0.05f  /* mlp, cnn: SGD, momentum 0.9, batch 128 */
#define AMP_TRAIN_TEXT_LR 3e-3f   /* lstm, gpt: AdamW (weight decay 0.01), batch 32 */
#define AMP_TRAIN_EVAL_BATCHES 32 /* text models: held-out batches per evaluation */

typedef struct amp_train_config {
    amp_model_config model;      /* kind and sizes; data-dependent fields (classes, image size, vocab)
                                    are set from the data; model.param_dtype from the preset */
    const char *data;            /* IDX directory or text file/directory; NULL: AMP_IMAGE_DATASET_DEFAULT_DIR
                                    or AMP_TEXT_CORPUS_DEFAULT_PATH */
    amp_precision precision;     /* AMP_PRECISION_FP32 */
    amp_scaler_mode scaler;      /* AMP_SCALER_DEFAULT */
    float static_scale;          /* AMP_SCALER_STATIC's scale (> 0, finite) */
    amp_optim_config optim;      /* kind, lr, momentum, weight decay, ... (see the defaults above) */
    int64_t batch;               /* samples (images or sequences) per micro-batch */
    int64_t epochs;              /* used when steps == 0 */
    int64_t steps;               /* optimizer steps; > 0 overrides epochs */
    uint64_t seed;               /* 0 */
    int threads;                 /* <= 0: amp's default (AMP_NUM_THREADS or the online cores) */
    int64_t accum;               /* micro-batches per optimizer step (1) */
    float clip;                  /* > 0: clip the global gradient norm to this (after unscaling) */
    bool eval;                   /* evaluate each epoch and at the end (true) */
    int64_t eval_batches;        /* text models: AMP_TRAIN_EVAL_BATCHES */
    bool detect_anomaly;         /* stop at the first non-finite op output (forward) or parameter
                                    gradient (backward; only with the scaler off, since a scaler
                                    handles overflowing scaled gradients by skipping the step) */
} amp_train_config;

/* The defaults for `kind` (see the fields). */
amp_train_config amp_train_default_config(amp_model_kind kind);

typedef struct amp_train_progress {
    bool is_eval;             /* false: after an optimizer step; true: after an evaluation */
    int64_t epoch;            /* 1-based epoch the step belongs to */
    int64_t epochs;           /* epochs the run will touch */
    int64_t step, total_steps; /* optimizer steps done (1-based) of all */
    double loss;              /* smoothed training loss (exponential moving average, weight 0.1) */
    double last_loss;         /* this step's loss (mean over its micro-batches) */
    float scale;              /* the loss scale now (1 when off) */
    int64_t skipped;          /* skipped steps so far */
    double samples_per_sec;   /* training samples per second of training time so far */
    double eta_seconds;       /* training time left at that rate (evaluation not counted) */
    /* is_eval only: */
    double test_loss, test_accuracy, bits_per_char; /* accuracy: image models; bits/char: text; else NaN */
} amp_train_progress;

typedef struct amp_train_callbacks {
    void (*progress)(const amp_train_progress *p, void *user); /* may be NULL */
    void *user;
} amp_train_callbacks;

typedef struct amp_train_result {
    amp_model_kind model;
    amp_precision precision;
    amp_scaler_mode scaler;     /* resolved: never AMP_SCALER_DEFAULT */
    float static_scale;         /* AMP_SCALER_STATIC's scale */
    int64_t steps, epochs;      /* optimizer steps taken (skipped ones included), epochs touched */
    int64_t skipped_steps;
    float final_scale;          /* 1 when off */
    double train_loss;          /* mean loss of the steps of the last (possibly partial) epoch */
    double test_loss;           /* last evaluation's mean loss; NaN without evaluation */
    double test_accuracy;       /* image models: fraction correct in [0, 1]; NaN for text */
    double bits_per_char;       /* text models: test_loss / ln 2; NaN for image models */
    double samples_per_sec;     /* training samples / training time (no evaluation, no start-up) */
    double wall_seconds;        /* the whole call */
    int64_t num_params;
    int64_t batch, accum;
} amp_train_result;

/* Runs the training described by cfg. Returns AMP_OK; AMP_ERR_INVALID_ARGUMENT (a bad setting, or a
 * batch larger than the data); the data loaders' AMP_ERR_IO / AMP_ERR_FORMAT (message from the
 * loader, naming the file); AMP_ERR_STATE (detect_anomaly found a non-finite value: the message names
 * the op, its parameters, or the gradient's parameter); or another error. err gets a one-line
 * message (err may be NULL). result is filled on success (and as far as it got on a failure after
 * start-up). */
int amp_train_run(const amp_train_config *cfg, const amp_train_callbacks *cb, amp_train_result *result, char *err,
                  size_t err_size);

#ifdef __cplusplus
}
#endif
#endif /* AMP_TRAIN_H */
