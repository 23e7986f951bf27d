/* The e5m2 gradient sum (src/train/allreduce_fp8.h) on 1 to 4 ranks, each a thread of this process
 * with its own amp_comm over a shared table (collectives by barrier). The communicator's e5m2 byte
 * sum and the reference use the tests' own e5m2 codec (e5m2_ref.h), never amp's; the reference is
 * decode(sum_r decode(encode(g_r s))) / s with s the all-reduced amax's power-of-2 scale over the
 * smallest power of 2 >= ranks, summed in fp32 in rank order, as amp/comm.h specifies. The MPI
 * backend's sum against the same reference: tests/mpi/allreduce_fp8_mpi.c. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "e5m2_ref.h"
#include "harness.h"
#include "tests.h"
#include "../src/train/allreduce_fp8.h"

enum { MAX_RANKS = 4, MAX_PENDING = 4, E5M2_MAX = E5M2_REF_MAX };

/* ---- the threaded communicator ---- */

typedef struct pending {
    void *buf;
    size_t n;
    amp_dtype dtype;
} pending;

typedef struct shared {
    int size;
    pthread_barrier_t bar;
    void *slot[MAX_RANKS];
    int64_t bytes_f32, bytes_e5m2; /* payload bytes started, summed over the ranks */
    pthread_mutex_t lock;
} shared;

typedef struct rank_comm {
    amp_comm base;
    shared *sh;
    pending p[MAX_PENDING];
    int n_pending;
} rank_comm;

static int t_f64(amp_comm *c, double *buf, size_t n, amp_comm_reduce op) {
    shared *sh = ((rank_comm *)c)->sh;
    double tmp[64];
    if (n > 64) return AMP_ERR_INVALID_ARGUMENT;
    sh->slot[c->rank] = buf;
    pthread_barrier_wait(&sh->bar);
    for (size_t i = 0; i < n; i++) {
        double v = ((double *)sh->slot[0])[i];
        for (int r = 1; r < sh->size; r++) {
            const double w = ((double *)sh->slot[r])[i];
            v = op == AMP_COMM_SUM ? v + w : op == AMP_COMM_MAX ? (w > v ? w : v) : (w < v ? w : v);
        }
        tmp[i] = v;
    }
    pthread_barrier_wait(&sh->bar);
    memcpy(buf, tmp, n * sizeof *buf);
    pthread_barrier_wait(&sh->bar);
    return AMP_OK;
}

static int t_u64(amp_comm *c, uint64_t *buf, size_t n, amp_comm_reduce op) {
    (void)c, (void)buf, (void)n, (void)op;
    return AMP_ERR_UNSUPPORTED_DTYPE;
}

static int t_start(amp_comm *c, void *buf, size_t n, amp_dtype dtype, amp_dtype wire) {
    rank_comm *rc = (rank_comm *)c;
    if (wire != dtype || (dtype != AMP_F32 && dtype != AMP_F8E5M2) || rc->n_pending == MAX_PENDING)
        return AMP_ERR_UNSUPPORTED_DTYPE;
    rc->p[rc->n_pending++] = (pending){buf, n, dtype};
    pthread_mutex_lock(&rc->sh->lock);
    *(dtype == AMP_F32 ? &rc->sh->bytes_f32 : &rc->sh->bytes_e5m2) += (int64_t)(n * amp_dtype_size(dtype));
    pthread_mutex_unlock(&rc->sh->lock);
    return AMP_OK;
}

/* Each pending sum in order: fp32 sums in rank order; e5m2 ones decoded, summed in fp32 in rank
 * order and encoded once. */
static int t_wait(amp_comm *c) {
    rank_comm *rc = (rank_comm *)c;
    shared *sh = rc->sh;
    for (int k = 0; k < rc->n_pending; k++) {
        const pending *q = &rc->p[k];
        void *out = malloc(q->n * amp_dtype_size(q->dtype) + 1);
        if (!out) return AMP_ERR_OUT_OF_MEMORY;
        sh->slot[c->rank] = q->buf;
        pthread_barrier_wait(&sh->bar);
        for (size_t i = 0; i < q->n; i++) {
            float acc = 0.0f;
            for (int r = 0; r < sh->size; r++)
                acc += q->dtype == AMP_F32 ? ((const float *)sh->slot[r])[i]
                                           : (float)ref_decode(((const uint8_t *)sh->slot[r])[i]);
            if (q->dtype == AMP_F32) ((float *)out)[i] = acc;
            else ((uint8_t *)out)[i] = ref_encode(acc, false);
        }
        pthread_barrier_wait(&sh->bar);
        memcpy(q->buf, out, q->n * amp_dtype_size(q->dtype));
        free(out);
        pthread_barrier_wait(&sh->bar);
    }
    rc->n_pending = 0;
    return AMP_OK;
}

static const char *t_error(const amp_comm *c) {
    (void)c;
    return "";
}

/* ---- the cases ---- */

enum { N_SEG = 5, N_VALUES = 1 + 7 + 100 + 33 + 59 };
static const size_t seg_end[N_SEG] = {1, 8, 108, 141, N_VALUES};

typedef struct run {
    shared sh;
    rank_comm comm[MAX_RANKS];
    float g[MAX_RANKS][N_VALUES];   /* each rank's gradients, then its result */
    float in[MAX_RANKS][N_VALUES];  /* the inputs, kept */
    int status[MAX_RANKS];
    bool fp32[MAX_RANKS];
} run;

typedef struct arg {
    run *r;
    int rank;
} arg;

static void *rank_main(void *p) {
    const arg *a = p;
    run *r = a->r;
    amp_wire_fp8 w = {0};
    amp_comm *c = &r->comm[a->rank].base;
    int st = amp_wire_fp8_start(&w, c, r->g[a->rank], N_VALUES, seg_end, N_SEG);
    if (st == AMP_OK) st = c->wait_grads(c);
    if (st == AMP_OK) st = amp_wire_fp8_finish(&w);
    r->fp32[a->rank] = w.fp32;
    r->status[a->rank] = st;
    amp_wire_fp8_free(&w);
    return NULL;
}

/* Runs the sum on `ranks` threads over r->g (kept in r->in). */
static bool run_ranks(run *r, int ranks) {
    memset(&r->sh, 0, sizeof r->sh);
    r->sh.size = ranks;
    pthread_barrier_init(&r->sh.bar, NULL, (unsigned)ranks);
    pthread_mutex_init(&r->sh.lock, NULL);
    memcpy(r->in, r->g, sizeof r->g);
    pthread_t th[MAX_RANKS];
    arg args[MAX_RANKS];
    for (int k = 0; k < ranks; k++) {
        r->comm[k] = (rank_comm){.sh = &r->sh};
        r->comm[k].base = (amp_comm){.rank = k, .size = ranks, .allreduce_f64 = t_f64, .allreduce_u64 = t_u64,
                                     .start_grads = t_start, .wait_grads = t_wait, .error = t_error};
        args[k] = (arg){r, k};
        pthread_create(&th[k], NULL, rank_main, &args[k]);
    }
    for (int k = 0; k < ranks; k++) pthread_join(th[k], NULL);
    pthread_barrier_destroy(&r->sh.bar);
    pthread_mutex_destroy(&r->sh.lock);
    bool ok = true;
    for (int k = 0; k < ranks; k++) ok &= CHECK_MSG(r->status[k] == AMP_OK, "%d ranks: rank %d: status %d", ranks, k, r->status[k]);
    return ok;
}

/* The reference of value i (finite inputs): see the file's comment. */
static float ref_value(const run *r, int ranks, size_t i) {
    size_t s = 0;
    while (seg_end[s] <= i) s++;
    float amax = 0.0f;
    for (int k = 0; k < ranks; k++)
        for (size_t j = s ? seg_end[s - 1] : 0; j < seg_end[s]; j++) amax = fmaxf(amax, fabsf(r->in[k][j]));
    float g[MAX_RANKS];
    for (int k = 0; k < ranks; k++) g[k] = r->in[k][i];
    return ref_sum(g, ranks, ref_scale(amax, ranks));
}

static uint64_t next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

/* Random gradients: each segment its own magnitude (2^-24, 2^-17, 2^-10, 2^-3, 2^4), each value a
 * random fraction of it with a random sign, some exact zeros. */
static void fill(run *r, int ranks, uint64_t *s) {
    for (int k = 0; k < ranks; k++)
        for (size_t i = 0, seg = 0; i < N_VALUES; i++) {
            while (seg_end[seg] <= i) seg++;
            const int mag = (int)(seg * 7 % 37) - 24;
            const double u = (double)(next(s) % 1000000) / 1e6;
            r->g[k][i] = next(s) % 11 == 0 ? 0.0f : (float)((next(s) & 1 ? -1 : 1) * ldexp(u, mag));
        }
}

static bool same_everywhere(const run *r, int ranks) {
    for (int k = 1; k < ranks; k++)
        if (memcmp(r->g[k], r->g[0], sizeof r->g[0]) != 0) return false;
    return true;
}

void test_allreduce_fp8_exact(void) {
    static run r;
    uint64_t s = harness_seed();
    harness_note("seed %llu", (unsigned long long)s);
    for (int ranks = 1; ranks <= MAX_RANKS; ranks++)
        for (int rep = 0; rep < 5; rep++) {
            fill(&r, ranks, &s);
            if (!run_ranks(&r, ranks)) return;
            CHECK_MSG(!r.fp32[0], "%d ranks: finite gradients fell back to fp32", ranks);
            CHECK_MSG(same_everywhere(&r, ranks), "%d ranks: the ranks' results differ", ranks);
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < N_VALUES; i++) {
                const float want = ref_value(&r, ranks, i);
                if (memcmp(&want, &r.g[0][i], sizeof want) != 0 && bad++ == 0) first = i;
            }
            CHECK_MSG(bad == 0, "%d ranks: %zu values differ from decode(sum encode(g s)) / s, first [%zu] %a, want %a",
                      ranks, bad, first, (double)r.g[0][first], (double)ref_value(&r, ranks, first));
            /* the payload: one byte per value, the fp32 path untouched */
            CHECK_EQ_INT(r.sh.bytes_e5m2, (int64_t)ranks * N_VALUES);
            CHECK_EQ_INT(r.sh.bytes_f32, 0);
        }
}

/* Every rank at the segment's largest magnitude, same sign: the sum is ranks x amax, which must come
 * back finite; exactly when amax is a power of 2 times e5m2's 1.75 and ranks a power of 2 (then every
 * step is exact), and otherwise within two e5m2 roundings (each at most 2^-3 relative). */
void test_allreduce_fp8_no_overflow(void) {
    static run r;
    const float amaxes[] = {E5M2_MAX, 1.75f, 5.0e37f, 1.0e-30f, 0.7f};
    for (int ranks = 2; ranks <= MAX_RANKS; ranks++)
        for (size_t a = 0; a < sizeof amaxes / sizeof *amaxes; a++) {
            for (int k = 0; k < ranks; k++)
                for (size_t i = 0; i < N_VALUES; i++) r.g[k][i] = i % 2 ? -amaxes[a] : amaxes[a];
            if (!run_ranks(&r, ranks)) return;
            const double want = (double)ranks * amaxes[a];
            bool finite = true, exact = true, close = true;
            for (size_t i = 0; i < N_VALUES; i++) {
                const double got = fabs((double)r.g[0][i]);
                finite &= isfinite(r.g[0][i]) && !!(i % 2) == !!signbit(r.g[0][i]);
                exact &= got == want;
                close &= fabs(got - want) <= (1.125 * 1.125 - 1.0) * want;
            }
            CHECK_MSG(finite, "%d ranks at amax %g: a sum overflowed or lost its sign", ranks, (double)amaxes[a]);
            if ((amaxes[a] == (float)E5M2_MAX || amaxes[a] == 1.75f) && (ranks & (ranks - 1)) == 0)
                CHECK_MSG(exact, "%d ranks at amax %g: the sum is not exactly %g", ranks, (double)amaxes[a], want);
            else
                CHECK_MSG(close, "%d ranks at amax %g: the sum is not within e5m2's rounding of %g", ranks,
                          (double)amaxes[a], want);
        }
}

/* An inf or NaN on one rank: the bucket is summed in fp32 on every rank, so the inf or NaN arrives
 * where it was and the other values are the plain fp32 sums. */
void test_allreduce_fp8_nonfinite(void) {
    static run r;
    uint64_t s = harness_seed() ^ 0x5151;
    const float bad[] = {INFINITY, -INFINITY, NAN};
    for (int ranks = 2; ranks <= MAX_RANKS; ranks++)
        for (size_t b = 0; b < 3; b++) {
            fill(&r, ranks, &s);
            r.g[ranks - 1][50] = bad[b];
            if (b == 0) r.g[0][120] = INFINITY, r.g[ranks - 1][120] = -INFINITY; /* inf - inf: NaN */
            if (!run_ranks(&r, ranks)) return;
            CHECK_MSG(r.fp32[0], "%d ranks: a non-finite gradient did not make the sum fp32", ranks);
            CHECK_MSG(same_everywhere(&r, ranks), "%d ranks: the ranks' results differ", ranks);
            size_t wrong = 0;
            for (size_t i = 0; i < N_VALUES; i++) {
                float want = 0.0f;
                for (int k = 0; k < ranks; k++) want += r.in[k][i];
                wrong += !(memcmp(&want, &r.g[0][i], sizeof want) == 0 || (isnan(want) && isnan(r.g[0][i])));
            }
            CHECK_MSG(wrong == 0, "%d ranks, %g injected: %zu values are not the fp32 sums", ranks, (double)bad[b], wrong);
            CHECK_MSG(b == 2 ? isnan(r.g[0][50]) : r.g[0][50] == bad[b], "%d ranks: [50] is %g, not %g", ranks,
                      (double)r.g[0][50], (double)bad[b]);
            if (b == 0) CHECK_MSG(isnan(r.g[0][120]), "%d ranks: inf + -inf gave %g", ranks, (double)r.g[0][120]);
        }
}

/* The scale rule against the reference's, over amaxes across the whole fp32 range, and the closed
 * form of the bytes counted. */
void test_allreduce_fp8_scale_and_bytes(void) {
    uint64_t s = harness_seed() ^ 0xABCD;
    size_t bad = 0;
    for (int i = 0; i < 20000; i++) {
        uint32_t bits = (uint32_t)next(&s) & 0x7F7FFFFFu; /* finite, positive */
        float a;
        memcpy(&a, &bits, sizeof a);
        for (int ranks = 1; ranks <= 9; ranks++) {
            const float got = amp_wire_fp8_scale(a, ranks), want = ref_scale(a, ranks);
            bad += memcmp(&got, &want, sizeof got) != 0;
            /* the headroom: ranks values at amax fit */
            bad += !((double)ranks * a * got <= E5M2_MAX * (1.0 + 0x1p-23));
        }
    }
    CHECK_MSG(bad == 0, "%zu scales differ from 2^floor(log2(57344 / amax)) / 2^ceil(log2 ranks) or leave no room", bad);
    CHECK_EQ_INT(amp_wire_bytes(1000, 4, 1), 0);
    CHECK_EQ_INT(amp_wire_bytes(1000, 4, 2), 2 * 1 * 500 * 4);
    CHECK_EQ_INT(amp_wire_bytes(1001, 1, 4), 2 * 3 * 251 * 1);
    CHECK_EQ_INT(amp_wire_bytes(5, 8, 4), 2 * 3 * 2 * 8);
}
