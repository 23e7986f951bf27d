/* Helpers shared by the CLI's benchmarks. */
#ifndef AMP_TOOLS_BENCH_UTIL_H
#define AMP_TOOLS_BENCH_UTIL_H

#include <stddef.h>

/* Seconds from a monotonic clock. */
double amp_bench_now(void);
/* Median of n values (sorts them in place). */
double amp_bench_median(double *v, size_t n);
/* The CPU's model name from /proc/cpuinfo, or "unknown CPU". */
void amp_bench_cpu_name(char *buf, size_t size);
/* Parses a whole-string positive integer in [lo, hi]; returns 0 on success, -1 otherwise. */
int amp_parse_long(const char *s, long lo, long hi, long *out);

/* The options every memory-bound benchmark takes: --mib N, --repeats N, --isa P|all, --json, --help. */
typedef struct amp_bench_options {
    long mib, repeats;
    int json;
    int only_isa; /* -1: every path this CPU supports */
} amp_bench_options;

/* Parses argv[1..argc) into o (which holds the defaults on entry). Returns -1 when the benchmark
 * should run, otherwise the exit status to return (usage() printed for --help; usage errors). */
int amp_bench_parse_options(int argc, char **argv, amp_bench_options *o, int (*usage)(void));

/* One core's measured peak GFLOP/s (bench_gemm.c's register-only loops), 0 when the CPU lacks the
 * instruction, and the instruction's name in *kind: the widest FMA ("fma": zmm, else ymm on an
 * AVX2-only CPU); when bf16, the machine's bf16
 * peak, the larger of VDPBF16PS's ("vdpbf16ps") and the FMA's (bf16 decoded exactly to fp32 is
 * multiplied at the FMA's rate: amp's AMP_GEMM_BF16_FMA). */
double amp_bench_peak_gflops(int bf16, const char **kind);

int amp_bench_train(int argc, char **argv);
int amp_bench_convert(int argc, char **argv);
int amp_bench_gemm(int argc, char **argv);
int amp_bench_gemm_fp8(int argc, char **argv);
int amp_bench_unscale(int argc, char **argv);

#endif
