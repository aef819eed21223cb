/*
 * cmd_ranks.c - `probing <target> ranks` and `probing <target> query --ranks all "SQL"`.
 *
 * Both start from the roster the target reads from its job's c10d store (fanout.h), then ask
 * every selected rank at once with a deadline. ranks: GET /api/rank from each, one line per rank
 * with its step, how long ago that step started and its state (training / in a collective /
 * not answering / gone), with the reason for every rank that cannot be shown. query --ranks:
 * POST /api/query to each; the rows come back with "rank" and "host" columns first, so one
 * statement can be compared or aggregated across ranks. A rank that does not answer in time is
 * named on stderr with its reason and the exit status is PB_EXIT_PARTIAL (3); the others' rows
 * are printed. See docs/cluster.md.
 */
#include "cli.h"
#include "client.h"
#include "fanout.h"
#include "format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long deadline_ms(const pb_cli_args *a)
{
    return a->deadline_s > 0 ? (long)(a->deadline_s * 1000) : PB_FANOUT_DEADLINE_MS;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Requests for the selected ranks of the roster (NULL after printing why). */
static pb_fanout_req *requests_for(const pb_rank_ep *eps, int n, const unsigned char *sel)
{
    pb_fanout_req *reqs = calloc((size_t)(n ? n : 1), sizeof *reqs);
    if (!reqs) {
        pb_cli_error("out of memory");
        return NULL;
    }
    for (int r = 0; r < n; r++) {
        if (sel && !sel[r]) continue;
        pb_fanout_prepare(&reqs[r], &eps[r]);
    }
    return reqs;
}

/* "all_reduce #12 on WORLD for 3.2 s" when the rank is inside a collective, else NULL. */
static int in_collective(json_t *answer, char *out, size_t outlen)
{
    json_t *colls = json_object_get(answer, "collectives"), *c;
    size_t i;
    json_array_foreach(colls, i, c) {
        const char *state = json_string_value(json_object_get(c, "state"));
        if (!state || strcmp(state, "entered") != 0) continue;
        snprintf(out, outlen, "in a collective: %s #%lld on %s for %.1f s",
                 json_string_value(json_object_get(c, "op")) ?: "?",
                 (long long)json_integer_value(json_object_get(c, "seq")),
                 json_string_value(json_object_get(c, "group")) ?: "?",
                 json_number_value(json_object_get(c, "for_s")));
        return 1;
    }
    return 0;
}

int cmd_ranks(const pb_cli_args *a)
{
    pb_format fmt;
    int rc = pb_format_parse(a->format, PB_FORMAT_TABLE | PB_FORMAT_CSV | PB_FORMAT_JSON, "ranks", &fmt);
    if (rc) return rc;
    pb_rank_ep *eps = NULL;
    if (a->resolved.kind == PB_TARGET_FILE)
        return pb_cli_usage_error("%s is a recording file: ranks needs the running job (a "
                                  "recording has no live ranks to ask; 'probing %s query --ranks "
                                  "all \"SQL\"' reads the job's recordings)", a->target, a->target);
    int n = 0;
    if (pb_fanout_roster(&a->resolved, deadline_ms(a), &eps, &n)) return PB_EXIT_ERROR;
    pb_fanout_req *reqs = requests_for(eps, n, NULL);
    if (!reqs) {
        free(eps);
        return PB_EXIT_ERROR;
    }
    pb_fanout_run(reqs, n, "GET", "/api/rank", NULL, deadline_ms(a));
    json_t *columns = json_pack("[ssssssss]", "rank", "host", "pid", "node_rank", "local_rank",
                                "step", "step_started_s_ago", "state");
    json_t *rows = json_array();
    int missing = 0;
    double now = now_s();
    double hb_period = 5;
    for (int r = 0; r < n; r++) {
        pb_rank_ep *e = &eps[r];
        char state[600];
        json_t *step = json_null(), *ago = json_null();
        if (reqs[r].root && reqs[r].status == 200) {
            json_t *ans = reqs[r].root;
            step = json_incref(json_object_get(ans, "step"));
            if (!step) step = json_null();
            double started = json_number_value(json_object_get(ans, "step_started"));
            if (started > 0) ago = json_real(now - started);
            if (!in_collective(ans, state, sizeof state))
                snprintf(state, sizeof state, started > 0 ? "training" : "running (no step yet)");
        } else {
            missing++;
            const char *why = reqs[r].root ? json_string_value(json_object_get(reqs[r].root, "error")) : NULL;
            if (!e->registered)
                snprintf(state, sizeof state, "gone: %s", e->why);
            else if (!reqs[r].usable)
                snprintf(state, sizeof state, "unreachable: %s", e->why);
            else if (e->heartbeat > 0 && now - e->heartbeat > 3 * hb_period)
                snprintf(state, sizeof state, "gone (last heartbeat %.0f s ago): %s",
                         now - e->heartbeat, why ? why : reqs[r].err);
            else
                snprintf(state, sizeof state, "not answering: %s", why ? why : reqs[r].err);
        }
        json_t *row = json_array();
        json_array_append_new(row, json_integer(e->rank));
        json_array_append_new(row, e->host[0] ? json_string(e->host) : json_null());
        json_array_append_new(row, e->pid ? json_integer(e->pid) : json_null());
        json_array_append_new(row, e->registered && e->node_rank >= 0 ? json_integer(e->node_rank) : json_null());
        json_array_append_new(row, e->registered && e->local_rank >= 0 ? json_integer(e->local_rank) : json_null());
        json_array_append_new(row, step);
        json_array_append_new(row, ago);
        json_array_append_new(row, json_string(state));
        json_array_append_new(rows, row);
    }
    rc = pb_format_rows(stdout, fmt, PB_TABLE_PLAIN, columns, rows) ? PB_EXIT_ERROR : PB_EXIT_OK;
    if (rc == PB_EXIT_OK && missing) {
        fflush(stdout);
        pb_cli_error("%d of %d ranks did not answer (see their state)", missing, n);
        rc = PB_EXIT_PARTIAL;
    }
    json_decref(columns);
    json_decref(rows);
    pb_fanout_free(reqs, n);
    free(reqs);
    free(eps);
    return rc;
}

int pb_query_ranks(const pb_cli_args *a, const char *sql)
{
    pb_format fmt;
    int rc = pb_format_parse(a->format, PB_FORMAT_TABLE | PB_FORMAT_CSV | PB_FORMAT_JSON, "query", &fmt);
    if (rc) return rc;
    pb_rank_ep *eps = NULL;
    int n = 0;
    if (pb_fanout_roster(&a->resolved, deadline_ms(a), &eps, &n)) return PB_EXIT_ERROR;
    unsigned char *sel = calloc((size_t)n, 1);
    pb_fanout_req *reqs = NULL;
    json_t *request = json_pack("{s:s}", "sql", sql);
    char *body = request ? json_dumps(request, JSON_COMPACT) : NULL;
    json_decref(request);
    json_t *columns = NULL, *rows = json_array();
    rc = PB_EXIT_ERROR;
    if (!sel || !body || !rows) {
        pb_cli_error(body ? "out of memory" : "the SQL is not valid UTF-8");
        goto done;
    }
    if ((rc = pb_fanout_parse_ranks(a->ranks, n, sel))) goto done;
    rc = PB_EXIT_ERROR;
    if (!(reqs = requests_for(eps, n, sel))) goto done;
    pb_fanout_run(reqs, n, "POST", "/api/query", body, deadline_ms(a));
    int answered = 0, failed = 0, errors = 0;
    const char *first_error = NULL;
    int same_error = 1;
    for (int r = 0; r < n; r++) {
        if (!sel[r]) continue;
        json_t *ans = reqs[r].root;
        if (!ans || reqs[r].status == 0) {
            failed++;
            continue;
        }
        if (reqs[r].status != 200) {
            const char *msg = json_string_value(json_object_get(ans, "error"));
            errors++;
            if (!first_error) first_error = msg ? msg : "";
            else if (!msg || strcmp(msg, first_error) != 0) same_error = 0;
            continue;
        }
        json_t *cols = json_object_get(ans, "columns"), *rws = json_object_get(ans, "rows");
        if (!json_is_array(cols) || !json_is_array(rws)) {
            snprintf(reqs[r].err, sizeof reqs[r].err, "sent an incomplete answer (no columns or rows)");
            reqs[r].status = 0;
            failed++;
            continue;
        }
        if (!columns) {
            columns = json_pack("[ss]", "rank", "host");
            json_array_extend(columns, cols);
        } else if (json_array_size(columns) != json_array_size(cols) + 2) {
            snprintf(reqs[r].err, sizeof reqs[r].err, "answered with %zu columns where rank %lld "
                     "answered %zu (another version?)", json_array_size(cols),
                     (long long)json_integer_value(json_array_get(json_array_get(rows, 0), 0)),
                     json_array_size(columns) - 2);
            reqs[r].status = 0;
            failed++;
            continue;
        }
        answered++;
        json_t *row;
        size_t i;
        json_array_foreach(rws, i, row) {
            json_t *out = json_pack("[is]", eps[r].rank, eps[r].host);
            json_array_extend(out, row);
            json_array_append_new(rows, out);
        }
        if (json_is_true(json_object_get(ans, "truncated")))
            pb_cli_error("rank %d (%s): its result was cut at its PROBING_MAX_RESULT_MB; add a "
                         "LIMIT", eps[r].rank, eps[r].host);
    }
    if (!answered && errors && same_error) {
        pb_cli_error("%s%s", strncmp(first_error, "SQL error", 9) == 0 ? "" : "SQL error: ",
                     first_error);
        goto report_missing;
    }
    if (columns && pb_format_rows(stdout, fmt, PB_TABLE_GRID, columns, rows)) goto done;
    if (!columns && !errors)
        pb_cli_error("no rank answered");
    rc = PB_EXIT_OK;
report_missing:
    fflush(stdout);
    for (int r = 0; r < n; r++) {
        if (!sel[r]) continue;
        if (reqs[r].root && reqs[r].status != 200 && reqs[r].status != 0 && !(errors && same_error && !answered)) {
            const char *msg = json_string_value(json_object_get(reqs[r].root, "error"));
            pb_cli_error("rank %d (%s): %s", eps[r].rank, eps[r].host, msg ? msg : "error");
        } else if (!reqs[r].root || reqs[r].status == 0) {
            pb_cli_error("rank %d (%s) is missing: %s", eps[r].rank,
                         eps[r].host[0] ? eps[r].host : "host unknown", reqs[r].err);
        }
    }
    if (!answered && errors) rc = PB_EXIT_ERROR;
    else if (failed || errors) rc = PB_EXIT_PARTIAL;
done:
    json_decref(columns);
    json_decref(rows);
    if (reqs) pb_fanout_free(reqs, n);
    free(reqs);
    free(body);
    free(sel);
    free(eps);
    return rc;
}
