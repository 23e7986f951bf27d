/* The training flags `amp train` and `amp compare` share (data, schedule, seed, threads, model sizes),
 * parsed in one place so both commands accept and refuse them alike. */
#ifndef AMP_TOOLS_TRAIN_FLAGS_H
#define AMP_TOOLS_TRAIN_FLAGS_H

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "amp.h"

/* A whole-string finite number / non-negative decimal integer: 0 on success, -1 otherwise. */
int amp_cli_parse_double(const char *s, double *out);
int amp_cli_parse_u64(const char *s, uint64_t *out);

/* The built-in models' names from amp's model table, joined by `sep` ("mlp|cnn|lstm|gpt" for "|"),
 * the last by `last_sep` (sep where NULL), into buf (truncated to size). Returns buf. */
const char *amp_cli_model_names(char *buf, size_t size, const char *sep, const char *last_sep);
/* `--model`'s help: the names grouped by what the models do ("mlp (default), cnn: image classifiers;
 * lstm, gpt: character language models"), into buf. Returns buf. */
const char *amp_cli_model_help(char *buf, size_t size);

/* The model `amp train` and `amp compare` train without --model. */
#define AMP_CLI_DEFAULT_MODEL AMP_MODEL_MLP

/* The first pass over a training command's arguments: --help/-h prints help() and returns AMP_EXIT_OK;
 * --model M sets *kind (the defaults depend on it; an unknown name is AMP_EXIT_USAGE after a one-line
 * error). Returns -1 when the command should go on to parse the rest. */
int amp_train_first_pass(const char *command, int argc, char **argv, void (*help)(void), amp_model_kind *kind);

/* True for the flags amp_train_shared_flag handles (each takes a value). */
bool amp_train_is_shared_flag(const char *flag);
/* Applies one shared flag and its value to cfg: AMP_EXIT_OK, or AMP_EXIT_USAGE after printing the
 * one-line error for `command`. Call only when amp_train_is_shared_flag(flag). */
int amp_train_shared_flag(const char *command, const char *flag, const char *value, amp_train_config *cfg);
/* --size S (gpt2's released sizes, amp_model_gpt2_size) applied to model before the other flags, so
 * that --layers, --heads, --hidden and --context override it. Returns -1 to go on, or AMP_EXIT_USAGE
 * after a one-line error (an unknown size, or a model other than gpt2). */
int amp_train_apply_size(const char *command, int argc, char **argv, amp_model_config *model);

/* The fp8 presets' cast statistics of a result (nothing outside them). Per layer: one line per tensor
 * role (x, w, dy) with the last step's amax and scale, the scales' range over the run, and the share
 * of values that saturated or flushed to zero over the run. */
void amp_cli_print_fp8_table(FILE *out, const amp_train_result *r);
/* One line for a compare table: the fp8 layers and, per role, the largest saturated and flushed
 * shares over them ("x sat 0.00% flush 0.12%  w ...  dy ..."); "" outside the fp8 presets. */
const char *amp_cli_fp8_summary(const amp_train_result *r, char *buf, size_t size);

#endif
