/* amp: the command-line program, a thin client of the public API. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "amp.h"
#include "commands.h"

bool amp_cli_parse_only = false;

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"explain", amp_cmd_explain, "show, computed live, why mixed precision needs master weights, loss scaling and fp32 sums"},
    {"bench", amp_cmd_bench, "measure speed against memcpy, the core's peak, OpenBLAS: convert, gemm, gemm-fp8, unscale, train"},
    {"policy", amp_cmd_policy, "print the autocast policy table beside PyTorch's CUDA and CPU lists"},
    {"info", amp_cmd_info, "print the version, CPU features and the SIMD path in use"},
    {"inspect", amp_cmd_inspect, "list a safetensors file's tensors and metadata (an amp checkpoint)"},
    {"train", amp_cmd_train, "train a model on real data in a precision preset (`amp train --help`)"},
    {"compare", amp_cmd_compare, "train one model under several presets side by side: do I need a GradScaler?"},
    {"tokenizer", amp_cmd_tokenizer, "train a byte-level BPE (tiktoken's rank format): `amp tokenizer train`"},
    {"tokenize", amp_cmd_tokenize, "encode text files with BPE ranks into an llm.c token shard"},
    {"detokenize", amp_cmd_detokenize, "decode a token shard back to text"},
    {"sample", amp_cmd_sample, "generate text from a gpt or gpt2 checkpoint or llm.c model file (key/value cache)"},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void print_usage(FILE *out) {
    fprintf(out, "usage: amp <command> [options]\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`amp <command> --help` describes a command's options. Environment: AMP_ISA=ref|avx2|avx512 forces a SIMD path.\n");
}

int amp_usage_error(const char *command, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "amp: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (command)
        fprintf(stderr, " (try `amp %s --help`)\n", command);
    else
        fprintf(stderr, " (try `amp --help`)\n");
    return AMP_EXIT_USAGE;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stderr);
        return AMP_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        print_usage(stdout);
        return AMP_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0) {
        printf("amp %s\n", amp_version());
        return AMP_EXIT_OK;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    return amp_usage_error(NULL, "unknown command '%s'", name);
}
