/* The bf16 GEMM kernel on AMX tiles (AMX-TILE, AMX-BF16), gemm_kernels.h's bf16_tiles.
 *
 * A 32 x 32 tile of C is held in four tile registers (16 rows x 16 fp32 each); per 32 values of k the
 * kernel loads two A tiles (16 rows x 32 bf16) and two B tiles (16 pairs x 16 columns) and issues
 * four TDPBF16PS, each 16 x 16 x 32 multiply-adds: oneDNN's 2 x 2 blocking, which keeps the tile unit
 * busy with four independent accumulators against four tile loads. The instruction forms each
 * product exactly, adds in fp32, and flushes subnormal inputs and outputs (Intel SDM: "DAZ, FTZ"),
 * like VDPBF16PS; amp/gemm.h documents the method.
 *
 * Panels (gemm_kernels.h, AMP_GEMM_PACKED_BF16_TILES): k is padded with zeros to a multiple of 32; B
 * is the pairs layout 32 columns wide (a B tile is 16 of its rows, 128 bytes apart), A is k-major in
 * blocks of 32 (an A tile is 16 runs of 64 bytes).
 *
 * The tile registers are configured once per thread (LDTILECFG costs about 300 cycles, a fifth of a
 * 32 x 32 x 512 tile at the unit's peak) and left so (amp/gemm.h). C goes between memory and the
 * tiles either directly (a full tile) or through a buffer (an edge tile), with the same arithmetic
 * on the same values, so an element's bits do not depend on its position in the tile
 * (ukernel_tiles). */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "../gemm_kernels.h"
#include "tile_avx512.h"

enum { MR = 32, NR = 32, KB = 32 /* k per tile step */ };
_Static_assert(MR <= AMP_GEMM_MAX_TILE && NR <= AMP_GEMM_MAX_TILE, "tile wider than AMP_GEMM_MAX_TILE");

/* LDTILECFG's 64-byte operand, palette 1 */
typedef struct tile_config {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;
_Static_assert(sizeof(tile_config) == 64, "LDTILECFG reads 64 bytes");

/* Every tile 16 rows x 64 bytes: C 0-3 (fp32), A 4-5 and B 6-7 (bf16). */
static void configure_tiles(void) {
    static _Thread_local bool configured;
    if (configured) return;
    tile_config cfg = {.palette = 1};
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
    configured = true;
}

/* The k loop on rows 0-15 (and 16-31 unless `half`) of the panels, added to the 32 x 32 fp32 tile at
 * acc (row stride ld floats) when `load`, else to zeros; the sums are stored back to acc. */
static inline __attribute__((always_inline)) void compute(int64_t kc, const uint16_t *a, const uint16_t *b,
                                                          float *acc, int64_t ld, bool load, const bool half) {
    if (load) {
        _tile_loadd(0, acc, ld * 4);
        _tile_loadd(1, acc + 16, ld * 4);
        if (!half) {
            _tile_loadd(2, acc + 16 * ld, ld * 4);
            _tile_loadd(3, acc + 16 * ld + 16, ld * 4);
        }
    } else {
        _tile_zero(0);
        _tile_zero(1);
        if (!half) {
            _tile_zero(2);
            _tile_zero(3);
        }
    }
    for (int64_t q = 0; q < (kc + KB - 1) / KB; q++, a += KB * MR, b += KB * NR) {
        _tile_loadd(6, b, NR * 4); /* pairs 0-15 of this block, columns 0-15 */
        _tile_loadd(7, b + 32, NR * 4);
        _tile_loadd(4, a, KB * 2);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (!half) {
            _tile_loadd(5, a + 16 * KB, KB * 2);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, acc, ld * 4);
    _tile_stored(1, acc + 16, ld * 4);
    if (!half) {
        _tile_stored(2, acc + 16 * ld, ld * 4);
        _tile_stored(3, acc + 16 * ld + 16, ld * 4);
    }
}

/* C = alpha acc + beta C on rows below m and columns below n, as gemm_avx512.c's store_tile (beta == 0
 * never reads C). */
static void store(const float acc[MR][NR], float *c, int64_t ldc, int m, int n, float alpha, float beta) {
    const __mmask16 k0 = mask16(n), k1 = mask16(n - 16);
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        const __m512 a0 = _mm512_load_ps(acc[i]), a1 = _mm512_load_ps(acc[i] + 16);
        if (beta == 0.0f) {
            _mm512_mask_storeu_ps(ci, k0, _mm512_mul_ps(va, a0));
            _mm512_mask_storeu_ps(ci + 16, k1, _mm512_mul_ps(va, a1));
        } else {
            const __m512 c0 = _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(k0, ci));
            const __m512 c1 = _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(k1, ci + 16));
            _mm512_mask_storeu_ps(ci, k0, _mm512_fmadd_ps(va, a0, c0));
            _mm512_mask_storeu_ps(ci + 16, k1, _mm512_fmadd_ps(va, a1, c1));
        }
    }
}

/* A partial tile of C (rows m, columns n) into the whole tile buffer, zeros around it */
static void load_corner(float acc[MR][NR], const float *c, int64_t ldc, int m, int n) {
    const __mmask16 k0 = mask16(n), k1 = mask16(n - 16);
    for (int i = 0; i < MR; i++) {
        _mm512_store_ps(acc[i], i < m ? _mm512_maskz_loadu_ps(k0, c + i * ldc) : _mm512_setzero_ps());
        _mm512_store_ps(acc[i] + 16, i < m ? _mm512_maskz_loadu_ps(k1, c + i * ldc + 16) : _mm512_setzero_ps());
    }
}

/* ... and back: only its m x n corner */
static void store_corner(float *c, int64_t ldc, const float acc[MR][NR], int m, int n) {
    const __mmask16 k0 = mask16(n), k1 = mask16(n - 16);
    for (int i = 0; i < m; i++) {
        _mm512_mask_storeu_ps(c + i * ldc, k0, _mm512_load_ps(acc[i]));
        _mm512_mask_storeu_ps(c + i * ldc + 16, k1, _mm512_load_ps(acc[i] + 16));
    }
}

/* Two arithmetics, chosen by alpha and beta alone (never by the tile's position):
 *   alpha 1, beta 0 or 1 (every k block of the GEMMs training runs): the tiles start from zero or
 *       from C and TDPBF16PS adds the products into them; C is loaded and stored by the tile unit
 *       (a partial tile through a buffer, with the same values);
 *   otherwise: the products' sums from zero, then C = alpha sum + beta C (store). */
static void ukernel_tiles(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n, float alpha,
                          float beta) {
    _Alignas(64) float acc[MR][NR];
    configure_tiles();
    if (alpha == 1.0f && (beta == 0.0f || beta == 1.0f)) {
        const bool full = m == MR && n == NR, load = beta == 1.0f;
        float *t = full ? c : &acc[0][0];
        const int64_t ld = full ? ldc : NR;
        if (!full && load) load_corner(acc, c, ldc, m, n);
        if (m <= 16) compute(kc, a, b, t, ld, load, true); /* a partial panel's lower half is zeros */
        else compute(kc, a, b, t, ld, load, false);
        if (!full) store_corner(c, ldc, (const float (*)[NR])acc, m, n);
        return;
    }
    if (m <= 16) compute(kc, a, b, &acc[0][0], NR, false, true);
    else compute(kc, a, b, &acc[0][0], NR, false, false);
    store((const float (*)[NR])acc, c, ldc, m, n, alpha, beta);
}

/* ---- packing ---- */

static inline __mmask32 mask32(int64_t n) {
    return n >= 32 ? 0xFFFFFFFFu : n <= 0 ? 0u : (__mmask32)((1u << n) - 1u);
}

/* A panels (BF16_TILES): rows [0, rows) x k [0, kc) of M, M[i, p] = src[trans ? p * ld + i : i * ld + p],
 * in panels of r rows (a multiple of 16), k-major in blocks of 32, zeros past rows and kc. */
static void pack_a_tiles(void *dst_, const void *src_, int64_t ld, bool trans, int64_t rows, int64_t kc, int r) {
    uint16_t *dst = dst_;
    const uint16_t *src = src_;
    const int64_t blocks = (kc + KB - 1) / KB;
    /* word j of a pair vector: the low half from row p (element j), the high half from row p + 1 */
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                                22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int64_t i0 = 0; i0 < rows; i0 += r, dst += blocks * KB * r) {
        const int64_t ri = rows - i0 < r ? rows - i0 : r;
        if (!trans) { /* each row's 32 values of a block are consecutive in the source */
            for (int64_t i = 0; i < r; i++) {
                for (int64_t q = 0; q < blocks; q++) {
                    __m512i v = _mm512_setzero_si512();
                    if (i < ri) v = _mm512_maskz_loadu_epi16(mask32(kc - q * KB), src + (i0 + i) * ld + q * KB);
                    _mm512_storeu_si512(dst + (q * r + i) * KB, v);
                }
            }
            continue;
        }
        /* source rows p are k: 16 rows of M at a time, a block's 16 pairs as 16 vectors of words
         * (pair w of rows i..i+15), then transposed to 16 rows of 16 pairs */
        for (int64_t q = 0; q < blocks; q++) {
            for (int64_t c = 0; c < r; c += 16) {
                const __mmask16 km = mask16(ri - c);
                __m512 v[16];
                for (int w = 0; w < 16; w++) {
                    const int64_t p = q * KB + 2 * w;
                    __m256i lo = _mm256_setzero_si256(), hi = lo;
                    if (p < kc && c < ri) lo = _mm256_maskz_loadu_epi16(km, src + p * ld + i0 + c);
                    if (p + 1 < kc && c < ri) hi = _mm256_maskz_loadu_epi16(km, src + (p + 1) * ld + i0 + c);
                    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                    v[w] = _mm512_castsi512_ps(_mm512_permutexvar_epi16(interleave, both));
                }
                transpose16(v);
                for (int i = 0; i < 16; i++) _mm512_storeu_ps((float *)(void *)(dst + (q * r + c + i) * KB), v[i]);
            }
        }
    }
}

/* B panels: the AVX-512 pairs pack, each panel padded to whole blocks of 32 k */
static void pack_b_tiles(void *dst, const void *src, int64_t ld, bool trans, int64_t rows, int64_t kc, int r) {
    amp_gemm_avx512_pack_pairs_padded(dst, src, ld, trans, rows, kc, r, (kc + KB - 1) / KB * (KB / 2));
}

void amp_gemm_kernels_amx(amp_gemm_kernels *k) {
    k->bf16_tiles = (amp_gemm_kernel){.name = "amx bf16 32x32",
                                      .ukernel = ukernel_tiles,
                                      .pack = pack_b_tiles,
                                      .pack_a = pack_a_tiles,
                                      .packed = AMP_GEMM_PACKED_BF16_TILES,
                                      .mr = MR,
                                      .nr = NR,
                                      .k_unit = KB,
                                      .packed_size = 2};
}
