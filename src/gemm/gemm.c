/* amp_gemm: argument checks, the static split of C between threads, and BLIS's loops around the
 * micro-kernel (gemm_kernels.h). The loops compute a product P = M_a M_b^T (m x n, inner size k):
 * normally M_a = op(A), M_b = op(B)^T and P = C; for a narrow C they compute P = C^T instead (see
 * gemm_job). For each thread's rectangle [m0, m1) x [n0, n1) of P:
 *
 *   for jc in [n0, n1) step nc:              M_b block, kc x nc, packed once per (jc, pc)
 *     for pc in [0, k) step kc:
 *       pack M_b[jc:jc+nc, pc:pc+kc]
 *       for ic in [m0, m1) step mc:          M_a block, mc x kc, packed once per (jc, pc, ic)
 *         pack M_a[ic:ic+mc, pc:pc+kc]
 *         for ir in [0, mc) step mr:         one mr x kc A panel stays in L1 ...
 *           for jr in [0, nc) step nr:       ... while the B panels stream from L2/L3
 *             micro-kernel on the mr x nr tile at (ic+ir, jc+jr)
 *
 * The ir/jr order is the mirror of BLIS's: the micro-kernels broadcast A and load B as vectors,
 * so the panel that stays put is the small broadcast one (12 x kc: 24 KiB at kc = 512) and the
 * vector side streams, 128 bytes per 24 multiply-adds, far below L2 and L3 bandwidth. The order
 * also lets kc grow to 512-1024, which halves or quarters the passes over C and the packing of A per
 * k.
 *
 * Threads: P is cut into a grid of rectangles of whole tiles, one per task (choose_grid; where A is
 * read in place, several per thread, handed out as threads come free: split_finer), each computed by
 * one thread with its own packing buffers; nothing is shared but the inputs.
 *
 * Determinism: an element of C gets one fp32 sum per k block, in the order the micro-kernel adds,
 * then c = alpha*sum + beta*c for the first block and c = alpha*sum + c for the others. The k
 * blocks start at fixed multiples of kc whatever the split, and a tile's arithmetic does not
 * depend on where in the tile an element sits (gemm_kernels.h), so each element's bits depend on
 * the path and the shape only: not on timing, not on the thread count. */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp/formats.h"
#include "amp/gemm.h"
#include "amp/status.h"
#include "gemm_fused.h"
#include "gemm_implicit.h"
#include "../kernels/gemm_kernels.h"
#include "../core/accumulate.h"
#include "../core/relu_bits.h"
#include "../kernels/convert_kernels.h"
#include "../kernels/elem_kernels.h"
#include "../kernels/vecmath.h"
#include "../core/parallel.h"
#include "../core/alloc_internal.h"

/* Below this many flops (2mnk) a second thread costs more to wake than it saves. */
#define GEMM_MIN_FLOPS_PER_THREAD (1 << 21)

/* ---- per-thread packing buffers: allocated on first use, grown, kept until the thread exits ---- */

typedef struct pack_buffers {
    void *a, *b; /* 64-byte aligned */
    size_t a_size, b_size;
    void *shared; /* an operand packed for every thread of a product this thread runs (run_shared) */
    size_t shared_size;
} pack_buffers;

static pthread_key_t buffers_key;
static pthread_once_t buffers_once = PTHREAD_ONCE_INIT;
static int buffers_key_ok;

static void free_buffers(void *p) {
    pack_buffers *pb = p;
    amp_free(pb->a);
    amp_free(pb->b);
    amp_free(pb->shared);
    amp_free(pb);
}

static void make_buffers_key(void) { buffers_key_ok = pthread_key_create(&buffers_key, free_buffers) == 0; }

static pack_buffers *thread_buffers(void) {
    pthread_once(&buffers_once, make_buffers_key);
    if (!buffers_key_ok) return NULL;
    pack_buffers *pb = pthread_getspecific(buffers_key);
    if (pb) return pb;
    pb = amp_calloc(1, sizeof *pb);
    if (pb && pthread_setspecific(buffers_key, pb) != 0) {
        amp_free(pb);
        pb = NULL;
    }
    return pb;
}

/* Makes *buf at least `need` bytes; the old contents are not kept. NULL when out of memory. */
static void *grow(void **buf, size_t *size, size_t need) {
    if (need <= *size) return *buf;
    const size_t rounded = (need + 63) & ~(size_t)63; /* aligned_alloc wants a multiple of the alignment */
    void *p = amp_aligned_alloc(64, rounded);
    if (!p) return NULL;
    amp_free(*buf);
    *buf = p;
    *size = rounded;
    return p;
}

/* ---- the blocked product of one rectangle of C ---- */

/* One operand as the loops see it: the matrix M with M[i, p] = src[trans ? p * ld + i : i * ld + p],
 * i over the rows of one side of the product, p over k. */
typedef struct operand {
    const char *src;
    int64_t ld;
    bool trans;
    amp_gemm_pack_cb cb; /* not NULL: M is implicit, packed by cb(cb_arg, ...) (gemm_implicit.h) */
    const void *cb_arg;
} operand;

/* The product the loops compute, P = M_a M_b^T (m x n, inner size k), stored with element (i, j) at
 * c[i * c_row + j * c_col]. Normally M_a = op(A), M_b = op(B)^T and P = C. When C is narrower than
 * the kernel's nr but tall, the loops compute P = C^T = op(B)^T op(A)^T instead (M_a = op(B)^T,
 * M_b = op(A)), so the wide side of C fills the vector direction; the kernel then writes P's tiles
 * transposed (ukernel_ct). Products commute exactly, so each element's bits are the same. */
typedef struct gemm_job {
    const amp_gemm_kernel *kern;
    amp_gemm_ukernel_fn ukernel;
    amp_gemm_ukernel_strided_fn ukernel_ab; /* not NULL: M_a = A^T may be read in place (gemm_block) */
    amp_gemm_ukernel_strided_fn ukernel_rb; /* not NULL: M_a = A is read by rows in place (gemm_block) */
    size_t esize; /* bytes per element of A and B */
    operand a, b;
    int64_t m, n, k;
    float alpha, beta;
    float *c;
    int64_t ldc, c_row, c_col;
    const amp_gemm_epilogue *ep; /* NULL: none (gemm_fused.h) */
    float *a_sums;               /* ep->a_sums when added from the packed A panels (gemm_block), else NULL */
    int grid_m, grid_n; /* P is split into grid_m x grid_n rectangles of whole tiles, one per task */
    /* The tasks compute the k blocks in [k0, k1) (the whole k, or one chunk of it: run_shared).
     * a_shared, b_shared not NULL: M_a or M_b packed before the tasks for all of them, k block pc at
     * offset rows_pad * (pc - k0), its panel of rows [i, i + r) i * kc_pad further (packed elements;
     * rows_pad = m or n rounded up to the tile) */
    int64_t k0, k1;
    const char *a_shared, *b_shared;
    atomic_int status;
} gemm_job;

static int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
static int64_t round_up(int64_t x, int64_t unit) { return (x + unit - 1) / unit * unit; }

/* Whether the kernels may read A in place (gemm_block); off only in the tests, which compare the two */
static atomic_bool gemm_a_in_place = true;
void amp_gemm_set_a_in_place(bool on) { atomic_store_explicit(&gemm_a_in_place, on, memory_order_relaxed); }

/* Packs M[i0 .. i0 + rows, p0 .. p0 + kc] of an operand into panels of r rows. */
static void pack(const gemm_job *j, const operand *op, void *dst, int64_t i0, int64_t rows, int64_t p0, int64_t kc,
                 int r) {
    if (op->cb) {
        op->cb(op->cb_arg, j->kern, dst, i0, rows, p0, kc, r);
        return;
    }
    const int64_t off = op->trans ? p0 * op->ld + i0 : i0 * op->ld + p0;
    const amp_gemm_pack_fn fn = op == &j->a && j->kern->pack_a ? j->kern->pack_a : j->kern->pack;
    fn(dst, op->src + (size_t)off * j->esize, op->ld, op->trans, rows, kc, r);
}

/* The acc step on n values of one row: row (fp32 C) rounded to out_dtype, or `enc`, the same values
 * already rounded (the out row), decoded and accumulated. Rounding here is the convert table's
 * acc_rounded, one pass in registers, rather than a trip through the stack in bf16 and an add by this
 * file's baseline-ISA loop; a decode of enc goes a chunk at a time through the stack. An fp32 add
 * into acc is the active path's elementwise add, ek (see epilogue). */
enum { ACC_CHUNK = 512 };
/* Returns true with *absmax set (the absmax step's value for the row) where the rounding kernel gave it */
static bool acc_row(const amp_gemm_epilogue *ep, const amp_elem_kernels *ek, float *acc, const float *row,
                    const void *enc, int64_t n, uint32_t *absmax) {
    const amp_dtype dt = ep->out_dtype;
    const size_t es = amp_dtype_size(dt);
    if (dt == AMP_F32) {
        if (ep->acc_store) amp_acc_f32(acc, row, n, true);
        else ek->acc(acc, row, (size_t)n);
        return false;
    }
    if (!enc) {
        /* a stored acc goes past the caches where the caller says so: a large master gradient, read
         * next by the optimizer (AMP_ACC_STREAM); the kernel's maximum is the absmax step's, so the
         * row is not read back */
        const amp_acc_mode mode = !ep->acc_store ? AMP_ACC_ADD : !ep->acc_stream ? AMP_ACC_STORE : AMP_ACC_STREAM;
        *absmax = amp_convert_kernels_for(amp_isa_active())->acc_rounded[dt](acc, row, (size_t)n, mode);
        return true;
    }
    if (dt == AMP_BF16) {
        amp_acc_bf16(acc, enc, n, ep->acc_store);
        return false;
    }
    _Alignas(64) float fbuf[ACC_CHUNK];
    for (int64_t j0 = 0; j0 < n; j0 += ACC_CHUNK) {
        const int64_t len = n - j0 < ACC_CHUNK ? n - j0 : ACC_CHUNK;
        amp_convert(fbuf, AMP_F32, (const char *)enc + (size_t)j0 * es, dt, (size_t)len);
        amp_acc_f32(acc + j0, fbuf, len, ep->acc_store);
    }
    return false;
}

/* row[j] = +0 where mask[j] (dtype dt, fp32 or 16-bit) is not > 0 and not NaN: relu's backward on
 * fp32 values; an fp32 mask by the active path's kernel (see epilogue) */
static void relu_mask_row(const amp_elem_kernels *ek, float *restrict row, const void *restrict mask, amp_dtype dt,
                          int64_t n) {
    if (dt == AMP_F32) {
        ek->relu_grad(row, mask, (size_t)n);
        return;
    }
    uint32_t *restrict r = (uint32_t *)(void *)row;
    int64_t i = 0;
    const uint16_t *restrict m = mask;
    amp_half_bits hb = {0};
    (void)amp_half_bits_of(dt, &hb); /* fp16 or bf16: check_args admits no other mask dtype */
    for (; i + 16 <= n; i += 16)
        for (int q = 0; q < 16; q++) r[i + q] &= amp_relu_keep16(m[i + q], hb.inf);
    for (; i < n; i++) r[i] &= amp_relu_keep16(m[i], hb.inf);
}

/* row[j] *= mul[j] in fp32: gelu's backward, g times the derivative its forward stored */
static void mul_row(float *restrict row, const float *restrict mul, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) /* blocks of 16 with a fixed count: what gcc's -O2 vectorizer takes */
        for (int q = 0; q < 16; q++) row[i + q] *= mul[i + q];
    for (; i < n; i++) row[i] *= mul[i];
}

/* row[j] = row[j] (rounded to dt and decoded, unless dt is F32) + res[j] in fp32: a linear's output in
 * its compute dtype added to an fp32 residual, as amp_add adds them (the rounding a chunk at a time
 * through the stack, amp_convert's bits both ways; the add the active path's, ek) */
static void residual_row(const amp_elem_kernels *ek, float *row, const float *res, amp_dtype dt, int64_t n) {
    if (dt != AMP_F32) {
        _Alignas(64) uint16_t buf[ACC_CHUNK];
        for (int64_t j0 = 0; j0 < n; j0 += ACC_CHUNK) {
            const int64_t len = n - j0 < ACC_CHUNK ? n - j0 : ACC_CHUNK;
            amp_convert(buf, dt, row + j0, AMP_F32, (size_t)len);
            amp_convert(row + j0, AMP_F32, buf, dt, (size_t)len);
        }
    }
    ek->acc(row, res, (size_t)n);
}

/* The epilogue (gemm_fused.h) on the C rectangle rows [r0, r1) x columns [c0, c1), each row in
 * increasing j: relu_mask, grad_mul, bias add in fp32, relu or gelu, the residual, the one rounding
 * to out_dtype, the acc step. The plain adds (bias, residual, acc), the bias with relu and an fp32
 * relu mask are the active path's elementwise kernels (kernels/elem_kernels.h: one fp32 add per
 * element, relu's bit selections; the same bits as this file's loops), because this file is built for
 * the baseline ISA, where gcc vectorizes them only 4 wide. */
static void epilogue(const amp_gemm_epilogue *ep, float *c, int64_t ldc, int64_t r0, int64_t r1, int64_t c0,
                     int64_t c1) {
    if (!ep->bias && !ep->relu && !ep->gelu && !ep->relu_mask && !ep->grad_mul && !ep->residual && !ep->out &&
        !ep->acc && !ep->absmax)
        return; /* only a_sums: not per block */
    const size_t os = amp_dtype_size(ep->out_dtype), ms = amp_dtype_size(ep->relu_mask_dtype);
    const amp_vmath_kernels *vk = ep->gelu ? amp_vmath_active() : NULL;
    const amp_elem_kernels *ek = amp_elem_active();
    uint32_t absmax = 0;
    for (int64_t r = r0; r < r1; r++) {
        float *row = c + r * ldc;
        void *out = ep->out ? (char *)ep->out + (size_t)(r * ep->ldo + c0) * os : NULL;
        if (ep->relu_mask)
            relu_mask_row(ek, row + c0, (const char *)ep->relu_mask + (size_t)(r * ep->ldmask + c0) * ms,
                          ep->relu_mask_dtype, c1 - c0);
        if (ep->grad_mul) mul_row(row + c0, ep->grad_mul + r * ep->ldmul + c0, c1 - c0);
        if (ep->bias && ep->relu) ek->bias_relu(row + c0, ep->bias + c0, (size_t)(c1 - c0));
        else if (ep->bias) ek->acc(row + c0, ep->bias + c0, (size_t)(c1 - c0));
        else if (ep->relu) amp_relu_bits32((uint32_t *)(void *)(row + c0), (uint32_t *)(void *)(row + c0), c1 - c0);
        if (vk && ep->gelu_deriv)
            vk->gelu_deriv(row + c0, ep->gelu_deriv + r * ep->ldderiv + c0, row + c0, (size_t)(c1 - c0));
        else if (vk)
            vk->gelu(row + c0, row + c0, (size_t)(c1 - c0));
        if (ep->residual) residual_row(ek, row + c0, ep->residual + r * ep->ldres + c0, ep->res_round, c1 - c0);
        if (out) amp_convert(out, ep->out_dtype, row + c0, AMP_F32, (size_t)(c1 - c0));
        uint32_t b = 0;
        const bool have_b = ep->acc && acc_row(ep, ek, ep->acc + r * ep->ldacc + c0, row + c0, out, c1 - c0, &b);
        if (ep->absmax) {
            if (!have_b) b = ek->absmax_bits(ep->acc ? ep->acc + r * ep->ldacc + c0 : row + c0, (size_t)(c1 - c0));
            absmax = b > absmax ? b : absmax;
        }
    }
    if (ep->absmax) {
        uint32_t seen = atomic_load_explicit(ep->absmax, memory_order_relaxed);
        while (absmax > seen && !atomic_compare_exchange_weak_explicit(ep->absmax, &seen, absmax, memory_order_relaxed,
                                                                       memory_order_relaxed)) {
        }
    }
}

/* a_sums (gemm_fused.h) from one fp32 panel of mr rows packed with depth kc (the layout [kc][mr]),
 * rows [0, rows): each row's kc values added in order of p, to sums[0 .. rows). Run on each panel
 * right before the micro-kernels read it, so the panel (24 KiB at the gpt's kc) comes to L1 once for
 * both. Each row's sum is one chain of dependent adds; full panels of 12, 16 or 4 rows keep their
 * sums in vector registers (GCC's and clang's vector extension: SSE on any x86-64, NEON on arm64),
 * every row's chain advancing at once; so do the AVX2 kernel's panels of 6 (one row at a time, their
 * chains would run one after another). (Sums kept in memory put a store and a load in every chain
 * and cost more than the pass over G they replace.) */
typedef float sum_v4 __attribute__((vector_size(16)));

static inline sum_v4 load_v4(const float *p) {
    sum_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Full panels of NV * 4 rows: NV sums of 4 in registers, one add per vector and p. */
#define SUM_PANEL_FN(NV)                                                                           \
    static void sum_panel_v##NV(float *sums, const float *panel, int64_t kc) {                     \
        sum_v4 acc[NV];                                                                            \
        for (int v = 0; v < NV; v++) acc[v] = load_v4(sums + 4 * v);                               \
        for (int64_t p = 0; p < kc; p++, panel += 4 * NV)                                          \
            for (int v = 0; v < NV; v++) acc[v] += load_v4(panel + 4 * v);                         \
        for (int v = 0; v < NV; v++) memcpy(sums + 4 * v, &acc[v], sizeof acc[v]);                 \
    }
SUM_PANEL_FN(1)
SUM_PANEL_FN(3)
SUM_PANEL_FN(4)
#undef SUM_PANEL_FN

/* The AVX2 kernel's panels of 6 rows: 4 sums in one vector, 2 in another (one load each per p). */
typedef float sum_v2 __attribute__((vector_size(8)));

static void sum_panel_6(float *sums, const float *panel, int64_t kc) {
    sum_v4 a = load_v4(sums);
    sum_v2 b;
    memcpy(&b, sums + 4, sizeof b);
    for (int64_t p = 0; p < kc; p++, panel += 6) {
        sum_v2 t;
        memcpy(&t, panel + 4, sizeof t);
        a += load_v4(panel);
        b += t;
    }
    memcpy(sums, &a, sizeof a);
    memcpy(sums + 4, &b, sizeof b);
}

static void sum_packed_panel(float *sums, const float *panel, int rows, int64_t kc, int mr) {
    if (rows == mr && mr == 12) sum_panel_v3(sums, panel, kc);
    else if (rows == mr && mr == 6) sum_panel_6(sums, panel, kc);
    else if (rows == mr && mr == 16) sum_panel_v4(sums, panel, kc);
    else if (rows == mr && mr == 4) sum_panel_v1(sums, panel, kc);
    else
        for (int i = 0; i < rows; i++) {
            float acc = sums[i];
            for (int64_t p = 0; p < kc; p++) acc += panel[p * mr + i];
            sums[i] = acc;
        }
}

/* a_sums the plain way, where no fp32 panel holds A: op(A)'s rows summed straight from A (decoded
 * a chunk at a time), the same additions in the same order. */
enum { SUMS_CHUNK = 256 };
static void sum_rows_plain(float *sums, const void *a, amp_dtype dt, bool trans_a, int64_t lda, int64_t m,
                           int64_t k) {
    const size_t es = amp_dtype_size(dt);
    float buf[SUMS_CHUNK];
    if (trans_a) { /* op(A)[i, p] = A[p, i]: row p of A adds to every sum */
        for (int64_t p = 0; p < k; p++)
            for (int64_t i0 = 0; i0 < m; i0 += SUMS_CHUNK) {
                const int64_t len = m - i0 < SUMS_CHUNK ? m - i0 : SUMS_CHUNK;
                amp_convert(buf, AMP_F32, (const char *)a + (size_t)(p * lda + i0) * es, dt, (size_t)len);
                for (int64_t i = 0; i < len; i++) sums[i0 + i] += buf[i];
            }
        return;
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t p0 = 0; p0 < k; p0 += SUMS_CHUNK) {
            const int64_t len = k - p0 < SUMS_CHUNK ? k - p0 : SUMS_CHUNK;
            amp_convert(buf, AMP_F32, (const char *)a + (size_t)(i * lda + p0) * es, dt, (size_t)len);
            for (int64_t p = 0; p < len; p++) sums[i] += buf[p];
        }
}

static int gemm_block(const gemm_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    const amp_gemm_kernel *kern = j->kern;
    const int mr = kern->mr, nr = kern->nr;
    const size_t ps = (size_t)kern->packed_size;
    const int64_t kc_max = round_up(min64(kern->kc, j->k), kern->k_unit);
    pack_buffers *pb = thread_buffers();
    if (!pb) return AMP_ERR_OUT_OF_MEMORY;
    const size_t a_need = j->a_shared ? 0 : (size_t)(round_up(min64(kern->mc, m1 - m0), mr) * kc_max) * ps;
    const size_t b_need = j->b_shared ? 0 : (size_t)(round_up(min64(kern->nc, n1 - n0), nr) * kc_max) * ps;
    char *abuf = a_need ? grow(&pb->a, &pb->a_size, a_need) : NULL;
    char *bbuf = b_need ? grow(&pb->b, &pb->b_size, b_need) : NULL;
    if ((a_need && !abuf) || (b_need && !bbuf)) return AMP_ERR_OUT_OF_MEMORY;
    const int64_t m_pad = round_up(j->m, mr), n_pad = round_up(j->n, nr); /* the shared operands' rows */

    /* Where the rectangle is one tile wide, each packed A panel meets one B panel: packing it is a copy
     * of A for one use. Where M_a is stored transposed (op(A) = A^T: a panel's k steps are rows of A),
     * the kernel reads full panels where they are instead (ukernel_ab); a partial panel at M_a's end
     * is packed as usual (the kernel would read past A's columns).
     * Where M_a is stored by rows (op(A) = A, fp32), gemm_run may choose ukernel_rb,
     * which broadcasts from the panel's mr rows where they are, at any width; its partial panels are
     * packed as above. */
    const bool a_in_place = j->ukernel_ab && n1 - n0 <= nr;
    const bool a_unpacked = a_in_place || j->ukernel_rb;
    for (int64_t jc = n0; jc < n1; jc += kern->nc) {
        const int64_t nc = min64(kern->nc, n1 - jc);
        for (int64_t pc = j->k0; pc < j->k1; pc += kern->kc) {
            const int64_t kc = min64(kern->kc, j->k - pc);
            const int64_t kc_pad = round_up(kc, kern->k_unit);
            const float beta = pc == 0 ? j->beta : 1.0f; /* later k blocks add to what the first wrote */
            const char *bblock = j->b_shared ? j->b_shared + (size_t)(n_pad * (pc - j->k0) + jc * kc_pad) * ps : bbuf;
            if (!j->b_shared) pack(j, &j->b, bbuf, jc, nc, pc, kc, nr);
            for (int64_t ic = m0; ic < m1; ic += kern->mc) {
                const int64_t mc = min64(kern->mc, m1 - ic);
                const char *ablock =
                    j->a_shared ? j->a_shared + (size_t)(m_pad * (pc - j->k0) + ic * kc_pad) * ps : abuf;
                if (!a_unpacked && !j->a_shared) pack(j, &j->a, abuf, ic, mc, pc, kc, mr);
                /* a_sums once per (ic, pc): by the task whose columns start at 0, on its first column
                 * block; pc goes up, so each row's values are added in order of p */
                const bool sum_a = j->a_sums && n0 == 0 && jc == 0;
                /* the epilogue once this block of C is final: P = C, a panel's mr rows of C right
                 * after its tiles (mr x nc fp32, 48-96 KiB: still in L2, where the whole block, mc x
                 * nc, is not); P = C^T, the block's rows of C once (a panel's are mr columns) */
                const bool ep_final = j->ep && pc + kc >= j->k, ep_panel = ep_final && j->c_col == 1;
                for (int64_t ir = 0; ir < mc; ir += mr) {
                    const char *apanel = ablock + (size_t)(ir * kc_pad) * ps; /* [kc_pad][mr] */
                    const int m_tile = (int)min64(mr, mc - ir);
                    if (a_in_place && m_tile == mr) {
                        const float *ap = (const float *)(const void *)j->a.src + pc * j->a.ld + ic + ir;
                        j->ukernel_ab(kc, ap, j->a.ld, (const float *)(const void *)bblock, nr,
                                      j->c + (ic + ir) * j->c_row + jc * j->c_col, j->ldc, m_tile, (int)min64(nr, nc),
                                      j->alpha, beta);
                        if (ep_panel) epilogue(j->ep, j->c, j->ldc, ic + ir, ic + ir + m_tile, jc, jc + nc);
                        continue;
                    }
                    if (j->ukernel_rb && m_tile == mr) {
                        const float *ap = (const float *)(const void *)j->a.src + (ic + ir) * j->a.ld + pc;
                        for (int64_t jr = 0; jr < nc; jr += nr)
                            j->ukernel_rb(kc, ap, j->a.ld,
                                          (const float *)(const void *)(bblock + (size_t)(jr * kc_pad) * ps), nr,
                                          j->c + (ic + ir) * j->c_row + (jc + jr) * j->c_col, j->ldc, m_tile,
                                          (int)min64(nr, nc - jr), j->alpha, beta);
                        if (ep_panel) epilogue(j->ep, j->c, j->ldc, ic + ir, ic + ir + m_tile, jc, jc + nc);
                        continue;
                    }
                    if (a_unpacked) pack(j, &j->a, abuf + (size_t)(ir * kc_pad) * ps, ic + ir, m_tile, pc, kc, mr);
                    if (sum_a) sum_packed_panel(j->a_sums + ic + ir, (const float *)(const void *)apanel, m_tile, kc, mr);
                    for (int64_t jr = 0; jr < nc; jr += nr) {
                        const char *bpanel = bblock + (size_t)(jr * kc_pad) * ps; /* [kc_pad][nr] */
                        float *ctile = j->c + (ic + ir) * j->c_row + (jc + jr) * j->c_col;
                        j->ukernel(kc, apanel, bpanel, ctile, j->ldc, m_tile, (int)min64(nr, nc - jr), j->alpha, beta);
                    }
                    if (ep_panel) epilogue(j->ep, j->c, j->ldc, ic + ir, ic + ir + m_tile, jc, jc + nc);
                }
                if (ep_final && !ep_panel) epilogue(j->ep, j->c, j->ldc, jc, jc + nc, ic, ic + mc); /* P = C^T */
            }
        }
    }
    return AMP_OK;
}

/* After an epilogue that may have streamed acc (AMP_ACC_STREAM), before the task ends: the thread
 * pool's completion then publishes the streamed values (convert_kernels.h) */
static void stream_fence_after(const amp_gemm_epilogue *ep) {
    if (ep && ep->acc_stream) amp_convert_kernels_for(amp_isa_active())->stream_fence();
}

/* Task t owns rectangle (t / grid_n, t % grid_n) of the grid, in whole tiles. */
static void gemm_task(void *arg, int64_t task, int thread_id) {
    (void)thread_id;
    gemm_job *j = arg;
    const int64_t tiles_m = (j->m + j->kern->mr - 1) / j->kern->mr;
    const int64_t tiles_n = (j->n + j->kern->nr - 1) / j->kern->nr;
    const int64_t ti = task / j->grid_n, tj = task % j->grid_n;
    const int64_t m0 = min64(j->m, tiles_m * ti / j->grid_m * j->kern->mr);
    const int64_t m1 = min64(j->m, tiles_m * (ti + 1) / j->grid_m * j->kern->mr);
    const int64_t n0 = min64(j->n, tiles_n * tj / j->grid_n * j->kern->nr);
    const int64_t n1 = min64(j->n, tiles_n * (tj + 1) / j->grid_n * j->kern->nr);
    if (m0 >= m1 || n0 >= n1) return;
    const int status = gemm_block(j, m0, m1, n0, n1);
    stream_fence_after(j->ep);
    if (status != AMP_OK) {
        int expected = AMP_OK;
        atomic_compare_exchange_strong(&j->status, &expected, status);
    }
}

/* Picks the grid that minimizes the most tiles any thread gets; among equals, fewer threads, then
 * the split along the longer side of C (so each thread's packed block of the other operand is
 * shared by more of its tiles). Then, where another grid with as many threads gives a thread at most
 * 3% more tiles but packs at least a quarter less (each thread packs its rows of M_a and its columns
 * of M_b, all of them where that side is not split), that grid: the tile count alone splits a tall,
 * narrow P (the cnn's conv weight gradient, 800 x 64: 67 against 68 tiles) along n, and each thread
 * then packs all of the tall side (800 x 1176 bf16 decoded, twice per product). At two threads this
 * moves the cnn's bf16 conv products, the gpt's 512 x 128 weight gradient (k = 4096) and the lstm's
 * 2048 x 256 (k = 256) products to m splits, and nothing of the mlp's. Any grid gives the same bits
 * (see the top of this file). */
static int64_t grid_load(int64_t tiles_m, int64_t tiles_n, int gm, int gn) {
    return ((tiles_m + gm - 1) / gm) * ((tiles_n + gn - 1) / gn);
}

static void choose_grid(int64_t tiles_m, int64_t tiles_n, int mr, int nr, int threads, bool prefer_n, int *grid_m,
                        int *grid_n) {
    int64_t best_load = INT64_MAX;
    int best_threads = 0;
    *grid_m = *grid_n = 1;
    for (int gm = 1; gm <= threads && gm <= tiles_m; gm++) {
        for (int gn = 1; gm * gn <= threads && gn <= tiles_n; gn++) {
            const int64_t load = grid_load(tiles_m, tiles_n, gm, gn);
            const int used = gm * gn;
            const bool better = load < best_load || (load == best_load && used < best_threads) ||
                                (load == best_load && used == best_threads && (prefer_n ? gn > *grid_n : gm > *grid_m));
            if (better) {
                best_load = load;
                best_threads = used;
                *grid_m = gm;
                *grid_n = gn;
            }
        }
    }
    /* rows of M_a plus columns of M_b a thread packs (k is common to all grids) */
    int64_t best_pack = (tiles_m + *grid_m - 1) / *grid_m * mr + (tiles_n + *grid_n - 1) / *grid_n * nr;
    const int64_t pack0 = best_pack;
    for (int gm = 1; gm <= best_threads && gm <= tiles_m; gm++) {
        const int gn = best_threads / gm;
        if (gm * gn != best_threads || gn > tiles_n) continue;
        const int64_t pack = (tiles_m + gm - 1) / gm * mr + (tiles_n + gn - 1) / gn * nr;
        if (grid_load(tiles_m, tiles_n, gm, gn) * 100 <= best_load * 103 && pack * 4 <= pack0 * 3 && pack < best_pack) {
            best_pack = pack;
            *grid_m = gm;
            *grid_n = gn;
        }
    }
}

/* Where the threads split P along n only and read M_a in place (ukernel_rb: an fp32 A by rows, the
 * gpt's and the mlp's activations against a weight), each thread's columns are cut into
 * GEMM_TASKS_PER_THREAD tasks, handed out to whichever thread is free (amp_parallel_for_dynamic): a
 * thread that a busy machine slows or preempts then leaves its remaining columns to the others
 * instead of holding every thread at the end of the product. (On a 2-core machine shared with other
 * work, gpt2 124m's fp32 step at batch 4 x 64 on 2 threads took about 9% less wall time, the same
 * CPU time.) Nothing is packed twice: each task packs only its own columns of M_b, and M_a is not
 * packed. Where M_a is packed (bf16, f16, an fp32 A^T or rows 4 KiB apart) or the split is along m
 * (every task would pack all of M_b), each extra task would pack that operand again, which cost more
 * than the balance gained, so the grid stays one task per thread. Each task keeps at least
 * GEMM_MIN_FLOPS_PER_TASK. The grid decides no element's arithmetic (the top of this file), so the
 * bits are those of the static split. */
enum { GEMM_TASKS_PER_THREAD = 4 };
#define GEMM_MIN_FLOPS_PER_TASK (1 << 22)

static bool split_finer(gemm_job *j, double flops) {
    if (j->grid_m != 1 || j->grid_n < 2 || !j->ukernel_rb) return false;
    const int64_t tiles_n = (j->n + j->kern->nr - 1) / j->kern->nr;
    int64_t tasks = min64((int64_t)j->grid_n * GEMM_TASKS_PER_THREAD, tiles_n);
    const int64_t by_flops = (int64_t)(flops / GEMM_MIN_FLOPS_PER_TASK);
    if (tasks > by_flops) tasks = by_flops;
    if (tasks <= j->grid_n) return false;
    j->grid_n = (int)tasks;
    return true;
}

/* Where the grid splits P along one side only, every task packs all of the other side's operand:
 * along n (grid 1 x T: the gpt's products at a few hundred rows, X W^T and G W, against a weight
 * split by columns), each of the T threads packs the whole M_a, T times the packing of one pass;
 * along m (T x 1: a weight gradient, G^T X), the whole M_b. There the operand is packed once instead,
 * each thread packing 1/T of its panels (an amp_parallel_for before the tasks'), and the tasks read
 * their panels from it and pack only their own side. An operand whose panels exceed SHARED_PACK_MAX
 * (L3-sized: they are read back from there, half of them packed by another core) goes in chunks of
 * whole k blocks (the lm head's 256 x 50257 gradient against the tied embedding): pack a chunk, run
 * the tasks on its k blocks, pack the next. Only where the operand is packed anyway (no kernel reads
 * it in place). The panels are those the tasks would pack (a panel's contents depend on its rows and
 * k block only), and each element of C still gets its k blocks in increasing order with the beta of
 * the first, its epilogue after the last: the same bits. */
#define SHARED_PACK_MAX ((size_t)8 << 20)
static atomic_size_t shared_pack_max = SHARED_PACK_MAX;
void amp_gemm_set_shared_pack_max(size_t bytes) {
    atomic_store_explicit(&shared_pack_max, bytes ? bytes : SHARED_PACK_MAX, memory_order_relaxed);
}

typedef struct prepack_job {
    const gemm_job *j;
    const operand *op;
    char *dst;
    int64_t rows, rows_pad; /* M's rows, and rounded up to r */
    int r;
    int chunks;             /* tasks per k block */
} prepack_job;

/* Task t packs chunk t % chunks of the panels of k block t / chunks of [j->k0, j->k1). */
static void prepack_task(void *arg, int64_t t, int thread_id) {
    (void)thread_id;
    const prepack_job *pj = arg;
    const amp_gemm_kernel *kern = pj->j->kern;
    const int64_t pc = pj->j->k0 + t / pj->chunks * kern->kc, c = t % pj->chunks;
    const int64_t kc = min64(kern->kc, pj->j->k - pc), kc_pad = round_up(kc, kern->k_unit);
    const int64_t panels = pj->rows_pad / pj->r;
    const int64_t p0 = panels * c / pj->chunks, p1 = panels * (c + 1) / pj->chunks;
    if (p0 >= p1) return;
    const int64_t i0 = p0 * pj->r, rows = min64(pj->rows, p1 * pj->r) - i0;
    pack(pj->j, pj->op, pj->dst + (size_t)(pj->rows_pad * (pc - pj->j->k0) + i0 * kc_pad) * (size_t)kern->packed_size,
         i0, rows, pc, kc, pj->r);
}

/* Runs the tasks with the operand the grid does not split packed once for all (see above), in the
 * calling thread's shared buffer; false, nothing done, where that does not apply or memory is short. */
static bool run_shared(gemm_job *j) {
    const amp_gemm_kernel *kern = j->kern;
    const bool share_a = j->grid_m == 1 && j->grid_n >= 2 && !j->ukernel_ab && !j->ukernel_rb;
    const bool share_b = j->grid_n == 1 && j->grid_m >= 2;
    if (!share_a && !share_b) return false;
    const int r = share_a ? kern->mr : kern->nr;
    const int64_t rows = share_a ? j->m : j->n, rows_pad = round_up(rows, r);
    const size_t block_bytes = (size_t)rows_pad * (size_t)kern->kc * (size_t)kern->packed_size; /* a full k block */
    const int64_t blocks = (j->k + kern->kc - 1) / kern->kc;
    const size_t max = atomic_load_explicit(&shared_pack_max, memory_order_relaxed);
    const int64_t per_chunk = min64((int64_t)(max / block_bytes), blocks);
    pack_buffers *pb = per_chunk > 0 ? thread_buffers() : NULL;
    char *dst = pb ? grow(&pb->shared, &pb->shared_size, (size_t)per_chunk * block_bytes) : NULL;
    if (!dst) return false; /* the tasks pack their own */
    const int threads = j->grid_m * j->grid_n;
    prepack_job pj = {.j = j, .op = share_a ? &j->a : &j->b, .dst = dst, .rows = rows, .rows_pad = rows_pad, .r = r,
                      .chunks = threads};
    if (share_a) j->a_shared = dst;
    else j->b_shared = dst;
    for (int64_t b0 = 0; b0 < blocks && atomic_load(&j->status) == AMP_OK; b0 += per_chunk) {
        j->k0 = b0 * kern->kc;
        j->k1 = min64(j->k, (b0 + per_chunk) * kern->kc);
        amp_parallel_for(min64(per_chunk, blocks - b0) * threads, prepack_task, &pj);
        amp_parallel_for(threads, gemm_task, j);
    }
    return true;
}

/* Whether computing C^T fills the kernel's tiles enough better than computing C to pay for its
 * costs: the fraction of each tile that holds real elements, for both orientations (typically a
 * narrow C, n = 10 classes against nr = 32, or C with 64 rows against mr = 12). The transposed store
 * (ukernel_ct) costs a fixed in-register transpose per tile, which a long k amortizes: about 8 /
 * k_eff of the tile's time (k_eff = k / k_unit, so the bf16 pairs count once), hence the threshold
 * 1 + 8 / k_eff. Flipping also changes which operand is packed in which layout, which costs more than
 * a small gain in fill on the models' larger products, so a flip needs a 10% better fill at least;
 * the cap 1.25 serves tiny k. The choice depends on the shape only. */
static bool compute_transposed(const amp_gemm_kernel *kern, int64_t m, int64_t n, int64_t k) {
    if (!kern->ukernel_ct) return false;
    const double direct = amp_gemm_tile_fill(kern, m, n), flipped = amp_gemm_tile_fill(kern, n, m);
    double threshold = 1.0 + 8.0 / ((double)k / kern->k_unit);
    if (threshold < 1.10) threshold = 1.10;
    if (threshold > 1.25) threshold = 1.25;
    return flipped > threshold * direct;
}

/* Whether an fp32 A stored by rows (op(A) = A, rows lda floats apart) is read by rows in place
 * (ukernel_rb) rather than packed. The kernel then loads each k step's mr values from mr rows: where
 * the rows are a multiple of 4 KiB apart (lda = 1024, 2048, ...), all mr of them sit in one set of a
 * 64-set L1D and fill its ways (12 rows against 12 ways), and the B panels streaming through evict
 * them; there it packs. Elsewhere reading in place saves the copy of A, which a few B panels would not
 * amortize. (Twelve row streams at once also ask much of a core's prefetchers: a rule for other
 * cores may need to differ.) Reading a large weight in place instead (computing C^T, or reading it as
 * B) does not pay: each weight panel meets too few batch panels to hide its twelve row streams. */
static bool rows_in_place(int64_t lda) { return (lda * (int64_t)sizeof(float)) % 4096 != 0; }

/* ---- the public entry point ---- */

/* A stored rows x cols matrix with leading dimension ld: ld must cover a row, and the last element
 * must be addressable. */
static int check_matrix(int64_t rows, int64_t cols, int64_t ld, size_t esize) {
    if (ld < cols) return AMP_ERR_INVALID_ARGUMENT;
    if (rows == 0 || cols == 0) return AMP_OK;
    const int64_t limit = (int64_t)(PTRDIFF_MAX / (ptrdiff_t)esize); /* elements */
    if (cols > limit || rows - 1 > (limit - cols) / ld) return AMP_ERR_INVALID_ARGUMENT;
    return AMP_OK;
}

/* The checks of both entries, in amp/gemm.h's order, and the epilogue's matrices; a stored B when
 * `stored_b`, else B is the callback (b_given: B's pointer or callback is not NULL). */
static int check_args(amp_dtype ab_dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a,
                      int64_t lda, bool stored_b, bool b_given, int64_t ldb, const float *c, int64_t ldc,
                      const amp_gemm_epilogue *ep) {
    if (ab_dtype != AMP_F32 && ab_dtype != AMP_F16 && ab_dtype != AMP_BF16) return AMP_ERR_UNSUPPORTED_DTYPE;
    if (m < 0 || n < 0 || k < 0) return AMP_ERR_INVALID_ARGUMENT;
    const size_t esize = ab_dtype == AMP_F32 ? 4 : 2;
    int st;
    if ((st = check_matrix(trans_a ? k : m, trans_a ? m : k, lda, esize)) != AMP_OK) return st;
    if (stored_b && (st = check_matrix(trans_b ? n : k, trans_b ? k : n, ldb, esize)) != AMP_OK) return st;
    if ((st = check_matrix(m, n, ldc, sizeof(float))) != AMP_OK) return st;
    if (ep && ((ep->out && (st = check_matrix(m, n, ep->ldo, amp_dtype_size(ep->out_dtype))) != AMP_OK) ||
               (ep->acc && (st = check_matrix(m, n, ep->ldacc, sizeof(float))) != AMP_OK)))
        return st;
    if (ep && ep->relu_mask && ep->relu_mask_dtype != AMP_F32 && ep->relu_mask_dtype != AMP_F16 &&
        ep->relu_mask_dtype != AMP_BF16)
        return AMP_ERR_UNSUPPORTED_DTYPE;
    if (ep && ep->relu_mask && (st = check_matrix(m, n, ep->ldmask, amp_dtype_size(ep->relu_mask_dtype))) != AMP_OK)
        return st;
    if (ep && ep->absmax && ep->out && !ep->acc) return AMP_ERR_INVALID_ARGUMENT; /* C is not what is left */
    if (ep && ((ep->grad_mul && (st = check_matrix(m, n, ep->ldmul, sizeof(float))) != AMP_OK) ||
               (ep->gelu_deriv && (st = check_matrix(m, n, ep->ldderiv, sizeof(float))) != AMP_OK)))
        return st;
    if (ep && ep->residual && ep->res_round != AMP_F32 && ep->res_round != AMP_F16 && ep->res_round != AMP_BF16)
        return AMP_ERR_UNSUPPORTED_DTYPE;
    if (ep && ep->residual && (st = check_matrix(m, n, ep->ldres, sizeof(float))) != AMP_OK) return st;
    if (ep && ((ep->relu && ep->gelu) || (ep->gelu_deriv && !ep->gelu))) return AMP_ERR_INVALID_ARGUMENT;
    if ((!a && m > 0 && k > 0) || (!c && m > 0 && n > 0)) return AMP_ERR_NULL_POINTER;
    if (!b_given && (!stored_b || (k > 0 && n > 0))) return AMP_ERR_NULL_POINTER;
    return AMP_OK;
}

/* The product once the arguments are checked; op_bt is M = op(B)^T, stored or implicit; implicit_a,
 * when not NULL, is M = op(A) packed by a callback (a and lda unused, ep NULL). `tiles` (both operands
 * stored only): amp_gemm_kernel_stored's kernel (AMX's tiles), else amp_gemm_kernel_for's. */
static int gemm_run(amp_dtype ab_dtype, bool trans_a, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                    int64_t lda, const operand *implicit_a, operand op_bt, float beta, float *c, int64_t ldc,
                    const amp_gemm_epilogue *ep, bool tiles) {
    if (m == 0 || n == 0) {
        if (ep && ep->a_sums && m > 0 && k > 0) sum_rows_plain(ep->a_sums, a, ab_dtype, trans_a, lda, m, k);
        return AMP_OK;
    }
    if (alpha == 0.0f || k == 0) { /* C = beta C, A and B unread (BLAS) */
        for (int64_t i = 0; i < m; i++) {
            float *row = c + i * ldc;
            if (beta == 0.0f) {
                for (int64_t jj = 0; jj < n; jj++) row[jj] = 0.0f;
            } else if (beta != 1.0f) {
                for (int64_t jj = 0; jj < n; jj++) row[jj] *= beta;
            }
        }
        if (ep) epilogue(ep, c, ldc, 0, m, 0, n);
        stream_fence_after(ep);
        if (ep && ep->a_sums) sum_rows_plain(ep->a_sums, a, ab_dtype, trans_a, lda, m, k);
        return AMP_OK;
    }

    const size_t esize = ab_dtype == AMP_F32 ? 4 : 2;
    const amp_gemm_kernel *kern =
        tiles ? amp_gemm_kernel_stored(amp_isa_active(), ab_dtype) : amp_gemm_kernel_for(amp_isa_active(), ab_dtype);
    const operand op_a = implicit_a ? *implicit_a : (operand){.src = a, .ld = lda, .trans = trans_a}; /* M = op(A) */
    const bool stored_f32_a = !implicit_a && ab_dtype == AMP_F32;
    const bool transposed = compute_transposed(kern, m, n, k);
    /* a_sums from the packed A panels: fp32 panels of op(A) itself (not of op(B)^T, as when C^T is
     * computed); A is then packed everywhere (no ukernel_ab or ukernel_rb) */
    float *packed_sums = ep && ep->a_sums && !transposed && kern->packed == AMP_GEMM_PACKED_F32 ? ep->a_sums : NULL;
    const bool in_place = atomic_load_explicit(&gemm_a_in_place, memory_order_relaxed);
    gemm_job job = {
        .kern = kern,
        .ukernel = transposed ? kern->ukernel_ct : kern->ukernel,
        /* in place: M_a is op(A) = A^T, stored fp32 (the kernel reads fp32 where packing would decode) */
        .ukernel_ab = !transposed && !packed_sums && trans_a && stored_f32_a && in_place ? kern->ukernel_ab : NULL,
        .ukernel_rb = !transposed && !packed_sums && !trans_a && stored_f32_a && in_place && rows_in_place(lda)
                          ? kern->ukernel_rb
                          : NULL,
        .esize = esize,
        .a = transposed ? op_bt : op_a,
        .b = transposed ? op_a : op_bt,
        .m = transposed ? n : m,
        .n = transposed ? m : n,
        .k = k,
        .alpha = alpha,
        .beta = beta,
        .c = c,
        .ldc = ldc,
        .c_row = transposed ? 1 : ldc,
        .c_col = transposed ? ldc : 1,
        .ep = ep,
        .a_sums = packed_sums,
        .k0 = 0,
        .k1 = k,
    };
    atomic_init(&job.status, AMP_OK);
    const double flops = 2.0 * (double)m * (double)n * (double)k;
    int threads = amp_parallel_max_threads();
    if (flops < (double)threads * GEMM_MIN_FLOPS_PER_THREAD) threads = (int)(flops / GEMM_MIN_FLOPS_PER_THREAD);
    if (threads < 1) threads = 1;
    choose_grid((job.m + kern->mr - 1) / kern->mr, (job.n + kern->nr - 1) / kern->nr, kern->mr, kern->nr, threads,
                job.n >= job.m, &job.grid_m, &job.grid_n);
    if (split_finer(&job, flops)) {
        amp_parallel_for_dynamic((int64_t)job.grid_m * job.grid_n, gemm_task, &job);
    } else {
        if (!run_shared(&job)) amp_parallel_for((int64_t)job.grid_m * job.grid_n, gemm_task, &job);
    }
    const int st = atomic_load(&job.status);
    if (st == AMP_OK && ep && ep->a_sums && !packed_sums) sum_rows_plain(ep->a_sums, a, ab_dtype, trans_a, lda, m, k);
    return st;
}

/* The product of two stored operands, checked; `tiles` as gemm_run's */
static int gemm_stored(amp_dtype ab_dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const void *a, int64_t lda, const void *b, int64_t ldb, float beta, float *c, int64_t ldc,
                       const amp_gemm_epilogue *ep, bool tiles) {
    const int st = check_args(ab_dtype, trans_a, trans_b, m, n, k, a, lda, true, b != NULL, ldb, c, ldc, ep);
    if (st != AMP_OK) return st;
    const operand op_bt = {.src = b, .ld = ldb, .trans = !trans_b}; /* M = op(B)^T */
    return gemm_run(ab_dtype, trans_a, m, n, k, alpha, a, lda, NULL, op_bt, beta, c, ldc, ep, tiles);
}

int amp_gemm_fused(amp_dtype ab_dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const void *a, int64_t lda, const void *b, int64_t ldb, float beta, float *c, int64_t ldc,
                   const amp_gemm_epilogue *ep) {
    return gemm_stored(ab_dtype, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ep, true);
}

int amp_gemm_untiled(amp_dtype ab_dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const void *a, int64_t lda, const void *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    return gemm_stored(ab_dtype, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL, false);
}

int amp_gemm_implicit_b(amp_dtype ab_dtype, bool trans_a, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                        int64_t lda, amp_gemm_pack_cb pack_b, const void *pack_arg, float beta, float *c, int64_t ldc,
                        const amp_gemm_epilogue *ep) {
    const int st = check_args(ab_dtype, trans_a, false, m, n, k, a, lda, false, pack_b != NULL, 0, c, ldc, ep);
    if (st != AMP_OK) return st;
    const operand op_bt = {.cb = pack_b, .cb_arg = pack_arg};
    return gemm_run(ab_dtype, trans_a, m, n, k, alpha, a, lda, NULL, op_bt, beta, c, ldc, ep, false);
}

int amp_gemm_implicit_ab(amp_dtype ab_dtype, int64_t m, int64_t n, int64_t k, float alpha, amp_gemm_pack_cb pack_a,
                         const void *arg_a, amp_gemm_pack_cb pack_b, const void *arg_b, float beta, float *c,
                         int64_t ldc) {
    if (ab_dtype != AMP_F32 && ab_dtype != AMP_F16 && ab_dtype != AMP_BF16) return AMP_ERR_UNSUPPORTED_DTYPE;
    if (m < 0 || n < 0 || k < 0 || check_matrix(m, n, ldc, sizeof(float)) != AMP_OK) return AMP_ERR_INVALID_ARGUMENT;
    if (!pack_a || !pack_b || (!c && m > 0 && n > 0)) return AMP_ERR_NULL_POINTER;
    const operand op_a = {.cb = pack_a, .cb_arg = arg_a}, op_bt = {.cb = pack_b, .cb_arg = arg_b};
    return gemm_run(ab_dtype, false, m, n, k, alpha, NULL, 0, &op_a, op_bt, beta, c, ldc, NULL, false);
}

void amp_gemm_epilogue_apply(const amp_gemm_epilogue *ep, float *c, int64_t ldc, int64_t m, int64_t n) {
    if (ep && m > 0 && n > 0) epilogue(ep, c, ldc, 0, m, 0, n);
    stream_fence_after(ep);
}

bool amp_gemm_sums_a_fused(amp_dtype ab_dtype, int64_t m, int64_t n, int64_t k) {
    const amp_gemm_kernel *kern = amp_gemm_kernel_stored(amp_isa_active(), ab_dtype);
    return kern && m > 0 && n > 0 && k > 0 && kern->packed == AMP_GEMM_PACKED_F32 && !compute_transposed(kern, m, n, k);
}

bool amp_gemm_computes_transposed(amp_dtype ab_dtype, int64_t m, int64_t n, int64_t k) {
    const amp_gemm_kernel *kern = amp_gemm_kernel_for(amp_isa_active(), ab_dtype); /* an implicit product's */
    return kern && m > 0 && n > 0 && k > 0 && compute_transposed(kern, m, n, k);
}

int amp_gemm(amp_dtype ab_dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
             const void *a, int64_t lda, const void *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    return amp_gemm_fused(ab_dtype, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL);
}
