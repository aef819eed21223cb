/*
 * cmd_compare.c - `probing compare BEFORE AFTER [--json | -f table|csv] [--min-effect PCT]
 * [--fail-if-slower PCT]`: did the change help. client/compare_fetch.c reaches the two sides
 * and compares them (src/report/compare.c); this file prints the document.
 *
 * A side is a target (a recording, a pid, a socket, host:port) with an optional window of its
 * steps after a colon: `run.db:100-200`, `run.db:500-` (from step 500 on), `run.db:-500` (up to
 * step 500), `12345:last200` (its last 200 complete steps). One recording before and after a
 * step is `run.db:-500 run.db:501-`; two ranks of one job are two targets (their pids, or their
 * recordings). A live side is read once, from what its rings hold; a recording still being
 * written is read as flushed so far, and the verdict says so.
 */
#include "client/compare_fetch.h"
#include "cmd/command.h"
#include "compare.h"
#include "out/format.h"

#include <stdio.h>
#include <string.h>

const pb_option pb_options_compare[] = {
    PB_OPTION_ARGUMENTS("BEFORE AFTER"),
    PB_OPTION_JSON("the same content as JSON (schema in docs/cli.md)"),
    PB_OPTION_FORMAT("table|csv", "the figures as rows: a table (default: the text report) or CSV"),
    {.kind = PB_OPTION_SECONDS, .long_name = "min-effect", .value_name = "PCT",
     .offset = offsetof(pb_cli_args, min_effect_pct), .min = 0, .max = 1000,
     .wants = "a percentage above 0",
     .help = "smallest change of the step time called a change (default 2)"},
    {.kind = PB_OPTION_SECONDS, .long_name = "fail-if-slower", .value_name = "PCT",
     .offset = offsetof(pb_cli_args, fail_if_slower_pct), .min = 0, .max = 100000,
     .wants = "a percentage above 0",
     .help = "exit 1 when AFTER is significantly slower than BEFORE by more than PCT %"},
    PB_OPTION_TABLE_END,
};

int cmd_compare(const pb_cli_args *a)
{
    json_t *doc = NULL, *columns = NULL, *rows = NULL;
    int rc = PB_EXIT_ERROR;
    pb_format fmt = PB_FORMAT_TABLE;
    if (a->positional_count != 2)
        return pb_cli_usage_error("compare takes two sides, BEFORE and AFTER (got %d): probing "
                                  "compare before.db after.db, or run.db:-500 run.db:501-",
                                  a->positional_count);
    if (a->format && (a->json || pb_format_parse(a->format, PB_FORMAT_TABLE | PB_FORMAT_CSV,
                                                 "compare", &fmt)))
        return a->json ? pb_cli_usage_error("--json and -f do not go together") : PB_EXIT_USAGE;
    if ((rc = pb_compare_fetch(a->positional[0], a->positional[1], a->min_effect_pct, &doc)))
        return rc;
    rc = PB_EXIT_ERROR;
    if (a->json) {
        if (pb_format_json_pretty(stdout, doc)) goto done;
    } else if (a->format) {
        if (pb_compare_rows(doc, &columns, &rows)) {
            pb_cli_error("out of memory");
            goto done;
        }
        if (pb_format_rows(stdout, fmt, PB_TABLE_GRID, columns, rows)) goto done;
    } else if (pb_compare_render(stdout, doc)) {
        goto done;
    }
    rc = PB_EXIT_OK;
    json_t *v = json_object_get(doc, "verdict");
    const char *change = json_string_value(json_object_get(v, "change"));
    double pct = json_number_value(json_object_get(v, "change_pct"));
    if (a->fail_if_slower_pct > 0 && change && !strcmp(change, "slower") &&
        pct > a->fail_if_slower_pct) {
        fprintf(stderr, "probing: slower by %.1f %%, more than --fail-if-slower %g %%\n", pct,
                a->fail_if_slower_pct);
        rc = PB_EXIT_ERROR;
    }
done:
    json_decref(doc);
    json_decref(columns);
    json_decref(rows);
    return rc;
}
