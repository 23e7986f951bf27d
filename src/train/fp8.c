/* FP8 training in a run (amp/train.h, "FP8"): which Linear layers run in fp8, their recipe states,
 * the end-of-step update, the states' place in checkpoints (buffers) and the per-layer report. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train_internal.h"
#include "../core/alloc_internal.h"

/* The buffer names of a layer's role: "fp8.<layer>.<role>.amax_history" and ".scale". */
static void buffer_name(char *buf, size_t size, const char *layer, amp_fp8_tensor_role role, const char *leaf) {
    snprintf(buf, size, "fp8.%s.%s.%s", layer, amp_fp8_tensor_role_name(role), leaf);
}

/* The checkpoint buffer of fp8 layer k's role: which 0 the amax history, 1 the scale (NULL: none). */
static amp_tensor *role_buf(const amp_train_run_state *r, size_t k, int role, int which) {
    return r->fp8_buf[(k * AMP_FP8_ROLES + (size_t)role) * 2 + (size_t)which];
}

/* The layer's name: its weight's without ".weight" (h.0.attn.c_attn). */
static void layer_name(char *buf, size_t size, const amp_linear_layer *l) {
    const char *w = l->weight && l->weight->name ? l->weight->name : "linear";
    size_t n = strlen(w);
    if (n > 7 && strcmp(w + n - 7, ".weight") == 0) n -= 7;
    snprintf(buf, size, "%.*s", (int)(n < size ? n : size - 1), w);
}

const char *amp_train_fp8_precision_word(const amp_train_run_state *r) {
    return r->fp8_word[0] ? r->fp8_word : r->prec->name;
}

/* The delayed-scaling settings of the configuration (TE's defaults where unset), checked. */
static int delayed_config(amp_train_run_state *r, amp_fp8_delayed_config *dc) {
    const amp_train_config *c = &r->cfg;
    const amp_fp8_delayed_config def = AMP_FP8_DELAYED_CONFIG_DEFAULT;
    *dc = def;
    const bool set = (c->fp8_history_len != 0 && c->fp8_history_len != def.history_len) || c->fp8_amax_algo != def.algo ||
                     c->fp8_margin != def.margin || c->fp8_amax_init;
    if (!set) return AMP_OK;
    if (!(r->prec->fp8 && r->prec->fp8_recipe == AMP_FP8_RECIPE_DELAYED))
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT,
                              "fp8: the amax history, its algorithm, the margin and the amax init apply to fp8-delayed only, not %s",
                              r->prec->name);
    if (c->fp8_history_len < 0 || c->fp8_history_len > AMP_TRAIN_FP8_MAX_HISTORY)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "fp8: the amax history's length %d is outside [1, %d]",
                              c->fp8_history_len, AMP_TRAIN_FP8_MAX_HISTORY);
    if (c->fp8_amax_algo != AMP_FP8_AMAX_MAX && c->fp8_amax_algo != AMP_FP8_AMAX_MOST_RECENT)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "fp8: unknown amax algorithm %d", (int)c->fp8_amax_algo);
    if (c->fp8_margin < -127 || c->fp8_margin > 127)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "fp8: the margin %d is outside [-127, 127]", c->fp8_margin);
    if (c->fp8_history_len) dc->history_len = c->fp8_history_len;
    dc->algo = c->fp8_amax_algo;
    dc->margin = c->fp8_margin;
    dc->amax_init = c->fp8_amax_init;
    snprintf(r->fp8_word, sizeof r->fp8_word, "%s (history %d, %s, margin %d%s)", r->prec->name, dc->history_len,
             dc->algo == AMP_FP8_AMAX_MAX ? "max" : "most recent", dc->margin, dc->amax_init ? ", amax init" : "");
    return AMP_OK;
}

/* The amax init across ranks (amp_fp8_linear_set_amax_reduce): the group's MAX, a NaN as +inf. */
static int reduce_init_amax(void *arg, float *amax) {
    amp_comm *c = arg;
    double v = isnan(*amax) ? INFINITY : (double)*amax;
    const int st = c->allreduce_f64(c, &v, 1, AMP_COMM_MAX);
    if (st == AMP_OK) *amax = (float)v;
    return st;
}

int amp_train_fp8_setup(amp_train_run_state *r) {
    if (r->cfg.fp8_mx_floor && !(r->prec->fp8 && r->prec->fp8_recipe == AMP_FP8_RECIPE_MXFP8))
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "fp8: FLOOR MX scales apply to mxfp8 only, not %s", r->prec->name);
    if (r->cfg.fp8_mx_floor) snprintf(r->fp8_word, sizeof r->fp8_word, "mxfp8 with FLOOR scales");
    amp_fp8_delayed_config dc;
    const int cst = delayed_config(r, &dc);
    if (cst != AMP_OK) return cst;
    if (!r->prec->fp8) return AMP_OK;
    const size_t n = amp_model_num_linears(r->model);
    r->fp8 = amp_calloc(n ? n : 1, sizeof *r->fp8);
    r->fp8_layers = amp_calloc(n ? n : 1, sizeof *r->fp8_layers);
    r->fp8_buf = amp_calloc(n ? 2 * AMP_FP8_ROLES * n : 1, sizeof *r->fp8_buf);
    r->fp8_stats = amp_calloc(n ? n : 1, sizeof *r->fp8_stats);
    if (!r->fp8 || !r->fp8_layers || !r->fp8_buf || !r->fp8_stats)
        return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "fp8: out of memory");
    for (size_t i = 0; i < n; i++) {
        /* the first and the last Linear in execution order stay in bf16 unless asked (Megatron's
         * --first-last-layers-bf16, torchtitan's skipped output layer) */
        if (!r->cfg.fp8_all_layers && (i == 0 || i + 1 == n)) continue;
        amp_linear_layer *l = amp_model_linear(r->model, i);
        const size_t k = r->n_fp8;
        int st = amp_fp8_linear_create(&r->fp8[k], r->prec->fp8_recipe, &dc);
        if (st != AMP_OK) return amp_train_fail(r, st, "fp8: cannot create a layer's state: %s", amp_status_str(st));
        if (r->cfg.fp8_mx_floor) st = amp_fp8_linear_set_mx_scale(r->fp8[k], AMP_MX_FLOOR);
        if (dc.amax_init && r->cfg.comm) st = amp_fp8_linear_set_amax_reduce(r->fp8[k], reduce_init_amax, r->cfg.comm);
        if (st != AMP_OK) return amp_train_fail(r, st, "fp8: cannot set the MX scale rule: %s", amp_status_str(st));
        r->fp8_layers[k] = l;
        l->fp8 = r->fp8[k];
        r->n_fp8++;
        if (r->prec->fp8_recipe != AMP_FP8_RECIPE_DELAYED) continue;
        char lname[AMP_LAYER_MAX_NAME], bname[AMP_LAYER_MAX_NAME + 48];
        layer_name(lname, sizeof lname, l);
        for (int role = 0; role < AMP_FP8_ROLES; role++) {
            buffer_name(bname, sizeof bname, lname, role, "amax_history");
            amp_tensor *h = amp_buffer_new(r->ctx, bname, AMP_F32, 1, (const int64_t[]){dc.history_len});
            buffer_name(bname, sizeof bname, lname, role, "scale");
            amp_tensor *s = h ? amp_buffer_new(r->ctx, bname, AMP_F32, 1, (const int64_t[]){1}) : NULL;
            if (!s)
                return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "fp8: cannot declare %s: %s", bname,
                                      amp_ctx_error(r->ctx));
            r->fp8_buf[(k * AMP_FP8_ROLES + (size_t)role) * 2] = h;
            r->fp8_buf[(k * AMP_FP8_ROLES + (size_t)role) * 2 + 1] = s;
        }
    }
    return AMP_OK;
}

void amp_train_fp8_free(amp_train_run_state *r) {
    for (size_t k = 0; k < r->n_fp8; k++) {
        if (r->fp8_layers[k]) r->fp8_layers[k]->fp8 = NULL;
        amp_fp8_linear_free(r->fp8[k]);
    }
    amp_free(r->fp8);
    amp_free(r->fp8_layers);
    amp_free(r->fp8_buf);
    amp_free(r->fp8_stats);
    r->fp8_stats = NULL;
    r->fp8 = NULL, r->fp8_layers = NULL, r->fp8_buf = NULL, r->n_fp8 = 0;
}

/* Data parallel, delayed scaling: every rank's slot-0 amaxes of roles lo..hi (this pass's) are
 * all-reduced with MAX before the update, so every rank computes the same scales (TE's reduce_amax
 * over the data-parallel group); a NaN counts as +inf (no finite amax can hide it; the update then
 * keeps the scale, as for any infinite amax). One all-reduce per pass: 2 values per fp8 layer after
 * a forward, 1 after a backward. */
static int reduce_amaxes(amp_train_run_state *r, int lo, int hi) {
    amp_comm *c = r->cfg.comm;
    if (!c || r->n_fp8 == 0 || r->prec->fp8_recipe != AMP_FP8_RECIPE_DELAYED) return AMP_OK;
    const size_t per = (size_t)(hi - lo + 1), n = r->n_fp8 * per;
    double *v = amp_malloc(n * sizeof *v);
    if (!v) return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "fp8: out of memory");
    for (size_t k = 0; k < r->n_fp8; k++)
        for (int role = lo; role <= hi; role++) {
            const float *h;
            size_t len;
            amp_fp8_delayed_history(amp_fp8_linear_delayed(r->fp8[k], role), &h, &len);
            v[k * per + (size_t)(role - lo)] = isnan(h[0]) ? INFINITY : (double)h[0];
        }
    int st = c->allreduce_f64(c, v, n, AMP_COMM_MAX);
    for (size_t k = 0; k < r->n_fp8 && st == AMP_OK; k++)
        for (int role = lo; role <= hi && st == AMP_OK; role++) /* max-ed into slot 0: now the group's */
            st = amp_fp8_delayed_record(amp_fp8_linear_delayed(r->fp8[k], role), (float)v[k * per + (size_t)(role - lo)]);
    amp_free(v);
    return st == AMP_OK ? AMP_OK
                        : amp_train_fail(r, st, "fp8: all-reducing the amaxes at step %lld: %s", (long long)r->step + 1,
                                         c->error ? c->error(c) : amp_status_str(st));
}

int amp_train_fp8_pass(amp_train_run_state *r, amp_fp8_pass pass) {
    if (r->n_fp8 == 0 || r->prec->fp8_recipe != AMP_FP8_RECIPE_DELAYED) return AMP_OK;
    const bool fwd = pass == AMP_FP8_PASS_FORWARD;
    const int rst = reduce_amaxes(r, fwd ? AMP_FP8_X : AMP_FP8_DY, fwd ? AMP_FP8_W : AMP_FP8_DY);
    if (rst != AMP_OK) return rst;
    for (size_t k = 0; k < r->n_fp8; k++) {
        const int st = amp_fp8_linear_update(r->fp8[k], pass);
        if (st != AMP_OK)
            return amp_train_fail(r, st, "fp8: scale update at step %lld: %s", (long long)r->step + 1, amp_status_str(st));
    }
    return AMP_OK;
}

int amp_train_fp8_step(amp_train_run_state *r) {
    for (size_t k = 0; k < r->n_fp8; k++) {
        const int st = amp_fp8_linear_step(r->fp8[k]);
        if (st != AMP_OK)
            return amp_train_fail(r, st, "fp8: scale update at step %lld: %s", (long long)r->step + 1, amp_status_str(st));
    }
    return AMP_OK;
}

void amp_train_fp8_recording(amp_train_run_state *r, bool on) {
    for (size_t k = 0; k < r->n_fp8; k++) amp_fp8_linear_set_recording(r->fp8[k], on);
}

void amp_train_fp8_to_buffers(amp_train_run_state *r) {
    for (size_t k = 0; k < r->n_fp8; k++)
        for (int role = 0; role < AMP_FP8_ROLES; role++) {
            amp_fp8_delayed *d = amp_fp8_linear_delayed(r->fp8[k], role);
            amp_tensor *h = role_buf(r, k, role, 0), *s = role_buf(r, k, role, 1);
            const float *hist;
            size_t len;
            if (!d || !s || amp_fp8_delayed_history(d, &hist, &len) != AMP_OK) continue;
            memcpy(h->data, hist, len * sizeof *hist);
            ((float *)s->data)[0] = amp_fp8_delayed_scale(d);
        }
}

int amp_train_fp8_from_buffers(amp_train_run_state *r) {
    for (size_t k = 0; k < r->n_fp8; k++)
        for (int role = 0; role < AMP_FP8_ROLES; role++) {
            amp_fp8_delayed *d = amp_fp8_linear_delayed(r->fp8[k], role);
            amp_tensor *h = role_buf(r, k, role, 0), *s = role_buf(r, k, role, 1);
            if (!d || !s) continue;
            const int st = amp_fp8_delayed_load(d, h->data, (size_t)amp_tensor_numel(h), ((const float *)s->data)[0]);
            if (st != AMP_OK)
                return amp_train_fail(r, AMP_ERR_FORMAT, "cannot resume from %s: invalid fp8 state in %s",
                                      r->cfg.resume, h->name ? h->name : "a buffer");
        }
    return AMP_OK;
}

static void layer_stats(const amp_train_run_state *r, size_t k, amp_train_fp8_layer *o) {
    layer_name(o->name, sizeof o->name, r->fp8_layers[k]);
    for (int role = 0; role < AMP_FP8_ROLES; role++)
        amp_fp8_linear_stats(r->fp8[k], role, &o->last[role], &o->total[role]);
}

void amp_train_fp8_report(const amp_train_run_state *r, amp_train_result *result) {
    result->fp8_layers = (int)r->n_fp8;
    for (size_t k = 0; k < r->n_fp8 && k < AMP_TRAIN_FP8_MAX_LAYERS; k++) layer_stats(r, k, &result->fp8[k]);
}

int amp_train_fp8_progress(amp_train_run_state *r) {
    for (size_t k = 0; k < r->n_fp8; k++) layer_stats(r, k, &r->fp8_stats[k]);
    return (int)r->n_fp8;
}
