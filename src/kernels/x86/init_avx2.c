/* The AVX2 path's kernel table (AVX2 + FMA + F16C), on top of the reference's (kernels/kernels.h).
 * Only pointer assignments: the Makefile builds this file with the path's flags, which is harmless,
 * since amp_kernels_for calls it only on a CPU that runs the path. */
#include "../kernels.h"

void amp_kernels_init_avx2(amp_kernels *k) {
    amp_convert_kernels_avx2(&k->convert);
    amp_elem_kernels_avx2(&k->elem);
    amp_vmath_kernels_avx2(&k->vecmath);
    amp_unscale_kernels_avx2(&k->unscale);
    amp_lstm_kernels_avx2(&k->lstm);
    amp_gemm_kernels_avx2(&k->gemm);
    amp_conv_kernels_avx2(&k->conv);
    amp_pool_kernels_avx2(&k->pool);
    amp_update_kernels_avx2(&k->update);
    amp_fp8_kernels_avx2(&k->fp8);
}
