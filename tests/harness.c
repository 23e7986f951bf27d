/* The test runner and the check bookkeeping behind harness.h. */
#include "harness.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Counters of the running test. Atomics, because sweep workers check concurrently; the mutex only
 * serializes printing, so that two failure lines never interleave. */
static atomic_uint_fast64_t checks_passed;
static atomic_uint_fast64_t checks_failed;
static atomic_uint_fast64_t lines_printed;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t current_test;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Prints one failure line, or nothing once the test has printed its quota (plus one line that says
 * so, so a reader knows the count below is larger than the lines above). */
static void print_failure(const char *file, int line, const char *fmt, va_list ap) {
    const uint_fast64_t index = atomic_fetch_add(&lines_printed, 1);
    if (index > HARNESS_MAX_FAILURE_LINES) return;
    pthread_mutex_lock(&print_lock);
    if (index == HARNESS_MAX_FAILURE_LINES) {
        printf("    ... further failures of this test are counted but not printed\n");
    } else {
        printf("    %s:%d: ", file, line);
        vprintf(fmt, ap);
        printf("\n");
    }
    fflush(stdout);
    pthread_mutex_unlock(&print_lock);
}

bool harness_check(bool ok, const char *file, int line, const char *fmt, ...) {
    if (ok) {
        atomic_fetch_add_explicit(&checks_passed, 1, memory_order_relaxed);
        return true;
    }
    atomic_fetch_add(&checks_failed, 1);
    va_list ap;
    va_start(ap, fmt);
    print_failure(file, line, fmt, ap);
    va_end(ap);
    return false;
}

size_t harness_current_test(void) { return current_test; }

void harness_pass(uint64_t n) { atomic_fetch_add_explicit(&checks_passed, n, memory_order_relaxed); }

bool harness_check_bits(uint64_t got, uint64_t want, const char *file, int line, const char *expr,
                        const char *context_fmt, ...) {
    if (got == want) return harness_check(true, file, line, "%s", "");
    char context[256];
    va_list ap;
    va_start(ap, context_fmt);
    vsnprintf(context, sizeof context, context_fmt, ap);
    va_end(ap);
    return harness_check(false, file, line, "%s: got 0x%" PRIX64 ", want 0x%" PRIX64 " (%s)", expr, got, want,
                         context);
}

bool harness_check_str(const char *got, const char *want, const char *file, int line, const char *expr) {
    const bool ok = got && want && strcmp(got, want) == 0;
    return harness_check(ok, file, line, "%s: got \"%s\", want \"%s\"", expr, got ? got : "(null)",
                         want ? want : "(null)");
}

void harness_note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&print_lock);
    printf("    note: ");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    pthread_mutex_unlock(&print_lock);
    va_end(ap);
}

bool harness_quick(void) {
    const char *env = getenv("AMP_TEST_QUICK");
    return env && *env && strcmp(env, "0") != 0;
}

static uint64_t seed_value;
static pthread_once_t seed_once = PTHREAD_ONCE_INIT;

static void choose_seed(void) {
    const char *env = getenv("AMP_TEST_SEED");
    if (env && *env) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(env, &end, 0);
        if (errno == 0 && end && *end == '\0') {
            seed_value = (uint64_t)v;
            return;
        }
        printf("harness: AMP_TEST_SEED=%s is not a number; drawing a seed from the clock\n", env);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed_value = (uint64_t)ts.tv_sec * 1000000007u + (uint64_t)ts.tv_nsec;
}

uint64_t harness_seed(void) {
    pthread_once(&seed_once, choose_seed);
    return seed_value;
}

static bool name_selected(const char *name, const char *only) {
    char part[128];
    while (*only) {
        size_t n = strcspn(only, ",");
        if (n > 0 && n < sizeof part) {
            memcpy(part, only, n);
            part[n] = '\0';
            if (strstr(name, part)) return true;
        }
        only += n + (only[n] == ',');
    }
    return false;
}

int harness_run(const harness_test *tests, size_t count) {
    size_t passed = 0, failed = 0;
    const double start_all = now_seconds();
    /* AMP_TEST_ONLY=a,b runs only the tests whose names contain one of the comma-separated parts
     * (for iterating on one kernel; CI never sets it). */
    const char *only = getenv("AMP_TEST_ONLY");
    for (size_t i = 0; i < count; i++) {
        if (only && *only && !name_selected(tests[i].name, only)) continue;
        current_test = i;
        atomic_store(&checks_passed, 0);
        atomic_store(&checks_failed, 0);
        atomic_store(&lines_printed, 0);
        const double start = now_seconds();
        tests[i].fn();
        const double seconds = now_seconds() - start;
        const uint64_t p = atomic_load(&checks_passed), f = atomic_load(&checks_failed);
        /* A test that checks nothing has not tested anything: count it as a failure. */
        if (f == 0 && p > 0) {
            passed++;
            printf("ok %s (%" PRIu64 " checks, %.2f s)\n", tests[i].name, p, seconds);
        } else {
            failed++;
            printf("FAIL %s (%" PRIu64 " of %" PRIu64 " checks failed, %.2f s)\n", tests[i].name, f, p + f,
                   seconds);
        }
        fflush(stdout);
    }
    printf("# total %.2f s\n", now_seconds() - start_all);
    printf("%zu passed, %zu failed\n", passed, failed);
    fflush(stdout);
    return failed == 0 ? 0 : 1;
}
