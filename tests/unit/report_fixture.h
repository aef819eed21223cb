/*
 * report_fixture.h - the fixture the report unit tests (test_report*.c) share.
 *
 * The report reads its data only through a pb_report_query_fn; query_sqlite() runs the SQL
 * against an in-memory SQLite database (`db`) where each test creates the same schema-qualified
 * tables the agent serves (ATTACH ':memory:' AS python; CREATE TABLE python.torch_trace ...) and
 * inserts rows with known causes planted. fresh() starts a new database and resets what build()
 * hands the report besides the query function (test_info, the peers, the arrival summaries).
 *
 * build() is defined here, static inline, so its "the report renders" check counts in the test
 * program that calls it (check.h keeps its counters per file).
 */
#ifndef PB_TESTS_REPORT_FIXTURE_H
#define PB_TESTS_REPORT_FIXTURE_H

#include "check.h"
#include "report.h"
#include "toolkit.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern sqlite3 *db;

/* What build() hands the report besides the query function (reset by fresh()). */
extern json_t *test_info;
extern json_t *test_conditions; /* the conditions eval would find; NULL: eval did not answer */
extern pb_report_peer test_peers[4];
extern size_t test_npeers;
extern const char *test_peers_note;
extern const pb_arrival_rank *test_arrivals; /* the job's arrival summaries, NULL: none */
extern size_t test_n_arrivals;

/* ctx: the database to query (a peer's), NULL for `db`. */
int query_sqlite(void *ctx, const char *sql, json_t **rows, char **error);
/* Run setup SQL on `db`; exits 2 on failure. */
void exec(const char *sql);
/* A new `db` (python.torch_trace and python.nccl_trace when with_trace) and reset sources. */
void fresh(int with_trace);
/* One training step: a forward row, a backward row and (opt > 0) the optimizer's step row,
 * which ends `wall` seconds after the previous step ended. Times in seconds. */
void add_step(int step, double fwd, double bwd, double opt, double wall, double mem_mb);

/* Reading the document back. */
json_t *finding(json_t *doc, const char *id);
const char *severity(json_t *doc, const char *id);
const char *primary(json_t *doc);
int problems(json_t *doc);
double step_stat(json_t *doc, const char *key); /* baseline.step_time[key] */
const char *bottleneck(json_t *doc);
int sql_reruns(json_t *f);
double finding_num(json_t *doc, const char *id, const char *key);
const char *claim(json_t *doc, const char *id);
const char *advice(json_t *doc, const char *id);
int near(double got, double want);

/* A fresh database (fresh(1)) with python.steps as today's agent writes it (batches, grad_sync,
 * detail) and python.memory with limit_mb. */
void fresh_now(void);

/* One step of python.steps and its end-of-step memory row (device, MB, limit). Times in ms;
 * every 10th step also gets torch_trace rows (add_step). */
void step_now(int step, double wall, double data, double fwd, double bwd, double opt,
              double grad_sync, int samples, int batches, const char *device, double mem_mb,
              double limit_mb);

static inline json_t *build(int last, const char **error_out)
{
    static char saved[512];
    pb_report_source src;
    memset(&src, 0, sizeof src);
    src.query = query_sqlite;
    src.target = "4242";
    src.conditions = test_conditions;
    src.conditions_error = test_conditions ? NULL : "eval timed out";
    src.info = test_info;
    src.peers = test_npeers ? test_peers : NULL;
    src.npeers = test_npeers;
    src.peers_note = test_peers_note;
    src.arrivals = test_arrivals;
    src.n_arrivals = test_n_arrivals;
    json_t *doc = NULL;
    char *error = NULL;
    if (pb_report_build(&src, last, &doc, &error)) {
        snprintf(saved, sizeof saved, "%s", error ? error : "(null)");
        if (error_out) *error_out = saved;
        free(error);
        return NULL;
    }
    free(error);
    /* The renderer must handle every document the builder makes (REPORT_SHOW=1 shows them). */
    FILE *f = getenv("REPORT_SHOW") ? stdout : tmpfile();
    CHECK(f && pb_report_render(f, doc) == 0, "the report renders as text");
    if (f && f != stdout) fclose(f);
    return doc;
}

#endif
