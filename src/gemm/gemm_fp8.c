/* amp_gemm_fp8 (amp/gemm.h): both operands are packed by callbacks of the GEMM driver
 * (gemm_implicit.h) that decode the stored elements, block factors multiplied in, straight into the
 * kernel's panels: to bf16 pairs for the VDPBF16PS kernel where the decoded values are exact in bf16
 * (the bf16 route), else to fp32 panels for the fp32 kernel (the fp32 route).
 *
 * Panels are filled a chunk of k at a time through a small buffer on the stack: the active path's
 * decode kernel (kernels/fp8_kernels.h) writes the chunk's rows of the stored matrix as fp32 or bf16
 * values, and the kernel's own pack routine moves them into the panels, exactly as amp_gemm packs a
 * stored fp32 or bf16 operand. The buffer (16 KiB) stays in L1, so each element crosses memory once,
 * as a byte. The driver then runs the same loops and micro-kernels as amp_gemm
 * on those packed values, which is why the bits are those of amp_gemm on the decoded operands.
 *
 * Bf16 pairs from fp8 skip the stage, power-of-2 block factors added to the exponents where every
 * product stays a normal bf16:
 *   - where k runs down the stored columns (M stored transposed), a pair is two neighbouring stored
 *     rows at the same column, and the decode_pairs kernel writes each pair of stored rows into every
 *     panel at once (blocks an even number of rows high, such as MX's 32 x 1 and DeepSeek's 128 x 1
 *     and 128 x 128);
 *   - where k runs along the stored rows and the operand has block factors, the decode_panel kernel
 *     decodes a panel's rows and transposes them into it in registers (blocks of whole 32-value
 *     chunks along k: MX's 1 x 32, DeepSeek's 1 x 128 and 128 x 128), where the stage would decode
 *     a short run per factor. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "amp/gemm.h"
#include "amp/status.h"
#include "../core/alloc_internal.h"
#include "gemm_fp8.h"
#include "gemm_implicit.h"
#include "../kernels/fp8_kernels.h"
#include "../kernels/gemm_kernels.h"

/* The stage: 16 KiB of stack, in L1. k values per staged chunk are even (a pair never straddles two
 * chunks): for M stored by rows, one panel's rows of as many values as fit (128 fp32 or 256 bf16 for
 * 32 rows, more for 12); where M is stored transposed, 32 stored rows of a strip of M's columns (128
 * fp32 or 256 bf16 values wide, whole panels). So each decode call has a long row. */
enum { STAGE_BYTES = AMP_GEMM_MAX_TILE * 128 * 4, CHUNK_K_TRANS = 32 };

/* Whether x's decoded values, block factors multiplied in, are exact in bf16: an fp8 or bf16 dtype,
 * and no block factors or only powers of 2 (any fp32 whose mantissa field is 0: 0 and inf too). */
static bool bf16_exact(const amp_gemm_fp8_operand *x, int64_t sr, int64_t sc) {
    if (x->dtype == AMP_F32) return false;
    if (!x->scale_inv || x->block_rows == 0 || sr == 0 || sc == 0) return true;
    const int64_t br = (sr + x->block_rows - 1) / x->block_rows, bc = (sc + x->block_cols - 1) / x->block_cols;
    for (int64_t i = 0; i < br; i++)
        for (int64_t j = 0; j < bc; j++) {
            uint32_t u;
            memcpy(&u, &x->scale_inv[i * x->ld_scale + j], sizeof u);
            if (u & 0x7FFFFFu) return false;
        }
    return true;
}

bool amp_gemm_fp8_uses_bf16(int64_t m, int64_t n, int64_t k, const amp_gemm_fp8_operand *a,
                            const amp_gemm_fp8_operand *b) {
    const amp_gemm_kernel *kern = amp_gemm_kernel_active(AMP_BF16);
    if (!kern || kern->packed != AMP_GEMM_PACKED_BF16_PAIRS) return false;
    int64_t ar, ac, br, bc;
    amp_gemm_fp8_stored_shape(a, m, k, &ar, &ac);
    amp_gemm_fp8_stored_shape(b, k, n, &br, &bc);
    return bf16_exact(a, ar, ac) && bf16_exact(b, br, bc);
}

/* One operand as its pack callback sees it: M[i, p] = stored[m_trans ? (p, i) : (i, p)]. */
typedef struct pack_arg {
    const amp_gemm_fp8_operand *x;
    bool m_trans;
    bool direct;                 /* the kernel packs the stored matrix itself (its dtype, no block factors) */
    amp_fp8_decode_pairs_fn pairs; /* or, for bf16 pairs from fp8 with M stored transposed and no
                                    * factors or blocks an even number of rows high: two stored rows
                                    * straight into the panels' pairs (pack_pairs) */
    amp_fp8_decode_panel_fn panel; /* or, for bf16 pairs from fp8 with M stored by rows and blocks of
                                    * whole 32-value chunks along k: each panel's rows straight into it
                                    * (pack_panel) */
    const int16_t *adds;         /* pairs / panel with block factors: the operand's exponent adds
                                  * (adds_table), or NULL: those routes then stage */
    int64_t ld_adds;
    amp_fp8_decode_row_fn decode; /* else: stored rows to the kernel's source dtype, then kern->pack */
    size_t es, os;               /* bytes per stored and per staged element */
} pack_arg;

/* Decodes cols elements of stored row `row` from column col0 into dst, with their block factors. */
static void decode_stored(const pack_arg *pa, void *dst, int64_t row, int64_t col0, int64_t cols) {
    const amp_gemm_fp8_operand *x = pa->x;
    const char *src = (const char *)x->data + (size_t)(row * x->ld + col0) * pa->es;
    if (!x->scale_inv || x->block_rows == 0) {
        pa->decode(dst, src, (size_t)cols, NULL, 0, 0);
        return;
    }
    const float *f = x->scale_inv + (row / x->block_rows) * x->ld_scale + col0 / x->block_cols;
    pa->decode(dst, src, (size_t)cols, f, (size_t)(x->block_cols - col0 % x->block_cols), (size_t)x->block_cols);
}

enum { PANEL_CHUNK = 32, PANEL_CHUNKS = 32 }; /* decode_panel: values per exponent add; adds per row */

/* The exponent adds of an operand with block factors (fp8_kernels.h factor_adds), computed once per
 * call: for the decode_pairs route (M stored transposed) adds[(i / block_rows) * ld + j] for stored
 * column j (a factor's add repeated over its block's columns); for decode_panel (M stored by rows;
 * blocks of whole 32-value chunks along k) one add per factor, adds[(i / block_rows) * ld + j /
 * block_cols], which pack_panel spreads over each panel's chunks where a block has several. One kernel
 * call where the block rows are contiguous. Returns the table (to amp_free), or NULL where a factor is
 * not an exponent add, the blocks do not fit the route, or memory is short: that route then stages
 * (decode_row with the fp32 factors, the same bits). */
static int16_t *adds_table(const amp_gemm_fp8_operand *x, int64_t sr, int64_t sc, bool m_trans, int64_t *ld) {
    const amp_fp8_kernels *fk = amp_fp8_kernels_active();
    const int64_t nbc = (sc + x->block_cols - 1) / x->block_cols, nbr = (sr + x->block_rows - 1) / x->block_rows;
    if (!m_trans && x->block_cols % PANEL_CHUNK != 0) return NULL;
    const bool spread = m_trans && x->block_cols > 1; /* pairs: a factor's add repeated over its columns */
    *ld = spread ? sc : nbc;
    const int64_t size = spread ? nbr * sc : 0; /* the spread table, then the factors' adds */
    int16_t *t = amp_malloc((size_t)(size + nbr * nbc) * sizeof(int16_t)), *f = t ? t + size : NULL;
    if (!t) return NULL;
    bool ok = true;
    if (x->ld_scale == nbc) ok = fk->factor_adds(f, x->scale_inv, (size_t)(nbr * nbc), x->dtype);
    else
        for (int64_t br = 0; br < nbr && ok; br++)
            ok = fk->factor_adds(f + br * nbc, x->scale_inv + br * x->ld_scale, (size_t)nbc, x->dtype);
    if (!ok) {
        amp_free(t);
        return NULL;
    }
    for (int64_t br = 0; br < nbr && spread; br++) {
        int16_t *row = t + br * sc;
        for (int64_t j = 0, c = 0; j < nbc; j++) /* the last block may be partial */
            for (int64_t e = 0; e < x->block_cols && c < sc; e++) row[c++] = f[br * nbc + j];
    }
    return t;
}

enum { PREFETCH_ROWS = 8 }; /* stored rows ahead that pack_pairs asks the cache for */

/* The decode_pairs route (see the top of this file): false where the operand has block factors but no
 * adds (the caller then stages the region). Pair q of M's row i is (stored[p0 + 2q][i],
 * stored[p0 + 2q + 1][i]); p0 is even (k blocks are whole pairs) and blocks are an even number of rows
 * high (make_pack_arg), so both rows of a pair share their factors. */
static bool pack_pairs(const pack_arg *pa, void *dst, int64_t i0, int64_t rows, int64_t p0, int64_t kc, int r) {
    const amp_gemm_fp8_operand *x = pa->x;
    const bool blocks = x->scale_inv && x->block_rows > 0;
    if (blocks && !pa->adds) return false;
    const int64_t kq = (kc + 1) / 2;
    const uint8_t *base = (const uint8_t *)x->data + p0 * x->ld + i0;
    for (int64_t q = 0; q < kq; q++) {
        const int64_t row = p0 + 2 * q;
        const uint8_t *s0 = base + 2 * q * x->ld;
        if (2 * q + PREFETCH_ROWS + 1 < kc) /* the rows a few pairs on: their loads are what the kernel waits for */
            for (int64_t c = 0; c < rows; c += 64) {
                __builtin_prefetch(s0 + PREFETCH_ROWS * x->ld + c);
                __builtin_prefetch(s0 + (PREFETCH_ROWS + 1) * x->ld + c);
            }
        pa->pairs((uint16_t *)dst + 2 * q * r, (size_t)(2 * r * kq), s0, 2 * q + 1 < kc ? s0 + x->ld : NULL,
                  blocks ? pa->adds + (row / x->block_rows) * pa->ld_adds + i0 : NULL, (size_t)rows, r);
    }
    return true;
}

/* The decode_panel route for one panel of M's rows (stored rows i0 .. i0 + ri - 1, k from p0, kc
 * values): false, having written nothing, where the operand has block factors but no adds or p0 does
 * not start a 32-value chunk (the caller then stages). The table is the kernel's adds as it stands
 * for MX's 1 x 32 blocks; blocks of several chunks or rows get theirs spread over the panel's rows and
 * chunks here. */
static bool pack_panel(const pack_arg *pa, void *dst, int64_t i0, int64_t ri, int64_t p0, int64_t kc, int r) {
    const amp_gemm_fp8_operand *x = pa->x;
    const bool blocks = x->scale_inv && x->block_rows > 0;
    const int64_t chunks = (kc + PANEL_CHUNK - 1) / PANEL_CHUNK;
    if (blocks && (!pa->adds || p0 % PANEL_CHUNK != 0)) return false;
    const int16_t *adds = NULL;
    size_t ld_adds = (size_t)chunks;
    int16_t local[AMP_GEMM_MAX_TILE * PANEL_CHUNKS];
    if (blocks && x->block_rows == 1 && x->block_cols == PANEL_CHUNK) {
        adds = pa->adds + i0 * pa->ld_adds + p0 / PANEL_CHUNK, ld_adds = (size_t)pa->ld_adds;
    } else if (blocks) {
        if (chunks > PANEL_CHUNKS || ri > AMP_GEMM_MAX_TILE) return false;
        const int64_t per = x->block_cols / PANEL_CHUNK, c0 = p0 / PANEL_CHUNK;
        for (int64_t i = 0; i < ri; i++) {
            const int16_t *f = pa->adds + ((i0 + i) / x->block_rows) * pa->ld_adds;
            for (int64_t c = 0, b = c0 / per, left = per - c0 % per; c < chunks; c++) { /* left: chunks of block b */
                local[i * chunks + c] = f[b];
                if (--left == 0) b++, left = per;
            }
        }
        adds = local;
    }
    pa->panel(dst, (const uint8_t *)x->data + i0 * x->ld + p0, (size_t)x->ld, adds, ld_adds, (size_t)ri, (size_t)kc, r);
    return true;
}

/* amp_gemm_pack_cb: rows [i0, i0 + rows) x [p0, p0 + kc) of M into panels of r rows (gemm_implicit.h) */
static void pack_operand(const void *arg, const amp_gemm_kernel *kern, void *dst, int64_t i0, int64_t rows, int64_t p0,
                         int64_t kc, int r) {
    const pack_arg *pa = arg;
    const amp_gemm_fp8_operand *x = pa->x;
    if (pa->direct) {
        const int64_t off = pa->m_trans ? p0 * x->ld + i0 : i0 * x->ld + p0;
        kern->pack(dst, (const char *)x->data + (size_t)off * pa->es, x->ld, pa->m_trans, rows, kc, r);
        return;
    }
    if (pa->pairs && pack_pairs(pa, dst, i0, rows, p0, kc, r)) return;
    _Alignas(64) unsigned char stage[STAGE_BYTES];
    const int64_t kc_pad = (kc + kern->k_unit - 1) / kern->k_unit * kern->k_unit;
    const size_t ps = (size_t)kern->packed_size;
    if (!pa->m_trans) { /* M's rows are stored rows: per panel, ri rows of ch values */
        const int64_t chunk = (int64_t)(STAGE_BYTES / pa->os) / r / 2 * 2; /* 128 to 680 values */
        for (int64_t ib = 0; ib < rows; ib += r) {
            const int64_t ri = rows - ib < r ? rows - ib : r;
            char *panel = (char *)dst + (size_t)(ib * kc_pad) * ps;
            if (pa->panel && pack_panel(pa, panel, i0 + ib, ri, p0, kc, r)) continue;
            for (int64_t pc = 0; pc < kc; pc += chunk) {
                const int64_t ch = kc - pc < chunk ? kc - pc : chunk;
                for (int64_t i = 0; i < ri; i++) {
                    if (pc + ch < kc) { /* this row's next chunk, read after the panel's other rows' */
                        const char *next = (const char *)x->data + (size_t)((i0 + ib + i) * x->ld + p0 + pc + ch) * pa->es;
                        for (int64_t c = 0; c < ch * (int64_t)pa->es && pc + ch + c / (int64_t)pa->es < kc; c += 64)
                            __builtin_prefetch(next + c);
                    }
                    decode_stored(pa, stage + (size_t)(i * ch) * pa->os, i0 + ib + i, p0 + pc, ch);
                }
                kern->pack(panel + (size_t)(pc * r) * ps, stage, ch, false, ri, ch, r);
            }
        }
        return;
    }
    /* M's columns are stored rows: a strip of whole panels, w columns of M wide, ch stored rows at a
     * time (each decoded in one call), then each panel of the strip packed from the stage */
    const int64_t wmax = (int64_t)(STAGE_BYTES / pa->os) / CHUNK_K_TRANS / r * r;
    for (int64_t ib = 0; ib < rows; ib += wmax) {
        const int64_t w = rows - ib < wmax ? rows - ib : wmax;
        for (int64_t pc = 0; pc < kc; pc += CHUNK_K_TRANS) {
            const int64_t ch = kc - pc < CHUNK_K_TRANS ? kc - pc : CHUNK_K_TRANS;
            for (int64_t q = 0; q < ch; q++)
                decode_stored(pa, stage + (size_t)(q * w) * pa->os, p0 + pc + q, i0 + ib, w);
            for (int64_t jb = 0; jb < w; jb += r) {
                const int64_t ri = w - jb < r ? w - jb : r;
                char *panel = (char *)dst + (size_t)((ib + jb) * kc_pad) * ps;
                kern->pack(panel + (size_t)(pc * r) * ps, stage + (size_t)jb * pa->os, w, true, ri, ch, r);
            }
        }
    }
}

static pack_arg make_pack_arg(const amp_gemm_fp8_operand *x, bool m_trans, bool bf16) {
    const amp_dtype kdt = bf16 ? AMP_BF16 : AMP_F32; /* the dtype the kernel's pack reads */
    const bool no_blocks = !x->scale_inv || x->block_rows == 0;
    const bool fp8 = x->dtype == AMP_F8E4M3 || x->dtype == AMP_F8E5M2;
    return (pack_arg){
        .x = x,
        .m_trans = m_trans,
        .direct = x->dtype == kdt && no_blocks,
        .pairs = bf16 && fp8 && m_trans && (no_blocks || x->block_rows % 2 == 0)
                     ? amp_fp8_kernels_active()->decode_pairs[x->dtype]
                     : NULL,
        /* without block factors the stage is as fast (a run of one row per decode call) */
        .panel = bf16 && fp8 && !m_trans && !no_blocks ? amp_fp8_kernels_active()->decode_panel[x->dtype] : NULL,
        .decode = amp_fp8_kernels_active()->decode_row[x->dtype][bf16],
        .es = amp_dtype_size(x->dtype),
        .os = amp_dtype_size(kdt),
    };
}

/* The adds table of an fp8 operand with block factors whose bf16-route packing reads one (decode_pairs
 * for M stored transposed with blocks an even number of rows high, decode_panel for M stored by rows),
 * else NULL. */
static int16_t *operand_adds(const amp_gemm_fp8_operand *x, int64_t sr, int64_t sc, bool m_trans, int64_t *ld) {
    const bool fp8 = x->dtype == AMP_F8E4M3 || x->dtype == AMP_F8E5M2;
    if (!fp8 || !x->scale_inv || x->block_rows == 0 || sr == 0 || sc == 0) return NULL;
    if (m_trans && x->block_rows % 2 != 0) return NULL;
    return adds_table(x, sr, sc, m_trans, ld);
}

int amp_gemm_fp8(int64_t m, int64_t n, int64_t k, float alpha, const amp_gemm_fp8_operand *a,
                 const amp_gemm_fp8_operand *b, float beta, float *c, int64_t ldc) {
    const int st = amp_gemm_fp8_check(m, n, k, a, b, c, ldc);
    if (st != AMP_OK) return st;
    const float alpha_eff = amp_gemm_fp8_alpha(alpha, a, b);
    if (m == 0 || n == 0) return AMP_OK;
    if (k == 0 || alpha_eff == 0.0f) {
        amp_gemm_fp8_scale_c(m, n, beta, c, ldc);
        return AMP_OK;
    }
    /* the route of amp_gemm_fp8_uses_bf16; an operand whose adds table was built has only power-of-2
     * factors (the table's check is the stricter one), so its factors need no second look */
    const amp_gemm_kernel *kern = amp_gemm_kernel_active(AMP_BF16);
    const bool pairs = kern && kern->packed == AMP_GEMM_PACKED_BF16_PAIRS && a->dtype != AMP_F32 && b->dtype != AMP_F32;
    int64_t ar, ac, br, bc, lda = 0, ldb = 0;
    amp_gemm_fp8_stored_shape(a, m, k, &ar, &ac);
    amp_gemm_fp8_stored_shape(b, k, n, &br, &bc);
    int16_t *ta = pairs ? operand_adds(a, ar, ac, a->trans, &lda) : NULL;
    int16_t *tb = pairs ? operand_adds(b, br, bc, !b->trans, &ldb) : NULL;
    const bool bf16 = pairs && (ta || bf16_exact(a, ar, ac)) && (tb || bf16_exact(b, br, bc));
    /* M_a = op(A): A's stored rows when not transposed; M_b = op(B)^T: B's stored rows when transposed */
    pack_arg pa = make_pack_arg(a, a->trans, bf16), pb = make_pack_arg(b, !b->trans, bf16);
    if (bf16) pa.adds = ta, pa.ld_adds = lda, pb.adds = tb, pb.ld_adds = ldb;
    const int rc = amp_gemm_implicit_ab(bf16 ? AMP_BF16 : AMP_F32, m, n, k, alpha_eff, pack_operand, &pa, pack_operand,
                                        &pb, beta, c, ldc);
    amp_free(ta), amp_free(tb);
    return rc;
}
