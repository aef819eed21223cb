/*
 * cmd_query.c - `probing <target> query "SQL" [-f table|csv|json] [--ranks R [--deadline S]]`.
 *
 * The statement runs through client/query.c (POST /api/query; a SQL error with a caret under
 * the offending byte) and the rows are printed. With --ranks: on every selected rank of the
 * target's job at once, the rows with "rank" and "host" columns first; a rank that does not
 * answer in time is named on stderr after the rows, with its reason, and the exit status is
 * PB_EXIT_PARTIAL (3). See docs/cluster.md.
 */
#include "client/input.h"
#include "client/query.h"
#include "cmd/command.h"
#include "out/format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The options of query (option.h): the parser and 'query --help' read them. */
const pb_option pb_options_query[] = {
    PB_OPTION_ARGUMENTS("\"SQL\""),
    PB_OPTION_FORMAT("table|csv|json",
                     "table: aligned columns, NULL shown empty, \"(N rows)\" at the end (default)\n"
                     "csv: RFC 4180 with a header row\n"
                     "json: an array of objects, one per row"),
    PB_OPTION_RANKS("run it on ranks R of the target's torch.distributed job ('all', or a list "
                    "such as 0,2-5), in parallel; the rows get 'rank' and 'host' columns first",
                    PB_USAGE_RANKS_DEADLINE),
    PB_OPTION_DEADLINE("with --ranks: wait at most S seconds (default 5); ranks that do not "
                       "answer are named on stderr and the exit status is 3 (docs/cluster.md)",
                       PB_USAGE_SHOWN_ABOVE),
    PB_OPTION_TABLE_END,
};

int cmd_query(const pb_cli_args *a)
{
    pb_format fmt;
    int rc = pb_format_parse(a->format, PB_FORMAT_TABLE | PB_FORMAT_CSV | PB_FORMAT_JSON,
                             "query", &fmt);
    if (rc) return rc;
    char *sql = pb_input_text(a->command, a->positional, a->positional_count, "SQL");
    if (!sql) return PB_EXIT_USAGE;
    json_t *answer = NULL, *columns = NULL, *rows = NULL, *notes = NULL;
    if (a->ranks) { /* every selected rank of the job */
        rc = pb_query_ranks(&a->resolved, sql, a->ranks, a->deadline_s, &columns, &rows, &notes);
        if (columns && pb_format_rows(stdout, fmt, PB_TABLE_GRID, columns, rows)) {
            rc = PB_EXIT_ERROR;
            goto done;
        }
        fflush(stdout);
        pb_cli_print_notes(notes);
        goto done;
    }
    if (a->deadline_s > 0) {
        rc = pb_cli_usage_error("--deadline goes with --ranks (the time to wait for every rank)");
        goto done;
    }
    if ((rc = pb_query_run(&a->resolved, sql, 0, &answer))) goto done;
    rc = PB_EXIT_ERROR;
    if (pb_format_rows(stdout, fmt, PB_TABLE_GRID, json_object_get(answer, "columns"),
                       json_object_get(answer, "rows")))
        goto done;
    rc = PB_EXIT_OK;
    if (json_is_true(json_object_get(answer, "truncated"))) {
        const char *msg = json_string_value(json_object_get(answer, "message"));
        fflush(stdout);
        pb_cli_error("%s", msg && *msg ? msg : "the result was truncated by the target; add a "
                                                "LIMIT or select fewer columns");
    }
done:
    json_decref(answer);
    json_decref(columns);
    json_decref(rows);
    json_decref(notes);
    free(sql);
    return rc;
}
