/* Internal: GEMM micro-kernels and packing routines, one table per SIMD path (BLIS's design).
 *
 * The driver (gemm.c) blocks C = alpha op(A) op(B) + beta C into cache-sized pieces, packs each
 * piece of op(A) and op(B) into "panels", and calls the micro-kernel on one mr x nr tile of C at a
 * time:
 *
 *   A panel (mr x kc): for p in [0, kc): the mr values op(A)[i0 .. i0+mr, p], consecutive.
 *   B panel (kc x nr): for p in [0, kc): the nr values op(B)[p, j0 .. j0+nr], consecutive.
 *
 * Both have the same layout once B is seen as its transpose, so one pack routine serves both:
 * it packs `rows` rows of a matrix M (M = op(A), or M = op(B)^T) into ceil(rows / r) panels of r
 * rows, padding the last panel's missing rows with zeros.
 *
 * Packed formats:
 *   AMP_GEMM_PACKED_F32        fp32 values; the source dtype (f32, f16, bf16) is decoded exactly
 *                              while packing (BLIS's "computation precision"), panel element
 *                              (p, i) at offset p * r + i.
 *   AMP_GEMM_PACKED_BF16_PAIRS for VDPBF16PS: k is taken two at a time and kc is padded to even
 *                              with zeros; panel element (p, i) is the bf16 at offset
 *                              (p / 2) * 2r + 2i + (p % 2), so one 32-bit word holds the pair
 *                              (M[i, 2q], M[i, 2q+1]) that VDPBF16PS multiplies and sums.
 *   AMP_GEMM_PACKED_BF16_TILES for AMX's TDPBF16PS, whose two operands differ: kc is padded to a
 *                              multiple of 32 with zeros, and the B panel is BF16_PAIRS (a tile of
 *                              16 pairs x 16 columns is 16 rows of the panel), while the A panel is
 *                              k-major in blocks of 32: element (p, i) at (p / 32) * 32r + 32i + p % 32,
 *                              so a tile of 16 rows x 32 k is 16 runs of 64 bytes. Its kernel packs
 *                              A with pack_a; only amp_gemm's stored operands take it (below).
 *
 * Micro-kernel contract (BLIS's): it computes the mr x nr product of two packed panels over kc (or
 * only the rows a partial panel needs: AVX-512's for m <= 4 or 8), then writes only the top-left
 * m x n corner of the C tile (m <= mr, n <= nr):
 *   C = alpha * AB + beta * C, and with beta == 0, C = alpha * AB without reading C.
 * Each element's arithmetic is the same whatever its position in the tile and whatever m and n are,
 * which is what makes the result independent of how C is split between threads. The transposed
 * variant (ukernel_ct) writes tile element (i, j) to c[j * ldc + i], with the same arithmetic. */
#ifndef AMP_GEMM_KERNELS_H
#define AMP_GEMM_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/cpu.h"
#include "amp/dtype.h"

typedef enum amp_gemm_packed {
    AMP_GEMM_PACKED_F32 = 0,
    AMP_GEMM_PACKED_BF16_PAIRS = 1,
    AMP_GEMM_PACKED_BF16_TILES = 2,
    AMP_GEMM_PACKED_COUNT
} amp_gemm_packed;

/* kc: the depth (elements of k, before pair padding); a: one A panel; b: one B panel;
 * c: the tile's top-left element (row stride ldc); m <= mr, n <= nr: the part of the tile to write. */
typedef void (*amp_gemm_ukernel_fn)(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n,
                                    float alpha, float beta);

/* The micro-kernel on fp32 panels read with strides, packed or where the operands are stored:
 *   ukernel_ab: A panel element (i, p) at a[p * lda + i] (lda = mr: a packed panel; else A^T's rows,
 *               op(A) = A^T read in place), B panel element (p, j) at b[p * ldb + j] (ldb = nr: a
 *               packed panel; else op(B) = B's rows in place);
 *   ukernel_rb: A panel element (i, p) at a[i * lda + p] (op(A) = A's rows in place), B as above.
 * All mr rows and nr columns are read, so partial panels must be packed (zero rows and columns, as
 * everywhere), and only m x n of C is written. The same arithmetic as ukernel on the same values: the
 * same bits. gemm.c reads A^T in place with ukernel_ab; gemm_direct.c (small products on one thread)
 * uses both. */
typedef void (*amp_gemm_ukernel_strided_fn)(int64_t kc, const float *a, int64_t lda, const float *b, int64_t ldb,
                                            float *c, int64_t ldc, int m, int n, float alpha, float beta);
/* Packs rows [0, rows) x columns [0, kc) of M, where M[i, p] = src[trans ? p * ld + i : i * ld + p],
 * into panels of r rows at dst (ceil(rows / r) * r * round_up(kc, k_unit) packed elements). */
typedef void (*amp_gemm_pack_fn)(void *dst, const void *src, int64_t ld, bool trans, int64_t rows, int64_t kc, int r);

/* The widest register tile side of any kernel (each kernel file asserts its mr and nr against it), so
 * that code packing a panel through a small buffer (src/gemm/lstm_gemm.c) can size it at compile time. */
#define AMP_GEMM_MAX_TILE 32

typedef struct amp_gemm_kernel {
    const char *name;            /* "avx512 f32 12x32": path, packed format, tile */
    amp_gemm_ukernel_fn ukernel; /* NULL for a dtype GEMM does not take */
    amp_gemm_ukernel_fn ukernel_ct; /* the same product, stored to C^T: tile element (i, j) goes to
                                     * c[j * ldc + i]; how the driver multiplies C^T = op(B)^T op(A)^T
                                     * when n is too narrow for nr (gemm.c) */
    amp_gemm_ukernel_strided_fn ukernel_ab, ukernel_rb; /* NULL, or the fp32 kernel on strided panels (above) */
    amp_gemm_pack_fn pack;       /* from this entry's source dtype to `packed` */
    amp_gemm_pack_fn pack_a;     /* NULL: pack packs A panels too; else A's own layout (BF16_TILES) */
    amp_gemm_packed packed;
    int mr, nr;                  /* register tile, each at most AMP_GEMM_MAX_TILE */
    int k_unit;                  /* 1, 2 for bf16 pairs, 32 for bf16 tiles */
    int packed_size;             /* bytes per packed element */
    int mc, kc, nc;              /* cache blocks (multiples of mr, k_unit, nr), from the per-path table */
} amp_gemm_kernel;

/* One entry per source dtype; only AMP_F32, AMP_F16 and AMP_BF16 are filled. for_dtype[AMP_BF16]
 * decodes bf16 to fp32 while packing (exact) for the fp32 kernel; bf16_dot, where the path and CPU
 * have one (ukernel not NULL), multiplies bf16 pairs directly, and amp_gemm_kernel_for returns it
 * while amp_gemm_bf16_method() is AMP_GEMM_BF16_DOT. */
typedef struct amp_gemm_kernels {
    amp_gemm_kernel for_dtype[AMP_DTYPE_COUNT];
    amp_gemm_kernel bf16_dot;
    amp_gemm_kernel bf16_dot8; /* bf16_dot with an 8-row tile (ukernel only), where the path has one */
    /* for_dtype[dt] with an 8-row tile (ukernel only), where the path has one: the fp32 kernel's, fed
     * by each dtype's pack (fp32, or f16 and bf16 decoded to fp32 while packing) */
    amp_gemm_kernel for_dtype8[AMP_DTYPE_COUNT];
    /* bf16 on AMX tiles (TDPBF16PS), where the path and CPU have it: amp_gemm_kernel_stored returns it
     * while the bf16 method is AMP_GEMM_BF16_AMX */
    amp_gemm_kernel bf16_tiles;
} amp_gemm_kernels;

/* Fill the entries a path provides (everything but the cache blocks); the kernel table
 * (kernels/kernels.h) calls them through its init functions. */
void amp_gemm_kernels_ref(amp_gemm_kernels *k);
#if defined(__x86_64__)
void amp_gemm_kernels_avx2(amp_gemm_kernels *k);
void amp_gemm_kernels_avx512(amp_gemm_kernels *k); /* bf16_dot (VDPBF16PS) when the CPU has AVX512-BF16 */
/* VDPBF16PS's flops per second over VFMADD231PS's (both zmm) on this core, measured now (about a
 * millisecond); 0 without AVX512-BF16. */
double amp_gemm_avx512_dot_speed(void);
/* bf16_tiles (gemm_amx.c), where the CPU has AMX-BF16 (run only once the amx method is usable) */
void amp_gemm_kernels_amx(amp_gemm_kernels *k);
/* The AVX-512 BF16_PAIRS pack with panels kq_pad pairs long (kq_pad >= ceil(kc / 2)), the pairs past
 * ceil(kc / 2) zero: the B panels of the tiles kernel (r = 32, specialized; other r through the same code). */
void amp_gemm_avx512_pack_pairs_padded(void *dst, const void *src, int64_t ld, bool trans, int64_t rows, int64_t kc,
                                       int r, int64_t kq_pad);
#endif

/* Sets the cache blocks (mc, kc, nc) of every kernel in t from path isa's block table
 * (gemm_blocks.c), once its kernels are in place. */
void amp_gemm_kernels_set_blocks(amp_gemm_kernels *t, amp_isa isa);

/* The fraction of the kernel's mr x nr tiles that real elements fill when a product of rows x cols
 * is computed with its rows on the tile's mr side: fill(m, n) for C, fill(n, m) for C^T (the
 * orientation choice of gemm.c's compute_transposed and of the lstm's packed recurrent products). */
static inline double amp_gemm_tile_fill(const amp_gemm_kernel *kern, int64_t rows, int64_t cols) {
    const int64_t rr = (rows + kern->mr - 1) / kern->mr * kern->mr, cr = (cols + kern->nr - 1) / kern->nr * kern->nr;
    return (double)rows / (double)rr * (double)cols / (double)cr;
}

/* The kernel for (isa, dtype), or NULL when dtype is not a GEMM input type. isa must be supported. */
const amp_gemm_kernel *amp_gemm_kernel_for(amp_isa isa, amp_dtype dtype);
/* The same on the active path (AMP_ISA, amp_isa_set). */
static inline const amp_gemm_kernel *amp_gemm_kernel_active(amp_dtype dtype) {
    return amp_gemm_kernel_for(amp_isa_active(), dtype);
}
/* The kernel amp_gemm uses for a product of two stored operands: bf16_tiles while the bf16 method is
 * AMP_GEMM_BF16_AMX (A and B packed in different layouts, which the pack callbacks of implicit
 * operands and the other drivers' panels do not provide), else amp_gemm_kernel_for's. */
const amp_gemm_kernel *amp_gemm_kernel_stored(amp_isa isa, amp_dtype dtype);
/* amp_gemm_kernel_for's kernel with an 8-row tile and the same packed B and per-element sums (its
 * bits), where the path has one (bf16_dot8 while the bf16 method is dot, else for_dtype8[dtype]); else
 * NULL. For products whose A rows are a multiple of 8 but not of the kernel's mr (gemm.c does not use
 * it; the lstm's recurrent products do). */
const amp_gemm_kernel *amp_gemm_kernel_rows8(amp_isa isa, amp_dtype dtype);

/* Lets amp_gemm read A in place where the kernels can (gemm.c; on by default), or makes it pack every
 * panel: for the tests, which compare the two bit for bit. */
void amp_gemm_set_a_in_place(bool on);
/* The most bytes of panels amp_gemm packs at once for all threads (gemm.c's run_shared: 8 MiB), or 0
 * for that default: for the tests, which make it small to check the operand packed in chunks of k. */
void amp_gemm_set_shared_pack_max(size_t bytes);
/* The oracle: a naive triple loop, one fp32 accumulator per element of C summed in increasing k,
 * then c = alpha * acc + beta * c (beta == 0: c = alpha * acc; alpha == 0 or k == 0: c = beta * c,
 * or 0 when beta == 0). Arguments must be valid (amp_gemm checks them). Used by the tests. */
void amp_gemm_ref(amp_dtype ab_dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const void *a, int64_t lda, const void *b, int64_t ldb, float beta, float *c, int64_t ldc);

#endif /* AMP_GEMM_KERNELS_H */
