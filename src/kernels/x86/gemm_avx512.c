/* AVX-512 GEMM kernels (F/BW/VL, plus AVX512-BF16 for the bf16 kernel).
 *
 * Both micro-kernels hold a 12 x 32 tile of C in 24 zmm accumulators (12 rows x 2 vectors of 16
 * columns), which leaves 8 of the 32 zmm registers for the two B vectors and the broadcasts of A.
 * Per step over k they issue 24 independent multiply-adds against 2 B loads and 12 broadcast loads:
 * many more independent chains than the FMA latency (a few cycles) needs, and few loads per flop.
 *   f32 (also f16 and bf16 inputs, decoded exactly while packing): VFMADD231PS, one k per step.
 *   bf16 with AVX512-BF16 (the "dot" kernel, used where amp_gemm_bf16_method picks it):
 *       VDPBF16PS, two k per step; each fp32 lane adds the two exact products a[2q]*b[2q] and
 *       a[2q+1]*b[2q+1] to its accumulator. The instruction flushes subnormal inputs and outputs to
 *       zero (Intel SDM: "DAZ and FTZ"), which amp/gemm.h documents.
 * Which bf16 kernel is faster depends on the core: some issue VDPBF16PS at twice the FMA's flops,
 * others at half, so amp_gemm_avx512_dot_speed measures it on the running core.
 * The C update is the same masked code for full and edge tiles, so an element's bits do not depend
 * on its position in the tile. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "amp/cpu.h"
#include "../gemm_kernels.h"

static inline float gemm_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); } /* F16C: exact, keeps subnormals */

#include "../gemm_pack.h"
#include "tile_avx512.h"

enum { MR = AMP_TILE_MR, NR = 32 };
_Static_assert(MR <= AMP_GEMM_MAX_TILE && NR <= AMP_GEMM_MAX_TILE, "tile wider than AMP_GEMM_MAX_TILE");
/* Panel prefetch distance in k steps: the f32 micro-kernel prefetches A and B this far ahead (2 KiB
 * of B), which keeps panels streamed from L2 and L3 (the lstm's recurrent products read their packed
 * weight, 1 MB for fp32, from L3 every step) ahead of the FMAs; a shorter distance comes too late,
 * and 8 to 32 do alike. The bf16 kernel gains nothing from it. */
#define PF_DIST 16

#define GEMM_UNROLL _Pragma("GCC unroll 12")

/* ---- register-level helpers ---- */


/* ---- micro-kernels ---- */

/* C tile update: rows below m, columns below n (masks); beta == 0 never reads C. */
static inline __attribute__((always_inline)) void store_tile(__m512 acc[MR][2], float *c, int64_t ldc, int m, int n,
                                                             float alpha, float beta, const int mr) {
    const __mmask16 k0 = mask16(n), k1 = mask16(n - 16);
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    if (beta == 0.0f) {
        GEMM_UNROLL
        for (int i = 0; i < mr; i++) {
            if (i >= m) break;
            _mm512_mask_storeu_ps(c + i * ldc, k0, _mm512_mul_ps(va, acc[i][0]));
            _mm512_mask_storeu_ps(c + i * ldc + 16, k1, _mm512_mul_ps(va, acc[i][1]));
        }
    } else {
        GEMM_UNROLL
        for (int i = 0; i < mr; i++) {
            if (i >= m) break;
            float *ci = c + i * ldc;
            const __m512 c0 = _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(k0, ci));
            const __m512 c1 = _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(k1, ci + 16));
            _mm512_mask_storeu_ps(ci, k0, _mm512_fmadd_ps(va, acc[i][0], c0));
            _mm512_mask_storeu_ps(ci + 16, k1, _mm512_fmadd_ps(va, acc[i][1], c1));
        }
    }
}


/* Starts loading the C tile (each row's 128 bytes may straddle three lines) while the k loop runs:
 * C is touched once per k block, usually from L3, and without this the update would stall. */
static inline __attribute__((always_inline)) void prefetch_tile(const float *c, int64_t ldc, int m, const int mr) {
    GEMM_UNROLL
    for (int i = 0; i < mr; i++) {
        if (i >= m) break;
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 31), _MM_HINT_T0);
    }
}

/* prefetch_tile for a tile of C^T: tile column j is c[j * ldc + i], i < m, one row of C (48 bytes at
 * most, within two lines) per column, 32 rows ldc apart, which the transposed stores would otherwise
 * wait for after the k loop (the lstm's recurrent products read C back, beta 1). */
static inline __attribute__((always_inline)) void prefetch_tile_transposed(const float *c, int64_t ldc, int m, int n) {
    UNROLL_ALL
    for (int j = 0; j < NR; j++) {
        if (j >= n) break;
        _mm_prefetch((const char *)(c + j * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + j * ldc + m - 1), _MM_HINT_T0);
    }
}

/* The f32 k loop on an A panel whose k steps are lda floats apart, element (i, p) at a[p * lda + i]
 * (lda = MR for a packed panel, a row of A^T's storage for one read in place), and a B panel whose k
 * steps are ldb floats apart, element (p, j) at b[p * ldb + j] (ldb = NR packed, B's row in place).
 * The same loads, broadcasts and multiply-adds in the same order whatever the strides. */
static inline __attribute__((always_inline)) void compute_f32_rows(int64_t kc, const float *a, int64_t lda,
                                                                    const float *b, int64_t ldb, __m512 acc[MR][2],
                                                                    const int mr) {
    GEMM_UNROLL
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kc; p++, a += lda, b += ldb) {
        _mm_prefetch((const char *)(b + PF_DIST * ldb), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + PF_DIST * ldb + 16), _MM_HINT_T0);
        _mm_prefetch((const char *)(a + PF_DIST * lda), _MM_HINT_T0);
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        GEMM_UNROLL
        for (int i = 0; i < mr; i++) {
            const __m512 ai = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
}

/* compute_f32_rows with A read by rows where it is stored, element (i, p) at a[i * lda + p]: the MR
 * broadcasts of one k step come from MR rows, the same values in the same order, so the same bits.
 * Each row uses a line per 16 k steps, so step p prefetches row p mod 16's line 64 elements ahead: one
 * line per row per 16 steps (rows 12-15 of that cycle are past the tile; a prefetch cannot fault). */
static inline __attribute__((always_inline)) void compute_f32_arows(int64_t kc, const float *a, int64_t lda,
                                                                     const float *b, int64_t ldb, __m512 acc[MR][2]) {
    GEMM_UNROLL
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kc; p++, a++, b += ldb) {
        _mm_prefetch((const char *)(a + (p & 15) * lda + 64), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + PF_DIST * ldb), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + PF_DIST * ldb + 16), _MM_HINT_T0);
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        GEMM_UNROLL
        for (int i = 0; i < MR; i++) {
            const __m512 ai = _mm512_set1_ps(a[i * lda]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
}

static inline __attribute__((always_inline)) void compute_f32(int64_t kc, const float *a /* [kc][MR] */,
                                                               const float *b /* [kc][NR] */, __m512 acc[MR][2]) {
    compute_f32_rows(kc, a, MR, b, NR, acc, MR);
}

/* The bf16 k loop on the first mr rows of an A panel packed lda rows wide ([kc/2][lda] pairs). */
static inline __attribute__((always_inline)) void compute_bf16(int64_t kc, const int32_t *a, int64_t lda,
                                                                const uint16_t *b /* [kc/2][NR][2] */,
                                                                __m512 acc[MR][2], const int mr) {
    GEMM_UNROLL
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t q = 0; q < (kc + 1) / 2; q++, a += lda, b += 2 * NR) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + NR);
        GEMM_UNROLL
        for (int i = 0; i < mr; i++) {
            const __m512bh ai = (__m512bh)_mm512_set1_epi32(a[i]); /* one 32-bit word = one bf16 pair */
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
        }
    }
}

/* ukernel_f32 with A by columns and B by rows, each packed or in place (gemm_kernels.h, ukernel_ab) */
static void ukernel_f32_ab(int64_t kc, const float *a, int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                           int m, int n, float alpha, float beta) {
    __m512 acc[MR][2];
    prefetch_tile(c, ldc, m, MR);
    if (ldb == NR) compute_f32_rows(kc, a, lda, b, NR, acc, MR); /* a packed B: its stride a constant */
    else compute_f32_rows(kc, a, lda, b, ldb, acc, MR);
    store_tile(acc, c, ldc, m, n, alpha, beta, MR);
}

/* ukernel_f32 with A by rows in place and B by rows (gemm_kernels.h, ukernel_rb) */
static void ukernel_f32_rb(int64_t kc, const float *a, int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                           int m, int n, float alpha, float beta) {
    __m512 acc[MR][2];
    prefetch_tile(c, ldc, m, MR);
    compute_f32_arows(kc, a, lda, b, ldb, acc);
    store_tile(acc, c, ldc, m, n, alpha, beta, MR);
}

/* A partial A panel (the last of a product whose rows are not a multiple of 12: 256 = 21 x 12 + 4 for
 * the mlp's batch, 1024 and 4096 likewise) is computed on its first 4 or 8 rows only, where the full
 * tile would spend 12 rows' multiply-adds on it: each element's sum is the same (its own accumulator,
 * the same products in the same order), so the same bits. The panel stays packed MR rows wide. Its
 * own function, not inlined: as a branch inside ukernel_f32, GCC 12 kept one B vector of the full
 * tile's loop on the stack (a load per multiply-add, which slowed every packed-A product). */
static __attribute__((noinline)) void ukernel_f32_part(int64_t kc, const void *a, const void *b, float *c, int64_t ldc,
                                                       int m, int n, float alpha, float beta) {
    __m512 acc[MR][2];
    prefetch_tile(c, ldc, m, 8);
    if (m <= 4) {
        compute_f32_rows(kc, a, MR, b, NR, acc, 4);
        store_tile(acc, c, ldc, m, n, alpha, beta, 4);
    } else {
        compute_f32_rows(kc, a, MR, b, NR, acc, 8);
        store_tile(acc, c, ldc, m, n, alpha, beta, 8);
    }
}

static void ukernel_f32(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n, float alpha,
                        float beta) {
    if (m <= 8) {
        ukernel_f32_part(kc, a, b, c, ldc, m, n, alpha, beta);
        return;
    }
    __m512 acc[MR][2];
    prefetch_tile(c, ldc, m, MR);
    compute_f32(kc, a, b, acc);
    store_tile(acc, c, ldc, m, n, alpha, beta, MR);
}

static void ukernel_f32_ct(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n, float alpha,
                           float beta) {
    __m512 acc[MR][2];
    prefetch_tile_transposed(c, ldc, m, n);
    compute_f32(kc, a, b, acc);
    store_tile_transposed(acc, c, ldc, m, n, alpha, beta);
}

/* ukernel_f32_part for the bf16 kernel (the same bits as the full tile's rows) */
static __attribute__((noinline)) void ukernel_bf16_part(int64_t kc, const void *a, const void *b, float *c,
                                                        int64_t ldc, int m, int n, float alpha, float beta) {
    __m512 acc[MR][2];
    prefetch_tile(c, ldc, m, 8);
    if (m <= 4) {
        compute_bf16(kc, a, MR, b, acc, 4);
        store_tile(acc, c, ldc, m, n, alpha, beta, 4);
    } else {
        compute_bf16(kc, a, MR, b, acc, 8);
        store_tile(acc, c, ldc, m, n, alpha, beta, 8);
    }
}

static void ukernel_bf16(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n, float alpha,
                         float beta) {
    if (m <= 8) {
        ukernel_bf16_part(kc, a, b, c, ldc, m, n, alpha, beta);
        return;
    }
    __m512 acc[MR][2];
    prefetch_tile(c, ldc, m, MR);
    compute_bf16(kc, a, MR, b, acc, MR);
    store_tile(acc, c, ldc, m, n, alpha, beta, MR);
}

static void ukernel_bf16_ct(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n,
                            float alpha, float beta) {
    __m512 acc[MR][2];
    prefetch_tile_transposed(c, ldc, m, n);
    compute_bf16(kc, a, MR, b, acc, MR);
    store_tile_transposed(acc, c, ldc, m, n, alpha, beta);
}

/* ukernel_bf16 on a tile of 8 rows (bf16_dot8): for products whose A has a multiple of 8 rows but not
 * of 12 (the lstm's 32 rows of h or dG_t against a packed weight), every tile full and C stored as it
 * is, where the 12-row tile either leaves a third of a tile empty or stores C^T through two register
 * transposes per tile. Per k pair 16 VDPBF16PS against 2
 * B loads and 8 broadcasts; each element's sum is ukernel_bf16's (the same pairs in the same order). */
static void ukernel_bf16_m8(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n, float alpha,
                            float beta) {
    __m512 acc[MR][2];
    prefetch_tile(c, ldc, m, 8);
    compute_bf16(kc, a, 8, b, acc, 8);
    store_tile(acc, c, ldc, m, n, alpha, beta, 8);
}

/* ukernel_f32 on a tile of 8 rows (for_dtype8), as ukernel_bf16_m8 is to ukernel_bf16: 16 multiply-adds
 * against 2 B loads and 8 broadcasts per k, each element's sum ukernel_f32's */
static void ukernel_f32_m8(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n, float alpha,
                           float beta) {
    __m512 acc[MR][2];
    prefetch_tile(c, ldc, m, 8);
    compute_f32_rows(kc, a, 8, b, NR, acc, 8);
    store_tile(acc, c, ldc, m, n, alpha, beta, 8);
}

/* ---- packing (formats in gemm_kernels.h) ----
 *
 * Two source layouts. "Contiguous" (trans): the r values a panel needs for one p are adjacent in
 * memory, so each p is one or two (masked) vector loads and stores. "Strided" (!trans): each of the
 * r panel rows is a contiguous source row, so 16 values of 16 rows are loaded and transposed in
 * registers (16 x 16, 64 shuffles), which keeps every load and store a full vector instead of
 * r scalar stores per p. Rows past `rows` and the pad of an odd kc are zeros. */

/* Contiguous sources are packed PACK_ROW_BLOCK source rows at a time across all panels (see
 * pack_f32_impl), with the row PACK_PREFETCH_ROWS ahead prefetched into L1 and the one 4x further
 * into L2: in a training step the sources (a weight gradient's G^T and X^T, k = batch rows) come
 * from L3 or DRAM, and the packs stall on those loads without the prefetches (8 rows ahead: 4 and
 * 16 came out worse). Strided sources prefetch the next panel's rows into L2 (PACK_STRIDED_HINT)
 * while the current one is transposed: its r short rows are too many streams for the hardware
 * prefetcher. Not into L1: with a power-of-two ld, the 16 rows of a transpose share one L1 set, and
 * prefetched lines only evict each other. The bf16 pairs' strided pack prefetches, into L2, the 16
 * rows it transposes next (the next half panel, or the next panel's first half) at the k it is at,
 * for B panels only: there the source is a weight streamed from DRAM, and the prefetch makes the
 * pack 1.8x as fast (80 against 140 us for 1152 x 768, a thread's share of a GPT-2 weight; as fast
 * from cache); an A panel's rows are activations a previous op just wrote, in cache, where the
 * prefetches only cost issue slots (a third more time). */
enum { PACK_ROW_BLOCK = 4, PACK_PREFETCH_ROWS = 8 };
#define PACK_STRIDED_HINT _MM_HINT_T1

/* Up to 16 consecutive elements of dtype dt at src (n valid, the rest zero), decoded to fp32. */
static inline __attribute__((always_inline)) __m512 load16(amp_dtype dt, const void *src, int64_t n) {
    const __mmask16 k = mask16(n);
    switch (dt) {
    case AMP_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, src));
    case AMP_BF16: /* bf16 is the top half of an fp32 */
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, src)), 16));
    default: return _mm512_maskz_loadu_ps(k, src);
    }
}

static inline __attribute__((always_inline)) void pack_f32_impl(float *dst, const void *src, amp_dtype dt, int64_t ld,
                                                                 bool trans, int64_t rows, int64_t kc, int r) {
    const size_t esize = dt == AMP_F32 ? 4 : 2;
    const char *s = src;
    if (trans) {
        /* A few source rows at a time across every panel: the reads stream along whole rows (what
         * hardware prefetchers follow) instead of jumping a row, often a page, per vector: much
         * faster than panel by panel when the source is in L3. */
        for (int64_t p0 = 0; p0 < kc; p0 += PACK_ROW_BLOCK) {
            const int64_t p1 = kc - p0 < PACK_ROW_BLOCK ? kc : p0 + PACK_ROW_BLOCK;
            for (int64_t i0 = 0; i0 < rows; i0 += r) {
                const int ri = rows - i0 < r ? (int)(rows - i0) : r;
                float *panel = dst + i0 * kc; /* panel i0 / r starts at (i0 / r) * r * kc */
                for (int64_t p = p0; p < p1; p++) {
                    const char *row = s + ((size_t)p * (size_t)ld + (size_t)i0) * esize;
                    const char *ahead = row + (size_t)PACK_PREFETCH_ROWS * (size_t)ld * esize;
                    const char *far = row + (size_t)(4 * PACK_PREFETCH_ROWS) * (size_t)ld * esize;
                    for (int c = 0; c < r; c += 16) {
                        if (p + 4 * PACK_PREFETCH_ROWS < kc) _mm_prefetch(far + (size_t)c * esize, _MM_HINT_T1);
                        if (p + PACK_PREFETCH_ROWS < kc) _mm_prefetch(ahead + (size_t)c * esize, _MM_HINT_T0);
                        _mm512_mask_storeu_ps(panel + p * r + c, mask16(r - c),
                                              load16(dt, row + (size_t)c * esize, ri - c));
                    }
                }
            }
        }
        return;
    }
    /* Strided: one k step of 16 at a time across all the panel's rows (up to 32, two 16 x 16
     * transposes), so each of the r source rows advances by one line per step together, which reads
     * a weight from L3 faster than a 16-row half of the panel at a time over all of kc. Its cost is
     * the transposes and the stores more than the reads, so it stays here rather than in the
     * optimizer's pass. */
    for (int64_t i0 = 0; i0 < rows; i0 += r, dst += (int64_t)r * kc) {
        const int ri = rows - i0 < r ? (int)(rows - i0) : r;
        const int64_t next = rows - i0 - r; /* rows of the next panel, prefetched meanwhile */
        const char *panel = s + (size_t)i0 * (size_t)ld * esize;
        for (int64_t p = 0; p < kc; p += 16) {
            const int64_t np = kc - p < 16 ? kc - p : 16;
            UNROLL_ALL
            for (int i = 0; i < 32; i++)
                if (i < r && i < next)
                    _mm_prefetch(panel + ((size_t)(r + i) * (size_t)ld + (size_t)p) * esize, PACK_STRIDED_HINT);
            UNROLL_ALL
            for (int row0 = 0; row0 < 32; row0 += 16) { /* r <= NR = 32 */
                if (row0 >= r) break;
                const int n_rows = ri - row0 < 0 ? 0 : ri - row0 < 16 ? ri - row0 : 16;
                const __mmask16 store_mask = mask16(r - row0);
                __m512 v[16];
                UNROLL_ALL
                for (int i = 0; i < 16; i++)
                    v[i] = i < n_rows ? load16(dt, panel + ((size_t)(row0 + i) * (size_t)ld + (size_t)p) * esize, np)
                                      : _mm512_setzero_ps();
                transpose16(v);
                UNROLL_ALL
                for (int c = 0; c < 16; c++) /* constant indices keep v[] in registers */
                    if (c < np) _mm512_mask_storeu_ps(dst + (p + c) * r + row0, store_mask, v[c]);
            }
        }
    }
}

#define PACK_F32_FN(name, dtype)                                                                          \
    static void name(void *dst, const void *src, int64_t ld, bool trans, int64_t rows, int64_t kc, int r) { \
        if (r == MR)                                                                                      \
            pack_f32_impl(dst, src, dtype, ld, trans, rows, kc, MR);                                      \
        else if (r == NR)                                                                                 \
            pack_f32_impl(dst, src, dtype, ld, trans, rows, kc, NR);                                      \
        else if (r == 8) /* for_dtype8's A */                                                             \
            pack_f32_impl(dst, src, dtype, ld, trans, rows, kc, 8);                                       \
        else                                                                                              \
            gemm_pack_f32_generic(dst, src, dtype, ld, trans, rows, kc, r);                               \
    }
PACK_F32_FN(pack_f32, AMP_F32)
PACK_F32_FN(pack_f16, AMP_F16)
PACK_F32_FN(pack_bf16_to_f32, AMP_BF16)

/* AMP_GEMM_PACKED_BF16_PAIRS. Strided source: a pair is one 32-bit word of a source row, so the
 * panel is the fp32 transpose above applied to words (the odd kc's last word is masked to its low
 * half). Contiguous source: rows 2q and 2q+1 are interleaved element by element. */
static inline __attribute__((always_inline)) void pack_pairs_impl(uint16_t *dst, const uint16_t *src, int64_t ld,
                                                                   bool trans, int64_t rows, int64_t kc, int r,
                                                                   int64_t kq_pad) {
    const int64_t kq = (kc + 1) / 2;
    if (kq_pad > kq) /* the padding pairs of every panel */
        for (int64_t i0 = 0; i0 < rows; i0 += r)
            memset(dst + 2 * (i0 * kq_pad + r * kq), 0, (size_t)(2 * r * (kq_pad - kq)) * sizeof *dst);
    if (trans) {
        /* word j of the result: low half from a[j], high half from b[j] (j < 16 per half) */
        const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38,
                                            6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
        const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
        /* as in pack_f32_impl: a few source rows (PACK_ROW_BLOCK / 2 pairs of rows) across all panels */
        for (int64_t q0 = 0; q0 < kq; q0 += PACK_ROW_BLOCK / 2) {
            const int64_t q1 = kq - q0 < PACK_ROW_BLOCK / 2 ? kq : q0 + PACK_ROW_BLOCK / 2;
            for (int64_t i0 = 0; i0 < rows; i0 += r) {
                const int ri = rows - i0 < r ? (int)(rows - i0) : r;
                uint16_t *panel = dst + 2 * i0 * kq_pad; /* panel i0 / r starts at (i0 / r) * 2r * kq_pad */
                for (int64_t q = q0; q < q1; q++) {
                    const uint16_t *s0 = src + 2 * q * ld + i0, *s1 = s0 + ld;
                    const bool has_odd = 2 * q + 1 < kc;
                    for (int c = 0; c < r; c += 32) { /* as in pack_f32_impl; a panel's 2r bytes per row */
                        if (2 * q + 4 * PACK_PREFETCH_ROWS + 1 < kc) {
                            _mm_prefetch((const char *)(s0 + 4 * PACK_PREFETCH_ROWS * ld + c), _MM_HINT_T1);
                            _mm_prefetch((const char *)(s1 + 4 * PACK_PREFETCH_ROWS * ld + c), _MM_HINT_T1);
                        }
                        if (2 * q + PACK_PREFETCH_ROWS + 1 < kc) {
                            _mm_prefetch((const char *)(s0 + PACK_PREFETCH_ROWS * ld + c), _MM_HINT_T0);
                            _mm_prefetch((const char *)(s1 + PACK_PREFETCH_ROWS * ld + c), _MM_HINT_T0);
                        }
                    }
                    for (int c = 0; c < r; c += 32) { /* 32 source columns -> 32 words = 64 u16 */
                        const int n = ri - c < 0 ? 0 : ri - c < 32 ? ri - c : 32;
                        const __mmask32 k = n >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << n) - 1u);
                        const __m512i a = _mm512_maskz_loadu_epi16(k, s0 + c);
                        const __m512i b = has_odd ? _mm512_maskz_loadu_epi16(k, s1 + c) : _mm512_setzero_si512();
                        const int w = r - c < 32 ? r - c : 32; /* words to write */
                        uint16_t *d = panel + 2 * (q * r + c);
                        _mm512_mask_storeu_epi32(d, mask16(w), _mm512_permutex2var_epi16(a, lo, b));
                        if (w > 16)
                            _mm512_mask_storeu_epi32(d + 32, mask16(w - 16), _mm512_permutex2var_epi16(a, hi, b));
                    }
                }
            }
        }
        return;
    }
    for (int64_t i0 = 0; i0 < rows; i0 += r, dst += 2 * (int64_t)r * kq_pad) {
        const int ri = rows - i0 < r ? (int)(rows - i0) : r;
        for (int row0 = 0; row0 < r; row0 += 16) {
            const int n_rows = ri - row0 < 0 ? 0 : ri - row0 < 16 ? ri - row0 : 16;
            const __mmask16 store_mask = mask16(r - row0 < 16 ? r - row0 : 16);
            for (int64_t q = 0; q < kq; q += 16) {
                const int64_t nq = kq - q < 16 ? kq - q : 16;
                const int64_t nelem = kc - 2 * q < 32 ? kc - 2 * q : 32;
                const __mmask32 k = nelem >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << nelem) - 1u);
                UNROLL_ALL
                for (int i = 0; i < 16; i++) /* B panels: the 16 rows transposed next, at this k */
                    if (r == NR && i0 + row0 + 16 + i < rows)
                        _mm_prefetch((const char *)(src + (size_t)(i0 + row0 + 16 + i) * (size_t)ld + 2 * (size_t)q),
                                     PACK_STRIDED_HINT);
                __m512 v[16];
                UNROLL_ALL
                for (int i = 0; i < 16; i++)
                    v[i] = i < n_rows ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(
                                            k, src + (size_t)(i0 + row0 + i) * (size_t)ld + 2 * (size_t)q))
                                      : _mm512_setzero_ps();
                transpose16(v);
                UNROLL_ALL
                for (int c = 0; c < 16; c++)
                    if (c < nq)
                        _mm512_mask_storeu_ps((float *)(void *)(dst + 2 * ((q + c) * r + row0)), store_mask, v[c]);
            }
        }
    }
}

static void pack_bf16_pairs(void *dst, const void *src, int64_t ld, bool trans, int64_t rows, int64_t kc, int r) {
    const int64_t kq = (kc + 1) / 2;
    if (r == MR)
        pack_pairs_impl(dst, src, ld, trans, rows, kc, MR, kq);
    else if (r == NR)
        pack_pairs_impl(dst, src, ld, trans, rows, kc, NR, kq);
    else if (r == 8) /* bf16_dot8's A */
        pack_pairs_impl(dst, src, ld, trans, rows, kc, 8, kq);
    else
        gemm_pack_bf16_pairs_generic(dst, src, ld, trans, rows, kc, r);
}

void amp_gemm_avx512_pack_pairs_padded(void *dst, const void *src, int64_t ld, bool trans, int64_t rows, int64_t kc,
                                       int r, int64_t kq_pad) {
    if (r == NR) pack_pairs_impl(dst, src, ld, trans, rows, kc, NR, kq_pad); /* the tiles kernel's B */
    else pack_pairs_impl(dst, src, ld, trans, rows, kc, r, kq_pad);
}

void amp_gemm_kernels_avx512(amp_gemm_kernels *k) {
    const amp_gemm_kernel f32 = {
        .ukernel = ukernel_f32, .ukernel_ct = ukernel_f32_ct, .packed = AMP_GEMM_PACKED_F32, .mr = MR, .nr = NR,
        .k_unit = 1, .packed_size = 4};
    k->for_dtype[AMP_F32] = f32;
    k->for_dtype[AMP_F32].name = "avx512 f32 12x32";
    k->for_dtype[AMP_F32].pack = pack_f32;
    k->for_dtype[AMP_F32].ukernel_ab = ukernel_f32_ab;
    k->for_dtype[AMP_F32].ukernel_rb = ukernel_f32_rb;
    k->for_dtype[AMP_F16] = f32;
    k->for_dtype[AMP_F16].name = "avx512 f16->f32 12x32";
    k->for_dtype[AMP_F16].pack = pack_f16;
    k->for_dtype[AMP_BF16] = f32;
    k->for_dtype[AMP_BF16].name = "avx512 bf16->f32 12x32";
    k->for_dtype[AMP_BF16].pack = pack_bf16_to_f32;
    /* the 8-row tile of each (their packs take r = 8): the same B panels and per-element sums */
    static const char *const names8[AMP_DTYPE_COUNT] = {
        [AMP_F32] = "avx512 f32 8x32", [AMP_F16] = "avx512 f16->f32 8x32", [AMP_BF16] = "avx512 bf16->f32 8x32"};
    static const amp_dtype dts8[] = {AMP_F32, AMP_F16, AMP_BF16};
    for (size_t i = 0; i < sizeof dts8 / sizeof dts8[0]; i++) {
        amp_gemm_kernel *k8 = &k->for_dtype8[dts8[i]];
        *k8 = k->for_dtype[dts8[i]];
        k8->name = names8[dts8[i]];
        k8->ukernel = ukernel_f32_m8;
        k8->ukernel_ct = NULL;
        k8->ukernel_ab = NULL;
        k8->ukernel_rb = NULL;
        k8->mr = 8;
    }
    if (amp_cpu_get_features()->avx512_bf16) {
        k->bf16_dot = (amp_gemm_kernel){.name = "avx512-bf16 bf16 12x32",
                                        .ukernel = ukernel_bf16,
                                        .ukernel_ct = ukernel_bf16_ct,
                                        .pack = pack_bf16_pairs,
                                        .packed = AMP_GEMM_PACKED_BF16_PAIRS,
                                        .mr = MR,
                                        .nr = NR,
                                        .k_unit = 2,
                                        .packed_size = 2};
        k->bf16_dot8 = k->bf16_dot;
        k->bf16_dot8.name = "avx512-bf16 bf16 8x32";
        k->bf16_dot8.ukernel = ukernel_bf16_m8;
        k->bf16_dot8.ukernel_ct = NULL;
        k->bf16_dot8.mr = 8;
    }
}

/* ---- which bf16 kernel is faster on this core ----
 *
 * Each loop issues 12 independent multiply-add chains, enough to cover either instruction's latency
 * on current cores, on values that stay normal (no subnormal slow path) and finite. */
enum { SPEED_ITERS = 2048, SPEED_REPEATS = 9 };

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Consumes the 12 chains, so that the timed loops cannot be dropped. */
static inline __attribute__((always_inline)) void keep_chains(const __m512 acc[12]) {
    __m512 sum = acc[0];
    UNROLL_ALL
    for (int i = 1; i < 12; i++) sum = _mm512_add_ps(sum, acc[i]);
    volatile float sink = _mm512_reduce_add_ps(sum);
    (void)sink;
}

/* Seconds for SPEED_ITERS x 12 VFMADD231PS zmm. */
static double time_fma(void) {
    __m512 acc[12];
    const __m512 a = _mm512_set1_ps(1e-3f), b = _mm512_set1_ps(0.5f);
    UNROLL_ALL
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps((float)i);
    const double t0 = now_seconds();
    for (int it = 0; it < SPEED_ITERS; it++) {
        UNROLL_ALL
        for (int i = 0; i < 12; i++) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
    }
    const double t = now_seconds() - t0;
    keep_chains(acc);
    return t;
}

/* Seconds for SPEED_ITERS x 12 VDPBF16PS zmm. */
static double time_dot(void) {
    __m512 acc[12];
    const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.5f));
    UNROLL_ALL
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps((float)i);
    const double t0 = now_seconds();
    for (int it = 0; it < SPEED_ITERS; it++) {
        UNROLL_ALL
        for (int i = 0; i < 12; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    }
    const double t = now_seconds() - t0;
    keep_chains(acc);
    return t;
}

double amp_gemm_avx512_dot_speed(void) {
    if (!amp_cpu_get_features()->avx512_bf16) return 0.0;
    /* The fastest of several alternating runs of each: being descheduled or sharing the core only
     * ever makes a run slower. The first pair also wakes the 512-bit units up. */
    double fma = time_fma(), dot = time_dot();
    for (int r = 0; r < SPEED_REPEATS; r++) {
        const double f = time_fma(), d = time_dot();
        if (f < fma) fma = f;
        if (d < dot) dot = d;
    }
    if (!(fma > 0.0) || !(dot > 0.0)) return 0.0;
    /* flops: 16 lanes x 2 per FMA; 16 lanes x 4 per VDPBF16PS (two products, two sums) */
    return (64.0 / dot) / (32.0 / fma);
}
