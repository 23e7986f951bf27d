/* A deterministic shuffle: Fisher-Yates whose random numbers are a hash of (seed, epoch, draw number)
 * (a counter-based generator), so any epoch's order can be recomputed directly on resume. */
#include "data_internal.h"

/* splitmix64's finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mix. */
static uint64_t shuffle_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define SHUFFLE_GOLDEN 0x9E3779B97F4A7C15ull /* 2^64 / phi, splitmix64's increment */

void amp_shuffle_indices(int64_t *idx, int64_t n, uint64_t seed, uint64_t epoch) {
    if (!idx || n <= 0) return;
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    /* The key separates (seed, epoch) streams; draw c of the stream is mix(key + (c + 1) * golden). */
    const uint64_t key = shuffle_mix(shuffle_mix(seed ^ 0x6461746173687566ull /* "datashuf" */) + epoch * SHUFFLE_GOLDEN);
    uint64_t counter = 0;
    for (int64_t i = n - 1; i > 0; i--) {
        /* j uniform in [0, i]: reject the top (2^64 mod bound) values, then reduce. */
        const uint64_t bound = (uint64_t)i + 1;
        const uint64_t threshold = (0 - bound) % bound;
        uint64_t r;
        do r = shuffle_mix(key + (++counter) * SHUFFLE_GOLDEN);
        while (r < threshold);
        const int64_t j = (int64_t)(r % bound);
        const int64_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}
