/* Internal: CPU facts the kernels' choices need beyond amp_cpu_features (src/cpu/cpu.c). */
#ifndef AMP_CPU_INTERNAL_H
#define AMP_CPU_INTERNAL_H

#include <stdbool.h>

/* True when the CPU and OS have AMX-BF16 (amp_cpu_features.amx_bf16) and this process may use the tile
 * registers: on Linux the first call asks the kernel for that permission (arch_prctl), once. */
bool amp_cpu_amx_usable(void);

#endif /* AMP_CPU_INTERNAL_H */
