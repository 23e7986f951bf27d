/* The GEMM framework's per-path choices: how the AVX-512 path multiplies bf16 (amp_gemm_bf16_method),
 * and which of the path's kernels a product takes (amp_gemm_kernel_for). Each kernel's cache blocks
 * come with it in the kernel table (kernels/gemm_blocks.c). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "amp/gemm.h"
#include "amp/status.h"
#include "../kernels/gemm_kernels.h"
#include "../kernels/kernels.h"
#include "../core/log_internal.h"
#include "../cpu/cpu_internal.h"

_Static_assert(AMP_F32 == 0 && AMP_F16 == 1 && AMP_BF16 == 2, "gemm tables index by dtype");

/* ---- the bf16 method: measured once, AMP_GEMM_BF16 honoured, amp_gemm_bf16_method_set after ---- */

static atomic_int bf16_method = -1;
static double dot_speed;
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;

static const char *const method_names[AMP_GEMM_BF16_METHOD_COUNT] = {"fma", "dot", "amx"};

static void choose_bf16_method(void) {
#if defined(__x86_64__)
    if (amp_isa_supported(AMP_ISA_AVX512)) dot_speed = amp_gemm_avx512_dot_speed();
#endif
    /* AMX's tiles where usable (TDPBF16PS: 1024 flops an instruction); else the instruction with more
     * flops per second, ties to the dot kernel, which also packs half the bytes */
    amp_gemm_bf16_method chosen = amp_gemm_bf16_method_supported(AMP_GEMM_BF16_AMX) ? AMP_GEMM_BF16_AMX
                                  : dot_speed >= 1.0                                ? AMP_GEMM_BF16_DOT
                                                                                     : AMP_GEMM_BF16_FMA;
    const char *env = getenv("AMP_GEMM_BF16");
    if (env && *env) {
        amp_gemm_bf16_method want;
        if (amp_gemm_bf16_method_from_name(env, &want) != AMP_OK)
            amp_logf(AMP_LOG_WARN, "AMP_GEMM_BF16=%s is not one of fma, dot, amx; using %s", env, method_names[chosen]);
        else if (!amp_gemm_bf16_method_supported(want))
            amp_logf(AMP_LOG_WARN, "AMP_GEMM_BF16=%s is not supported by this CPU; using %s", env,
                     method_names[chosen]);
        else
            chosen = want;
    }
    int expected = -1;
    atomic_compare_exchange_strong(&bf16_method, &expected, (int)chosen);
}

amp_gemm_bf16_method amp_gemm_bf16_method_active(void) {
    pthread_once(&bf16_once, choose_bf16_method);
    return (amp_gemm_bf16_method)atomic_load_explicit(&bf16_method, memory_order_relaxed);
}

bool amp_gemm_bf16_method_supported(amp_gemm_bf16_method method) {
    if (method == AMP_GEMM_BF16_FMA) return true;
    const bool dot = amp_isa_supported(AMP_ISA_AVX512) && amp_cpu_get_features()->avx512_bf16;
    if (method == AMP_GEMM_BF16_DOT) return dot;
    return method == AMP_GEMM_BF16_AMX && dot && amp_cpu_amx_usable();
}

int amp_gemm_bf16_method_set(amp_gemm_bf16_method method) {
    if ((unsigned)method >= AMP_GEMM_BF16_METHOD_COUNT) return AMP_ERR_INVALID_ARGUMENT;
    if (!amp_gemm_bf16_method_supported(method)) return AMP_ERR_UNSUPPORTED_ISA;
    pthread_once(&bf16_once, choose_bf16_method); /* so a later first use cannot overwrite the choice */
    atomic_store(&bf16_method, (int)method);
    return AMP_OK;
}

double amp_gemm_bf16_dot_speed(void) {
    pthread_once(&bf16_once, choose_bf16_method);
    return dot_speed;
}

const char *amp_gemm_bf16_method_name(amp_gemm_bf16_method method) {
    return (unsigned)method < AMP_GEMM_BF16_METHOD_COUNT ? method_names[method] : "invalid";
}

int amp_gemm_bf16_method_from_name(const char *name, amp_gemm_bf16_method *out) {
    if (!name || !out) return AMP_ERR_NULL_POINTER;
    for (int m = 0; m < AMP_GEMM_BF16_METHOD_COUNT; m++) {
        if (strcmp(name, method_names[m]) == 0) {
            *out = (amp_gemm_bf16_method)m;
            return AMP_OK;
        }
    }
    return AMP_ERR_INVALID_ARGUMENT;
}

const amp_gemm_kernel *amp_gemm_kernel_for(amp_isa isa, amp_dtype dtype) {
    if ((unsigned)dtype > AMP_BF16) return NULL;
    const amp_gemm_kernels *t = &amp_kernels_for(isa)->gemm;
    if (dtype == AMP_BF16 && t->bf16_dot.ukernel && amp_gemm_bf16_method_active() != AMP_GEMM_BF16_FMA)
        return &t->bf16_dot;
    return &t->for_dtype[dtype];
}

const amp_gemm_kernel *amp_gemm_kernel_stored(amp_isa isa, amp_dtype dtype) {
    const amp_gemm_kernels *t = &amp_kernels_for(isa)->gemm;
    if (dtype == AMP_BF16 && t->bf16_tiles.ukernel && amp_gemm_bf16_method_active() == AMP_GEMM_BF16_AMX)
        return &t->bf16_tiles;
    return amp_gemm_kernel_for(isa, dtype);
}

const amp_gemm_kernel *amp_gemm_kernel_rows8(amp_isa isa, amp_dtype dtype) {
    const amp_gemm_kernel *k = amp_gemm_kernel_for(isa, dtype);
    const amp_gemm_kernels *t = &amp_kernels_for(isa)->gemm;
    if (!k) return NULL;
    if (k == &t->bf16_dot) return t->bf16_dot8.ukernel ? &t->bf16_dot8 : NULL;
    return k == &t->for_dtype[dtype] && t->for_dtype8[dtype].ukernel ? &t->for_dtype8[dtype] : NULL;
}
