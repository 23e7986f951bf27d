/* `amp bench unscale`: GB/s of the GradScaler's gradient pass (unscale + inf/NaN check, in place) for
 * every gradient dtype on every SIMD path, next to memcpy measured in the same run on buffers of the
 * same size, on one thread.
 *
 * Bandwidth counts bytes read plus bytes written, for memcpy too (bench_convert.c's convention), so
 * "vs memcpy" compares memory traffic: an in-place pass at memory speed scores about 1.0 (it can
 * score more, since memcpy's destination lines are extra traffic a read-modify-write does not have).
 * The check-only pass (inv_scale == 1, what step() does for a fused optimizer) only reads. Repeats
 * alternate inv_scale between 0.5 and 2 so the data neither drifts into subnormals nor changes its
 * magnitude; each figure is a median, with memcpy interleaved so drift on a shared machine hits both
 * alike. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "bench_util.h"
#include "commands.h"

static const amp_dtype dtypes[] = {AMP_F32, AMP_BF16, AMP_F16};
enum { N_DTYPES = sizeof dtypes / sizeof dtypes[0] };

typedef enum { MODE_UNSCALE, MODE_SAFE, MODE_CHECK, N_MODES } mode;
static const char *const mode_names[N_MODES] = {"unscale", "unscale+safe", "check-only"};

/* Scaled gradients as training makes them: magnitudes 2^-20..2^6 times 2^16 (fp16: 2^-8..2^6 times
 * 2^8, inside its range), both signs, no inf or NaN (so every pass reads everything). */
static void fill_grads(float *x, size_t n, amp_dtype dtype) {
    const int lo = dtype == AMP_F16 ? -8 : -20, span = dtype == AMP_F16 ? 15 : 27, shift = dtype == AMP_F16 ? 8 : 16;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float v = 1.0f + (float)(s >> 41) / (float)(1u << 23);
        int e = (int)((s >> 8) % (uint64_t)span) + lo + shift;
        for (; e > 0; e--) v *= 2.0f;
        for (; e < 0; e++) v *= 0.5f;
        x[i] = (s & 1) ? -v : v;
    }
}

static int usage(void) {
    printf("usage: amp bench unscale [--mib N] [--repeats N] [--isa ref|avx2|avx512|all] [--json]\n"
           "  --mib N       gradient buffer size in MiB, per dtype (default 64)\n"
           "  --repeats N   timed repeats per figure; the median is reported (default 9)\n"
           "  --isa P       SIMD path(s) to measure (default all this CPU supports)\n"
           "  --json        one JSON object on the last line instead of the table\n"
           "Passes: unscale (check + multiply, in place), unscale+safe (also flags values that become\n"
           "non-finite), check-only (inv_scale 1: read only). Bandwidth = (bytes read + bytes written) /\n"
           "time, one thread; memcpy of the same size is measured the same way.\n");
    return AMP_EXIT_OK;
}

int amp_bench_unscale(int argc, char **argv) {
    amp_bench_options o = {.mib = 64, .repeats = 9, .json = 0, .only_isa = -1};
    const int parsed = amp_bench_parse_options(argc, argv, &o, usage);
    if (parsed >= 0) return parsed;
    if (amp_cli_parse_only) return AMP_EXIT_OK;
    const long mib = o.mib, repeats = o.repeats;
    const int json = o.json, only_isa = o.only_isa;
    const size_t bytes = (size_t)mib * 1024 * 1024;
    unsigned char *src = malloc(bytes), *dst = malloc(bytes);
    unsigned char *grads[N_DTYPES] = {NULL};
    const size_t n_results = (size_t)AMP_ISA_COUNT * N_DTYPES * N_MODES;
    double *times = malloc((size_t)repeats * sizeof(double) * (1 + n_results));
    int ok = src && dst && times;
    for (int d = 0; ok && d < N_DTYPES; d++) ok = (grads[d] = malloc(bytes)) != NULL;
    if (!ok) {
        free(src), free(dst), free(times);
        for (int d = 0; d < N_DTYPES; d++) free(grads[d]);
        fprintf(stderr, "amp: out of memory for %ld MiB buffers\n", mib);
        return AMP_EXIT_FAILURE;
    }
    memset(src, 1, bytes);
    memset(dst, 0, bytes);
    for (int d = 0; d < N_DTYPES; d++) {
        const size_t n = bytes / amp_dtype_size(dtypes[d]);
        float *tmp = dtypes[d] == AMP_F32 ? (float *)grads[d] : malloc(n * sizeof(float));
        if (!tmp) {
            fprintf(stderr, "amp: out of memory\n");
            free(src), free(dst), free(times);
            for (int k = 0; k < N_DTYPES; k++) free(grads[k]);
            return AMP_EXIT_FAILURE;
        }
        fill_grads(tmp, n, dtypes[d]);
        if (dtypes[d] != AMP_F32) {
            amp_convert(grads[d], dtypes[d], tmp, AMP_F32, n);
            free(tmp);
        }
    }
    const amp_isa original = amp_isa_active();
    float found_sink = 0.0f;

    double *t_memcpy = times;
    for (long r = -1; r < repeats; r++) { /* r == -1: the untimed warm-up (page faults, caches) */
        double t0 = amp_bench_now();
        memcpy(dst, src, bytes);
        double t1 = amp_bench_now();
        if (r >= 0) t_memcpy[r] = t1 - t0;
        const float inv = (r & 1) ? 0.5f : 2.0f; /* the warm-up (r == -1) halves first */
        for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
            if (!amp_isa_supported((amp_isa)isa) || (only_isa >= 0 && isa != only_isa)) continue;
            amp_isa_set((amp_isa)isa);
            for (int d = 0; d < N_DTYPES; d++) {
                const size_t n = bytes / amp_dtype_size(dtypes[d]);
                for (int m = 0; m < N_MODES; m++) {
                    float found = 0.0f, after = 0.0f;
                    t0 = amp_bench_now();
                    if (m == MODE_SAFE)
                        amp_non_finite_check_and_unscale_safe(grads[d], dtypes[d], n, &found, &after, inv);
                    else
                        amp_non_finite_check_and_unscale(grads[d], dtypes[d], n, &found, m == MODE_CHECK ? 1.0f : inv);
                    t1 = amp_bench_now();
                    found_sink += found + after;
                    const size_t slot = ((size_t)isa * N_DTYPES + (size_t)d) * N_MODES + (size_t)m;
                    if (r >= 0) times[(size_t)repeats * (1 + slot) + (size_t)r] = t1 - t0;
                }
            }
        }
    }
    amp_isa_set(original);
    if (found_sink != 0.0f) fprintf(stderr, "amp: warning: the benchmark data held a non-finite value\n");

    char cpu[256];
    amp_bench_cpu_name(cpu, sizeof cpu);
    const double memcpy_gbps = 2.0 * (double)bytes / amp_bench_median(t_memcpy, (size_t)repeats) / 1e9;
    if (json) {
        printf("{\"bench\":\"unscale\",\"cpu\":\"%s\",\"threads\":1,\"mib\":%ld,\"repeats\":%ld,"
               "\"memcpy_gbps\":%.3f,\"results\":[",
               cpu, mib, repeats, memcpy_gbps);
    } else {
        printf("amp %s bench unscale: %ld MiB of gradients per pass, in place, 1 thread, median over %ld\n",
               amp_version(), mib, repeats);
        printf("cpu: %s\n", cpu);
        printf("memcpy: %.2f GB/s (read + write)\n\n", memcpy_gbps);
        printf("%-6s %-7s %-13s %9s %11s %10s\n", "dtype", "path", "pass", "GB/s", "Melem/s", "vs memcpy");
    }
    int first = 1;
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!amp_isa_supported((amp_isa)isa) || (only_isa >= 0 && isa != only_isa)) continue;
        for (int d = 0; d < N_DTYPES; d++) {
            const size_t n = bytes / amp_dtype_size(dtypes[d]);
            for (int m = 0; m < N_MODES; m++) {
                const size_t slot = ((size_t)isa * N_DTYPES + (size_t)d) * N_MODES + (size_t)m;
                const double t = amp_bench_median(&times[(size_t)repeats * (1 + slot)], (size_t)repeats);
                const double traffic = (double)bytes * (m == MODE_CHECK ? 1.0 : 2.0);
                const double gbps = traffic / t / 1e9;
                if (json) {
                    printf("%s{\"dtype\":\"%s\",\"isa\":\"%s\",\"pass\":\"%s\",\"gbps\":%.3f,\"melem_per_s\":%.1f,"
                           "\"vs_memcpy\":%.3f}",
                           first ? "" : ",", amp_dtype_name(dtypes[d]), amp_isa_name((amp_isa)isa), mode_names[m], gbps,
                           (double)n / t / 1e6, gbps / memcpy_gbps);
                    first = 0;
                } else {
                    printf("%-6s %-7s %-13s %9.2f %11.1f %9.0f%%\n", amp_dtype_name(dtypes[d]),
                           amp_isa_name((amp_isa)isa), mode_names[m], gbps, (double)n / t / 1e6,
                           100.0 * gbps / memcpy_gbps);
                }
            }
        }
    }
    if (json) printf("]}\n");
    free(src), free(dst), free(times);
    for (int d = 0; d < N_DTYPES; d++) free(grads[d]);
    return AMP_EXIT_OK;
}
