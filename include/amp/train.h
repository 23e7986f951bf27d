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
 * Parameters are stored in the preset's param_dtype (or param_dtype_override's). The optimizer keeps fp32 master weights of f16/bf16
 * parameters by itself; for the pure presets (master_weights false) the masters are reloaded from the
 * low-precision parameters before every update, so the update is computed in fp32 and rounded once
 * into the parameter, and an update below half a unit in the last place is lost (Apex O3). Optimizer
 * moments stay fp32 in every preset.
 *
 * Data. Image models read DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (amp/data.h); inputs
 * are normalised with the training set's own pixel mean and standard deviation, so any dataset in
 * that layout works; classes and image size come from the files. An epoch is floor(train images /
 * batch) micro-batches in the order amp_shuffle_indices(seed, epoch) gives (the last partial batch
 * is dropped). Text models read a file or directory (amp_text_corpus_load, last 10% held out), or
 * token shards, or text through a BPE (see the token data fields); a micro-batch is `batch` windows
 * of context + 1 tokens at random starts (or in order: data_order); an epoch is
 * floor(training tokens / (batch * context)) micro-batches (at least 1).
 *
 * Evaluation ("test" numbers): the whole t10k set for image models; eval_batches batches of `batch`
 * windows at evenly spaced starts of the held-out text, the same every time, for text models. Run
 * under the training precision (same input dtype and autocast), with grad mode off, after every epoch
 * and at the end.
 *
 * Determinism: generators are seeded from `seed` one per purpose (model init, data order, text
 * starts); with the same configuration, two runs give the same bits. (The GEMM and reduction kernels
 * partition work so that every output element is summed in the same order whatever the thread count,
 * so the thread count does not change the bits either.)
 *
 * Checkpoints (amp/checkpoint.h layout). With `checkpoint` set, the run writes it atomically
 * (amp_checkpoint_save) at the end, and every `checkpoint_every` steps when that is > 0, after that
 * step's evaluation. Besides the model, optimizer (masters, moments, step count, lr), scaler and the
 * context's random streams, it holds the run's own generator states in the info's u64 slots, in this
 * order: data-order seed, data-order epoch, position (micro-batch) within that epoch, text-window
 * seed, text-window counter (the next window's index); and as user metadata ("train." keys): the model
 * kind, precision, scaler mode, batch, accum, the skipped-step count, the smoothed loss and the current
 * epoch's loss sum and step count (as the bits of the doubles), and the gradient statistics so far
 * (sums of the fractions, sample count, the latest histogram). `resume` loads such a file after
 * set-up and continues from its step: steps/epochs stay the run's total, so the resumed run trains
 * steps (saved step + 1) .. total. A run of 2N steps, and a run of N steps whose checkpoint a second
 * run of 2N steps resumes, end with the same weights, losses, accuracy, scale, skipped steps and
 * gradient statistics, bit for bit (samples_per_sec and wall_seconds count only the resumed part).
 * A checkpoint of another model kind, precision, scaler mode, batch, accum, shape or optimizer is refused with
 * AMP_ERR_INVALID_ARGUMENT and a one-line message, before anything is trained.
 *
 * Gradient statistics. On sampled steps the run reads every parameter gradient after backward (the
 * gradient of the mean loss of the effective batch, still multiplied by the loss scale S in use; S = 1
 * with the scaler off), divides by S in double precision (exact) and bins g = grad / S by
 * floor(log2 |g|) (amp_grad_stats). The fractions are of the nonzero finite values:
 *   underflow_fp16_unscaled  |g| <= 2^-25: would round to zero in fp16 without loss scaling
 *                            (amp_fp16_from_fp32 rounds to nearest even; 2^-25 is half the smallest
 *                            subnormal, 2^-24, and ties go to 0)
 *   underflow_fp16_scaled    |g*S| <= 2^-25: would round to zero in fp16 at the scale in use
 *   overflow_fp16_scaled     |g*S| >= 65520 (rounds to inf in fp16: 65504 + half an ulp), or g*S
 *                            already non-finite
 * Which gradients: with the fp32 and amp-* presets the parameters (hence their gradients) are fp32:
 * the numbers say what fp16 gradients would lose. With fp16-master and fp16-pure the parameter
 * gradients are fp16 themselves, already rounded at scale S: values that underflowed are exact zeros
 * (counted in `zeros`, not in the fractions), so underflow_fp16_scaled is 0 and the other two describe
 * the survivors only; bf16-pure's bf16 gradients have fp32's range, so the fp16 numbers are
 * hypothetical as for fp32. Sampled steps: step 1 and every multiple of grad_stats_every steps; the
 * default (0) samples steps 1, 2, 4, 8, ... (powers of two) up to a quarter epoch and then every
 * quarter epoch (max(1, steps per epoch / 4) steps), a handful per run that does not depend on the
 * run's length, so that a resumed run samples the same steps; < 0: never. Cost: one pass over the
 * gradients per sample.
 *
 * The library never prints: progress goes to the callbacks. Not thread-safe: the thread count and the
 * autocast state are per process / per thread. */
#ifndef AMP_TRAIN_H
#define AMP_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "data.h"
#include "fp8.h"
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

/* The order of a text model's training windows (amp_train_config.data_order). */
typedef enum amp_data_order {
    AMP_DATA_ORDER_RANDOM = 0, /* random starts (the default) */
    AMP_DATA_ORDER_SEQUENTIAL  /* consecutive windows from the start, as llm.c's DataLoader */
} amp_data_order;

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
    amp_lr_kind lr_schedule;     /* AMP_LR_CONSTANT (text models' default), or AMP_LR_COSINE (image
                                    models' default): optim.lr decays to 0 over the run's steps (after
                                    the warmup) by amp_lr_at, evaluated at the step index (skipped steps
                                    advance it, as a torch scheduler stepped every iteration);
                                    AMP_LR_STEP is not offered here */
    int64_t warmup_steps;        /* linear warmup over this many steps (0) */
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
    const char *checkpoint;      /* NULL: none; else written at the end (and see checkpoint_every) */
    int64_t checkpoint_every;    /* > 0: also write `checkpoint` every this many steps (0) */
    const char *resume;          /* NULL: start fresh; else a checkpoint of the same configuration to
                                    continue from (see "Checkpoints" above) */
    int64_t grad_stats_every;    /* gradient statistics: 0 the default schedule, > 0 every this many
                                    steps (and step 1), < 0 never (see "Gradient statistics") */

    /* Data-parallel training (amp/comm.h). NULL: one process. Otherwise every rank runs this call
     * with the same configuration: `batch` stays the global micro-batch, each rank takes its
     * batch / size consecutive samples of it (batch % size == 0), computes the gradient of its
     * share of the mean loss (seed scale / (accum * size)), and after the last micro-batch's
     * backward the gradients are summed across ranks, bucket by bucket as backward completes them
     * (comm->start_grads from the grad-ready hook), so the sum equals the one-process gradient up
     * to the order of the additions. Then each rank unscales and checks; the inf/NaN flag is
     * all-reduced with MAX (NaN counts as found), so every rank skips the same steps and keeps the
     * same scale; the optimizer runs identically everywhere. Losses, accuracy and gradient
     * statistics are of the global batch (evaluation is split across ranks and summed). Only rank
     * 0 writes checkpoints; every rank can resume from one, with any number of ranks. */
    amp_comm *comm;
    amp_dtype grad_wire;          /* the gradients' dtype on the network: AMP_F32 (default), or
                                     AMP_BF16 / AMP_F16 (half the bytes; summed in fp32, rounded
                                     once per direction; see amp_comm.start_grads), or AMP_F8E5M2 (a
                                     quarter: MS-AMP's scheme, one power-of-2 scale per parameter
                                     from the MAX all-reduce of the ranks' amaxes, divided by the
                                     smallest power of 2 >= size so the sum cannot overflow; summed in
                                     fp32, rounded once to e5m2 per direction; a bucket holding an inf
                                     or NaN on any rank is summed in fp32 instead, so the scaler sees
                                     it; docs/distributed.md). Gradients that are not fp32 travel in
                                     their own dtype. With zero_stage 1 the e5m2 bytes of the whole
                                     buffer are reduce-scattered (the same per-parameter scales and
                                     sums: the same bits as zero_stage 0) */
    size_t bucket_bytes;          /* gradient bucket size (0: AMP_TRAIN_BUCKET_BYTES) */
    int64_t check_replicas_every; /* > 0 with comm: every this many steps, compare a checksum of the
                                     parameters and optimizer state across ranks; a difference fails
                                     the run with AMP_ERR_STATE (a debugging aid; costs a pass) */
    /* ZeRO stage 1 (Rajbhandari et al.; docs/distributed.md): 0 (default) every rank keeps the whole
     * optimizer; 1: each rank keeps the optimizer state (moments, momentum, and the fp32 masters of
     * f16/bf16 parameters) of only its slice of the parameters: rank p of N owns the elements
     * [E_p, E_p+1) of the parameters taken one after another in the context's order, E_p =
     * floor(p * total / N) rounded down to a multiple of 16 (64 bytes of fp32), E_N = total (a
     * parameter may be split between ranks). After the last backward the gradients are
     * reduce-scattered (comm->reduce_scatter, one call over the flat gradient buffer, not overlapped
     * with backward), each rank unscales, checks and clips its slice (the inf/NaN flag all-reduced
     * with MAX, the global norm as an all-reduced fp64 sum of squares when clipping), updates it, and
     * the parameters are all-gathered (comm->allgather). Checkpoints gather the state to rank 0 and
     * are ordinary ones (resumable with or without zero, on any number of ranks). Results equal
     * zero_stage 0's up to the order of the gradient additions: bit for bit with 1 or 2 ranks, and
     * with f16/bf16 gradients on any number (summed in fp32 in rank order on both paths). Works
     * without comm too (one rank owns everything). Not under zero: stalled_updates (NaN), and an
     * injected fault counts only where it falls in the injecting rank's slice. Every parameter must
     * have one dtype. Other values: AMP_ERR_INVALID_ARGUMENT. */
    int zero_stage;

    /* Fault injection (tests, drills): before the scaler, with probability inject_nonfinite per
     * step, one gradient value becomes +inf, -inf or NaN (drawn from (seed, step, rank), so runs
     * repeat). inject_rank >= 0 limits it to that rank; -1: every rank draws. */
    double inject_nonfinite;
    int inject_rank;

    /* Text models: 0 (default) for one token per byte; > 0 for a word vocabulary of at most this
     * many words on top of the bytes (amp_text_corpus_load_words). bits_per_char stays per byte of
     * held-out text, so the two compare; test_loss is per token. */
    int text_words;

    /* Text models: token data (amp/data.h, "Token shards and BPE"). When `data` names token shards
     * (a glob, or a file that starts with the shard magic) they are read as they are
     * (amp_text_corpus_load_shards); otherwise, with `tokenizer` set, the text is encoded with that
     * BPE (amp_text_corpus_load_bpe: split by bytes first, cached). bits_per_char stays per byte of
     * held-out text whenever a rank file spells the ids (BPE text; shards with `tokenizer`); shards
     * without one give NaN bits_per_char (test_loss / ln 2 is then the bits per token). */
    const char *val_data;          /* shards only: held-out shards (file or glob); NULL: the last 10%
                                      of data's tokens */
    const char *tokenizer;         /* a tiktoken rank file, or NULL */
    const char *tokenizer_pattern; /* its pre-tokenization pattern: "gpt2" or "cl100k" (NULL: cl100k) */
    int64_t vocab;                 /* shards only: the vocabulary size; 0: the rank file's, else the
                                      one amp's writer stored in the headers, else the largest id + 1
                                      (llm.c's GPT-2 shards need 50257) */
    const char *token_cache;       /* BPE text: the cache directory; NULL: amp_token_cache_default_dir
                                      ($AMP_CACHE_DIR or ~/.cache/amp); "": no cache */
    /* Text models: how training windows are drawn. AMP_DATA_ORDER_RANDOM (default): each window
     * starts at a random position (see "Data" above). AMP_DATA_ORDER_SEQUENTIAL: llm.c's DataLoader
     * without shuffling, on the training tokens as one stream (shards concatenated): micro-batch m
     * is the batch * context + 1 tokens from position (m mod W) * batch * context, window b its
     * tokens from b * context, with W = floor((train tokens - 1) / (batch * context)) micro-batches
     * per epoch (the position advances by batch * context and returns to 0 when the next batch
     * would pass the end). With one shard that is llm.c's order exactly (llm.c keeps a batch inside
     * one shard; here one may span two). Evaluation then reads eval_batches batches the same way
     * from the start of the held-out tokens, as llm.c's validation loader does. */
    amp_data_order data_order;

    /* llm.c's model files (amp/llmc.h), for gpt2. init_from: start from that file's weights instead of
     * amp_model_init's: the file's sizes (layers, heads, width, vocabulary, padded vocabulary, positions)
     * replace model's, the context stays (at most the file's maxT) and the data's ids must fit its
     * vocabulary. save_llmc: at the end (rank 0), write the weights in llm.c's layout, atomically, as
     * version save_llmc_version (3: fp32, what llm.c's CPU trainer reads; 5: bf16), so llm.c continues
     * where amp stopped. NULL: neither. */
    const char *init_from;
    const char *save_llmc;
    int save_llmc_version; /* 0: 3 */
    const char *save_hf;   /* gpt2: at the end (rank 0), the weights in Hugging Face's GPT2LMHeadModel
                              layout (amp_llmc_save_hf), or NULL */

    /* gpt, gpt2: at each evaluation, generate this many tokens greedily (amp/generate.h, the preset's
     * autocast dtype) after the first held-out token and hand their text to the progress callback
     * (sample_text), as llm.c prints a sample at each evaluation; the library prints nothing. 0
     * (default): none. Other models ignore it. */
    int64_t sample_tokens;

    /* The parameters' storage dtype, overriding the preset's: AMP_F32 (default) keeps the preset's;
     * AMP_BF16 with amp-bf16 stores the parameters (and their gradients) in bf16, with fp32 master
     * weights in the optimizer (as fp16-master does for fp16): half the parameter and gradient
     * bytes, and autocast's bf16 weight casts become no-ops. The model is initialised as usual and
     * rounded to bf16 once, the masters start from those values, each step updates the masters in
     * fp32 and rounds them into the parameters. Activations that start at an embedding are bf16
     * (the residual stream too, as in llm.c's bf16 model); norms, softmax and losses still compute in
     * fp32. Any other preset with AMP_BF16, or another dtype, is AMP_ERR_INVALID_ARGUMENT. A
     * checkpoint records the parameters in bf16 and the masters in fp32, so resuming is exact; one
     * of the preset's own dtype does not resume such a run (nor the reverse). save_llmc writes the
     * bf16 parameters (version 5: exactly; 3: widened). */
    amp_dtype param_dtype_override;
    /* FP8 presets (amp/precision.h): false (default) keeps the model's first and last Linear layer in
     * execution order (gpt: h.0.attn.c_attn and lm_head; cnn: both of its Linear layers) in bf16, as
     * Megatron's --first-last-layers-bf16 and torchtitan do; true runs every Linear in fp8. Each fp8
     * layer gets its own recipe state; delayed scaling updates x's and W's scales after each
     * micro-batch's forward and dY's after its backward (amp_fp8_linear_update, TE's points: each
     * from its history, then the roll), and after every optimizer step amp_fp8_linear_step moves the
     * step's statistics. Evaluation uses the
     * current scales without recording. Checkpoints carry delayed scaling's amax histories and scales
     * as buffers named fp8.<layer>.<x|w|dy>.{amax_history,scale} (fixed size: the history's length),
     * so a resumed run continues bit for bit; a checkpoint of another precision is refused. */
    bool fp8_all_layers;
    /* Before allocating the model, amp_train_run estimates the bytes the run needs on this rank
     * (parameters, gradients, optimizer state, autocast's weight copies, the activations kept for
     * backward at this batch and context, the ops' scratch) and compares them with the memory
     * available: /proc/meminfo's MemAvailable, or the cgroup's limit less its usage where that is
     * lower; the environment variable AMP_MEMORY_AVAILABLE (bytes, or with a K, M, G or T suffix,
     * powers of 1024) replaces what is measured. A run that needs more fails at once with
     * AMP_ERR_OUT_OF_MEMORY and a one-line message naming both figures and the settings that reduce
     * the need, having allocated and written nothing. The estimate is within about 15% of the
     * measured arena, scratch and parameter memory for the built-in models; it leaves the process's
     * own baseline (code, data) aside. skip_memory_check (false), or AMP_MEMORY_CHECK=0 in the
     * environment, trains anyway. */
    bool skip_memory_check;
    /* mxfp8: the OCP spec's FLOOR rule for the E8M0 block scales instead of RCEIL (the default;
     * amp_fp8_linear_set_mx_scale). A checkpoint records it with the precision, so resuming under the
     * other rule is refused as another precision is; AMP_ERR_INVALID_ARGUMENT with another preset. */
    bool fp8_mx_floor;
    /* fp8-delayed: TE DelayedScaling's settings (amp_fp8_delayed_config; the format stays HYBRID):
     * the amax history's length (0: TE's 1024; at most AMP_TRAIN_FP8_MAX_HISTORY), the amax taken from
     * it (AMP_FP8_AMAX_MAX, TE's default, or AMP_FP8_AMAX_MOST_RECENT) and the margin (in [-127, 127],
     * TE's default 0: scale = fp8_max * 2^-margin / amax, so a margin of m leaves 2^m of headroom for
     * an amax that grows before the scale follows). A checkpoint records non-default settings with the
     * precision, so resuming under other settings is refused as another precision is (the history's
     * length also fixes its buffers); AMP_ERR_INVALID_ARGUMENT with another preset or out of range. */
    int fp8_history_len;
    amp_fp8_amax_algo fp8_amax_algo;
    int fp8_margin;
    /* fp8-delayed: torchao's amax init (amp_fp8_delayed_config.amax_init): the first pass casts with
     * scales from its tensors' own amaxes (all-reduced with MAX across ranks) instead of TE's 1.
     * Recorded with the precision like the settings above. */
    bool fp8_amax_init;
} amp_train_config;

#define AMP_TRAIN_FP8_MAX_HISTORY 65536
#define AMP_TRAIN_BUCKET_BYTES ((size_t)1 << 20)

/* The defaults for `kind` (see the fields). */
amp_train_config amp_train_default_config(amp_model_kind kind);

/* The fp8 layers a result reports (the rest are counted in fp8_layers only). */
#define AMP_TRAIN_FP8_MAX_LAYERS 64

/* One fp8 layer's cast statistics, per tensor role (amp_fp8_tensor_role: x, w, dy): of the run's last
 * step, and over the whole run (amp_fp8_linear_stats; a resumed run counts from its resume). */
typedef struct amp_train_fp8_layer {
    char name[64]; /* the layer's weight's name without ".weight" */
    amp_fp8_cast_stats last[AMP_FP8_ROLES], total[AMP_FP8_ROLES];
} amp_train_fp8_layer;

/* The gradient histogram: bin k counts nonzero finite values with floor(log2 |g|) ==
 * AMP_GRAD_HIST_MIN_EXP + k, k in [0, AMP_GRAD_HIST_BINS); smaller values go to bin 0, larger to the
 * last bin (neither occurs with fp32 gradients and a scale of at most 2^20). */
#define AMP_GRAD_HIST_MIN_EXP (-150)
#define AMP_GRAD_HIST_MAX_EXP 20 /* exclusive */
#define AMP_GRAD_HIST_BINS (AMP_GRAD_HIST_MAX_EXP - AMP_GRAD_HIST_MIN_EXP)

/* One sample of the gradient statistics (see "Gradient statistics" above). */
typedef struct amp_grad_stats {
    int64_t step;         /* the optimizer step (1-based) whose gradients these are; 0: no sample */
    float scale;          /* the loss scale S the gradients carried (1 with the scaler off) */
    int64_t count;        /* gradient values looked at (all parameters) */
    int64_t zeros;        /* of which exactly zero */
    int64_t nonfinite;    /* of which inf/NaN (an overflowing scaled step) */
    int64_t bins[AMP_GRAD_HIST_BINS]; /* the nonzero finite ones, by floor(log2 |g|) */
    double underflow_fp16_unscaled; /* fractions of the nonzero values (0 when there are none) */
    double underflow_fp16_scaled;
    double overflow_fp16_scaled;
    /* Activation gradients: what flows into each op's output during the backward of the step's last
       micro-batch (amp_ctx_set_backward_grad_hook), by the op that made the output: values looked at,
       exact zeros, and nonzero finite values with |g| / S <= 2^-25 (they would round to zero in fp16
       without loss scaling; as for the parameters, values an unscaled fp16 run already lost are
       zeros, not counted). Autocast's low-precision copies of the weights are left out: their
       gradients are the parameters'. act_underflow_fp16_unscaled: all ops' underflows / all nonzero
       values. */
    int64_t act_count[AMP_OP_COUNT], act_zeros[AMP_OP_COUNT], act_underflow[AMP_OP_COUNT];
    double act_underflow_fp16_unscaled;
    int64_t act_bins[AMP_GRAD_HIST_BINS]; /* the nonzero finite activation gradients by
                                             floor(log2 |g| / S), binned as `bins` */
} amp_grad_stats;

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
    /* !is_eval: this step's gradient statistics when the step was sampled, else NULL (valid during
       the callback only) */
    const amp_grad_stats *grad_stats;
    /* The run's first callback only (else NULL): one line on where a text model's tokens came from,
       e.g. "BPE tokens reused from the cache FILE" (valid during the callback only). */
    const char *data_note;
    /* is_eval with sample_tokens > 0 (gpt, gpt2): the sample's bytes (the first held-out token, then the
       generated ones, spelled by the corpus's vocabulary; not NUL-terminated, maybe not UTF-8), valid
       during the callback only; else NULL and 0 */
    const char *sample_text;
    size_t sample_bytes;
    /* !is_eval, fp8 presets: the fp8 layers' cast statistics (last: this step's; total: so far),
       fp8_layers of them (0 and NULL otherwise; valid during the callback only) */
    int fp8_layers;
    const amp_train_fp8_layer *fp8;
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
    double bits_per_char;       /* text models: held-out nats per byte / ln 2 (= test_loss / ln 2 with one
                                   token per byte; see text_words); NaN for image models and for token
                                   shards without a rank file (test_loss / ln 2 is then bits per token) */
    double samples_per_sec;     /* training samples / training time (no evaluation, no start-up) */
    double wall_seconds;        /* the whole call */
    int64_t num_params;
    int64_t batch, accum;
    int64_t start_step;         /* 0, or the step a resumed run continued from */
    /* Gradient statistics (see above): the fractions averaged over the sampled steps (NaN when no
       step was sampled), the number of samples, and the latest sample (step 0 when none). */
    double grad_underflow_fp16_unscaled, grad_underflow_fp16_scaled, grad_overflow_fp16_scaled;
    double act_underflow_fp16_unscaled; /* the activation gradients' fraction, averaged likewise */
    int64_t grad_stats_samples;
    amp_grad_stats grad_stats;
    /* Pure presets (fp16-pure, bf16-pure), on the sampled steps: of the parameter values whose fp32
       update was nonzero, the fraction the rounded parameter did not keep (it stayed where it was:
       the update was under half an ulp, Micikevicius et al.'s "vanishing update"), averaged over the
       sampled steps that updated; NaN for the other presets or when none was sampled. */
    double stalled_updates;
    int ranks;                  /* processes that trained (1 without a communicator) */
    int64_t grad_wire_bytes;    /* the bytes this rank sent for the gradient sums over the run, as a
                                   reduce-scatter plus an allgather send them: per sum of n values of
                                   e bytes on the wire, 2 (ranks - 1) ceil(n / ranks) e (with the
                                   e5m2 wire, each bucket's amax all-reduce counts as its parameters'
                                   number of 8-byte values); zero_stage 1: its reduce-scatter, half
                                   that; 0 with one rank */
    int64_t optimizer_state_bytes; /* this rank's optimizer state: the fp32 masters of f16/bf16
                                      parameters, momentum, Adam's moments (fp32 parameters are their
                                      own masters and not counted); divided by the ranks with
                                      zero_stage 1 */
    int64_t injected_steps;     /* injected inf/NaN faults, summed over the ranks */
    amp_token_cache_status token_cache; /* BPE text: what the token cache did (amp/data.h); else OFF */
    /* Memory. arena_peak_bytes: the context's per-step arena high-water mark over the run
       (amp_ctx_arena_peak: activations, saved data, activation gradients, tensor headers);
       scratch_peak_bytes: the ops' temporary memory's (amp_ctx_scratch_peak: fp32 staging);
       param_bytes: the parameters' storage (their gradients take as much again; the optimizer's
       state is optimizer_state_bytes above); peak_rss_bytes: the process's peak resident set at the
       end of the run (getrusage; the whole process's, so the largest of the runs one process made). */
    size_t arena_peak_bytes, scratch_peak_bytes, param_bytes;
    size_t cast_copy_bytes; /* the parameters' 16-bit cast copies (amp_ctx_keep_cast_copies): kept
                               under 16-bit autocast with fp32 parameters, outside the fp8 presets
                               and ZeRO; 0 otherwise */
    int64_t peak_rss_bytes;
    int fp8_layers;             /* Linear layers run in fp8 (0 outside the fp8 presets) */
    amp_train_fp8_layer fp8[AMP_TRAIN_FP8_MAX_LAYERS]; /* the first AMP_TRAIN_FP8_MAX_LAYERS of them */
} amp_train_result;

/* Runs the training described by cfg. Returns AMP_OK; AMP_ERR_INVALID_ARGUMENT (a bad setting, a
 * batch larger than the data, or a resume checkpoint that does not fit the run); the data loaders' and
 * the checkpoint reader/writer's AMP_ERR_IO / AMP_ERR_FORMAT (message naming the file); AMP_ERR_STATE (detect_anomaly found a non-finite value: the message names
 * the op, its parameters, or the gradient's parameter); or another error. err gets a one-line
 * message (err may be NULL). result is filled on success (and as far as it got on a failure after
 * start-up). */
int amp_train_run(const amp_train_config *cfg, const amp_train_callbacks *cb, amp_train_result *result, char *err,
                  size_t err_size);

#ifdef __cplusplus
}
#endif
#endif /* AMP_TRAIN_H */
