/*
 * report.h - the four-phase diagnosis of docs/report.md ("Method": baseline, bottleneck type,
 * component, operation) and its checks, computed from SQL over the agent's tables.
 *
 * The rules never touch a socket: every number comes from a pb_report_query_fn the caller
 * supplies (the CLI posts the SQL to /api/query; the unit tests run it against an in-memory
 * SQLite database holding the same schema-qualified tables). The result is one JSON document
 * (schema in docs/report.md) that pb_report_render() turns into text. Inside src/report,
 * report.c (the driver) runs the rules (rules.h) over the rule toolkit (toolkit.h). Every finding carries the
 * SQL that produced its numbers, so a user can re-run it with `probing <target> query`.
 *
 * Tables that do not exist (an older agent, a collector not built yet) or are empty are named in
 * the report's "missing" list, and the rules that need them say what they could not conclude.
 */
#ifndef PB_REPORT_REPORT_H
#define PB_REPORT_REPORT_H

#include <jansson.h>
#include <stdio.h>

/* Runs one SQL statement. On success returns 0 and sets *rows to a new JSON array of objects
 * (column name -> value; the caller owns it). On failure returns non-zero and sets *error to a
 * malloc'ed message (the caller frees it); "no such table" in it means the table is missing. */
typedef int (*pb_report_query_fn)(void *ctx, const char *sql, json_t **rows, char **error);

/* Another rank of the target's job, reachable for queries (load imbalance across ranks). */
typedef struct pb_report_peer {
    int rank;
    const char *target;       /* how to name it in suggested commands (its pid), borrowed */
    pb_report_query_fn query; /* required */
    void *ctx;                /* passed to query, borrowed */
    const char *host;         /* its host (the job's roster), borrowed; NULL when unknown */
} pb_report_peer;

typedef struct pb_report_source {
    pb_report_query_fn query; /* required */
    void *ctx;                /* passed to query, borrowed */
    const char *target;       /* how the user named the target, for the suggested commands */
    json_t *info;             /* the agent's /api/info object, borrowed; NULL when unknown. Its
                                 rank, world_size and job say whether other ranks exist */
    json_t *conditions;       /* measurement conditions found by eval (see cmd_report.c),
                                 borrowed; NULL when eval was unavailable */
    const char *conditions_error; /* why conditions is NULL, borrowed; NULL when not tried */
    const pb_report_peer *peers; /* the other ranks of the job that could be reached, borrowed */
    size_t npeers;
    const char *peers_note;   /* how the peers were looked for, or why they were not (a
                                 recording, a TCP target), borrowed; NULL when not looked for */
} pb_report_source;

/* Fewer steady steps than this: the report says its sample is too small to conclude. */
#define PB_REPORT_MIN_STEADY 5

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
