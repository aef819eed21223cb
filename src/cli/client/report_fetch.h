/*
 * report_fetch.h - the data of `probing <target> report` gathered and the report built: the
 * target's queries, /api/info and measurement conditions, the other ranks of its job (or the
 * recordings of the other ranks), every rank's collective arrivals and the hang check. The
 * report command prints the document; the MCP server's report tool returns it (mcp/tools.c).
 */
#ifndef PB_CLI_REPORT_FETCH_H
#define PB_CLI_REPORT_FETCH_H

#include "client/target.h"

#include <jansson.h>

/* What to report on (all borrowed). */
typedef struct pb_report_ask {
    const pb_target *target; /* resolved */
    const char *name;        /* the target as typed: the report names it */
    int last_steps;          /* only the last N complete steps; 0: every step recorded */
    char **recordings;       /* the other ranks' recordings (the target is a recording), or NULL */
    int n_recordings;
} pb_report_ask;

/* Builds the report (src/report, docs/report.md) for ask: on success returns 0 and *doc (caller
 * owns; the schema of `report --json`, with "hang" when the job is stalled). On failure prints
 * why ("probing: ...") and returns PB_EXIT_ERROR, or PB_EXIT_USAGE for a recording that cannot be
 * read as another rank. [main thread] */
int pb_report_fetch(const pb_report_ask *ask, json_t **doc);

#endif
