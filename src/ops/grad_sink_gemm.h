/* Internal: a GEMM's fp32 result written into a gradient sink (amp_grad_sink, tensor/autograd.h) by
 * the GEMM's epilogue (gemm/gemm_fused.h), block by block while C is in cache, instead of through a
 * full fp32 scratch copy and amp_grad_accumulate's second pass over it. The epilogue's rounding and
 * acc step are the sink's per-element contract, so the bits are amp_grad_accumulate's. */
#ifndef AMP_GRAD_SINK_GEMM_H
#define AMP_GRAD_SINK_GEMM_H

#include "amp/dtype.h"
#include "../gemm/gemm_fused.h"
#include "../tensor/autograd.h"

/* The epilogue that writes rows of n gradient values starting at element `off` of the sink. */
static inline amp_gemm_epilogue amp_sink_epilogue(const amp_grad_sink *s, int64_t off, int64_t n) {
    const int64_t ld = n > 0 ? n : 1;
    return (amp_gemm_epilogue){.out = s->out ? (char *)s->out + (size_t)off * amp_dtype_size(s->out_dtype) : NULL,
                               .out_dtype = s->out_dtype,
                               .ldo = ld,
                               .acc = s->acc ? s->acc + off : NULL,
                               .ldacc = ld,
                               .acc_store = s->acc_store};
}

/* The sink's own storage when all it does is store fp32 values (a new fp32 gradient): the GEMM can
 * write C there directly (the epilogue's fp32 -> fp32 rounding is a copy); else NULL. */
static inline float *amp_sink_direct(const amp_grad_sink *s) {
    return s->out && !s->acc && s->out_dtype == AMP_F32 ? (float *)s->out : NULL;
}

#endif /* AMP_GRAD_SINK_GEMM_H */
