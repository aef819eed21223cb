/*
 * report_fixture.c - the fixture the report unit tests share: an in-memory SQLite database
 * with the schema-qualified tables the agent serves, the pb_report_query_fn that runs SQL on it,
 * and helpers that plant rows and read findings back. See report_fixture.h.
 */
#include "report_fixture.h"

#include <stdlib.h>
#include <string.h>

sqlite3 *db;

/* What build() hands the report besides the query function (reset by fresh()). */
json_t *test_info;
json_t *test_conditions;
pb_report_peer test_peers[4];
size_t test_npeers;
const char *test_peers_note;
const pb_arrival_rank *test_arrivals; /* the job's arrival summaries, NULL: none */
size_t test_n_arrivals;

/* ctx: the database to query (a peer's), NULL for `db`. */
int query_sqlite(void *ctx, const char *sql, json_t **rows, char **error)
{
    sqlite3_stmt *st = NULL;
    sqlite3 *h = ctx ? ctx : db;
    *rows = NULL;
    if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) != SQLITE_OK) {
        *error = strdup(sqlite3_errmsg(h));
        return -1;
    }
    json_t *out = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *row = json_object();
        for (int c = 0; c < sqlite3_column_count(st); c++) {
            json_t *v;
            switch (sqlite3_column_type(st, c)) {
            case SQLITE_INTEGER: v = json_integer(sqlite3_column_int64(st, c)); break;
            case SQLITE_FLOAT: v = json_real(sqlite3_column_double(st, c)); break;
            case SQLITE_TEXT: v = json_string((const char *)sqlite3_column_text(st, c)); break;
            default: v = json_null();
            }
            json_object_set_new(row, sqlite3_column_name(st, c), v);
        }
        json_array_append_new(out, row);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        json_decref(out);
        *error = strdup(sqlite3_errmsg(h));
        return -1;
    }
    *rows = out;
    return 0;
}

void exec(const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        printf("setup SQL failed: %s\n  %s\n", err, sql);
        exit(2);
    }
}

void fresh(int with_trace)
{
    json_decref(test_info);
    test_info = NULL;
    json_decref(test_conditions);
    test_conditions = NULL;
    test_npeers = 0;
    test_peers_note = NULL;
    test_arrivals = NULL;
    test_n_arrivals = 0;
    if (db) sqlite3_close(db);
    sqlite3_open(":memory:", &db);
    exec("ATTACH ':memory:' AS python; ATTACH ':memory:' AS system");
    if (with_trace)
        exec("CREATE TABLE python.torch_trace (step INTEGER, seq INTEGER, module TEXT, type TEXT,"
             " stage TEXT, duration REAL, total_duration REAL, time_offset REAL, allocated REAL,"
             " max_allocated REAL, depth INTEGER, thread INTEGER, rank INTEGER);"
             "CREATE TABLE python.nccl_trace (step INTEGER, operation_type TEXT, backend TEXT,"
             " bytes INTEGER, dtype TEXT, group_size INTEGER, async_op INTEGER,"
             " duration_ms REAL, time_offset REAL, rank INTEGER)");
}

/* One training step: a forward row, a backward row and (opt > 0) the optimizer's step row,
 * which ends `wall` seconds after the previous step ended. Times in seconds. */
void add_step(int step, double fwd, double bwd, double opt, double wall, double mem_mb)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "INSERT INTO python.torch_trace VALUES (%d, 0, 'Net', 'Net', 'forward', %.9f, %.9f,"
             " 0.0001, %f, %f, 0, 1, 0), (%d, 1, 'Net', 'Net', 'backward', %.9f, %.9f, %.9f,"
             " %f, %f, 0, 2, 0)",
             step, fwd, fwd, mem_mb, mem_mb, step, bwd, bwd, fwd + 0.0002, mem_mb, mem_mb);
    exec(sql);
    if (opt > 0) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.torch_trace VALUES (%d, 2, 'SGD', 'SGD', 'step', %.9f, %.9f,"
                 " %.9f, %f, %f, 0, 1, 0)",
                 step, opt, opt, wall - opt, mem_mb, mem_mb);
        exec(sql);
    }
}

json_t *finding(json_t *doc, const char *id)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(doc, "findings"), i, f) {
        if (!strcmp(json_string_value(json_object_get(f, "id")), id)) return f;
    }
    return NULL;
}

const char *severity(json_t *doc, const char *id)
{
    json_t *f = finding(doc, id);
    return f ? json_string_value(json_object_get(f, "severity")) : "(none)";
}

const char *primary(json_t *doc)
{
    const char *p = json_string_value(json_object_get(doc, "primary"));
    return p ? p : "(none)";
}

int problems(json_t *doc)
{
    size_t i, n = 0;
    json_t *f;
    json_array_foreach(json_object_get(doc, "findings"), i, f) {
        const char *s = json_string_value(json_object_get(f, "severity"));
        if (!strcmp(s, "critical") || !strcmp(s, "warning")) n++;
    }
    return (int)n;
}

double step_stat(json_t *doc, const char *key)
{
    return json_number_value(
        json_object_get(json_object_get(json_object_get(doc, "baseline"), "step_time"), key));
}

const char *bottleneck(json_t *doc)
{
    return json_string_value(json_object_get(json_object_get(doc, "bottleneck"), "type"));
}

int sql_reruns(json_t *f)
{
    size_t i;
    json_t *s;
    int ok = json_array_size(json_object_get(f, "sql")) > 0;
    json_array_foreach(json_object_get(f, "sql"), i, s) {
        json_t *rows = NULL;
        char *err = NULL;
        if (query_sqlite(NULL, json_string_value(s), &rows, &err)) ok = 0;
        free(err);
        json_decref(rows);
    }
    return ok;
}

double finding_num(json_t *doc, const char *id, const char *key)
{
    return json_number_value(json_object_get(json_object_get(finding(doc, id), "numbers"), key));
}

const char *claim(json_t *doc, const char *id)
{
    const char *c = json_string_value(json_object_get(finding(doc, id), "claim"));
    return c ? c : "(none)";
}

const char *advice(json_t *doc, const char *id)
{
    const char *c = json_string_value(json_object_get(finding(doc, id), "recommendation"));
    return c ? c : "(none)";
}

int near(double got, double want) { return got > want - 1e-3 && got < want + 1e-3; }

/* python.steps as today's agent writes it (batches, grad_sync, detail); python.memory with
 * limit_mb. */
static const char STEPS_NOW[] =
    "CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL, forward REAL,"
    " backward REAL, optimizer REAL, collectives REAL, grad_sync REAL, other REAL,"
    " samples INTEGER, syncs INTEGER, rank INTEGER, batches INTEGER, detail INTEGER);"
    "CREATE TABLE python.memory (step INTEGER, phase TEXT, device TEXT, allocated_mb REAL,"
    " max_allocated_mb REAL, reserved_mb REAL, rss_mb REAL, limit_mb REAL, rank INTEGER)";

/* One step of python.steps and its end-of-step memory row (device, MB, limit). Times in ms. */
void step_now(int step, double wall, double data, double fwd, double bwd, double opt,
                     double grad_sync, int samples, int batches, const char *device,
                     double mem_mb, double limit_mb)
{
    char sql[768];
    double other = wall - data - fwd - bwd - opt - grad_sync;
    snprintf(sql, sizeof sql,
             "INSERT INTO python.steps VALUES (%d, %.9f, %.9f, %.9f, %.9f, %.9f, 0, %.9f, %.9f,"
             " %d, 0, 0, %d, 0); INSERT INTO python.memory VALUES (%d, 'step', '%s', %f, %f,"
             " NULL, %f, %f, 0)",
             step, wall / 1e3, data / 1e3, fwd / 1e3, bwd / 1e3, opt / 1e3, grad_sync / 1e3,
             (other > 0 ? other : 0) / 1e3, samples, batches, step, device, mem_mb, mem_mb,
             mem_mb, limit_mb);
    exec(sql);
    if (step % 10 == 0) add_step(step, fwd / 1e3, bwd / 1e3, opt / 1e3, wall / 1e3, mem_mb);
}

void fresh_now(void)
{
    fresh(1);
    exec(STEPS_NOW);
}
