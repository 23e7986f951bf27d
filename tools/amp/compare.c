/* `amp compare`: the same model, data and seed trained under several precision presets / scalers
 * (amp_train_run once per run), side by side: accuracy or bits/char, final loss, skipped steps, final
 * scale, how many gradient values underflow in fp16 (at scale 1 and at the scale used), samples/s. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "bench_util.h"
#include "commands.h"
#include "launch.h"
#include "train_flags.h"
#include "report.h"

#define MAX_COMPARE_RUNS 12
#define DEFAULT_RUNS "fp32,amp-fp16/dynamic,amp-fp16/off,amp-bf16,fp16-pure"

typedef struct compare_run {
    char label[48];
    amp_precision precision;
    amp_scaler_mode scaler;
    float static_scale;
    bool fp8_amax_init; /* fp8-delayed/amax-init */
    amp_train_result result;
} compare_run;

static void print_help(void) {
    char names[128];
    printf("usage: amp compare [--model %s] [--data PATH] [--runs LIST] [--json] [--report DIR]\n"
           "                   [--epochs N | --steps N] [--batch N] [--accum N] [--lr X] [--lr-schedule S] [--warmup N]\n"
           "                   [--seed N] [--threads N]\n"
           "                   [--hidden N] [--layers N] [--heads N] [--context N] [--embed N] [--eval-batches N] [--words N]\n"
           "                   [--quiet] [--fp8-all-layers] [--size S] [--init-from FILE] [--recompute]\n"
           "                   [--no-memory-check]\n"
           "Trains the same model from the same seed once per run and prints one table: test accuracy (image\n"
           "models) or bits/char (text models), final training loss, skipped steps, final loss scale, the\n"
           "fraction of gradient values that underflow to zero in fp16 at scale 1 and at the scale used, and\n"
           "samples/s.\n\n"
           "  --runs LIST        comma-separated PRECISION[/SCALER] (SCALER: dynamic, off, static:S; default: the\n"
           "                     preset's), or fp8-delayed/amax-init (torchao's amax init, as `amp train\n"
           "                     --fp8-amax-init`), default %s\n"
           "  --json             after the table, one JSON object per run (the keys of `amp train --json`)\n"
           "  --report DIR       metrics.jsonl, loss / loss-scale / gradient-histogram plots (PNG, SVG) of all\n"
           "                     runs overlaid, and index.html\n"
           "  --quiet            no progress on stderr\n"
           "  --fp8-all-layers   fp8 presets: the first and last Linear layers in fp8 too (default: bf16)\n"
           "  --size S           gpt2: 124m (default), 350m, 774m or 1558m, as `amp train --size`\n"
           "  --init-from FILE   gpt2: every run starts from this llm.c model file, as `amp train --init-from`\n"
           "  --recompute        gpt, gpt2: recompute each block in backward (less activation memory)\n"
           "  --no-memory-check  train even where the run's estimated memory exceeds what is available\n"
           "The training flags are those of `amp train` (see `amp train --help`). Exit status: 0 success,\n"
           "1 failure while training or writing the report, 2 bad usage or bad data.\n",
           amp_cli_model_names(names, sizeof names, "|", NULL), DEFAULT_RUNS);
}

/* "PRECISION[/SCALER]" or "fp8-delayed/amax-init" -> run. 0 or -1. */
static int parse_run(const char *spec, compare_run *run) {
    char buf[64];
    if (strlen(spec) >= sizeof buf || !*spec) return -1;
    strcpy(buf, spec);
    char *slash = strchr(buf, '/');
    if (slash) *slash = '\0';
    if (amp_precision_from_name(buf, &run->precision) != AMP_OK) return -1;
    run->scaler = AMP_SCALER_DEFAULT;
    run->static_scale = 0;
    run->fp8_amax_init = false;
    if (slash) {
        const char *v = slash + 1;
        double d;
        if (strcmp(v, "amax-init") == 0 && run->precision == AMP_PRECISION_FP8_DELAYED)
            run->fp8_amax_init = true;
        else if (strcmp(v, "dynamic") == 0)
            run->scaler = AMP_SCALER_DYNAMIC;
        else if (strcmp(v, "off") == 0)
            run->scaler = AMP_SCALER_OFF;
        else if (strncmp(v, "static:", 7) == 0 && amp_cli_parse_double(v + 7, &d) == 0 && d > 0 && d <= 3.4e38) {
            run->scaler = AMP_SCALER_STATIC;
            run->static_scale = (float)d;
        } else
            return -1;
    }
    snprintf(run->label, sizeof run->label, "%s", spec);
    return 0;
}

static int parse_runs(const char *list, compare_run *runs, int *n) {
    char buf[512];
    if (strlen(list) >= sizeof buf) return -1;
    strcpy(buf, list);
    *n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n >= MAX_COMPARE_RUNS || parse_run(tok, &runs[*n]) != 0) return -1;
        (*n)++;
    }
    return *n > 0 ? 0 : -1;
}

/* ---- progress (stderr) -------------------------------------------------------------------------- */

typedef struct progress_state {
    bool quiet, text;
    const char *label;
} progress_state;

static void on_progress(const amp_train_progress *p, void *user) {
    const progress_state *ps = user;
    if (ps->quiet || !p->is_eval) return;
    if (ps->text)
        fprintf(stderr, "  %s: epoch %lld/%lld  step %lld  loss %.4f  test loss %.4f  bits/char %.4f\n", ps->label,
                (long long)p->epoch, (long long)p->epochs, (long long)p->step, p->loss, p->test_loss, p->bits_per_char);
    else
        fprintf(stderr, "  %s: epoch %lld/%lld  step %lld  loss %.4f  test loss %.4f  accuracy %.2f%%\n", ps->label,
                (long long)p->epoch, (long long)p->epochs, (long long)p->step, p->loss, p->test_loss,
                100.0 * p->test_accuracy);
}

/* ---- output ------------------------------------------------------------------------------------- */

static void pct(char *buf, size_t size, double v, bool have) {
    if (have && isfinite(v))
        snprintf(buf, size, "%.2f%%", 100.0 * v);
    else
        snprintf(buf, size, "n/a");
}

static void print_table(const compare_run *runs, int n, bool text) {
    printf("%-22s %10s %10s %8s %11s %9s %11s %9s %8s %10s\n", "run", text ? "bits/char" : "test acc", "final loss",
           "skipped", "final scale", "uflow@1", "uflow@scale", "act@1", "stalled", "samples/s");
    for (int i = 0; i < n; i++) {
        const amp_train_result *r = &runs[i].result;
        char metric[32], u1[32], us[32], act[32], scale[32], stalled[32];
        if (text)
            snprintf(metric, sizeof metric, "%.4f", r->bits_per_char);
        else
            pct(metric, sizeof metric, r->test_accuracy, true);
        const bool stats = r->grad_stats_samples > 0;
        pct(u1, sizeof u1, r->grad_underflow_fp16_unscaled, stats);
        pct(us, sizeof us, r->grad_underflow_fp16_scaled, stats);
        pct(act, sizeof act, r->act_underflow_fp16_unscaled, stats);
        pct(stalled, sizeof stalled, r->stalled_updates, true);
        snprintf(scale, sizeof scale, "%g", (double)r->final_scale);
        printf("%-22s %10s %10.4f %8lld %11s %9s %11s %9s %8s %10.0f\n", runs[i].label, metric, r->train_loss,
               (long long)r->skipped_steps, scale, u1, us, act, stalled, r->samples_per_sec);
    }
    printf("uflow@1 / uflow@scale: nonzero parameter-gradient values that round to zero in fp16 without loss\n"
           "scaling / at the loss scale the run used; act@1: the same for the activation gradients flowing back\n"
           "through the ops, at scale 1 (means over the sampled steps; n/a: no gradient statistics). stalled (pure\n"
           "presets): parameter values whose update the fp16/bf16 weight did not keep (under half an ulp).\n");
}

/* ---- the command -------------------------------------------------------------------------------- */

int amp_cmd_compare(int argc, char **argv) {
    amp_model_kind kind; /* the first pass: --help, and --model (the defaults depend on it) */
    const int first = amp_train_first_pass("compare", argc, argv, print_help, &kind);
    if (first >= 0) return first;
    amp_train_config cfg = amp_train_default_config(kind);
    const int size_st = amp_train_apply_size("compare", argc, argv, &cfg.model); /* before --layers etc. */
    if (size_st >= 0) return size_st;
    bool json = false, quiet = false;
    const char *report_dir = NULL, *runs_list = DEFAULT_RUNS;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) { json = true; continue; }
        if (strcmp(a, "--quiet") == 0) { quiet = true; continue; }
        if (strcmp(a, "--fp8-all-layers") == 0) { cfg.fp8_all_layers = true; continue; }
        if (strcmp(a, "--recompute") == 0) { cfg.model.recompute = true; continue; }
        if (strcmp(a, "--no-memory-check") == 0) { cfg.skip_memory_check = true; continue; }
        if (strncmp(a, "--", 2) != 0) return amp_usage_error("compare", "unexpected argument '%s'", a);
        static const char *const with_value[] = {"--model", "--runs", "--report", "--lr", "--size", "--init-from"};
        bool known = amp_train_is_shared_flag(a);
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= strcmp(a, with_value[k]) == 0;
        if (!known) return amp_usage_error("compare", "unknown option '%s'", a);
        if (i + 1 >= argc) return amp_usage_error("compare", "%s needs a value", a);
        const char *v = argv[++i];
        double d = 0;
        if (amp_train_is_shared_flag(a)) {
            const int st = amp_train_shared_flag("compare", a, v, &cfg);
            if (st != AMP_EXIT_OK) return st;
        } else if (strcmp(a, "--model") == 0 || strcmp(a, "--size") == 0) {
            /* handled before this loop (the first pass; amp_train_apply_size) */
        } else if (strcmp(a, "--init-from") == 0) {
            cfg.init_from = v;
        } else if (strcmp(a, "--runs") == 0) {
            runs_list = v;
        } else if (strcmp(a, "--report") == 0) {
            report_dir = v;
        } else if (strcmp(a, "--lr") == 0) {
            if (amp_cli_parse_double(v, &d) != 0 || d < 0) return amp_usage_error("compare", "--lr wants a number >= 0, not '%s'", v);
            cfg.optim.lr = (float)d;
        }
    }
    if (cfg.init_from && cfg.model.kind != AMP_MODEL_GPT2)
        return amp_usage_error("compare", "--init-from applies to --model gpt2 only");
    if (cfg.model.recompute && cfg.model.kind != AMP_MODEL_GPT && cfg.model.kind != AMP_MODEL_GPT2)
        return amp_usage_error("compare", "--recompute applies to --model gpt and gpt2 only");
    compare_run runs[MAX_COMPARE_RUNS];
    int n_runs = 0;
    if (parse_runs(runs_list, runs, &n_runs) != 0)
        return amp_usage_error("compare",
                               "--runs wants a comma-separated list of PRECISION[/dynamic|/off|/static:S] or "
                               "fp8-delayed/amax-init (at most %d), "
                               "not '%s'",
                               MAX_COMPARE_RUNS, runs_list);
    if (amp_cli_parse_only) return AMP_EXIT_OK;
    if (amp_cli_mpi_ranks() > 1)
        return amp_usage_error("compare", "compare trains in one process; under mpirun use `amp train` (one "
                                          "configuration per launch)");

    char err[512];
    amp_report *rep = NULL;
    if (report_dir) {
        const int rs = amp_report_open(report_dir, &rep, err, sizeof err);
        if (rs == AMP_REPORT_BAD_PATH) return amp_usage_error("compare", "%s", err);
        if (rs != AMP_REPORT_OK) {
            fprintf(stderr, "amp: compare: %s\n", err);
            return AMP_EXIT_FAILURE;
        }
    }

    const bool text = amp_model_is_text(kind);
    for (int i = 0; i < n_runs; i++) {
        compare_run *run = &runs[i];
        amp_train_config c = cfg;
        c.precision = run->precision;
        c.scaler = run->scaler;
        c.static_scale = run->static_scale;
        c.fp8_amax_init = run->fp8_amax_init;
        progress_state ps = {.quiet = quiet, .text = text, .label = run->label};
        amp_train_callbacks cb = {.progress = on_progress, .user = &ps};
        if (rep) amp_report_begin_run(rep, run->label, &(amp_train_callbacks){.progress = on_progress, .user = &ps}, &cb);
        if (!quiet) fprintf(stderr, "run %d/%d: %s\n", i + 1, n_runs, run->label);
        memset(&run->result, 0, sizeof run->result);
        const int st = amp_train_run(&c, &cb, &run->result, err, sizeof err);
        if (st != AMP_OK) {
            fprintf(stderr, "amp: compare: %s: %s\n", run->label, err[0] ? err : amp_status_str(st));
            amp_report_discard(rep);
            return (st == AMP_ERR_IO || st == AMP_ERR_FORMAT || st == AMP_ERR_INVALID_ARGUMENT) ? AMP_EXIT_USAGE
                                                                                                : AMP_EXIT_FAILURE;
        }
        if (rep) amp_report_end_run(rep, &c, &run->result);
    }

    print_table(runs, n_runs, text);
    for (int i = 0; i < n_runs; i++) { /* fp8 presets: the worst layer's saturated and flushed shares */
        char line[256];
        if (*amp_cli_fp8_summary(&runs[i].result, line, sizeof line))
            printf("%-22s fp8 %d layers: %s\n", runs[i].label, runs[i].result.fp8_layers, line);
    }
    if (json)
        for (int i = 0; i < n_runs; i++) {
            amp_train_config c = cfg;
            c.precision = runs[i].precision;
            amp_report_json_result(stdout, runs[i].label, &c, &runs[i].result);
            putchar('\n');
        }
    if (rep) {
        char *dir = strdup(amp_report_dir(rep));
        if (amp_report_finish(rep, err, sizeof err) != AMP_REPORT_OK) {
            fprintf(stderr, "amp: compare: %s\n", err);
            free(dir);
            return AMP_EXIT_FAILURE;
        }
        if (!quiet) fprintf(stderr, "report: %s/index.html\n", dir ? dir : report_dir);
        free(dir);
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "amp: compare: cannot write the output\n");
        return AMP_EXIT_FAILURE;
    }
    return AMP_EXIT_OK;
}
