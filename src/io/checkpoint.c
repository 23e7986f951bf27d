/* amp's training checkpoints: a safetensors file holding the context's parameters and buffers under
 * their PyTorch state_dict names, the optimizer's fp32 state and master weights under their own
 * prefixes, and the scalar state (step, epoch, random streams, optimizer step count and lr, the
 * scaler's state dict) as metadata strings. Layout: include/amp/checkpoint.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/ctx_internal.h" /* the buffer list and the random streams, which tensor.h does not expose */
#include "amp/checkpoint.h"
#include "io_internal.h"
#include "amp/status.h"
#include "amp/version.h"
#include "../core/alloc_internal.h"


/* The optimizer state roles a checkpoint stores, with their names (torch.optim's state keys). */
static const struct {
    amp_optim_state which;
    const char *prefix, *suffix;
} opt_roles[] = {
    {AMP_OPTIM_STATE_MASTER, "master.", ""},
    {AMP_OPTIM_STATE_EXP_AVG, "optimizer.state.", ".exp_avg"},
    {AMP_OPTIM_STATE_EXP_AVG_SQ, "optimizer.state.", ".exp_avg_sq"},
    {AMP_OPTIM_STATE_MOMENTUM, "optimizer.state.", ".momentum_buffer"},
};
enum { N_OPT_ROLES = sizeof opt_roles / sizeof opt_roles[0] };

#define KEY_STEP "amp.step"
#define KEY_EPOCH "amp.epoch"
#define KEY_RNG "amp.rng"
#define KEY_CTX_RNG "amp.ctx_rng"
#define KEY_OPT_STEPS "amp.optimizer.step_count"
#define KEY_OPT_LR "amp.optimizer.lr"
#define KEY_SCALER "amp.scaler"

static char *role_name(const char *prefix, const char *param, const char *suffix) {
    size_t n = strlen(prefix) + strlen(param) + strlen(suffix) + 1;
    char *s = amp_malloc(n);
    if (s) snprintf(s, n, "%s%s%s", prefix, param, suffix);
    return s;
}

/* "0x0123...,0x..." (fixed-width hex, so the text is as exact as the bits). */
static void format_u64_list(char *buf, size_t size, const uint64_t *v, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s0x%016" PRIx64, i ? "," : "", v[i]);
}

static bool parse_u64_list(const char *s, uint64_t *out, size_t max, size_t *n) {
    *n = 0;
    if (!*s) return true;
    for (;;) {
        if (*n == max || s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) return false;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s + 2, &end, 16);
        if (errno || end == s + 2 || end - (s + 2) > 16) return false;
        out[(*n)++] = (uint64_t)v;
        if (*end == '\0') return true;
        if (*end != ',') return false;
        s = end + 1;
    }
}

static bool parse_i64(const char *s, int64_t *out) {
    if (!*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return false;
    *out = (int64_t)v;
    return true;
}

int amp_checkpoint_save(const char *path, const amp_ctx *ctx, const amp_optimizer *opt, const amp_scaler *scaler,
                        const amp_checkpoint_info *info, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!path || !ctx) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_checkpoint_save: NULL argument");
    if (!ctx->params_allocated)
        return amp_err_fmt(err, err_size, AMP_ERR_STATE, "%s: the context's parameters are not allocated", path);
    const amp_checkpoint_info zero_info = {0};
    if (!info) info = &zero_info;
    if (info->n_rng > AMP_CHECKPOINT_MAX_RNG || (info->n_user > 0 && !info->user))
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: bad checkpoint info (n_rng %zu, at most %d)", path,
                    info->n_rng, AMP_CHECKPOINT_MAX_RNG);
    for (size_t i = 0; i < info->n_user; i++) {
        const char *k = info->user[i].key;
        if (!k || !info->user[i].value || strcmp(k, "format") == 0 || strncmp(k, "amp.", 4) == 0)
            return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: user metadata key \"%s\" is reserved or missing", path,
                        k ? k : "(null)");
    }

    const size_t n_opt = opt ? amp_optimizer_num_params(opt) : 0;
    const size_t cap = ctx->n_params + ctx->n_buffers + n_opt * N_OPT_ROLES;
    amp_st_tensor *ts = amp_calloc(cap ? cap : 1, sizeof *ts);
    char **owned = amp_calloc(cap ? cap : 1, sizeof *owned);
    const size_t cap_meta = 10 + info->n_user;
    amp_st_meta *meta = amp_calloc(cap_meta, sizeof *meta);
    char *scaler_json = NULL;
    int rc = AMP_OK;
    size_t n = 0, n_owned = 0, n_meta = 0;
    if (!ts || !owned || !meta) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto out;
    }
    for (int role = 0; role < 2; role++) {
        const amp_param_slot *slots = role == 0 ? ctx->params : ctx->buffers;
        const size_t count = role == 0 ? ctx->n_params : ctx->n_buffers;
        for (size_t i = 0; i < count; i++) {
            const amp_tensor *t = slots[i].tensor;
            if (!t->name || !t->name[0]) {
                rc = amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: %s %zu has no name", path,
                          role == 0 ? "parameter" : "buffer", i);
                goto out;
            }
            ts[n++] = (amp_st_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .shape = t->shape, .data = t->data};
        }
    }
    for (size_t i = 0; i < n_opt; i++) {
        const amp_tensor *p = amp_optimizer_param(opt, i);
        for (int r = 0; r < N_OPT_ROLES; r++) {
            const float *state = amp_optimizer_state(opt, opt_roles[r].which, i);
            if (!state) continue;
            char *name = role_name(opt_roles[r].prefix, p->name ? p->name : "", opt_roles[r].suffix);
            if (!name) {
                rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
                goto out;
            }
            owned[n_owned++] = name;
            ts[n++] = (amp_st_tensor){.name = name, .dtype = AMP_F32, .ndim = p->ndim, .shape = p->shape, .data = state};
        }
    }

    char step[32], epoch[32], rng[AMP_CHECKPOINT_MAX_RNG * 20 + 1], ctx_rng[AMP_RNG_STREAMS * 20 + 1], opt_steps[32], lr[32];
    snprintf(step, sizeof step, "%" PRId64, info->step);
    snprintf(epoch, sizeof epoch, "%" PRId64, info->epoch);
    format_u64_list(rng, sizeof rng, info->rng, info->n_rng);
    format_u64_list(ctx_rng, sizeof ctx_rng, ctx->rng, AMP_RNG_STREAMS);
    meta[n_meta++] = (amp_st_meta){"format", "pt"}; /* what transformers' loaders look for */
    meta[n_meta++] = (amp_st_meta){"amp.version", amp_version()};
    meta[n_meta++] = (amp_st_meta){KEY_STEP, step};
    meta[n_meta++] = (amp_st_meta){KEY_EPOCH, epoch};
    meta[n_meta++] = (amp_st_meta){KEY_RNG, rng};
    meta[n_meta++] = (amp_st_meta){KEY_CTX_RNG, ctx_rng};
    if (opt) {
        snprintf(opt_steps, sizeof opt_steps, "%" PRId64, amp_optimizer_step_count(opt));
        snprintf(lr, sizeof lr, "%.9g", (double)amp_optimizer_get_lr(opt)); /* 9 digits: exact for fp32 */
        meta[n_meta++] = (amp_st_meta){KEY_OPT_STEPS, opt_steps};
        meta[n_meta++] = (amp_st_meta){KEY_OPT_LR, lr};
    }
    if (scaler) {
        amp_scaler_state st;
        amp_scaler_state_dict(scaler, &st);
        size_t len = amp_scaler_state_format(&st, NULL, 0);
        scaler_json = amp_malloc(len + 1);
        if (!scaler_json) {
            rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
            goto out;
        }
        amp_scaler_state_format(&st, scaler_json, len + 1);
        meta[n_meta++] = (amp_st_meta){KEY_SCALER, scaler_json};
    }
    for (size_t i = 0; i < info->n_user; i++) meta[n_meta++] = info->user[i];
    rc = amp_safetensors_write(path, ts, n, meta, n_meta, err, err_size);
out:
    for (size_t i = 0; i < n_owned; i++) amp_free(owned[i]);
    amp_free(owned);
    amp_free(ts);
    amp_free(meta);
    amp_free(scaler_json);
    return rc;
}

/* Checks that the file has `name` with t's shape, and a dtype that can be loaded into it. */
static int check_tensor(const amp_st_file *f, const char *name, const amp_tensor *t, amp_dtype want_dtype,
                        bool exact_dtype, char *err, size_t err_size) {
    const char *path = amp_safetensors_path(f);
    const amp_st_info *s = amp_safetensors_find(f, name);
    if (!s) return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: missing tensor \"%s\"", path, name);
    bool same = s->ndim == t->ndim;
    for (int i = 0; same && i < t->ndim; i++) same = s->shape[i] == t->shape[i];
    if (!same) {
        char a[128] = "[", b[128] = "[";
        for (int i = 0; i < s->ndim; i++)
            snprintf(a + strlen(a), sizeof a - strlen(a), "%s%" PRId64, i ? ", " : "", s->shape[i]);
        for (int i = 0; i < t->ndim; i++)
            snprintf(b + strlen(b), sizeof b - strlen(b), "%s%" PRId64, i ? ", " : "", t->shape[i]);
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: tensor \"%s\" has shape %s], the model's is %s]", path, name, a, b);
    }
    if (s->dtype < 0)
        return amp_err_fmt(err, err_size, AMP_ERR_UNSUPPORTED_DTYPE, "%s: tensor \"%s\" has dtype %s, which amp cannot load", path, name,
                    s->dtype_name);
    if (exact_dtype && (amp_dtype)s->dtype != want_dtype)
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT,
                    "%s: tensor \"%s\" is %s in the file but %s here (resuming needs the dtype it was saved with)", path, name,
                    s->dtype_name, amp_dtype_name(want_dtype));
    return AMP_OK;
}

int amp_checkpoint_load(const char *path, amp_ctx *ctx, amp_optimizer *opt, amp_scaler *scaler,
                        amp_checkpoint_info *out, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!path || !ctx) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_checkpoint_load: NULL argument");
    if (!ctx->params_allocated)
        return amp_err_fmt(err, err_size, AMP_ERR_STATE, "%s: the context's parameters are not allocated", path);
    amp_st_file *f = NULL;
    int rc = amp_safetensors_open(path, &f, err, err_size);
    if (rc != AMP_OK) return rc;

    const size_t n_opt = opt ? amp_optimizer_num_params(opt) : 0;
    char **names = amp_calloc(n_opt * N_OPT_ROLES + 1, sizeof *names);
    if (!names) {
        amp_safetensors_close(f);
        return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }

    /* Phase 1: check everything, modify nothing. */
    int64_t step = 0, epoch = 0, opt_steps = 0;
    uint64_t rng[AMP_CHECKPOINT_MAX_RNG] = {0}, ctx_rng[AMP_RNG_STREAMS] = {0};
    size_t n_rng = 0, n_ctx_rng = 0;
    float lr = 0.0f;
    bool have_lr = false;
    amp_scaler_state sstate = {0};
    const char *v;
    for (int role = 0; role < 2 && rc == AMP_OK; role++) {
        const amp_param_slot *slots = role == 0 ? ctx->params : ctx->buffers;
        const size_t count = role == 0 ? ctx->n_params : ctx->n_buffers;
        for (size_t i = 0; i < count && rc == AMP_OK; i++) {
            const amp_tensor *t = slots[i].tensor;
            if (!t->name) {
                rc = amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: %s %zu has no name", path,
                          role == 0 ? "parameter" : "buffer", i);
                break;
            }
            rc = check_tensor(f, t->name, t, t->dtype, opt != NULL, err, err_size);
        }
    }
    for (size_t i = 0; i < n_opt && rc == AMP_OK; i++) {
        const amp_tensor *p = amp_optimizer_param(opt, i);
        for (int r = 0; r < N_OPT_ROLES && rc == AMP_OK; r++) {
            if (!amp_optimizer_state(opt, opt_roles[r].which, i)) continue;
            char *name = role_name(opt_roles[r].prefix, p->name ? p->name : "", opt_roles[r].suffix);
            if (!name) {
                rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
                break;
            }
            names[i * N_OPT_ROLES + (size_t)r] = name;
            rc = check_tensor(f, name, p, AMP_F32, true, err, err_size);
        }
    }
    if (rc == AMP_OK && (v = amp_safetensors_meta_get(f, KEY_STEP)) && !parse_i64(v, &step))
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: metadata %s \"%.40s\" is not an integer", path, KEY_STEP, v);
    if (rc == AMP_OK && (v = amp_safetensors_meta_get(f, KEY_EPOCH)) && !parse_i64(v, &epoch))
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: metadata %s \"%.40s\" is not an integer", path, KEY_EPOCH, v);
    if (rc == AMP_OK && (v = amp_safetensors_meta_get(f, KEY_RNG)) && !parse_u64_list(v, rng, AMP_CHECKPOINT_MAX_RNG, &n_rng))
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: metadata %s is not a list of at most %d hex integers", path, KEY_RNG,
                  AMP_CHECKPOINT_MAX_RNG);
    if (rc == AMP_OK && (v = amp_safetensors_meta_get(f, KEY_CTX_RNG)) &&
        (!parse_u64_list(v, ctx_rng, AMP_RNG_STREAMS, &n_ctx_rng) || n_ctx_rng != AMP_RNG_STREAMS))
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: metadata %s is not %d hex integers", path, KEY_CTX_RNG, AMP_RNG_STREAMS);
    if (rc == AMP_OK && opt) {
        if (!(v = amp_safetensors_meta_get(f, KEY_OPT_STEPS)) || !parse_i64(v, &opt_steps) || opt_steps < 0)
            rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: no valid %s in the metadata (optimizer state needed)", path, KEY_OPT_STEPS);
        else if ((v = amp_safetensors_meta_get(f, KEY_OPT_LR))) {
            char *end;
            lr = strtof(v, &end);
            have_lr = *v && !*end;
            if (!have_lr) rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: metadata %s \"%.40s\" is not a number", path, KEY_OPT_LR, v);
        }
    }
    if (rc == AMP_OK && scaler) {
        if (!(v = amp_safetensors_meta_get(f, KEY_SCALER))) {
            rc = amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: no scaler state (%s) in the metadata", path, KEY_SCALER);
        } else {
            char perr[200];
            if (amp_scaler_state_parse(v, strlen(v), &sstate, perr, sizeof perr) != AMP_OK)
                rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: metadata %s: %s", path, KEY_SCALER, perr);
            else if (sstate.empty && amp_scaler_is_enabled(scaler))
                rc = amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT,
                          "%s: the scaler state was saved from a disabled scaler; this one is enabled", path);
        }
    }

    /* Phase 2: read. Only an I/O error (the file changed underneath) can stop this half-way. */
    for (int role = 0; role < 2 && rc == AMP_OK; role++) {
        const amp_param_slot *slots = role == 0 ? ctx->params : ctx->buffers;
        const size_t count = role == 0 ? ctx->n_params : ctx->n_buffers;
        for (size_t i = 0; i < count && rc == AMP_OK; i++) {
            amp_tensor *t = slots[i].tensor;
            amp_tensor_bump_version(t); /* new values (a cast copy of the old ones no longer holds) */
            rc = amp_safetensors_read(f, t->name, t->data, t->dtype, t->ndim, t->shape, err, err_size);
        }
    }
    for (size_t i = 0; i < n_opt && rc == AMP_OK; i++) {
        const amp_tensor *p = amp_optimizer_param(opt, i);
        for (int r = 0; r < N_OPT_ROLES && rc == AMP_OK; r++) {
            float *state = amp_optimizer_state(opt, opt_roles[r].which, i);
            if (state) rc = amp_safetensors_read(f, names[i * N_OPT_ROLES + (size_t)r], state, AMP_F32, p->ndim, p->shape, err, err_size);
        }
    }
    if (rc == AMP_OK && opt) {
        amp_optimizer_set_step_count(opt, opt_steps);
        if (have_lr) amp_optimizer_set_lr(opt, lr);
    }
    if (rc == AMP_OK && scaler && amp_scaler_is_enabled(scaler) && amp_scaler_load_state_dict(scaler, &sstate) != AMP_OK)
        rc = amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: loading the scaler state failed: %s", path, amp_scaler_error(scaler));
    if (rc == AMP_OK && n_ctx_rng == AMP_RNG_STREAMS) memcpy(ctx->rng, ctx_rng, sizeof ctx_rng);
    if (rc == AMP_OK && out) {
        memset(out, 0, sizeof *out);
        out->step = step;
        out->epoch = epoch;
        out->n_rng = n_rng;
        memcpy(out->rng, rng, sizeof rng);
    }
    for (size_t i = 0; i < n_opt * N_OPT_ROLES; i++) amp_free(names[i]);
    amp_free(names);
    amp_safetensors_close(f);
    return rc;
}
