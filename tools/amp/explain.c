/* `amp explain`: why mixed precision needs fp32 master weights, loss scaling and fp32 sums, shown with
 * numbers that amp's own conversions compute at run time.
 *
 * No answer below is typed in: a format's limits are decoded from bit patterns built from the traits
 * table, thresholds are found by halving through amp's rounding, and sums are run step by step. The
 * literals in this file are the experiments' inputs (an update of 0.0001, 4096 copies of 16, the loss
 * scale 2^16, the sample gradients). Everything is computed once into a `struct explain`, then printed
 * either as text or as one JSON line, so the two outputs cannot disagree. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "commands.h"

/* ---- the experiments' inputs ---------------------------------------------------------------- */

#define WEIGHT 1.0f       /* the weight being updated */
#define UPDATE 0.0001f    /* one optimizer update (lr * gradient) */
#define UPDATE_STEPS 1000 /* how many such updates the master-weight demo applies */
#define SUM_COUNT 4096    /* the reduction: SUM_COUNT copies of SUM_VALUE */
#define SUM_VALUE 16.0f
#define LOSS_SCALE 65536.0f /* S = 2^16, PyTorch GradScaler's default init_scale */
#define LOSS_SCALE_LOG2 16

/* Gradient magnitudes to push through fp16 and bf16: two large ones for the overflow side of loss
 * scaling, then the small ones that underflow. */
static const float grad_samples[] = {10.0f, 1.0f, 1e-3f, 1e-5f, 1e-6f, 1e-7f, 1e-8f, 1e-9f, 1e-10f};
enum { N_GRADS = sizeof grad_samples / sizeof grad_samples[0] };

/* A tensor for the fp8 per-tensor scaling demo: its amax is small, as activations' often are. */
static const float fp8_tensor[] = {1e-3f, 1e-4f};
enum { N_FP8_TENSOR = sizeof fp8_tensor / sizeof fp8_tensor[0] };

/* ---- one element through amp_convert ------------------------------------------------------- */

static int convert_status; /* the first failure of amp_convert (sticky); 0 while every call succeeds */

typedef union {
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
} element; /* one element of any dtype, in its storage type */

static void note_status(int rc) {
    if (rc != 0 && convert_status == 0) convert_status = rc;
}

/* The fp32 value of the bit pattern `bits` in `dtype` (amp's decoder, exact). */
static float decode(amp_dtype dtype, uint32_t bits) {
    element e;
    switch (amp_dtype_size(dtype)) {
    case 1: e.u8 = (uint8_t)bits; break;
    case 2: e.u16 = (uint16_t)bits; break;
    default: e.u32 = bits; break;
    }
    float out = NAN;
    note_status(amp_convert(&out, AMP_F32, &e, dtype, 1));
    return out;
}

/* The bit pattern of x in `dtype` (amp's encoder: round to nearest even). */
static uint32_t encode(amp_dtype dtype, float x) {
    element e;
    e.u32 = 0;
    note_status(amp_convert(&e, dtype, &x, AMP_F32, 1));
    switch (amp_dtype_size(dtype)) {
    case 1: return e.u8;
    case 2: return e.u16;
    default: return e.u32;
    }
}

/* x stored in `dtype` and read back: the value the format actually keeps. */
static float round_to(amp_dtype dtype, float x) { return decode(dtype, encode(dtype, x)); }

/* The gap between x and the next larger value of `dtype` (x itself must be representable). */
static float spacing_above(amp_dtype dtype, float x) { return decode(dtype, encode(dtype, x) + 1) - x; }

/* |got - want| / |want|, in double; inf when got overflowed, 1 when it flushed to zero. */
static double rel_error(float got, float want) {
    if (isinf(got)) return INFINITY;
    return fabs((double)got - (double)want) / fabs((double)want);
}

/* ---- the facts ------------------------------------------------------------------------------ */

typedef struct {
    amp_dtype dtype;
    const amp_dtype_info *info;
    float max;           /* decode(max_finite_bits) */
    float min_normal;    /* decode(exponent field 1, fraction 0) */
    float min_subnormal; /* decode(fraction 1) */
    float epsilon;       /* decode(encode(1) + 1) - 1: the gap above 1 */
    float overflow;      /* what 2 * max becomes: inf, or NaN in a format without inf */
    double digits;       /* decimal digits of precision, log10(2 / epsilon) */
    double binades;      /* log2(max / min_subnormal): powers of two the format spans */
    float lost_update;   /* the largest power of two u with fmt(1 + u) == 1, found by halving */
    float one_plus_update; /* fmt(fmt(WEIGHT) + fmt(UPDATE)) */
} format_facts;

typedef struct {
    float value;         /* the gradient, in fp32 */
    float fp16;          /* stored in fp16 as is */
    float fp16_scaled;   /* value * S stored in fp16 */
    float recovered;     /* fp16_scaled / S in fp32: what the optimizer sees after unscaling */
    float bf16;          /* stored in bf16 as is */
} grad_row;

struct explain {
    format_facts fmt[AMP_DTYPE_COUNT];
    /* 2. vanishing updates */
    float tie;             /* the fp16 threshold: the largest power of two lost in 1 + u */
    float tie_next_sum;    /* the next fp32 number above 1 + tie */
    float tie_next_fp16;   /* ...and what fp16 makes of it */
    float fp16_weight;     /* WEIGHT after UPDATE_STEPS updates kept in fp16 */
    float master_weight;   /* WEIGHT after UPDATE_STEPS updates kept in fp32 */
    float master_as_fp16;  /* the fp16 copy of the master weight used for compute */
    /* 3. the fp16 sum */
    float sum_fp32, sum_fp16;
    int stall_step;        /* first add that left the fp16 sum unchanged (0: none) */
    float stall_value;     /* the fp16 sum at that step */
    float stall_spacing;   /* fp16 spacing above stall_value */
    int overflow_step;     /* first add that made the fp16 sum inf (0: none) */
    float exact_sum_as_fp16; /* the fp32 sum stored in fp16 */
    float sum_fp16_pairwise; /* a tree reduction in fp16, as parallel (SIMD, GPU) reductions add */
    int pairwise_overflow_level; /* the tree level (1 = pairs of inputs) that first gave inf (0: none) */
    /* 4. gradients and loss scaling */
    grad_row grads[N_GRADS];
    float fp16_zero;       /* the largest power of two fp16 rounds to 0, found by halving */
    float overflow_above;  /* max(fp16) / S: larger gradients become inf once scaled */
    /* 5. bf16 */
    int bf16_survivors;    /* sample gradients nonzero and finite in bf16 */
    double bf16_worst_error;
    /* 6. fp8 per-tensor scaling */
    float fp8_amax, fp8_scale;
    float fp8_unscaled[N_FP8_TENSOR], fp8_scaled[N_FP8_TENSOR];
};

static void compute_format(format_facts *f, amp_dtype dtype) {
    const amp_dtype_info *info = amp_dtype_get_info(dtype);
    f->dtype = dtype;
    f->info = info;
    f->max = decode(dtype, info->max_finite_bits);
    f->min_normal = decode(dtype, 1u << info->mantissa_bits);
    f->min_subnormal = decode(dtype, 1u);
    f->epsilon = spacing_above(dtype, 1.0f);
    f->overflow = round_to(dtype, 2.0f * f->max);
    f->digits = log10(2.0 / f->epsilon);
    f->binades = log2((double)f->max / f->min_subnormal);
    float u = 1.0f;
    while (u > 0.0f && round_to(dtype, 1.0f + u) != 1.0f) u /= 2.0f;
    f->lost_update = u;
    f->one_plus_update = round_to(dtype, round_to(dtype, WEIGHT) + round_to(dtype, UPDATE));
}

static void compute(struct explain *e) {
    for (int d = 0; d < AMP_DTYPE_COUNT; d++) compute_format(&e->fmt[d], (amp_dtype)d);
    const format_facts *f16 = &e->fmt[AMP_F16];

    /* 2. The halving search stops at a power of two; the next fp32 sum above 1 + tie rounding up
     * shows no larger update is lost either. */
    e->tie = f16->lost_update;
    e->tie_next_sum = decode(AMP_F32, encode(AMP_F32, 1.0f + e->tie) + 1);
    e->tie_next_fp16 = round_to(AMP_F16, e->tie_next_sum);
    float w16 = round_to(AMP_F16, WEIGHT), master = WEIGHT;
    for (int i = 0; i < UPDATE_STEPS; i++) {
        w16 = round_to(AMP_F16, w16 + round_to(AMP_F16, UPDATE));
        master += UPDATE;
    }
    e->fp16_weight = w16;
    e->master_weight = master;
    e->master_as_fp16 = round_to(AMP_F16, master);

    /* 3. An fp16 accumulator: rounded to fp16 after every add. */
    float acc16 = 0.0f, acc32 = 0.0f;
    for (int i = 1; i <= SUM_COUNT; i++) {
        float next = round_to(AMP_F16, acc16 + SUM_VALUE);
        if (next == acc16 && !isinf(next) && e->stall_step == 0) {
            e->stall_step = i;
            e->stall_value = acc16;
            e->stall_spacing = spacing_above(AMP_F16, acc16);
        }
        if (isinf(next) && e->overflow_step == 0) e->overflow_step = i;
        acc16 = next;
        acc32 += SUM_VALUE;
    }
    e->sum_fp16 = acc16;
    e->sum_fp32 = acc32;
    /* The same sum as a tree: partial sums of adjacent pairs, rounded to fp16, level by level. */
    float partial[SUM_COUNT];
    for (int i = 0; i < SUM_COUNT; i++) partial[i] = round_to(AMP_F16, SUM_VALUE);
    e->pairwise_overflow_level = 0;
    int level = 0;
    for (int len = SUM_COUNT; len > 1; len = (len + 1) / 2) {
        level++;
        for (int i = 0; i < len / 2; i++) partial[i] = round_to(AMP_F16, partial[2 * i] + partial[2 * i + 1]);
        if (len % 2) partial[len / 2] = partial[len - 1];
        for (int i = 0; i < (len + 1) / 2 && e->pairwise_overflow_level == 0; i++)
            if (isinf(partial[i])) e->pairwise_overflow_level = level;
    }
    e->sum_fp16_pairwise = partial[0];
    e->exact_sum_as_fp16 = round_to(AMP_F16, acc32);

    /* 4. Each gradient stored in fp16 as is, and scaled by S, stored, unscaled in fp32. */
    e->bf16_survivors = 0;
    e->bf16_worst_error = 0.0;
    for (int i = 0; i < N_GRADS; i++) {
        grad_row *r = &e->grads[i];
        r->value = grad_samples[i];
        r->fp16 = round_to(AMP_F16, r->value);
        r->fp16_scaled = round_to(AMP_F16, r->value * LOSS_SCALE);
        r->recovered = r->fp16_scaled / LOSS_SCALE;
        r->bf16 = round_to(AMP_BF16, r->value);
        if (r->bf16 != 0.0f && isfinite(r->bf16)) e->bf16_survivors++;
        double err = rel_error(r->bf16, r->value);
        if (err > e->bf16_worst_error) e->bf16_worst_error = err;
    }
    float z = 1.0f;
    while (z > 0.0f && round_to(AMP_F16, z) != 0.0f) z /= 2.0f;
    e->fp16_zero = z;
    e->overflow_above = f16->max / LOSS_SCALE;

    /* 6. Per-tensor scaling as Transformer Engine does it: scale = max(fp8) / amax(tensor). */
    const format_facts *e4m3 = &e->fmt[AMP_F8E4M3];
    e->fp8_amax = 0.0f;
    for (int i = 0; i < N_FP8_TENSOR; i++)
        if (fabsf(fp8_tensor[i]) > e->fp8_amax) e->fp8_amax = fabsf(fp8_tensor[i]);
    e->fp8_scale = e4m3->max / e->fp8_amax;
    for (int i = 0; i < N_FP8_TENSOR; i++) {
        e->fp8_unscaled[i] = round_to(AMP_F8E4M3, fp8_tensor[i]);
        e->fp8_scaled[i] = round_to(AMP_F8E4M3, fp8_tensor[i] * e->fp8_scale) / e->fp8_scale;
    }
}

/* ---- number formatting ---------------------------------------------------------------------- */

/* Text strings live in a small ring so one printf can format several numbers. */
enum { RING = 32, CELL = 48 };
static char ring[RING][CELL];
static int ring_next;
static char *ring_cell(void) {
    char *s = ring[ring_next];
    ring_next = (ring_next + 1) % RING;
    return s;
}

/* The shortest %.Ng that reads back as the same float: readable, and still exact. */
static const char *text_float(float x) {
    if (isnan(x)) return "nan";
    if (isinf(x)) return x < 0 ? "-inf" : "inf";
    char *best = ring_cell(), cand[CELL];
    best[0] = '\0';
    for (int p = 1; p <= 9; p++) {
        snprintf(cand, sizeof cand, "%.*g", p, (double)x);
        if (strtof(cand, NULL) == x && (best[0] == '\0' || strlen(cand) < strlen(best))) strcpy(best, cand);
    }
    return best;
}

/* k when x is exactly 2^k. */
static int exact_log2(double x, int *k) {
    int e;
    if (!(x > 0.0) || isinf(x) || frexp(x, &e) != 0.5) return 0;
    *k = e - 1;
    return 1;
}

/* "2^k" for an exact power of two, the decimal value otherwise. */
static const char *text_pow2(float x) {
    int k;
    if (!exact_log2(x, &k)) return text_float(x);
    char *s = ring_cell();
    snprintf(s, CELL, "2^%d", k);
    return s;
}

/* "m x 2^k" with 1 <= m < 2. */
static const char *text_sci2(float x) {
    int e;
    double m = frexp(x, &e);
    char *s = ring_cell();
    snprintf(s, CELL, "%s x 2^%d", text_float((float)(2.0 * m)), e - 1);
    return s;
}

/* A relative error for a table cell. */
static const char *text_error(double err) {
    if (isnan(err)) return "nan";
    if (isinf(err)) return "inf";
    if (err == 0.0) return "0";
    char *s = ring_cell();
    if (err * 100.0 < 0.001)
        snprintf(s, CELL, "<0.001%%");
    else if (err < 1.0)
        snprintf(s, CELL, "%.2g%%", err * 100.0);
    else
        snprintf(s, CELL, "%.0f%%", err * 100.0);
    return s;
}

/* How `dtype` stores the value v: zero, subnormal (fewer bits), normal, or overflow. */
static const char *value_kind(const format_facts *f, float v) {
    if (isnan(v)) return "nan";
    if (isinf(v)) return "inf";
    if (v == 0.0f) return "zero";
    return fabsf(v) < f->min_normal ? "subnormal" : "normal";
}

/* ---- text ----------------------------------------------------------------------------------- */

/* 1. Each format's limits, decoded from bit patterns. */
static void text_formats(const struct explain *e) {
    const format_facts *f16 = &e->fmt[AMP_F16], *bf16 = &e->fmt[AMP_BF16];
    printf("\n1. The formats\n");
    printf("   Decoded from bit patterns built from the traits table: max = max_finite_bits, smallest normal =\n"
           "   exponent field 1, smallest subnormal = fraction 1, epsilon = decode(encode(1) + 1) - 1.\n\n");
    printf("   %-7s %3s %3s  %-15s %-15s %-15s %-14s %6s  %s\n", "format", "exp", "man", "max", "min normal",
           "min subnormal", "epsilon", "digits", "2*max ->");
    for (int d = 0; d < AMP_DTYPE_COUNT; d++) {
        const format_facts *f = &e->fmt[d];
        printf("   %-7s %3d %3d  %-15s %-15s %-15s %-14s %6.1f  %s%s\n", f->info->name, f->info->exponent_bits,
               f->info->mantissa_bits, text_float(f->max), text_float(f->min_normal), text_float(f->min_subnormal),
               text_float(f->epsilon), f->digits, text_float(f->overflow), f->info->has_inf ? "" : " (no inf)");
    }
    printf("\n   %-7s %-22s %-11s %-14s %-8s %s\n", "format", "max", "min normal", "min subnormal", "epsilon",
           "binades");
    for (int d = 0; d < AMP_DTYPE_COUNT; d++) {
        const format_facts *f = &e->fmt[d];
        printf("   %-7s %-22s %-11s %-14s %-8s %.1f\n", f->info->name, text_sci2(f->max), text_pow2(f->min_normal),
               text_pow2(f->min_subnormal), text_pow2(f->epsilon), f->binades);
    }
    printf("   takeaway: fp16 keeps %.1f digits but only spans %s..%s; bf16 spans fp32's range with %.1f digits.\n",
           f16->digits, text_pow2(f16->min_subnormal), text_float(f16->max), bf16->digits);
}

/* 2. Small updates vanish: why the optimizer keeps fp32 master weights. */
static void text_updates(const struct explain *e) {
    const format_facts *f32 = &e->fmt[AMP_F32], *f16 = &e->fmt[AMP_F16];
    printf("\n2. Small updates vanish: why the optimizer keeps fp32 master weights\n");
    printf("   Weight w = %s, update u = %s; each format rounds both operands and the sum.\n\n", text_float(WEIGHT),
           text_float(UPDATE));
    printf("   %-7s %-24s %-10s %s\n", "format", "w + u", "", "largest lost u (halving u from 1)");
    for (int d = 0; d < AMP_DTYPE_COUNT; d++) {
        const format_facts *f = &e->fmt[d];
        char sum[CELL];
        snprintf(sum, sizeof sum, "%s + %s = %s", text_float(WEIGHT), text_float(UPDATE),
                 text_float(f->one_plus_update));
        printf("   %-7s %-24s %-10s %s\n", f->info->name, sum, f->one_plus_update == WEIGHT ? "lost" : "kept",
               text_pow2(f->lost_update));
    }
    printf("\n   In fp16, 1 + %s = %s is a tie between 1 and 1 + %s and rounds to even, to 1;\n", text_pow2(e->tie),
           text_float(1.0f + e->tie), text_pow2(f16->epsilon));
    printf("   the next fp32 sum, %s, rounds up to %s: %s is the exact threshold.\n", text_float(e->tie_next_sum),
           text_float(e->tie_next_fp16), text_pow2(e->tie));
    printf("   After %d updates of %s: fp16 weight %s; fp32 master weight %s, whose fp16 copy is %s.\n", UPDATE_STEPS,
           text_float(UPDATE), text_float(e->fp16_weight), text_float(e->master_weight),
           text_float(e->master_as_fp16));
    printf("   takeaway: an fp16 update of %s of the weight or less is lost; fp32 master weights (lost only\n"
           "   at or below %s) keep it, and the fp16 copy for compute is cast from them each step.\n",
           text_pow2(e->tie), text_pow2(f32->lost_update));
}

/* 3. Summing in fp16: why reductions accumulate in fp32. */
static void text_sums(const struct explain *e) {
    const format_facts *f16 = &e->fmt[AMP_F16];
    printf("\n3. Summing in fp16: why reductions accumulate in fp32\n");
    printf("   Sum %d copies of %s (the true sum is %s; fp16 max is %s).\n\n", SUM_COUNT, text_float(SUM_VALUE),
           text_float(e->sum_fp32), text_float(f16->max));
    printf("   %-34s %-8s exact\n", "fp32 accumulator", text_float(e->sum_fp32));
    printf("   %-34s %-8s ", "fp16 accumulator (round every add)", text_float(e->sum_fp16));
    if (e->overflow_step)
        printf("overflowed to inf at step %d\n", e->overflow_step);
    else
        printf("never overflowed: it stopped growing\n");
    printf("   %-34s %-8s ", "fp16 pairwise (tree) sum", text_float(e->sum_fp16_pairwise));
    if (e->pairwise_overflow_level)
        printf("overflowed at tree level %d (how parallel reductions add)\n", e->pairwise_overflow_level);
    else
        printf("never overflowed\n");
    printf("   %-34s %-8s %s > fp16 max %s\n", "the fp32 sum stored in fp16", text_float(e->exact_sum_as_fp16),
           text_float(e->sum_fp32), text_float(f16->max));
    if (e->stall_step)
        printf("   The fp16 sum stalled at step %d: at %s the fp16 spacing is %s, so + %s is a tie that\n"
               "   rounds back to even, and the remaining %d adds are lost.\n",
               e->stall_step, text_float(e->stall_value), text_float(e->stall_spacing), text_float(SUM_VALUE),
               SUM_COUNT - e->stall_step + 1);
    printf("   takeaway: a sequential fp16 sum stops growing long before it overflows, a tree sum (SIMD, GPU)\n"
           "   overflows, and the right answer (%s) is %s in fp16 anyway: accumulate in fp32.\n",
           text_float(e->sum_fp32), text_float(e->exact_sum_as_fp16));
}

/* 4. Small gradients underflow in fp16: why the loss is scaled. */
static void text_gradients(const struct explain *e) {
    const format_facts *f16 = &e->fmt[AMP_F16];
    printf("\n4. Small gradients underflow in fp16: why the loss is scaled (S = 2^%d)\n", LOSS_SCALE_LOG2);
    printf("   Each gradient g stored in fp16 as is, and as g*S in fp16 then /S in fp32 (what the scaler does).\n\n");
    printf("   %-8s | %-33s | %-33s | %s\n", "", "fp16(g)", "fp16(g*S) / S", "bf16(g)");
    printf("   %-8s | %-14s %-9s %-8s | %-14s %-9s %-8s | %-14s %s\n", "gradient", "value", "kind", "err", "value",
           "kind", "err", "value", "err");
    for (int i = 0; i < N_GRADS; i++) {
        const grad_row *r = &e->grads[i];
        printf("   %-8s | %-14s %-9s %-8s | %-14s %-9s %-8s | %-14s %s\n", text_float(r->value), text_float(r->fp16),
               value_kind(f16, r->fp16), text_error(rel_error(r->fp16, r->value)), text_float(r->recovered),
               value_kind(f16, r->fp16_scaled), text_error(rel_error(r->recovered, r->value)), text_float(r->bf16),
               text_error(rel_error(r->bf16, r->value)));
    }
    printf("   (kind: how fp16 stores the value, or g*S; err: relative error against g)\n\n");
    printf("   fp16 as is: full precision down to %s, fewer bits down to %s (subnormals), 0 at or below %s.\n",
           text_pow2(f16->min_normal), text_pow2(f16->min_subnormal), text_pow2(e->fp16_zero));
    printf("   scaled by S=2^%d: full precision down to %s, subnormal down to %s, 0 at or below %s.\n",
           LOSS_SCALE_LOG2, text_pow2(f16->min_normal / LOSS_SCALE), text_pow2(f16->min_subnormal / LOSS_SCALE),
           text_pow2(e->fp16_zero / LOSS_SCALE));
    printf("   overflow: a gradient above %s / S = %s becomes inf once scaled; the scaler then skips the\n"
           "   step and lowers S (backoff), and raises S again after a run of finite steps.\n",
           text_float(f16->max), text_float(e->overflow_above));
    printf("   takeaway: loss scaling shifts fp16's %.0f binades down by %d, from [%s, %s] to [%s, %s].\n",
           f16->binades, LOSS_SCALE_LOG2, text_pow2(f16->min_subnormal), text_float(f16->max),
           text_pow2(f16->min_subnormal / LOSS_SCALE), text_float(e->overflow_above));
}

/* 5. bf16: fp32's range, so no loss scaling, but little precision. */
static void text_bf16(const struct explain *e) {
    const format_facts *f32 = &e->fmt[AMP_F32], *bf16 = &e->fmt[AMP_BF16];
    printf("\n5. bf16: fp32's exponent range, so no loss scaling, but little precision\n");
    printf("   min normal %s (fp32 %s), min subnormal %s (fp32 %s), max %s (fp32 %s).\n", text_pow2(bf16->min_normal),
           text_pow2(f32->min_normal), text_pow2(bf16->min_subnormal), text_pow2(f32->min_subnormal),
           text_float(bf16->max), text_float(f32->max));
    printf("   %d of the %d gradients above survive in bf16 unscaled (worst relative error %s),\n", e->bf16_survivors,
           N_GRADS, text_error(e->bf16_worst_error));
    printf("   but epsilon is %s: %s + %s = %s in bf16, updates of %s of the weight or less are lost.\n",
           text_pow2(bf16->epsilon), text_float(WEIGHT), text_float(UPDATE), text_float(bf16->one_plus_update),
           text_pow2(bf16->lost_update));
    printf("   takeaway: bf16 needs no loss scaler, but still needs fp32 master weights and fp32 sums.\n");
}

/* 6. fp8: two formats, each needing a per-tensor scale. */
static void text_fp8(const struct explain *e) {
    const format_facts *f16 = &e->fmt[AMP_F16], *e4m3 = &e->fmt[AMP_F8E4M3], *e5m2 = &e->fmt[AMP_F8E5M2];
    printf("\n6. fp8: two formats, each needing a per-tensor scale\n");
    printf("   %-7s max +-%s, min subnormal %s, epsilon %s, %.1f binades, overflow -> %s: activations, weights\n",
           e4m3->info->name, text_float(e4m3->max), text_pow2(e4m3->min_subnormal), text_pow2(e4m3->epsilon),
           e4m3->binades, text_float(e4m3->overflow));
    printf("   %-7s max +-%s, min subnormal %s, epsilon %s, %.1f binades, overflow -> %s: gradients\n",
           e5m2->info->name, text_float(e5m2->max), text_pow2(e5m2->min_subnormal), text_pow2(e5m2->epsilon),
           e5m2->binades, text_float(e5m2->overflow));
    printf("   e.g. a tensor with amax %s in %s, scale = %s / amax = %s:\n", text_float(e->fp8_amax),
           e4m3->info->name, text_float(e4m3->max), text_float(e->fp8_scale));
    for (int i = 0; i < N_FP8_TENSOR; i++)
        printf("     %-8s -> %-12s unscaled, %-14s scaled then unscaled in fp32\n", text_float(fp8_tensor[i]),
               text_float(e->fp8_unscaled[i]), text_float(e->fp8_scaled[i]));
    printf("   takeaway: %.0f binades (e4m3) cannot hold both large and small tensors; each tensor is scaled by\n"
           "   max / amax into range (fp16 spans %.0f, so one global loss scale is enough there).\n",
           e4m3->binades, f16->binades);
}

static void print_text(const struct explain *e) {
    printf("amp explain: the numbers behind mixed precision, computed now by amp %s's own conversions\n",
           amp_version());
    text_formats(e);
    text_updates(e);
    text_sums(e);
    text_gradients(e);
    text_bf16(e);
    text_fp8(e);
}

/* ---- JSON ----------------------------------------------------------------------------------- */

/* A minimal writer for one line of JSON. Keys and strings here are ASCII from this file or the
 * traits table; they are escaped anyway. Non-finite numbers are the strings "inf", "-inf", "nan". */
enum { JSON_MAX_DEPTH = 8 };
typedef struct {
    int depth;
    int count[JSON_MAX_DEPTH];
} json_writer;

static void json_string_raw(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void json_key(json_writer *w, const char *key) {
    if (w->count[w->depth]++) putchar(',');
    if (key) {
        json_string_raw(key);
        putchar(':');
    }
}

static void json_open(json_writer *w, const char *key, char bracket) {
    json_key(w, key);
    putchar(bracket);
    if (w->depth + 1 < JSON_MAX_DEPTH) w->count[++w->depth] = 0;
}

static void json_close(json_writer *w, char bracket) {
    putchar(bracket);
    if (w->depth > 0) w->depth--;
}

/* The shortest %.Ng that reads back as the same double; every float is exact as a double. */
static void json_number(json_writer *w, const char *key, double x) {
    json_key(w, key);
    if (isnan(x)) {
        printf("\"nan\"");
        return;
    }
    if (isinf(x)) {
        printf(x < 0 ? "\"-inf\"" : "\"inf\"");
        return;
    }
    char best[CELL] = "", cand[CELL];
    for (int p = 1; p <= 17; p++) {
        snprintf(cand, sizeof cand, "%.*g", p, x);
        if (strtod(cand, NULL) == x && (best[0] == '\0' || strlen(cand) < strlen(best))) strcpy(best, cand);
    }
    fputs(best, stdout);
}

static void json_int(json_writer *w, const char *key, long v) {
    json_key(w, key);
    printf("%ld", v);
}

/* The exponent of an exact power of two, or null. */
static void json_log2(json_writer *w, const char *key, double x) {
    int k;
    if (exact_log2(x, &k)) {
        json_int(w, key, k);
    } else {
        json_key(w, key);
        printf("null");
    }
}

static void json_bool(json_writer *w, const char *key, int v) {
    json_key(w, key);
    printf(v ? "true" : "false");
}

static void json_string(json_writer *w, const char *key, const char *s) {
    json_key(w, key);
    json_string_raw(s);
}

static void json_step(json_writer *w, const char *key, int step) {
    if (step) {
        json_int(w, key, step);
    } else {
        json_key(w, key);
        printf("null");
    }
}

/* "formats": each format's limits, by the traits table's name. */
static void json_formats(json_writer *w, const struct explain *e) {
    json_open(w, "formats", '{');
    for (int d = 0; d < AMP_DTYPE_COUNT; d++) {
        const format_facts *f = &e->fmt[d];
        char bits[16];
        json_open(w, f->info->name, '{');
        json_int(w, "bits", f->info->bits);
        json_int(w, "exponent_bits", f->info->exponent_bits);
        json_int(w, "mantissa_bits", f->info->mantissa_bits);
        json_number(w, "max", f->max);
        snprintf(bits, sizeof bits, "0x%0*X", f->info->bits / 4, f->info->max_finite_bits);
        json_string(w, "max_bits", bits);
        json_number(w, "min_normal", f->min_normal);
        json_log2(w, "min_normal_log2", f->min_normal);
        json_number(w, "min_subnormal", f->min_subnormal);
        json_log2(w, "min_subnormal_log2", f->min_subnormal);
        json_number(w, "epsilon", f->epsilon);
        json_log2(w, "epsilon_log2", f->epsilon);
        json_number(w, "decimal_digits", f->digits);
        json_number(w, "binades", f->binades);
        json_bool(w, "has_inf", f->info->has_inf);
        json_number(w, "overflow", f->overflow);
        json_close(w, '}');
    }
    json_close(w, '}');
}

/* "vanishing_update": WEIGHT + UPDATE in every format, and the master-weight demo. */
static void json_vanishing_update(json_writer *w, const struct explain *e) {
    json_open(w, "vanishing_update", '{');
    json_number(w, "weight", WEIGHT);
    json_number(w, "update", UPDATE);
    for (int d = 0; d < AMP_DTYPE_COUNT; d++) {
        /* keys "fp32", "fp16", ... made from the traits names "f32", "f16", ... */
        const char *name = e->fmt[d].info->name;
        char key[32];
        snprintf(key, sizeof key, "%s%s", name[0] == 'f' ? "fp" : "", name[0] == 'f' ? name + 1 : name);
        json_number(w, key, e->fmt[d].one_plus_update);
    }
    json_number(w, "threshold", e->tie);
    json_log2(w, "threshold_log2", e->tie);
    json_number(w, "next_fp32_sum_above_threshold", e->tie_next_sum);
    json_number(w, "next_fp32_sum_in_fp16", e->tie_next_fp16);
    json_open(w, "lost_update_log2", '{');
    for (int d = 0; d < AMP_DTYPE_COUNT; d++) json_log2(w, e->fmt[d].info->name, e->fmt[d].lost_update);
    json_close(w, '}');
    json_int(w, "steps", UPDATE_STEPS);
    json_number(w, "fp16_weight_after_steps", e->fp16_weight);
    json_number(w, "fp32_master_after_steps", e->master_weight);
    json_number(w, "fp16_copy_of_master", e->master_as_fp16);
    json_close(w, '}');
}

/* "fp16_sum_4096x16": the sums of SUM_COUNT copies of SUM_VALUE. */
static void json_sum(json_writer *w, const struct explain *e) {
    json_open(w, "fp16_sum_4096x16", '{');
    json_int(w, "count", SUM_COUNT);
    json_number(w, "value", SUM_VALUE);
    json_number(w, "fp32_accumulator", e->sum_fp32);
    json_number(w, "fp16_accumulator", e->sum_fp16);
    json_step(w, "fp16_overflow_step", e->overflow_step);
    json_number(w, "fp16_pairwise_accumulator", e->sum_fp16_pairwise);
    json_step(w, "fp16_pairwise_overflow_level", e->pairwise_overflow_level);
    json_step(w, "fp16_stall_step", e->stall_step);
    json_number(w, "fp16_stall_value", e->stall_step ? e->stall_value : NAN);
    json_number(w, "fp16_spacing_at_stall", e->stall_step ? e->stall_spacing : NAN);
    json_number(w, "fp32_sum_as_fp16", e->exact_sum_as_fp16);
    json_close(w, '}');
}

/* "gradients": one object per gradient sample. */
static void json_gradients(json_writer *w, const struct explain *e) {
    const format_facts *f16 = &e->fmt[AMP_F16];
    json_open(w, "gradients", '[');
    for (int i = 0; i < N_GRADS; i++) {
        const grad_row *r = &e->grads[i];
        json_open(w, NULL, '{');
        json_number(w, "value", r->value);
        json_number(w, "fp16", r->fp16);
        json_string(w, "fp16_kind", value_kind(f16, r->fp16));
        json_number(w, "fp16_rel_error", rel_error(r->fp16, r->value));
        json_number(w, "fp16_scaled", r->fp16_scaled);
        json_string(w, "fp16_scaled_kind", value_kind(f16, r->fp16_scaled));
        json_number(w, "fp16_scaled_unscaled", r->recovered);
        json_number(w, "fp16_scaled_rel_error", rel_error(r->recovered, r->value));
        json_number(w, "bf16", r->bf16);
        json_number(w, "bf16_rel_error", rel_error(r->bf16, r->value));
        json_close(w, '}');
    }
    json_close(w, ']');
}

/* "loss_scaling": fp16's range before and after scaling by LOSS_SCALE. */
static void json_loss_scaling(json_writer *w, const struct explain *e) {
    const format_facts *f16 = &e->fmt[AMP_F16];
    json_open(w, "loss_scaling", '{');
    json_number(w, "scale", LOSS_SCALE);
    json_int(w, "scale_log2", LOSS_SCALE_LOG2);
    json_log2(w, "fp16_full_precision_log2", f16->min_normal);
    json_log2(w, "fp16_floor_log2", f16->min_subnormal);
    json_log2(w, "fp16_zero_at_or_below_log2", e->fp16_zero);
    json_log2(w, "scaled_full_precision_log2", f16->min_normal / LOSS_SCALE);
    json_log2(w, "scaled_floor_log2", f16->min_subnormal / LOSS_SCALE);
    json_log2(w, "scaled_zero_at_or_below_log2", e->fp16_zero / LOSS_SCALE);
    json_number(w, "scaled_overflow_above", e->overflow_above);
    json_close(w, '}');
}

/* "bf16": its range and precision next to fp32's. */
static void json_bf16(json_writer *w, const struct explain *e) {
    const format_facts *f32 = &e->fmt[AMP_F32], *bf16 = &e->fmt[AMP_BF16];
    json_open(w, "bf16", '{');
    json_bool(w, "same_min_normal_as_fp32", bf16->min_normal == f32->min_normal);
    json_log2(w, "min_normal_log2", bf16->min_normal);
    json_log2(w, "min_subnormal_log2", bf16->min_subnormal);
    json_log2(w, "epsilon_log2", bf16->epsilon);
    json_int(w, "gradients_surviving", e->bf16_survivors);
    json_int(w, "gradients_total", N_GRADS);
    json_number(w, "worst_gradient_rel_error", e->bf16_worst_error);
    json_number(w, "one_plus_update", bf16->one_plus_update);
    json_close(w, '}');
}

/* "fp8": the two formats and the per-tensor scaling demo. */
static void json_fp8(json_writer *w, const struct explain *e) {
    json_open(w, "fp8", '{');
    static const struct {
        amp_dtype dtype;
        const char *use;
    } fp8_uses[] = {{AMP_F8E4M3, "activations and weights"}, {AMP_F8E5M2, "gradients"}};
    for (size_t i = 0; i < sizeof fp8_uses / sizeof fp8_uses[0]; i++) {
        const format_facts *f = &e->fmt[fp8_uses[i].dtype];
        json_open(w, f->info->name, '{');
        json_number(w, "max", f->max);
        json_number(w, "binades", f->binades);
        json_string(w, "use", fp8_uses[i].use);
        json_close(w, '}');
    }
    json_open(w, "per_tensor_scaling", '{');
    json_number(w, "amax", e->fp8_amax);
    json_number(w, "scale", e->fp8_scale);
    json_open(w, "values", '[');
    for (int i = 0; i < N_FP8_TENSOR; i++) {
        json_open(w, NULL, '{');
        json_number(w, "value", fp8_tensor[i]);
        json_number(w, "f8e4m3_unscaled", e->fp8_unscaled[i]);
        json_number(w, "f8e4m3_scaled", e->fp8_scaled[i]);
        json_close(w, '}');
    }
    json_close(w, ']');
    json_close(w, '}');
    json_close(w, '}');
}

static void print_json(const struct explain *e) {
    json_writer w = {0, {0}};
    json_open(&w, NULL, '{');
    json_string(&w, "amp_version", amp_version());
    json_string(&w, "nonfinite", "numbers that are not finite are the strings \"inf\", \"-inf\" and \"nan\"");
    json_formats(&w, e);
    json_vanishing_update(&w, e);
    json_sum(&w, e);
    json_gradients(&w, e);
    json_loss_scaling(&w, e);
    json_bf16(&w, e);
    json_fp8(&w, e);
    json_close(&w, '}');
    putchar('\n');
}

/* ---- the command ---------------------------------------------------------------------------- */

static void print_help(void) {
    printf("usage: amp explain [--json]\n"
           "Shows, computed live by amp's own conversions, the facts behind mixed precision: each format's\n"
           "range and precision, why small updates need fp32 master weights, why sums need an fp32\n"
           "accumulator, why fp16 gradients need loss scaling and bf16 ones do not, and why fp8 needs\n"
           "per-tensor scales.\n\n"
           "  --json   print the same facts as one JSON object on one line. Numbers round-trip as doubles\n"
           "           (every value is an exact fp32 value); numbers that are not finite are the strings\n"
           "           \"inf\", \"-inf\" and \"nan\"; a *_log2 key is null when its value is not a power of two.\n"
           "  --help   print this help\n");
}

int amp_cmd_explain(int argc, char **argv) {
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help();
            return AMP_EXIT_OK;
        }
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else
            return amp_usage_error("explain", "unknown option '%s'", argv[i]);
    }
    if (amp_cli_parse_only) return AMP_EXIT_OK;
    static struct explain facts; /* static: zeroed, and off the stack */
    compute(&facts);
    if (convert_status != 0) {
        fprintf(stderr, "amp: explain: amp_convert failed: %s\n", amp_status_str(convert_status));
        return AMP_EXIT_FAILURE;
    }
    if (json)
        print_json(&facts);
    else
        print_text(&facts);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "amp: explain: cannot write the output\n");
        return AMP_EXIT_FAILURE;
    }
    return AMP_EXIT_OK;
}
