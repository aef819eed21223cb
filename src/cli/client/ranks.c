/*
 * ranks.c - every rank of a job and its state (ranks.h).
 *
 * Starts from the roster the target reads from its job's c10d store (fanout.h), then asks every
 * rank at once with a deadline: GET /api/rank from each, one row per rank with its step, how
 * long ago that step started and its state (training / in a collective / not answering / gone),
 * with the reason for every rank that cannot be shown. See docs/cluster.md.
 */
#include "client/ranks.h"

#include "client/fanout.h"
#include "clock.h"
#include "out/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int pb_ranks_states(const pb_target *t, const char *name, double deadline_s, json_t **columns_out,
                    json_t **rows_out, json_t **notes_out)
{
    pb_rank_ep *eps = NULL;
    *columns_out = *rows_out = *notes_out = NULL;
    if (t->kind == PB_TARGET_FILE)
        return pb_cli_usage_error("%s is a recording file: ranks needs the running job (a "
                                  "recording has no live ranks to ask; 'probing %s query --ranks "
                                  "all \"SQL\"' reads the job's recordings)", name, name);
    int n = 0;
    if (pb_fanout_roster(t, pb_fanout_deadline_ms(deadline_s), &eps, &n)) return PB_EXIT_ERROR;
    pb_fanout_req *reqs = pb_fanout_requests(eps, n, NULL);
    if (!reqs) {
        free(eps);
        return PB_EXIT_ERROR;
    }
    pb_fanout_run(reqs, n, "GET", "/api/rank", NULL, pb_fanout_deadline_ms(deadline_s));
    json_t *columns = json_pack("[ssssssss]", "rank", "host", "pid", "node_rank", "local_rank",
                                "step", "step_started_s_ago", "state");
    json_t *rows = json_array();
    int missing = 0;
    double now = pb_wall_s();
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
            /* On this host the process itself says whether it is gone: a stopped one (SIGSTOP)
             * sends no heartbeat and cannot answer, yet it is there. */
            char pstate = strcmp(e->via, "unix") == 0 && e->pid > 0 ? pb_target_pid_state(e->pid) : 0;
            if (pstate && pstate != 'Z' && pstate != 'X')
                snprintf(state, sizeof state, "not answering: its process is %s: %s",
                         pb_target_state_text(pstate), why ? why : reqs[r].err);
            else if (!e->registered)
                snprintf(state, sizeof state, "gone: %s", e->why);
            else if (!reqs[r].usable)
                snprintf(state, sizeof state, "unreachable: %s", e->why);
            else if (reqs[r].forged)
                snprintf(state, sizeof state, "%s", reqs[r].err);
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
    json_t *notes = json_array();
    if (missing) {
        pb_cli_note(notes, "%d of %d ranks did not answer (see their state)", missing, n);
        for (int r = 0; r < n; r++)
            if (reqs[r].forged) pb_cli_note(notes, "rank %d (%s): %s", eps[r].rank, eps[r].host, reqs[r].err);
    }
    int rc = !columns || !rows || !notes ? pb_cli_error("out of memory")
             : missing ? PB_EXIT_PARTIAL : PB_EXIT_OK;
    if (rc == PB_EXIT_ERROR) {
        json_decref(columns);
        json_decref(rows);
        json_decref(notes);
    } else {
        *columns_out = columns;
        *rows_out = rows;
        *notes_out = notes;
    }
    pb_fanout_free(reqs, n);
    free(reqs);
    free(eps);
    return rc;
}
