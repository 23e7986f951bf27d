/* amp_gemm_direct_f32 (gemm_direct.h): gemm.c's loops without the cache blocks of m and n, the threads
 * or the packing where the kernels can read an operand in place. */
#include "gemm_direct.h"

#include "amp/cpu.h"
#include "../kernels/gemm_kernels.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

static const amp_gemm_kernel *direct_kernel(void) {
    const amp_gemm_kernel *kern = amp_gemm_kernel_for(amp_isa_active(), AMP_F32);
    return kern && kern->ukernel_ab && kern->ukernel_rb && kern->packed == AMP_GEMM_PACKED_F32 ? kern : NULL;
}

bool amp_gemm_direct_available(void) { return direct_kernel() != NULL; }

int64_t amp_gemm_direct_scratch(int64_t n, int64_t k) {
    const amp_gemm_kernel *kern = direct_kernel();
    if (!kern) return 0;
    /* a packed B of n columns (or its last partial panel) and one partial A panel, per k block */
    return (round_up(n > 0 ? n : 1, kern->nr) + kern->mr) * min64(k > 0 ? k : 1, kern->kc);
}

bool amp_gemm_direct_f32(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_rs, int64_t a_cs,
                         const float *b, int64_t b_rs, int64_t b_cs, float *c, int64_t ldc, float *scratch) {
    const amp_gemm_kernel *kern = direct_kernel();
    if (!kern || (a_cs != 1 && a_rs != 1) || (b_cs != 1 && b_rs != 1)) return false;
    if (m <= 0 || n <= 0) return true;
    if (k <= 0 || alpha == 0.0f) { /* amp_gemm's C = beta C with beta 0 */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = 0.0f;
        return true;
    }
    const int mr = kern->mr, nr = kern->nr;
    const bool a_rows = a_cs == 1;   /* A by rows (ukernel_rb), else by columns (ukernel_ab) */
    const bool b_in_place = b_cs == 1; /* B's rows read in place; else packed (its k steps are strided) */
    const int64_t a_ld = a_rows ? a_rs : a_cs;
    const int64_t kc_max = min64(k, kern->kc);
    const int64_t n_full = b_in_place ? n / nr * nr : 0; /* columns whose panels are read in place */
    float *bbuf = scratch, *abuf = scratch + round_up(n, nr) * kc_max;
    for (int64_t pc = 0; pc < k; pc += kern->kc) {
        const int64_t kc = min64(kern->kc, k - pc);
        const float beta = pc == 0 ? 0.0f : 1.0f;
        /* the packed panels, [kc][nr] each, from column n_full on (pack's M[j, p] = B(p, j)) */
        if (n_full < n) {
            const float *src = b_in_place ? b + pc * b_rs + n_full : b + pc + n_full * b_cs;
            kern->pack(bbuf, src, b_in_place ? b_rs : b_cs, b_in_place, n - n_full, kc, nr);
        }
        const float *a_pc = a + pc * (a_rows ? 1 : a_cs);
        for (int64_t ir = 0; ir < m; ir += mr) {
            const int m_tile = (int)min64(mr, m - ir);
            const float *ap = a_pc + ir * (a_rows ? a_rs : 1);
            amp_gemm_ukernel_strided_fn uk = a_rows ? kern->ukernel_rb : kern->ukernel_ab;
            int64_t lda = a_ld;
            if (m_tile < mr) { /* pack's M[i, p] = A(i, p), rows past m zero */
                kern->pack(abuf, ap, a_ld, !a_rows, m_tile, kc, mr);
                ap = abuf, uk = kern->ukernel_ab, lda = mr;
            }
            float *crow = c + ir * ldc;
            for (int64_t jr = 0; jr < n_full; jr += nr)
                uk(kc, ap, lda, b + pc * b_rs + jr, b_rs, crow + jr, ldc, m_tile, nr, alpha, beta);
            for (int64_t jr = n_full; jr < n; jr += nr)
                uk(kc, ap, lda, bbuf + (jr - n_full) * kc, nr, crow + jr, ldc, m_tile, (int)min64(nr, n - jr), alpha,
                   beta);
        }
    }
    return true;
}
