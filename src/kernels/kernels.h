/* Internal: the kernel table, one per SIMD path: every kernel that amp chooses by path, in one
 * struct (BLIS's context).
 *
 * A table is filled once, at first use: first with the reference kernels (amp_kernels_init_ref,
 * kernels/ref/init_ref.c), then by the path's own init function, which overrides the entries its
 * kernels cover (kernels/x86/init_avx2.c, init_avx512.c). So an entry a path lacks is the reference's:
 * slow, never wrong. Where "no fast version" must be seen by the caller (an op that then takes
 * another route, e.g. decoding to fp32 first), the entry is NULL on the paths without one, and the
 * family's header says so. The path is amp_isa_active() (AMP_ISA, amp_isa_set; amp/cpu.h).
 *
 * The per-family headers define the entries and the rules each family's kernels keep (which bits
 * every path must give); the ops reach them through amp_kernels_active() or the family accessors
 * (amp_elem_active(), amp_gemm_kernel_for(), ...), which read this table. src/kernels/README.md
 * says how to add a path. */
#ifndef AMP_KERNELS_H
#define AMP_KERNELS_H

#include "amp/cpu.h"
#include "conv_kernels.h"
#include "convert_kernels.h"
#include "elem_kernels.h"
#include "fp8_kernels.h"
#include "lstm_kernels.h"
#include "pool_kernels.h"
#include "unscale_kernels.h"
#include "update_kernels.h"
#include "vecmath.h"
#include "gemm_kernels.h"

typedef struct amp_kernels {
    amp_convert_kernels convert; /* dtype conversions (amp_convert, the GEMM epilogue's acc_rounded) */
    amp_elem_kernels elem;       /* elementwise and row kernels (add, layer norm, softmax, relu bits) */
    amp_vmath_kernels vecmath;   /* exp, tanh, sigmoid, erfc, gelu, cross-entropy's rows */
    amp_unscale_kernels unscale; /* the scaler's unscale + non-finite check */
    amp_lstm_kernels lstm;       /* the LSTM cell's pointwise passes */
    amp_gemm_kernels gemm;       /* GEMM micro-kernels and packs (cache blocks: src/gemm/gemm_dispatch.c) */
    amp_conv_kernels conv;       /* conv2d's column passes, implicit panels, direct tiles, row store */
    amp_pool_kernels pool;       /* max pooling's rows */
    amp_update_kernels update;   /* the optimizer's element loops */
    amp_fp8_kernels fp8;         /* fp8 operands decoded for the GEMM's packing; amax and scaled casts */
} amp_kernels;

/* The table of `isa`, built on first use (thread-safe; afterwards one atomic load). A path this CPU
 * lacks, or a value outside amp_isa, gets the reference table. */
const amp_kernels *amp_kernels_for(amp_isa isa);
/* The table of the active path. */
static inline const amp_kernels *amp_kernels_active(void) { return amp_kernels_for(amp_isa_active()); }

/* Fill a table: init_ref every entry; a path's init only what it overrides, on top of init_ref's.
 * amp_kernels_for calls a path's init only when amp_isa_supported(path), so an init (and the kernels
 * it names) may assume the CPU runs that path. */
void amp_kernels_init_ref(amp_kernels *k);
#if defined(__x86_64__)
void amp_kernels_init_avx2(amp_kernels *k);
void amp_kernels_init_avx512(amp_kernels *k);
#endif

#endif /* AMP_KERNELS_H */
