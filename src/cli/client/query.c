/*
 * query.c - one SQL statement on a target or on ranks of its job (query.h).
 *
 * A single target gets POST /api/query {"sql"}; a SQL error is shown with the offending line and
 * a caret under the byte offset the agent reports, psql-style. With ranks: the same POST to every
 * selected rank of the target's job at once (the roster and the requests of fanout.h), with a
 * deadline; the rows come back with "rank" and "host" columns first (but for one the statement
 * itself selects), so one statement can be compared or aggregated across ranks. See
 * docs/cluster.md.
 */
#include "client/query.h"

#include "client/client.h"
#include "client/fanout.h"
#include "out/cli.h"
#include "out/format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints the line of sql holding byte offset, and a caret under that byte. */
static void show_error_position(const char *sql, long long offset)
{
    size_t len = strlen(sql);
    if (offset < 0 || (size_t)offset > len) return;
    size_t at = (size_t)offset, start = at, end = at;
    while (start > 0 && sql[start - 1] != '\n') start--;
    while (end < len && sql[end] != '\n') end++;
    FILE *out = pb_cli_messages();
    fprintf(out, "  %.*s\n  ", (int)(end - start), sql + start);
    /* Keep tabs so the caret lines up with what the terminal shows; other bytes are spaces,
     * one per display column. */
    for (size_t i = start; i < at;) {
        if (sql[i] == '\t') {
            fputc('\t', out);
            i++;
            continue;
        }
        size_t n = 1;
        while (i + n < at && ((unsigned char)sql[i + n] & 0xC0) == 0x80) n++;
        for (size_t w = pb_format_display_width(sql + i, n); w; w--) fputc(' ', out);
        i += n;
    }
    fputs("^\n", out);
}

/* The most bytes of JSON that one rank's answer may take: PROBING_RANK_ANSWER_MB, else a share
 * of ANSWERS_BUDGET_MB among the selected ranks between 1 and 64 MB. The parsed rows cost the
 * CLI several times their JSON (docs/cluster.md). */
#define ANSWERS_BUDGET_MB 256
static size_t answer_cap(int selected)
{
    const char *v = getenv("PROBING_RANK_ANSWER_MB");
    char *end = NULL;
    long mb = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || mb < 1 || mb > 4096) {
        mb = ANSWERS_BUDGET_MB / (selected > 0 ? selected : 1);
        mb = mb < 1 ? 1 : mb > 64 ? 64 : mb;
    }
    return (size_t)mb << 20;
}

/* Whether the answer's columns hold one named `name`. */
static int has_column(json_t *cols, const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(cols, i, c) {
        if (json_is_string(c) && !strcmp(json_string_value(c), name)) return 1;
    }
    return 0;
}

int pb_query_ranks(const pb_target *t, const char *sql, const char *ranks, double deadline_s,
                   json_t **columns_out, json_t **rows_out, json_t **notes_out)
{
    pb_rank_ep *eps = NULL;
    int n = 0, rc;
    *columns_out = *rows_out = *notes_out = NULL;
    if (pb_fanout_roster(t, pb_fanout_deadline_ms(deadline_s), &eps, &n)) return PB_EXIT_ERROR;
    unsigned char *sel = calloc((size_t)n, 1);
    pb_fanout_req *reqs = NULL;
    char *body = NULL;
    json_t *columns = NULL, *rows = json_array(), *notes = json_array();
    rc = PB_EXIT_ERROR;
    if (!sel || !rows || !notes) {
        pb_cli_error("out of memory");
        goto done;
    }
    if ((rc = pb_fanout_parse_ranks(ranks, n, sel))) goto done;
    rc = PB_EXIT_ERROR;
    int selected = 0;
    for (int r = 0; r < n; r++) selected += sel[r] != 0;
    size_t cap = answer_cap(selected);
    /* The agent cuts its rows at a row boundary below the cap (and says so); the cap itself
     * stops an agent that does not. */
    json_t *request = json_pack("{s:s,s:I}", "sql", sql, "max_result_bytes",
                                (json_int_t)(cap - cap / 16));
    body = request ? json_dumps(request, JSON_COMPACT) : NULL;
    json_decref(request);
    if (!body) {
        pb_cli_error("the SQL is not valid UTF-8");
        goto done;
    }
    if (!(reqs = pb_fanout_requests(eps, n, sel))) goto done;
    for (int r = 0; r < n; r++) reqs[r].max_answer_bytes = cap;
    pb_fanout_run(reqs, n, "POST", "/api/query", body, pb_fanout_deadline_ms(deadline_s));
    int answered = 0, failed = 0, errors = 0, add_rank = 1, add_host = 1, first_rank = -1;
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
            /* rank and host first, but for a column the statement itself names so (SELECT
             * rank, ...: the agent's own rank): that one stands, not twice */
            add_rank = !has_column(cols, "rank");
            add_host = !has_column(cols, "host");
            columns = json_array();
            if (add_rank) json_array_append_new(columns, json_string("rank"));
            if (add_host) json_array_append_new(columns, json_string("host"));
            json_array_extend(columns, cols);
            first_rank = eps[r].rank;
        } else if (json_array_size(columns) != json_array_size(cols) + add_rank + add_host) {
            snprintf(reqs[r].err, sizeof reqs[r].err, "answered with %zu columns where rank %d "
                     "answered %zu (another version?)", json_array_size(cols), first_rank,
                     json_array_size(columns) - add_rank - add_host);
            reqs[r].status = 0;
            failed++;
            continue;
        }
        answered++;
        /* Each row gets its rank and host in place and moves to the result; the rest of this
         * rank's answer is freed now, so that at most the merged rows stay in memory. */
        json_t *row, *rank = json_integer(eps[r].rank), *host = json_string(eps[r].host);
        size_t i;
        json_array_foreach(rws, i, row) {
            if (!json_is_array(row)) continue;
            if (add_host) json_array_insert(row, 0, host);
            if (add_rank) json_array_insert(row, 0, rank);
            json_array_append(rows, row);
        }
        json_decref(rank);
        json_decref(host);
        if (json_is_true(json_object_get(ans, "truncated")))
            pb_cli_error("rank %d (%s): its result was cut after %zu rows: query --ranks takes at "
                         "most %zu MB of JSON from one rank (PROBING_RANK_ANSWER_MB), and the "
                         "agent at most its PROBING_MAX_RESULT_MB; add a LIMIT or a WHERE clause",
                         eps[r].rank, eps[r].host, json_array_size(rws), cap >> 20);
        json_decref(reqs[r].root);
        reqs[r].root = NULL;
        reqs[r].status = 200;
    }
    int all_refused = !answered && errors && same_error;
    if (all_refused)
        pb_cli_error("%s%s", strncmp(first_error, "SQL error", 9) == 0 ? "" : "SQL error: ",
                     first_error);
    else if (!columns && !errors)
        pb_cli_note(notes, "no rank answered");
    for (int r = 0; r < n; r++) {
        if (!sel[r]) continue;
        if (reqs[r].root && reqs[r].status != 200 && reqs[r].status != 0 && !all_refused) {
            const char *msg = json_string_value(json_object_get(reqs[r].root, "error"));
            pb_cli_note(notes, "rank %d (%s): %s", eps[r].rank, eps[r].host, msg ? msg : "error");
        } else if ((!reqs[r].root && reqs[r].status != 200) || reqs[r].status == 0) {
            pb_cli_note(notes, "rank %d (%s) is missing: %s", eps[r].rank,
                 eps[r].host[0] ? eps[r].host : "host unknown", reqs[r].err);
        }
    }
    rc = !answered && errors ? PB_EXIT_ERROR : failed || errors ? PB_EXIT_PARTIAL : PB_EXIT_OK;
    *columns_out = columns;
    *rows_out = rows;
    *notes_out = notes;
    columns = rows = notes = NULL;
done:
    json_decref(columns);
    json_decref(rows);
    json_decref(notes);
    if (reqs) pb_fanout_free(reqs, n);
    free(reqs);
    free(body);
    free(sel);
    free(eps);
    return rc;
}

int pb_query_run(const pb_target *t, const char *sql, size_t max_result_bytes, json_t **answer)
{
    json_t *request = NULL, *root = NULL;
    long status;
    int rc = PB_EXIT_ERROR;
    *answer = NULL;
    json_t *sql_value = json_string(sql);
    if (!sql_value) return pb_cli_error("the SQL is not valid UTF-8");
    request = json_pack("{s:o}", "sql", sql_value);
    if (!request) return pb_cli_error("out of memory");
    if (max_result_bytes > 0)
        json_object_set_new(request, "max_result_bytes", json_integer((json_int_t)max_result_bytes));
    rc = pb_client_call(t, "POST", "/api/query", request, PB_CLI_QUERY_TIMEOUT_MS, &root, &status);
    if (rc) goto done;
    rc = PB_EXIT_ERROR;
    if (status != 200) {
        json_t *offset = json_object_get(root, "offset");
        const char *msg = json_string_value(json_object_get(root, "error"));
        if (status == 400 && offset && msg) {
            const char *prefix = strncmp(msg, "SQL error", 9) == 0 ? "" : "SQL error: ";
            pb_cli_error("%s%s", prefix, msg);
            if (json_is_integer(offset)) show_error_position(sql, json_integer_value(offset));
        } else {
            pb_client_print_error(status, root);
        }
        goto done;
    }
    json_t *columns = json_object_get(root, "columns");
    json_t *rows = json_object_get(root, "rows");
    if (!json_is_array(columns) || !json_is_array(rows)) {
        pb_cli_error("the target sent an incomplete answer (no %s); is it a probing agent of "
                     "the same version?", json_is_array(columns) ? "rows" : "columns");
        goto done;
    }
    *answer = root;
    root = NULL;
    rc = PB_EXIT_OK;
done:
    json_decref(request);
    json_decref(root);
    return rc;
}
