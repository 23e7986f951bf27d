/* Fuzz target for the CLI's argument parsing: the input, split at NUL and newline bytes, is the
 * argument list after "amp" (the first piece chooses the command: train, compare, bench, explain,
 * inspect, policy, info or anything else). The whole CLI is linked in, main() renamed, and
 * amp_cli_parse_only makes every command stop once its arguments are parsed and checked, so nothing
 * is trained, measured or opened. A command must then exit 0 (valid) or 2 (bad usage); anything else,
 * or a crash, sanitizer report or hang in a number parser, is a finding. Run with -close_fd_mask=3:
 * every rejected input prints its one-line error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int amp_cli_main(int argc, char **argv); /* main.c's main, renamed */
#define main amp_cli_main
#include "../tools/amp/main.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_ARGS = 64, MAX_INPUT = 4096 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > MAX_INPUT) return 0;
    amp_cli_parse_only = true;
    /* One copy with a NUL after every piece: the pieces are the arguments. */
    char *buf = malloc(size + 1);
    if (!buf) abort();
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = "amp";
    char *start = buf;
    for (size_t i = 0; i <= size && argc <= MAX_ARGS; i++) {
        if (buf[i] == '\0' || buf[i] == '\n') {
            buf[i] = '\0';
            argv[argc++] = start;
            start = buf + i + 1;
        }
    }
    argv[argc] = NULL;
    const int rc = amp_cli_main(argc, argv);
    fflush(stdout);
    free(buf);
    if (rc != AMP_EXIT_OK && rc != AMP_EXIT_USAGE) abort();
    return 0;
}
