/* The unit-test framework: checks that count passes and failures, and failure lines that say where
 * (file:line) and what (the values), so a failing run can be read without a debugger.
 *
 * Checks are thread-safe: the exhaustive sweeps call them from worker threads. A test may fail any
 * number of checks, but only the first HARNESS_MAX_FAILURE_LINES of them are printed, so that a
 * broken kernel in a 2^32 sweep reports a handful of inputs instead of flooding the log. */
#ifndef AMP_TESTS_HARNESS_H
#define AMP_TESTS_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { HARNESS_MAX_FAILURE_LINES = 20 };

typedef struct harness_test {
    const char *name;
    void (*fn)(void);
} harness_test;

/* Runs every test in order, prints "ok NAME (N checks, T s)" or "FAIL NAME ..." per test and, last,
 * "P passed, F failed" counting tests. Returns the process exit status: 0 iff no test failed. */
int harness_run(const harness_test *tests, size_t count);

#if defined(__GNUC__)
#define HARNESS_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define HARNESS_PRINTF(fmt_index, first_arg)
#endif

/* Records one check of the running test; on failure prints "file:line: " and the formatted message.
 * Returns ok, so a caller can stop early after a failed precondition. */
bool harness_check(bool ok, const char *file, int line, const char *fmt, ...) HARNESS_PRINTF(4, 5);
/* Records `n` passed checks at once: a sweep compares a whole chunk and counts it as one check. */
void harness_pass(uint64_t n);
/* Prints an indented note under the running test (a skipped ISA, a seed, a timing). */
void harness_note(const char *fmt, ...) HARNESS_PRINTF(1, 2);

/* The index of the running test in the table (so a helper can say something once per test). */
size_t harness_current_test(void);

/* True when AMP_TEST_QUICK is set to anything but "" or "0": the sanitizer run, which replaces the
 * 2^32 sweeps by strided ones. */
bool harness_quick(void);
/* The seed for random tests: AMP_TEST_SEED if set (decimal or 0x hex), else one drawn from the clock
 * at start-up. The same for every test in a run; each random test prints it with harness_note. */
uint64_t harness_seed(void);

#define CHECK(cond) harness_check((cond), __FILE__, __LINE__, "CHECK(%s) failed", #cond)
/* CHECK_MSG(cond, fmt, ...): a check whose failure line is the given printf message. */
#define CHECK_MSG(cond, ...) harness_check((cond), __FILE__, __LINE__, __VA_ARGS__)
/* Integer equality; prints both values in decimal. */
#define CHECK_EQ_INT(got, want)                                                                      \
    do {                                                                                             \
        const long long got_ = (long long)(got), want_ = (long long)(want);                          \
        harness_check(got_ == want_, __FILE__, __LINE__, "%s == %s: got %lld, want %lld", #got, #want, \
                      got_, want_);                                                                  \
    } while (0)
/* Bit-pattern equality; prints both in hex plus a printf-style context ("f16 x=0x3F800000"). */
#define CHECK_EQ_BITS(got, want, ...)                                                                \
    harness_check_bits((uint64_t)(got), (uint64_t)(want), __FILE__, __LINE__, #got, __VA_ARGS__)
#define CHECK_STR_EQ(got, want)                                                                      \
    harness_check_str((got), (want), __FILE__, __LINE__, #got)

bool harness_check_bits(uint64_t got, uint64_t want, const char *file, int line, const char *expr,
                        const char *context_fmt, ...) HARNESS_PRINTF(6, 7);
bool harness_check_str(const char *got, const char *want, const char *file, int line, const char *expr);

#endif /* AMP_TESTS_HARNESS_H */
