/* `amp bench train`: steady-state training speed of one of amp's default models, with the yardstick
 * measured in the same run: the core's peak (bench_gemm.c's register-only loops).
 *
 * What a timed step is (the loop of amp_train_run, amp/train.h, on synthetic data, so that the figure
 * measures the library and not the data loader; bench/train_vs_pytorch.py trains the same
 * architectures on the same shapes in PyTorch):
 *     amp_ctx_reset; amp_zero_grad;
 *     autocast region (amp-bf16, amp-fp16) around forward + cross-entropy;
 *     scaler on:  amp_backward_scaled(loss, S); amp_scaler_step_fused; amp_scaler_update
 *     scaler off: amp_backward_scaled(loss, 1); amp_optimizer_step
 * with SGD (momentum 0.9, lr 0.01) for every model, the optimizer the PyTorch side uses. One batch of
 * seeded random data (images N(0,1)-like in [-2,2), labels in [0, classes); text: random byte tokens)
 * is reused every step, as the PyTorch side does: the images are a buffer of the context
 * (amp_buffer_new, in the preset's parameter dtype: fp32 for the amp-* presets) filled once, as
 * PyTorch's side passes one tensor to every step (a copy per step would be work PyTorch's side does
 * not do).
 *
 * Figures. samples/s = batch * steps / time of `steps` consecutive steps, the median over --repeats
 * such runs, after --warmup untimed steps (the first steps allocate the arena, the GEMM packing
 * buffers and the thread pool). FLOPs per sample is amp_model_flops_per_sample (amp/nn.h: 2 x the
 * multiply-adds of matrix products, convolutions and attention, x3 for forward + backward;
 * elementwise ops, norms and pooling left out). "of peak" = samples/s x FLOPs per sample / (threads x
 * one core's peak), the peak being the widest FMA's (zmm, else ymm), and under amp-bf16 the larger
 * of VDPBF16PS's and the FMA's (amp multiplies bf16 with either: amp_gemm_bf16_method; fp16 products
 * run on FMA after an exact decode). Where amp computes fewer FLOPs than the
 * model's count (amp_model_flops_computed_per_sample: the lstm's folded embedding), both are printed,
 * and the fraction of peak of what it computes is the hardware's efficiency. The phase split (forward
 * incl. loss, backward, optimizer incl. the scaler) is timed separately in the same steps. Memory: the
 * arena's high-water mark (the step's activations, gradients of non-parameters and scratch), the activations
 * (the arena in use when forward and the loss are done, which is what backward will read, less
 * autocast's low-precision weight copies, counted apart; the batch is not in the arena) and the
 * process's peak resident set (getrusage). Heap allocations: the context's own count per timed step
 * (amp_ctx_heap_allocations); bench/malloc_count.c counts every malloc of the process. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "amp.h"
#include "bench_util.h"
#include "commands.h"
#include "train_flags.h"

static int usage(void) {
    char names[128];
    printf("usage: amp bench train --model %s [--precision fp32|amp-bf16|amp-fp16|...]\n"
           "                       [--scaler dynamic|off] [--batch N] [--steps N] [--warmup N] [--repeats N]\n"
           "                       [--threads N] [--no-peak] [--json]\n"
           "  --precision P   a preset of amp/precision.h (default fp32)\n"
           "  --scaler M      dynamic or off (default: the preset's, dynamic for amp-fp16)\n"
           "  --batch N       samples per step (default mlp 256, cnn 128, lstm and gpt 32)\n"
           "  --steps N       timed steps per repeat (default 10)\n"
           "  --warmup N      untimed steps first (default 3)\n"
           "  --repeats N     timed runs; the median is reported (default 5)\n"
           "  --threads N     amp's thread count (default: amp's default)\n"
           "  --no-peak       skip the peak measurement (no fraction of peak)\n"
           "  --json          one JSON object on the last line instead of the table\n"
           "Synthetic data, SGD momentum 0.9. samples/s is the median over repeats; \"of peak\" is\n"
           "samples/s x FLOPs per sample / (threads x one core's measured FMA peak; under bf16, the\n"
           "larger of the FMA's and VDPBF16PS's).\n",
           amp_cli_model_names(names, sizeof names, "|", NULL));
    return AMP_EXIT_OK;
}

/* The batch of each model on bench/train_vs_pytorch.py's side (its BATCH), by name; a model that
 * script does not train gets amp train's default batch. */
static int64_t default_batch(amp_model_kind kind) {
    static const struct {
        const char *model;
        int64_t batch;
    } pytorch_side[] = {{"mlp", 256}, {"cnn", 128}, {"lstm", 32}, {"gpt", 32}};
    for (size_t k = 0; k < sizeof pytorch_side / sizeof pytorch_side[0]; k++)
        if (strcmp(amp_model_kind_name(kind), pytorch_side[k].model) == 0) return pytorch_side[k].batch;
    return amp_train_default_config(kind).batch;
}

/* The command line. */
typedef struct options {
    amp_model_kind kind; /* AMP_MODEL_COUNT until --model */
    amp_precision precision;
    int scaler_mode; /* -1 preset default, 0 off, 1 dynamic */
    long batch, steps, warmup, repeats, threads; /* batch 0: the model's default; threads 0: amp's */
    int json, want_peak;
} options;

/* Reads argv[1..argc) into *o. Returns -1 when the benchmark should run, otherwise the exit status
 * to return (usage() printed for --help; usage errors). */
static int parse_options(int argc, char **argv, options *o) {
    *o = (options){.kind = AMP_MODEL_COUNT, .precision = AMP_PRECISION_FP32, .scaler_mode = -1, .batch = 0,
                   .steps = 10, .warmup = 3, .repeats = 5, .threads = 0, .json = 0, .want_peak = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) return usage();
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(a, "--no-peak") == 0) {
            o->want_peak = 0;
        } else if (strcmp(a, "--model") == 0) {
            char names[128];
            if (!v || amp_model_kind_from_name(v, &o->kind) != AMP_OK)
                return amp_usage_error("bench", "--model needs %s", amp_cli_model_names(names, sizeof names, ", ", " or "));
            i++;
        } else if (strcmp(a, "--precision") == 0) {
            if (!v || amp_precision_from_name(v, &o->precision) != AMP_OK)
                return amp_usage_error("bench", "--precision needs a preset (fp32, amp-bf16, amp-fp16, ...)");
            i++;
        } else if (strcmp(a, "--scaler") == 0) {
            if (!v || (strcmp(v, "dynamic") != 0 && strcmp(v, "off") != 0))
                return amp_usage_error("bench", "--scaler needs dynamic or off");
            o->scaler_mode = strcmp(v, "dynamic") == 0;
            i++;
        } else if (strcmp(a, "--batch") == 0 || strcmp(a, "--steps") == 0 || strcmp(a, "--warmup") == 0 ||
                   strcmp(a, "--repeats") == 0 || strcmp(a, "--threads") == 0) {
            long *dst = a[2] == 'b'   ? &o->batch
                        : a[2] == 's' ? &o->steps
                        : a[2] == 'w' ? &o->warmup
                        : a[2] == 'r' ? &o->repeats
                                      : &o->threads;
            const long lo = a[2] == 'w' ? 0 : 1, hi = a[2] == 'b' ? 65536 : a[2] == 't' ? AMP_MAX_THREADS : 100000;
            if (!v || amp_parse_long(v, lo, hi, dst) != 0) return amp_usage_error("bench", "%s needs an integer in [%ld, %ld]", a, lo, hi);
            i++;
        } else {
            return amp_usage_error("bench", "unknown option '%s'", a);
        }
    }
    if (o->kind == AMP_MODEL_COUNT) {
        char names[128];
        return amp_usage_error("bench", "train needs --model %s", amp_cli_model_names(names, sizeof names, "|", NULL));
    }
    if (o->repeats > 1000) o->repeats = 1000;
    return -1;
}

typedef struct run {
    amp_ctx *ctx;
    amp_model *model;
    amp_optimizer *opt;
    amp_scaler *scaler;
    const amp_precision_info *prec;
    amp_model_config mc;
    bool text, scaling;
    int64_t batch;
    int64_t per_sample; /* inputs per sample: tokens (text) or pixels (images) */
    float *x;
    amp_tensor *xbuf; /* the image batch, a buffer of the context filled once (images only) */
    int32_t *tokens, *y;
    double t_fwd, t_bwd, t_opt; /* seconds, summed over timed steps */
    size_t act_bytes, copy_bytes; /* the most, over the steps, of what forward left for backward (arena
                                     in use after the loss, less the batch and the weight copies) and of
                                     those copies */
} run;

/* The context, model, optimizer and scaler of the options, and the host buffers of the batch.
 * Returns an amp status; r must be zeroed on entry, and run_free frees whatever was made. */
static int setup(run *r, const options *o) {
    r->prec = amp_precision_get_info(o->precision);
    r->text = amp_model_is_text(o->kind);
    r->batch = o->batch > 0 ? o->batch : default_batch(o->kind);
    r->scaling = o->scaler_mode < 0 ? r->prec->dynamic_scaling : o->scaler_mode == 1;

    amp_model_config *mc = &r->mc;
    *mc = amp_model_default_config(o->kind);
    mc->param_dtype = r->prec->param_dtype;
    int st = amp_ctx_create(NULL, &r->ctx);
    /* with the scaler, the fused step takes its check from backward's notes, as amp train's loop */
    if (st == AMP_OK) amp_ctx_set_backward_grad_check(r->ctx, r->scaling);
    if (st == AMP_OK) st = amp_model_create(r->ctx, mc, &r->model);
    r->per_sample = r->text ? mc->context : mc->in_channels * mc->image_rows * mc->image_cols;
    if (st == AMP_OK && !r->text &&
        !(r->xbuf = amp_buffer_new(r->ctx, "bench.batch", r->prec->param_dtype, 4,
                                   (const int64_t[]){r->batch, mc->in_channels, mc->image_rows, mc->image_cols})))
        st = amp_ctx_status(r->ctx);
    if (st == AMP_OK) st = amp_ctx_alloc_params(r->ctx);
    if (st == AMP_OK) st = amp_model_init(r->model, 0);
    amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_SGD);
    oc.lr = 0.01f;
    oc.momentum = 0.9f;
    if (st == AMP_OK) st = amp_optimizer_create(r->ctx, &oc, &r->opt);
    amp_scaler_config sc = amp_scaler_default_config();
    sc.enabled = r->scaling;
    if (st == AMP_OK) st = amp_scaler_create(&sc, &r->scaler);
    const int64_t labels = r->text ? r->batch * mc->context : r->batch;
    r->y = calloc((size_t)labels, sizeof *r->y);
    if (r->text) r->tokens = calloc((size_t)(r->batch * r->per_sample), sizeof *r->tokens);
    else r->x = calloc((size_t)(r->batch * r->per_sample), sizeof *r->x);
    if (st == AMP_OK && (!r->y || (r->text ? !r->tokens : !r->x))) st = AMP_ERR_OUT_OF_MEMORY;
    return st;
}

static void run_free(run *r) {
    free(r->x);
    free(r->y);
    free(r->tokens);
    amp_scaler_free(r->scaler);
    amp_optimizer_free(r->opt);
    amp_ctx_free(r->ctx);
    amp_model_free(r->model);
}

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* The one batch every step reuses, from a fixed seed. Returns an amp status. */
static int fill_batch(run *r) {
    const amp_model_config *mc = &r->mc;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    if (r->text) {
        /* a sequence of context + 1 random bytes per sample: tokens are the first context, labels the last */
        for (int64_t b = 0; b < r->batch; b++) {
            int32_t prev = (int32_t)(xorshift(&s) % (uint64_t)mc->vocab);
            for (int64_t t = 0; t < mc->context; t++) {
                const int32_t next = (int32_t)(xorshift(&s) % (uint64_t)mc->vocab);
                r->tokens[b * mc->context + t] = prev;
                r->y[b * mc->context + t] = next;
                prev = next;
            }
        }
        return AMP_OK;
    }
    const int64_t n = r->batch * r->per_sample;
    for (int64_t i = 0; i < n; i++) r->x[i] = (float)(xorshift(&s) >> 40) / (float)(1 << 22) - 2.0f;
    for (int64_t i = 0; i < r->batch; i++) r->y[i] = (int32_t)(xorshift(&s) % (uint64_t)mc->classes);
    return amp_convert(r->xbuf->data, r->xbuf->dtype, r->x, AMP_F32, (size_t)n);
}

static int step(run *r, bool timed) {
    const double t0 = amp_bench_now();
    amp_ctx_reset(r->ctx);
    amp_zero_grad(r->ctx);
    amp_tensor *xt = r->xbuf;
    const bool autocast = r->prec->autocast_dtype != AMP_F32;
    if (autocast && amp_autocast_enter(r->prec->autocast_dtype) != AMP_OK) return -1;
    amp_tensor *logits = amp_model_forward(r->model, r->ctx, xt, r->text ? r->tokens : NULL, r->batch, true);
    amp_tensor *loss = logits ? amp_cross_entropy(r->ctx, logits, r->y) : NULL;
    /* What forward leaves for backward: the arena in use now, less autocast's weight copies (read
     * before the region exits and empties the cache). The batch (the data fed in, the same in every
     * precision; PyTorch's count in bench/train_vs_pytorch.py leaves it out too) is a buffer, not in
     * the arena. */
    const size_t in_use = amp_ctx_arena_used(r->ctx), copies = amp_autocast_cache_bytes();
    if (autocast) amp_autocast_exit();
    if (!loss) return -1;
    if (in_use - copies > r->act_bytes) r->act_bytes = in_use - copies;
    if (copies > r->copy_bytes) r->copy_bytes = copies;
    const double t1 = amp_bench_now();
    const float scale = amp_scaler_scale(r->scaler);
    if (amp_backward_scaled(r->ctx, loss, r->scaling ? scale : 1.0f) != AMP_OK) return -1;
    const double t2 = amp_bench_now();
    if (r->scaling) {
        amp_step_report rep;
        if (amp_scaler_step_fused(r->scaler, r->opt, 0.0f, &rep) != AMP_OK || amp_scaler_update(r->scaler) != AMP_OK)
            return -2;
    } else if (amp_optimizer_step(r->opt) != AMP_OK) {
        return -2;
    }
    const double t3 = amp_bench_now();
    if (timed) r->t_fwd += t1 - t0, r->t_bwd += t2 - t1, r->t_opt += t3 - t2;
    return 0;
}

/* What the report prints, all from one run. */
typedef struct figures {
    const char *peak_name;
    double peak1;               /* one core's peak GFLOP/s; 0 with --no-peak */
    double median;              /* samples/s */
    double flops, gflops, frac; /* the model's FLOPs per sample, GFLOP/s and fraction of peak (NAN: no peak) */
    double cflops, cfrac;       /* the same for the FLOPs amp computes */
    double tsum, timed_steps;   /* seconds of the three phases, and how many steps they cover */
    double rss_mib, arena_mib, ctx_allocs, act_mib, copy_mib;
    char cpu[256];
} figures;

/* The untimed warm-up, then --repeats runs of --steps timed steps: f->median and f->ctx_allocs.
 * Returns an amp status (or step's nonzero code). */
static int time_steps(run *r, const options *o, figures *f) {
    int st = AMP_OK;
    for (long i = 0; i < o->warmup && st == AMP_OK; i++) st = step(r, false);
    double *sps = calloc((size_t)o->repeats, sizeof *sps);
    if (!sps) st = AMP_ERR_OUT_OF_MEMORY;
    const uint64_t allocs0 = amp_ctx_heap_allocations(r->ctx);
    for (long rep = 0; rep < o->repeats && st == AMP_OK; rep++) {
        const double t0 = amp_bench_now();
        for (long i = 0; i < o->steps && st == AMP_OK; i++) st = step(r, true);
        sps[rep] = (double)r->batch * (double)o->steps / (amp_bench_now() - t0);
    }
    const uint64_t allocs1 = amp_ctx_heap_allocations(r->ctx);
    if (st == AMP_OK) {
        f->median = amp_bench_median(sps, (size_t)o->repeats);
        f->ctx_allocs = (double)(allocs1 - allocs0) / (double)(o->steps * o->repeats);
    }
    free(sps);
    return st;
}

/* The rest of the figures, from the timed steps and f->median. */
static void summarize(const run *r, const options *o, figures *f) {
    const double threads = (double)o->threads;
    f->flops = amp_model_flops_per_sample(r->model);
    f->gflops = f->median * f->flops / 1e9;
    f->frac = f->peak1 > 0 ? f->gflops / (threads * f->peak1) : NAN;
    f->cflops = amp_model_flops_computed_per_sample(r->model, r->batch); /* what amp computes */
    f->cfrac = f->peak1 > 0 ? f->median * f->cflops / 1e9 / (threads * f->peak1) : NAN;
    f->tsum = r->t_fwd + r->t_bwd + r->t_opt;
    f->timed_steps = (double)(o->steps * o->repeats);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    f->rss_mib = (double)ru.ru_maxrss / 1024.0;
    f->arena_mib = (double)amp_ctx_arena_peak(r->ctx) / (1024.0 * 1024.0);
    f->act_mib = (double)r->act_bytes / (1024.0 * 1024.0);
    f->copy_mib = (double)r->copy_bytes / (1024.0 * 1024.0);
    amp_bench_cpu_name(f->cpu, sizeof f->cpu);
}

/* One JSON object on one line: bench/train_vs_pytorch.py reads these keys. */
static void report_json(const run *r, const options *o, const figures *f) {
    printf("{\"model\":\"%s\",\"precision\":\"%s\",\"scaler\":\"%s\",\"batch\":%lld,\"threads\":%ld,\"steps\":%ld,"
           "\"repeats\":%ld,\"isa\":\"%s\",\"cpu\":\"%s\",\"samples_per_sec\":%.3f,\"flops_per_sample\":%.6g,"
           "\"gflops\":%.3f,\"peak_kind\":\"%s\",\"peak_gflops_one_core\":%.3f,\"fraction_of_peak\":%.4f,"
           "\"computed_flops_per_sample\":%.6g,\"computed_fraction_of_peak\":%.4f,"
           "\"ms_per_step\":%.4f,\"forward_share\":%.4f,\"backward_share\":%.4f,\"optimizer_share\":%.4f,"
           "\"optimizer_ms\":%.4f,\"arena_peak_mib\":%.3f,\"peak_rss_mib\":%.3f,\"ctx_allocs_per_step\":%.3f,"
           "\"activation_mib\":%.3f,\"weight_copies_mib\":%.3f,\"params\":%lld}\n",
           amp_model_kind_name(o->kind), r->prec->name, r->scaling ? "dynamic" : "off", (long long)r->batch, o->threads,
           o->steps, o->repeats, amp_isa_name(amp_isa_active()), f->cpu, f->median, f->flops, f->gflops, f->peak_name,
           f->peak1, isnan(f->frac) ? 0.0 : f->frac, f->cflops, isnan(f->cfrac) ? 0.0 : f->cfrac,
           1e3 * (double)r->batch / f->median, r->t_fwd / f->tsum, r->t_bwd / f->tsum, r->t_opt / f->tsum,
           1e3 * r->t_opt / f->timed_steps, f->arena_mib, f->rss_mib, f->ctx_allocs, f->act_mib, f->copy_mib,
           (long long)amp_model_num_params(r->model));
}

static void report_text(const run *r, const options *o, const figures *f) {
    const long threads = o->threads;
    printf("cpu: %s; amp path %s; %ld thread%s\n", f->cpu, amp_isa_name(amp_isa_active()), threads,
           threads == 1 ? "" : "s");
    printf("model %s (%lld parameters), %s, scaler %s, batch %lld: %ld warm-up steps, median over %ld x %ld steps\n",
           amp_model_kind_name(o->kind), (long long)amp_model_num_params(r->model), r->prec->name,
           r->scaling ? "dynamic" : "off", (long long)r->batch, o->warmup, o->repeats, o->steps);
    printf("samples/s %.1f  (%.2f ms/step)\n", f->median, 1e3 * (double)r->batch / f->median);
    printf("FLOPs/sample %.4g (forward + backward)  ->  %.1f GFLOP/s", f->flops, f->gflops);
    if (f->peak1 > 0)
        printf(" = %.0f%% of %ld x the one-core %s peak (%.1f GFLOP/s)\n", 100 * f->frac, threads, f->peak_name, f->peak1);
    else
        printf("\n");
    if (f->cflops != f->flops) {
        printf("computed FLOPs/sample %.4g (amp's products at this batch)  ->  %.1f GFLOP/s", f->cflops,
               f->median * f->cflops / 1e9);
        if (f->peak1 > 0) printf(" = %.0f%% of the peak", 100 * f->cfrac);
        printf("\n");
    }
    printf("time: forward+loss %.0f%%  backward %.0f%%  optimizer%s %.0f%% (%.3f ms/step)\n", 100 * r->t_fwd / f->tsum,
           100 * r->t_bwd / f->tsum, r->scaling ? "+scaler" : "", 100 * r->t_opt / f->tsum,
           1e3 * r->t_opt / f->timed_steps);
    printf("memory: arena peak %.1f MiB, process peak RSS %.1f MiB; context heap allocations per step %.2f\n",
           f->arena_mib, f->rss_mib, f->ctx_allocs);
    printf("activations kept for backward %.1f MiB (less the batch; plus autocast's weight copies %.1f MiB)\n",
           f->act_mib, f->copy_mib);
}

int amp_bench_train(int argc, char **argv) {
    options o;
    const int parsed = parse_options(argc, argv, &o);
    if (parsed >= 0) return parsed;
    if (amp_cli_parse_only) return AMP_EXIT_OK;
    if (o.threads > 0) amp_set_num_threads((int)o.threads);
    o.threads = amp_get_num_threads();

    run r;
    memset(&r, 0, sizeof r);
    int st = setup(&r, &o);
    if (st != AMP_OK) {
        fprintf(stderr, "amp: bench train: set-up failed: %s\n", amp_status_str(st));
        run_free(&r);
        return AMP_EXIT_FAILURE;
    }
    st = fill_batch(&r);
    figures f;
    memset(&f, 0, sizeof f);
    f.peak_name = "fma";
    f.peak1 = o.want_peak ? amp_bench_peak_gflops(r.prec->autocast_dtype == AMP_BF16, &f.peak_name) : 0.0;
    if (st == AMP_OK) st = time_steps(&r, &o, &f);
    if (st != AMP_OK) {
        fprintf(stderr, "amp: bench train: step failed: %s %s\n", amp_ctx_error(r.ctx), amp_scaler_error(r.scaler));
    } else {
        summarize(&r, &o, &f);
        if (o.json)
            report_json(&r, &o, &f);
        else
            report_text(&r, &o, &f);
    }
    run_free(&r);
    return st == AMP_OK ? AMP_EXIT_OK : AMP_EXIT_FAILURE;
}
