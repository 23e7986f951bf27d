/* The CLI's subcommands. Each takes the arguments after its name (argv[0] is the subcommand name)
 * and returns the process exit status: 0 success, 1 failure while running, 2 bad usage or bad input. */
#ifndef AMP_TOOLS_COMMANDS_H
#define AMP_TOOLS_COMMANDS_H

#include <stdbool.h>

enum { AMP_EXIT_OK = 0, AMP_EXIT_FAILURE = 1, AMP_EXIT_USAGE = 2 };

int amp_cmd_explain(int argc, char **argv);
int amp_cmd_bench(int argc, char **argv);
int amp_cmd_info(int argc, char **argv);
int amp_cmd_policy(int argc, char **argv);
int amp_cmd_inspect(int argc, char **argv);
int amp_cmd_train(int argc, char **argv);
int amp_cmd_compare(int argc, char **argv);
int amp_cmd_tokenizer(int argc, char **argv);
int amp_cmd_tokenize(int argc, char **argv);
int amp_cmd_detokenize(int argc, char **argv);
int amp_cmd_sample(int argc, char **argv);

/* Set only by the argument fuzzer (fuzz/fuzz_cli_args.c): each command returns AMP_EXIT_OK as soon as
 * its arguments are parsed and checked, before it opens a file, trains or measures anything. */
extern bool amp_cli_parse_only;

/* Prints "amp: <message>" and the usage hint for `command` to stderr; returns AMP_EXIT_USAGE. */
int amp_usage_error(const char *command, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
