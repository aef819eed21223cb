/*
 * report.h - the four-phase diagnosis of docs/report.md ("Method": baseline, bottleneck type,
 * component, operation) and its checks, computed from SQL over the agent's tables.
 *
 * The rules never touch a socket: every number comes from a pb_report_query_fn the caller
 * supplies (the CLI posts the SQL to /api/query; the unit tests run it against an in-memory
 * SQLite database holding the same schema-qualified tables). The result is one JSON document
 * (schema in docs/report.md) that pb_report_render() turns into text. Every finding carries the
 * SQL that produced its numbers, so a user can re-run it with `probing <target> query`. Inside
 * src/report, report.c (the driver) runs the rules (rules.h) over the rule toolkit (toolkit.h).
 *
 * Tables that do not exist (an older agent, a collector not built yet) or are empty are named in
 * the report's "missing" list, and the rules that need them say what they could not conclude.
 */
#ifndef PB_REPORT_REPORT_H
#define PB_REPORT_REPORT_H

#include "phases.h"
#include "source.h"

#include <jansson.h>
#include <stdio.h>

/* Python code the CLI evaluates in the target (short timeout) to learn the measurement
 * conditions: it prints one JSON object (device, param_dtype, parameters, batch_size, threads,
 * num_workers, pin_memory, cudnn_benchmark, torch, python). */
extern const char pb_report_conditions_code[];

/* Builds the report over the last `last_steps` complete steps (0: every step in the ring).
 * On success returns 0 and sets *report (caller owns, json_decref). Fails (non-zero, *error set
 * to a malloc'ed message) only when python.torch_trace itself cannot be queried; any other
 * missing data becomes part of the report. [any thread] */
int pb_report_build(const pb_report_source *src, int last_steps, json_t **report, char **error);

/* Which steps a report reads: first..last (step numbers; -1: open at that end), then the last
 * last_n of them (0: all). Warm-up is looked for only when the window starts at the first step
 * recorded (and, with last_n, at step 0 as pb_report_build has it). */
typedef struct pb_report_window {
    long long first, last;
    int last_n;
} pb_report_window;

/* One steady step of the window, as the report's statistics see it. */
typedef struct pb_report_step {
    long long step;
    double wall, samples;
    double phase[PB_PHASE_COUNT]; /* seconds of each phase (phases.h); other = wall - the rest */
    int timing;                   /* one of the steps the report times the job on */
    int detail;                   /* its module executions are in python.torch_trace */
} pb_report_step;

/* The steady steps of a report's window: after the warm-up, without the outliers (over
 * OUTLIER_FACTOR x the median of the steps of their kind, which the report names on their own
 * and leaves out of its means). */
typedef struct pb_report_steps {
    pb_report_step *steps; /* in step order; malloc'ed */
    size_t count;
    size_t in_window, warmup, outliers; /* complete steps in the window, left out as warm-up,
                                           left out as outliers */
    long long first, last;              /* the window's first and last complete step */
} pb_report_steps;

/* pb_report_build over window w (borrowed; NULL: every step), also filling *steady (NULL: not
 * wanted; free with pb_report_steps_free) with the steps its statistics stand on. Same
 * contract otherwise. [any thread] */
int pb_report_build_window(const pb_report_source *src, const pb_report_window *w,
                           json_t **report, pb_report_steps *steady, char **error);

/* Frees what pb_report_build_window put in s (NULL allowed) and zeroes it. */
void pb_report_steps_free(pb_report_steps *s);

/* Writes the report as text for a terminal. report is borrowed. Returns 0, or -EIO when the
 * stream failed. */
int pb_report_render(FILE *out, json_t *report);

#endif
