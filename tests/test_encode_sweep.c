/* fp32 -> narrow for every one of the 2^32 fp32 inputs, for all eight encoders (four formats, plain
 * and saturating), through the scalar functions and through amp_convert / amp_convert_sat on every
 * supported path, bit for bit against the reference.
 *
 * The input space is cut into slabs; for each slab the reference runs once and every path is compared
 * against it with memcmp. Threads take slabs round-robin. amp_isa_set() is process-wide, so the
 * threads move through the paths together: a barrier, one thread switches the path, a barrier, then
 * every thread converts its slab on that path.
 *
 * With AMP_TEST_QUICK set (the sanitizer run) the sweep covers a strided subset instead: every 4099th
 * pattern, plus for every format the fp32 inputs within 2 ulps of each midpoint between neighbouring
 * values (the ties, including the overflow threshold above max and the one between 0 and the smallest
 * subnormal), within 1 ulp of each value, and around fp32's own specials. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "reference_formats.h"
#include "test_util.h"
#include "tests.h"

enum {
    SLAB = 1 << 18,        /* inputs per thread per round: big enough that the barriers cost nothing */
    QUICK_STRIDE = 4099,   /* odd (prime), so the subset meets every combination of the low fraction bits */
    SHOWN_PER_SLAB = 3,    /* mismatching inputs printed per failed comparison */
};

#define SCALAR_ARRAY(name, type, fn)                                                                 \
    static void name(const float *x, size_t n, void *out) {                                          \
        type *o = out;                                                                               \
        for (size_t i = 0; i < n; i++) o[i] = fn(x[i]);                                              \
    }
SCALAR_ARRAY(scalar_f16, uint16_t, amp_fp16_from_fp32)
SCALAR_ARRAY(scalar_f16_sat, uint16_t, amp_fp16_from_fp32_sat)
SCALAR_ARRAY(scalar_bf16, uint16_t, amp_bf16_from_fp32)
SCALAR_ARRAY(scalar_bf16_sat, uint16_t, amp_bf16_from_fp32_sat)
SCALAR_ARRAY(scalar_e4m3, uint8_t, amp_fp8e4m3_from_fp32)
SCALAR_ARRAY(scalar_e4m3_sat, uint8_t, amp_fp8e4m3_from_fp32_sat)
SCALAR_ARRAY(scalar_e5m2, uint8_t, amp_fp8e5m2_from_fp32)
SCALAR_ARRAY(scalar_e5m2_sat, uint8_t, amp_fp8e5m2_from_fp32_sat)

/* [format index in ref_narrow_dtypes][saturate] */
static void (*const scalar_encoders[REF_NARROW_COUNT][2])(const float *, size_t, void *) = {
    {scalar_f16, scalar_f16_sat},
    {scalar_bf16, scalar_bf16_sat},
    {scalar_e4m3, scalar_e4m3_sat},
    {scalar_e5m2, scalar_e5m2_sat},
};

typedef struct sweep {
    const uint32_t *list; /* the inputs, or NULL for all 2^32 patterns in order */
    uint64_t total;
    int threads;
    uint64_t rounds;
    amp_isa isas[AMP_ISA_COUNT];
    int isa_count;
    pthread_barrier_t barrier;
} sweep;

typedef struct worker {
    sweep *s;
    int index;
    pthread_t thread;
    float *x;                                 /* SLAB inputs */
    unsigned char *want[REF_NARROW_COUNT][2]; /* SLAB reference outputs per encoder */
    unsigned char *got;                       /* SLAB outputs of the path under test */
} worker;

/* One comparison of a whole slab is one check; on failure, the first few wrong inputs are shown. */
static void compare(const char *path, int f, int sat, const float *x, const void *got, const void *want, size_t n) {
    const amp_dtype dt = ref_narrow_dtypes[f];
    if (memcmp(got, want, n * amp_dtype_size(dt)) == 0) {
        harness_pass(1);
        return;
    }
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t g = test_elem_get(dt, got, i), w = test_elem_get(dt, want, i);
        if (g == w) continue;
        if (wrong++ < SHOWN_PER_SLAB)
            harness_check_bits(g, w, __FILE__, __LINE__, "out", "%s %s%s, input 0x%08X", path, amp_dtype_name(dt),
                               sat ? " sat" : "", f32_bits(x[i]));
    }
    CHECK_MSG(false, "%s %s%s: %zu of %zu inputs in this slab wrong", path, amp_dtype_name(dt), sat ? " sat" : "",
              wrong, n);
}

static void *sweep_worker(void *arg) {
    worker *w = arg;
    sweep *s = w->s;
    for (uint64_t round = 0; round < s->rounds; round++) {
        const uint64_t start = (round * (uint64_t)s->threads + (uint64_t)w->index) * SLAB;
        const size_t n = start >= s->total ? 0 : (size_t)(s->total - start < SLAB ? s->total - start : SLAB);
        for (size_t i = 0; i < n; i++) w->x[i] = f32_from_bits(s->list ? s->list[start + i] : (uint32_t)(start + i));
        for (int f = 0; f < REF_NARROW_COUNT && n; f++) {
            ref_encode_array(ref_narrow_dtypes[f], w->x, n, w->want[f][0], w->want[f][1]);
            for (int sat = 0; sat < 2; sat++) {
                scalar_encoders[f][sat](w->x, n, w->got);
                compare("scalar", f, sat, w->x, w->got, w->want[f][sat], n);
            }
        }
        /* Every thread takes part in every barrier, with or without a slab, or the others would wait
         * forever in the last round. */
        for (int k = 0; k < s->isa_count; k++) {
            const amp_isa isa = s->isas[k];
            if (pthread_barrier_wait(&s->barrier) == PTHREAD_BARRIER_SERIAL_THREAD) amp_isa_set(isa);
            pthread_barrier_wait(&s->barrier);
            if (!n) continue;
            char path[48];
            snprintf(path, sizeof path, "amp_convert[%s]", amp_isa_name(isa));
            CHECK_MSG(amp_isa_active() == isa, "%s: active path is %s", path, amp_isa_name(amp_isa_active()));
            for (int f = 0; f < REF_NARROW_COUNT; f++) {
                const amp_dtype dt = ref_narrow_dtypes[f];
                CHECK_EQ_INT(amp_convert(w->got, dt, w->x, AMP_F32, n), AMP_OK);
                compare(path, f, 0, w->x, w->got, w->want[f][0], n);
                CHECK_EQ_INT(amp_convert_sat(w->got, dt, w->x, AMP_F32, n), AMP_OK);
                compare(path, f, 1, w->x, w->got, w->want[f][1], n);
            }
        }
    }
    return NULL;
}

static int compare_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Appends bits + k for k in [-reach, reach], with and without the sign bit. */
static size_t add_around(uint32_t *list, size_t count, uint32_t bits, int reach) {
    for (int k = -reach; k <= reach; k++) {
        list[count++] = (bits + (uint32_t)k) & 0x7FFFFFFFu;
        list[count++] = (bits + (uint32_t)k) | 0x80000000u;
    }
    return count;
}

/* The AMP_TEST_QUICK inputs, sorted and without duplicates. */
static uint32_t *quick_inputs(size_t *out_count) {
    static const uint32_t f32_specials[] = {0x00000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u, 0x3F800000u,
                                            0x7F7FFFFFu, 0x7F800000u, 0x7F800001u, 0x7FBFFFFFu, 0x7FC00000u,
                                            0x7FFFFFFFu};
    size_t capacity = (size_t)(UINT64_C(1) << 32) / QUICK_STRIDE + 1 + 2 * 5 * sizeof f32_specials / sizeof(uint32_t);
    for (int f = 0; f < REF_NARROW_COUNT; f++) capacity += (ref_max_bits(ref_narrow_dtypes[f]) + 1) * 2 * (5 + 3);
    uint32_t *list = malloc(capacity * sizeof *list);
    if (!list) return NULL;
    size_t count = 0;
    for (uint64_t b = 0; b < (UINT64_C(1) << 32); b += QUICK_STRIDE) list[count++] = (uint32_t)b;
    for (size_t i = 0; i < sizeof f32_specials / sizeof f32_specials[0]; i++)
        count = add_around(list, count, f32_specials[i], 2);
    for (int f = 0; f < REF_NARROW_COUNT; f++) {
        const amp_dtype dt = ref_narrow_dtypes[f];
        const unsigned max_bits = ref_max_bits(dt);
        for (unsigned p = 0; p <= max_bits; p++) {
            const double a = ref_decode_value(dt, p);
            /* Above max, the next value the format would have with more exponent range: max + ulp. */
            const double b = p < max_bits ? ref_decode_value(dt, p + 1) : 2 * a - ref_decode_value(dt, p - 1);
            count = add_around(list, count, f32_bits((float)((a + b) / 2)), 2); /* exact: <= 12 bits */
            count = add_around(list, count, f32_bits((float)a), 1);
        }
    }
    qsort(list, count, sizeof *list, compare_u32);
    size_t unique = 0;
    for (size_t i = 0; i < count; i++)
        if (unique == 0 || list[i] != list[unique - 1]) list[unique++] = list[i];
    *out_count = unique;
    return list;
}

void test_encode_sweep(void) {
    sweep s = {0};
    uint32_t *list = NULL;
    if (harness_quick()) {
        size_t count = 0;
        list = quick_inputs(&count);
        if (!CHECK(list != NULL)) return;
        s.list = list;
        s.total = count;
    } else {
        s.total = UINT64_C(1) << 32;
    }
    s.threads = test_thread_count();
    s.isa_count = test_supported_isas(s.isas);
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++)
        if (!amp_isa_supported((amp_isa)isa))
            harness_note("isa %s: not supported by this CPU, skipped", amp_isa_name((amp_isa)isa));
    const uint64_t per_round = (uint64_t)s.threads * SLAB;
    s.rounds = (s.total + per_round - 1) / per_round;
    harness_note("%s: %llu fp32 inputs x 8 encoders, scalar + %d path(s), %d thread(s)",
                 s.list ? "AMP_TEST_QUICK strided sweep" : "exhaustive sweep", (unsigned long long)s.total,
                 s.isa_count, s.threads);

    const amp_isa before = amp_isa_active();
    worker *workers = calloc((size_t)s.threads, sizeof *workers);
    int started = 0;
    if (!CHECK(workers != NULL)) goto done;
    if (!CHECK(pthread_barrier_init(&s.barrier, NULL, (unsigned)s.threads) == 0)) goto done;
    for (int t = 0; t < s.threads; t++) {
        worker *w = &workers[t];
        w->s = &s;
        w->index = t;
        w->x = malloc(SLAB * sizeof *w->x);
        w->got = malloc(SLAB * 2);
        bool ok = w->x && w->got;
        for (int f = 0; f < REF_NARROW_COUNT; f++)
            for (int sat = 0; sat < 2; sat++) ok = (w->want[f][sat] = malloc(SLAB * 2)) != NULL && ok;
        if (!CHECK(ok)) goto join;
    }
    for (; started < s.threads; started++)
        if (!CHECK(pthread_create(&workers[started].thread, NULL, sweep_worker, &workers[started]) == 0)) break;
    /* A thread that failed to start would leave the others blocked at the first barrier. */
    if (started != s.threads) abort();
join:
    for (int t = 0; t < started; t++) pthread_join(workers[t].thread, NULL);
    pthread_barrier_destroy(&s.barrier);
    for (int t = 0; t < s.threads; t++) {
        free(workers[t].x);
        free(workers[t].got);
        for (int f = 0; f < REF_NARROW_COUNT; f++)
            for (int sat = 0; sat < 2; sat++) free(workers[t].want[f][sat]);
    }
done:
    amp_isa_set(before);
    free(workers);
    free(list);
}
