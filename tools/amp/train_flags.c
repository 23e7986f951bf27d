#include "train_flags.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "commands.h"

int amp_cli_parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int amp_cli_parse_u64(const char *s, uint64_t *out) {
    char *end;
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    const unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || errno != 0) return -1;
    *out = (uint64_t)v;
    return 0;
}

static const char *const shared_flags[] = {"--data",    "--seed",   "--batch",        "--epochs", "--steps",
                                           "--threads", "--accum",  "--eval-batches", "--hidden", "--layers",
                                           "--heads",   "--context", "--embed",   "--lr-schedule", "--warmup",
                                           "--words",   "--val-data", "--tokenizer", "--pattern", "--vocab",
                                           "--data-order", "--token-cache"};

bool amp_train_is_shared_flag(const char *flag) {
    for (size_t k = 0; k < sizeof shared_flags / sizeof shared_flags[0]; k++)
        if (strcmp(flag, shared_flags[k]) == 0) return true;
    return false;
}

int amp_train_shared_flag(const char *command, const char *a, const char *v, amp_train_config *cfg) {
    if (strcmp(a, "--data") == 0) {
        cfg->data = v;
        return AMP_EXIT_OK;
    }
    if (strcmp(a, "--seed") == 0) {
        if (amp_cli_parse_u64(v, &cfg->seed) != 0)
            return amp_usage_error(command, "--seed wants an integer >= 0, not '%s'", v);
        return AMP_EXIT_OK;
    }
    if (strcmp(a, "--val-data") == 0 || strcmp(a, "--tokenizer") == 0 || strcmp(a, "--token-cache") == 0) {
        if (strcmp(a, "--val-data") == 0) cfg->val_data = v;
        else if (strcmp(a, "--tokenizer") == 0) cfg->tokenizer = v;
        else cfg->token_cache = v;
        return AMP_EXIT_OK;
    }
    if (strcmp(a, "--pattern") == 0) {
        if (!amp_tokenizer_pattern_named(v)) return amp_usage_error(command, "--pattern wants gpt2 or cl100k, not '%s'", v);
        cfg->tokenizer_pattern = v;
        return AMP_EXIT_OK;
    }
    if (strcmp(a, "--data-order") == 0) {
        if (strcmp(v, "random") == 0) cfg->data_order = AMP_DATA_ORDER_RANDOM;
        else if (strcmp(v, "sequential") == 0) cfg->data_order = AMP_DATA_ORDER_SEQUENTIAL;
        else return amp_usage_error(command, "--data-order wants random or sequential, not '%s'", v);
        return AMP_EXIT_OK;
    }
    if (strcmp(a, "--lr-schedule") == 0) {
        if (strcmp(v, "constant") == 0) cfg->lr_schedule = AMP_LR_CONSTANT;
        else if (strcmp(v, "cosine") == 0) cfg->lr_schedule = AMP_LR_COSINE;
        else return amp_usage_error(command, "--lr-schedule wants constant or cosine, not '%s'", v);
        return AMP_EXIT_OK;
    }
    /* The rest are integers in a range. */
    long lo = strcmp(a, "--warmup") == 0 ? 0 : 1, hi = 1L << 20, n = 0;
    if (strcmp(a, "--steps") == 0) hi = 1L << 40;
    if (strcmp(a, "--threads") == 0) hi = AMP_MAX_THREADS;
    if (strcmp(a, "--words") == 0) hi = AMP_TEXT_MAX_WORDS;
    if (strcmp(a, "--vocab") == 0) hi = INT32_MAX;
    if (amp_parse_long(v, lo, hi, &n) != 0)
        return amp_usage_error(command, "%s wants an integer in [%ld, %ld], not '%s'", a, lo, hi, v);
    if (strcmp(a, "--batch") == 0) cfg->batch = n;
    else if (strcmp(a, "--epochs") == 0) cfg->epochs = n, cfg->steps = 0;
    else if (strcmp(a, "--steps") == 0) cfg->steps = n;
    else if (strcmp(a, "--threads") == 0) cfg->threads = (int)n;
    else if (strcmp(a, "--accum") == 0) cfg->accum = n;
    else if (strcmp(a, "--eval-batches") == 0) cfg->eval_batches = n;
    else if (strcmp(a, "--hidden") == 0) cfg->model.hidden = n;
    else if (strcmp(a, "--layers") == 0) cfg->model.layers = n;
    else if (strcmp(a, "--heads") == 0) cfg->model.heads = n;
    else if (strcmp(a, "--context") == 0) cfg->model.context = n;
    else if (strcmp(a, "--warmup") == 0) cfg->warmup_steps = n;
    else if (strcmp(a, "--words") == 0) cfg->text_words = (int)n;
    else if (strcmp(a, "--vocab") == 0) cfg->vocab = n;
    else cfg->model.embed = n;
    return AMP_EXIT_OK;
}

/* Appends s to buf (length *len, capacity size), truncating. */
static void append(char *buf, size_t size, size_t *len, const char *s) {
    const int n = snprintf(buf + *len, size - *len, "%s", s);
    if (n > 0) *len += (size_t)n < size - *len ? (size_t)n : size - *len - 1;
}

const char *amp_cli_model_names(char *buf, size_t size, const char *sep, const char *last_sep) {
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < AMP_MODEL_COUNT; k++) {
        if (k > 0) append(buf, size, &len, k == AMP_MODEL_COUNT - 1 && last_sep ? last_sep : sep);
        append(buf, size, &len, amp_model_kind_name((amp_model_kind)k));
    }
    return buf;
}

const char *amp_cli_model_help(char *buf, size_t size) {
    size_t len = 0;
    buf[0] = '\0';
    for (int text = 0; text < 2; text++) {
        int listed = 0;
        for (int k = 0; k < AMP_MODEL_COUNT; k++) {
            if (amp_model_is_text((amp_model_kind)k) != (text == 1)) continue;
            if (listed++ > 0) append(buf, size, &len, ", ");
            else if (len > 0) append(buf, size, &len, "; ");
            append(buf, size, &len, amp_model_kind_name((amp_model_kind)k));
            if (k == AMP_CLI_DEFAULT_MODEL) append(buf, size, &len, " (default)");
        }
        if (listed) append(buf, size, &len, text ? ": character language models" : ": image classifiers");
    }
    return buf;
}

int amp_train_first_pass(const char *command, int argc, char **argv, void (*help)(void), amp_model_kind *kind) {
    *kind = AMP_CLI_DEFAULT_MODEL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help();
            return AMP_EXIT_OK;
        }
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc && amp_model_kind_from_name(argv[i + 1], kind) != AMP_OK) {
            char names[128];
            return amp_usage_error(command, "unknown model '%s' (%s)", argv[i + 1],
                                   amp_cli_model_names(names, sizeof names, ", ", NULL));
        }
    }
    return -1;
}

int amp_train_apply_size(const char *command, int argc, char **argv, amp_model_config *model) {
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--size") != 0) continue;
        if (model->kind != AMP_MODEL_GPT2) return amp_usage_error(command, "--size applies to --model gpt2 only");
        if (amp_model_gpt2_size(argv[i + 1], model) != AMP_OK)
            return amp_usage_error(command, "--size wants 124m, 350m, 774m or 1558m, not '%s'", argv[i + 1]);
    }
    return -1;
}

/* ---- fp8 statistics ----------------------------------------------------------------------------- */

static double share(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * (double)part / (double)whole : 0.0; }

void amp_cli_print_fp8_table(FILE *out, const amp_train_result *r) {
    if (r->fp8_layers <= 0) return;
    fprintf(out, "fp8 casts (%s, %d layers): last step's amax and scale, scale range and saturated/flushed over the run\n",
            amp_precision_get_info(r->precision)->name, r->fp8_layers);
    fprintf(out, "%-24s %-2s %11s %11s %11s %11s %8s %8s\n", "layer", "t", "amax", "scale", "scale min", "scale max",
            "sat", "flush");
    const int n = r->fp8_layers < AMP_TRAIN_FP8_MAX_LAYERS ? r->fp8_layers : AMP_TRAIN_FP8_MAX_LAYERS;
    for (int i = 0; i < n; i++)
        for (int role = 0; role < AMP_FP8_ROLES; role++) {
            const amp_fp8_cast_stats *l = &r->fp8[i].last[role], *t = &r->fp8[i].total[role];
            fprintf(out, "%-24.24s %-2s %11.4g %11.4g %11.4g %11.4g %7.3f%% %7.3f%%\n", role == 0 ? r->fp8[i].name : "",
                    amp_fp8_tensor_role_name(role), (double)l->amax, (double)l->scale_min, (double)t->scale_min,
                    (double)t->scale_max, share(t->saturated, t->count), share(t->flushed, t->count));
        }
}

const char *amp_cli_fp8_summary(const amp_train_result *r, char *buf, size_t size) {
    buf[0] = '\0';
    if (r->fp8_layers <= 0) return buf;
    size_t len = 0;
    const int n = r->fp8_layers < AMP_TRAIN_FP8_MAX_LAYERS ? r->fp8_layers : AMP_TRAIN_FP8_MAX_LAYERS;
    for (int role = 0; role < AMP_FP8_ROLES; role++) {
        double sat = 0, flush = 0;
        for (int i = 0; i < n; i++) {
            const amp_fp8_cast_stats *t = &r->fp8[i].total[role];
            if (share(t->saturated, t->count) > sat) sat = share(t->saturated, t->count);
            if (share(t->flushed, t->count) > flush) flush = share(t->flushed, t->count);
        }
        char part[64];
        snprintf(part, sizeof part, "%s%s sat %.3f%% flush %.3f%%", role ? "  " : "", amp_fp8_tensor_role_name(role),
                 sat, flush);
        append(buf, size, &len, part);
    }
    return buf;
}
