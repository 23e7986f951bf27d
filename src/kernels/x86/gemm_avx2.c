/* AVX2 GEMM kernels (AVX2 + FMA + F16C).
 *
 * One micro-kernel for every input dtype: f16 and bf16 are decoded exactly to fp32 while packing
 * (F16C for f16, a shift for bf16), and the 6 x 16 fp32 tile (BLIS's Haswell sgemm shape) lives in
 * 12 ymm accumulators: 6 rows x 2 vectors of 8 columns, plus 2 B vectors and 1 broadcast of A, 15
 * of the 16 ymm registers. 12 independent FMAs per k cover the 2-per-cycle, 4-cycle-latency FMA
 * pipes of current x86 cores (8 in flight needed). The C update has the same arithmetic for full and
 * edge tiles (plain moves for full ones, masked at edges), so an element's bits do not depend on its
 * position in the tile; so do the C^T store and the strided kernels (A or B read in place), which
 * give ukernel_f32's bits on the same values. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "../gemm_kernels.h"
#include "tile_avx2.h"

static inline float gemm_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); } /* F16C: exact, keeps subnormals */

#include "../gemm_pack.h"

enum { MR = AMP_TILE_AVX2_MR, NR = AMP_TILE_AVX2_NR };
_Static_assert(MR <= AMP_GEMM_MAX_TILE && NR <= AMP_GEMM_MAX_TILE, "tile wider than AMP_GEMM_MAX_TILE");
_Static_assert(MR == 6, "pack_cols's 16-bit MR panels load 6 elements (load6_16)");

#define GEMM_UNROLL _Pragma("GCC unroll 6")

/* The tile's products over kc, A's element (i, p) at a[i * a_row + p * a_step] and B's (p, j) at
 * b[p * ldb + j]: packed panels (compute_f32), or operands read in place (gemm_kernels.h's ukernel_ab
 * and ukernel_rb), with the same FMAs in the same order, so the same bits. */
static inline __attribute__((always_inline)) void compute_strided(int64_t kc, const float *a, int64_t a_row,
                                                                   int64_t a_step, const float *b, int64_t ldb,
                                                                   __m256 acc[MR][2]) {
    GEMM_UNROLL
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t p = 0; p < kc; p++, a += a_step, b += ldb) {
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        GEMM_UNROLL
        for (int i = 0; i < MR; i++) {
            const __m256 ai = _mm256_broadcast_ss(a + i * a_row);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
}

static inline __attribute__((always_inline)) void compute_f32(int64_t kc, const float *a /* [kc][MR] */,
                                                               const float *b /* [kc][NR] */, __m256 acc[MR][2]) {
    compute_strided(kc, a, 1, MR, b, NR, acc);
}

/* C = alpha * acc + beta * C on the tile's m x n part (beta == 0: C unread). Full rows with plain
 * loads and stores, edge tiles masked: some cores microcode the masked moves, which costs where k is
 * short enough that C's stores count. */
static inline __attribute__((always_inline)) void store_tile(__m256 acc[MR][2], float *c, int64_t ldc, int m, int n,
                                                              float alpha, float beta) {
    /* maskload/maskstore never touch masked-off lanes, so edge tiles stay inside C */
    const __m256i k0 = lane_mask(n), k1 = lane_mask(n - 8);
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    const bool full = n == NR; /* a full tile's rows: plain loads and stores (the same arithmetic) */
    GEMM_UNROLL
    for (int i = 0; i < MR; i++) {
        if (i >= m) break;
        float *ci = c + i * ldc;
        __m256 r0 = _mm256_mul_ps(va, acc[i][0]), r1 = _mm256_mul_ps(va, acc[i][1]);
        if (beta != 0.0f) {
            const __m256 c0 = full ? _mm256_loadu_ps(ci) : _mm256_maskload_ps(ci, k0);
            const __m256 c1 = full ? _mm256_loadu_ps(ci + 8) : _mm256_maskload_ps(ci + 8, k1);
            r0 = _mm256_fmadd_ps(va, acc[i][0], _mm256_mul_ps(vb, c0));
            r1 = _mm256_fmadd_ps(va, acc[i][1], _mm256_mul_ps(vb, c1));
        }
        if (full) {
            _mm256_storeu_ps(ci, r0);
            _mm256_storeu_ps(ci + 8, r1);
        } else {
            _mm256_maskstore_ps(ci, k0, r0);
            _mm256_maskstore_ps(ci + 8, k1, r1);
        }
    }
}

static void ukernel_f32(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n, float alpha,
                        float beta) {
    __m256 acc[MR][2];
    compute_f32(kc, a, b, acc);
    store_tile(acc, c, ldc, m, n, alpha, beta);
}

/* op(A) = A^T in place (or a packed panel, lda = MR): a k step's MR values are consecutive */
static void ukernel_ab(int64_t kc, const float *a, int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, int m,
                       int n, float alpha, float beta) {
    __m256 acc[MR][2];
    compute_strided(kc, a, 1, lda, b, ldb, acc);
    store_tile(acc, c, ldc, m, n, alpha, beta);
}

/* op(A) = A's rows in place: the MR values of a k step come from MR rows lda apart */
static void ukernel_rb(int64_t kc, const float *a, int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, int m,
                       int n, float alpha, float beta) {
    __m256 acc[MR][2];
    compute_strided(kc, a, lda, 1, b, ldb, acc);
    store_tile(acc, c, ldc, m, n, alpha, beta);
}

/* Tile element (i, j) to c[j * ldc + i] (tile_avx2.h's store_tile_transposed: ukernel_f32's
 * arithmetic per element, the same bits). The accumulators stay in registers through the k loop (a
 * scalar store loop over a buffer made gcc keep them on the stack inside the k loop, several times
 * slower). */
static void ukernel_f32_ct(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n, float alpha,
                           float beta) {
    __m256 acc[MR][2];
    compute_f32(kc, a, b, acc);
    store_tile_transposed(acc, c, ldc, m, n, alpha, beta);
}

/* ---- packing (gemm_kernels.h's AMP_GEMM_PACKED_F32 panels), full panels of the kernel's two panel
 * heights (MR, NR) vectorized, the rest by gemm_pack.h's loops. Each element is decoded exactly, as
 * there, so the panels hold the same values. The portable loops store one scalar per element
 * (stride MR or NR), a large share of a convolution's step. */

/* Eight f16 or bf16 values in h decoded exactly to fp32 (bf16 is the top half of an fp32). */
static inline __attribute__((always_inline)) __m256 decode16x8(amp_dtype dt, __m128i h) {
    if (dt == AMP_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 8 consecutive elements of a dt buffer from idx, decoded to fp32 */
static inline __attribute__((always_inline)) __m256 load8(amp_dtype dt, const void *src, int64_t idx) {
    if (dt == AMP_F32) return _mm256_loadu_ps((const float *)src + idx);
    return decode16x8(dt, _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)src + idx)));
}

/* 6 consecutive 16-bit elements from idx, decoded to fp32 in lanes 0-5 (6-7 zero): a 64-bit and a
 * 32-bit load, so nothing past the sixth element is read (the last panel's last k step ends at the
 * buffer's end). */
static inline __attribute__((always_inline)) __m256 load6_16(amp_dtype dt, const void *src, int64_t idx) {
    const uint16_t *s = (const uint16_t *)src + idx;
    int32_t hi;
    memcpy(&hi, s + 4, sizeof hi);
    return decode16x8(dt, _mm_insert_epi32(_mm_loadl_epi64((const __m128i *)(const void *)s), hi, 2));
}

/* M[i, p] = src[i * ld + p] (rows of M stored as rows): one panel of R = NR or MR full rows, k in
 * blocks of 8 read along the rows and turned in registers so each k step's R values are stored at
 * once; the k tail by the portable loop's element order. A B panel (R = NR) prefetches the next
 * panel's rows (next_rows of them) into L2 at the k it is at, a line per row as it reaches one: there
 * the source is a weight streamed from DRAM (X W^T), whose NR short rows are too many streams for
 * the hardware prefetcher: a thread's 1152 x 512 of a GPT-2 weight in bf16 packs in 72 against
 * 84 us (an fp32 one as fast either way; from cache, the same time). An A panel's rows are
 * activations just written, in cache. */
static inline __attribute__((always_inline)) void pack_rows_panel(float *dst, const void *src, amp_dtype dt, int64_t ld,
                                                                   int64_t i0, int64_t next_rows, int64_t kc, int R) {
    const size_t es = dt == AMP_F32 ? 4 : 2;
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
        if (R == NR && (size_t)p * es % 64 == 0)
            for (int i = 0; i < R && i < next_rows; i++)
                _mm_prefetch((const char *)src + ((size_t)(i0 + R + i) * (size_t)ld + (size_t)p) * es, _MM_HINT_T1);
        UNROLL_8
        for (int h = 0; h < (R + 7) / 8; h++) { /* rows 8h .. 8h+7 of the panel */
            __m256 v[8];
            UNROLL_8
            for (int i = 0; i < 8; i++) v[i] = 8 * h + i < R ? load8(dt, src, (i0 + 8 * h + i) * ld + p) : _mm256_setzero_ps();
            transpose8(v);
            UNROLL_8
            for (int j = 0; j < 8; j++) {
                float *d = dst + (p + j) * R + 8 * h;
                if (R - 8 * h >= 8) {
                    _mm256_storeu_ps(d, v[j]);
                } else { /* R = 6 */
                    store6(d, v[j]);
                }
            }
        }
    }
    for (; p < kc; p++)
        for (int i = 0; i < R; i++) dst[p * R + i] = gemm_load(dt, src, (i0 + i) * ld + p);
}

/* A source row's bytes into L1 or L2 ahead of its use, a line at a time (pack_cols). */
enum { PACK_PREFETCH_ROWS = 8 };
static inline void prefetch_row_l1(const char *row, size_t bytes) {
    for (size_t b = 0; b < bytes; b += 64) _mm_prefetch(row + b, _MM_HINT_T0);
}
static inline void prefetch_row_l2(const char *row, size_t bytes) {
    for (size_t b = 0; b < bytes; b += 64) _mm_prefetch(row + b, _MM_HINT_T1);
}

/* M[i, p] = src[p * ld + i] (M stored transposed): a k step of a full panel is R consecutive source
 * elements. The portable loop's order: 4 source rows at a time across the panels, with the row
 * PACK_PREFETCH_ROWS ahead prefetched into L1 and the one 4x further into L2 (gemm_avx512.c's
 * scheme: the sources, a weight gradient's G^T and X^T, come from L3 or DRAM). */
static inline __attribute__((always_inline)) void pack_cols(float *dst, const void *src, amp_dtype dt, int64_t ld,
                                                             int64_t full, int64_t kc, int R) {
    const size_t es = dt == AMP_F32 ? 4 : 2, row_bytes = (size_t)full * es;
    for (int64_t p0 = 0; p0 < kc; p0 += 4) {
        const int64_t p1 = kc - p0 < 4 ? kc : p0 + 4;
        for (int64_t p = p0; p < p1; p++) { /* each row's lines once, before the panels take them */
            if (p + PACK_PREFETCH_ROWS < kc)
                prefetch_row_l1((const char *)src + (size_t)(p + PACK_PREFETCH_ROWS) * (size_t)ld * es, row_bytes);
            if (p + 4 * PACK_PREFETCH_ROWS < kc)
                prefetch_row_l2((const char *)src + (size_t)(p + 4 * PACK_PREFETCH_ROWS) * (size_t)ld * es, row_bytes);
        }
        for (int64_t i0 = 0; i0 < full; i0 += R)
            for (int64_t p = p0; p < p1; p++) {
                float *d = dst + i0 * kc + p * R;
                if (R == NR) {
                    _mm256_storeu_ps(d, load8(dt, src, p * ld + i0));
                    _mm256_storeu_ps(d + 8, load8(dt, src, p * ld + i0 + 8));
                } else if (dt == AMP_F32) {
                    memcpy(d, (const float *)src + p * ld + i0, sizeof(float) * (size_t)R);
                } else { /* R = MR (6): vectorized too, a scalar loop here is slow */
                    store6(d, load6_16(dt, src, p * ld + i0));
                }
            }
    }
}

static inline __attribute__((always_inline)) void pack_panels(float *dst, const void *src, amp_dtype dt, int64_t ld,
                                                               bool trans, int64_t rows, int64_t kc, int R) {
    /* full panels here, a partial last one (rows past M's zero) by the portable loop */
    const int64_t full = rows / R * R;
    if (trans) pack_cols(dst, src, dt, ld, full, kc, R);
    else
        for (int64_t i0 = 0; i0 < full; i0 += R) pack_rows_panel(dst + i0 * kc, src, dt, ld, i0, rows - i0 - R, kc, R);
    const int64_t skip = trans ? full : full * ld; /* elements to the partial panel's first */
    if (full < rows)
        gemm_pack_f32_generic(dst + full * kc, (const char *)src + (size_t)skip * (dt == AMP_F32 ? 4 : 2), dt, ld,
                              trans, rows - full, kc, R);
}

#define PACK_F32_FN(name, dtype)                                                                          \
    static void name(void *dst, const void *src, int64_t ld, bool trans, int64_t rows, int64_t kc, int r) { \
        if (r == MR)                                                                                      \
            pack_panels(dst, src, dtype, ld, trans, rows, kc, MR);                                        \
        else if (r == NR)                                                                                 \
            pack_panels(dst, src, dtype, ld, trans, rows, kc, NR);                                        \
        else                                                                                              \
            gemm_pack_f32_generic(dst, src, dtype, ld, trans, rows, kc, r);                               \
    }
PACK_F32_FN(pack_f32, AMP_F32)
PACK_F32_FN(pack_f16, AMP_F16)
PACK_F32_FN(pack_bf16, AMP_BF16)

void amp_gemm_kernels_avx2(amp_gemm_kernels *k) {
    static const amp_gemm_pack_fn packs[3] = {pack_f32, pack_f16, pack_bf16};
    static const char *const names[3] = {"avx2 f32 6x16", "avx2 f16->f32 6x16", "avx2 bf16->f32 6x16"};
    for (int dt = AMP_F32; dt <= AMP_BF16; dt++) {
        k->for_dtype[dt] = (amp_gemm_kernel){
            .name = names[dt],
            .ukernel = ukernel_f32,
            .ukernel_ct = ukernel_f32_ct,
            .ukernel_ab = dt == AMP_F32 ? ukernel_ab : NULL,
            .ukernel_rb = dt == AMP_F32 ? ukernel_rb : NULL,
            .pack = packs[dt],
            .packed = AMP_GEMM_PACKED_F32,
            .mr = MR,
            .nr = NR,
            .k_unit = 1,
            .packed_size = 4,
        };
    }
}
