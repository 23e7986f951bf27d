/* Shared test helpers (see test_util.h). */
#include "test_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#include "fixture_reader.h"
#include "harness.h"

uint64_t test_rng_next(test_rng *rng) {
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

uint32_t test_rng_below(test_rng *rng, uint32_t bound) { return (uint32_t)(test_rng_next(rng) % bound); }

uint32_t test_elem_get(amp_dtype dtype, const void *buf, size_t i) {
    switch (amp_dtype_size(dtype)) {
    case 4: return ((const uint32_t *)buf)[i];
    case 2: return ((const uint16_t *)buf)[i];
    default: return ((const uint8_t *)buf)[i];
    }
}

void test_elem_set(amp_dtype dtype, void *buf, size_t i, uint32_t bits) {
    switch (amp_dtype_size(dtype)) {
    case 4: ((uint32_t *)buf)[i] = bits; break;
    case 2: ((uint16_t *)buf)[i] = (uint16_t)bits; break;
    default: ((uint8_t *)buf)[i] = (uint8_t)bits; break;
    }
}

uint32_t test_scalar_decode(amp_dtype dtype, uint32_t bits) {
    switch (dtype) {
    case AMP_F16: return f32_bits(amp_fp16_to_fp32((uint16_t)bits));
    case AMP_BF16: return f32_bits(amp_bf16_to_fp32((uint16_t)bits));
    case AMP_F8E4M3: return f32_bits(amp_fp8e4m3_to_fp32((uint8_t)bits));
    case AMP_F8E5M2: return f32_bits(amp_fp8e5m2_to_fp32((uint8_t)bits));
    default: return 0xDEADBEEFu;
    }
}

uint32_t test_scalar_encode(amp_dtype dtype, float x, bool saturate) {
    switch (dtype) {
    case AMP_F16: return saturate ? amp_fp16_from_fp32_sat(x) : amp_fp16_from_fp32(x);
    case AMP_BF16: return saturate ? amp_bf16_from_fp32_sat(x) : amp_bf16_from_fp32(x);
    case AMP_F8E4M3: return saturate ? amp_fp8e4m3_from_fp32_sat(x) : amp_fp8e4m3_from_fp32(x);
    case AMP_F8E5M2: return saturate ? amp_fp8e5m2_from_fp32_sat(x) : amp_fp8e5m2_from_fp32(x);
    default: return 0xDEADBEEFu;
    }
}

int test_convert(bool saturate, void *dst, amp_dtype dst_dtype, const void *src, amp_dtype src_dtype, size_t n) {
    if (saturate) return amp_convert_sat(dst, dst_dtype, src, src_dtype, n);
    return amp_convert(dst, dst_dtype, src, src_dtype, n);
}

const char *test_convert_name(bool saturate) { return saturate ? "amp_convert_sat" : "amp_convert"; }

/* The path to restore, saved by the first test_isa_begin after a test_isa_end. */
static int saved_isa = -1;

bool test_isa_begin(int isa) {
    if (saved_isa < 0) saved_isa = (int)amp_isa_active();
    if (!amp_isa_supported((amp_isa)isa)) {
        /* Said once per test, however many loops over the ISAs the test runs. Holds the test's index
         * plus one, so that 0 means never. */
        static size_t noted_in_test[AMP_ISA_COUNT];
        if ((unsigned)isa < AMP_ISA_COUNT && noted_in_test[isa] != harness_current_test() + 1) {
            noted_in_test[isa] = harness_current_test() + 1;
            harness_note("isa %s: not supported by this CPU, skipped", amp_isa_name((amp_isa)isa));
        }
        return false;
    }
    const int status = amp_isa_set((amp_isa)isa);
    CHECK_MSG(status == AMP_OK, "amp_isa_set(%s) returned %d", amp_isa_name((amp_isa)isa), status);
    CHECK_MSG(amp_isa_active() == (amp_isa)isa, "amp_isa_active() is %s after amp_isa_set(%s)",
              amp_isa_name(amp_isa_active()), amp_isa_name((amp_isa)isa));
    return status == AMP_OK;
}

void test_isa_end(void) {
    if (saved_isa >= 0) amp_isa_set((amp_isa)saved_isa);
    saved_isa = -1;
}

int test_supported_isas(amp_isa out[AMP_ISA_COUNT]) {
    int count = 0;
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++)
        if (amp_isa_supported((amp_isa)isa)) out[count++] = (amp_isa)isa;
    return count;
}

int test_thread_count(void) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > 256 ? 256 : (int)n);
}

bool test_write_file(const char *path, const void *data, size_t n, bool gz) {
    if (gz) {
        gzFile g = gzopen(path, "wb");
        if (!g) return false;
        const bool ok = gzwrite(g, data, (unsigned)n) == (int)n;
        return gzclose(g) == Z_OK && ok;
    }
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    const bool ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

void test_remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[1024];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

void test_fill_params_eighths(amp_ctx *ctx, test_rng *rng) {
    for (size_t i = 0; i < amp_ctx_num_params(ctx); i++) {
        amp_tensor *p = amp_ctx_param(ctx, i);
        float *v = p->data;
        for (int64_t e = 0; e < amp_tensor_numel(p); e++) v[e] = (float)((int)test_rng_below(rng, 9) - 4) / 8.0f;
    }
}

void test_noop_grad_hook(amp_ctx *ctx, const amp_tensor *out, const amp_tensor *grad, void *user) {
    (void)ctx, (void)out, (void)grad, (void)user;
}

bool test_fixture_load(const char *file, fixture *fx) {
    const char *env = getenv("AMP_FIXTURE_DIR");
    char path[1024], err[FIXTURE_ERR_SIZE];
    snprintf(path, sizeof path, "%s/%s", env && *env ? env : "tests/fixtures", file);
    const int st = fixture_load(path, fx, err, sizeof err);
    return CHECK_MSG(st == AMP_OK, "%s: %s (run from the repository root, or set AMP_FIXTURE_DIR)", path, err);
}

unsigned char *test_read_file(const char *path, long *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (*size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)*size + 1)) != NULL && fread(buf, 1, (size_t)*size, f) != (size_t)*size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

bool test_same_file(const char *a, const char *b) {
    long na = 0, nb = 0;
    unsigned char *x = test_read_file(a, &na), *y = test_read_file(b, &nb);
    const bool same = x && y && na == nb && memcmp(x, y, (size_t)na) == 0;
    free(x);
    free(y);
    return same;
}

static void put_be32(FILE *f, uint32_t v) {
    const unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
                                (unsigned char)v};
    fwrite(b, 1, 4, f);
}

bool test_write_idx_images(const char *dir, const char *prefix, int n, int side, int (*label)(int i, void *user),
                           int (*pixel)(int i, int p, void *user), void *user) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, prefix);
    FILE *img = fopen(path, "wb");
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, prefix);
    FILE *lab = fopen(path, "wb");
    bool ok = img && lab;
    if (ok) {
        put_be32(img, 0x803), put_be32(img, (uint32_t)n), put_be32(img, (uint32_t)side), put_be32(img, (uint32_t)side);
        put_be32(lab, 0x801), put_be32(lab, (uint32_t)n);
        for (int i = 0; i < n; i++) {
            fputc(label(i, user), lab);
            for (int p = 0; p < side * side; p++) fputc(pixel(i, p, user), img);
        }
        ok = !ferror(img) && !ferror(lab);
    }
    if (img && fclose(img) != 0) ok = false;
    if (lab && fclose(lab) != 0) ok = false;
    return ok;
}

bool test_write_fox_text(const char *path, int n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    for (int i = 0; i < n; i++) fprintf(f, "the quick brown fox jumps over the lazy dog %d times. ", i);
    const bool ok = !ferror(f);
    return fclose(f) == 0 && ok;
}
