/* amp_tests: runs every C unit test in order; the last line is "N passed, N failed" (tests), and the
 * exit status is 0 iff none failed. Environment: AMP_TEST_QUICK=1 for strided sweeps (sanitizer
 * runs), AMP_TEST_SEED=N to replay a random test, AMP_ISA to choose the path restored between tests. */
#include "harness.h"
#include "tests.h"

/* The table, in tests/test_list.h's order; the printed name drops the test_ prefix. */
static const harness_test all_tests[] = {
#define TEST(file, name) {#name, test_##name},
#include "test_list.h"
#undef TEST
};

int main(void) {
    /* The library's default log hook warns on stderr when AMP_ISA names a missing path; that warning
     * is the user's business, so it stays on. */
    return harness_run(all_tests, sizeof all_tests / sizeof all_tests[0]);
}
