/* Every test function's prototype, from the one list of tests (tests/test_list.h). */
#ifndef AMP_TESTS_TESTS_H
#define AMP_TESTS_TESTS_H

#define TEST(file, name) void test_##name(void);
#include "test_list.h"
#undef TEST

#endif /* AMP_TESTS_TESTS_H */
