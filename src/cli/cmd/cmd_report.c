/*
 * cmd_report.c - `probing <target> report [--json] [--last N] [RANK.db ...]`: the four-phase
 * diagnosis.
 *
 * client/report_fetch.c gathers the data (the target's queries, info and conditions, the other
 * ranks of its job, or the recordings of the other ranks named after `report`) and builds the
 * report (src/report); this file prints it, as text or as JSON (docs/report.md).
 */
#include "client/report_fetch.h"
#include "cmd/command.h"
#include "report.h"

#include <stdio.h>
#include <stdlib.h>

/* The options of report (option.h): the parser and 'report --help' read them. */
const pb_option pb_options_report[] = {
    PB_OPTION_JSON("the same content as JSON (schema in docs/report.md)"),
    PB_OPTION_INT_("last", "N", last_steps, 1, 100000000, "a number of steps of 1 or more",
                   "only the last N complete steps (default: every step recorded)"),
    PB_OPTION_ARGUMENTS("[RANK.db ...]"),
    PB_OPTION_TABLE_END,
};

int cmd_report(const pb_cli_args *a)
{
    json_t *doc = NULL;
    pb_report_ask ask = {&a->resolved, a->target, a->last_steps, a->positional,
                         a->positional_count};
    int rc = pb_report_fetch(&ask, &doc);
    if (rc) return rc;
    rc = PB_EXIT_ERROR;
    if (a->json) {
        char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
        if (!text) {
            pb_cli_error("out of memory");
            goto done;
        }
        puts(text);
        free(text);
    } else {
        pb_report_render(stdout, doc);
    }
    rc = PB_EXIT_OK;
done:
    json_decref(doc);
    return rc;
}
