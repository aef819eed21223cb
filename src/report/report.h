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

#include "source.h"

#include <jansson.h>
#include <stdio.h>

/* Python code the CLI evaluates in the target (short timeout) to learn the measurement
 * conditions: it prints one JSON object (device, param_dtype, parameters, batch_size,
 * num_workers, pin_memory, cudnn_benchmark, torch, python). */
extern const char pb_report_conditions_code[];

/* Builds the report over the last `last_steps` complete steps (0: every step in the ring).
 * On success returns 0 and sets *report (caller owns, json_decref). Fails (non-zero, *error set
 * to a malloc'ed message) only when python.torch_trace itself cannot be queried; any other
 * missing data becomes part of the report. [any thread] */
int pb_report_build(const pb_report_source *src, int last_steps, json_t **report, char **error);

/* Writes the report as text for a terminal. report is borrowed. Returns 0, or -EIO when the
 * stream failed. */
int pb_report_render(FILE *out, json_t *report);

#endif
