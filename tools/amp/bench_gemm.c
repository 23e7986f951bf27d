/* `amp bench gemm`: amp_gemm's GFLOP/s on the shapes that matter, next to two yardsticks measured
 * in the same run: the core's peak and OpenBLAS.
 *
 * Peak. A loop of independent register-only multiply-adds (12 accumulators, more than latency x
 * throughput needs on current cores) gives the FMA peak of one core; a loop of VDPBF16PS gives the
 * bf16 peak, where the CPU has AVX512-BF16, and a loop of AMX's TDPBF16PS the tiles' peak, where amp
 * may use AMX. The ratio printed for f32 and f16 is against the FMA peak (both run FMA micro-kernels),
 * for bf16 against the peak of the instruction amp's bf16 method uses (amp/gemm.h). With T
 * threads the ratio is against T times the one-core peak. The loops are inline assembly (this file
 * is built without ISA flags; the target attribute only lets the assembler accept the mnemonics)
 * and run only when amp_cpu_get_features() says the CPU has the instructions.
 *
 * OpenBLAS. libopenblas.so.0 is opened at run time (dlopen), so amp never links against it; when it
 * is absent the table says so. It runs cblas_sgemm on the same fp32 data with the same thread count.
 *
 * GFLOP/s = 2mnk / time, the median over --repeats timed calls after one untimed warm-up. All of
 * amp's figures are taken before OpenBLAS's (see run_shape). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "bench_util.h"
#include "commands.h"

/* ---- the core's peak ---- */

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_PEAK_LOOPS 1
/* 12 chains of `insn` on zmm0..zmm11 (or ymm), inputs zmm12/zmm13 (zero: no denormal slow paths). */
#define PEAK_BODY(insn, r)                                                                                  \
    "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"                                                                   \
    "vmovaps %%zmm0, %%zmm1\n\tvmovaps %%zmm0, %%zmm2\n\tvmovaps %%zmm0, %%zmm3\n\t"                      \
    "vmovaps %%zmm0, %%zmm4\n\tvmovaps %%zmm0, %%zmm5\n\tvmovaps %%zmm0, %%zmm6\n\t"                      \
    "vmovaps %%zmm0, %%zmm7\n\tvmovaps %%zmm0, %%zmm8\n\tvmovaps %%zmm0, %%zmm9\n\t"                      \
    "vmovaps %%zmm0, %%zmm10\n\tvmovaps %%zmm0, %%zmm11\n\tvmovaps %%zmm0, %%zmm12\n\t"                   \
    "vmovaps %%zmm0, %%zmm13\n\t"                                                                          \
    "1:\n\t" insn " %%" r "12, %%" r "13, %%" r "0\n\t" insn " %%" r "12, %%" r "13, %%" r "1\n\t" insn      \
    " %%" r "12, %%" r "13, %%" r "2\n\t" insn " %%" r "12, %%" r "13, %%" r "3\n\t" insn " %%" r "12, %%" r \
    "13, %%" r "4\n\t" insn " %%" r "12, %%" r "13, %%" r "5\n\t" insn " %%" r "12, %%" r "13, %%" r "6\n\t"   \
    insn " %%" r "12, %%" r "13, %%" r "7\n\t" insn " %%" r "12, %%" r "13, %%" r "8\n\t" insn " %%" r       \
    "12, %%" r "13, %%" r "9\n\t" insn " %%" r "12, %%" r "13, %%" r "10\n\t" insn " %%" r "12, %%" r        \
    "13, %%" r "11\n\t"                                                                                    \
    "dec %0\n\tjnz 1b\n\tvzeroupper"
#define PEAK_CLOBBERS                                                                                      \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", \
        "xmm13", "cc"

__attribute__((target("avx512f"))) static void loop_fma_zmm(long iters) {
    __asm__ volatile(PEAK_BODY("vfmadd231ps", "zmm") : "+r"(iters) : : PEAK_CLOBBERS);
}
__attribute__((target("avx2,fma"))) static void loop_fma_ymm(long iters) { /* AVX2 only: ymm throughout */
    __asm__ volatile("vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
                     "vmovaps %%ymm0, %%ymm1\n\tvmovaps %%ymm0, %%ymm2\n\tvmovaps %%ymm0, %%ymm3\n\t"
                     "vmovaps %%ymm0, %%ymm4\n\tvmovaps %%ymm0, %%ymm5\n\tvmovaps %%ymm0, %%ymm6\n\t"
                     "vmovaps %%ymm0, %%ymm7\n\tvmovaps %%ymm0, %%ymm8\n\tvmovaps %%ymm0, %%ymm9\n\t"
                     "vmovaps %%ymm0, %%ymm10\n\tvmovaps %%ymm0, %%ymm11\n\tvmovaps %%ymm0, %%ymm12\n\t"
                     "vmovaps %%ymm0, %%ymm13\n\t"
                     "1:\n\t"
                     "vfmadd231ps %%ymm12, %%ymm13, %%ymm0\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm1\n\t"
                     "vfmadd231ps %%ymm12, %%ymm13, %%ymm2\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm3\n\t"
                     "vfmadd231ps %%ymm12, %%ymm13, %%ymm4\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm5\n\t"
                     "vfmadd231ps %%ymm12, %%ymm13, %%ymm6\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm7\n\t"
                     "vfmadd231ps %%ymm12, %%ymm13, %%ymm8\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm9\n\t"
                     "vfmadd231ps %%ymm12, %%ymm13, %%ymm10\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm11\n\t"
                     "dec %0\n\tjnz 1b\n\tvzeroupper"
                     : "+r"(iters)
                     :
                     : PEAK_CLOBBERS);
}
__attribute__((target("avx512f,avx512bf16"))) static void loop_dpbf16_zmm(long iters) {
    __asm__ volatile(PEAK_BODY("vdpbf16ps", "zmm") : "+r"(iters) : : PEAK_CLOBBERS);
}
/* AMX: 4 chains of TDPBF16PS (tiles 0-3 += tile 4 x tile 6, 16 x 16 x 32 each) on zero tiles. The
 * thread's tile configuration is saved and restored around it: amp's kernels configure a thread's
 * tiles once (amp/gemm.h), and a released configuration would leave them faulting. */
static void loop_tdpbf16(long iters) {
    _Alignas(64) unsigned char saved[64] = {0}, cfg[64] = {0};
    cfg[0] = 1;                                              /* palette 1 */
    for (int t = 0; t < 8; t++) cfg[16 + 2 * t] = 64, cfg[48 + t] = 16; /* 16 rows x 64 bytes */
    __asm__ volatile("sttilecfg %0" : "=m"(saved));
    __asm__ volatile("ldtilecfg %1\n\t"
                     "tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3\n\t"
                     "tilezero %%tmm4\n\ttilezero %%tmm6\n\t"
                     "1:\n\t"
                     "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm6, %%tmm4, %%tmm1\n\t"
                     "tdpbf16ps %%tmm6, %%tmm4, %%tmm2\n\ttdpbf16ps %%tmm6, %%tmm4, %%tmm3\n\t"
                     "dec %0\n\tjnz 1b"
                     : "+r"(iters)
                     : "m"(cfg)
                     : "cc");
    if (saved[0]) __asm__ volatile("ldtilecfg %0" : : "m"(saved));
    else __asm__ volatile("tilerelease");
}
#else
#define HAVE_PEAK_LOOPS 0
#endif

typedef enum { PEAK_FMA512, PEAK_FMA256, PEAK_DPBF16, PEAK_TDPBF16, PEAK_KINDS } peak_kind;
static const char *const peak_names[PEAK_KINDS] = {"fma zmm", "fma ymm", "vdpbf16ps zmm", "tdpbf16ps"};
/* flops per loop iteration: 12 instructions x lanes x (2 per FMA, 4 per VDPBF16PS lane: 2 mul, 2 add);
 * AMX: 4 instructions x 16 x 16 x 32 multiply-adds */
static const double peak_flops_per_iter[PEAK_KINDS] = {12 * 16 * 2, 12 * 8 * 2, 12 * 16 * 4, 4 * 16 * 16 * 32 * 2};

typedef void (*peak_loop_fn)(long iters);

static peak_loop_fn peak_loop(peak_kind kind) {
#if HAVE_PEAK_LOOPS
    const amp_cpu_features *f = amp_cpu_get_features();
    if (kind == PEAK_FMA512 && f->avx512f) return loop_fma_zmm;
    if (kind == PEAK_FMA256 && f->avx2 && f->fma) return loop_fma_ymm;
    if (kind == PEAK_DPBF16 && f->avx512_bf16) return loop_dpbf16_zmm;
    /* the method's support check is the one that asks Linux for the tiles */
    if (kind == PEAK_TDPBF16 && amp_gemm_bf16_method_supported(AMP_GEMM_BF16_AMX)) return loop_tdpbf16;
#else
    (void)kind;
#endif
    return NULL;
}

/* Iterations of `loop` that take about 20 ms on one core: long enough for the clock to settle. */
static long calibrate(peak_loop_fn loop) {
    long iters = 1 << 16;
    double t = 0.0;
    while (t < 0.02) {
        iters *= 2;
        double t0 = amp_bench_now();
        loop(iters);
        t = amp_bench_now() - t0;
    }
    return iters;
}

/* One-core GFLOP/s of a peak loop (the median over 5 runs of ~20 ms), or 0 when this CPU lacks it. */
static double measure_peak(peak_kind kind) {
    const peak_loop_fn loop = peak_loop(kind);
    if (!loop) return 0.0;
    const long iters = calibrate(loop);
    double runs[5];
    for (int r = 0; r < 5; r++) {
        double t0 = amp_bench_now();
        loop(iters);
        runs[r] = amp_bench_now() - t0;
    }
    return (double)iters * peak_flops_per_iter[kind] / amp_bench_median(runs, 5) / 1e9;
}

double amp_bench_peak_gflops(int bf16, const char **kind) {
    /* the widest FMA the CPU has: zmm, else ymm (so an AVX2-only CPU has a peak too, and its runs a
     * fraction of peak and a cap) */
    double fma = measure_peak(PEAK_FMA512);
    if (fma <= 0.0) fma = measure_peak(PEAK_FMA256);
    const double dot = bf16 ? measure_peak(PEAK_DPBF16) : 0.0;
    const double tiles = bf16 && amp_gemm_bf16_method_active() == AMP_GEMM_BF16_AMX ? measure_peak(PEAK_TDPBF16) : 0.0;
    if (tiles > dot && tiles > fma) {
        *kind = "tdpbf16ps";
        return tiles;
    }
    *kind = dot > fma ? "vdpbf16ps" : "fma";
    return dot > fma ? dot : fma;
}

typedef struct peak_thread {
    peak_loop_fn loop;
    long iters;
} peak_thread;

static void *run_peak_thread(void *arg) {
    const peak_thread *pt = arg;
    pt->loop(pt->iters);
    return NULL;
}

/* GFLOP/s of `threads` copies of the loop at once: shows whether the cores amp runs on are real
 * cores (twice one core's peak for two) or SMT siblings sharing one core's FMA units. */
static double measure_peak_threads(peak_kind kind, int threads) {
    const peak_loop_fn loop = peak_loop(kind);
    if (!loop || threads < 2) return 0.0;
    peak_thread pt = {loop, calibrate(loop)};
    pthread_t *th = malloc((size_t)threads * sizeof *th);
    if (!th) return 0.0;
    double runs[3];
    for (int r = 0; r < 3; r++) {
        int started = 0;
        const double t0 = amp_bench_now();
        while (started < threads - 1 && pthread_create(&th[started], NULL, run_peak_thread, &pt) == 0) started++;
        loop(pt.iters);
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
        runs[r] = (amp_bench_now() - t0) / (double)(started + 1);
    }
    free(th);
    return (double)pt.iters * peak_flops_per_iter[kind] / amp_bench_median(runs, 3) / 1e9;
}

/* ---- OpenBLAS, found at run time ---- */

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 }; /* cblas.h's values */
typedef void (*cblas_sgemm_fn)(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                               int lda, const float *b, int ldb, float beta, float *c, int ldc);
typedef void (*openblas_set_threads_fn)(int n);

typedef struct openblas {
    void *handle;
    cblas_sgemm_fn sgemm;
} openblas;

static void *symbol(void *handle, const char *name) { return handle ? dlsym(handle, name) : NULL; }

static openblas openblas_open(int threads) {
    openblas ob = {dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL), NULL};
    void *sgemm = symbol(ob.handle, "cblas_sgemm"), *set_threads = symbol(ob.handle, "openblas_set_num_threads");
    if (!sgemm) {
        if (ob.handle) dlclose(ob.handle);
        ob.handle = NULL;
        return ob;
    }
    memcpy(&ob.sgemm, &sgemm, sizeof sgemm); /* POSIX guarantees object and function pointers convert */
    if (set_threads) {
        openblas_set_threads_fn fn;
        memcpy(&fn, &set_threads, sizeof fn);
        fn(threads);
    }
    return ob;
}

/* ---- the benchmark ---- */

typedef struct shape {
    long m, n, k;
} shape;

/* The square reference shape, then the MLP/CNN shapes of the training examples: batch 256 through
 * 784 -> 1024 -> 1024 -> 10 layers, and a 128 x 1024 x 3136 (7x7x64 flattened) layer. */
static const shape default_shapes[] = {
    {1024, 1024, 1024}, {256, 1024, 784}, {256, 1024, 1024}, {256, 10, 1024}, {128, 1024, 3136},
};
enum { MAX_SHAPES = 32 };

/* op(A) op(B): the forward product and the two transposed forms backward passes use. */
static const struct {
    const char *name;
    bool trans_a, trans_b;
} ops[] = {{"A*B", false, false}, {"A^T*B", true, false}, {"A*B^T", false, true}};
enum { N_OPS = sizeof ops / sizeof ops[0] };

static const amp_dtype dtypes[] = {AMP_F32, AMP_F16, AMP_BF16};
enum { N_DTYPES = sizeof dtypes / sizeof dtypes[0] };

static int usage(void) {
    printf("usage: amp bench gemm [--threads N] [--shape MxNxK]... [--repeats N] [--json]\n"
           "  --threads N     threads for amp and OpenBLAS (default: amp's setting, %d here)\n"
           "  --shape MxNxK   C is MxN, the inner dimension K; repeatable (default: 1024x1024x1024,\n"
           "                  256x1024x784, 256x1024x1024, 256x10x1024, 128x1024x3136)\n"
           "  --repeats N     timed calls per figure; the median is reported (default 7)\n"
           "  --json          one JSON object on the last line instead of the table\n"
           "Each shape runs as A*B, A^T*B and A*B^T (same M, N, K; A or B stored transposed), for\n"
           "f32, f16 and bf16 inputs (fp32 accumulation and output). GFLOP/s = 2MNK / median time.\n"
           "'peak' is threads x the one-core peak measured here: an FMA loop for f32 and f16, a\n"
           "VDPBF16PS (or AMX TDPBF16PS) loop for bf16 where amp multiplies bf16 with it. OpenBLAS (cblas_sgemm, f32) is\n"
           "loaded at run time when installed.\n",
           amp_get_num_threads());
    return AMP_EXIT_OK;
}

static int parse_shape(const char *s, shape *out) {
    char *end;
    long v[3];
    for (int i = 0; i < 3; i++) {
        if (*s < '0' || *s > '9') return -1;
        v[i] = strtol(s, &end, 10);
        if (v[i] < 1 || v[i] > 65536 || (i < 2 && *end != 'x') || (i == 2 && *end)) return -1;
        s = end + 1;
    }
    *out = (shape){v[0], v[1], v[2]};
    return 0;
}

/* The command line. */
typedef struct options {
    long threads, repeats;
    int json;
    int n_shapes;
    shape shapes[MAX_SHAPES];
} options;

/* Reads argv[1..argc) into *o, with the default shapes when no --shape is given. Returns -1 when
 * the benchmark should run, otherwise the exit status to return (usage() printed for --help; usage
 * errors). */
static int parse_options(int argc, char **argv, options *o) {
    o->threads = amp_get_num_threads(), o->repeats = 7;
    o->json = 0, o->n_shapes = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0) return usage();
        if (strcmp(arg, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(arg, "--threads") == 0 || strcmp(arg, "--repeats") == 0) {
            long *dst = arg[2] == 't' ? &o->threads : &o->repeats;
            if (i + 1 >= argc || amp_parse_long(argv[i + 1], 1, arg[2] == 't' ? AMP_MAX_THREADS : 1000, dst) != 0)
                return amp_usage_error("bench gemm", "%s needs a positive integer", arg);
            i++;
        } else if (strcmp(arg, "--shape") == 0) {
            if (i + 1 >= argc || parse_shape(argv[i + 1], &o->shapes[o->n_shapes]) != 0)
                return amp_usage_error("bench gemm", "--shape needs MxNxK with each size in 1..65536");
            if (++o->n_shapes == MAX_SHAPES) return amp_usage_error("bench gemm", "at most %d --shape options", MAX_SHAPES);
            i++;
        } else {
            return amp_usage_error("bench gemm", "unknown option '%s'", arg);
        }
    }
    if (o->n_shapes == 0) {
        o->n_shapes = (int)(sizeof default_shapes / sizeof default_shapes[0]);
        memcpy(o->shapes, default_shapes, sizeof default_shapes);
    }
    return -1;
}

/* Values uniform in [-1, 1) with 8 significant bits, so that f32, f16 and bf16 hold the same data. */
static void fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        x[i] = (float)((int)(seed >> 56) - 128) / 128.0f;
    }
}

typedef struct result {
    double amp_s, openblas_s; /* median seconds; openblas_s 0 when not measured */
} result;

/* Times amp (ob == NULL) or OpenBLAS (f32 only) on one shape. The two never alternate call by
 * call: OpenBLAS's idle threads busy-wait for a while after each call, and would take the cores
 * amp's next call needs. */
static int run_shape(const shape *sh, const openblas *ob, long repeats, result res[N_OPS][N_DTYPES]) {
    const size_t m = (size_t)sh->m, n = (size_t)sh->n, k = (size_t)sh->k;
    float *a32 = malloc(m * k * sizeof(float)), *b32 = malloc(k * n * sizeof(float));
    float *c = malloc(m * n * sizeof(float));
    uint16_t *a16 = malloc(m * k * 2), *b16 = malloc(k * n * 2);
    double *t = malloc((size_t)repeats * sizeof(double));
    int status = a32 && b32 && c && a16 && b16 && t ? AMP_OK : AMP_ERR_OUT_OF_MEMORY;
    if (status == AMP_OK) {
        fill(a32, m * k, 0x9E3779B97F4A7C15ull);
        fill(b32, k * n, 0xD1B54A32D192ED03ull);
    }
    for (int d = 0; d < (ob ? 1 : N_DTYPES) && status == AMP_OK; d++) {
        const amp_dtype dt = dtypes[d];
        const void *a = a32, *b = b32;
        if (dt != AMP_F32) {
            amp_convert(a16, dt, a32, AMP_F32, m * k); /* exact: the data has 8 significant bits */
            amp_convert(b16, dt, b32, AMP_F32, k * n);
            a = a16, b = b16;
        }
        for (int o = 0; o < N_OPS && status == AMP_OK; o++) {
            /* A stored m x k (or k x m when transposed), B stored k x n (or n x k), no padding */
            const long lda = ops[o].trans_a ? sh->m : sh->k, ldb = ops[o].trans_b ? sh->k : sh->n;
            for (long r = -1; r < repeats && status == AMP_OK; r++) { /* r == -1: warm-up */
                const double t0 = amp_bench_now();
                if (ob)
                    ob->sgemm(CBLAS_ROW_MAJOR, ops[o].trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
                              ops[o].trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)sh->m, (int)sh->n, (int)sh->k, 1.0f,
                              a32, (int)lda, b32, (int)ldb, 0.0f, c, (int)sh->n);
                else
                    status = amp_gemm(dt, ops[o].trans_a, ops[o].trans_b, sh->m, sh->n, sh->k, 1.0f, a, lda, b, ldb,
                                      0.0f, c, sh->n);
                if (r >= 0) t[r] = amp_bench_now() - t0;
            }
            *(ob ? &res[o][d].openblas_s : &res[o][d].amp_s) = amp_bench_median(t, (size_t)repeats);
        }
    }
    free(a32), free(b32), free(c), free(a16), free(b16), free(t);
    return status;
}

/* The yardsticks the ratios are taken against. */
typedef struct peaks {
    double one[PEAK_KINDS];      /* one core's GFLOP/s, 0 where the CPU lacks the loop */
    double all[PEAK_KINDS];      /* all threads at once, measured before OpenBLAS's threads exist */
    peak_kind kind_of[N_DTYPES]; /* the peak each dtype's ratio is taken against, for the path amp runs */
} peaks;

static void measure_peaks(peaks *pk, int threads, amp_isa isa) {
    for (int p = 0; p < PEAK_KINDS; p++) {
        pk->one[p] = measure_peak((peak_kind)p);
        pk->all[p] = measure_peak_threads((peak_kind)p, threads);
    }
    const peak_kind fma_kind = isa == AMP_ISA_AVX512 ? PEAK_FMA512 : PEAK_FMA256;
    const amp_gemm_bf16_method method = amp_gemm_bf16_method_active();
    const peak_kind bf16_kind = isa != AMP_ISA_AVX512          ? fma_kind
                                : method == AMP_GEMM_BF16_DOT ? PEAK_DPBF16
                                : method == AMP_GEMM_BF16_AMX ? PEAK_TDPBF16
                                                              : fma_kind;
    for (int d = 0; d < N_DTYPES; d++) pk->kind_of[d] = dtypes[d] == AMP_BF16 ? bf16_kind : fma_kind;
}

/* The peak is a constant of the core: measured again after the run, the larger figure is the one
 * less disturbed by whatever else the machine was doing. */
static void remeasure_peaks(peaks *pk) {
    for (int p = 0; p < PEAK_KINDS; p++) {
        const double again = measure_peak((peak_kind)p);
        if (again > pk->one[p]) pk->one[p] = again;
    }
}

/* Every shape: every amp figure first, then OpenBLAS's (see run_shape). Returns AMP_OK, or the
 * status of the first failure, having printed it. */
static int run_shapes(const options *o, const openblas *ob, result (*res)[N_OPS][N_DTYPES]) {
    const int n_shapes = o->n_shapes;
    for (int s = 0; s < n_shapes * (ob->sgemm ? 2 : 1); s++) {
        const shape *sh = &o->shapes[s % n_shapes];
        const int status = run_shape(sh, s < n_shapes ? NULL : ob, o->repeats, res[s % n_shapes]);
        if (status != AMP_OK) {
            fprintf(stderr, "amp: amp_gemm failed on %ldx%ldx%ld: %s\n", sh->m, sh->n, sh->k, amp_status_str(status));
            return status;
        }
    }
    return AMP_OK;
}

/* The JSON object's opening, up to the results array's "[". */
static void report_json_head(const options *o, const peaks *pk, amp_isa isa, const openblas *ob, const char *cpu) {
    printf("{\"bench\":\"gemm\",\"version\":\"%s\",\"cpu\":\"%s\",\"isa\":\"%s\",\"threads\":%ld,\"repeats\":%ld,"
           "\"peak_gflops_per_core\":{\"fma_zmm\":%.1f,\"fma_ymm\":%.1f,\"vdpbf16ps_zmm\":%.1f,\"tdpbf16ps\":%.1f},"
           "\"peak_gflops_all_threads\":{\"fma_zmm\":%.1f,\"fma_ymm\":%.1f,\"vdpbf16ps_zmm\":%.1f,"
           "\"tdpbf16ps\":%.1f},\"bf16_method\":\"%s\",\"openblas\":%s,\"results\":[",
           amp_version(), cpu, amp_isa_name(isa), o->threads, o->repeats, pk->one[PEAK_FMA512], pk->one[PEAK_FMA256],
           pk->one[PEAK_DPBF16], pk->one[PEAK_TDPBF16], pk->all[PEAK_FMA512], pk->all[PEAK_FMA256],
           pk->all[PEAK_DPBF16], pk->all[PEAK_TDPBF16], amp_gemm_bf16_method_name(amp_gemm_bf16_method_active()),
           ob->sgemm ? "true" : "false");
}

/* The text report's lines above the table, and the table's header. */
static void report_text_head(const options *o, const peaks *pk, amp_isa isa, const openblas *ob, const char *cpu) {
    const long threads = o->threads;
    printf("amp %s bench gemm: %ld thread%s, path %s, median over %ld\n", amp_version(), threads,
           threads == 1 ? "" : "s", amp_isa_name(isa), o->repeats);
    printf("cpu: %s\n", cpu);
    printf("one-core peak:");
    for (int p = 0; p < PEAK_KINDS; p++)
        if (pk->one[p] > 0) printf("  %s %.1f GFLOP/s", peak_names[p], pk->one[p]);
    printf("\n");
    if (threads > 1) {
        printf("%ld threads at once:", threads);
        for (int p = 0; p < PEAK_KINDS; p++)
            if (pk->all[p] > 0) printf("  %s %.1f GFLOP/s", peak_names[p], pk->all[p]);
        printf("  (the ratios below use %ld x the one-core peak)\n", threads);
    }
    if (ob->sgemm)
        printf("openblas: cblas_sgemm from libopenblas.so.0, %ld thread%s\n", threads, threads == 1 ? "" : "s");
    else
        printf("openblas: not installed (apt-get install libopenblas0)\n");
    printf("\n%-16s %-6s %-5s %9s %9s %8s %11s %9s\n", "MxNxK", "op", "dtype", "ms", "GFLOP/s", "of peak",
           "openblas", "vs blas");
}

/* One result per shape, op and dtype: a JSON object of the results array or a row of the table. */
static void report_results(const options *o, const peaks *pk, result (*res)[N_OPS][N_DTYPES]) {
    int first = 1;
    for (int s = 0; s < o->n_shapes; s++) {
        const shape *sh = &o->shapes[s];
        const double flops = 2.0 * (double)sh->m * (double)sh->n * (double)sh->k;
        char name[48];
        snprintf(name, sizeof name, "%ldx%ldx%ld", sh->m, sh->n, sh->k);
        for (int op = 0; op < N_OPS; op++) {
            const double ob_gflops = res[s][op][0].openblas_s > 0 ? flops / res[s][op][0].openblas_s / 1e9 : 0.0;
            for (int d = 0; d < N_DTYPES; d++) {
                const double gflops = flops / res[s][op][d].amp_s / 1e9;
                const double peak = pk->one[pk->kind_of[d]] * (double)o->threads;
                if (o->json) {
                    printf("%s{\"m\":%ld,\"n\":%ld,\"k\":%ld,\"op\":\"%s\",\"dtype\":\"%s\",\"ms\":%.4f,"
                           "\"gflops\":%.2f,\"peak\":\"%s\",\"of_peak\":%.4f,\"openblas_gflops\":%.2f,"
                           "\"vs_openblas\":%.4f}",
                           first ? "" : ",", sh->m, sh->n, sh->k, ops[op].name, amp_dtype_name(dtypes[d]),
                           res[s][op][d].amp_s * 1e3, gflops, peak_names[pk->kind_of[d]], peak > 0 ? gflops / peak : 0.0,
                           ob_gflops, ob_gflops > 0 ? gflops / ob_gflops : 0.0);
                    first = 0;
                    continue;
                }
                printf("%-16s %-6s %-5s %9.3f %9.1f", name, ops[op].name, amp_dtype_name(dtypes[d]),
                       res[s][op][d].amp_s * 1e3, gflops);
                if (peak > 0)
                    printf(" %7.0f%%", 100.0 * gflops / peak);
                else
                    printf(" %8s", "-");
                if (ob_gflops > 0)
                    printf(" %11.1f %8.2fx\n", ob_gflops, gflops / ob_gflops);
                else
                    printf(" %11s %9s\n", "-", "-");
            }
        }
    }
}

/* amp's performance goal, where this run measured it: the square product on a single path. */
static void report_text_goal(const options *o, const peaks *pk, result (*res)[N_OPS][N_DTYPES]) {
    for (int s = 0; s < o->n_shapes; s++) {
        const shape *sh = &o->shapes[s];
        if (sh->m != 1024 || sh->n != 1024 || sh->k != 1024) continue;
        const double flops = 2.0 * 1024 * 1024 * 1024;
        printf("\ngoal at 1024x1024x1024 A*B, >= 70%% of %ld x the one-core peak:", o->threads);
        for (int d = 0; d < N_DTYPES; d++) {
            const double peak = pk->one[pk->kind_of[d]] * (double)o->threads;
            if (peak > 0) printf("  %s %.0f%%", amp_dtype_name(dtypes[d]), 100.0 * flops / res[s][0][d].amp_s / 1e9 / peak);
        }
        printf("\n");
        return;
    }
}

int amp_bench_gemm(int argc, char **argv) {
    options o;
    const int parsed = parse_options(argc, argv, &o);
    if (parsed >= 0) return parsed;
    if (amp_cli_parse_only) return AMP_EXIT_OK;
    amp_set_num_threads((int)o.threads);
    const amp_isa isa = amp_isa_active();

    peaks pk;
    measure_peaks(&pk, (int)o.threads, isa);
    openblas ob = openblas_open((int)o.threads);
    result(*res)[N_OPS][N_DTYPES] = calloc((size_t)o.n_shapes, sizeof *res);
    if (!res) {
        fprintf(stderr, "amp: out of memory\n");
        return AMP_EXIT_FAILURE;
    }
    const int status = run_shapes(&o, &ob, res);
    if (status == AMP_OK) {
        remeasure_peaks(&pk);
        char cpu[256];
        amp_bench_cpu_name(cpu, sizeof cpu);
        if (o.json) {
            report_json_head(&o, &pk, isa, &ob, cpu);
            report_results(&o, &pk, res);
            printf("]}\n");
        } else {
            report_text_head(&o, &pk, isa, &ob, cpu);
            report_results(&o, &pk, res);
            report_text_goal(&o, &pk, res);
        }
    }
    free(res);
    if (ob.handle) dlclose(ob.handle);
    return status == AMP_OK ? AMP_EXIT_OK : AMP_EXIT_FAILURE;
}
