/* Run-time CPU feature detection and the process-wide choice of SIMD path.
 *
 * A feature counts only when both the CPU reports it (CPUID) and the OS saves the registers it needs
 * (XCR0 via XGETBV): BLIS's rule, since a hypervisor or kernel can hide AVX-512 state. */
#define _DEFAULT_SOURCE /* syscall, for arch_prctl, beside the build's POSIX level */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp/cpu.h"
#include "amp/status.h"
#include "cpu_internal.h"
#include "../core/log_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define AMP_X86 1

static uint64_t read_xcr0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

static void detect(amp_cpu_features *f) {
    unsigned a, b, c, d;
    memset(f, 0, sizeof *f);
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const bool osxsave = (c >> 27) & 1;
    const bool cpu_avx = (c >> 28) & 1;
    const bool cpu_fma = (c >> 12) & 1;
    const bool cpu_f16c = (c >> 29) & 1;
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    const bool os_ymm = (xcr0 & 0x6) == 0x6;       /* SSE and AVX state */
    const bool os_zmm = (xcr0 & 0xE6) == 0xE6;     /* plus opmask, ZMM_Hi256, Hi16_ZMM */
    f->avx = cpu_avx && os_ymm;
    f->fma = f->avx && cpu_fma;
    f->f16c = f->avx && cpu_f16c;
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    f->avx2 = f->avx && ((b >> 5) & 1);
    f->avx512f = os_zmm && ((b >> 16) & 1);
    f->avx512dq = f->avx512f && ((b >> 17) & 1);
    f->avx512bw = f->avx512f && ((b >> 30) & 1);
    f->avx512vl = f->avx512f && ((b >> 31) & 1);
    f->avx512_fp16 = f->avx512f && ((d >> 23) & 1);
    const bool os_tiles = (xcr0 & 0x60000) == 0x60000; /* XTILECFG and XTILEDATA */
    f->amx_bf16 = f->avx512f && os_tiles && ((d >> 24) & 1) && ((d >> 22) & 1);
    __cpuid_count(7, 1, a, b, c, d);
    f->avx512_bf16 = f->avx512f && ((a >> 5) & 1);
}
#else
#define AMP_X86 0
static void detect(amp_cpu_features *f) { memset(f, 0, sizeof *f); }
#endif

/* Linux gives a process AMX's tile registers only once it asks (arch_prctl ARCH_REQ_XCOMP_PERM for
 * XTILEDATA, since 5.16: the tile state makes every signal frame 8 KiB larger); until then the first
 * tile instruction faults. Asked once, for the whole process and every thread it starts. */
#if AMP_X86 && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
static bool tiles_permitted;
static pthread_once_t tiles_once = PTHREAD_ONCE_INIT;
static void request_tiles(void) {
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    tiles_permitted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
bool amp_cpu_amx_usable(void) {
    if (!amp_cpu_get_features()->amx_bf16) return false;
    pthread_once(&tiles_once, request_tiles);
    return tiles_permitted;
}
#else
bool amp_cpu_amx_usable(void) { return false; }
#endif

static amp_cpu_features features;
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static atomic_int active_isa = -1;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void detect_features(void) { detect(&features); }

const amp_cpu_features *amp_cpu_get_features(void) {
    pthread_once(&detect_once, detect_features);
    return &features;
}

bool amp_isa_supported(amp_isa isa) {
    const amp_cpu_features *f = amp_cpu_get_features();
    switch (isa) {
    case AMP_ISA_REF: return true;
    case AMP_ISA_AVX2: return AMP_X86 && f->avx2 && f->fma && f->f16c;
    case AMP_ISA_AVX512: return AMP_X86 && f->avx512f && f->avx512bw && f->avx512vl && f->f16c;
    default: return false;
    }
}

amp_isa amp_isa_best(void) {
    for (int i = AMP_ISA_COUNT - 1; i > 0; i--)
        if (amp_isa_supported((amp_isa)i)) return (amp_isa)i;
    return AMP_ISA_REF;
}

static const char *const isa_names[AMP_ISA_COUNT] = {"ref", "avx2", "avx512"};

const char *amp_isa_name(amp_isa isa) {
    return ((unsigned)isa < AMP_ISA_COUNT) ? isa_names[isa] : "invalid";
}

int amp_isa_from_name(const char *name, amp_isa *out) {
    if (!name || !out) return AMP_ERR_NULL_POINTER;
    for (int i = 0; i < AMP_ISA_COUNT; i++) {
        if (strcmp(name, isa_names[i]) == 0) {
            *out = (amp_isa)i;
            return AMP_OK;
        }
    }
    return AMP_ERR_INVALID_ARGUMENT;
}

/* Reads AMP_ISA once. An unknown name or a path the CPU lacks falls back to the best available path
 * with a warning: a forced path is a request, and a test harness must learn that it was not met. */
static void choose_from_env(void) {
    amp_isa chosen = amp_isa_best();
    const char *env = getenv("AMP_ISA");
    if (env && *env) {
        amp_isa want;
        if (amp_isa_from_name(env, &want) != AMP_OK) {
            amp_logf(AMP_LOG_WARN, "AMP_ISA=%s is not one of ref, avx2, avx512; using %s", env, amp_isa_name(chosen));
        } else if (!amp_isa_supported(want)) {
            amp_logf(AMP_LOG_WARN, "AMP_ISA=%s is not supported by this CPU; using %s", env, amp_isa_name(chosen));
        } else {
            chosen = want;
        }
    }
    int expected = -1;
    atomic_compare_exchange_strong(&active_isa, &expected, (int)chosen);
}

amp_isa amp_isa_active(void) {
    /* Set means chosen (choose_from_env's last step, or amp_isa_set after it): no pthread_once call,
     * which amp_convert's per-row callers paid twice a row (below). */
    const int chosen = atomic_load_explicit(&active_isa, memory_order_acquire);
    if (chosen >= 0) return (amp_isa)chosen;
    pthread_once(&env_once, choose_from_env);
    return (amp_isa)atomic_load_explicit(&active_isa, memory_order_relaxed);
}

int amp_isa_set(amp_isa isa) {
    if ((unsigned)isa >= AMP_ISA_COUNT) return AMP_ERR_INVALID_ARGUMENT;
    if (!amp_isa_supported(isa)) return AMP_ERR_UNSUPPORTED_ISA;
    pthread_once(&env_once, choose_from_env); /* so a later first use cannot overwrite the choice */
    atomic_store(&active_isa, (int)isa);
    return AMP_OK;
}
