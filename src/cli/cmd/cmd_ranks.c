/*
 * cmd_ranks.c - `probing <target> ranks`: every rank of the target's job, on every node.
 *
 * client/ranks.c asks every rank of the roster at once with a deadline (GET /api/rank); this
 * prints one line per rank with its step, how long ago that step started and its state
 * (training / in a collective / not answering / gone), with the reason for every rank that
 * cannot be shown. When some ranks do not answer in time the
 * exit status is PB_EXIT_PARTIAL (3). `query --ranks` (cmd_query.c) asks the same roster. See
 * docs/cluster.md.
 */
#include "client/ranks.h"
#include "cmd/command.h"
#include "out/format.h"

#include <stdio.h>
#include <stdlib.h>

/* The options of ranks (option.h): the parser and 'ranks --help' read them. */
const pb_option pb_options_ranks[] = {
    PB_OPTION_FORMAT("table|csv|json", NULL),
    PB_OPTION_DEADLINE("wait at most S seconds for the ranks (default 5)"),
    PB_OPTION_TABLE_END,
};

int cmd_ranks(const pb_cli_args *a)
{
    pb_format fmt;
    int rc = pb_format_parse(a->format, PB_FORMAT_TABLE | PB_FORMAT_CSV | PB_FORMAT_JSON, "ranks", &fmt);
    if (rc) return rc;
    json_t *columns = NULL, *rows = NULL, *notes = NULL;
    rc = pb_ranks_states(&a->resolved, a->target, a->deadline_s, &columns, &rows, &notes);
    if (rc != PB_EXIT_OK && rc != PB_EXIT_PARTIAL) return rc;
    if (pb_format_rows(stdout, fmt, PB_TABLE_PLAIN, columns, rows)) {
        rc = PB_EXIT_ERROR;
    } else {
        fflush(stdout);
        pb_cli_print_notes(notes);
    }
    json_decref(columns);
    json_decref(rows);
    json_decref(notes);
    return rc;
}
