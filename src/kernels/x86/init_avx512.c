/* The AVX-512 path's kernel table (AVX-512 F/BW/VL, with AVX512-BF16 where the CPU has it), on top of
 * the reference's (kernels/kernels.h). The conversions and the optimizer's loops take the AVX2
 * kernels first (every CPU with this path runs AVX2 too), so that what AVX-512 lacks there is AVX2's;
 * the other families go from the reference straight to AVX-512 (conv2d must not take AVX2's direct
 * tile, which runs products that this path leaves to its implicit GEMM). Only pointer assignments:
 * the Makefile builds this file with the path's flags, which is harmless, since amp_kernels_for calls
 * it only on a CPU that runs the path. */
#include "../kernels.h"

void amp_kernels_init_avx512(amp_kernels *k) {
    amp_convert_kernels_avx2(&k->convert); /* (the AVX-512 kernels override each of these) */
    amp_convert_kernels_avx512(&k->convert);
    amp_elem_kernels_avx512(&k->elem);
    amp_vmath_kernels_avx512(&k->vecmath);
    amp_unscale_kernels_avx512(&k->unscale);
    amp_lstm_kernels_avx512(&k->lstm); /* its bf16 act16 kernels by AVX512-BF16 (lstm_avx512.c) */
    amp_gemm_kernels_avx512(&k->gemm); /* bf16_dot with AVX512-BF16 (gemm_avx512.c) */
    /* bf16_tiles (gemm_amx.c): only the amx method runs it, which asks Linux for the tiles first */
    if (amp_cpu_get_features()->amx_bf16) amp_gemm_kernels_amx(&k->gemm);
    amp_conv_kernels_avx512(&k->conv);
    amp_pool_kernels_avx512(&k->pool);
    amp_update_kernels_avx2(&k->update); /* the updates are memory-bound: the AVX2 loops */
    amp_update_kernels_avx512(&k->update); /* the norm's sum of squares */
    amp_fp8_kernels_avx2(&k->fp8); /* (the AVX-512 kernels override each of these) */
    amp_fp8_kernels_avx512(&k->fp8);
}
