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
    pb_rank_ep *roster;     /* pb_job_stragglers: the roster the ranks' hosts point into */
} pb_job_arrivals;

/* Asks the ranks eps[0..n-1] selected in sel (every rank when sel is NULL) within deadline_ms.
 * A selected rank that does not answer is counted in out->missing and, when why is not NULL,
 * named there ("probing: rank R did not answer: ..."). Hosts are the roster's (else the
 * agent's own). Returns 0 (out filled; free with pb_job_arrivals_free), or -ENOMEM. Borrows
 * eps, which must outlive out. [main thread] */
int pb_job_arrivals_fetch(const pb_rank_ep *eps, int n, const unsigned char *sel,
                          long deadline_ms, FILE *why, pb_job_arrivals *out);

/* Keeps, of each process group, only the collectives among its `last` newest (by the group's
 * sequence number, the newest any rank has seen): `stragglers --last N` asks about the job as it
 * is now, once a change (a throttled node, a fix) is newer than most of the agents' rings.
 * last == 0 keeps everything. [main thread] */
void pb_job_arrivals_keep_last(pb_job_arrivals *job, uint64_t last);

/* `probing <target> stragglers`' analysis of the job t (borrowed; name: as typed) belongs to:
 * its roster, every rank's arrivals (pb_job_arrivals_fetch, within deadline_s seconds; 0: the
 * default; the ranks that did not answer named on why), cut to the `last` newest collectives of
 * each group (pb_job_arrivals_keep_last; 0: all), then pb_stragglers_analyze into *res
 * (free with pb_stragglers_free) over *job (free with pb_job_arrivals_free). Returns PB_EXIT_OK,
 * PB_EXIT_PARTIAL (some ranks did not answer), or after printing why PB_EXIT_USAGE (t is a
 * recording) or PB_EXIT_ERROR (no roster, no rank answered, out of memory). [main thread] */
int pb_job_stragglers(const pb_target *t, const char *name, double deadline_s, uint64_t last,
                      FILE *why,
                      pb_job_arrivals *job, pb_sg_result *res);

/* Frees what out owns (not out itself). NULL-safe; a zeroed struct is fine. */
void pb_job_arrivals_free(pb_job_arrivals *out);

#endif
