/*
 * test_report.c - the rules of src/report on synthetic table contents.
 *
 * The report reads its data only through a pb_report_query_fn; here that function runs the SQL
 * against an in-memory SQLite database where each test creates the same schema-qualified
 * tables the agent serves (ATTACH ':memory:' AS python; CREATE TABLE python.torch_trace ...)
 * and inserts rows with known causes planted. Each test checks the primary finding, the absence
 * of false ones, and the edge cases: no steps, one step, no optimizer, no data loader, a single
 * huge outlier step, missing tables.
 */
#include "check.h"
#include "report.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

static sqlite3 *db;

static int query_sqlite(void *ctx, const char *sql, json_t **rows, char **error)
{
    sqlite3_stmt *st = NULL;
    (void)ctx;
    *rows = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        *error = strdup(sqlite3_errmsg(db));
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
        *error = strdup(sqlite3_errmsg(db));
        return -1;
    }
    *rows = out;
    return 0;
}

static void exec(const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        printf("setup SQL failed: %s\n  %s\n", err, sql);
        exit(2);
    }
}

static void fresh(int with_trace)
{
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
static void add_step(int step, double fwd, double bwd, double opt, double wall, double mem_mb)
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

static json_t *build(int last, const char **error_out)
{
    static char saved[512];
    pb_report_source src;
    memset(&src, 0, sizeof src);
    src.query = query_sqlite;
    src.target = "4242";
    src.conditions_error = "eval timed out";
    json_t *doc = NULL;
    char *error = NULL;
    if (pb_report_build(&src, last, &doc, &error)) {
        snprintf(saved, sizeof saved, "%s", error ? error : "(null)");
        if (error_out) *error_out = saved;
        free(error);
        return NULL;
    }
    free(error);
    /* The renderer must handle every document the builder makes. */
    FILE *f = tmpfile();
    CHECK(f && pb_report_render(f, doc) == 0, "the report renders as text");
    if (f) fclose(f);
    return doc;
}

static json_t *finding(json_t *doc, const char *id)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(doc, "findings"), i, f) {
        if (!strcmp(json_string_value(json_object_get(f, "id")), id)) return f;
    }
    return NULL;
}

static const char *severity(json_t *doc, const char *id)
{
    json_t *f = finding(doc, id);
    return f ? json_string_value(json_object_get(f, "severity")) : "(none)";
}

static const char *primary(json_t *doc)
{
    const char *p = json_string_value(json_object_get(doc, "primary"));
    return p ? p : "(none)";
}

static int problems(json_t *doc)
{
    size_t i, n = 0;
    json_t *f;
    json_array_foreach(json_object_get(doc, "findings"), i, f) {
        const char *s = json_string_value(json_object_get(f, "severity"));
        if (!strcmp(s, "critical") || !strcmp(s, "warning")) n++;
    }
    return (int)n;
}

static double stat(json_t *doc, const char *key)
{
    return json_number_value(
        json_object_get(json_object_get(json_object_get(doc, "baseline"), "step_time"), key));
}

static const char *bottleneck(json_t *doc)
{
    return json_string_value(json_object_get(json_object_get(doc, "bottleneck"), "type"));
}

static int sql_reruns(json_t *f)
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

static void test_missing_trace(void)
{
    const char *error = NULL;
    fresh(0);
    json_t *doc = build(0, &error);
    CHECK(doc == NULL, "no python.torch_trace: the report fails");
    CHECK_STR(error, "cannot read python.torch_trace: no such table: python.torch_trace",
              "and says which table it could not read");
    json_decref(doc);
}

static void test_empty(void)
{
    fresh(1);
    json_t *doc = build(0, NULL);
    CHECK(doc != NULL, "empty tables: a report");
    CHECK_STR(severity(doc, "no_steps"), "skipped", "empty trace: 'no complete step' finding");
    CHECK(json_is_null(json_object_get(doc, "baseline")), "empty trace: no baseline");
    CHECK_STR(primary(doc), "(none)", "empty trace: no primary finding");
    CHECK_STR(json_string_value(json_object_get(finding(doc, "no_steps"), "claim")),
              "no complete step recorded yet: python.torch_trace is empty (has the model run a "
              "forward pass?)",
              "empty trace: the claim says what is missing");
    json_decref(doc);
}

static void test_healthy(void)
{
    fresh(1);
    for (int s = 0; s < 30; s++) add_step(s, 0.004, 0.005, 0.0005, s == 0 ? 0.5 : 0.0102, 300);
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "(none)", "healthy: no primary finding");
    CHECK(problems(doc) == 0, "healthy: no warning or critical finding");
    CHECK_STR(bottleneck(doc), "compute", "healthy: compute-bound");
    CHECK_STR(severity(doc, "compute_bound"), "info", "healthy: compute finding is info");
    CHECK(json_integer_value(json_object_get(json_object_get(doc, "baseline"), "warmup_steps"))
              == 1, "healthy: the slow first step is warm-up");
    CHECK(stat(doc, "median_s") > 0.0101 && stat(doc, "median_s") < 0.0103,
          "healthy: median step 10.2 ms");
    CHECK_STR(severity(doc, "first_iteration"), "info", "first-iteration overhead reported");
    CHECK_STR(severity(doc, "memory_growth"), "ok", "healthy: no memory growth");
    CHECK_STR(severity(doc, "load_imbalance"), "skipped", "one target: imbalance skipped");
    CHECK_STR(severity(doc, "host_syncs"), "skipped", "no python.steps: syncs skipped");
    CHECK(sql_reruns(finding(doc, "compute_bound")), "the compute finding's SQL re-runs");
    CHECK(sql_reruns(finding(doc, "memory_growth")), "the memory finding's SQL re-runs");
    CHECK_STR(json_string_value(json_object_get(json_object_get(doc, "baseline"),
                                                "conditions_note")),
              "measurement conditions unknown: eval timed out",
              "conditions unknown when eval did not answer");
    json_decref(doc);
}

static void test_unaccounted(void)
{
    fresh(1);
    for (int s = 0; s < 20; s++) add_step(s, 0.004, 0.005, 0.0005, 0.030, 300);
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "unaccounted_time", "slow data: primary is unaccounted time");
    CHECK_STR(severity(doc, "unaccounted_time"), "critical", "slow data: critical");
    CHECK_STR(bottleneck(doc), "data_likely", "slow data: likely data, not claimed data-bound");
    CHECK(finding(doc, "data_bound") == NULL, "without dataloader_trace no data_bound claim");
    CHECK(sql_reruns(finding(doc, "unaccounted_time")), "its SQL re-runs");
    json_decref(doc);
}

static void test_dataloader(void)
{
    fresh(1);
    exec("CREATE TABLE python.dataloader_trace (step INTEGER, batch_index INTEGER, wait REAL,"
         " time_offset REAL, num_workers INTEGER, pin_memory INTEGER, prefetch_factor INTEGER,"
         " persistent_workers INTEGER, batch_size INTEGER, rank INTEGER)");
    for (int s = 0; s < 20; s++) {
        char sql[256];
        add_step(s, 0.004, 0.005, 0.0005, 0.030, 300);
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.dataloader_trace VALUES (%d, %d, 0.02, 0, 0, 0, 0, 0, 32, 0)",
                 s, s);
        exec(sql);
    }
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "data_bound", "data-loader wait > compute: data-bound");
    CHECK_STR(bottleneck(doc), "data", "bottleneck type data");
    json_t *b = json_object_get(doc, "baseline");
    CHECK(json_number_value(json_object_get(b, "batch_size")) == 32,
          "batch size from python.dataloader_trace");
    CHECK(json_number_value(json_object_get(b, "samples_per_s")) > 1066 &&
              json_number_value(json_object_get(b, "samples_per_s")) < 1067,
          "throughput 32 / 30 ms");
    json_decref(doc);
}

static void test_optimizer(void)
{
    fresh(1);
    for (int s = 0; s < 20; s++) add_step(s, 0.002, 0.003, 0.020, 0.0255, 300);
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "optimizer_heavy", "oversized optimizer: primary");
    CHECK_STR(bottleneck(doc), "optimizer", "bottleneck type optimizer");
    json_decref(doc);
}

static void test_no_optimizer(void)
{
    fresh(1);
    for (int s = 0; s < 10; s++) add_step(s, 0.004, 0.005, 0, 0, 300);
    json_t *doc = build(0, NULL);
    json_t *b = json_object_get(doc, "baseline");
    CHECK(doc && json_integer_value(json_object_get(b, "steps_in_window")) == 10,
          "no optimizer: every step counted");
    CHECK(strstr(json_string_value(json_object_get(b, "step_source")), "no optimizer") != NULL,
          "no optimizer: the step source says so");
    CHECK(stat(doc, "median_s") > 0.0091 && stat(doc, "median_s") < 0.0093,
          "no optimizer: the step is the span of its rows");
    CHECK(finding(doc, "optimizer_heavy") == NULL, "no optimizer: no optimizer finding");
    json_decref(doc);
}

static void test_one_step(void)
{
    fresh(1);
    add_step(0, 0.004, 0.005, 0.0005, 0.0102, 300);
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "one_step"), "info", "one step: said so");
    CHECK(json_integer_value(json_object_get(json_object_get(doc, "baseline"), "warmup_steps"))
              == 0, "one step: no warm-up excluded");
    CHECK(stat(doc, "std_s") == 0, "one step: std 0");
    CHECK_STR(severity(doc, "memory_growth"), "skipped", "one step: memory growth skipped");
    json_decref(doc);
}

static void test_outlier(void)
{
    fresh(1);
    for (int s = 0; s < 30; s++)
        add_step(s, 0.004, 0.005, 0.0005, s == 15 ? 0.5 : 0.0102, 300);
    json_t *doc = build(0, NULL);
    CHECK(json_integer_value(json_object_get(json_object_get(doc, "baseline"), "warmup_steps"))
              == 0, "outlier in the middle: not warm-up");
    CHECK(stat(doc, "median_s") < 0.0103, "outlier: the median is unaffected");
    CHECK(stat(doc, "max_s") == 0.5, "outlier: max shows it");
    CHECK_STR(severity(doc, "outlier_steps"), "info", "outlier: reported as info");
    CHECK(json_integer_value(json_object_get(json_object_get(finding(doc, "outlier_steps"),
                                                             "numbers"), "worst_step")) == 15,
          "outlier: names step 15");
    CHECK_STR(primary(doc), "(none)", "one outlier is not a problem");
    json_decref(doc);
}

static void test_leak(void)
{
    fresh(1);
    for (int s = 0; s < 30; s++) add_step(s, 0.004, 0.005, 0.0005, 0.0102, 300 + 4.0 * s);
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "memory_growth", "leak: primary is memory growth");
    CHECK_STR(severity(doc, "memory_growth"), "critical", "leak: critical");
    json_t *n = json_object_get(finding(doc, "memory_growth"), "numbers");
    CHECK(json_number_value(json_object_get(n, "slope_mb_per_step")) == 4.0,
          "leak: 4 MB per step");
    json_decref(doc);
}

static void test_host_overhead(void)
{
    fresh(1);
    for (int s = 0; s < 10; s++) {
        add_step(s, 0.001, 0.002, 0.0005, 0.006, 300);
        for (int k = 0; k < 150; k++) {
            char sql[256];
            snprintf(sql, sizeof sql,
                     "INSERT INTO python.torch_trace VALUES (%d, %d, 'blocks.%d', 'Tiny',"
                     " 'forward', 0.00001, 0.00001, 0.001, 300, 300, 1, 1, 0)",
                     s, k + 3, k);
            exec(sql);
        }
    }
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "host_overhead", "tiny modules: host overhead");
    CHECK_STR(bottleneck(doc), "host_overhead", "bottleneck type host_overhead");
    json_decref(doc);
}

static void test_last(void)
{
    fresh(1);
    for (int s = 0; s < 30; s++) add_step(s, 0.004, 0.005, 0.0005, s < 20 ? 0.030 : 0.0102, 300);
    json_t *doc = build(5, NULL);
    json_t *w = json_object_get(doc, "window");
    CHECK(json_integer_value(json_object_get(w, "first_step")) == 25 &&
              json_integer_value(json_object_get(w, "last_step")) == 29,
          "--last 5: steps 25..29");
    CHECK_STR(primary(doc), "(none)", "--last 5: only the healthy tail is judged");
    json_decref(doc);
}

static void test_steps_table(void)
{
    fresh(1);
    exec("CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL, forward REAL,"
         " backward REAL, optimizer REAL, collectives REAL, other REAL, samples INTEGER,"
         " syncs INTEGER, rank INTEGER)");
    for (int s = 0; s < 10; s++) {
        char sql[256];
        add_step(s, 0.004, 0.005, 0.0005, 0.0102, 300);
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.steps VALUES (%d, 0.0102, 0.0001, 0.004, 0.005, 0.0005, 0,"
                 " 0.0006, 64, 6, 0)",
                 s);
        exec(sql);
    }
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "host_syncs"), "warning", "6 syncs per step: warning");
    CHECK_STR(primary(doc), "host_syncs", "syncs are the only problem");
    CHECK(json_number_value(json_object_get(json_object_get(doc, "baseline"), "batch_size"))
              == 64, "batch size from python.steps samples");
    CHECK(sql_reruns(finding(doc, "host_syncs")), "the syncs SQL re-runs");
    exec("UPDATE python.steps SET syncs = 0");
    json_decref(doc);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "host_syncs"), "ok", "0 syncs: ok");
    json_decref(doc);
}

static void test_collectives_amp(void)
{
    fresh(1);
    exec("CREATE TABLE python.amp_trace (step INTEGER, scale REAL, found_inf INTEGER,"
         " skipped INTEGER, autocast_enabled INTEGER, autocast_dtype TEXT, rank INTEGER)");
    for (int s = 0; s < 10; s++) {
        char sql[256];
        add_step(s, 0.002, 0.002, 0.0005, 0.0102, 300);
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.nccl_trace VALUES (%d, 'all_reduce', 'nccl', 1000, 'float',"
                 " 2, 0, 6.0, 0.005, 0); INSERT INTO python.amp_trace VALUES (%d, %d, %d, %d,"
                 " 1, 'float16', 0)",
                 s, s, s == 4 ? 32768 : 65536, s == 4, s == 4);
        exec(sql);
    }
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "collectives"), "warning", "collectives 59%: warning");
    CHECK_STR(bottleneck(doc), "collectives", "bottleneck type collectives");
    CHECK_STR(severity(doc, "amp"), "warning", "a skipped AMP step: warning");
    CHECK(sql_reruns(finding(doc, "amp")) && sql_reruns(finding(doc, "collectives")),
          "their SQL re-runs");
    json_decref(doc);
}

int main(void)
{
    test_missing_trace();
    test_empty();
    test_healthy();
    test_unaccounted();
    test_dataloader();
    test_optimizer();
    test_no_optimizer();
    test_one_step();
    test_outlier();
    test_leak();
    test_host_overhead();
    test_last();
    test_steps_table();
    test_collectives_amp();
    sqlite3_close(db);
    return check_summary();
}
