/* Helpers shared by the test files: bit casts, a seeded generator, element access by dtype, and the
 * loop over every SIMD path this CPU supports. */
#ifndef AMP_TESTS_TEST_UTIL_H
#define AMP_TESTS_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "amp.h"

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and every seed is a good one. */
typedef struct test_rng {
    uint64_t state;
} test_rng;

uint64_t test_rng_next(test_rng *rng);
/* Uniform in [0, bound), bound > 0 (the slight modulo bias does not matter for test data). */
uint32_t test_rng_below(test_rng *rng, uint32_t bound);

/* Element i of a buffer of `dtype` as an unsigned bit pattern, and the reverse. */
uint32_t test_elem_get(amp_dtype dtype, const void *buf, size_t i);
void test_elem_set(amp_dtype dtype, void *buf, size_t i, uint32_t bits);

/* The library's public scalar functions, chosen by dtype (narrow dtypes only): decode gives the fp32
 * bit pattern, encode the narrow pattern. */
uint32_t test_scalar_decode(amp_dtype dtype, uint32_t bits);
uint32_t test_scalar_encode(amp_dtype dtype, float x, bool saturate);

/* amp_convert_sat when `saturate`, else amp_convert; and that function's name, for messages. */
int test_convert(bool saturate, void *dst, amp_dtype dst_dtype, const void *src, amp_dtype src_dtype, size_t n);
const char *test_convert_name(bool saturate);

/* The ISA loop: test_isa_begin(isa) makes `isa` active and returns true, or notes that this CPU
 * cannot run it and returns false. test_isa_end() restores the path that was active before the
 * first test_isa_begin of the loop (the best one, unless AMP_ISA chose another). Usage:
 *     for (int isa = 0; isa < AMP_ISA_COUNT; isa++) { if (!test_isa_begin(isa)) continue; ... }
 *     test_isa_end(); */
bool test_isa_begin(int isa);
void test_isa_end(void);
/* Fills `out` with the supported paths; returns how many (at least 1: ref). */
int test_supported_isas(amp_isa out[AMP_ISA_COUNT]);

/* Writes n bytes to path, gzip-compressed when gz (zlib); false on any failure. */
bool test_write_file(const char *path, const void *data, size_t n, bool gz);
/* A text file for the text models: n sentences "the quick brown fox jumps over the lazy dog I times. "
 * for I = 0 to n-1 (tests/cli/lib.sh's fox_text). false on any failure. */
bool test_write_fox_text(const char *path, int n);
/* DIR/PREFIX-images-idx3-ubyte and DIR/PREFIX-labels-idx1-ubyte (MNIST's IDX layout, uncompressed):
 * n images of side x side bytes, image i labelled label(i, user) with pixel p = pixel(i, p, user).
 * false on any failure (the files may then be partial). */
bool test_write_idx_images(const char *dir, const char *prefix, int n, int side, int (*label)(int i, void *user),
                           int (*pixel)(int i, int p, void *user), void *user);
/* Removes a directory and the plain files in it (the tests make no deeper trees inside one). */
void test_remove_tree(const char *dir);

/* Threads for the sweeps: sysconf(_SC_NPROCESSORS_ONLN), at least 1. */
int test_thread_count(void);

/* Every fp32 parameter of ctx filled with multiples of 1/8 in [-1/2, 1/2]: exact in bf16 and fp16, and
 * many sums exactly 0 (the fused-op tests compare their bits against the unfused ops'). */
void test_fill_params_eighths(amp_ctx *ctx, test_rng *rng);
/* A backward gradient hook that does nothing: its presence alone sends gradients the hooked way. */
void test_noop_grad_hook(amp_ctx *ctx, const amp_tensor *out, const amp_tensor *grad, void *user);

/* The whole file at path, malloc'ed (one spare byte at the end), its length in *size; NULL when it
 * cannot be read or is empty. */
unsigned char *test_read_file(const char *path, long *size);
/* Whether the two files can be read, are not empty, and hold the same bytes. */
bool test_same_file(const char *a, const char *b);

#endif /* AMP_TESTS_TEST_UTIL_H */
