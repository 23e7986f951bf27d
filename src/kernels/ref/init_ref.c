/* The reference path's kernel table (kernels/kernels.h): every entry a portable C kernel, except the
 * ones whose NULL tells an op to take its composed route (the families' headers). Every table starts
 * from this one; a SIMD path's init then overrides what it has. */
#include "../kernels.h"

void amp_kernels_init_ref(amp_kernels *k) {
    *k = (amp_kernels){0};
    amp_convert_kernels_ref(&k->convert);
    amp_elem_kernels_ref(&k->elem);
    amp_vmath_kernels_ref(&k->vecmath);
    amp_unscale_kernels_ref(&k->unscale);
    amp_lstm_kernels_ref(&k->lstm);
    amp_gemm_kernels_ref(&k->gemm);
    amp_conv_kernels_ref(&k->conv);
    amp_pool_kernels_ref(&k->pool);
    amp_update_kernels_ref(&k->update);
    amp_fp8_kernels_ref(&k->fp8);
}
