/* `amp info`: what this build and this machine offer. */
#include <stdio.h>
#include <string.h>

#include "amp.h"
#include "commands.h"

int amp_cmd_info(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: amp info\nPrints amp's version, the CPU features it detected, the SIMD path in use and how\n"
                   "the AVX-512 path multiplies bf16 (fma or dot: amp/gemm.h).\n");
            return AMP_EXIT_OK;
        }
        return amp_usage_error("info", "unknown option '%s'", argv[i]);
    }
    const amp_cpu_features *f = amp_cpu_get_features();
    printf("amp %s\n", amp_version());
    printf("cpu features: avx=%d avx2=%d fma=%d f16c=%d avx512f=%d avx512bw=%d avx512vl=%d avx512dq=%d "
           "avx512_bf16=%d avx512_fp16=%d amx_bf16=%d\n",
           f->avx, f->avx2, f->fma, f->f16c, f->avx512f, f->avx512bw, f->avx512vl, f->avx512dq, f->avx512_bf16,
           f->avx512_fp16, f->amx_bf16);
    printf("simd paths:");
    for (int i = 0; i < AMP_ISA_COUNT; i++)
        printf(" %s%s", amp_isa_name((amp_isa)i), amp_isa_supported((amp_isa)i) ? "" : "(unsupported)");
    printf("\nactive path: %s (best: %s)\n", amp_isa_name(amp_isa_active()), amp_isa_name(amp_isa_best()));
    const double dot = amp_gemm_bf16_dot_speed();
    printf("bf16 products (avx512): %s", amp_gemm_bf16_method_name(amp_gemm_bf16_method_active()));
    if (dot > 0)
        printf(" (VDPBF16PS measured at %.2fx the FMA's flops; AMX tiles %s; AMP_GEMM_BF16=fma|dot|amx overrides)\n",
               dot, amp_gemm_bf16_method_supported(AMP_GEMM_BF16_AMX) ? "usable" : "absent");
    else
        printf(" (no AVX512-BF16)\n");
#ifdef AMP_HAVE_MPI
    printf("mpi: yes (data-parallel `mpirun -np N amp train ...`)\n");
#else
    printf("mpi: no (built without MPI: install libopenmpi-dev and rebuild for data-parallel training)\n");
#endif
    return AMP_EXIT_OK;
}
