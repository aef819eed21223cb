/*
 * source.h - what a report is built from (part of the public interface; report.h includes it):
 * the query function that reaches the target, the other ranks of its job, what the CLI learned
 * about the target; and the smallest sample the report concludes from.
 *
 * A header of its own, with no .c, so that the rules and their toolkit (toolkit.h) can name these
 * types without including report.h, whose functions are the driver's (report.c) and the text
 * renderer's (render.c): nothing below the driver depends on it.
 */
#ifndef PB_REPORT_SOURCE_H
#define PB_REPORT_SOURCE_H

#include "stragglers.h"

#include <jansson.h>
#include <stddef.h>

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
    /* Every reached rank's arrival summary (stragglers.h: GET /api/arrivals and its step
     * phases, on one clock), the target's included, for the arrival-order rule; borrowed.
     * NULL when the CLI did not fetch them (one rank, a recording, a job without a roster). */
    const pb_arrival_rank *arrivals;
    size_t n_arrivals;
    const char *const *arrival_groups; /* group id -> name (arrivals.h), borrowed; NULL: ids */
    size_t n_arrival_groups;
    int arrivals_missing;     /* ranks asked for their arrivals that did not answer */
} pb_report_source;

/* Fewer steady steps than this: the report says its sample is too small to conclude. */
#define PB_REPORT_MIN_STEADY 5

#endif
