/* `amp train`: train one model on one dataset in one precision preset (amp_train_run), with a
 * progress line, an evaluation line per epoch and a summary (or, with --json, one JSON object as
 * the last line of stdout). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp.h"
#include "bench_util.h"
#include "commands.h"
#include "launch.h"
#include "report.h"
#include "train_flags.h"

/* Plain (non-terminal) progress: about this many lines per run, plus one per evaluation. */
#define PLAIN_PROGRESS_LINES 20
/* gpt, gpt2: tokens of the sample printed after each evaluation (--sample-tokens). */
#define DEFAULT_SAMPLE_TOKENS 64
/* The terminal line is redrawn at most this often (seconds). */
#define LIVE_REFRESH_SECONDS 0.1

static void print_help(void) {
    char names[128], models[256];
    printf("usage: amp train [--model %s] [--data PATH] [--precision P] [--scaler MODE]\n"
           "                 [--optimizer sgd|adam|adamw] [--lr X] [--batch N] [--epochs N | --steps N]\n"
           "                 [--seed N] [--threads N] [--accum N] [--clip X] [--json] [--quiet] [--detect-anomaly]\n"
           "                 [--checkpoint FILE [--checkpoint-every N]] [--resume FILE] [--grad-stats-every N]\n"
           "                 [--inject-nonfinite P [--inject-rank R]]\n"
           "                 [--tokenizer RANKS [--pattern P]] [--val-data SHARDS] [--vocab N] [--data-order O]\n"
           "       mpirun -np N amp train ... [--allreduce-dtype fp32|bf16|fp16|fp8] [--check-replicas K] [--bucket-kb N]\n"
           "Trains a model on real data in a precision preset and reports loss, accuracy (image models) or\n"
           "bits per character (text models), skipped steps, the final loss scale and samples/s.\n\n"
           "  --model M          %s\n"
           "  --data PATH        image models: a directory with MNIST's IDX files (train-images-idx3-ubyte[.gz],\n"
           "                     ...; default %s);\n"
           "                     text models: a file or a directory of files (default %s)\n"
           "  --words N          text models: a vocabulary of the N most frequent words on top of the bytes\n"
           "                     (default: one token per byte); bits/char stays per byte of held-out text\n"
           "  --tokenizer RANKS  text models: encode the text with this BPE (a tiktoken rank file; the last\n"
           "                     10%% of the bytes held out; tokens cached in --token-cache DIR, default\n"
           "                     $AMP_CACHE_DIR or ~/.cache/amp, \"\" for none); with shards, it spells the ids\n"
           "                     so bits/char can be computed (without it: bits/token)\n"
           "  --pattern P        the BPE's pre-tokenization pattern: gpt2 or cl100k (default)\n"
           "  --data SHARDS      text models: llm.c token shards (a file or a quoted glob, concatenated in\n"
           "                     name order) instead of text; --val-data FILE|GLOB the held-out shards\n"
           "                     (default: the last 10%% of the tokens); --vocab N the vocabulary size\n"
           "                     (default: the rank file's, else amp's header field, else the largest id + 1;\n"
           "                     llm.c's GPT-2 shards need 50257)\n"
           "  --data-order O     text models: random (default: windows at random starts) or sequential\n"
           "                     (llm.c's DataLoader without shuffling; evaluation likewise)\n"
           "  --precision P      fp32, amp-fp16 (default), amp-bf16, fp16-master, fp16-pure, bf16-pure,\n"
           "                     fp8-delayed, fp8-current, mxfp8, fp8-block, fp8-noscale (amp-bf16 with the\n"
           "                     Linear layers' GEMMs in fp8; see docs/fp8.md)\n"
           "  --fp8-all-layers   fp8 presets: the first and last Linear layers too (default: they stay bf16)\n"
           "  --mx-scale R       mxfp8: the E8M0 block scales' rule, rceil (default: TE's and the hardware's)\n"
           "                     or floor (the OCP spec's; a checkpoint keeps it, another rule is refused)\n"
           "  --fp8-history N    fp8-delayed: the amax history's length (default 1024, TE's)\n"
           "  --fp8-amax A       fp8-delayed: the scale's amax, max over the history (default) or most_recent\n"
           "  --fp8-margin M     fp8-delayed: scale = fp8 max * 2^-M / amax, headroom for growing amaxes\n"
           "  --fp8-amax-init    fp8-delayed: the first pass's scales from its own tensors' amaxes (torchao's\n"
           "                     delayed scaling) instead of TE's 1, which flushes small first gradients\n"
           "                     (a checkpoint keeps these four, other settings are refused)\n"
           "  --scaler MODE      dynamic | off | static:S (default: dynamic for amp-fp16 and fp16-master,\n"
           "                     off for the others)\n"
           "  --optimizer O      sgd (image default, momentum 0.9), adam, adamw (text default, weight decay 0.01)\n"
           "  --lr X             learning rate (default: 0.05 image models, 0.003 text models)\n"
           "  --lr-schedule S    constant or cosine (decays to 0 over the run, after the warmup); default:\n"
           "                     cosine for image models, constant for text models\n"
           "  --warmup N         linear learning-rate warmup over N steps (default 0)\n"
           "  --momentum X       SGD momentum (default 0.9)\n"
           "  --weight-decay X   default: 0, 0.01 for adamw\n"
           "  --batch N          samples per micro-batch (default: 128 image models, 32 text models)\n"
           "  --epochs N         passes over the training data (default 1)\n"
           "  --steps N          optimizer steps instead of epochs\n"
           "  --accum N          micro-batches per optimizer step (default 1)\n"
           "  --clip X           clip the global gradient norm to X after unscaling (default: no clipping)\n"
           "  --seed N           seed of initialisation and data order (default 0)\n"
           "  --threads N        threads (default: AMP_NUM_THREADS or the online cores)\n"
           "  --hidden N, --layers N, --heads N, --context N, --embed N\n"
           "                     override the model's sizes (see `amp/nn.h`; defaults are PyTorch-comparable)\n"
           "  --size S           gpt2: 124m (default), 350m, 774m or 1558m (GPT-2's released sizes; the flags\n"
           "                     above override its layers, heads, width and context)\n"
           "  --beta1 X, --beta2 X, --eps X\n"
           "                     Adam and AdamW: the moments' decay rates (0.9, 0.999) and eps (1e-8)\n"
           "  --init-from FILE   gpt2: start from an llm.c model file (gpt2_124M.bin: its sizes and weights;\n"
           "                     --context may be shorter than its positions)\n"
           "  --save-llmc FILE   gpt2: at the end, write the weights as an llm.c model file (atomically)\n"
           "  --save-llmc-version N  3 (fp32, default; llm.c's CPU trainer reads it) or 5 (bf16)\n"
           "  --save-hf FILE     gpt2: at the end, the weights as Hugging Face's GPT2LMHeadModel safetensors\n"
           "  --eval-batches N   text models: held-out batches per evaluation (default %d)\n"
           "  --no-eval          skip evaluation\n"
           "  --detect-anomaly   stop at the first op whose output (or parameter gradient, without a scaler)\n"
           "                     is inf/NaN and name it (slow)\n"
           "  --checkpoint FILE  write a checkpoint (safetensors, atomically) at the end\n"
           "  --checkpoint-every N  also every N steps\n"
           "  --resume FILE      continue bit-exactly from a checkpoint of the same configuration; --steps and\n"
           "                     --epochs stay the run's total (N steps + resume to 2N = 2N steps in one run when\n"
           "                     the learning rate is constant; a cosine decay spans the total given)\n"
           "  --grad-stats-every N  gradient magnitude statistics every N steps (0: never; default: steps\n"
           "                     1, 2, 4, ... then every quarter epoch)\n"
           "  --sample-tokens N  gpt, gpt2: after each evaluation, print N tokens generated greedily after the first\n"
           "                     held-out token (stderr, with the progress; 0: none; default %d)\n"
           "  --param-dtype D    bf16 with --precision amp-bf16: bf16 parameters and gradients, fp32 master\n"
           "                     weights in the optimizer (fp32, the default: the preset's dtype)\n"
           "  --recompute        gpt, gpt2: keep only each block's input and recompute the block in backward\n"
           "                     (less activation memory, one more forward of the blocks; same gradients)\n"
           "  --no-memory-check  train even where the estimated memory (parameters, optimizer state,\n"
           "                     activations) exceeds what is available (by default refused before allocating)\n"
           "  --json             the last line of stdout is one JSON object with the results\n"
           "  --quiet            no progress on stderr\n"
           "  --report DIR       write metrics.jsonl, loss / loss-scale / gradient-histogram plots (PNG, SVG) and\n"
           "                     index.html to DIR\n"
           "  --inject-nonfinite P  fault drill: with probability P per step, one gradient value becomes inf or\n"
           "                     NaN before the scaler sees it (the scaler skips the step; without one it spreads)\n"
           "  --inject-rank R    data parallel: only rank R injects (default: every rank draws)\n"
           "Data parallel (amp built with MPI, started by mpirun): --batch is the global batch, split evenly\n"
           "over the ranks; gradients are summed while backward runs; rank 0 prints, reports and checkpoints.\n"
           "  --allreduce-dtype D  gradients travel as fp32 (default), bf16 or fp16 (summed in fp32, rounded once), or\n"
           "                     fp8: e5m2 with one shared power-of-2 scale per parameter (MS-AMP's scheme)\n"
           "  --check-replicas K every K steps, check that every rank holds the same parameters (debugging)\n"
           "  --bucket-kb N      gradient bucket size for the overlapped sums (default 1024)\n"
           "  --zero 1           ZeRO stage 1: each rank keeps the optimizer state of 1/N of the parameters\n"
           "                     (gradients reduce-scattered, parameters all-gathered; same results)\n"
           "Same seed and thread count give bit-identical runs. Exit status: 0 success, 1 failure while\n"
           "training, 2 bad usage or bad data.\n",
           amp_cli_model_names(names, sizeof names, "|", NULL), amp_cli_model_help(models, sizeof models),
           AMP_IMAGE_DATASET_DEFAULT_DIR, AMP_TEXT_CORPUS_DEFAULT_PATH, AMP_TRAIN_EVAL_BATCHES, DEFAULT_SAMPLE_TOKENS);
}

/* ---- progress ----------------------------------------------------------------------------------- */

typedef struct progress_state {
    bool quiet, live;
    bool text;
    int64_t every;      /* plain mode: print every `every` steps */
    double last_draw;   /* live mode: time of the last redraw */
    bool line_open;     /* live mode: a \r line is on screen */
} progress_state;

static void format_eta(double s, char *buf, size_t size) {
    if (!isfinite(s) || s < 0) s = 0;
    const long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, size, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else
        snprintf(buf, size, "%ldm%02lds", t / 60, t % 60);
}

/* The evaluation's sample on stderr: "sample: " and the text, control bytes other than newline and
 * tab shown as \xNN so that a sample cannot drive the terminal. */
static void print_sample(const char *text, size_t n) {
    fputs("sample: ", stderr);
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)text[i];
        if (c < 32 && c != '\n' && c != '\t') fprintf(stderr, "\\x%02x", c);
        else if (c == 127) fputs("\\x7f", stderr);
        else fputc(c, stderr);
    }
    fputc('\n', stderr);
}

static void on_progress(const amp_train_progress *p, void *user) {
    progress_state *ps = user;
    if (ps->quiet) return;
    if (p->is_eval) {
        if (ps->line_open) fputc('\n', stderr), ps->line_open = false;
        if (ps->text && isnan(p->bits_per_char)) /* token shards without a rank file */
            fprintf(stderr, "epoch %lld/%lld  step %lld  test loss %.4f  bits/token %.4f\n", (long long)p->epoch,
                    (long long)p->epochs, (long long)p->step, p->test_loss, p->test_loss / log(2.0));
        else if (ps->text)
            fprintf(stderr, "epoch %lld/%lld  step %lld  test loss %.4f  bits/char %.4f\n", (long long)p->epoch,
                    (long long)p->epochs, (long long)p->step, p->test_loss, p->bits_per_char);
        else
            fprintf(stderr, "epoch %lld/%lld  step %lld  test loss %.4f  accuracy %.2f%%\n", (long long)p->epoch,
                    (long long)p->epochs, (long long)p->step, p->test_loss, 100.0 * p->test_accuracy);
        if (p->sample_text) print_sample(p->sample_text, p->sample_bytes);
        return;
    }
    if (p->data_note) {
        if (ps->line_open) fputc('\n', stderr), ps->line_open = false;
        fprintf(stderr, "%s\n", p->data_note);
    }
    if (ps->every == 0) ps->every = p->total_steps >= PLAIN_PROGRESS_LINES ? p->total_steps / PLAIN_PROGRESS_LINES : 1;
    char eta[32];
    format_eta(p->eta_seconds, eta, sizeof eta);
    if (ps->live) {
        const double t = amp_bench_now();
        if (p->step != p->total_steps && t - ps->last_draw < LIVE_REFRESH_SECONDS) return;
        ps->last_draw = t;
        fprintf(stderr, "\r\033[Kepoch %lld/%lld  step %lld/%lld  loss %.4f  scale %g  skipped %lld  %.0f samples/s  ETA %s",
                (long long)p->epoch, (long long)p->epochs, (long long)p->step, (long long)p->total_steps, p->loss,
                (double)p->scale, (long long)p->skipped, p->samples_per_sec, eta);
        ps->line_open = true;
        fflush(stderr);
    } else if (p->step % ps->every == 0 || p->step == p->total_steps || p->step == 1) {
        fprintf(stderr, "epoch %lld/%lld  step %lld/%lld  loss %.4f  scale %g  skipped %lld  %.0f samples/s  ETA %s\n",
                (long long)p->epoch, (long long)p->epochs, (long long)p->step, (long long)p->total_steps, p->loss,
                (double)p->scale, (long long)p->skipped, p->samples_per_sec, eta);
    }
}

/* ---- output ------------------------------------------------------------------------------------- */

static void print_summary(const amp_train_result *r) {
    char scaler[64];
    amp_report_scaler_spelling(r, scaler, sizeof scaler);
    printf("%s, %s, scaler %s: %lld steps (%lld epochs), %lld skipped, final scale %g\n", amp_model_kind_name(r->model),
           amp_precision_get_info(r->precision)->name, scaler, (long long)r->steps, (long long)r->epochs,
           (long long)r->skipped_steps, (double)r->final_scale);
    printf("train loss %.4f  test loss %.4f  ", r->train_loss, r->test_loss);
    if (amp_model_is_text(r->model) && isnan(r->bits_per_char) && !isnan(r->test_loss))
        printf("bits/token %.4f\n", r->test_loss / log(2.0)); /* token shards without a rank file */
    else if (amp_model_is_text(r->model))
        printf("bits/char %.4f\n", r->bits_per_char);
    else
        printf("test accuracy %.2f%%\n", 100.0 * r->test_accuracy);
    printf("%.1f samples/s (training), %.2f s wall\n", r->samples_per_sec, r->wall_seconds);
    printf("memory: peak RSS %.1f MiB, arena peak %.1f MiB (scratch %.1f MiB), parameters %.1f MiB (gradients as much), "
           "optimizer state %.1f MiB per rank (%lld bytes, %d rank%s)\n",
           (double)r->peak_rss_bytes / 1048576.0, (double)r->arena_peak_bytes / 1048576.0,
           (double)r->scratch_peak_bytes / 1048576.0, (double)r->param_bytes / 1048576.0,
           (double)r->optimizer_state_bytes / 1048576.0, (long long)r->optimizer_state_bytes, r->ranks,
           r->ranks == 1 ? "" : "s");
    if (r->ranks > 1)
        printf("gradient sums: %lld bytes sent by each rank (%.0f per step)\n", (long long)r->grad_wire_bytes,
               r->steps > r->start_step ? (double)r->grad_wire_bytes / (double)(r->steps - r->start_step) : 0.0);
    amp_cli_print_fp8_table(stdout, r);
}

/* ---- the command -------------------------------------------------------------------------------- */

/* The command line: the run's configuration, how to print, and the optimizer settings applied once
 * every flag is read (--optimizer resets the optimizer's configuration, and an --lr, --momentum or
 * --weight-decay given before it still counts). */
typedef struct train_options {
    amp_train_config cfg;
    bool json, quiet;
    const char *report_dir; /* --report DIR, or NULL */
    bool have_lr, have_wd, have_momentum, have_beta1, have_beta2, have_eps;
    double lr, wd, momentum, beta1, beta2, eps;
} train_options;

/* Applies the flag `a` (one that takes a value) with its value `v`. Returns AMP_EXIT_OK, or the
 * usage error's exit status. */
static int parse_value(const char *a, const char *v, train_options *o) {
    amp_train_config *cfg = &o->cfg;
    long n = 0;
    double d = 0;
#define NEED_LONG(lo, hi)                                                                                    \
    if (amp_parse_long(v, (lo), (hi), &n) != 0)                                                              \
        return amp_usage_error("train", "%s wants an integer in [%ld, %ld], not '%s'", a, (long)(lo), (long)(hi), v)
#define NEED_DOUBLE()                                                                                        \
    if (amp_cli_parse_double(v, &d) != 0) return amp_usage_error("train", "%s wants a number, not '%s'", a, v)
    if (amp_train_is_shared_flag(a)) {
        const int st = amp_train_shared_flag("train", a, v, cfg);
        if (st != AMP_EXIT_OK) return st;
    } else if (strcmp(a, "--model") == 0) {
        /* handled in the first pass */
    } else if (strcmp(a, "--precision") == 0) {
        if (amp_precision_from_name(v, &cfg->precision) != AMP_OK)
            return amp_usage_error("train",
                                   "unknown precision '%s' (fp32, amp-fp16, amp-bf16, fp16-master, fp16-pure, bf16-pure, "
                                   "fp8-delayed, fp8-current, mxfp8, fp8-block, fp8-noscale)", v);
    } else if (strcmp(a, "--scaler") == 0) {
        if (strcmp(v, "dynamic") == 0)
            cfg->scaler = AMP_SCALER_DYNAMIC;
        else if (strcmp(v, "off") == 0)
            cfg->scaler = AMP_SCALER_OFF;
        else if (strncmp(v, "static:", 7) == 0 && amp_cli_parse_double(v + 7, &d) == 0 && d > 0 && d <= 3.4e38) {
            cfg->scaler = AMP_SCALER_STATIC;
            cfg->static_scale = (float)d;
        } else
            return amp_usage_error("train", "--scaler wants dynamic, off or static:S with S > 0, not '%s'", v);
    } else if (strcmp(a, "--optimizer") == 0) {
        amp_optim_kind k;
        if (strcmp(v, "sgd") == 0) k = AMP_OPTIM_SGD;
        else if (strcmp(v, "adam") == 0) k = AMP_OPTIM_ADAM;
        else if (strcmp(v, "adamw") == 0) k = AMP_OPTIM_ADAMW;
        else return amp_usage_error("train", "unknown optimizer '%s' (sgd, adam, adamw)", v);
        const float keep_lr = cfg->optim.lr;
        cfg->optim = amp_optim_default_config(k);
        cfg->optim.lr = keep_lr;
        if (k == AMP_OPTIM_SGD) cfg->optim.momentum = 0.9f;
    } else if (strcmp(a, "--lr") == 0) {
        NEED_DOUBLE();
        if (d < 0) return amp_usage_error("train", "--lr must be >= 0, not '%s'", v);
        o->lr = d, o->have_lr = true;
    } else if (strcmp(a, "--momentum") == 0) {
        NEED_DOUBLE();
        if (d < 0) return amp_usage_error("train", "--momentum must be >= 0, not '%s'", v);
        o->momentum = d, o->have_momentum = true;
    } else if (strcmp(a, "--weight-decay") == 0) {
        NEED_DOUBLE();
        if (d < 0) return amp_usage_error("train", "--weight-decay must be >= 0, not '%s'", v);
        o->wd = d, o->have_wd = true;
    } else if (strcmp(a, "--beta1") == 0 || strcmp(a, "--beta2") == 0) {
        NEED_DOUBLE();
        if (!(d >= 0 && d < 1)) return amp_usage_error("train", "%s wants a number in [0, 1), not '%s'", a, v);
        if (a[6] == '1') o->beta1 = d, o->have_beta1 = true;
        else o->beta2 = d, o->have_beta2 = true;
    } else if (strcmp(a, "--eps") == 0) {
        NEED_DOUBLE();
        if (d < 0) return amp_usage_error("train", "--eps must be >= 0, not '%s'", v);
        o->eps = d, o->have_eps = true;
    } else if (strcmp(a, "--init-from") == 0) {
        cfg->init_from = v;
    } else if (strcmp(a, "--save-llmc") == 0) {
        cfg->save_llmc = v;
    } else if (strcmp(a, "--save-hf") == 0) {
        cfg->save_hf = v;
    } else if (strcmp(a, "--save-llmc-version") == 0) {
        NEED_LONG(3, 5);
        if (n == 4) return amp_usage_error("train", "--save-llmc-version wants 3 (fp32) or 5 (bf16), not '%s'", v);
        cfg->save_llmc_version = (int)n;
    } else if (strcmp(a, "--size") == 0) {
        /* applied before the other flags (amp_train_apply_size), so that theirs override it */
    } else if (strcmp(a, "--clip") == 0) {
        NEED_DOUBLE();
        if (d < 0) return amp_usage_error("train", "--clip must be >= 0, not '%s'", v);
        cfg->clip = (float)d;
    } else if (strcmp(a, "--checkpoint") == 0) {
        cfg->checkpoint = v;
    } else if (strcmp(a, "--checkpoint-every") == 0) {
        NEED_LONG(1, 1L << 40);
        cfg->checkpoint_every = n;
    } else if (strcmp(a, "--resume") == 0) {
        cfg->resume = v;
    } else if (strcmp(a, "--grad-stats-every") == 0) {
        NEED_LONG(0, 1L << 40);
        cfg->grad_stats_every = n > 0 ? n : -1;
    } else if (strcmp(a, "--inject-nonfinite") == 0) {
        NEED_DOUBLE();
        if (!(d >= 0 && d <= 1)) return amp_usage_error("train", "--inject-nonfinite wants a probability in [0, 1], not '%s'", v);
        cfg->inject_nonfinite = d;
    } else if (strcmp(a, "--inject-rank") == 0) {
        NEED_LONG(0, 1L << 20);
        cfg->inject_rank = (int)n;
    } else if (strcmp(a, "--allreduce-dtype") == 0) {
        if (strcmp(v, "fp32") == 0) cfg->grad_wire = AMP_F32;
        else if (strcmp(v, "bf16") == 0) cfg->grad_wire = AMP_BF16;
        else if (strcmp(v, "fp16") == 0) cfg->grad_wire = AMP_F16;
        else if (strcmp(v, "fp8") == 0) cfg->grad_wire = AMP_F8E5M2;
        else return amp_usage_error("train", "--allreduce-dtype wants fp32, bf16, fp16 or fp8, not '%s'", v);
    } else if (strcmp(a, "--check-replicas") == 0) {
        NEED_LONG(0, 1L << 40);
        cfg->check_replicas_every = n;
    } else if (strcmp(a, "--bucket-kb") == 0) {
        NEED_LONG(1, 1L << 30);
        cfg->bucket_bytes = (size_t)n << 10;
    } else if (strcmp(a, "--zero") == 0) {
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
            return amp_usage_error("train", "--zero wants 0 or 1 (stage 1 shards the optimizer state; stages 2 and 3, "
                                            "sharding gradients and parameters, are not supported), not '%s'", v);
        cfg->zero_stage = v[0] - '0';
    } else if (strcmp(a, "--sample-tokens") == 0) {
        NEED_LONG(0, 1L << 20);
        cfg->sample_tokens = n;
    } else if (strcmp(a, "--mx-scale") == 0) {
        if (strcmp(v, "floor") == 0) cfg->fp8_mx_floor = true;
        else if (strcmp(v, "rceil") == 0) cfg->fp8_mx_floor = false;
        else return amp_usage_error("train", "--mx-scale wants floor or rceil, not '%s'", v);
    } else if (strcmp(a, "--fp8-history") == 0) {
        NEED_LONG(1, AMP_TRAIN_FP8_MAX_HISTORY);
        cfg->fp8_history_len = (int)n;
    } else if (strcmp(a, "--fp8-amax") == 0) {
        if (strcmp(v, "max") == 0) cfg->fp8_amax_algo = AMP_FP8_AMAX_MAX;
        else if (strcmp(v, "most_recent") == 0) cfg->fp8_amax_algo = AMP_FP8_AMAX_MOST_RECENT;
        else return amp_usage_error("train", "--fp8-amax wants max or most_recent, not '%s'", v);
    } else if (strcmp(a, "--fp8-margin") == 0) {
        NEED_LONG(-127, 127);
        cfg->fp8_margin = (int)n;
    } else if (strcmp(a, "--param-dtype") == 0) {
        if (strcmp(v, "fp32") == 0) cfg->param_dtype_override = AMP_F32;
        else if (strcmp(v, "bf16") == 0) cfg->param_dtype_override = AMP_BF16;
        else return amp_usage_error("train", "--param-dtype wants bf16 (or fp32: the preset's), not '%s'", v);
    }
#undef NEED_LONG
#undef NEED_DOUBLE
    return AMP_EXIT_OK;
}

/* Reads argv[1..argc) into *o, from the defaults of the model `kind` (the first pass's). Returns -1
 * when the run should go on, otherwise the usage error's exit status. */
static int parse_options(int argc, char **argv, amp_model_kind kind, train_options *o) {
    *o = (train_options){.cfg = amp_train_default_config(kind)};
    o->cfg.precision = AMP_PRECISION_AMP_FP16;
    o->cfg.sample_tokens = kind == AMP_MODEL_GPT || kind == AMP_MODEL_GPT2 ? DEFAULT_SAMPLE_TOKENS : 0;
    amp_train_config *cfg = &o->cfg;
    const int size_st = amp_train_apply_size("train", argc, argv, &cfg->model);
    if (size_st >= 0) return size_st;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) { o->json = true; continue; }
        if (strcmp(a, "--quiet") == 0) { o->quiet = true; continue; }
        if (strcmp(a, "--detect-anomaly") == 0) { cfg->detect_anomaly = true; continue; }
        if (strcmp(a, "--no-eval") == 0) { cfg->eval = false; continue; }
        if (strcmp(a, "--recompute") == 0) { cfg->model.recompute = true; continue; }
        if (strcmp(a, "--fp8-all-layers") == 0) { cfg->fp8_all_layers = true; continue; }
        if (strcmp(a, "--fp8-amax-init") == 0) { cfg->fp8_amax_init = true; continue; }
        if (strcmp(a, "--no-memory-check") == 0) { cfg->skip_memory_check = true; continue; }
        if (strcmp(a, "--report") == 0) {
            if (i + 1 >= argc) return amp_usage_error("train", "--report needs a value");
            o->report_dir = argv[++i];
            continue;
        }
        if (strncmp(a, "--", 2) != 0) return amp_usage_error("train", "unexpected argument '%s'", a);
        static const char *const with_value[] = {"--model", "--precision", "--scaler", "--optimizer", "--lr",
                                                 "--momentum", "--weight-decay", "--clip", "--checkpoint",
                                                 "--checkpoint-every", "--resume", "--grad-stats-every",
                                                 "--inject-nonfinite", "--inject-rank", "--allreduce-dtype",
                                                 "--check-replicas", "--bucket-kb", "--size", "--beta1", "--beta2",
                                                 "--eps", "--init-from", "--save-llmc", "--save-llmc-version",
                                                 "--save-hf", "--sample-tokens", "--zero", "--param-dtype", "--mx-scale",
                                                 "--fp8-history", "--fp8-amax", "--fp8-margin"};
        bool known = amp_train_is_shared_flag(a);
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= strcmp(a, with_value[k]) == 0;
        if (!known) return amp_usage_error("train", "unknown option '%s'", a);
        if (i + 1 >= argc) return amp_usage_error("train", "%s needs a value", a);
        const int st = parse_value(a, argv[++i], o);
        if (st != AMP_EXIT_OK) return st;
    }
    if (o->have_lr) cfg->optim.lr = (float)o->lr;
    if (o->have_momentum) cfg->optim.momentum = (float)o->momentum;
    if (o->have_wd) cfg->optim.weight_decay = (float)o->wd;
    if (o->have_beta1) cfg->optim.beta1 = (float)o->beta1;
    if (o->have_beta2) cfg->optim.beta2 = (float)o->beta2;
    if (o->have_eps) cfg->optim.eps = (float)o->eps;
    if ((o->have_beta1 || o->have_beta2 || o->have_eps) && cfg->optim.kind == AMP_OPTIM_SGD)
        return amp_usage_error("train", "--beta1, --beta2 and --eps apply to adam and adamw only");
    if (cfg->checkpoint_every > 0 && !cfg->checkpoint) return amp_usage_error("train", "--checkpoint-every needs --checkpoint FILE");
    if ((cfg->init_from || cfg->save_llmc || cfg->save_hf) && cfg->model.kind != AMP_MODEL_GPT2)
        return amp_usage_error("train", "--init-from, --save-llmc and --save-hf apply to --model gpt2 only");
    if (o->have_momentum && cfg->optim.kind != AMP_OPTIM_SGD)
        return amp_usage_error("train", "--momentum applies to sgd only");
    if (cfg->model.recompute && cfg->model.kind != AMP_MODEL_GPT && cfg->model.kind != AMP_MODEL_GPT2)
        return amp_usage_error("train", "--recompute applies to --model gpt and gpt2 only");
    if (cfg->fp8_mx_floor && cfg->precision != AMP_PRECISION_MXFP8)
        return amp_usage_error("train", "--mx-scale floor needs --precision mxfp8, not %s",
                               amp_precision_get_info(cfg->precision)->name);
    if ((cfg->fp8_history_len || cfg->fp8_amax_algo != AMP_FP8_AMAX_MAX || cfg->fp8_margin || cfg->fp8_amax_init) &&
        cfg->precision != AMP_PRECISION_FP8_DELAYED)
        return amp_usage_error("train",
                               "--fp8-history, --fp8-amax, --fp8-margin and --fp8-amax-init need --precision fp8-delayed, not %s",
                               amp_precision_get_info(cfg->precision)->name);
    if (cfg->param_dtype_override == AMP_BF16 && cfg->precision != AMP_PRECISION_AMP_BF16)
        return amp_usage_error("train", "--param-dtype bf16 needs --precision amp-bf16, not %s",
                               amp_precision_get_info(cfg->precision)->name);
    return -1;
}

static int run_and_print(amp_train_config *cfg, amp_model_kind kind, bool quiet, bool json, const char *report_dir,
                         amp_train_result *result, char *err, size_t err_size);

int amp_cmd_train(int argc, char **argv) {
    amp_model_kind kind; /* the first pass: --help, and --model (the defaults depend on it) */
    const int first = amp_train_first_pass("train", argc, argv, print_help, &kind);
    if (first >= 0) return first;
    train_options o;
    const int parsed = parse_options(argc, argv, kind, &o);
    if (parsed >= 0) return parsed;
    if (amp_cli_parse_only) return AMP_EXIT_OK;

    amp_train_result result;
    char err[512];
    /* Under mpirun: every rank trains; rank 0 alone prints, reports and checkpoints (the library
     * writes checkpoints on rank 0 only). */
    amp_comm *comm = NULL;
    int cst = amp_cli_comm_start(&comm, err, sizeof err);
    if (cst != AMP_OK) {
        fprintf(stderr, "amp: train: %s\n", err);
        amp_cli_comm_finish(comm);
        return cst == AMP_ERR_INVALID_ARGUMENT ? AMP_EXIT_USAGE : AMP_EXIT_FAILURE;
    }
    o.cfg.comm = comm;
    const int rank = comm ? comm->rank : 0;
    if (rank != 0) o.quiet = true, o.json = false, o.report_dir = NULL;
    const int code = run_and_print(&o.cfg, kind, o.quiet, o.json, o.report_dir, &result, err, sizeof err);
    if (code != AMP_EXIT_OK) return amp_cli_comm_abort(comm, code);
    amp_cli_comm_finish(comm);
    return code;
}

/* Trains and prints (on rank 0: the others pass quiet, no json, no report). */
static int run_and_print(amp_train_config *cfgp, amp_model_kind kind, bool quiet, bool json, const char *report_dir,
                         amp_train_result *resultp, char *err, size_t err_size) {
    amp_train_config cfg = *cfgp;
    if (quiet) cfg.sample_tokens = 0; /* nobody would see it */
    amp_train_result result;
    char rank_tag[32] = "";
    if (cfg.comm && cfg.comm->size > 1) snprintf(rank_tag, sizeof rank_tag, "rank %d: ", cfg.comm->rank);
    progress_state ps = {.quiet = quiet, .live = isatty(2) != 0, .text = amp_model_is_text(kind)};
    const amp_train_callbacks cb = {.progress = on_progress, .user = &ps};
    amp_report *report = NULL;
    amp_train_callbacks run_cb = cb;
    if (report_dir) {
        const int rs = amp_report_open(report_dir, &report, err, err_size);
        if (rs == AMP_REPORT_BAD_PATH) return amp_usage_error("train", "%s", err);
        if (rs != AMP_REPORT_OK) {
            fprintf(stderr, "amp: train: %s\n", err);
            return AMP_EXIT_FAILURE;
        }
        char label[96];
        amp_report_config_label(&cfg, label, sizeof label);
        amp_report_begin_run(report, label, &cb, &run_cb);
    }
    const int st = amp_train_run(&cfg, &run_cb, &result, err, err_size);
    *resultp = result;
    if (ps.line_open) fputc('\n', stderr);
    if (st != AMP_OK) {
        amp_report_discard(report);
        fprintf(stderr, "amp: train: %s%s\n", rank_tag, err[0] ? err : amp_status_str(st));
        return (st == AMP_ERR_IO || st == AMP_ERR_FORMAT || st == AMP_ERR_INVALID_ARGUMENT) ? AMP_EXIT_USAGE
                                                                                             : AMP_EXIT_FAILURE;
    }
    const bool speaker = !cfg.comm || cfg.comm->rank == 0;
    if (json) {
        amp_report_json_result(stdout, NULL, &cfg, &result);
        putchar('\n');
    } else if (speaker) {
        print_summary(&result);
    }
    if (report) {
        amp_report_end_run(report, &cfg, &result);
        if (amp_report_finish(report, err, err_size) != AMP_REPORT_OK) {
            fprintf(stderr, "amp: train: %s\n", err);
            return AMP_EXIT_FAILURE;
        }
        if (!quiet) fprintf(stderr, "report: %s/index.html\n", report_dir);
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "amp: train: cannot write the output\n");
        return AMP_EXIT_FAILURE;
    }
    return AMP_EXIT_OK;
}
