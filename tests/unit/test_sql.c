/*
 * test_sql.c - the SQL layer end to end: a pb_table over a real ring, queried through
 * pb_db_query_json(), the JSON parsed back with jansson.
 *
 * Covers value mapping per column kind, step-range narrowing (compared with the same query with
 * the index disabled, on a wrapped ring), the read-only authorizer with the exact messages a user
 * sees, SQL features people use (CTEs, window and JSON functions), truncation, the timeout, and
 * probe.tables / probe.config.
 */
#include "check.h"
#include "clock.h"
#include "catalog.h"
#include "config.h"
#include "db.h"
#include "error.h"
#include "intern.h"
#include "registry.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <sqlite3.h>
#include <string.h>
#include <unistd.h>

typedef struct test_row {
    int64_t step;
    int64_t t_ns;
    int64_t dur_ns;
    uint32_t module;
    uint8_t kind;
    double value;
    float ratio;
    int32_t delta;
} test_row;

static const char *const kind_names[] = {"forward", "backward", NULL};

static const pb_column test_columns[] = {
    {"step", PB_COL_I64, offsetof(test_row, step), NULL, "training step"},
    {"t", PB_COL_NS_SEC, offsetof(test_row, t_ns), NULL, "time in seconds"},
    {"dur_ms", PB_COL_NS_MS, offsetof(test_row, dur_ns), NULL, "duration in ms"},
    {"module", PB_COL_STR_ID, offsetof(test_row, module), NULL, "module name"},
    {"kind", PB_COL_ENUM_U8, offsetof(test_row, kind), kind_names, "forward or backward"},
    {"value", PB_COL_F64, offsetof(test_row, value), NULL, "a double"},
    {"ratio", PB_COL_F32, offsetof(test_row, ratio), NULL, "a float"},
    {"delta", PB_COL_I32, offsetof(test_row, delta), NULL, "a signed int"},
};

static pb_table trace = {
    .schema = "python",
    .name = "torch_trace",
    .doc = "test trace",
    .columns = test_columns,
    .ncolumns = (int)(sizeof test_columns / sizeof test_columns[0]),
    .row_size = sizeof(test_row),
    .step_column = 0,
};

static pb_table gpu = {
    .schema = "system",
    .name = "gpu",
    .doc = "empty on purpose",
    .columns = test_columns,
    .ncolumns = 1,
    .row_size = sizeof(test_row),
    .step_column = -1,
    .empty_reason = "no GPU on this machine",
};

/* Runs sql; returns the parsed body (caller json_decref) and stores the return code. */
static json_t *query(pb_db *db, const char *sql, const pb_query_limits *lim, int *rc_out)
{
    pb_buf out = PB_BUF_INIT;
    int rc = pb_db_query_json(db, sql, lim, &out);
    if (rc_out) *rc_out = rc;
    json_error_t err;
    json_t *j = json_loadb(out.data ? out.data : "", out.len, 0, &err);
    if (!j) printf("       unparsable body for %s: %s (%s)\n", sql, out.data, err.text);
    pb_buf_free(&out);
    return j;
}

/* The single integer a query returns, or INT64_MIN. */
static int64_t query_int(pb_db *db, const char *sql)
{
    int rc;
    json_t *j = query(db, sql, NULL, &rc);
    int64_t v = INT64_MIN;
    json_t *cell = json_array_get(json_array_get(json_object_get(j, "rows"), 0), 0);
    if (rc == 0 && json_is_integer(cell)) v = json_integer_value(cell);
    else if (rc == 0 && json_is_null(cell)) v = INT64_MIN + 1;
    else printf("       %s -> rc %d %s\n", sql, rc, json_string_value(json_object_get(j, "error")));
    json_decref(j);
    return v;
}

/* The error message of a failing query (static copy), and its rc. */
static const char *query_error(pb_db *db, const char *sql, int *rc_out, int *offset_out)
{
    static char msg[1024];
    json_t *j = query(db, sql, NULL, rc_out);
    const char *e = json_string_value(json_object_get(j, "error"));
    snprintf(msg, sizeof msg, "%s", e ? e : "(no error)");
    if (offset_out) *offset_out = (int)json_integer_value(json_object_get(j, "offset"));
    json_decref(j);
    return msg;
}

static void test_values(pb_db *db)
{
    int rc;
    json_t *j = query(db,
                      "SELECT step, t, dur_ms, module, kind, value, ratio, delta FROM python.torch_trace "
                      "WHERE rowid = (SELECT max(rowid) FROM python.torch_trace)",
                      NULL, &rc);
    CHECK(rc == 0, "select every column kind");
    json_t *cols = json_object_get(j, "columns");
    CHECK(json_array_size(cols) == 8 && strcmp(json_string_value(json_array_get(cols, 3)), "module") == 0,
          "columns lists the 8 names in order");
    json_t *row = json_array_get(json_object_get(j, "rows"), 0);
    CHECK(json_integer_value(json_array_get(row, 0)) == 66, "I64 step is an integer");
    CHECK(json_is_real(json_array_get(row, 1)) && json_real_value(json_array_get(row, 1)) == 1.5,
          "NS_SEC is seconds as a number");
    CHECK(json_real_value(json_array_get(row, 2)) == 2.5, "NS_MS is milliseconds");
    CHECK(json_string_value(json_array_get(row, 3)) &&
              strcmp(json_string_value(json_array_get(row, 3)), "encoder.layer.1") == 0,
          "STR_ID is the interned text");
    CHECK(json_string_value(json_array_get(row, 4)) &&
              strcmp(json_string_value(json_array_get(row, 4)), "backward") == 0,
          "ENUM_U8 is the enum name");
    CHECK(json_real_value(json_array_get(row, 5)) == 0.25 && json_real_value(json_array_get(row, 6)) == 0.5,
          "F64 and F32 are numbers");
    CHECK(json_integer_value(json_array_get(row, 7)) == -7, "I32 keeps its sign");
    CHECK(json_integer_value(json_object_get(j, "row_count")) == 1 &&
              json_is_false(json_object_get(j, "truncated")) && !json_object_get(j, "message"),
          "row_count 1, truncated false, no message");
    json_decref(j);

    j = query(db, "SELECT x'010203', NULL, 1e999, -1e999, 'h\xc3\xa9\"llo', 3.5, 42", NULL, &rc);
    row = json_array_get(json_object_get(j, "rows"), 0);
    CHECK(rc == 0 && strcmp(json_string_value(json_array_get(row, 0)), "<blob 3 bytes>") == 0,
          "BLOB becomes \"<blob N bytes>\"");
    CHECK(json_is_null(json_array_get(row, 1)), "NULL becomes null");
    CHECK(json_is_null(json_array_get(row, 2)) && json_is_null(json_array_get(row, 3)),
          "infinite REAL becomes null");
    CHECK(strcmp(json_string_value(json_array_get(row, 4)), "h\xc3\xa9\"llo") == 0, "TEXT round-trips UTF-8 and quotes");
    CHECK(json_real_value(json_array_get(row, 5)) == 3.5 && json_integer_value(json_array_get(row, 6)) == 42,
          "REAL and INTEGER literals");
    json_decref(j);
}

/* Compares `WHERE <cond>` with the index against `WHERE +<cond>` (unary + disables it). */
static void compare_range(pb_db *db, const char *cond)
{
    char a[256], b[256];
    snprintf(a, sizeof a, "SELECT count(*) * 100000 + coalesce(sum(rowid), 0) FROM python.torch_trace WHERE %s", cond);
    char plus[120];
    snprintf(plus, sizeof plus, "+%s", cond);
    snprintf(b, sizeof b, "SELECT count(*) * 100000 + coalesce(sum(rowid), 0) FROM python.torch_trace WHERE %s", plus);
    int64_t va = query_int(db, a), vb = query_int(db, b);
    CHECK(va == vb && va != INT64_MIN, "step range %-28s matches the full scan (%lld)", cond, (long long)va);
}

static void test_step_ranges(pb_db *db)
{
    /* the ring (capacity 64) holds rows 136..199 with steps 45..66 (each step 3 times) */
    CHECK(query_int(db, "SELECT count(*) FROM python.torch_trace") == 64, "wrapped ring holds 64 rows");
    CHECK(query_int(db, "SELECT min(step) FROM python.torch_trace") == 45, "oldest rows were overwritten");
    CHECK(query_int(db, "SELECT max(step) FROM python.torch_trace") == 66, "MAX(step)");
    const char *conds[] = {
        "step = 50",      "step = 45",   "step = 66",    "step = 10",    "step = 1000",
        "step > 50",      "step >= 50",  "step < 50",    "step <= 50",   "step > 66",
        "step < 45",      "step >= 0",   "step BETWEEN 47 AND 52",        "step > 48 AND step < 49",
        "step = 50.0",    "step = 50.5", "step > 49.5",  "step <= 52.7", "step < 52.2",
        "step = NULL", "step > 9e18",  "step < -9e18", "step IN (46, 60)",
    };
    for (size_t i = 0; i < sizeof conds / sizeof conds[0]; i++) compare_range(db, conds[i]);
    CHECK(query_int(db, "SELECT count(*) FROM python.torch_trace WHERE step = 50") == 3, "step = 50 finds its 3 rows");
    CHECK(query_int(db, "SELECT count(*) FROM python.torch_trace WHERE step >= '50'") == 17 * 3 - 1,
          "a text bound is compared with SQLite's affinity rules");

    /* ORDER BY step is answered by the ring's order (DESC scans backwards): same rows, same
     * order as SQLite's own sort (forced with +step) */
    const char *orders[] = {
        "SELECT group_concat(step) FROM (SELECT step FROM python.torch_trace ORDER BY step%s)",
        "SELECT group_concat(step) FROM (SELECT step FROM python.torch_trace ORDER BY step DESC%s)",
        "SELECT group_concat(step) FROM (SELECT step FROM python.torch_trace WHERE step BETWEEN 47 AND 52 ORDER BY step DESC%s)",
        "SELECT group_concat(step) FROM (SELECT step FROM python.torch_trace WHERE step > 60 ORDER BY step DESC%s LIMIT 4)",
        "SELECT group_concat(step) FROM (SELECT step FROM python.torch_trace WHERE step > 1000 ORDER BY step DESC%s)",
    };
    for (size_t i = 0; i < sizeof orders / sizeof orders[0]; i++) {
        char native[300], sorted[300];
        snprintf(native, sizeof native, orders[i], "");
        snprintf(sorted, sizeof sorted, orders[i], ", +step");
        int rc1, rc2;
        json_t *a = query(db, native, NULL, &rc1), *b = query(db, sorted, NULL, &rc2);
        char *da = json_dumps(json_object_get(a, "rows"), 0), *dbs = json_dumps(json_object_get(b, "rows"), 0);
        CHECK(rc1 == 0 && rc2 == 0 && da && dbs && strcmp(da, dbs) == 0, "ring order answers query %zu like a sort (%s)", i,
              da ? da : "?");
        free(da);
        free(dbs);
        json_decref(a);
        json_decref(b);
    }
    CHECK(query_int(db, "SELECT max(step) FROM python.torch_trace WHERE step < 50") == 49, "MAX(step) with a bound");
    CHECK(query_int(db, "SELECT step FROM python.torch_trace ORDER BY step DESC LIMIT 1") == 66, "newest step first");

    int rc;
    json_t *j = query(db, "EXPLAIN QUERY PLAN SELECT * FROM python.torch_trace WHERE step BETWEEN 47 AND 52", NULL, &rc);
    char *dump = json_dumps(j, 0);
    CHECK(rc == 0 && dump && strstr(dump, "VIRTUAL TABLE INDEX") && !strstr(dump, "INDEX 0:"),
          "the planner passes step constraints to the virtual table");
    free(dump);
    json_decref(j);
}

static void test_authorizer(pb_db *db)
{
    static const struct {
        const char *sql, *error;
    } denied[] = {
        {"ATTACH ':memory:' AS x", "not authorized: probing's SQL is read-only (ATTACH is not allowed)"},
        {"DETACH probe", "not authorized: probing's SQL is read-only (DETACH is not allowed)"},
        {"INSERT INTO python.torch_trace(step) VALUES (1)", "not authorized: probing's SQL is read-only (INSERT is not allowed)"},
        {"UPDATE python.torch_trace SET step = 1", "not authorized: probing's SQL is read-only (table torch_trace may not be modified)"},
        {"DELETE FROM python.torch_trace", "not authorized: probing's SQL is read-only (table torch_trace may not be modified)"},
        {"CREATE TABLE t(x)", "not authorized: probing's SQL is read-only (CREATE TABLE is not allowed)"},
        {"CREATE TEMP VIEW v AS SELECT 1", "not authorized: probing's SQL is read-only (CREATE TEMP VIEW is not allowed)"},
        {"DROP TABLE python.torch_trace", "not authorized: probing's SQL is read-only (DROP TABLE is not allowed)"},
        {"BEGIN", "not authorized: probing's SQL is read-only (BEGIN/COMMIT/ROLLBACK is not allowed)"},
        {"SAVEPOINT a", "not authorized: probing's SQL is read-only (SAVEPOINT is not allowed)"},
        {"ANALYZE", "not authorized: probing's SQL is read-only (ANALYZE is not allowed)"},
        {"PRAGMA writable_schema=1", "not authorized: probing's SQL is read-only (PRAGMA writable_schema is not allowed; "
                                     "allowed: table_info, table_xinfo, table_list, function_list, module_list, database_list)"},
        {"PRAGMA journal_mode", "not authorized: probing's SQL is read-only (PRAGMA journal_mode is not allowed; "
                                "allowed: table_info, table_xinfo, table_list, function_list, module_list, database_list)"},
        {"SELECT load_extension('/tmp/evil.so')", "not authorized: probing's SQL is read-only (function load_extension() is not allowed)"},
        {"SELECT LOAD_EXTENSION('/tmp/evil.so')", "not authorized: probing's SQL is read-only (function load_extension() is not allowed)"},
        {"VACUUM INTO '/tmp/probing-test-vacuum.db'", "not authorized: probing's SQL is read-only (VACUUM is not allowed)"},
        {"VACUUM", "not authorized: probing's SQL is read-only (VACUUM is not allowed)"},
        {"  /* x */ create virtual table t using json_each", "not authorized: probing's SQL is read-only (CREATE VIRTUAL TABLE is not allowed)"},
        {"ALTER TABLE python.torch_trace RENAME TO x", "not authorized: probing's SQL is read-only (ALTER TABLE is not allowed)"},
        {"UPDATE sqlite_master SET sql = ''", "not authorized: probing's SQL is read-only (table sqlite_master may not be modified)"},
        {"SELECT * FROM sqlite_master; ATTACH 'x' AS y", "only one statement per query: a second statement starts at offset 29"},
        {"PRAGMA python.writable_schema = ON", "not authorized: probing's SQL is read-only (PRAGMA writable_schema is not allowed; "
                                     "allowed: table_info, table_xinfo, table_list, function_list, module_list, database_list)"},
        {"SELECT * FROM pragma_journal_mode", "not authorized: probing's SQL is read-only (PRAGMA journal_mode is not allowed; "
                                              "allowed: table_info, table_xinfo, table_list, function_list, module_list, database_list)"},
    };
    for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
        int rc;
        const char *e = query_error(db, denied[i].sql, &rc, NULL);
        CHECK(rc == PB_ESQL, "denied: %s", denied[i].sql);
        CHECK_STR(e, denied[i].error, "  with the exact message");
    }
    CHECK(access("/tmp/probing-test-vacuum.db", F_OK) != 0, "VACUUM INTO wrote no file");

    CHECK(query_int(db, "SELECT count(*) FROM pragma_table_info('torch_trace', 'python')") == 8,
          "pragma_table_info() table-valued function works");
    int rc;
    json_t *j = query(db, "PRAGMA python.table_info(torch_trace)", NULL, &rc);
    CHECK(rc == 0 && json_array_size(json_object_get(j, "rows")) == 8, "PRAGMA table_info is allowed");
    json_decref(j);
    j = query(db, "PRAGMA database_list", NULL, &rc);
    CHECK(rc == 0 && json_array_size(json_object_get(j, "rows")) >= 4, "PRAGMA database_list is allowed");
    json_decref(j);
}

static void test_sql_features(pb_db *db)
{
    CHECK(query_int(db, "WITH s AS (SELECT step, count(*) n FROM python.torch_trace GROUP BY step) "
                        "SELECT count(*) FROM s WHERE n = 3") == 20,
          "CTE with GROUP BY");
    CHECK(query_int(db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10) "
                        "SELECT sum(x) FROM c") == 55,
          "recursive CTE");
    CHECK(query_int(db, "SELECT max(r) FROM (SELECT row_number() OVER (PARTITION BY step ORDER BY rowid) r "
                        "FROM python.torch_trace)") == 3,
          "window function row_number() OVER (PARTITION BY ...)");
    CHECK(query_int(db, "SELECT sum(x) FROM (SELECT lag(step) OVER (ORDER BY rowid) x FROM python.torch_trace)") > 0,
          "window function lag()");
    CHECK(query_int(db, "SELECT json_extract(json_object('a', json_array(1, 2, 3)), '$.a[2]')") == 3,
          "json_object / json_array / json_extract");
    CHECK(query_int(db, "SELECT count(*) FROM json_each((SELECT columns FROM probe.tables WHERE name = 'torch_trace'))") == 8,
          "json_each over probe.tables.columns");
    CHECK(query_int(db, "SELECT count(*) FROM torch_trace") == 64, "unqualified name resolves across schemas");
    CHECK(query_int(db, "SELECT count(*) FROM python.torch_trace t1 JOIN python.torch_trace t2 ON t1.step = t2.step") == 20 * 9 + 2 * 4,
          "self join");
}

static void test_errors(pb_db *db)
{
    int rc, offset;
    const char *e = query_error(db, "SELECT * FROM python.foo", &rc, &offset);
    CHECK(rc == PB_ESQL, "unknown table is PB_ESQL");
    CHECK_STR(e, "no such table: python.foo; SELECT schema, name FROM probe.tables lists the tables",
              "unknown table names the table and the catalogue");
    CHECK(offset == -1, "SQLite 3.40 gives no offset for an unknown table (%d)", offset);

    e = query_error(db, "SELECT step FROM python.torch_trace WHERE", &rc, &offset);
    CHECK_STR(e, "incomplete input", "incomplete statement");
    CHECK(offset == -1, "no offset for incomplete input");

    e = query_error(db, "SELEC 1", &rc, &offset);
    CHECK_STR(e, "SQL error near offset 0: near \"SELEC\": syntax error", "syntax error with offset");
    CHECK(offset == 0, "syntax error offset 0");

    e = query_error(db, "SELECT nosuchcol FROM python.torch_trace", &rc, &offset);
    CHECK_STR(e, "SQL error near offset 7: no such column: nosuchcol", "unknown column");

    e = query_error(db, "SELECT 1; SELECT 2", &rc, &offset);
    CHECK(rc == PB_ESQL, "two statements are refused");
    CHECK_STR(e, "only one statement per query: a second statement starts at offset 10", "two statements message");
    CHECK(offset == 10, "offset of the second statement");

    CHECK(query_int(db, "SELECT 7 ;; -- done\n /* trailing */ ; ") == 7, "trailing semicolons and comments are fine");

    e = query_error(db, "  -- nothing\n", &rc, &offset);
    CHECK(rc == PB_ESQL, "empty query is an error");
    CHECK_STR(e, "empty query: there is no SQL statement to run", "empty query message");

    e = query_error(db, "SELECT json_extract('{bad', '$')", &rc, &offset);
    CHECK(rc == PB_ESQL && strcmp(e, "malformed JSON") == 0, "runtime error while stepping: %s", e);
}

static void test_truncation(pb_db *db)
{
    pb_query_limits lim = {.max_result_bytes = 100, .timeout_s = 0};
    int rc;
    json_t *j = query(db, "SELECT step FROM python.torch_trace", &lim, &rc);
    size_t n = json_array_size(json_object_get(j, "rows"));
    CHECK(rc == 0, "a truncated result is still a success");
    CHECK(json_is_true(json_object_get(j, "truncated")), "truncated is true");
    CHECK(n > 0 && n < 64 && (int64_t)n == json_integer_value(json_object_get(j, "row_count")),
          "row_count (%zu) counts the rows returned", n);
    char want[300];
    snprintf(want, sizeof want,
             "result truncated: %zu rows returned before it hit the 100 bytes limit (PROBING_MAX_RESULT_MB); "
             "add LIMIT or a WHERE clause to fetch fewer rows, or set PROBING_MAX_RESULT_MB=<megabytes> in the "
             "traced process's environment", n);
    CHECK_STR(json_string_value(json_object_get(j, "message")), want, "truncation message");
    json_decref(j);

    lim.max_result_bytes = 1 << 20;
    j = query(db, "SELECT step FROM python.torch_trace", &lim, &rc);
    CHECK(json_is_false(json_object_get(j, "truncated")) && json_array_size(json_object_get(j, "rows")) == 64,
          "under the limit nothing is cut");
    json_decref(j);

    lim.max_result_bytes = 2 << 20;
    j = query(db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x, 'some text' FROM c",
              &lim, &rc);
    CHECK(rc == 0 && json_is_true(json_object_get(j, "truncated")), "an endless result stops at the limit");
    CHECK(strstr(json_string_value(json_object_get(j, "message")), "the 2 MB limit") != NULL, "MB in the message");
    json_decref(j);
}

static void test_timeout(pb_db *db)
{
    pb_query_limits lim = {.max_result_bytes = 0, .timeout_s = 0.2};
    int rc;
    json_t *j = query(db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
                      &lim, &rc);
    CHECK(rc == PB_ETIMEOUT, "an endless query times out");
    CHECK_STR(json_string_value(json_object_get(j, "error")),
              "query interrupted: it ran longer than the 0.2 s limit (PROBING_QUERY_TIMEOUT); narrow it with "
              "WHERE or LIMIT, or set PROBING_QUERY_TIMEOUT=<seconds> in the traced process's environment",
              "timeout message");
    json_decref(j);
    CHECK(query_int(db, "SELECT 5") == 5, "the connection works after a timeout");
}

static void test_probe_tables(pb_db *db)
{
    int rc;
    json_t *j = query(db, "SELECT schema, name, rows, capacity, rows_dropped, empty_reason, doc FROM probe.tables ORDER BY name", NULL, &rc);
    json_t *rows = json_object_get(j, "rows");
    CHECK(rc == 0 && json_array_size(rows) == 2, "probe.tables lists both tables");
    json_t *gpu_row = json_array_get(rows, 0), *trace_row = json_array_get(rows, 1);
    CHECK(strcmp(json_string_value(json_array_get(trace_row, 0)), "python") == 0 &&
              json_integer_value(json_array_get(trace_row, 2)) == 64 &&
              json_integer_value(json_array_get(trace_row, 3)) == 64 &&
              json_integer_value(json_array_get(trace_row, 4)) == 136 &&
              json_is_null(json_array_get(trace_row, 5)),
          "probe.tables: rows, capacity, rows_dropped of the wrapped ring");
    CHECK(strcmp(json_string_value(json_array_get(gpu_row, 5)), "no GPU on this machine") == 0 &&
              json_integer_value(json_array_get(gpu_row, 2)) == 0,
          "probe.tables: empty_reason");
    json_decref(j);

    j = query(db, "SELECT name, value, \"default\", doc FROM probe.config WHERE name = 'PROBING_QUERY_TIMEOUT'", NULL, &rc);
    json_t *row = json_array_get(json_object_get(j, "rows"), 0);
    CHECK(rc == 0 && strcmp(json_string_value(json_array_get(row, 2)), "30") == 0 &&
              json_string_value(json_array_get(row, 3)),
          "probe.config has name, value, default, doc");
    json_decref(j);

    pb_buf out = PB_BUF_INIT;
    CHECK(pb_catalog_tables_json(&out) == 0, "pb_catalog_tables_json");
    j = json_loads(out.data, 0, NULL);
    json_t *t0 = json_array_get(json_object_get(j, "tables"), 0);
    json_t *c0 = json_array_get(json_object_get(t0, "columns"), 1);
    CHECK(t0 && strcmp(json_string_value(json_object_get(t0, "name")), "torch_trace") == 0 &&
              json_integer_value(json_object_get(t0, "rows_dropped")) == 136 &&
              json_is_null(json_object_get(t0, "empty_reason")) &&
              strcmp(json_string_value(json_object_get(c0, "type")), "REAL") == 0 &&
              strcmp(json_string_value(json_object_get(c0, "doc")), "time in seconds") == 0,
          "tables JSON carries columns with name, type, doc");
    json_decref(j);
    pb_buf_free(&out);
}

/* Rows overwritten or cleared while a search runs count as gone, never as torn data. */
static void test_cleared_ring(pb_db *db)
{
    pb_ring_clear(trace.ring);
    CHECK(query_int(db, "SELECT count(*) FROM python.torch_trace") == 0, "cleared ring reads as empty");
    CHECK(query_int(db, "SELECT count(*) FROM python.torch_trace WHERE step >= 50") == 0, "and step search finds nothing");
    test_row r = {0};
    for (int i = 0; i < 5; i++) {
        r.step = 100 + i;
        pb_ring_push(trace.ring, &r);
    }
    CHECK(query_int(db, "SELECT count(*) FROM python.torch_trace WHERE step >= 102") == 3,
          "search across cleared rows finds the new ones");
    CHECK(query_int(db, "SELECT count(*) FROM python.torch_trace WHERE step < 102") == 2, "upper bound too");
}

/* pb_db_open_file: a recording-shaped file attached as python/system/probe, read-only. */
static void test_open_file(void)
{
    char path[] = "/tmp/pb_test_sql_XXXXXX";
    char why[256];
    int fd = mkstemp(path), rc;
    sqlite3 *w = NULL;
    pb_db *db = NULL;
    if (fd >= 0) close(fd);
    CHECK(fd >= 0 && sqlite3_open(path, &w) == SQLITE_OK &&
          sqlite3_exec(w, "CREATE TABLE tables(schema, name, doc, columns, rows, capacity, "
                          "rows_dropped, empty_reason); CREATE TABLE info(json);"
                          "CREATE TABLE steps(step INTEGER, wall REAL);"
                          "INSERT INTO steps VALUES (0, 1.5), (1, 2.5);"
                          "INSERT INTO info VALUES ('{}')", NULL, NULL, NULL) == SQLITE_OK,
          "write a recording-shaped file");
    sqlite3_close(w);
    CHECK(pb_db_open_file(path, 0, &db, why, sizeof why) == 0 && db, "pb_db_open_file");
    if (!db) return;
    CHECK(query_int(db, "SELECT SUM(wall) * 10 FROM python.steps") == 40,
          "python.steps resolves to the file's steps");
    CHECK(query_int(db, "SELECT COUNT(*) FROM probe.info") == 1, "probe.info resolves");
    const char *err = query_error(db, "DELETE FROM python.steps", &rc, NULL);
    CHECK(rc == PB_ESQL && err && strstr(err, "DELETE is not allowed"), "a recording is read-only");
    err = query_error(db, "ATTACH '/tmp/x.db' AS x", &rc, NULL);
    CHECK(rc == PB_ESQL, "no ATTACH on a recording");
    CHECK(query_int(db, "SELECT COUNT(*) FROM python.steps") == 2, "rows still there");
    pb_db_close(db);
    db = NULL;
    CHECK(pb_db_open_file("/nonexistent-dir/x.db", 0, &db, why, sizeof why) == PB_ESQL && !db,
          "a missing file is refused");
    unlink(path);
}

/* A hostile recording: its catalogue is a view that never ends. The check that opens it
 * is refused at once (its views are never run); a reader's own endless query stops at its
 * limit. */
static void test_open_hostile_file(void)
{
    char path[] = "/tmp/pb_test_sql_XXXXXX";
    char why[512];
    int fd = mkstemp(path), rc;
    sqlite3 *w = NULL;
    pb_db *db = NULL;
    if (fd >= 0) close(fd);
    CHECK(fd >= 0 && sqlite3_open(path, &w) == SQLITE_OK &&
          sqlite3_exec(w, "CREATE VIEW tables AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                          "SELECT x + 1 FROM c) SELECT x AS schema FROM c WHERE x < 0;"
                          "CREATE TABLE info(json); INSERT INTO info VALUES ('{}')",
                       NULL, NULL, NULL) == SQLITE_OK,
          "write a recording whose catalogue never ends");
    sqlite3_close(w);
    int64_t t0 = pb_now_ns();
    rc = pb_db_open_file(path, 30, &db, why, sizeof why);
    CHECK(rc == PB_ESQL && !db, "the endless catalogue is refused");
    CHECK(strstr(why, "(tables is a view defined by the recording file: probing runs no SQL "
                      "that a file brings)") != NULL, "%s", why);
    CHECK(pb_now_ns() - t0 < 2 * (int64_t)1000000000, "at once, not at the time limit");
    /* a view among the data tables: the file opens, the query over it is refused; a query of
     * the reader's own that never ends stops at its limit */
    CHECK(sqlite3_open(path, &w) == SQLITE_OK &&
          sqlite3_exec(w, "DROP VIEW tables; CREATE TABLE tables(schema, name);"
                          "CREATE VIEW steps AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                          "SELECT x + 1 FROM c) SELECT x AS step FROM c WHERE x < 0",
                       NULL, NULL, NULL) == SQLITE_OK,
          "move the endless view to python.steps");
    sqlite3_close(w);
    CHECK(pb_db_open_file(path, 0.3, &db, why, sizeof why) == 0 && db, "%s", why);
    pb_query_limits lim = {.timeout_s = 0.3, .recording = 1};
    json_t *j = query(db, "SELECT COUNT(*) FROM python.steps", &lim, &rc);
    const char *err = json_string_value(json_object_get(j, "error"));
    CHECK(rc == PB_ESQL && err && strstr(err, "steps is a view defined by the recording file"),
          "%s", err ? err : "no error");
    json_decref(j);
    j = query(db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                  "SELECT COUNT(*) FROM c", &lim, &rc);
    err = json_string_value(json_object_get(j, "error"));
    CHECK(rc == PB_ETIMEOUT && err && strstr(err, "in the probing command's environment"),
          "%s", err ? err : "no error");
    json_decref(j);
    pb_db_close(db);
    unlink(path);
}

/* The nullable kinds: intern id 0 and INT64_MIN read as NULL, anything else as the value. */
typedef struct nullable_row {
    int64_t bytes;
    uint32_t shapes;
} nullable_row;

static const pb_column nullable_columns[] = {
    {"bytes", PB_COL_I64_NULL, offsetof(nullable_row, bytes), NULL, "bytes or NULL"},
    {"shapes", PB_COL_STR_ID_NULL, offsetof(nullable_row, shapes), NULL, "text or NULL"},
};

static void test_nullable_kinds(void)
{
    pb_table t = {.schema = "python", .name = "torch_ops", .doc = "nullable kinds",
                  .columns = nullable_columns, .ncolumns = 2, .row_size = sizeof(nullable_row),
                  .step_column = -1};
    pb_db *db = NULL;
    int rc;
    pb_registry_reset();
    if (pb_ring_create(&t.ring, sizeof(nullable_row), 8)) return;
    nullable_row rows[] = {{INT64_MIN, 0}, {0, pb_intern_cstr("[[8, 32]]")}, {-5, 0}};
    for (size_t i = 0; i < 3; i++) pb_ring_push(t.ring, &rows[i]);
    pb_registry_add(&t);
    CHECK(pb_db_open(&db) == 0, "open with a table of nullable kinds");
    CHECK(query_int(db, "SELECT count(*) FROM python.torch_ops WHERE bytes IS NULL") == 1 &&
              query_int(db, "SELECT sum(bytes) FROM python.torch_ops") == -5,
          "I64_NULL: INT64_MIN is NULL, 0 and -5 are values");
    CHECK(query_int(db, "SELECT count(shapes) FROM python.torch_ops") == 1 &&
              query_int(db, "SELECT count(*) FROM python.torch_ops WHERE shapes = '[[8, 32]]'") == 1,
          "STR_ID_NULL: id 0 is NULL, others their text");
    json_t *j = query(db, "SELECT type, name FROM pragma_table_info('torch_ops', 'python')", NULL, &rc);
    json_t *r0 = json_array_get(json_object_get(j, "rows"), 0), *r1 = json_array_get(json_object_get(j, "rows"), 1);
    CHECK(rc == 0 && strcmp(json_string_value(json_array_get(r0, 0)), "INTEGER") == 0 &&
              strcmp(json_string_value(json_array_get(r1, 0)), "TEXT") == 0,
          "declared as INTEGER and TEXT");
    json_decref(j);
    pb_db_close(db);
    pb_registry_reset();
    pb_ring_destroy(t.ring);
}

/* pb_column_decode, the one decoder the SQL tables and the recordings share: every kind. */
typedef struct every_kind_row {
    int64_t i64, i64_null, ns;
    int32_t i32;
    uint32_t u32, str, str_null;
    uint16_t u16;
    uint8_t u8, e_named, e_past;
    double f64;
    float f32;
} every_kind_row;

static void test_decoder(void)
{
    static const char *const names[] = {"cpu", "cuda", NULL};
    const pb_column cols[] = {
        PB_COL("i64", PB_COL_I64, every_kind_row, i64, ""),
        PB_COL("i64_null", PB_COL_I64_NULL, every_kind_row, i64_null, ""),
        PB_COL("sec", PB_COL_NS_SEC, every_kind_row, ns, ""),
        PB_COL("ms", PB_COL_NS_MS, every_kind_row, ns, ""),
        PB_COL("i32", PB_COL_I32, every_kind_row, i32, ""),
        PB_COL("u32", PB_COL_U32, every_kind_row, u32, ""),
        PB_COL("str", PB_COL_STR_ID, every_kind_row, str, ""),
        PB_COL("str_null", PB_COL_STR_ID_NULL, every_kind_row, str_null, ""),
        PB_COL("u16", PB_COL_U16, every_kind_row, u16, ""),
        PB_COL("u8", PB_COL_U8, every_kind_row, u8, ""),
        {"e_named", PB_COL_ENUM_U8, offsetof(every_kind_row, e_named), names, ""},
        {"e_past", PB_COL_ENUM_U8, offsetof(every_kind_row, e_past), names, ""},
        PB_COL("f64", PB_COL_F64, every_kind_row, f64, ""),
        PB_COL("f32", PB_COL_F32, every_kind_row, f32, ""),
    };
    every_kind_row r = {.i64 = -3, .i64_null = INT64_MIN, .ns = 1500000000, .i32 = -7,
                        .u32 = 4000000000u, .str = pb_intern_cstr("layer"), .str_null = 0,
                        .u16 = 65535, .u8 = 200, .e_named = 1, .e_past = 5, .f64 = 0.25,
                        .f32 = 0.5f};
    const unsigned char *row = (const unsigned char *)&r;
    pb_cell v[14];
    for (int i = 0; i < 14; i++) pb_column_decode(&cols[i], row, -1, &v[i]);
    CHECK(v[0].type == PB_CELL_INT && v[0].i == -3, "I64");
    CHECK(v[1].type == PB_CELL_NULL, "I64_NULL: INT64_MIN is NULL");
    CHECK(v[2].type == PB_CELL_REAL && v[2].d == 1.5 && v[3].type == PB_CELL_REAL && v[3].d == 1500.0,
          "NS_SEC and NS_MS: seconds and milliseconds");
    CHECK(v[4].i == -7 && v[5].i == 4000000000LL && v[8].i == 65535 && v[9].i == 200,
          "I32 keeps its sign, U32/U16/U8 do not take one");
    CHECK(v[6].type == PB_CELL_TEXT && strcmp(v[6].s, "layer") == 0, "STR_ID: the interned text");
    CHECK(v[7].type == PB_CELL_NULL, "STR_ID_NULL: id 0 is NULL");
    CHECK(v[10].type == PB_CELL_TEXT && strcmp(v[10].s, "cuda") == 0, "ENUM_U8: the value's name");
    CHECK(v[11].type == PB_CELL_INT && v[11].i == 5, "ENUM_U8 past its names: the number");
    CHECK(v[12].type == PB_CELL_REAL && v[12].d == 0.25 && v[13].type == PB_CELL_REAL && v[13].d == 0.5,
          "F64 and F32");
    pb_cell counted;
    pb_column_decode(&cols[10], row, 2, &counted);
    CHECK(counted.type == PB_CELL_TEXT && counted.s == v[10].s, "ENUM_U8 with a given count");
    pb_column_decode(&cols[10], row, 1, &counted);
    CHECK(counted.type == PB_CELL_INT && counted.i == 1, "ENUM_U8 past a given count: the number");
}

int main(void)
{
    pb_config_load();
    if (pb_ring_create(&trace.ring, sizeof(test_row), 64) || pb_ring_create(&gpu.ring, sizeof(test_row), 16))
        return 2;
    CHECK(pb_registry_add(&trace) == 0 && pb_registry_add(&gpu) == 0, "register two tables");
    uint32_t names[2] = {pb_intern_cstr("encoder.layer.0"), pb_intern_cstr("encoder.layer.1")};
    for (int i = 0; i < 200; i++) {
        test_row r = {.step = i / 3, .t_ns = 1500000000, .dur_ns = 2500000, .module = names[i & 1],
                      .kind = (uint8_t)(i & 1), .value = 0.25, .ratio = 0.5f, .delta = -7};
        pb_ring_push(trace.ring, &r);
    }

    pb_db *db = NULL;
    CHECK(pb_db_open(&db) == 0 && db, "pb_db_open");
    if (!db) return check_summary();
    test_values(db);
    test_step_ranges(db);
    test_authorizer(db);
    test_sql_features(db);
    test_errors(db);
    test_truncation(db);
    test_timeout(db);
    test_probe_tables(db);
    test_cleared_ring(db);
    pb_db_close(db);
    pb_db_close(NULL);
    test_open_file();
    test_open_hostile_file();
    test_nullable_kinds();
    test_decoder();

    pb_registry_reset();
    pb_ring_destroy(trace.ring);
    pb_ring_destroy(gpu.ring);
    pb_intern_reset();
    return check_summary();
}
