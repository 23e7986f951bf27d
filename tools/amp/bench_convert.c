/* `amp bench convert`: GB/s of every conversion pair on every SIMD path, next to memcpy measured in
 * the same run on the same buffers, on one thread.
 *
 * Bandwidth counts bytes read plus bytes written, for memcpy too, so "vs memcpy" compares the memory
 * traffic each achieves: a conversion at memory speed scores about 1.0. Repeats interleave memcpy
 * and the conversions so that drift on a shared machine hits both alike; each figure is a median. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "bench_util.h"
#include "commands.h"

typedef struct {
    amp_dtype src, dst;
} pair;

static const pair pairs[] = {
    {AMP_F32, AMP_F16},    {AMP_F16, AMP_F32},    {AMP_F32, AMP_BF16},   {AMP_BF16, AMP_F32},
    {AMP_F32, AMP_F8E4M3}, {AMP_F8E4M3, AMP_F32}, {AMP_F32, AMP_F8E5M2}, {AMP_F8E5M2, AMP_F32},
};
enum { N_PAIRS = sizeof pairs / sizeof pairs[0] };

/* Typical training values: magnitudes spread over 2^-20..2^6, both signs, no NaN. */
static void fill_values(float *x, size_t n) {
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float mant = 1.0f + (float)(s >> 41) / (float)(1u << 23);
        int e = (int)((s >> 8) % 27) - 20;
        float v = mant;
        for (; e > 0; e--) v *= 2.0f;
        for (; e < 0; e++) v *= 0.5f;
        x[i] = (s & 1) ? -v : v;
    }
}

static int usage(void) {
    printf("usage: amp bench convert [--mib N] [--repeats N] [--isa ref|avx2|avx512|all] [--json]\n"
           "  --mib N       size of the fp32 side of each conversion, in MiB (default 64)\n"
           "  --repeats N   timed repeats per figure; the median is reported (default 9)\n"
           "  --isa P       SIMD path(s) to measure (default all this CPU supports)\n"
           "  --json        one JSON object on the last line instead of the table\n"
           "Bandwidth = (bytes read + bytes written) / time, one thread; memcpy is measured the same way.\n");
    return AMP_EXIT_OK;
}

int amp_bench_convert(int argc, char **argv) {
    amp_bench_options o = {.mib = 64, .repeats = 9, .json = 0, .only_isa = -1};
    const int parsed = amp_bench_parse_options(argc, argv, &o, usage);
    if (parsed >= 0) return parsed;
    if (amp_cli_parse_only) return AMP_EXIT_OK;
    const long mib = o.mib, repeats = o.repeats;
    const int json = o.json, only_isa = o.only_isa;
    const size_t n = (size_t)mib * 1024 * 1024 / sizeof(float);
    const size_t bytes = n * sizeof(float);
    float *src32 = malloc(bytes), *dst32 = malloc(bytes);
    void *narrow = malloc(bytes / 2);
    double *times = malloc((size_t)repeats * sizeof *times * (1 + N_PAIRS * AMP_ISA_COUNT));
    if (!src32 || !dst32 || !narrow || !times) {
        free(src32), free(dst32), free(narrow), free(times);
        fprintf(stderr, "amp: out of memory for %ld MiB buffers\n", mib);
        return AMP_EXIT_FAILURE;
    }
    fill_values(src32, n);
    memset(dst32, 0, bytes);
    memset(narrow, 0, bytes / 2);
    /* Narrow sources hold real encodings of the fp32 data, so decoders see realistic patterns. */
    const amp_isa original = amp_isa_active();

    double *t_memcpy = times;
    for (long r = -1; r < repeats; r++) { /* r == -1 is the untimed warm-up (page faults, caches) */
        double t0 = amp_bench_now();
        memcpy(dst32, src32, bytes);
        double t1 = amp_bench_now();
        if (r >= 0) t_memcpy[r] = t1 - t0;
        for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
            if (!amp_isa_supported((amp_isa)isa) || (only_isa >= 0 && isa != only_isa)) continue;
            amp_isa_set((amp_isa)isa);
            for (int p = 0; p < N_PAIRS; p++) {
                const pair *pp = &pairs[p];
                const void *in = pp->src == AMP_F32 ? (const void *)src32 : narrow;
                void *out = pp->dst == AMP_F32 ? (void *)dst32 : narrow;
                if (pp->dst == AMP_F32) amp_convert(narrow, pp->src, src32, AMP_F32, n); /* realistic input */
                t0 = amp_bench_now();
                int st = amp_convert(out, pp->dst, in, pp->src, n);
                t1 = amp_bench_now();
                if (st != AMP_OK) {
                    fprintf(stderr, "amp: amp_convert failed: %s\n", amp_status_str(st));
                    free(src32), free(dst32), free(narrow), free(times);
                    return AMP_EXIT_FAILURE;
                }
                if (r >= 0) times[(size_t)repeats * (1 + (size_t)isa * N_PAIRS + (size_t)p) + (size_t)r] = t1 - t0;
            }
        }
    }
    amp_isa_set(original);

    char cpu[256];
    amp_bench_cpu_name(cpu, sizeof cpu);
    const double memcpy_gbps = 2.0 * (double)bytes / amp_bench_median(t_memcpy, (size_t)repeats) / 1e9;
    if (json) {
        printf("{\"bench\":\"convert\",\"cpu\":\"%s\",\"threads\":1,\"mib\":%ld,\"repeats\":%ld,"
               "\"memcpy_gbps\":%.3f,\"results\":[",
               cpu, mib, repeats, memcpy_gbps);
    } else {
        printf("amp %s bench convert: %ld MiB of fp32 per conversion, 1 thread, median over %ld\n", amp_version(), mib,
               repeats);
        printf("cpu: %s\n", cpu);
        printf("memcpy: %.2f GB/s (read + write)\n\n", memcpy_gbps);
        printf("%-16s %-7s %9s %11s %10s\n", "conversion", "path", "GB/s", "Melem/s", "vs memcpy");
    }
    int first = 1;
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!amp_isa_supported((amp_isa)isa) || (only_isa >= 0 && isa != only_isa)) continue;
        for (int p = 0; p < N_PAIRS; p++) {
            double t = amp_bench_median(&times[(size_t)repeats * (1 + (size_t)isa * N_PAIRS + (size_t)p)], (size_t)repeats);
            double traffic = (double)n * (double)(amp_dtype_size(pairs[p].src) + amp_dtype_size(pairs[p].dst));
            double gbps = traffic / t / 1e9;
            char name[32];
            snprintf(name, sizeof name, "%s->%s", amp_dtype_name(pairs[p].src), amp_dtype_name(pairs[p].dst));
            if (json) {
                printf("%s{\"src\":\"%s\",\"dst\":\"%s\",\"isa\":\"%s\",\"gbps\":%.6g,\"melem_per_s\":%.1f,"
                       "\"vs_memcpy\":%.6g}",
                       first ? "" : ",", amp_dtype_name(pairs[p].src), amp_dtype_name(pairs[p].dst),
                       amp_isa_name((amp_isa)isa), gbps, (double)n / t / 1e6, gbps / memcpy_gbps);
                first = 0;
            } else {
                printf("%-16s %-7s %9.2f %11.1f %9.0f%%\n", name, amp_isa_name((amp_isa)isa), gbps, (double)n / t / 1e6,
                       100.0 * gbps / memcpy_gbps);
            }
        }
    }
    if (json) printf("]}\n");
    free(src32), free(dst32), free(narrow), free(times);
    return AMP_EXIT_OK;
}
