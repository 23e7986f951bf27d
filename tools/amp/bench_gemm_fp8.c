/* `amp bench gemm-fp8`: amp_gemm_fp8's throughput next to amp_gemm's in bf16 on the built-in models'
 * linear-layer shapes, and the fp8 quantization pass (amax, scale, cast) next to memcpy, all measured
 * in the same run on the active SIMD path.
 *
 * GEMM: for each shape, with the operands laid out as a Linear's forward, input gradient or weight
 * gradient has them, timed as bf16 x bf16 (amp_gemm), e4m3 x e4m3 with one factor per tensor, and
 * e4m3 x e4m3 with a power-of-2 factor per 128 values along k (DeepSeek's 1 x 128 tiles; 128 x 1 in
 * the stored matrix where k runs down its columns). Each repeat runs the three one after another (so drift on a shared
 * machine hits them alike), each for at least MIN_SECONDS; the figures are medians over the repeats,
 * and the ratio is bf16's median time over fp8's (above 1: fp8 faster).
 *
 * Quantization: amp_fp8_amax, amp_fp8_current_scale and amp_fp8_quantize of an fp32 buffer, the
 * tensor-wise cast of current scaling, at 1 and 2 threads (the casts split long arrays between
 * threads), against a memcpy of the same fp32 buffer (one thread: libc's); the ratio is memcpy's time
 * over the cast's, so 1 means the cast (two passes over its input, one write of a quarter of its
 * size) takes as long as copying its input once. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "bench_util.h"
#include "commands.h"

#define MIN_SECONDS 0.02

typedef struct shape {
    const char *what;
    int64_t m, n, k;
    bool ta, tb; /* op(A) = A^T (A stored k x m), op(B) = B^T (B stored n x k) */
} shape;

/* gpt (hidden 128, context 128, batch 32: 4096 rows) and cnn (MNIST: 64 x 7 x 7 = 3136 features,
 * hidden 1024, 10 classes, batch 128). A Linear's forward is X W^T (W stored out x in), its input
 * gradient dY W, its weight gradient dY^T X. */
static const shape shapes[] = {
    {"gpt qkv", 4096, 384, 128, false, true},        {"gpt attn proj", 4096, 128, 128, false, true},
    {"gpt mlp up", 4096, 512, 128, false, true},     {"gpt mlp down", 4096, 128, 512, false, true},
    {"gpt head V=256", 4096, 256, 128, false, true}, {"gpt head V=8192", 4096, 8192, 128, false, true},
    {"gpt dX mlp up", 4096, 128, 512, false, false}, {"gpt dW mlp up", 512, 128, 4096, true, false},
    {"cnn hidden", 128, 1024, 3136, false, true},    {"cnn out", 128, 10, 1024, false, true},
    {"cnn dX hidden", 128, 3136, 1024, false, false}, {"cnn dW hidden", 1024, 3136, 128, true, false},
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0], N_KINDS = 3 };

typedef struct operands {
    uint16_t *a16, *b16;
    uint8_t *a8, *b8;
    float *sa, *sb; /* 1x128 factors */
    float *c;
    float one;
} operands;

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void free_operands(operands *o) {
    free(o->a16), free(o->b16), free(o->a8), free(o->b8), free(o->sa), free(o->sb), free(o->c);
}

static int make_operands(operands *o, const shape *s) {
    memset(o, 0, sizeof *o);
    const size_t na = (size_t)(s->m * s->k), nb = (size_t)(s->n * s->k);
    const size_t ta = (size_t)(s->m * ((s->k + 127) / 128)), tb = (size_t)(s->n * ((s->k + 127) / 128));
    o->a16 = malloc(na * 2), o->b16 = malloc(nb * 2), o->a8 = malloc(na), o->b8 = malloc(nb);
    o->sa = malloc(ta * sizeof(float)), o->sb = malloc(tb * sizeof(float));
    o->c = malloc((size_t)(s->m * s->n) * sizeof(float));
    if (!o->a16 || !o->b16 || !o->a8 || !o->b8 || !o->sa || !o->sb || !o->c) return -1;
    uint64_t st = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < na; i++) {
        o->a8[i] = (uint8_t)(xorshift(&st) % 0x7E) | (uint8_t)(i & 0x80); /* finite e4m3 */
        o->a16[i] = amp_bf16_from_fp32(amp_fp8e4m3_to_fp32(o->a8[i]));
    }
    for (size_t i = 0; i < nb; i++) {
        o->b8[i] = (uint8_t)(xorshift(&st) % 0x7E) | (uint8_t)((i >> 1) & 0x80);
        o->b16[i] = amp_bf16_from_fp32(amp_fp8e4m3_to_fp32(o->b8[i]));
    }
    for (size_t i = 0; i < ta; i++) o->sa[i] = ldexpf(1.0f, (int)(xorshift(&st) % 9) - 4);
    for (size_t i = 0; i < tb; i++) o->sb[i] = ldexpf(1.0f, (int)(xorshift(&st) % 9) - 4);
    o->one = 0.5f;
    return 0;
}

static int run_kind(int kind, const shape *s, operands *o) {
    const int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    if (kind == 0)
        return amp_gemm(AMP_BF16, s->ta, s->tb, s->m, s->n, s->k, 1.0f, o->a16, lda, o->b16, ldb, 0.0f, o->c, s->n);
    amp_gemm_fp8_operand a = {.dtype = AMP_F8E4M3, .data = o->a8, .ld = lda, .trans = s->ta, .scale_inv = &o->one};
    amp_gemm_fp8_operand b = {.dtype = AMP_F8E4M3, .data = o->b8, .ld = ldb, .trans = s->tb, .scale_inv = &o->one};
    if (kind == 2) { /* 1 x 128 along k: tiles of a row where k runs along the stored rows, else 128 x 1 */
        a.scale_inv = o->sa, b.scale_inv = o->sb;
        a.block_rows = s->ta ? 128 : 1, a.block_cols = s->ta ? 1 : 128, a.ld_scale = s->ta ? s->m : (s->k + 127) / 128;
        b.block_rows = s->tb ? 1 : 128, b.block_cols = s->tb ? 128 : 1, b.ld_scale = s->tb ? (s->k + 127) / 128 : s->n;
    }
    return amp_gemm_fp8(s->m, s->n, s->k, 1.0f, &a, &b, 0.0f, o->c, s->n);
}

/* Seconds per call of one kind: enough calls to last MIN_SECONDS (iters found once per shape) */
static double time_kind(int kind, const shape *s, operands *o, long iters) {
    const double t0 = amp_bench_now();
    for (long i = 0; i < iters; i++) run_kind(kind, s, o);
    return (amp_bench_now() - t0) / (double)iters;
}

static int bench_gemms(long repeats) {
    double *t = malloc((size_t)repeats * N_KINDS * sizeof(double));
    if (!t) return -1;
    printf("%-18s %5s %5s %5s %3s %11s %11s %11s %8s %8s\n", "shape", "m", "n", "k", "thr", "bf16 GF/s",
           "e4m3 GF/s", "1x128 GF/s", "e4m3/bf16", "1x128/bf16");
    for (int threads = 1; threads <= 2; threads++) {
        amp_set_num_threads(threads);
        for (int si = 0; si < N_SHAPES; si++) {
            const shape *s = &shapes[si];
            operands o;
            if (make_operands(&o, s) != 0) {
                free_operands(&o);
                free(t);
                return -1;
            }
            for (int kd = 0; kd < N_KINDS; kd++)
                if (run_kind(kd, s, &o) != AMP_OK) { /* also warms the packing buffers */
                    free_operands(&o);
                    free(t);
                    return -1;
                }
            const double once = time_kind(0, s, &o, 1);
            const long iters = once >= MIN_SECONDS ? 1 : (long)(MIN_SECONDS / (once > 1e-7 ? once : 1e-7)) + 1;
            for (long r = 0; r < repeats; r++)
                for (int kd = 0; kd < N_KINDS; kd++) t[kd * repeats + r] = time_kind(kd, s, &o, iters);
            double med[N_KINDS];
            for (int kd = 0; kd < N_KINDS; kd++) med[kd] = amp_bench_median(t + kd * repeats, (size_t)repeats);
            const double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k;
            printf("%-18s %5lld %5lld %5lld %3d %11.1f %11.1f %11.1f %8.3f %8.3f\n", s->what, (long long)s->m,
                   (long long)s->n, (long long)s->k, threads, flops / med[0] * 1e-9, flops / med[1] * 1e-9,
                   flops / med[2] * 1e-9, med[0] / med[1], med[0] / med[2]);
            free_operands(&o);
        }
    }
    amp_set_num_threads(0);
    free(t);
    return 0;
}

/* amax, current scale (pow2 off), quantize to e4m3: the whole tensor-wise cast */
/* The cast's time; *amax_s gets its first pass's (amax and scale). */
static double time_quantize(uint8_t *dst, const float *src, size_t n, double *amax_s) {
    const double t0 = amp_bench_now();
    float amax = 0.0f;
    amp_fp8_amax(&amax, NULL, src, n);
    const float scale = amp_fp8_current_scale(amax, AMP_F8E4M3, 0.0f, false);
    const double t1 = amp_bench_now();
    amp_fp8_quantize(dst, AMP_F8E4M3, src, n, scale);
    *amax_s = t1 - t0;
    return amp_bench_now() - t0;
}

static int bench_quantize(long repeats) {
    static const long sizes_mib[] = {4, 64};
    printf("\n%-10s %3s %12s %12s %10s %9s %9s   (amax + scale + e4m3 cast of an fp32 buffer vs memcpy of it;\n"
           "%62s the cast's two passes apart: its amax and its encode, GB/s of fp32 read)\n",
           "fp32 size", "thr", "cast GB/s", "memcpy GB/s", "cast/memcpy", "amax", "encode", "");
    for (size_t z = 0; z < 2 * sizeof sizes_mib / sizeof sizes_mib[0]; z++) {
        const int threads = (int)(z % 2) + 1;
        amp_set_num_threads(threads);
        const size_t bytes = (size_t)sizes_mib[z / 2] << 20, n = bytes / sizeof(float);
        float *src = malloc(bytes), *copy = malloc(bytes);
        uint8_t *dst = malloc(n);
        double *t = malloc((size_t)repeats * 4 * sizeof(double)); /* cast, memcpy, amax, encode */
        if (!src || !copy || !dst || !t) {
            free(src), free(copy), free(dst), free(t);
            return -1;
        }
        uint64_t st = 0x2545F4914F6CDD1Dull;
        for (size_t i = 0; i < n; i++) src[i] = ((float)(xorshift(&st) >> 40) - 8388608.0f) * 0x1p-20f;
        memset(copy, 0, bytes);
        memset(dst, 0, n);
        const long iters = bytes >= (32u << 20) ? 1 : 8;
        for (long r = 0; r < repeats; r++) {
            double tq = 0.0, tm = 0.0, ta = 0.0;
            for (long i = 0; i < iters; i++) {
                double a;
                tq += time_quantize(dst, src, n, &a);
                ta += a;
                const double t0 = amp_bench_now();
                memcpy(copy, src, bytes);
                tm += amp_bench_now() - t0;
            }
            t[r] = tq / (double)iters, t[repeats + r] = tm / (double)iters;
            t[2 * repeats + r] = ta / (double)iters, t[3 * repeats + r] = (tq - ta) / (double)iters;
        }
        const double q = amp_bench_median(t, (size_t)repeats), m = amp_bench_median(t + repeats, (size_t)repeats);
        const double a = amp_bench_median(t + 2 * repeats, (size_t)repeats), e = amp_bench_median(t + 3 * repeats, (size_t)repeats);
        printf("%6ld MiB %3d %12.2f %12.2f %10.3f %9.2f %9.2f\n", sizes_mib[z / 2], threads, (double)bytes / q * 1e-9,
               (double)bytes / m * 1e-9, m / q, (double)bytes / a * 1e-9, (double)bytes / e * 1e-9);
        free(src), free(copy), free(dst), free(t);
    }
    amp_set_num_threads(0);
    return 0;
}

static int usage(void) {
    printf("usage: amp bench gemm-fp8 [--repeats N]\n"
           "  --repeats N   timed repeats per figure; medians are reported (default 7)\n"
           "amp_gemm_fp8 (e4m3 x e4m3, one factor per tensor; and power-of-2 factors per 1x128 tile along k)\n"
           "against amp_gemm in bf16 on the gpt's and the cnn's linear shapes, at 1 and 2 threads, on the\n"
           "active SIMD path and bf16 method (AMP_ISA, AMP_GEMM_BF16); then the tensor-wise fp8 cast (amax,\n"
           "scale, quantize) of 4 and 64 MiB of fp32 against memcpy. Ratios above 1: fp8 faster.\n");
    return AMP_EXIT_OK;
}

int amp_bench_gemm_fp8(int argc, char **argv) {
    long repeats = 7;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) return usage();
        if (strcmp(argv[i], "--repeats") == 0) {
            if (i + 1 >= argc || amp_parse_long(argv[i + 1], 1, 1000, &repeats) != 0)
                return amp_usage_error("bench gemm-fp8", "--repeats needs a positive integer (at most 1000)");
            i++;
            continue;
        }
        return amp_usage_error("bench gemm-fp8", "unknown option '%s'", argv[i]);
    }
    if (amp_cli_parse_only) return AMP_EXIT_OK;
    char cpu[128];
    amp_bench_cpu_name(cpu, sizeof cpu);
    printf("amp bench gemm-fp8: %s, path %s, bf16 method %s, each figure the median over %ld repeats\n", cpu,
           amp_isa_name(amp_isa_active()), amp_gemm_bf16_method_name(amp_gemm_bf16_method_active()), repeats);
    if (bench_gemms(repeats) != 0 || bench_quantize(repeats) != 0) {
        fprintf(stderr, "amp: bench gemm-fp8: out of memory or a product failed\n");
        return AMP_EXIT_FAILURE;
    }
    return AMP_EXIT_OK;
}
