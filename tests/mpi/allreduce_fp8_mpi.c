/* The e5m2 gradient sum (src/train/allreduce_fp8.h) over the MPI backend (libamp_mpi), run under
 * mpirun by tests/cli/allreduce_fp8.sh with 2 and 4 ranks. Every rank draws every rank's gradients
 * from one seed, so each can compute the reference of tests/e5m2_ref.h (the tests' own codec):
 * decode(e5m2(sum over ranks of decode(e5m2(g_r s)))) / s, in fp32 in rank order, and the sums must
 * equal it bit for bit on every rank. Several sums are in flight at once (two e5m2 buckets around a
 * bf16-wire one, as the training interleaves them); an adversarial round puts every rank at the
 * amax; a round with an inf, a NaN and inf + -inf checks the fp32 fallback.
 *
 * usage: mpirun -np N allreduce_fp8_mpi SEED. Rank 0 prints one line; exit status 0 when every rank
 * passed. Built by the CLI test with mpicc against libamp_mpi.a and libamp.a (not part of amp_tests:
 * it needs MPI). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/comm_mpi.h"
#include "amp/status.h"
#include "../e5m2_ref.h"
#include "../../src/train/allreduce_fp8.h"

enum { MAX_RANKS = 8, N_SEG = 4, N_VALUES = 3 + 250 + 1 + 777 };
static const size_t seg_end[N_SEG] = {3, 253, 254, N_VALUES};

static uint64_t next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

/* all[k][i]: rank k's gradient i; one magnitude per segment, random fractions and signs, zeros. */
static void draw(float all[][N_VALUES], int ranks, uint64_t *s) {
    for (int k = 0; k < ranks; k++)
        for (size_t i = 0, seg = 0; i < N_VALUES; i++) {
            while (seg_end[seg] <= i) seg++;
            const int mag = (int)(next(s) % 40) - 30 + (int)seg;
            const double u = (double)(next(s) % 1000000) / 1e6;
            all[k][i] = next(s) % 9 == 0 ? 0.0f : (float)((next(s) & 1 ? -1 : 1) * ldexp(u, mag));
        }
}

/* The reference of value i: the segment's amax over every rank, its scale, the sum. */
static float reference(float all[][N_VALUES], int ranks, size_t i) {
    size_t s = 0;
    while (seg_end[s] <= i) s++;
    float amax = 0.0f, g[MAX_RANKS];
    for (int k = 0; k < ranks; k++)
        for (size_t j = s ? seg_end[s - 1] : 0; j < seg_end[s]; j++) amax = fmaxf(amax, fabsf(all[k][j]));
    for (int k = 0; k < ranks; k++) g[k] = all[k][i];
    return ref_sum(g, ranks, ref_scale(amax, ranks));
}

static int failures;
static void check(int ok, int rank, const char *what) {
    if (ok) return;
    failures++;
    fprintf(stderr, "rank %d: %s\n", rank, what);
}

/* Two e5m2 sums around a bf16-wire fp32 sum, all in flight together; the e5m2 ones exactly. */
static void round_random(amp_comm *c, uint64_t *seed, float all_a[][N_VALUES], float all_c[][N_VALUES]) {
    static float a[N_VALUES], b[N_VALUES], cc[N_VALUES];
    draw(all_a, c->size, seed);
    draw(all_c, c->size, seed);
    memcpy(a, all_a[c->rank], sizeof a);
    memcpy(cc, all_c[c->rank], sizeof cc);
    for (size_t i = 0; i < N_VALUES; i++) b[i] = (float)i;
    amp_wire_fp8 wa = {0}, wc = {0};
    int st = amp_wire_fp8_start(&wa, c, a, N_VALUES, seg_end, N_SEG);
    if (st == AMP_OK) st = c->start_grads(c, b, N_VALUES, AMP_F32, AMP_BF16);
    if (st == AMP_OK) st = amp_wire_fp8_start(&wc, c, cc, N_VALUES, seg_end, N_SEG);
    if (st == AMP_OK) st = c->wait_grads(c);
    if (st == AMP_OK) st = amp_wire_fp8_finish(&wa);
    if (st == AMP_OK) st = amp_wire_fp8_finish(&wc);
    check(st == AMP_OK, c->rank, "a random round failed");
    size_t bad = 0;
    for (size_t i = 0; i < N_VALUES; i++) {
        const float ra = reference(all_a, c->size, i), rc = reference(all_c, c->size, i);
        bad += memcmp(&ra, &a[i], sizeof ra) != 0;
        bad += memcmp(&rc, &cc[i], sizeof rc) != 0;
        bad += i * (size_t)c->size <= 256 && b[i] != (float)i * (float)c->size; /* exact in bf16 */
    }
    check(bad == 0 && !wa.fp32 && !wc.fp32, c->rank, "random round: sums differ from the reference");
    amp_wire_fp8_free(&wa), amp_wire_fp8_free(&wc);
}

/* Every rank at +-amax: the sum stays finite with the right sign. */
static void round_adversarial(amp_comm *c, float amax) {
    static float a[N_VALUES];
    for (size_t i = 0; i < N_VALUES; i++) a[i] = i % 2 ? -amax : amax;
    amp_wire_fp8 w = {0};
    int st = amp_wire_fp8_start(&w, c, a, N_VALUES, seg_end, N_SEG);
    if (st == AMP_OK) st = c->wait_grads(c);
    if (st == AMP_OK) st = amp_wire_fp8_finish(&w);
    size_t bad = 0;
    for (size_t i = 0; i < N_VALUES; i++) {
        float g[MAX_RANKS];
        for (int k = 0; k < c->size; k++) g[k] = i % 2 ? -amax : amax;
        const float want = ref_sum(g, c->size, ref_scale(amax, c->size));
        bad += !isfinite(a[i]) || memcmp(&want, &a[i], sizeof want) != 0;
    }
    check(st == AMP_OK && bad == 0, c->rank, "every rank at the amax: a sum overflowed or differs");
    amp_wire_fp8_free(&w);
}

/* An inf on the last rank, a NaN on rank 0, inf and -inf on the two: the fp32 sum everywhere. */
static void round_nonfinite(amp_comm *c, uint64_t *seed, float all[][N_VALUES]) {
    static float a[N_VALUES];
    draw(all, c->size, seed);
    all[c->size - 1][10] = INFINITY;
    all[0][300] = NAN;
    all[0][400] = INFINITY, all[c->size - 1][400] = -INFINITY;
    memcpy(a, all[c->rank], sizeof a);
    amp_wire_fp8 w = {0};
    int st = amp_wire_fp8_start(&w, c, a, N_VALUES, seg_end, N_SEG);
    if (st == AMP_OK) st = c->wait_grads(c);
    if (st == AMP_OK) st = amp_wire_fp8_finish(&w);
    check(st == AMP_OK && w.fp32, c->rank, "an inf or NaN did not make the sum fp32");
    check(a[10] == INFINITY && isnan(a[300]) && isnan(a[400]), c->rank, "inf, NaN or inf + -inf lost");
    size_t bad = 0;
    for (size_t i = 0; i < N_VALUES; i++) {
        double want = 0.0, mag = 0.0;
        for (int k = 0; k < c->size; k++) want += all[k][i], mag += fabs(all[k][i]);
        /* MPI adds in its own order: within ranks - 1 fp32 roundings of the exact sum */
        if (isfinite(want)) bad += fabs(a[i] - want) > c->size * 0x1p-24 * mag;
    }
    check(bad == 0, c->rank, "the fp32 fallback's finite sums are wrong");
    amp_wire_fp8_free(&w);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    amp_comm *c = NULL;
    char err[256];
    if (amp_comm_mpi_create(MPI_COMM_WORLD, &c, err, sizeof err) != AMP_OK || c->size > MAX_RANKS) {
        fprintf(stderr, "allreduce_fp8_mpi: %s\n", c ? "too many ranks" : err);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 1;
    static float all_a[MAX_RANKS][N_VALUES], all_c[MAX_RANKS][N_VALUES];
    for (int rep = 0; rep < 4; rep++) round_random(c, &seed, all_a, all_c);
    const float amaxes[] = {E5M2_REF_MAX, 1.75f, 0.3f, 1e-20f};
    for (size_t i = 0; i < sizeof amaxes / sizeof *amaxes; i++) round_adversarial(c, amaxes[i]);
    round_nonfinite(c, &seed, all_a);
    double f = failures;
    c->allreduce_f64(c, &f, 1, AMP_COMM_SUM);
    if (c->rank == 0)
        printf("allreduce_fp8_mpi: %d ranks, seed %s: %s\n", c->size, argc > 1 ? argv[1] : "1",
               f == 0 ? "every sum equals the reference" : "FAILED");
    c->free(c);
    MPI_Finalize();
    return f == 0 ? 0 : 1;
}
