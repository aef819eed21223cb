/*
 * stragglers_render.c - the stragglers analysis as text (stragglers.h): the verdict sentence,
 * a line per rank, the collectives that take the most time once every rank is in. The command
 * (cmd_stragglers.c) and the MCP tool (src/cli/mcp/tools.c) print the same text.
 */
#include "stragglers.h"

#include "buf.h"
#include "phases.h"

#include <stdio.h>

/* The kinds of collective that take the most time once every rank is in (at most 5). */
static void print_kinds(FILE *out, const pb_sg_result *res, const char *const *group_names,
                        size_t n_groups)
{
    if (!res->n_comm) return;
    fprintf(out, "\n%-40s %8s %9s %10s %10s\n", "collective (group)", "n", "after_ms",
            "oldest_ms", "newest_ms");
    for (size_t i = 0; i < res->n_comm && i < 5; i++) {
        const pb_sg_comm *k = &res->comm[i];
        char kind[160], name[64], op[64];
        const char *g = group_names && k->group < n_groups ? group_names[k->group] : NULL;
        pb_buf_sanitize_into(name, sizeof name, g ? g : "?");
        pb_buf_sanitize_into(op, sizeof op, k->op);
        snprintf(kind, sizeof kind, "%s %llu B (%s)", op, (unsigned long long)k->bytes, name);
        fprintf(out, "%-40s %8zu %9.1f %10.1f %10.1f%s\n", kind, k->n, k->after_ms, k->early_ms,
                k->recent_ms, k->added_step_ms > 0 ? "  slowed" : "");
    }
}

void pb_stragglers_render(FILE *out, const pb_sg_result *res, const char *const *group_names,
                          size_t n_groups)
{
    const pb_sg_rank_result *c = res->culprit >= 0 ? &res->ranks[res->culprit] : NULL;
    const char *phase =
        c && res->culprit_phase >= 0 ? pb_phases[res->culprit_phase].short_name : NULL;
    char host[256], late[256], comm[640];
    pb_buf_sanitize_into(host, sizeof host, c && c->host ? c->host : "?");
    pb_buf_sanitize_into(late, sizeof late, res->late_host ? res->late_host : "?");
    char kind[320], kind_safe[320];
    pb_stragglers_late_kind_text(res, group_names, n_groups, kind, sizeof kind);
    pb_buf_sanitize_into(kind_safe, sizeof kind_safe, kind);
    if (res->late_host && c)
        fprintf(out,
                "node %s is late: its ranks enter last in %zu of %zu collectives%s; rank %d's "
                "median lag %.1f ms (step %.1f ms)",
                late, res->late_host_count, res->collectives, kind_safe, c->rank,
                c->median_lag_ms, res->step_ms);
    else if (c && res->culprit_wait_step_ms > 0)
        fprintf(out,
                "rank %d (%s) makes the others wait: %.1f ms a step beyond the %.1f ms bar (the "
                "job's own jitter %.1f ms), in the %zu of %zu collectives it enters last (step "
                "%.1f ms)",
                c->rank, host, res->culprit_wait_step_ms, res->bar_ms, res->noise_ms,
                c->times_last, res->collectives, res->step_ms);
    else if (c)
        fprintf(out,
                "rank %d (%s) makes the others wait: last in %zu of %zu collectives, median lag "
                "%.1f ms behind the median arrival (step %.1f ms)",
                c->rank, host, c->times_last, res->collectives, c->median_lag_ms, res->step_ms);
    else if (!pb_stragglers_comm_text(res, group_names, n_groups, comm, sizeof comm))
        fprintf(out, "no straggler, but %s", comm);
    else
        fprintf(out,
                "no straggler: no rank is last in >= 60 %% of %zu collectives with a median lag "
                ">= %.1f ms (max(2 ms, 5 %% of the %.1f ms step, 3 x the job's own jitter "
                "%.1f ms)), nor holds >= 60 %% of the wait beyond that bar at >= %.1f ms a "
                "step",
                res->collectives, res->bar_ms, res->step_ms, res->noise_ms, res->floor_ms);
    if (phase)
        fprintf(out, "; its %s is %.1f ms longer than the other ranks' median",
                pb_phases[res->culprit_phase].short_text, res->culprit_phase_excess_ms);
    fputc('\n', out);
    fprintf(out, "%-6s %-20s %10s %14s %10s  %s\n", "rank", "host", "times_last",
            "median_lag_ms", "wait_ms", "phase");
    for (size_t i = 0; i < res->n_ranks; i++) {
        const pb_sg_rank_result *r = &res->ranks[i];
        pb_buf_sanitize_into(host, sizeof host, r->host ? r->host : "?");
        fprintf(out, "%-6d %-20s %10zu %14.1f %10.1f  %s\n", r->rank, host, r->times_last,
                r->median_lag_ms, r->wait_ms, (int)i == res->culprit && phase ? phase : "-");
    }
    if (res->incomplete)
        fprintf(out, "(%zu collectives not seen by every member were left out)\n",
                res->incomplete);
    print_kinds(out, res, group_names, n_groups);
}
