/* Saving and loading the scaler: PyTorch's state_dict / load_state_dict, and a JSON text that
 * json.dumps(torch_scaler.state_dict()) output also parses as. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scaler_internal.h"

#define MSG_EMPTY_STATE                                                                                    \
    "amp_scaler_load_state_dict: The source state dict is empty, possibly because it was saved from a " \
    "disabled instance of GradScaler."

void amp_scaler_state_dict(const amp_scaler *s, amp_scaler_state *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!s || !s->enabled) {
        out->empty = true;
        return;
    }
    out->scale = (double)s->scale;
    out->growth_factor = s->config.growth_factor;
    out->backoff_factor = s->config.backoff_factor;
    out->growth_interval = s->config.growth_interval;
    out->growth_tracker = s->growth_tracker;
    out->has_amp = true;
    out->hysteresis_tracker = s->hysteresis_tracker;
    out->steps_taken = s->stats.steps_taken;
    out->steps_skipped = s->stats.steps_skipped;
    out->iterations = s->stats.iterations;
    out->iterations_skipped = s->stats.iterations_skipped;
    out->consecutive_skipped = s->stats.consecutive_skipped;
    out->overflows_absorbed = s->stats.overflows_absorbed;
    out->floor_streak = s->stats.floor_streak;
}

int amp_scaler_load_state_dict(amp_scaler *s, const amp_scaler_state *state) {
    if (!s || !state) return AMP_ERR_NULL_POINTER;
    if (!s->enabled) return AMP_OK;
    if (state->empty) {
        s->status = AMP_ERR_INVALID_ARGUMENT;
        snprintf(s->error, sizeof s->error, "%s", MSG_EMPTY_STATE);
        return AMP_ERR_INVALID_ARGUMENT;
    }
    /* _init_scale = sd["scale"] and _scale.fill_(...): an fp32 tensor filled from a Python float */
    s->scale = (float)state->scale;
    s->config.growth_factor = state->growth_factor;
    s->config.backoff_factor = state->backoff_factor;
    s->config.growth_interval = state->growth_interval;
    s->growth_tracker = state->growth_tracker;
    if (state->has_amp) {
        s->hysteresis_tracker = state->hysteresis_tracker;
        s->stats.steps_taken = state->steps_taken;
        s->stats.steps_skipped = state->steps_skipped;
        s->stats.iterations = state->iterations;
        s->stats.iterations_skipped = state->iterations_skipped;
        s->stats.consecutive_skipped = state->consecutive_skipped;
        s->stats.overflows_absorbed = state->overflows_absorbed;
        s->stats.floor_streak = state->floor_streak;
    } else {
        s->hysteresis_tracker = scaler_hysteresis_full(&s->config);
        memset(&s->stats, 0, sizeof s->stats);
    }
    return AMP_OK;
}

/* ---- text ---- */

/* The keys, in output order. The first five are PyTorch's; kind: 'd' double, 'i' int32, 'l' int64. */
typedef struct key_info {
    const char *name;
    char kind;
    size_t offset;
} key_info;

#define KEY(name, kind, field) {name, kind, offsetof(amp_scaler_state, field)}
static const key_info keys[] = {
    KEY("scale", 'd', scale),
    KEY("growth_factor", 'd', growth_factor),
    KEY("backoff_factor", 'd', backoff_factor),
    KEY("growth_interval", 'i', growth_interval),
    KEY("_growth_tracker", 'i', growth_tracker),
    KEY("amp_hysteresis_tracker", 'i', hysteresis_tracker),
    KEY("amp_steps_taken", 'l', steps_taken),
    KEY("amp_steps_skipped", 'l', steps_skipped),
    KEY("amp_iterations", 'l', iterations),
    KEY("amp_iterations_skipped", 'l', iterations_skipped),
    KEY("amp_consecutive_skipped", 'l', consecutive_skipped),
    KEY("amp_overflows_absorbed", 'l', overflows_absorbed),
    KEY("amp_floor_streak", 'l', floor_streak),
};
#undef KEY
enum { N_KEYS = sizeof keys / sizeof keys[0], N_TORCH_KEYS = 5 };

/* Python's repr of a float as json.dumps writes it: the shortest decimal that reads back exactly,
 * with ".0" when it would look like an integer; Infinity / -Infinity / NaN. */
static void format_double(double v, char *buf, size_t size) {
    if (isnan(v)) {
        snprintf(buf, size, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, size, v < 0 ? "-Infinity" : "Infinity");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eE")) {
        const size_t len = strlen(buf);
        if (len + 3 <= size) memcpy(buf + len, ".0", 3);
    }
}

/* Appends to buf like snprintf at buf + *len, counting the full length even when it does not fit. */
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static void append(char *buf, size_t size, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = (buf && *len < size) ? buf + *len : NULL;
    const int n = vsnprintf(dst, dst ? size - *len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) *len += (size_t)n;
}

size_t amp_scaler_state_format(const amp_scaler_state *state, char *buf, size_t size) {
    size_t len = 0;
    if (buf && size) buf[0] = '\0';
    if (!state || state->empty) {
        append(buf, size, &len, "{}");
        return len;
    }
    const int n = state->has_amp ? N_KEYS : N_TORCH_KEYS;
    append(buf, size, &len, "{");
    for (int i = 0; i < n; i++) {
        const char *field = (const char *)state + keys[i].offset;
        char num[40];
        if (keys[i].kind == 'd') {
            double v;
            memcpy(&v, field, sizeof v);
            format_double(v, num, sizeof num);
        } else if (keys[i].kind == 'i') {
            int32_t v;
            memcpy(&v, field, sizeof v);
            snprintf(num, sizeof num, "%ld", (long)v);
        } else {
            int64_t v;
            memcpy(&v, field, sizeof v);
            snprintf(num, sizeof num, "%lld", (long long)v);
        }
        append(buf, size, &len, "%s\"%s\": %s", i ? ", " : "", keys[i].name, num);
    }
    append(buf, size, &len, "}");
    return len;
}

typedef struct parser {
    const char *start, *p, *end;
    char *err;
    size_t err_size;
} parser;

static int parse_fail(parser *ps, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static int parse_fail(parser *ps, const char *fmt, ...) {
    if (ps->err && ps->err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ps->err, ps->err_size, fmt, ap);
        va_end(ap);
    }
    return AMP_ERR_FORMAT;
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static bool eat(parser *ps, char c) {
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == c) {
        ps->p++;
        return true;
    }
    return false;
}

/* A JSON string without escapes (the keys are plain identifiers). */
static int parse_key(parser *ps, char *out, size_t size) {
    if (!eat(ps, '"')) return parse_fail(ps, "expected a key at offset %zu", (size_t)(ps->p - ps->start));
    size_t n = 0;
    while (ps->p < ps->end && *ps->p != '"') {
        if (*ps->p == '\\' || (unsigned char)*ps->p < 0x20 || n + 1 >= size) return parse_fail(ps, "bad key");
        out[n++] = *ps->p++;
    }
    if (ps->p == ps->end) return parse_fail(ps, "unterminated key");
    ps->p++;
    out[n] = '\0';
    return AMP_OK;
}

/* A JSON number, or Infinity / -Infinity / NaN (Python's json), read with strtod. */
static int parse_number(parser *ps, double *out) {
    skip_ws(ps);
    char tok[64];
    size_t n = 0;
    while (ps->p + n < ps->end && n + 1 < sizeof tok) {
        const char c = ps->p[n];
        if (!((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' ||
              (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
            break;
        tok[n++] = c;
    }
    tok[n] = '\0';
    if (n == 0) return parse_fail(ps, "expected a number");
    double v;
    if (strcmp(tok, "Infinity") == 0)
        v = INFINITY;
    else if (strcmp(tok, "-Infinity") == 0)
        v = -INFINITY;
    else if (strcmp(tok, "NaN") == 0)
        v = NAN;
    else {
        /* JSON digits only: strtod alone would also take hex, "inf" or "nan(...)" */
        for (size_t i = 0; i < n; i++)
            if ((tok[i] >= 'a' && tok[i] <= 'z' && tok[i] != 'e') || (tok[i] >= 'A' && tok[i] <= 'Z' && tok[i] != 'E'))
                return parse_fail(ps, "bad number '%s'", tok);
        char *end;
        v = strtod(tok, &end);
        if (end != tok + n) return parse_fail(ps, "bad number '%s'", tok);
    }
    ps->p += n;
    *out = v;
    return AMP_OK;
}

int amp_scaler_state_parse(const char *text, size_t len, amp_scaler_state *out, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!out) return AMP_ERR_NULL_POINTER;
    memset(out, 0, sizeof *out);
    if (!text) return AMP_ERR_NULL_POINTER;
    parser ps = {.start = text, .p = text, .end = text + len, .err = err, .err_size = err_size};
    if (!eat(&ps, '{')) return parse_fail(&ps, "expected '{'");
    bool seen[N_KEYS] = {false};
    int n_seen = 0;
    if (!eat(&ps, '}')) {
        do {
            char key[48];
            int code = parse_key(&ps, key, sizeof key);
            if (code != AMP_OK) return code;
            if (!eat(&ps, ':')) return parse_fail(&ps, "expected ':' after \"%s\"", key);
            int k = 0;
            while (k < N_KEYS && strcmp(keys[k].name, key) != 0) k++;
            if (k == N_KEYS) return parse_fail(&ps, "unknown key \"%s\"", key);
            if (seen[k]) return parse_fail(&ps, "duplicate key \"%s\"", key);
            seen[k] = true;
            n_seen++;
            double v = 0.0;
            code = parse_number(&ps, &v);
            if (code != AMP_OK) return code;
            char *field = (char *)out + keys[k].offset;
            if (keys[k].kind == 'd') {
                memcpy(field, &v, sizeof v);
            } else {
                const double lim = keys[k].kind == 'i' ? 2147483648.0 : 9223372036854775808.0;
                if (!(v == floor(v) && v >= -lim && v < lim))
                    return parse_fail(&ps, "\"%s\" must be an integer in range", key);
                if (keys[k].kind == 'i') {
                    const int32_t iv = (int32_t)v;
                    memcpy(field, &iv, sizeof iv);
                } else {
                    const int64_t lv = (int64_t)v;
                    memcpy(field, &lv, sizeof lv);
                }
            }
        } while (eat(&ps, ','));
        if (!eat(&ps, '}')) return parse_fail(&ps, "expected ',' or '}'");
    }
    skip_ws(&ps);
    if (ps.p != ps.end) return parse_fail(&ps, "trailing characters after the object");
    if (n_seen == 0) {
        out->empty = true;
        return AMP_OK;
    }
    for (int k = 0; k < N_TORCH_KEYS; k++)
        if (!seen[k]) return parse_fail(&ps, "missing key \"%s\"", keys[k].name);
    int n_amp = 0;
    for (int k = N_TORCH_KEYS; k < N_KEYS; k++) n_amp += seen[k];
    if (n_amp != 0 && n_amp != N_KEYS - N_TORCH_KEYS) {
        for (int k = N_TORCH_KEYS; k < N_KEYS; k++)
            if (!seen[k]) return parse_fail(&ps, "missing key \"%s\" (amp keys come all or none)", keys[k].name);
    }
    out->has_amp = n_amp != 0;
    return AMP_OK;
}
