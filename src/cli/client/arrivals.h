/*
 * arrivals.h - every rank's arrival summary, fetched and put on one clock: the input of the
 * arrival-order analysis (src/report/stragglers.h) that `stragglers`, `report` and the exporter
 * share.
 *
 * Each selected rank of a roster (fanout.h) is asked, in parallel and within one deadline,
 * GET /api/arrivals (its agent's bounded ring of the last 512 collectives per process group,
 * src/agent/collect/job.c, served by job_routes.c) and the last 64 rows of python.steps (its step and phase medians).
 * Each rank's clock is aligned with the offset of `timeline --ranks` (pb_fanout_clock_offset:
 * the smallest correction its answer allows, error up to the round trip). Group names become
 * small ids, the same for every rank of one fetch (group_names[id] gives the name back).
 */
#ifndef PB_CLI_ARRIVALS_H
#define PB_CLI_ARRIVALS_H

#include "client/fanout.h"
#include "stragglers.h"

#include <jansson.h>
#include <stdio.h>

typedef struct pb_job_arrivals {
    pb_arrival_rank *ranks; /* the ranks that answered, in roster order; borrowing from below */
    size_t count;
    int missing;            /* selected ranks that did not answer */
    const char **group_names; /* group id -> the group's name (borrowed from `names`) */
    size_t n_groups;
    /* what the ranks borrow from; owned */
    pb_arrival **lists;
    pb_fanout_req *arrivals, *steps;
    int n;
    json_t *names;
} pb_job_arrivals;

/* Asks the ranks eps[0..n-1] selected in sel (every rank when sel is NULL) within deadline_ms.
 * A selected rank that does not answer is counted in out->missing and, when why is not NULL,
 * named there ("probing: rank R did not answer: ..."). Hosts are the roster's (else the
 * agent's own). Returns 0 (out filled; free with pb_job_arrivals_free), or -ENOMEM. Borrows
 * eps, which must outlive out. [main thread] */
int pb_job_arrivals_fetch(const pb_rank_ep *eps, int n, const unsigned char *sel,
                          long deadline_ms, FILE *why, pb_job_arrivals *out);

/* Frees what out owns (not out itself). NULL-safe; a zeroed struct is fine. */
void pb_job_arrivals_free(pb_job_arrivals *out);

#endif
