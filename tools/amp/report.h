/* Reports of training runs (`amp train --report DIR`, `amp compare --report DIR`): one directory with
 *   metrics.jsonl   one JSON object per line: {"type":"step"|"eval"|"grad_hist"|"summary", "run": LABEL, ...}
 *   loss.png/.svg   smoothed training loss over steps, all runs overlaid
 *   scale.png/.svg  the loss scale over steps on a log2 axis, skipped steps marked
 *   grad_hist.png/.svg  gradient magnitudes (log2 bins, summed over the sampled steps) against fp16's
 *                   smallest subnormal, smallest normal and largest finite value
 *   index.html      the plots and the runs' summary table
 * The plots are drawn with PLplot (Debian's libplplot-dev, cairo driver).
 *
 *     amp_report *rep;  char err[256];
 *     if (amp_report_open(dir, &rep, err, sizeof err) != AMP_REPORT_OK) ...
 *     amp_train_callbacks cb;
 *     amp_report_begin_run(rep, "amp-fp16/dynamic", &my_callbacks, &cb);   (cb wraps my_callbacks)
 *     amp_train_run(&cfg, &cb, &result, ...);
 *     amp_report_end_run(rep, &cfg, &result);
 *     amp_report_finish(rep, err, sizeof err);   (plots, index.html; frees rep)
 */
#ifndef AMP_TOOLS_REPORT_H
#define AMP_TOOLS_REPORT_H

#include <stdio.h>

#include "amp.h"

typedef struct amp_report amp_report;

enum { AMP_REPORT_OK = 0, AMP_REPORT_FAILED = 1, AMP_REPORT_BAD_PATH = 2 };

/* Checks that DIR can be made (each part of the path that exists is a directory, the deepest one
 * writable) and creates nothing yet: DIR (and missing parents) and DIR/metrics.jsonl are created when
 * the first step, evaluation or run end is recorded, so that a run refused before it trains (the
 * memory check, bad data) leaves no directory behind and no earlier report truncated. Returns
 * AMP_REPORT_OK, AMP_REPORT_BAD_PATH (empty path, or it names something that is not a directory) or
 * AMP_REPORT_FAILED (cannot be created), with a one-line message in err; a failure to create it later
 * is amp_report_end_run's and amp_report_finish's. */
int amp_report_open(const char *dir, amp_report **out, char *err, size_t err_size);

/* Starts recording a run called `label`; *out becomes callbacks for amp_train_run that record each
 * step, evaluation and gradient-statistics sample and then call `inner` (may be NULL). */
int amp_report_begin_run(amp_report *rep, const char *label, const amp_train_callbacks *inner,
                         amp_train_callbacks *out);

/* Ends the current run with its result (a "summary" line in metrics.jsonl). */
int amp_report_end_run(amp_report *rep, const amp_train_config *cfg, const amp_train_result *r);

/* Draws the plots, writes index.html, closes everything and frees rep (also on failure). Returns
 * AMP_REPORT_OK or AMP_REPORT_FAILED with a one-line message. */
int amp_report_finish(amp_report *rep, char *err, size_t err_size);

/* Frees rep without writing anything more (after a failed run). NULL is fine. */
void amp_report_discard(amp_report *rep);

/* A run label from a configuration: "PRECISION" or "PRECISION/SCALER" when the scaler is set. */
void amp_report_config_label(const amp_train_config *cfg, char *buf, size_t size);

/* The directory the report is written to. */
const char *amp_report_dir(const amp_report *rep);

/* Shared with the commands: the scaler spelled as on the command line ("dynamic", "off", "static:S"). */
void amp_report_scaler_spelling(const amp_train_result *r, char *buf, size_t size);

/* One JSON object (no newline) with the keys of `amp train --json`, plus "run" when label is not NULL
 * and the gradient-statistics fractions (null when no step was sampled). */
void amp_report_json_result(FILE *f, const char *label, const amp_train_config *cfg, const amp_train_result *r);

#endif
