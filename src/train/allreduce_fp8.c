/* Gradient sums with e5m2 on the wire: allreduce_fp8.h describes the scheme. */
#include "allreduce_fp8.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "amp/fp8.h"
#include "amp/status.h"
#include "../core/alloc_internal.h"

float amp_wire_fp8_scale(float amax, int ranks) {
    int k = 0;
    while (k < 30 && (1 << k) < ranks) k++;
    return ldexpf(amp_fp8_current_scale(amax, AMP_F8E5M2, 0.0f, true), -k);
}

int64_t amp_wire_bytes(size_t n, size_t elem_bytes, int ranks) {
    if (ranks <= 1) return 0;
    const size_t p = (size_t)ranks;
    return (int64_t)(2 * (p - 1) * ((n + p - 1) / p) * elem_bytes);
}

static int grow(amp_wire_fp8 *w, size_t n, size_t n_seg) {
    if (n > w->cap_bytes) {
        uint8_t *b = amp_realloc(w->bytes, n);
        if (!b) return AMP_ERR_OUT_OF_MEMORY;
        w->bytes = b, w->cap_bytes = n;
    }
    if (n_seg > w->cap_seg) {
        double *a = amp_realloc(w->amax, n_seg * sizeof *a);
        if (!a) return AMP_ERR_OUT_OF_MEMORY;
        w->amax = a;
        float *s = amp_realloc(w->scale, n_seg * sizeof *s);
        if (!s) return AMP_ERR_OUT_OF_MEMORY;
        w->scale = s, w->cap_seg = n_seg;
    }
    return AMP_OK;
}

int amp_wire_fp8_encode(amp_wire_fp8 *w, amp_comm *c, float *buf, size_t n, const size_t *seg_end, size_t n_seg) {
    if (!w || !c || (n && (!buf || !seg_end || !n_seg)) || (n_seg && seg_end[n_seg - 1] != n))
        return AMP_ERR_INVALID_ARGUMENT;
    int st = grow(w, n, n_seg);
    if (st != AMP_OK) return st;
    w->buf = buf, w->n = n, w->seg_end = seg_end, w->n_seg = n_seg, w->fp32 = false;
    if (n == 0) return AMP_OK;
    /* 1. the segments' amaxes, a NaN as +inf, agreed with MAX */
    for (size_t i = 0, at = 0; i < n_seg; at = seg_end[i++]) {
        float a = 0.0f;
        bool nan = false;
        if (seg_end[i] < at) return AMP_ERR_INVALID_ARGUMENT;
        if ((st = amp_fp8_amax(&a, &nan, buf + at, seg_end[i] - at)) != AMP_OK) return st;
        w->amax[i] = nan ? INFINITY : (double)a;
    }
    if ((st = c->allreduce_f64(c, w->amax, n_seg, AMP_COMM_MAX)) != AMP_OK) return st;
    /* 2. a non-finite amax anywhere: the sum in fp32 */
    for (size_t i = 0; i < n_seg; i++)
        if (!(w->amax[i] <= (double)FLT_MAX)) w->fp32 = true;
    if (w->fp32) return AMP_OK;
    /* 3. each segment at its scale */
    for (size_t i = 0, at = 0; i < n_seg; at = seg_end[i++]) {
        w->scale[i] = amp_wire_fp8_scale((float)w->amax[i], c->size);
        st = amp_fp8_quantize(w->bytes + at, AMP_F8E5M2, buf + at, seg_end[i] - at, w->scale[i]);
        if (st != AMP_OK) return st;
    }
    return AMP_OK;
}

int amp_wire_fp8_start(amp_wire_fp8 *w, amp_comm *c, float *buf, size_t n, const size_t *seg_end, size_t n_seg) {
    const int st = amp_wire_fp8_encode(w, c, buf, n, seg_end, n_seg);
    if (st != AMP_OK || n == 0) return st;
    return w->fp32 ? c->start_grads(c, buf, n, AMP_F32, AMP_F32) : c->start_grads(c, w->bytes, n, AMP_F8E5M2, AMP_F8E5M2);
}

int amp_wire_fp8_decode(amp_wire_fp8 *w, size_t lo, size_t hi) {
    if (!w) return AMP_ERR_NULL_POINTER;
    if (hi > w->n || lo > hi) return AMP_ERR_INVALID_ARGUMENT;
    if (w->fp32) return AMP_OK;
    for (size_t i = 0, at = 0; i < w->n_seg; at = w->seg_end[i++]) {
        const size_t a = at > lo ? at : lo, b = w->seg_end[i] < hi ? w->seg_end[i] : hi;
        if (a >= b) continue;
        const int st = amp_fp8_dequantize(w->buf + a, w->bytes + a, AMP_F8E5M2, b - a, 1.0f / w->scale[i]);
        if (st != AMP_OK) return st;
    }
    return AMP_OK;
}

int amp_wire_fp8_finish(amp_wire_fp8 *w) { return w ? amp_wire_fp8_decode(w, 0, w->n) : AMP_ERR_NULL_POINTER; }

void amp_wire_fp8_free(amp_wire_fp8 *w) {
    if (!w) return;
    amp_free(w->bytes), amp_free(w->amax), amp_free(w->scale);
    memset(w, 0, sizeof *w);
}
