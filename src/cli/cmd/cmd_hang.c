/*
 * cmd_hang.c - `probing <target> hang`: which rank the job is waiting for, and where it is.
 *
 * The roster of the job (client/fanout.h), then the hang analysis (client/hang_fetch.c around
 * src/report/hang.c), which `report` shares, and its document rendered (hang_render.c): the
 * collective the others wait in, the ranks that have not entered it, their stacks (grouped),
 * and mismatched collectives (another op or size at the same sequence number).
 * Exit status: 0, or PB_EXIT_PARTIAL (3) when some ranks did not answer (they are named).
 */
#include "client/fanout.h"
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
    long deadline = pb_fanout_deadline_ms(a->deadline_s);
    pb_rank_ep *eps = NULL;
    int n = 0;
    if (a->resolved.kind == PB_TARGET_FILE)
        return pb_cli_usage_error("%s is a recording file: hang needs the running job (a "
                                  "recording has no live collectives; the job's recordings answer "
                                  "'probing %s query --ranks all \"SELECT ... FROM "
                                  "python.nccl_trace\"')", a->target, a->target);
    if (pb_fanout_roster(&a->resolved, deadline, &eps, &n)) return PB_EXIT_ERROR;
    json_t *doc = NULL;
    int rc = pb_hang_fetch_analyse(eps, n, NULL, deadline, &doc);
    if (doc) pb_hang_render(stdout, doc);
    json_decref(doc);
    free(eps);
    return rc;
}
