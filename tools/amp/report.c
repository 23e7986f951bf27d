/* Reports of training runs: metrics.jsonl, PLplot plots (PNG and SVG) and index.html (report.h). */
#include "report.h"

#include <errno.h>
#include <math.h>
#include <plplot.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LABEL_MAX 64
#define MAX_RUNS 16

typedef struct run_series {
    char label[LABEL_MAX];
    /* per optimizer step */
    int64_t n, cap;
    double *step, *loss, *log2_scale;
    bool *skipped;
    /* per evaluation */
    int64_t n_eval, cap_eval;
    double *eval_step, *eval_loss;
    /* gradient histogram, summed over the sampled steps */
    int64_t hist[AMP_GRAD_HIST_BINS];
    int64_t act_hist[AMP_GRAD_HIST_BINS]; /* the activation gradients', likewise */
    int64_t hist_samples;
    int64_t prev_skipped;
    bool done;
    amp_train_result result;
    bool text;
} run_series;

struct amp_report {
    char *dir;
    FILE *metrics;      /* NULL until the first thing recorded (report_start) */
    bool start_failed;  /* report_start could not create the directory or metrics.jsonl */
    char start_err[512];
    bool write_failed;
    bool oom;
    int n_runs;
    run_series *runs[MAX_RUNS];
    run_series *cur;
    amp_train_callbacks inner;
};

static void set_err(char *err, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void set_err(char *err, size_t size, const char *fmt, ...) {
    if (!err || size == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
}

enum { PATH_BUF = 4096 };

/* path into buf (PATH_BUF bytes), for cutting at each '/': its length, or -1 with errno when empty or
 * too long. */
static int64_t path_copy(char *buf, const char *path) {
    const size_t len = strlen(path);
    if (len == 0 || len >= PATH_BUF) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, len + 1);
    return (int64_t)len;
}

/* mkdir -p. 0, or -1 with errno. */
static int make_dirs(const char *path) {
    char buf[PATH_BUF];
    const int64_t n = path_copy(buf, path);
    if (n < 0) return -1;
    const size_t len = (size_t)n;
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        const char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        buf[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* What make_dirs(path) would meet, creating nothing: 0 when every prefix of path that exists is a
 * directory and the deepest one can be written in and searched, else -1 with errno (ENOTDIR, EACCES,
 * ...). */
static int check_dirs(const char *path) {
    char buf[PATH_BUF];
    const int64_t n = path_copy(buf, path);
    if (n < 0) return -1;
    const size_t len = (size_t)n;
    size_t exists = 0; /* length of the deepest prefix that exists (0: none, the start directory) */
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        const char c = buf[i];
        buf[i] = '\0';
        struct stat st;
        const int found = stat(buf, &st);
        buf[i] = c;
        if (found != 0) {
            if (errno == ENOENT) break; /* this one and those below it would be created */
            return -1;
        }
        if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            return -1;
        }
        exists = i;
    }
    if (exists == 0) return access(path[0] == '/' ? "/" : ".", W_OK | X_OK);
    buf[exists] = '\0';
    return access(buf, W_OK | X_OK);
}

static char *join(const char *dir, const char *name) {
    const size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

const char *amp_report_dir(const amp_report *rep) { return rep->dir; }

void amp_report_config_label(const amp_train_config *cfg, char *buf, size_t size) {
    const char *p = amp_precision_get_info(cfg->precision)->name;
    if (cfg->scaler == AMP_SCALER_STATIC)
        snprintf(buf, size, "%s/static:%.9g", p, (double)cfg->static_scale);
    else if (cfg->scaler != AMP_SCALER_DEFAULT)
        snprintf(buf, size, "%s/%s", p, amp_scaler_mode_name(cfg->scaler));
    else
        snprintf(buf, size, "%s", p);
}

int amp_report_open(const char *dir, amp_report **out, char *err, size_t err_size) {
    *out = NULL;
    if (!dir || !*dir) {
        set_err(err, err_size, "--report wants a directory, not an empty string");
        return AMP_REPORT_BAD_PATH;
    }
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        set_err(err, err_size, "--report: '%s' exists and is not a directory", dir);
        return AMP_REPORT_BAD_PATH;
    }
    if (check_dirs(dir) != 0) {
        set_err(err, err_size, "cannot create the report directory '%s': %s", dir, strerror(errno));
        return AMP_REPORT_FAILED;
    }
    amp_report *rep = calloc(1, sizeof *rep);
    if (!rep || !(rep->dir = strdup(dir))) {
        free(rep);
        set_err(err, err_size, "out of memory");
        return AMP_REPORT_FAILED;
    }
    *out = rep;
    return AMP_REPORT_OK;
}

/* Creates the directory and metrics.jsonl when the first thing is recorded, so that a run refused
 * before it starts (the memory check, bad data) leaves no directory and truncates no earlier
 * report. false, with the message kept for amp_report_finish, when that fails. */
static bool report_start(amp_report *rep) {
    if (rep->metrics) return true;
    if (rep->start_failed) return false;
    rep->start_failed = true;
    if (make_dirs(rep->dir) != 0) {
        set_err(rep->start_err, sizeof rep->start_err, "cannot create the report directory '%s': %s", rep->dir,
                strerror(errno));
        return false;
    }
    char *path = join(rep->dir, "metrics.jsonl");
    if (!path) {
        set_err(rep->start_err, sizeof rep->start_err, "out of memory");
        return false;
    }
    rep->metrics = fopen(path, "w");
    if (!rep->metrics) set_err(rep->start_err, sizeof rep->start_err, "cannot write '%s': %s", path, strerror(errno));
    free(path);
    rep->start_failed = !rep->metrics;
    return rep->metrics != NULL;
}

static void free_series(run_series *s) {
    if (!s) return;
    free(s->step), free(s->loss), free(s->log2_scale), free(s->skipped);
    free(s->eval_step), free(s->eval_loss);
    free(s);
}

void amp_report_discard(amp_report *rep) {
    if (!rep) return;
    if (rep->metrics) fclose(rep->metrics);
    for (int i = 0; i < rep->n_runs; i++) free_series(rep->runs[i]);
    free(rep->dir);
    free(rep);
}

/* ---- JSON --------------------------------------------------------------------------------------- */

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, const char *key, double v, bool last) {
    if (isfinite(v))
        fprintf(f, "\"%s\": %.17g%s", key, v, last ? "" : ", ");
    else
        fprintf(f, "\"%s\": null%s", key, last ? "" : ", ");
}

void amp_report_scaler_spelling(const amp_train_result *r, char *buf, size_t size) {
    if (r->scaler == AMP_SCALER_STATIC)
        snprintf(buf, size, "static:%.9g", (double)r->static_scale);
    else
        snprintf(buf, size, "%s", amp_scaler_mode_name(r->scaler));
}

static const char *optim_name(amp_optim_kind k) {
    return k == AMP_OPTIM_SGD ? "sgd" : k == AMP_OPTIM_ADAM ? "adam" : "adamw";
}

/* "fp8": [{"layer": name, "x": [amax, scale, scale_min, scale_max, saturated, flushed, count], "w": ...,
 * "dy": ...}, ...] from each layer's `last` (amax, scale: the step's) and `total` (the range and counts
 * so far); nothing when there are none. */
static void json_fp8(FILE *f, const amp_train_fp8_layer *layers, int n) {
    if (n <= 0 || !layers) return;
    if (n > AMP_TRAIN_FP8_MAX_LAYERS) n = AMP_TRAIN_FP8_MAX_LAYERS;
    fprintf(f, "\"fp8\": [");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s{\"layer\": ", i ? ", " : "");
        json_string(f, layers[i].name);
        for (int role = 0; role < AMP_FP8_ROLES; role++) {
            const amp_fp8_cast_stats *l = &layers[i].last[role], *t = &layers[i].total[role];
            fprintf(f, ", \"%s\": [%.9g, %.9g, %.9g, %.9g, %lld, %lld, %lld]", amp_fp8_tensor_role_name(role),
                    (double)l->amax, (double)l->scale_min, (double)t->scale_min, (double)t->scale_max,
                    (long long)t->saturated, (long long)t->flushed, (long long)t->count);
        }
        fputc('}', f);
    }
    fprintf(f, "], ");
}

/* The keys of a result object, without braces. */
static void json_body(FILE *f, const char *label, const amp_train_config *c, const amp_train_result *r) {
    char scaler[64];
    amp_report_scaler_spelling(r, scaler, sizeof scaler);
    if (label) {
        fprintf(f, "\"run\": ");
        json_string(f, label);
        fprintf(f, ", ");
    }
    fprintf(f, "\"model\": \"%s\", \"precision\": \"%s\", \"scaler\": \"%s\", \"optimizer\": \"%s\", ",
            amp_model_kind_name(r->model), amp_precision_get_info(r->precision)->name, scaler, optim_name(c->optim.kind));
    json_num(f, "lr", c->optim.lr, false);
    fprintf(f, "\"batch\": %lld, \"accum\": %lld, \"seed\": %llu, \"threads\": %d, \"params\": %lld, ",
            (long long)r->batch, (long long)r->accum, (unsigned long long)c->seed, amp_get_num_threads(),
            (long long)r->num_params);
    fprintf(f, "\"steps\": %lld, \"epochs\": %lld, \"skipped_steps\": %lld, ", (long long)r->steps,
            (long long)r->epochs, (long long)r->skipped_steps);
    json_num(f, "final_scale", r->final_scale, false);
    json_num(f, "train_loss", r->train_loss, false);
    json_num(f, "test_loss", r->test_loss, false);
    json_num(f, "test_accuracy", r->test_accuracy, false);
    json_num(f, "bits_per_char", r->bits_per_char, false);
    const bool stats = r->grad_stats_samples > 0;
    json_num(f, "grad_underflow_fp16_unscaled", stats ? r->grad_underflow_fp16_unscaled : NAN, false);
    json_num(f, "grad_underflow_fp16_scaled", stats ? r->grad_underflow_fp16_scaled : NAN, false);
    json_num(f, "grad_overflow_fp16_scaled", stats ? r->grad_overflow_fp16_scaled : NAN, false);
    json_num(f, "act_underflow_fp16_unscaled", stats ? r->act_underflow_fp16_unscaled : NAN, false);
    json_num(f, "stalled_updates", r->stalled_updates, false);
    fprintf(f, "\"ranks\": %d, \"injected_steps\": %lld, ", r->ranks, (long long)r->injected_steps);
    fprintf(f, "\"optimizer_state_bytes\": %lld, ", (long long)r->optimizer_state_bytes);
    fprintf(f, "\"grad_wire_bytes\": %lld, ", (long long)r->grad_wire_bytes);
    json_fp8(f, r->fp8, r->fp8_layers);
    json_num(f, "samples_per_sec", r->samples_per_sec, false);
    fprintf(f, "\"peak_rss_bytes\": %lld, \"arena_peak_bytes\": %zu, \"scratch_peak_bytes\": %zu, \"param_bytes\": %zu, ",
            (long long)r->peak_rss_bytes, r->arena_peak_bytes, r->scratch_peak_bytes, r->param_bytes);
    json_num(f, "wall_seconds", r->wall_seconds, true);
}

void amp_report_json_result(FILE *f, const char *label, const amp_train_config *c, const amp_train_result *r) {
    fputc('{', f);
    json_body(f, label, c, r);
    fputc('}', f);
}

/* ---- recording ---------------------------------------------------------------------------------- */

static int grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 0;
    int64_t n = *cap ? *cap * 2 : 256;
    while (n < need) n *= 2;
    void *q = realloc(*p, (size_t)n * elem);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

static void record_step(amp_report *rep, run_series *s, const amp_train_progress *p) {
    const int64_t need = s->n + 1;
    int64_t cap = s->cap, c2 = s->cap, c3 = s->cap, c4 = s->cap;
    if (grow((void **)&s->step, &cap, need, sizeof(double)) || grow((void **)&s->loss, &c2, need, sizeof(double)) ||
        grow((void **)&s->log2_scale, &c3, need, sizeof(double)) || grow((void **)&s->skipped, &c4, need, sizeof(bool))) {
        rep->oom = true;
        return;
    }
    s->cap = cap;
    const bool skipped = p->skipped > s->prev_skipped;
    s->prev_skipped = p->skipped;
    s->step[s->n] = (double)p->step;
    s->loss[s->n] = p->loss;
    s->log2_scale[s->n] = p->scale > 0 ? log2((double)p->scale) : NAN;
    s->skipped[s->n] = skipped;
    s->n++;
    FILE *f = rep->metrics;
    fprintf(f, "{\"type\": \"step\", \"run\": ");
    json_string(f, s->label);
    fprintf(f, ", \"epoch\": %lld, \"step\": %lld, ", (long long)p->epoch, (long long)p->step);
    json_num(f, "loss", p->last_loss, false);
    json_num(f, "smoothed_loss", p->loss, false);
    json_num(f, "scale", p->scale, false);
    fprintf(f, "\"skipped\": %s, \"skipped_total\": %lld}\n", skipped ? "true" : "false", (long long)p->skipped);
}

static void record_eval(amp_report *rep, run_series *s, const amp_train_progress *p) {
    const int64_t need = s->n_eval + 1;
    int64_t c1 = s->cap_eval, c2 = s->cap_eval;
    if (grow((void **)&s->eval_step, &c1, need, sizeof(double)) || grow((void **)&s->eval_loss, &c2, need, sizeof(double))) {
        rep->oom = true;
        return;
    }
    s->cap_eval = c1;
    s->eval_step[s->n_eval] = (double)p->step;
    s->eval_loss[s->n_eval] = p->test_loss;
    s->n_eval++;
    FILE *f = rep->metrics;
    fprintf(f, "{\"type\": \"eval\", \"run\": ");
    json_string(f, s->label);
    fprintf(f, ", \"epoch\": %lld, \"step\": %lld, ", (long long)p->epoch, (long long)p->step);
    json_num(f, "test_loss", p->test_loss, false);
    json_num(f, "test_accuracy", p->test_accuracy, false);
    json_num(f, "bits_per_char", p->bits_per_char, true);
    fprintf(f, "}\n");
}

/* "key": bins as [floor(log2 |g|), count] pairs, nonzero bins only. */
static void json_bins(FILE *f, const char *key, const int64_t *bins, bool last) {
    fprintf(f, "\"%s\": [", key);
    bool first = true;
    for (int k = 0; k < AMP_GRAD_HIST_BINS; k++) {
        if (bins[k] == 0) continue;
        fprintf(f, "%s[%d, %lld]", first ? "" : ", ", AMP_GRAD_HIST_MIN_EXP + k, (long long)bins[k]);
        first = false;
    }
    fprintf(f, "]%s", last ? "" : ", ");
}

static void record_hist(amp_report *rep, run_series *s, const amp_grad_stats *g) {
    for (int k = 0; k < AMP_GRAD_HIST_BINS; k++) s->hist[k] += g->bins[k], s->act_hist[k] += g->act_bins[k];
    s->hist_samples++;
    FILE *f = rep->metrics;
    fprintf(f, "{\"type\": \"grad_hist\", \"run\": ");
    json_string(f, s->label);
    fprintf(f, ", \"step\": %lld, ", (long long)g->step);
    json_num(f, "scale", g->scale, false);
    fprintf(f, "\"count\": %lld, \"zeros\": %lld, \"nonfinite\": %lld, ", (long long)g->count, (long long)g->zeros,
            (long long)g->nonfinite);
    json_num(f, "underflow_fp16_unscaled", g->underflow_fp16_unscaled, false);
    json_num(f, "underflow_fp16_scaled", g->underflow_fp16_scaled, false);
    json_num(f, "overflow_fp16_scaled", g->overflow_fp16_scaled, false);
    json_num(f, "act_underflow_fp16_unscaled", g->act_underflow_fp16_unscaled, false);
    /* activation gradients by op: {"op": [values, zeros, underflows]} for the ops that had any */
    fprintf(f, "\"act_by_op\": {");
    bool first_op = true;
    for (int k = 0; k < AMP_OP_COUNT; k++) {
        if (g->act_count[k] == 0) continue;
        fprintf(f, "%s\"%s\": [%lld, %lld, %lld]", first_op ? "" : ", ", amp_op_name((amp_op)k), (long long)g->act_count[k],
                (long long)g->act_zeros[k], (long long)g->act_underflow[k]);
        first_op = false;
    }
    fprintf(f, "}, ");
    json_bins(f, "log2_bins", g->bins, false);
    json_bins(f, "act_log2_bins", g->act_bins, true); /* the activation gradients' (|g| / S) */
    fprintf(f, "}\n");
}

static void on_progress(const amp_train_progress *p, void *user) {
    amp_report *rep = user;
    run_series *s = rep->cur;
    if (s && report_start(rep)) {
        if (p->is_eval)
            record_eval(rep, s, p);
        else {
            record_step(rep, s, p);
            if (p->grad_stats && p->grad_stats->step > 0) record_hist(rep, s, p->grad_stats);
            if (p->grad_stats && p->fp8_layers > 0) { /* fp8 casts, on the gradient statistics' schedule */
                fprintf(rep->metrics, "{\"type\": \"fp8\", \"run\": ");
                json_string(rep->metrics, s->label);
                fprintf(rep->metrics, ", \"step\": %lld, ", (long long)p->step);
                json_fp8(rep->metrics, p->fp8, p->fp8_layers);
                fprintf(rep->metrics, "\"layers\": %d}\n", p->fp8_layers);
            }
        }
    }
    if (rep->inner.progress) rep->inner.progress(p, rep->inner.user);
}

int amp_report_begin_run(amp_report *rep, const char *label, const amp_train_callbacks *inner,
                         amp_train_callbacks *out) {
    rep->inner = inner ? *inner : (amp_train_callbacks){.progress = NULL, .user = NULL};
    *out = (amp_train_callbacks){.progress = on_progress, .user = rep};
    rep->cur = NULL;
    if (rep->n_runs >= MAX_RUNS) return AMP_REPORT_FAILED;
    run_series *s = calloc(1, sizeof *s);
    if (!s) {
        rep->oom = true;
        return AMP_REPORT_FAILED;
    }
    snprintf(s->label, sizeof s->label, "%s", label);
    rep->runs[rep->n_runs++] = s;
    rep->cur = s;
    return AMP_REPORT_OK;
}

int amp_report_end_run(amp_report *rep, const amp_train_config *cfg, const amp_train_result *r) {
    run_series *s = rep->cur;
    if (!s || !report_start(rep)) return AMP_REPORT_FAILED;
    s->result = *r;
    s->done = true;
    s->text = amp_model_is_text(r->model);
    /* runs without per-step samples in the callbacks still get the latest histogram */
    if (s->hist_samples == 0 && r->grad_stats_samples > 0 && r->grad_stats.step > 0) {
        for (int k = 0; k < AMP_GRAD_HIST_BINS; k++)
            s->hist[k] = r->grad_stats.bins[k], s->act_hist[k] = r->grad_stats.act_bins[k];
        s->hist_samples = 1;
    }
    fprintf(rep->metrics, "{\"type\": \"summary\", ");
    json_body(rep->metrics, s->label, cfg, r);
    fputs("}\n", rep->metrics);
    rep->cur = NULL;
    if (fflush(rep->metrics) != 0) rep->write_failed = true;
    return rep->write_failed ? AMP_REPORT_FAILED : AMP_REPORT_OK;
}

/* ---- plots -------------------------------------------------------------------------------------- */

/* Run colours (cmap0 indices 1..), Okabe-Ito-like. */
static const int palette[][3] = {{0, 0, 0},       {230, 159, 0}, {86, 180, 233}, {0, 158, 115},
                                 {213, 94, 0},    {0, 114, 178}, {204, 121, 167}, {120, 120, 120}};
enum { N_COLORS = sizeof palette / sizeof palette[0], GRAY = 15 };

typedef enum { PLOT_LOSS, PLOT_SCALE, PLOT_HIST, PLOT_ACT_HIST } plot_kind;

static void start_page(const char *dev, const char *file) {
    plsdev(dev);
    plsfnam(file);
    plspage(0, 0, 900, 540, 0, 0);
    plscolbg(255, 255, 255);
    plinit();
    for (int i = 0; i < N_COLORS; i++) plscol0(1 + i, palette[i][0], palette[i][1], palette[i][2]);
    plscol0(GRAY, 150, 150, 150);
    plscol0(0, 255, 255, 255);
}

static int run_color(int i) { return 1 + (i % N_COLORS); }

static void legend(run_series *const *runs, int n, bool top_right) {
    PLINT opt[MAX_RUNS], tcol[MAX_RUNS], lcol[MAX_RUNS], lsty[MAX_RUNS], dummy[MAX_RUNS];
    PLFLT lw[MAX_RUNS], dummyf[MAX_RUNS];
    const char *text[MAX_RUNS], *sym[MAX_RUNS];
    for (int i = 0; i < n; i++) {
        opt[i] = PL_LEGEND_LINE;
        tcol[i] = 1;
        lcol[i] = run_color(i);
        lsty[i] = 1;
        lw[i] = 2.0;
        dummy[i] = 0;
        dummyf[i] = 1.0;
        text[i] = runs[i]->label;
        sym[i] = "";
    }
    PLFLT w, h;
    pllegend(&w, &h, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX,
             top_right ? (PL_POSITION_TOP | PL_POSITION_RIGHT | PL_POSITION_INSIDE)
                       : (PL_POSITION_TOP | PL_POSITION_LEFT | PL_POSITION_INSIDE),
             0.02, 0.02, 0.1, 0, 1, 1, 0, 0, n, opt, 1.0, 0.8, 2.0, 1.0, tcol, text, NULL, NULL, NULL, NULL,
             lcol, lsty, lw, dummy, dummyf, dummy, sym);
}

/* Draws the finite stretches of (x, y) as lines. */
static void finite_lines(const double *x, const double *y, int64_t n) {
    int64_t i = 0;
    while (i < n) {
        while (i < n && !isfinite(y[i])) i++;
        int64_t j = i;
        while (j < n && isfinite(y[j])) j++;
        if (j - i >= 2)
            plline((PLINT)(j - i), x + i, y + i);
        else if (j - i == 1)
            plpoin(1, x + i, y + i, 1);
        i = j;
    }
}

static double max_step(run_series *const *runs, int n) {
    double m = 1;
    for (int i = 0; i < n; i++)
        if (runs[i]->n > 0 && runs[i]->step[runs[i]->n - 1] > m) m = runs[i]->step[runs[i]->n - 1];
    return m;
}

static void plot_loss(run_series *const *runs, int n) {
    double ymax = 0;
    for (int i = 0; i < n; i++)
        for (int64_t k = 0; k < runs[i]->n; k++)
            if (isfinite(runs[i]->loss[k]) && runs[i]->loss[k] > ymax) ymax = runs[i]->loss[k];
    if (ymax <= 0) ymax = 1;
    plcol0(1);
    plenv(0, max_step(runs, n), 0, ymax * 1.05, 0, 0);
    pllab("optimizer step", "training loss (smoothed)", "Training loss");
    for (int i = 0; i < n; i++) {
        plcol0(run_color(i));
        plwidth(2.0);
        finite_lines(runs[i]->step, runs[i]->loss, runs[i]->n);
        plwidth(1.0);
    }
    legend(runs, n, true);
}

static void plot_scale(run_series *const *runs, int n) {
    double lo = 0, hi = 1;
    for (int i = 0; i < n; i++)
        for (int64_t k = 0; k < runs[i]->n; k++) {
            const double v = runs[i]->log2_scale[k];
            if (!isfinite(v)) continue;
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
    lo = floor(lo) - 1, hi = ceil(hi) + 2;
    plcol0(1);
    plenv(0, max_step(runs, n), lo, hi, 0, 0);
    pllab("optimizer step", "log#d2#u(loss scale)", "Loss scale (x: skipped step)");
    for (int i = 0; i < n; i++) {
        run_series *s = runs[i];
        plcol0(run_color(i));
        plwidth(2.0);
        finite_lines(s->step, s->log2_scale, s->n);
        plwidth(1.0);
        for (int64_t k = 0; k < s->n; k++)
            if (s->skipped[k] && isfinite(s->log2_scale[k])) plpoin(1, s->step + k, s->log2_scale + k, 5);
    }
    legend(runs, n, true);
}

/* A dashed vertical line at x with a horizontal label at height `at` (fraction of the axis), to the
 * right of the line (just 0) or to its left (just 1). */
static void vline(double x, double ylo, double yhi, double at, double just, const char *text) {
    const PLFLT xs[2] = {x, x}, ys[2] = {ylo, yhi};
    plcol0(GRAY);
    pllsty(2);
    plline(2, xs, ys);
    pllsty(1);
    plschr(0, 0.8);
    plptex(x + (just > 0.5 ? -0.5 : 0.5), ylo + (yhi - ylo) * at, 1, 0, just, text);
    plschr(0, 1.0);
}

/* act: the activation gradients' histogram instead of the parameters'. */
static void plot_hist(run_series *const *runs, int n, bool act) {
#define HIST(r) (act ? (r)->act_hist : (r)->hist)
    /* the x range: the occupied bins, widened to show fp16's limits */
    const double sub = log2((double)amp_fp16_to_fp32(0x0001));
    const double norm = log2((double)amp_fp16_to_fp32(0x0400));
    const double maxv = log2((double)amp_fp16_to_fp32((uint16_t)amp_dtype_get_info(AMP_F16)->max_finite_bits));
    int kmin = AMP_GRAD_HIST_BINS, kmax = -1;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < AMP_GRAD_HIST_BINS; k++)
            if (HIST(runs[i])[k]) {
                if (k < kmin) kmin = k;
                if (k > kmax) kmax = k;
            }
    double xlo = sub - 6, xhi = maxv + 2;
    if (kmax >= 0) {
        if (AMP_GRAD_HIST_MIN_EXP + kmin - 1 < xlo) xlo = AMP_GRAD_HIST_MIN_EXP + kmin - 1;
        if (AMP_GRAD_HIST_MIN_EXP + kmax + 2 > xhi) xhi = AMP_GRAD_HIST_MIN_EXP + kmax + 2;
    }
    double ymax = 0;
    for (int i = 0; i < n; i++) {
        int64_t total = 0;
        for (int k = 0; k < AMP_GRAD_HIST_BINS; k++) total += HIST(runs[i])[k];
        for (int k = 0; k < AMP_GRAD_HIST_BINS && total > 0; k++) {
            const double f = 100.0 * (double)HIST(runs[i])[k] / (double)total;
            if (f > ymax) ymax = f;
        }
    }
    if (ymax <= 0) ymax = 1;
    ymax *= 1.15;
    plcol0(1);
    plenv(xlo, xhi, 0, ymax, 0, 0);
    pllab("log#d2#u |gradient| (unscaled; bin k holds 2#uk#d <= |g| < 2#uk+1#d)", "% of nonzero gradient values",
          kmax < 0    ? "Gradient magnitudes: no samples (n/a)"
          : act       ? "Activation-gradient magnitudes (all sampled steps)"
                      : "Parameter-gradient magnitudes (all sampled steps)");
    char t_sub[64], t_norm[64], t_max[64];
    snprintf(t_sub, sizeof t_sub, "fp16 min subnormal 2#u%d#d", (int)sub);
    snprintf(t_norm, sizeof t_norm, "fp16 min normal 2#u%d#d", (int)norm);
    snprintf(t_max, sizeof t_max, "fp16 max %.0f", exp2(maxv));
    vline(sub, 0, ymax, 0.55, 1, t_sub);
    vline(norm, 0, ymax, 0.95, 0, t_norm);
    vline(maxv, 0, ymax, 0.85, 1, t_max); /* below the min-normal label, which can sit close */
    for (int i = 0; i < n; i++) {
        int64_t total = 0;
        for (int k = 0; k < AMP_GRAD_HIST_BINS; k++) total += HIST(runs[i])[k];
        if (total == 0) continue;
        /* a step outline: (e, f) to (e + 1, f) for each bin */
        PLFLT xs[2 * AMP_GRAD_HIST_BINS + 2], ys[2 * AMP_GRAD_HIST_BINS + 2];
        int m = 0;
        for (int k = 0; k < AMP_GRAD_HIST_BINS; k++) {
            const double e = AMP_GRAD_HIST_MIN_EXP + k;
            if (e + 1 < xlo || e > xhi) continue;
            const double f = 100.0 * (double)HIST(runs[i])[k] / (double)total;
            xs[m] = e, ys[m] = f, m++;
            xs[m] = e + 1, ys[m] = f, m++;
        }
        plcol0(run_color(i));
        plwidth(2.0);
        if (m >= 2) plline(m, xs, ys);
        plwidth(1.0);
    }
    legend(runs, n, false);
}
#undef HIST

static int draw(const char *dir, const char *name, plot_kind kind, run_series *const *runs, int n, char *err,
                size_t err_size) {
    static const char *const ext[2] = {"png", "svg"}, *const dev[2] = {"pngcairo", "svgcairo"};
    for (int d = 0; d < 2; d++) {
        char file[64];
        snprintf(file, sizeof file, "%s.%s", name, ext[d]);
        char *path = join(dir, file);
        if (!path) {
            set_err(err, err_size, "out of memory");
            return -1;
        }
        /* PLplot exits on a file it cannot open: check first. */
        FILE *f = fopen(path, "wb");
        if (!f) {
            set_err(err, err_size, "cannot write '%s': %s", path, strerror(errno));
            free(path);
            return -1;
        }
        fclose(f);
        start_page(dev[d], path);
        if (kind == PLOT_LOSS)
            plot_loss(runs, n);
        else if (kind == PLOT_SCALE)
            plot_scale(runs, n);
        else
            plot_hist(runs, n, kind == PLOT_ACT_HIST);
        plend();
        struct stat st;
        if (stat(path, &st) != 0 || st.st_size == 0) {
            set_err(err, err_size, "PLplot wrote nothing to '%s'", path);
            free(path);
            return -1;
        }
        free(path);
    }
    return 0;
}

/* ---- index.html --------------------------------------------------------------------------------- */

static void html_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else
            fputc(*s, f);
    }
}

static void pct_cell(FILE *f, double v, bool have) {
    if (have && isfinite(v))
        fprintf(f, "<td>%.2f%%</td>", 100.0 * v);
    else
        fputs("<td>n/a</td>", f);
}

/* The fp8 runs' casts: per run and layer, the saturated and flushed shares of x, W and dY over the
 * run and the last step's scales. Nothing without an fp8 run. */
static void write_fp8_table(FILE *f, const amp_report *rep) {
    bool any = false;
    for (int i = 0; i < rep->n_runs; i++) any |= rep->runs[i]->done && rep->runs[i]->result.fp8_layers > 0;
    if (!any) return;
    fputs("<h2>FP8 casts</h2>\n<table>\n<tr><th>run</th><th>layer</th><th>x sat / flush</th><th>w sat / flush</th>"
          "<th>dY sat / flush</th><th>x, w, dY scale (last step)</th></tr>\n",
          f);
    for (int i = 0; i < rep->n_runs; i++) {
        const amp_train_result *r = &rep->runs[i]->result;
        const int n = r->fp8_layers < AMP_TRAIN_FP8_MAX_LAYERS ? r->fp8_layers : AMP_TRAIN_FP8_MAX_LAYERS;
        for (int k = 0; rep->runs[i]->done && k < n; k++) {
            fputs("<tr><td>", f);
            html_text(f, rep->runs[i]->label);
            fputs("</td><td>", f);
            html_text(f, r->fp8[k].name);
            fputs("</td>", f);
            for (int role = 0; role < AMP_FP8_ROLES; role++) {
                const amp_fp8_cast_stats *t = &r->fp8[k].total[role];
                const double c = t->count > 0 ? (double)t->count : 1.0;
                fprintf(f, "<td>%.3f%% / %.3f%%</td>", 100.0 * (double)t->saturated / c, 100.0 * (double)t->flushed / c);
            }
            fprintf(f, "<td>%.4g, %.4g, %.4g</td></tr>\n", (double)r->fp8[k].last[0].scale_min,
                    (double)r->fp8[k].last[1].scale_min, (double)r->fp8[k].last[2].scale_min);
        }
    }
    fputs("</table>\n<p>sat: values whose scaled magnitude exceeded the fp8 maximum (clipped); flush: nonzero "
          "values that became zero; over every cast of the run. Block recipes: the smallest block scale.</p>\n",
          f);
}

static int write_index(const amp_report *rep, char *err, size_t err_size) {
    char *path = join(rep->dir, "index.html");
    if (!path) {
        set_err(err, err_size, "out of memory");
        return -1;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        set_err(err, err_size, "cannot write '%s': %s", path, strerror(errno));
        free(path);
        return -1;
    }
    fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>amp report</title>\n"
          "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
          "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child{text-align:left}"
          "img{max-width:100%}</style></head><body>\n<h1>amp report</h1>\n",
          f);
    bool text = false;
    for (int i = 0; i < rep->n_runs; i++) text |= rep->runs[i]->text;
    fprintf(f, "<table>\n<tr><th>run</th><th>model</th><th>%s</th><th>final loss</th><th>test loss</th>"
               "<th>skipped steps</th><th>final scale</th><th>fp16 underflow at scale 1</th>"
               "<th>fp16 underflow at the scale used</th><th>samples/s</th></tr>\n",
            text ? "bits/char" : "test accuracy");
    for (int i = 0; i < rep->n_runs; i++) {
        const run_series *s = rep->runs[i];
        const amp_train_result *r = &s->result;
        fputs("<tr><td>", f);
        html_text(f, s->label);
        fputs("</td>", f);
        if (!s->done) {
            fputs("<td colspan=\"9\">did not finish</td></tr>\n", f);
            continue;
        }
        fprintf(f, "<td>%s</td>", amp_model_kind_name(r->model));
        if (s->text)
            fprintf(f, "<td>%.4f</td>", r->bits_per_char);
        else if (isfinite(r->test_accuracy))
            fprintf(f, "<td>%.2f%%</td>", 100.0 * r->test_accuracy);
        else
            fputs("<td>n/a</td>", f);
        fprintf(f, "<td>%.4f</td><td>%.4f</td><td>%lld</td><td>%g</td>", r->train_loss, r->test_loss,
                (long long)r->skipped_steps, (double)r->final_scale);
        pct_cell(f, r->grad_underflow_fp16_unscaled, r->grad_stats_samples > 0);
        pct_cell(f, r->grad_underflow_fp16_scaled, r->grad_stats_samples > 0);
        fprintf(f, "<td>%.0f</td></tr>\n", r->samples_per_sec);
    }
    fputs("</table>\n<p>Underflow: the fraction of nonzero gradient values (unscaled g) with |g| &le; 2<sup>-25</sup> "
          "(they round to zero in fp16) and with |g&middot;S| &le; 2<sup>-25</sup> at the loss scale S in use, "
          "averaged over the sampled steps. Metrics: <a href=\"metrics.jsonl\">metrics.jsonl</a>.</p>\n",
          f);
    write_fp8_table(f, rep);
    static const char *const plots[][2] = {{"loss", "Training loss"},
                                           {"scale", "Loss scale (log2 axis; x marks a skipped step)"},
                                           {"grad_hist", "Parameter-gradient magnitudes against fp16's limits"},
                                           {"act_hist", "Activation-gradient magnitudes against fp16's limits "
                                                        "(what flows back into each op's output)"}};
    for (size_t i = 0; i < sizeof plots / sizeof plots[0]; i++)
        fprintf(f, "<h2>%s</h2>\n<p><a href=\"%s.svg\"><img src=\"%s.png\" alt=\"%s\"></a></p>\n", plots[i][1],
                plots[i][0], plots[i][0], plots[i][1]);
    fputs("</body></html>\n", f);
    const bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        set_err(err, err_size, "cannot write '%s'", path);
        free(path);
        return -1;
    }
    free(path);
    return 0;
}

int amp_report_finish(amp_report *rep, char *err, size_t err_size) {
    int rc = AMP_REPORT_OK;
    if (rep->oom) {
        set_err(err, err_size, "out of memory while recording the report");
        rc = AMP_REPORT_FAILED;
    } else if (!report_start(rep)) {
        set_err(err, err_size, "%s", rep->start_err);
        rc = AMP_REPORT_FAILED;
    }
    if (rc == AMP_REPORT_OK) {
        const bool bad = ferror(rep->metrics) != 0 || rep->write_failed;
        const int closed = fclose(rep->metrics);
        rep->metrics = NULL;
        if (bad || closed != 0) {
            set_err(err, err_size, "cannot write '%s/metrics.jsonl'", rep->dir);
            rc = AMP_REPORT_FAILED;
        }
    }
    if (rc == AMP_REPORT_OK &&
        (draw(rep->dir, "loss", PLOT_LOSS, rep->runs, rep->n_runs, err, err_size) != 0 ||
         draw(rep->dir, "scale", PLOT_SCALE, rep->runs, rep->n_runs, err, err_size) != 0 ||
         draw(rep->dir, "grad_hist", PLOT_HIST, rep->runs, rep->n_runs, err, err_size) != 0 ||
         draw(rep->dir, "act_hist", PLOT_ACT_HIST, rep->runs, rep->n_runs, err, err_size) != 0 ||
         write_index(rep, err, err_size) != 0))
        rc = AMP_REPORT_FAILED;
    amp_report_discard(rep);
    return rc;
}
