/*
 * cmd_stragglers.c - `probing <target> stragglers`: which rank makes everyone wait, when
 * nothing hangs.
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
#include "phases.h"
#include "stragglers.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/* The kinds of collective that take the most time once every rank is in (at most 5). */
static void print_kinds(const pb_sg_result *res, const pb_job_arrivals *job)
{
    if (!res->n_comm) return;
    printf("\n%-40s %8s %9s %10s %10s\n", "collective (group)", "n", "after_ms", "oldest_ms",
           "newest_ms");
    for (size_t i = 0; i < res->n_comm && i < 5; i++) {
        const pb_sg_comm *k = &res->comm[i];
        char kind[160], name[64], op[64];
        const char *g = k->group < job->n_groups ? job->group_names[k->group] : NULL;
        pb_buf_sanitize_into(name, sizeof name, g ? g : "?");
        pb_buf_sanitize_into(op, sizeof op, k->op);
        snprintf(kind, sizeof kind, "%s %llu B (%s)", op, (unsigned long long)k->bytes, name);
        printf("%-40s %8zu %9.1f %10.1f %10.1f%s\n", kind, k->n, k->after_ms, k->early_ms,
               k->recent_ms, k->added_step_ms > 0 ? "  slowed" : "");
    }
}

/* The options of stragglers (option.h): the parser and 'stragglers --help' read them. */
const pb_option pb_options_stragglers[] = {
    PB_OPTION_JSON("the analysis as one JSON object"),
    PB_OPTION_DEADLINE("wait at most S seconds for the ranks (default 5)"),
    PB_OPTION_TABLE_END,
};

int cmd_stragglers(const pb_cli_args *a)
{
    if (a->resolved.kind == PB_TARGET_FILE)
        return pb_cli_usage_error("%s is a recording file: stragglers needs the running job "
                                  "(its agents keep the arrivals)", a->target);
    long deadline = pb_fanout_deadline_ms(a->deadline_s);
    pb_rank_ep *eps = NULL;
    int n = 0;
    if (pb_fanout_roster(&a->resolved, deadline, &eps, &n)) return PB_EXIT_ERROR;
    int rc = PB_EXIT_ERROR;
    pb_job_arrivals job;
    pb_sg_result res = {0};
    json_t *out = NULL;
    if (pb_job_arrivals_fetch(eps, n, NULL, deadline, stderr, &job)) {
        free(eps);
        return pb_cli_error("out of memory");
    }
    if (job.count == 0) {
        pb_cli_error("no rank answered");
        goto done;
    }
    if (pb_stragglers_analyze(job.ranks, job.count, &res)) goto oom;
    const pb_sg_rank_result *c = res.culprit >= 0 ? &res.ranks[res.culprit] : NULL;
    const char *phase =
        c && res.culprit_phase >= 0 ? pb_phases[res.culprit_phase].short_name : NULL;
    if (a->json) {
        out = pb_stragglers_json(&res, 0, job.group_names, job.n_groups);
        if (!out || json_dumpf(out, stdout, JSON_INDENT(2)) || fputc('\n', stdout) == EOF) {
            pb_cli_error("cannot write the JSON");
            goto done;
        }
    } else {
        char host[256], late[256], comm[640];
        pb_buf_sanitize_into(host, sizeof host, c && c->host ? c->host : "?");
        pb_buf_sanitize_into(late, sizeof late, res.late_host ? res.late_host : "?");
        char kind[320], kind_safe[320];
        pb_stragglers_late_kind_text(&res, job.group_names, job.n_groups, kind, sizeof kind);
        pb_buf_sanitize_into(kind_safe, sizeof kind_safe, kind);
        if (res.late_host && c)
            printf("node %s is late: its ranks enter last in %zu of %zu collectives%s; rank %d's "
                   "median lag %.1f ms (step %.1f ms)", late, res.late_host_count,
                   res.collectives, kind_safe, c->rank, c->median_lag_ms, res.step_ms);
        else if (c && res.culprit_wait_step_ms > 0)
            printf("rank %d (%s) makes the others wait: %.1f ms a step beyond the %.1f ms bar (the "
                   "job's own jitter %.1f ms), in the %zu of %zu collectives it enters last (step "
                   "%.1f ms)", c->rank, host, res.culprit_wait_step_ms, res.bar_ms, res.noise_ms,
                   c->times_last, res.collectives, res.step_ms);
        else if (c)
            printf("rank %d (%s) makes the others wait: last in %zu of %zu collectives, median lag "
                   "%.1f ms behind the median arrival (step %.1f ms)", c->rank, host,
                   c->times_last, res.collectives, c->median_lag_ms, res.step_ms);
        else if (!pb_stragglers_comm_text(&res, job.group_names, job.n_groups, comm, sizeof comm))
            printf("no straggler, but %s", comm);
        else
            printf("no straggler: no rank is last in >= 60 %% of %zu collectives with a median lag "
                   ">= %.1f ms (max(2 ms, 5 %% of the %.1f ms step, 3 x the job's own jitter "
                   "%.1f ms)), nor holds >= 60 %% of the wait beyond that bar at >= %.1f ms a "
                   "step", res.collectives, res.bar_ms, res.step_ms, res.noise_ms, res.floor_ms);
        if (phase)
            printf("; its %s is %.1f ms longer than the other ranks' median",
                   pb_phases[res.culprit_phase].short_text, res.culprit_phase_excess_ms);
        printf("\n");
        printf("%-6s %-20s %10s %14s %10s  %s\n", "rank", "host", "times_last", "median_lag_ms",
               "wait_ms", "phase");
        for (size_t i = 0; i < res.n_ranks; i++) {
            const pb_sg_rank_result *r = &res.ranks[i];
            pb_buf_sanitize_into(host, sizeof host, r->host ? r->host : "?");
            printf("%-6d %-20s %10zu %14.1f %10.1f  %s\n", r->rank, host, r->times_last,
                   r->median_lag_ms, r->wait_ms, (int)i == res.culprit && phase ? phase : "-");
        }
        if (res.incomplete)
            printf("(%zu collectives not seen by every member were left out)\n", res.incomplete);
        print_kinds(&res, &job);
    }
    rc = job.missing ? PB_EXIT_PARTIAL : PB_EXIT_OK;
    goto done;
oom:
    pb_cli_error("out of memory");
done:
    json_decref(out);
    pb_stragglers_free(&res);
    pb_job_arrivals_free(&job);
    free(eps);
    return rc;
}
