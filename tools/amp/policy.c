/* `amp policy`: the autocast policy table, next to PyTorch's CUDA and CPU lists. */
#include <stdio.h>
#include <string.h>

#include "amp.h"
#include "commands.h"

int amp_cmd_policy(int argc, char **argv) {
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: amp policy [--json]\n"
                   "Prints the autocast policy of every op (lower: cast to the region's f16/bf16; fp32; promote:\n"
                   "to the widest input; none: run in the inputs' dtype), beside PyTorch's CUDA and CPU lists.\n");
            return AMP_EXIT_OK;
        }
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
            continue;
        }
        return amp_usage_error("policy", "unknown option '%s'", argv[i]);
    }
    if (json) printf("{\"ops\":[");
    else printf("%-14s %-8s %-12s %-12s %s\n", "op", "amp", "pytorch-cuda", "pytorch-cpu", "note");
    for (int op = 1; op < AMP_OP_COUNT; op++) { /* 0 is AMP_OP_NONE */
        const char *amp = amp_cast_policy_name(amp_autocast_get_policy((amp_op)op));
        const char *cuda = amp_cast_policy_name(amp_autocast_pytorch_policy(AMP_POLICY_TABLE_CUDA, (amp_op)op));
        const char *cpu = amp_cast_policy_name(amp_autocast_pytorch_policy(AMP_POLICY_TABLE_CPU, (amp_op)op));
        const char *note = amp_autocast_policy_note((amp_op)op);
        if (json)
            printf("%s{\"op\":\"%s\",\"amp\":\"%s\",\"pytorch_cuda\":\"%s\",\"pytorch_cpu\":\"%s\",\"note\":\"%s\"}",
                   op > 1 ? "," : "", amp_op_name((amp_op)op), amp, cuda, cpu, note);
        else
            printf("%-14s %-8s %-12s %-12s %s\n", amp_op_name((amp_op)op), amp, cuda, cpu, note);
    }
    if (json) printf("]}\n");
    return AMP_EXIT_OK;
}
