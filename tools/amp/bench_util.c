#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amp.h"
#include "bench_util.h"
#include "commands.h"

double amp_bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double amp_bench_median(double *v, size_t n) {
    if (n == 0) return 0.0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void amp_bench_cpu_name(char *buf, size_t size) {
    snprintf(buf, size, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *colon = strchr(line, ':');
            if (colon) {
                colon++;
                while (*colon == ' ' || *colon == '\t') colon++;
                snprintf(buf, size, "%s", colon);
                buf[strcspn(buf, "\n")] = '\0';
            }
            break;
        }
    }
    fclose(f);
}

int amp_parse_long(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int amp_bench_parse_options(int argc, char **argv, amp_bench_options *o, int (*usage)(void)) {
    /* The hint names the benchmark (argv[0]), whose --help lists these options. */
    char cmd[48];
    snprintf(cmd, sizeof cmd, "bench %s", argc > 0 ? argv[0] : "");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0) return usage();
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(a, "--mib") == 0 || strcmp(a, "--repeats") == 0) {
            long *dst = a[2] == 'm' ? &o->mib : &o->repeats;
            if (i + 1 >= argc || amp_parse_long(argv[i + 1], 1, a[2] == 'm' ? 4096 : 1000, dst) != 0)
                return amp_usage_error(cmd, "%s needs a positive integer", a);
            i++;
        } else if (strcmp(a, "--isa") == 0) {
            amp_isa isa;
            if (i + 1 >= argc) return amp_usage_error(cmd, "--isa needs a value");
            i++;
            if (strcmp(argv[i], "all") == 0) continue;
            if (amp_isa_from_name(argv[i], &isa) != AMP_OK)
                return amp_usage_error(cmd, "unknown SIMD path '%s' (ref, avx2, avx512, all)", argv[i]);
            if (!amp_isa_supported(isa)) {
                fprintf(stderr, "amp: this CPU cannot run the %s path\n", argv[i]);
                return AMP_EXIT_FAILURE;
            }
            o->only_isa = (int)isa;
        } else {
            return amp_usage_error(cmd, "unknown option '%s'", a);
        }
    }
    return -1;
}
