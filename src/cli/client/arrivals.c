/*
 * arrivals.c - every rank's arrival summary on one clock (see arrivals.h): the fetch that
 * `stragglers`, `report` and the exporter share.
 */
#include "client/arrivals.h"

#include "out/cli.h"
#include "phases.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What one rank's answers may hold. An agent keeps at most 16 groups of 512 collectives
 * (PB_JOB_MAX_GROUPS, PB_JOB_ARRIVALS in src/agent/collect): about 1 MB of JSON at most, and 64
 * rows of steps. A rank that sends more is not an agent of this version, or lies: its answer
 * is dropped past the byte caps (the JSON costs the CLI about 9 times its size once parsed),
 * and cut to the first MAX_GROUPS groups of MAX_ARRIVALS each (the analysis' time), so that
 * one rank cannot cost the command more than a few tens of MB and a fraction of a second. */
#define ARRIVALS_ANSWER_MAX ((size_t)4 << 20)
#define STEPS_ANSWER_MAX ((size_t)1 << 20)
#define MAX_GROUPS 64
#define MAX_ARRIVALS 2048

/* The request for a rank's last steps: the step time, then the phases the analysis looks in
 * (stragglers.h), in pb_phases[] order. */
#define STEPS_SQL_FMT "{\"sql\":\"SELECT %s, %s FROM python.steps ORDER BY step DESC LIMIT 64\"}"

static int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of column c (seconds) of a query answer's rows, in ms; -1 when none. */
static double col_median_ms(json_t *root, size_t c)
{
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
static int64_t group_id(json_t *ids, const char *name)
{
    json_t *id = json_object_get(ids, name);
    if (id) return json_integer_value(id);
    json_int_t next = (json_int_t)json_object_size(ids);
    return json_object_set_new(ids, name, json_integer(next)) ? -1 : next;
}

/* One rank's answer into out->lists[m] and out->ranks[m], cut to MAX_GROUPS groups of
 * MAX_ARRIVALS (said on why when not NULL). Returns 0 or -ENOMEM. */
static int add_rank(pb_job_arrivals *out, const pb_rank_ep *ep, int r, size_t m, FILE *why)
{
    json_t *root = out->arrivals[r].root;
    double now = json_number_value(json_object_get(root, "now"));
    double offset = pb_fanout_clock_offset(&out->arrivals[r], now, NULL);
    json_t *groups = json_object_get(root, "groups"), *g;
    size_t total = 0, gi, longest = 0;
    json_array_foreach(groups, gi, g) {
        size_t len = json_array_size(json_object_get(g, "arrivals"));
        if (len > longest) longest = len;
        if (gi < MAX_GROUPS) total += len < MAX_ARRIVALS ? len : MAX_ARRIVALS;
    }
    if (why && (json_array_size(groups) > MAX_GROUPS || longest > MAX_ARRIVALS))
        fprintf(why, "probing: rank %d: its answer was cut to %d groups of %d collectives (it "
                "sent %zu groups, the longest of %zu; an agent keeps at most 16 of 512): is it a "
                "probing agent?\n", r, MAX_GROUPS, MAX_ARRIVALS, json_array_size(groups), longest);
    pb_arrival *list = total ? calloc(total, sizeof *list) : NULL;
    if (total && !list) return -ENOMEM;
    out->lists[m] = list;
    size_t k = 0;
    json_array_foreach(groups, gi, g) {
        if (gi == MAX_GROUPS) break;
        const char *name = json_string_value(json_object_get(g, "group"));
        int64_t id = group_id(out->names, name ? name : "?");
        if (id < 0) return -ENOMEM;
        size_t ai;
        json_t *e;
        json_array_foreach(json_object_get(g, "arrivals"), ai, e) {
            if (ai == MAX_ARRIVALS) break;
            double en = json_number_value(json_array_get(e, 3)) - offset;
            json_t *ex = json_array_get(e, 4);
            list[k++] = (pb_arrival){
                (uint32_t)id, (uint64_t)json_integer_value(json_array_get(e, 0)),
                json_string_value(json_array_get(e, 1)),
                (uint64_t)json_integer_value(json_array_get(e, 2)), (int64_t)llround(en * 1e9),
                json_is_number(ex) ? (int64_t)llround((json_number_value(ex) - offset) * 1e9) : 0};
        }
    }
    pb_arrival_rank *pr = &out->ranks[m];
    pr->rank = r;
    pr->host = ep->host[0] ? ep->host : json_string_value(json_object_get(root, "host"));
    pr->arrivals = list;
    pr->n_arrivals = k;
    json_t *sq = out->steps[r].status == 200 ? out->steps[r].root : NULL;
    pr->step_ms = sq ? col_median_ms(sq, 0) : -1;
    size_t column = 1; /* STEPS_SQL_FMT's phases follow the step time */
    for (int p = 0; p < PB_PHASE_COUNT; p++)
        pr->phase_ms[p] = sq && pb_phase_selected(p, PB_SG_PHASES_WITHOUT)
                              ? col_median_ms(sq, column++)
                              : -1;
    return 0;
}

int pb_job_arrivals_fetch(const pb_rank_ep *eps, int n, const unsigned char *sel,
                          long deadline_ms, FILE *why, pb_job_arrivals *out)
{
    memset(out, 0, sizeof *out);
    char columns[256], steps_sql[512];
    if (pb_phase_columns(columns, sizeof columns, PB_SG_PHASES_WITHOUT, ", ") < 0) return -ENOMEM;
    snprintf(steps_sql, sizeof steps_sql, STEPS_SQL_FMT, pb_phase_wall.column, columns);
    out->n = n;
    out->arrivals = pb_fanout_requests(eps, n, sel);
    out->steps = pb_fanout_requests(eps, n, sel);
    out->ranks = calloc(n ? (size_t)n : 1, sizeof *out->ranks);
    out->lists = calloc(n ? (size_t)n : 1, sizeof *out->lists);
    out->names = json_object();
    if (!out->arrivals || !out->steps || !out->ranks || !out->lists || !out->names) goto oom;
    for (int r = 0; r < n; r++) {
        out->arrivals[r].max_answer_bytes = ARRIVALS_ANSWER_MAX;
        out->steps[r].max_answer_bytes = STEPS_ANSWER_MAX;
    }
    pb_fanout_run(out->arrivals, n, "GET", "/api/arrivals", NULL, deadline_ms);
    pb_fanout_run(out->steps, n, "POST", "/api/query", steps_sql, deadline_ms);
    for (int r = 0; r < n; r++) {
        if (sel && !sel[r]) continue;
        pb_fanout_req *q = &out->arrivals[r];
        if (!q->root || q->status != 200) {
            if (why)
                fprintf(why, "probing: rank %d did not answer: %s\n", r,
                        q->err[0] ? q->err : "no /api/arrivals (an older agent?)");
            out->missing++;
            continue;
        }
        if (add_rank(out, &eps[r], r, out->count, why)) goto oom;
        out->count++;
    }
    out->n_groups = json_object_size(out->names);
    out->group_names = calloc(out->n_groups ? out->n_groups : 1, sizeof *out->group_names);
    if (!out->group_names) goto oom;
    const char *name;
    json_t *id;
    json_object_foreach(out->names, name, id) out->group_names[json_integer_value(id)] = name;
    return 0;
oom:
    pb_job_arrivals_free(out);
    return -ENOMEM;
}

void pb_job_arrivals_keep_last(pb_job_arrivals *job, uint64_t last)
{
    if (!last || !job->n_groups) return;
    uint64_t *newest = calloc(job->n_groups, sizeof *newest);
    if (!newest) return; /* keeps everything: the analysis of the whole window, not a wrong one */
    for (size_t m = 0; m < job->count; m++)
        for (size_t i = 0; i < job->ranks[m].n_arrivals; i++) {
            const pb_arrival *a = &job->ranks[m].arrivals[i];
            if (a->group < job->n_groups && a->seq > newest[a->group]) newest[a->group] = a->seq;
        }
    for (size_t m = 0; m < job->count; m++) {
        pb_arrival *list = job->lists[m];
        size_t k = 0;
        for (size_t i = 0; i < job->ranks[m].n_arrivals; i++)
            if (list[i].group < job->n_groups && list[i].seq + last > newest[list[i].group])
                list[k++] = list[i];
        job->ranks[m].n_arrivals = k;
    }
    free(newest);
}

void pb_job_arrivals_free(pb_job_arrivals *out)
{
    if (!out) return;
    for (size_t i = 0; out->lists && i < (size_t)out->n; i++) free(out->lists[i]);
    free(out->lists);
    free(out->ranks);
    free(out->group_names);
    if (out->arrivals) pb_fanout_free(out->arrivals, out->n), free(out->arrivals);
    if (out->steps) pb_fanout_free(out->steps, out->n), free(out->steps);
    json_decref(out->names);
    free(out->roster);
    memset(out, 0, sizeof *out);
}

int pb_job_stragglers(const pb_target *t, const char *name, double deadline_s, uint64_t last,
                      FILE *why,
                      pb_job_arrivals *job, pb_sg_result *res)
{
    memset(job, 0, sizeof *job);
    memset(res, 0, sizeof *res);
    if (t->kind == PB_TARGET_FILE)
        return pb_cli_usage_error("%s is a recording file: stragglers needs the running job "
                                  "(its agents keep the arrivals)", name);
    long deadline = pb_fanout_deadline_ms(deadline_s);
    pb_rank_ep *eps = NULL;
    int n = 0;
    if (pb_fanout_roster(t, deadline, &eps, &n)) return PB_EXIT_ERROR;
    int rc = PB_EXIT_ERROR;
    if (pb_job_arrivals_fetch(eps, n, NULL, deadline, why, job)) {
        rc = pb_cli_error("out of memory");
    } else if (job->count == 0) {
        rc = pb_cli_error("no rank answered");
    } else {
        pb_job_arrivals_keep_last(job, last);
        rc = pb_stragglers_analyze(job->ranks, job->count, res) ? pb_cli_error("out of memory")
             : job->missing                                     ? PB_EXIT_PARTIAL
                                                                : PB_EXIT_OK;
    }
    job->roster = eps; /* the ranks' hosts point into it */
    return rc;
}
