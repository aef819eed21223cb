/*
 * cmd_stragglers.c - `probing <target> stragglers`: which rank makes everyone wait, when
 * nothing hangs.
 *
 * The job's roster (fanout.h); every rank is asked GET /api/arrivals (its agent's bounded ring
 * of the last 512 collectives per process group, job.c) and the last 64 rows of python.steps
 * (its phase medians). Each rank's clock is aligned with the Cristian-style offset of
 * `timeline --ranks` (offset = rank's "now" - (sent + answered) / 2, error up to half the round
 * trip), then report/stragglers.c names the rank that enters last, its median lag, the phase
 * its time goes to, and a late node. Exit status: 0, or PB_EXIT_PARTIAL (3) when some ranks did
 * not answer (named on stderr; the analysis then has no complete collective for their groups).
 */
#include "client/fanout.h"
#include "cmd/command.h"
#include "out/format.h"
#include "stragglers.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SG_STEPS_SQL                                                                           \
    "{\"sql\":\"SELECT wall, data_wait, forward, backward, optimizer FROM python.steps "       \
    "ORDER BY step DESC LIMIT 64\"}"

static int dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of column c (seconds) of a query answer's rows, in ms; -1 when none. */
static double col_median_ms(json_t *root, size_t c) {
    json_t *rows = json_object_get(root, "rows");
    size_t n = json_array_size(rows), k = 0;
    double *v = n ? malloc(n * sizeof *v) : NULL;
    if (!v) return -1;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(json_array_get(rows, i), c);
        if (json_is_number(x)) v[k++] = json_number_value(x) * 1e3;
    }
    qsort(v, k, sizeof *v, dcmp);
    double m = !k ? -1 : k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
    free(v);
    return m;
}

/* Group names -> ids, the same on every rank (names come from the group's group_name), in a
 * jansson object used as a hash map: a job of thousands of ranks in tensor- and data-parallel
 * groups has as many group names, each its own id. Returns -1 out of memory. */
static int64_t group_id(json_t *ids, const char *name) {
    json_t *id = json_object_get(ids, name);
    if (id) return json_integer_value(id);
    json_int_t next = (json_int_t)json_object_size(ids);
    return json_object_set_new(ids, name, json_integer(next)) ? -1 : next;
}

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
    pb_fanout_req *arr = pb_fanout_requests(eps, n, NULL);
    pb_fanout_req *steps = pb_fanout_requests(eps, n, NULL);
    pb_arrival_rank *in = calloc((size_t)n, sizeof *in);
    pb_arrival **lists = calloc((size_t)n, sizeof *lists);
    int *who = calloc((size_t)n, sizeof *who);
    json_t *gids = json_object();
    pb_sg_result res = {0};
    json_t *out = NULL;
    if (!arr || !steps || !in || !lists || !who || !gids) goto oom;
    pb_fanout_run(arr, n, "GET", "/api/arrivals", NULL, deadline);
    pb_fanout_run(steps, n, "POST", "/api/query", SG_STEPS_SQL, deadline);
    int m = 0, missing = 0;
    for (int r = 0; r < n; r++) {
        json_t *root = arr[r].root;
        if (!root || arr[r].status != 200) {
            fprintf(stderr, "probing: rank %d did not answer: %s\n", r,
                    arr[r].err[0] ? arr[r].err : "no /api/arrivals (an older agent?)");
            missing++;
            continue;
        }
        double now = json_number_value(json_object_get(root, "now"));
        double offset = now - (arr[r].sent + arr[r].answered) / 2; /* fanout.h */
        json_t *groups = json_object_get(root, "groups");
        size_t total = 0, gi;
        json_t *g;
        json_array_foreach(groups, gi, g) total += json_array_size(json_object_get(g, "arrivals"));
        lists[m] = total ? calloc(total, sizeof **lists) : NULL;
        if (total && !lists[m]) goto oom;
        size_t k = 0;
        json_array_foreach(groups, gi, g) {
            const char *name = json_string_value(json_object_get(g, "group"));
            int64_t id = group_id(gids, name ? name : "?");
            if (id < 0) goto oom;
            size_t ai;
            json_t *e;
            json_array_foreach(json_object_get(g, "arrivals"), ai, e) {
                double en = json_number_value(json_array_get(e, 3)) - offset;
                json_t *ex = json_array_get(e, 4);
                lists[m][k++] = (pb_arrival){
                    (uint32_t)id, (uint64_t)json_integer_value(json_array_get(e, 0)),
                    json_string_value(json_array_get(e, 1)),
                    (uint64_t)json_integer_value(json_array_get(e, 2)), (int64_t)llround(en * 1e9),
                    json_is_number(ex) ? (int64_t)llround((json_number_value(ex) - offset) * 1e9) : 0};
            }
        }
        pb_arrival_rank *pr = &in[m];
        pr->rank = r;
        pr->host = eps[r].host[0] ? eps[r].host : json_string_value(json_object_get(root, "host"));
        pr->arrivals = lists[m];
        pr->n_arrivals = k;
        json_t *sq = steps[r].status == 200 ? steps[r].root : NULL;
        pr->step_ms = sq ? col_median_ms(sq, 0) : -1;
        for (int p = 0; p < PB_SG_PHASES; p++) pr->phase_ms[p] = sq ? col_median_ms(sq, (size_t)p + 1) : -1;
        who[m++] = r;
    }
    if (m == 0) {
        pb_cli_error("no rank answered");
        goto done;
    }
    if (pb_stragglers_analyze(in, (size_t)m, &res)) goto oom;
    const pb_sg_rank_result *c = res.culprit >= 0 ? &res.ranks[res.culprit] : NULL;
    const char *phase = c && res.culprit_phase >= 0 ? pb_sg_phase_name[res.culprit_phase] : NULL;
    if (a->json) {
        out = json_pack("{s:I,s:I,s:f,s:f,s:o,s:o,s:o,s:f,s:[]}", "collectives",
                        (json_int_t)res.collectives, "incomplete", (json_int_t)res.incomplete,
                        "step_ms", res.step_ms, "floor_ms", res.floor_ms, "culprit",
                        c ? json_integer(c->rank) : json_null(), "phase",
                        phase ? json_string(phase) : json_null(), "late_host",
                        res.late_host ? json_string(res.late_host) : json_null(),
                        "phase_excess_ms", res.culprit_phase_excess_ms, "ranks");
        json_t *ranks = out ? json_object_get(out, "ranks") : NULL;
        for (size_t i = 0; ranks && i < res.n_ranks; i++)
            json_array_append_new(ranks, json_pack("{s:i,s:s?,s:I,s:f}", "rank", res.ranks[i].rank,
                                                   "host", res.ranks[i].host, "times_last",
                                                   (json_int_t)res.ranks[i].times_last,
                                                   "median_lag_ms", res.ranks[i].median_lag_ms));
        if (!out || json_dumpf(out, stdout, JSON_INDENT(2)) || fputc('\n', stdout) == EOF) {
            pb_cli_error("cannot write the JSON");
            goto done;
        }
    } else {
        char host[256], late[256];
        pb_buf_sanitize_into(host, sizeof host, c && c->host ? c->host : "?");
        pb_buf_sanitize_into(late, sizeof late, res.late_host ? res.late_host : "?");
        if (res.late_host && c)
            printf("node %s is late: its ranks enter last in %zu of %zu collectives; rank %d's median "
                   "lag %.1f ms (step %.1f ms)", late, res.late_host_count, res.collectives,
                   c->rank, c->median_lag_ms, res.step_ms);
        else if (c)
            printf("rank %d (%s) makes the others wait: last in %zu of %zu collectives, median lag "
                   "%.1f ms behind the median arrival (step %.1f ms)", c->rank, host,
                   c->times_last, res.collectives, c->median_lag_ms, res.step_ms);
        else
            printf("no straggler: no rank is last in >= 60 %% of %zu collectives with a median lag "
                   ">= %.1f ms (max(2 ms, 5 %% of the %.1f ms step))", res.collectives, res.floor_ms,
                   res.step_ms);
        if (phase)
            printf("; its %s is %.1f ms longer than the other ranks' median", phase,
                   res.culprit_phase_excess_ms);
        printf("\n");
        printf("%-6s %-20s %10s %14s  %s\n", "rank", "host", "times_last", "median_lag_ms", "phase");
        for (size_t i = 0; i < res.n_ranks; i++) {
            const pb_sg_rank_result *r = &res.ranks[i];
            pb_buf_sanitize_into(host, sizeof host, r->host ? r->host : "?");
            printf("%-6d %-20s %10zu %14.1f  %s\n", r->rank, host, r->times_last,
                   r->median_lag_ms, (int)i == res.culprit && phase ? phase : "-");
        }
        if (res.incomplete)
            printf("(%zu collectives not seen by every member were left out)\n", res.incomplete);
    }
    rc = missing ? PB_EXIT_PARTIAL : PB_EXIT_OK;
    goto done;
oom:
    pb_cli_error("out of memory");
done:
    json_decref(out);
    json_decref(gids);
    pb_stragglers_free(&res);
    for (int i = 0; lists && i < n; i++) free(lists[i]);
    free(lists), free(in), free(who);
    if (arr) pb_fanout_free(arr, n), free(arr);
    if (steps) pb_fanout_free(steps, n), free(steps);
    free(eps);
    return rc;
}
