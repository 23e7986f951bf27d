/* The convert table's encode_stream kernels (kernels/convert_kernels.h: encode[dt][0]'s bits, stored
 * past the caches), every path and every narrow dtype, against the independent format reference
 * (reference_formats.h: ref_encode, overflow to inf): bit for bit. Values: random fp32 bit patterns
 * (NaNs with payloads, subnormals, infinities, signed zeros) and values near each format's largest
 * finite and smallest subnormal. Every length to 80 and a few across vector boundaries, with dst at
 * every 2-byte offset of a 64-byte line (so every length of the unaligned head the streaming loops
 * store first) and src at several; guard bytes around dst must stay untouched. The seed is printed. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/convert_kernels.h"
#include "harness.h"
#include "reference_formats.h"
#include "tests.h"

enum { MAX_N = 1104, LINE = 64, GUARD = 64 }; /* dst offsets: LINE bytes; guards: GUARD bytes each side */

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static float value(uint64_t *s, amp_dtype dt) {
    const uint64_t r = next(s);
    const uint32_t u = (uint32_t)(r >> 32);
    float f;
    memcpy(&f, &u, sizeof f);
    const ref_format *fm = ref_format_get(dt);
    switch (r % 4) {
    case 0: return f * (float)ldexp(1.0, -(int)(r >> 8 & 0x3F)); /* random bits, smaller */
    case 1: return (float)(fm->max_finite * (1.0 + ldexp((double)(r >> 40 & 0xFF) - 128.0, -10))); /* near max */
    default: return f;
    }
}

void test_convert_stream(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed 0x%llx", (unsigned long long)seed);
    static const size_t extra_n[] = {127, 128, 129, 255, 256, 511, 512, 513, 1024, 1031};
    const size_t buf_bytes = GUARD + LINE + MAX_N * 4 + GUARD; /* a multiple of 64 (aligned_alloc) */
    float *src = malloc((MAX_N + 8) * sizeof *src);
    unsigned char *dst = aligned_alloc(64, buf_bytes);
    if (!CHECK(src && dst)) goto done;
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!amp_isa_supported((amp_isa)isa)) continue;
        const amp_convert_kernels *k = amp_convert_kernels_for((amp_isa)isa);
        for (int d = 0; d < REF_NARROW_COUNT; d++) {
            const amp_dtype dt = ref_narrow_dtypes[d];
            const size_t es = amp_dtype_size(dt);
            if (!CHECK_MSG(k->encode_stream[dt] != NULL && k->stream_fence != NULL,
                           "%s: no encode_stream or stream_fence for %s", amp_isa_name((amp_isa)isa), amp_dtype_name(dt)))
                continue;
            uint64_t s = (seed ^ ((uint64_t)isa << 32 | (uint64_t)d)) | 1;
            size_t bad = 0, cases = 0;
            for (size_t c = 0; c < 81 + sizeof extra_n / sizeof *extra_n; c++) {
                const size_t n = c < 81 ? c : extra_n[c - 81];
                for (size_t off = 0; off < LINE; off += es, cases++) {
                    const size_t soff = off / es % 8; /* src misaligned differently */
                    for (size_t i = 0; i < n; i++) src[soff + i] = value(&s, dt);
                    memset(dst, 0xA5, buf_bytes);
                    unsigned char *out = dst + GUARD + off;
                    k->encode_stream[dt](out, src + soff, n);
                    k->stream_fence(); /* as a caller does before another thread reads out */
                    size_t wrong = 0, first = n;
                    for (size_t i = 0; i < n; i++) {
                        uint32_t got = 0;
                        memcpy(&got, out + i * es, es); /* little-endian: the low es bytes */
                        if (got != ref_encode(dt, src[soff + i], false) && first == n) first = i;
                        wrong += got != ref_encode(dt, src[soff + i], false);
                    }
                    for (size_t b = 0; b < buf_bytes; b++)
                        if (b < GUARD + off || b >= GUARD + off + n * es) wrong += dst[b] != 0xA5;
                    if (wrong && bad++ < 3)
                        CHECK_MSG(false, "encode_stream[%s] %s n=%zu off=%zu: %zu wrong%s (first %a)",
                                  amp_isa_name((amp_isa)isa), amp_dtype_name(dt), n, off, wrong,
                                  first < n ? "" : " (guards)", first < n ? (double)src[soff + first] : 0.0);
                }
            }
            CHECK_MSG(bad == 0, "encode_stream[%s] %s: %zu of %zu cases wrong", amp_isa_name((amp_isa)isa),
                      amp_dtype_name(dt), bad, cases);
        }
    }
done:
    free(src), free(dst);
}
