/* CPU feature detection and the choice of SIMD path.
 *
 * Every fast kernel exists once per path and has a scalar reference twin ("ref") that is always
 * built. The path is chosen once, at first use, from CPUID and the OS's XCR0 (a CPU can have AVX-512
 * while the OS does not save its registers), unless the environment variable AMP_ISA names one:
 *     AMP_ISA=ref | avx2 | avx512
 * A forced path the CPU lacks falls back to the best path it has, with a warning through the log
 * hook (amp/log.h). amp_isa_set() changes the path at run time, which is how one test process
 * checks every path on one machine. */
#ifndef AMP_CPU_H
#define AMP_CPU_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum amp_isa {
    AMP_ISA_REF = 0,    /* portable C, always available: the oracle every other path is tested against */
    AMP_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    AMP_ISA_AVX512 = 2, /* AVX-512 F/BW/VL (+ AVX512-BF16 where present) */
    AMP_ISA_COUNT
} amp_isa;

/* What this CPU and OS support, as detected at run time. */
typedef struct amp_cpu_features {
    bool avx;          /* includes the OS saving YMM state */
    bool avx2;
    bool fma;
    bool f16c;
    bool avx512f;      /* includes the OS saving ZMM and opmask state */
    bool avx512bw;
    bool avx512vl;
    bool avx512dq;
    bool avx512_bf16;  /* VCVTNEPS2BF16, VDPBF16PS */
    bool avx512_fp16;
    bool amx_bf16;     /* AMX-TILE and AMX-BF16 (TDPBF16PS), with the OS saving tile state (XCR0); amp asks
                        * Linux for the permission to use it when a bf16 GEMM first chooses its method */
} amp_cpu_features;

/* Features of this machine; detected once, thread-safe. Never NULL. */
const amp_cpu_features *amp_cpu_get_features(void);
/* True when this CPU can run `isa`. */
bool amp_isa_supported(amp_isa isa);
/* The best path this CPU can run. */
amp_isa amp_isa_best(void);
/* The path kernels dispatch to now (AMP_ISA honoured on first call). */
amp_isa amp_isa_active(void);
/* Forces a path for the whole process. Returns AMP_OK, AMP_ERR_INVALID_ARGUMENT for a value outside
 * the enum, or AMP_ERR_UNSUPPORTED_ISA (and changes nothing) when this CPU cannot run it. */
int amp_isa_set(amp_isa isa);
/* "ref", "avx2", "avx512"; "invalid" otherwise. */
const char *amp_isa_name(amp_isa isa);
/* Parses one of the names above. Returns AMP_OK or AMP_ERR_INVALID_ARGUMENT. */
int amp_isa_from_name(const char *name, amp_isa *out);

#ifdef __cplusplus
}
#endif
#endif /* AMP_CPU_H */
