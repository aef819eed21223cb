/*
 * test_pool.c - the server's SQL connection pool and query admission (src/server/pool.c).
 *
 * Drives the pool directly, as the routes do: borrow a connection, begin a query, end it, give
 * the answer's bytes back once "sent". Checks what a client of the API would see: the exact 503
 * bodies of a full query slot, of a spent result budget and of a stopping agent, and that a
 * slot or budget given back lets the next query in; eval and table answers (pb__pool_eval_begin,
 * pb__pool_reserve) counted in the same budget; evals one at a time, a waiting one holding
 * nothing. The three "busy" checks each wait out the pool's queue time
 * (5 s); nothing here depends on timing otherwise.
 */
#include "api.h"
#include "check.h"
#include "config.h"
#include "db.h"
#include "error.h"
#include "pool.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The "error" string of a JSON body ("" when there is none). Borrowed from a static copy. */
static const char *error_of(const pb_buf *out)
{
    static char copy[1024];
    copy[0] = '\0';
    json_t *j = out->data ? json_loads(out->data, 0, NULL) : NULL;
    const char *e = json_string_value(json_object_get(j, "error"));
    if (e) snprintf(copy, sizeof copy, "%s", e);
    json_decref(j);
    return copy;
}

typedef struct waiter {
    pb__pool *pool;
    pb_db *db;
    int status;
    pb_buf out;
} waiter;

static void *begin_in_thread(void *arg)
{
    waiter *w = arg;
    size_t cap = 0, reserved = 0;
    w->status = pb__pool_query_begin(w->pool, w->db, 1000, &cap, &reserved, &w->out);
    if (w->status == 0) pb__pool_query_end(w->pool, w->db, 0, &reserved);
    pb__pool_results_sent(w->pool, &reserved);
    return NULL;
}

static int client_gone(void *ctx)
{
    (void)ctx;
    return PB_DB_CANCEL_CLIENT_GONE;
}

int main(void)
{
    setenv("PROBING_QUERY_THREADS", "1", 1);
    setenv("PROBING_RESULTS_MB", "4", 1);
    pb_config_load();

    pb__pool *pool = NULL;
    int rc = pb__pool_new(&pool);
    CHECK(rc == 0 && pool, "a pool is made (%s)", pb_strerror(rc));
    if (!pool) return check_summary();

    pb_db *a = NULL, *b = NULL, *c = NULL;
    rc = pb__pool_acquire(pool, &a);
    CHECK(rc == 0 && a, "acquire opens a connection when none is idle (%s)", pb_strerror(rc));
    rc = pb__pool_acquire(pool, &b);
    CHECK(rc == 0 && b && b != a, "a second acquire opens another one");
    pb__pool_release(pool, b);
    rc = pb__pool_acquire(pool, &c);
    CHECK(rc == 0 && c == b, "a released connection is lent again");
    if (!a || !c) return check_summary();

    /* One query slot (PROBING_QUERY_THREADS=1): the first query runs, the second waits, then
     * gets 503. */
    pb_buf out = PB_BUF_INIT;
    size_t cap = 1, reserved_a = 0;
    int status = pb__pool_query_begin(pool, a, 1000, &cap, &reserved_a, &out);
    CHECK(status == 0 && cap == 1000 && reserved_a == 1000 + (1u << 20),
          "a query is admitted with its cap (cap %zu, reserved %zu)", cap, reserved_a);
    size_t reserved_c = 0;
    status = pb__pool_query_begin(pool, c, 1000, &cap, &reserved_c, &out);
    CHECK(status == 503 && reserved_c == 0, "a second query while the one slot is taken -> 503");
    CHECK_STR(error_of(&out),
              "busy: 1 queries are running (the limit is 1, PROBING_QUERY_THREADS) and this one "
              "waited 5 s for its turn; try again in a moment",
              "its message says why and what to do");

    /* The slot is given back; the answer's 100 bytes stay reserved until it has been sent. */
    pb__pool_query_end(pool, a, 100, &reserved_a);
    CHECK(reserved_a == 100, "after the query only the answer's bytes stay reserved (%zu)",
          reserved_a);

    /* The budget (PROBING_RESULTS_MB=4): a query asking for 8 MB is cut to 4 MB and cannot
     * fit while 100 bytes are in flight. */
    pb_buf_reset(&out);
    status = pb__pool_query_begin(pool, c, 8u << 20, &cap, &reserved_c, &out);
    CHECK(status == 503 && reserved_c == 0, "a query that does not fit the result budget -> 503");
    CHECK_STR(error_of(&out),
              "busy: 1 MB of results in flight (the limit is 4 MB, PROBING_RESULTS_MB); try "
              "again in a moment or ask for less (LIMIT)",
              "its message says why and what to do");

    pb__pool_results_sent(pool, &reserved_a);
    CHECK(reserved_a == 0, "a sent answer gives its bytes back");
    status = pb__pool_query_begin(pool, c, 8u << 20, &cap, &reserved_c, &out);
    CHECK(status == 0 && cap == 4u << 20 && reserved_c == 4u << 20,
          "then it runs, its cap cut to the budget (cap %zu)", cap);

    /* It runs a real query under the pool's cap. */
    pb_buf rows = PB_BUF_INIT;
    pb_query_limits lim = {.max_result_bytes = cap, .timeout_s = 10};
    rc = pb_db_query_json(c, "SELECT 1 AS one", &lim, &rows);
    CHECK(rc == 0 && rows.data && strstr(rows.data, "\"one\""), "the admitted connection answers");
    pb__pool_query_end(pool, c, rows.len, &reserved_c);
    pb__pool_results_sent(pool, &reserved_c);
    pb_buf_free(&rows);

    /* Answers that are not a query's (an eval's, the table list) share the budget, with no
     * query slot: reserved before they are built, then held at their real size until sent. */
    size_t reserved_e = 0, reserved_t = 0;
    pb_buf_reset(&out);
    double wait_e = 30;
    status = pb__pool_eval_begin(pool, PB_EVAL_RESERVE, &wait_e, NULL, NULL, &reserved_e, &out);
    CHECK(status == 0 && reserved_e == 4u << 20 && wait_e > 0 && wait_e <= 30,
          "an eval's reservation is cut to the budget (%zu)", reserved_e);
    pb__pool_eval_end(pool);
    pb__pool_results_kept(pool, 5u << 20, &reserved_e);
    CHECK(reserved_e == 5u << 20, "an answer built larger than its reservation counts in full (%zu)",
          reserved_e);
    status = pb__pool_reserve(pool, 1u << 20, &reserved_t, "the table list was not sent",
                              "try again in a moment", &out);
    CHECK(status == 503 && reserved_t == 0, "the table list does not fit while it is in flight -> 503");
    CHECK_STR(error_of(&out),
              "busy: 5 MB of results in flight (the limit is 4 MB, PROBING_RESULTS_MB); try "
              "again in a moment",
              "its message is the query's busy message with its own advice");
    pb__pool_results_kept(pool, 100, &reserved_e);
    CHECK(reserved_e == 100, "an answer smaller than its reservation gives the rest back (%zu)",
          reserved_e);
    status = pb__pool_reserve(pool, 1u << 20, &reserved_t, "the table list was not sent",
                              "try again in a moment", &out);
    CHECK(status == 0 && reserved_t == 1u << 20, "then the table list fits (%zu)", reserved_t);
    status = pb__pool_query_begin(pool, c, 1u << 20, &cap, &reserved_c, &out);
    CHECK(status == 0 && cap == 1u << 20 && reserved_c == 2u << 20,
          "a query fits in what the eval and table answers left of the budget (status %d)",
          status);
    pb__pool_query_end(pool, c, 0, &reserved_c);
    pb__pool_results_sent(pool, &reserved_c);
    pb__pool_results_sent(pool, &reserved_e);
    pb__pool_results_sent(pool, &reserved_t);
    CHECK(reserved_e == 0 && reserved_t == 0, "sent answers give their bytes back");

    /* Evals run one at a time. One that waits for the running one holds nothing of the budget
     * (a query still fits beside the running eval) and gives up after its own timeout; one
     * whose client leaves stops waiting; once the slot is free the next one runs. */
    size_t reserved_e1 = 0, reserved_e2 = 0;
    double wait1 = 30, wait2 = 0.3;
    status = pb__pool_eval_begin(pool, 1u << 20, &wait1, NULL, NULL, &reserved_e1, &out);
    CHECK(status == 0 && reserved_e1 == 1u << 20, "an eval takes the slot (status %d)", status);
    pb_buf_reset(&out);
    status = pb__pool_eval_begin(pool, 1u << 20, &wait2, NULL, NULL, &reserved_e2, &out);
    CHECK(status == 503 && reserved_e2 == 0,
          "a second eval waits its timeout for the slot, holding nothing, then -> 503");
    CHECK_STR(error_of(&out),
              "busy: another eval is running (evals run one at a time) and this one waited its "
              "whole timeout, 0.3 s; the code was not run. Try again when it ends, or give a "
              "longer --timeout",
              "its message says why the code did not run and what to do");
    status = pb__pool_query_begin(pool, c, 1u << 20, &cap, &reserved_c, &out);
    CHECK(status == 0, "a query fits beside the running eval (status %d)", status);
    pb__pool_query_end(pool, c, 0, &reserved_c);
    pb__pool_results_sent(pool, &reserved_c);
    wait2 = 30;
    pb_buf_reset(&out);
    status = pb__pool_eval_begin(pool, 1u << 20, &wait2, client_gone, NULL, &reserved_e2, &out);
    CHECK(status == 503 && reserved_e2 == 0, "a waiting eval whose client left stops waiting");
    CHECK_STR(error_of(&out),
              "eval was cancelled: the client closed its connection; the code was not run",
              "its message says so");
    pb__pool_eval_end(pool);
    pb__pool_results_sent(pool, &reserved_e1);
    status = pb__pool_eval_begin(pool, 1u << 20, &wait2, NULL, NULL, &reserved_e2, &out);
    CHECK(status == 0 && reserved_e2 == 1u << 20 && wait2 <= 30,
          "once the slot is free the next eval runs (status %d)", status);
    pb__pool_eval_end(pool);
    pb__pool_results_sent(pool, &reserved_e2);

    /* A stop turns waiting and later queries away. The waiter may begin before or after the
     * stop: either way it must get the stop's 503 (the slot is taken, so it cannot run). */
    status = pb__pool_query_begin(pool, a, 1000, &cap, &reserved_a, &out);
    CHECK(status == 0, "a query holds the slot again");
    waiter w = {.pool = pool, .db = c, .status = -1, .out = PB_BUF_INIT};
    pthread_t t;
    int started = pthread_create(&t, NULL, begin_in_thread, &w) == 0;
    pb__pool_stop(pool);
    if (started) pthread_join(t, NULL);
    CHECK(started && w.status == 503, "a query waiting for its turn when the pool stops -> 503");
    CHECK_STR(error_of(&w.out), "the process is exiting or probing is detaching; the query was not run",
              "its message says the process is going away");
    pb__pool_query_end(pool, a, 0, &reserved_a);
    pb__pool_results_sent(pool, &reserved_a);
    pb_buf_reset(&out);
    status = pb__pool_query_begin(pool, a, 1000, &cap, &reserved_a, &out);
    CHECK(status == 503 && reserved_a == 0, "after a stop every query gets 503 at once");
    pb_buf_reset(&out);
    wait_e = 30;
    status = pb__pool_eval_begin(pool, 1000, &wait_e, NULL, NULL, &reserved_e, &out);
    CHECK(status == 503 && reserved_e == 0, "after a stop an eval gets 503 at once");
    CHECK_STR(error_of(&out), "the process is exiting or probing is detaching; the code was not run",
              "its message says the code was not run");

    pb__pool_release(pool, a);
    pb__pool_release(pool, c);
    pb__pool_release(pool, NULL);
    pb__pool_free(pool);
    pb__pool_free(NULL);
    pb_buf_free(&out);
    pb_buf_free(&w.out);
    return check_summary();
}
