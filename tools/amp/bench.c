/* `amp bench <what>`: benchmarks are programs, run by hand, never timed tests. */
#include <stdio.h>
#include <string.h>

#include "bench_util.h"
#include "commands.h"

int amp_cmd_bench(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        FILE *out = argc < 2 ? stderr : stdout;
        fprintf(out, "usage: amp bench <benchmark> [options]   (amp bench <benchmark> --help for its options)\n"
                     "  convert   conversion GB/s for every format pair and SIMD path, next to memcpy\n"
                     "  gemm      amp_gemm GFLOP/s next to the core's measured FMA/VDPBF16PS peak and OpenBLAS\n"
                     "  gemm-fp8  amp_gemm_fp8 next to amp_gemm in bf16 on the models' shapes; fp8 casts vs memcpy\n"
                     "  unscale   GradScaler unscale + inf/NaN check GB/s, next to memcpy\n"
                     "  train     training steps/s of a default model, FLOPs per sample and fraction of the peak\n");
        return argc < 2 ? AMP_EXIT_USAGE : AMP_EXIT_OK;
    }
    if (strcmp(argv[1], "convert") == 0) return amp_bench_convert(argc - 1, argv + 1);
    if (strcmp(argv[1], "gemm") == 0) return amp_bench_gemm(argc - 1, argv + 1);
    if (strcmp(argv[1], "gemm-fp8") == 0) return amp_bench_gemm_fp8(argc - 1, argv + 1);
    if (strcmp(argv[1], "train") == 0) return amp_bench_train(argc - 1, argv + 1);
    if (strcmp(argv[1], "unscale") == 0) return amp_bench_unscale(argc - 1, argv + 1);
    return amp_usage_error("bench", "unknown benchmark '%s'", argv[1]);
}
