/*
 * cmd_hang.c - `probing <target> hang`: which rank the job is waiting for, and where it is.
 *
 * The roster of the job (client/fanout.h), then the hang analysis (client/hang_fetch.c around
 * src/report/hang.c), which `report` shares, and its document rendered (hang_render.c): the
 * collective the others wait in, the ranks that have not entered it, their stacks (grouped),
 * and mismatched collectives (another op or size at the same sequence number).
 * Exit status: 0, or PB_EXIT_PARTIAL (3) when some ranks did not answer (they are named).
 */
#include "client/hang_fetch.h"
#include "cmd/command.h"
#include "hang.h"

#include <stdio.h>
#include <stdlib.h>

/* The options of hang (option.h): the parser and 'hang --help' read them. */
const pb_option pb_options_hang[] = {
    PB_OPTION_DEADLINE("wait at most S seconds for the ranks (default 5)"),
    PB_OPTION_TABLE_END,
};

int cmd_hang(const pb_cli_args *a)
{
    json_t *doc = NULL;
    int rc = pb_hang_fetch_job(&a->resolved, a->target, a->deadline_s, &doc);
    if (doc) pb_hang_render(stdout, doc);
    json_decref(doc);
    return rc;
}
