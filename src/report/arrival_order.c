/*
 * arrival_order.c - the rank, or the node, that the job's collectives wait for (issue 31), from
 * the order in which the ranks enter them (docs/report.md, "Distributed"; docs/cluster.md).
 *
 * The CLI gives the report every reached rank's arrival summary (pb_report_source.arrivals:
 * GET /api/arrivals and the rank's phase medians, on one clock); stragglers.c does the
 * analysis, the same as `probing <target> stragglers`. This rule turns its verdict into the
 * `arrival_order` finding:
 *   - a culprit (a rank last in >= 60 % of the complete collectives, its median lag over the
 *     floor), or a late node: warning, critical when the others spend half their time or more
 *     waiting for it (wait_share, the thresholds of `communication`); the claim says how often
 *     and by how much it is last, what the wait costs, the phase of its own steps its time goes
 *     to, and the node when all of a node's ranks are the late ones;
 *   - none: ok (the job was checked and nobody makes the others wait); skipped when no
 *     collective was seen by every member of its group yet;
 *   - none, but the collectives themselves slowed (stragglers.h: comm_slow, the ranks arrive
 *     together and the collectives take longer after the last one enters than in the oldest
 *     third of the window): warning, a communication slowdown, with the kind that slowed most.
 * The driver (report.c) then weighs it against `communication`: the others' communication time
 * is the wait for the culprit, so the finding takes that finding's place and severity.
 * Its numbers are `probing <target> stragglers --json`'s (at most 16 ranks, the most often
 * last). No SQL: the arrivals come from the agents' rings, not a table.
 */
#include "phases.h"
#include "rules.h"

#include <stdio.h>
#include <string.h>

#define ORDER_RANKS 16 /* ranks listed in the finding's numbers */
#define ORDER_CRITICAL 0.5

void pb__report_arrival_order(pb__report *r)
{
    const pb_report_source *src = r->src;
    pb_sg_result res;
    if (!src->arrivals || src->n_arrivals < 2) return;
    if (pb_stragglers_analyze(src->arrivals, src->n_arrivals, &res)) return;
    json_t *nums = pb_stragglers_json(&res, ORDER_RANKS, src->arrival_groups,
                                      src->n_arrival_groups);
    if (!nums) goto done;
    /* Every branch below hands nums to a finding, which owns it from then on. */
    json_object_set_new(nums, "ranks_reached", json_integer((json_int_t)src->n_arrivals));
    json_object_set_new(nums, "ranks_missing", json_integer(src->arrivals_missing));
    char missing[96] = "";
    if (src->arrivals_missing)
        snprintf(missing, sizeof missing, "; %d rank%s did not answer", src->arrivals_missing,
                 src->arrivals_missing == 1 ? "" : "s");
    if (res.collectives == 0) {
        pb__report_finding(r, "arrival_order", "check", "skipped",
                           pb__report_textf("no collective was seen by every member of its "
                                            "group yet (%zu ranks%s)", src->n_arrivals, missing),
                           nums, NULL, NULL);
        nums = NULL; /* the finding owns it */
        goto done;
    }
    const pb_sg_rank_result *c = res.culprit >= 0 ? &res.ranks[res.culprit] : NULL;
    char comm[640];
    if (!c && !pb_stragglers_comm_text(&res, src->arrival_groups, src->n_arrival_groups, comm,
                                       sizeof comm)) {
        pb__report_finding(
            r, "arrival_order", "check", "warning",
            pb__report_textf("no rank makes the others wait, but %s (%zu ranks%s)", comm,
                             src->n_arrivals, missing),
            nums, NULL,
            "No rank is late: the time goes to the collectives themselves. Look at the network "
            "between the nodes (link speed and errors: ethtool, ibstat; other traffic on it; "
            "the NCCL/gloo interface chosen), and at the collectives' sizes "
            "(`probing <target> stragglers` lists them).");
        pb__report_suggest(r, "the collectives' time after the last rank enters, per kind",
                           "probing %s stragglers", pb__report_target(r));
        nums = NULL; /* the finding owns it */
        goto done;
    }
    if (!c) {
        pb__report_finding(r, "arrival_order", "check", "ok",
                           pb__report_textf("no rank makes the others wait: none enters last in "
                                            ">= 60%% of %zu collectives with a median lag >= "
                                            "%.1f ms, the floor or 3 x the job's own jitter "
                                            "(%zu ranks%s)", res.collectives, res.bar_ms,
                                            src->n_arrivals, missing),
                           nums, NULL, NULL);
        nums = NULL; /* the finding owns it */
        goto done;
    }
    char who[640], phase[160] = "", kind[320];
    pb_stragglers_late_kind_text(&res, src->arrival_groups, src->n_arrival_groups, kind,
                                 sizeof kind);
    if (res.late_host)
        snprintf(who, sizeof who, "node %s is late: its ranks enter collectives last in %zu of "
                 "%zu (rank %d the most often, %.1f ms behind the median arrival)%s",
                 res.late_host, res.late_host_count, res.collectives, c->rank, c->median_lag_ms,
                 kind);
    else if (res.culprit_wait_step_ms > 0)
        snprintf(who, sizeof who, "rank %d (%s) makes the others wait: %.1f ms a step beyond the "
                 "%.1f ms bar (the job's own jitter %.1f ms), in the %zu of %zu collectives it "
                 "enters last", c->rank, c->host ? c->host : "?", res.culprit_wait_step_ms,
                 res.bar_ms, res.noise_ms, c->times_last, res.collectives);
    else
        snprintf(who, sizeof who, "rank %d (%s) makes the others wait: it enters collectives "
                 "last in %zu of %zu, %.1f ms (median) behind the median arrival", c->rank,
                 c->host ? c->host : "?", c->times_last, res.collectives, c->median_lag_ms);
    if (res.culprit_phase >= 0)
        snprintf(phase, sizeof phase, "; its %s is %.1f ms longer than the other ranks' median",
                 pb_phases[res.culprit_phase].short_text, res.culprit_phase_excess_ms);
    pb__report_finding(
        r, "arrival_order", "check", res.wait_share >= ORDER_CRITICAL ? "critical" : "warning",
        pb__report_textf("%s; the others wait for it %.0f%% of the time%s%s", who,
                         100 * res.wait_share, phase, missing),
        nums, NULL,
        res.late_host
            ? "Every rank of that node is late: look at the node first (other processes, CPU "
              "limits or throttling, thermal limits, its link), then at one of its ranks' own "
              "report (docs/cluster.md)."
            : "The other ranks wait in their collectives for this one: fix its work, not the "
              "communication. Look at the phase named (its own report: data loading, Python "
              "before the step, a larger shard), and at its host (docs/cluster.md).");
    pb__report_suggest(r, "which rank enters the collectives last, per rank",
                       "probing %s stragglers", pb__report_target(r));
    nums = NULL; /* the finding owns it */
done:
    json_decref(nums);
    pb_stragglers_free(&res);
}
