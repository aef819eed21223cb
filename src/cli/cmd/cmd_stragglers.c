/*
 * cmd_stragglers.c - `probing <target> stragglers [--last N]`: which rank makes everyone wait,
 * when nothing hangs (over the agents' rings, or their N newest collectives a group).
 *
 * The job's roster (fanout.h); every rank's arrivals and phase medians on one clock
 * (arrivals.h), then report/stragglers.c names the rank that enters last, its median lag, the
 * phase its time goes to, and a late node. Exit status: 0, or PB_EXIT_PARTIAL (3) when some ranks did
 * not answer (named on stderr; the analysis then has no complete collective for their groups).
 */
#include "client/arrivals.h"
#include "client/fanout.h"
#include "cmd/command.h"
#include "out/format.h"
#include "stragglers.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/* The options of stragglers (option.h): the parser and 'stragglers --help' read them. */
const pb_option pb_options_stragglers[] = {
    PB_OPTION_JSON("the analysis as one JSON object"),
    PB_OPTION_DEADLINE("wait at most S seconds for the ranks (default 5)"),
    PB_OPTION_INT_("last", "N", last_collectives, 1, 512, "a number of collectives from 1 to 512",
                   "only the N newest collectives of each process group (an agent keeps 512): "
                   "the job as it is now, after a change"),
    PB_OPTION_TABLE_END,
};

int cmd_stragglers(const pb_cli_args *a)
{
    pb_job_arrivals job;
    pb_sg_result res;
    json_t *out = NULL;
    int status = pb_job_stragglers(&a->resolved, a->target, a->deadline_s,
                                   (uint64_t)a->last_collectives, stderr, &job, &res);
    int rc = status;
    if (status != PB_EXIT_OK && status != PB_EXIT_PARTIAL) goto done;
    rc = PB_EXIT_ERROR;
    if (a->json) {
        out = pb_stragglers_json(&res, 0, job.group_names, job.n_groups);
        if (!out || json_dumpf(out, stdout, JSON_INDENT(2)) || fputc('\n', stdout) == EOF) {
            pb_cli_error("cannot write the JSON");
            goto done;
        }
    } else {
        pb_stragglers_render(stdout, &res, job.group_names, job.n_groups);
    }
    rc = status;
done:
    json_decref(out);
    pb_stragglers_free(&res);
    pb_job_arrivals_free(&job);
    return rc;
}
