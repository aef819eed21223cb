/*
 * test_report.c - the rules of src/report on synthetic table contents.
 *
 * The report reads its data only through a pb_report_query_fn; here that function runs the SQL
 * against an in-memory SQLite database where each test creates the same schema-qualified
 * tables the agent serves (ATTACH ':memory:' AS python; CREATE TABLE python.torch_trace ...)
 * and inserts rows with known causes planted. Each test checks the primary finding, the absence
 * of false ones, and the edge cases: no steps, one step, no optimizer, no data loader, a single
 * huge outlier step, missing tables.
 *
 * The memory section, the AMP hardware checks and load imbalance have their own tests below:
 * their GPU branches (CUDA allocator figures, compute capability, fp16/bf16 layers on cuda) can
 * only be exercised here, on synthetic rows, on a machine without a GPU. Other ranks are further
 * in-memory databases handed to the report as peers.
 */
#include "check.h"
#include "report.h"
#include "toolkit.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

static sqlite3 *db;

/* What build() hands the report besides the query function (reset by fresh()). */
static json_t *test_info;
static pb_report_peer test_peers[4];
static size_t test_npeers;
static const char *test_peers_note;
static const pb_arrival_rank *test_arrivals; /* the job's arrival summaries, NULL: none */
static size_t test_n_arrivals;

/* ctx: the database to query (a peer's), NULL for `db`. */
static int query_sqlite(void *ctx, const char *sql, json_t **rows, char **error)
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
    json_decref(test_info);
    test_info = NULL;
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

static const char *claim(json_t *doc, const char *id);
static const char *advice(json_t *doc, const char *id);

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
    CHECK_STR(severity(doc, "memory_growth"), "warning",
              "leak, memory available unknown (no python.memory): warning");
    CHECK(strstr(claim(doc, "memory_growth"), "the memory available is unknown") != NULL,
          "leak: says the memory available is unknown");
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
    CHECK_STR(severity(doc, "communication"), "critical", "collectives 59%: critical");
    CHECK_STR(severity(doc, "collectives"), "info", "the check points to the bottleneck");
    CHECK(strstr(claim(doc, "communication"), "spent in collectives (0.001 MB per step, nccl)")
              != NULL, "communication: what moved, and the backend");
    CHECK_STR(bottleneck(doc), "collectives", "bottleneck type collectives");
    CHECK_STR(severity(doc, "amp"), "warning", "a skipped AMP step: warning");
    CHECK(sql_reruns(finding(doc, "amp")) && sql_reruns(finding(doc, "collectives")),
          "their SQL re-runs");
    json_decref(doc);
}

/* ------------------------------------------------------------------ memory section */

static const char MEMORY_TABLES[] =
    "CREATE TABLE python.memory (step INTEGER, phase TEXT, device TEXT, allocated_mb REAL,"
    " max_allocated_mb REAL, reserved_mb REAL, rss_mb REAL, rank INTEGER);"
    "CREATE TABLE python.memory_breakdown (step INTEGER, optimizer TEXT, device TEXT,"
    " params INTEGER, param_bytes INTEGER, grad_bytes INTEGER, state_bytes INTEGER,"
    " state_tensors INTEGER, device_total_mb REAL, rank INTEGER)";

#define MIB (1024LL * 1024LL)

/* A python.memory row; reserved < 0 is NULL (CPU). */
static void mem_row(int step, const char *phase, const char *device, double allocated,
                    double peak, double reserved)
{
    char sql[512], res[32];
    if (reserved < 0) snprintf(res, sizeof res, "NULL");
    else snprintf(res, sizeof res, "%f", reserved);
    snprintf(sql, sizeof sql,
             "INSERT INTO python.memory VALUES (%d, '%s', '%s', %f, %f, %s, %f, 0)", step, phase,
             device, allocated, peak, res, allocated);
    exec(sql);
}

/* A python.memory_breakdown row with sizes in MB; total < 0 is NULL (CPU). */
static void breakdown_row(int step, const char *optimizer, const char *device, double param_mb,
                          double grad_mb, double state_mb, long long extra_state_bytes,
                          double total)
{
    char sql[512], tot[32];
    if (total < 0) snprintf(tot, sizeof tot, "NULL");
    else snprintf(tot, sizeof tot, "%f", total);
    snprintf(sql, sizeof sql,
             "INSERT INTO python.memory_breakdown VALUES (%d, '%s', '%s', 9, %lld, %lld, %lld,"
             " 27, %s, 0)",
             step, optimizer, device, (long long)(param_mb * MIB), (long long)(grad_mb * MIB),
             (long long)(state_mb * MIB) + extra_state_bytes, tot);
    exec(sql);
}

/* The phases of one sampled step, allocated MB in the order the step passes them. */
static void mem_phases(int step, const char *device, double data, double before, double after,
                       double backward, double optimizer, double reserved)
{
    mem_row(step, "after_data", device, data, data, reserved);
    mem_row(step, "before_forward", device, before, before, reserved);
    mem_row(step, "after_forward", device, after, after, reserved);
    mem_row(step, "after_loss", device, after, after, reserved);
    mem_row(step, "after_backward", device, backward, backward, reserved);
    mem_row(step, "after_optimizer", device, optimizer, optimizer, reserved);
}

static double mem_num(json_t *doc, const char *key)
{
    return json_number_value(json_object_get(json_object_get(doc, "memory"), key));
}

static double finding_num(json_t *doc, const char *id, const char *key)
{
    return json_number_value(json_object_get(json_object_get(finding(doc, id), "numbers"), key));
}

static const char *claim(json_t *doc, const char *id)
{
    const char *c = json_string_value(json_object_get(finding(doc, id), "claim"));
    return c ? c : "(none)";
}

static const char *advice(json_t *doc, const char *id)
{
    const char *c = json_string_value(json_object_get(finding(doc, id), "recommendation"));
    return c ? c : "(none)";
}

static int near(double got, double want) { return got > want - 1e-3 && got < want + 1e-3; }

static void test_memory_cpu_adam(void)
{
    fresh(1);
    exec(MEMORY_TABLES);
    for (int s = 0; s < 20; s++) {
        add_step(s, 0.004, 0.005, 0.0005, s == 0 ? 0.5 : 0.0102, 300);
        mem_row(s, "step", "cpu", 340, 345, -1);
    }
    mem_phases(0, "cpu", 300, 300, 304, 320, 340, -1);
    /* Adam: state = 2 x parameters, plus a 4-byte step tensor per parameter */
    breakdown_row(0, "Adam", "cpu", 10, 10, 20, 36, -1);
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "(none)", "CPU Adam run: no primary finding");
    CHECK(problems(doc) == 0, "CPU Adam run: no warning or critical finding");
    CHECK(near(mem_num(doc, "parameters_mb"), 10) && near(mem_num(doc, "gradients_mb"), 10),
          "breakdown: parameters and gradients 10 MB");
    CHECK(near(mem_num(doc, "optimizer_state_mb"), 20), "breakdown: optimizer state 20 MB");
    CHECK(near(mem_num(doc, "state_to_parameters"), 2), "breakdown: state is 2x the parameters");
    CHECK(near(mem_num(doc, "activations_mb"), 4), "activations: after_forward - before_forward");
    CHECK(near(mem_num(doc, "tracked_mb"), 44), "tracked: 10 + 10 + 20 + 4 MB");
    CHECK(strstr(json_string_value(json_object_get(json_object_get(doc, "memory"),
                                                   "activations_source")),
                 "coarse") != NULL,
          "activations on CPU: the source says it is coarse");
    CHECK(json_is_null(json_object_get(json_object_get(doc, "memory"), "pressure")),
          "CPU: no memory pressure figure");
    CHECK_STR(severity(doc, "memory_breakdown"), "info", "breakdown: info");
    CHECK_STR(severity(doc, "optimizer_state"), "ok", "Adam at 45% of tracked: ok");
    CHECK(strstr(claim(doc, "optimizer_state"), "Adam keeps two tensors per parameter") != NULL,
          "optimizer state: says Adam's 2x is expected");
    CHECK_STR(severity(doc, "fragmentation"), "skipped", "fragmentation on CPU: skipped");
    CHECK(strstr(claim(doc, "fragmentation"), "not applicable on CPU") != NULL,
          "fragmentation on CPU: says it does not apply");
    CHECK_STR(severity(doc, "memory_growth"), "ok", "memory growth still checked");
    CHECK_STR(json_string_value(json_object_get(finding(doc, "memory_breakdown"), "phase")),
              "memory", "memory findings are in the memory phase");
    CHECK(sql_reruns(finding(doc, "memory_breakdown")) &&
              sql_reruns(finding(doc, "optimizer_state")),
          "memory SQL re-runs");
    CHECK(json_array_size(json_object_get(doc, "query_errors")) == 0, "no query errors");
    json_decref(doc);
}

static void test_memory_missing(void)
{
    fresh(1);
    for (int s = 0; s < 10; s++) add_step(s, 0.004, 0.005, 0.0005, 0.0102, 300);
    json_t *doc = build(0, NULL);
    CHECK(json_is_null(json_object_get(doc, "memory")), "no memory tables: memory section null");
    CHECK_STR(severity(doc, "memory_breakdown"), "skipped", "no breakdown table: skipped");
    CHECK(strstr(claim(doc, "memory_breakdown"), "absent") != NULL,
          "no breakdown table: says it is absent");
    CHECK(finding(doc, "optimizer_state") == NULL, "no breakdown: no optimizer-state finding");
    CHECK_STR(severity(doc, "fragmentation"), "skipped", "no python.memory: fragmentation skipped");
    CHECK(json_array_size(json_object_get(doc, "query_errors")) == 0,
          "missing memory tables are not query errors");
    json_decref(doc);

    /* An inference run: the tables exist, no optimizer step ever wrote a breakdown. */
    fresh(1);
    exec(MEMORY_TABLES);
    for (int s = 0; s < 10; s++) {
        add_step(s, 0.004, 0, 0, 0, 300);
        mem_row(s, "step", "cpu", 300, 300, -1);
    }
    mem_phases(0, "cpu", 300, 300, 301, 301, 301, -1);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "memory_breakdown"), "skipped", "no optimizer: breakdown skipped");
    CHECK(strstr(claim(doc, "memory_breakdown"), "without an optimizer") != NULL,
          "no optimizer: the claim says why");
    CHECK(json_is_object(json_object_get(doc, "memory")) &&
              near(mem_num(doc, "activations_mb"), 1),
          "no optimizer: the activation estimate is still there");
    CHECK(json_is_null(json_object_get(json_object_get(doc, "memory"), "parameters_mb")),
          "no optimizer: parameters unknown (null)");
    CHECK(problems(doc) == 0, "no optimizer: no problem invented");
    json_decref(doc);

    /* One step */
    fresh(1);
    exec(MEMORY_TABLES);
    add_step(0, 0.004, 0.005, 0.0005, 0.0102, 300);
    mem_row(0, "step", "cpu", 300, 300, -1);
    mem_phases(0, "cpu", 300, 300, 302, 310, 320, -1);
    breakdown_row(0, "SGD", "cpu", 8, 8, 0, 0, -1);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "memory_breakdown"), "info", "one step: breakdown shown");
    CHECK_STR(severity(doc, "optimizer_state"), "ok", "SGD without state: ok");
    CHECK(strstr(claim(doc, "optimizer_state"), "keeps no state") != NULL,
          "SGD without momentum: says it keeps no state");
    CHECK(problems(doc) == 0, "one step: no problem");
    json_decref(doc);
}

/* A CUDA run: step-end rows of allocated / peak / reserved on cuda:0 of a 16 GB device. */
static void cuda_run(double allocated, double peak, double reserved)
{
    fresh(1);
    exec(MEMORY_TABLES);
    for (int s = 0; s < 20; s++) {
        add_step(s, 0.004, 0.005, 0.0005, s == 0 ? 0.5 : 0.0102, 300);
        mem_row(s, "step", "cuda:0", allocated, peak, reserved);
    }
}

static void test_memory_cuda(void)
{
    /* Activations dominate a GPU that is 94% full: the seed's remedies. */
    cuda_run(4000, 14000, 15000);
    mem_phases(0, "cuda:0", 4000, 4100, 13100, 14000, 14000, 15000);
    breakdown_row(0, "AdamW", "cuda:0", 1000, 1000, 2000, 0, 16000);
    json_t *doc = build(0, NULL);
    CHECK(near(mem_num(doc, "pressure"), 15000.0 / 16000), "pressure: peak reserved / device");
    CHECK(near(mem_num(doc, "activations_mb"), 9000), "CUDA activations: 9000 MB");
    CHECK_STR(severity(doc, "memory_breakdown"), "warning",
              "activations dominate a full GPU: warning");
    CHECK(strstr(advice(doc, "memory_breakdown"), "gradient checkpointing") != NULL,
          "activations: recommends gradient checkpointing (seed 002)");
    CHECK_STR(severity(doc, "optimizer_state"), "ok", "optimizer state 15%: ok");
    CHECK_STR(severity(doc, "fragmentation"), "info",
              "reserved 3.75x the step-end allocation but within the peak: info");
    CHECK(strstr(claim(doc, "fragmentation"), "not fragmentation") != NULL,
          "caching within the peak is not called fragmentation");
    CHECK(sql_reruns(finding(doc, "fragmentation")), "fragmentation SQL re-runs");
    json_decref(doc);

    /* Optimizer state dominates; the GPU is full. */
    cuda_run(9000, 14500, 15200);
    mem_phases(0, "cuda:0", 8500, 8600, 9100, 10000, 10000, 15200);
    breakdown_row(0, "Adam", "cuda:0", 1000, 1000, 6000, 0, 16000);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "optimizer_state"), "warning",
              "optimizer state 70% of a full GPU: warning");
    CHECK_STR(primary(doc), "optimizer_state", "and it is the primary finding");
    CHECK(finding_num(doc, "optimizer_state", "state_to_parameters") == 6,
          "numbers: 6x the parameters");
    CHECK(strstr(advice(doc, "optimizer_state"), "2x parameters") != NULL,
          "recommendation quotes seed 002 on Adam's state");
    json_decref(doc);

    /* The same breakdown on a GPU with room to spare: information, no remedy. */
    cuda_run(9000, 9500, 10000);
    mem_phases(0, "cuda:0", 8500, 8600, 9100, 9500, 9500, 10000);
    breakdown_row(0, "Adam", "cuda:0", 1000, 1000, 6000, 0, 80000);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "optimizer_state"), "info",
              "optimizer state dominates, memory not the limit: info");
    CHECK(strstr(claim(doc, "optimizer_state"), "not shown to be the limit") != NULL,
          "says memory is not the limit");
    CHECK(json_is_null(json_object_get(finding(doc, "optimizer_state"), "recommendation")),
          "no remedy when memory is not the problem");
    CHECK_STR(severity(doc, "fragmentation"), "ok", "reserved close to allocated: ok");
    CHECK(problems(doc) == 0, "roomy GPU: no problem");
    json_decref(doc);

    /* Fragmentation: reserved far above anything ever allocated at once. */
    cuda_run(800, 1200, 3000);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "fragmentation"), "warning", "reserved 2.5x the peak: warning");
    CHECK(strstr(advice(doc, "fragmentation"), "empty_cache") != NULL,
          "fragmentation: the seed's empty_cache remedy");
    CHECK(finding_num(doc, "fragmentation", "reserved_to_peak") == 2.5, "numbers: ratio 2.5");
    CHECK_STR(severity(doc, "memory_breakdown"), "skipped",
              "no breakdown rows: breakdown skipped, fragmentation still checked");
    json_decref(doc);
}

/* ------------------------------------------------------------------ AMP hardware */

static const char AMP_TABLE[] =
    "CREATE TABLE python.amp_trace (step INTEGER, scale REAL, found_inf INTEGER,"
    " skipped INTEGER, autocast_enabled INTEGER, autocast_dtype TEXT, autocast_device TEXT,"
    " cuda_capability REAL, rank INTEGER)";

static const char LAYERS_TABLE[] =
    "CREATE TABLE python.layers (step INTEGER, module TEXT, type TEXT, in_features INTEGER,"
    " out_features INTEGER, rows INTEGER, output_shape TEXT, weight_dtype TEXT,"
    " compute_dtype TEXT, device TEXT, rank INTEGER)";

/* 20 steps with autocast `dtype` on `device` ('' off) and a GPU of `capability` (< 0: NULL). */
static void amp_run(const char *dtype, const char *device, double capability)
{
    char sql[512], cap[32];
    fresh(1);
    exec(AMP_TABLE);
    if (capability < 0) snprintf(cap, sizeof cap, "NULL");
    else snprintf(cap, sizeof cap, "%.1f", capability);
    for (int s = 0; s < 20; s++) {
        add_step(s, 0.004, 0.005, 0.0005, s == 0 ? 0.5 : 0.0102, 300);
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.amp_trace VALUES (%d, 65536, 0, 0, %d, '%s', '%s', %s, 0)",
                 s, *dtype != 0, dtype, device, cap);
        exec(sql);
    }
}

static void layer(const char *module, const char *type, int in, int out, int rows,
                  const char *dtype, const char *device, double self_s_per_step)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO python.layers VALUES (0, '%s', '%s', %d, %d, %d, '%dx%d', 'float32',"
             " '%s', '%s', 0)",
             module, type, in, out, rows, rows, out, dtype, device);
    exec(sql);
    for (int s = 0; s < 20; s++) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.torch_trace VALUES (%d, 5, '%s', '%s', 'forward', %.9f,"
                 " %.9f, 0.001, 300, 300, 1, 1, 0)",
                 s, module, type, self_s_per_step, self_s_per_step);
        exec(sql);
    }
}

static void test_amp_bf16(void)
{
    amp_run("bfloat16", "cuda", 7.0);
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "amp_bf16"), "warning", "bf16 on compute capability 7.0: warning");
    CHECK(strstr(advice(doc, "amp_bf16"), "FP16") != NULL, "recommends FP16 (seed 004)");
    CHECK(finding_num(doc, "amp_bf16", "cuda_capability") == 7.0, "numbers: capability 7.0");
    CHECK(sql_reruns(finding(doc, "amp_bf16")), "its SQL re-runs");
    json_decref(doc);

    amp_run("bfloat16", "cuda", 8.0);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "amp_bf16"), "ok", "bf16 on an Ampere GPU: ok");
    CHECK(problems(doc) == 0, "bf16 on Ampere: no problem");
    json_decref(doc);

    amp_run("bfloat16", "cuda", -1);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "amp_bf16"), "skipped", "capability unknown: skipped");
    json_decref(doc);

    amp_run("bfloat16", "cpu", -1);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "amp_bf16"), "skipped", "CPU autocast: skipped");
    CHECK(strstr(claim(doc, "amp_bf16"), "does not apply (autocast runs on the CPU") != NULL,
          "CPU autocast: says the GPU check does not apply");
    CHECK(problems(doc) == 0, "CPU autocast: no problem invented");
    json_decref(doc);

    amp_run("float16", "cuda", 7.0);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "amp_bf16"), "skipped", "fp16 on a V100: the bf16 check does not apply");
    CHECK(problems(doc) == 0, "fp16 on a V100: no problem");
    json_decref(doc);

    /* An amp_trace from before autocast_device/cuda_capability: said, not a query error. */
    fresh(1);
    exec("CREATE TABLE python.amp_trace (step INTEGER, scale REAL, found_inf INTEGER,"
         " skipped INTEGER, autocast_enabled INTEGER, autocast_dtype TEXT, rank INTEGER)");
    for (int s = 0; s < 10; s++) {
        char sql[256];
        add_step(s, 0.004, 0.005, 0.0005, 0.0102, 300);
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.amp_trace VALUES (%d, NULL, 0, 0, 0, '', 0)", s);
        exec(sql);
    }
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "amp_bf16"), "skipped", "old amp_trace: skipped");
    CHECK(strstr(claim(doc, "amp_bf16"), "lacks autocast_device") != NULL,
          "old amp_trace: says which columns are missing");
    CHECK(json_array_size(json_object_get(doc, "query_errors")) == 0,
          "old amp_trace: no query error");
    json_decref(doc);
}

static void test_tensor_cores(void)
{
    /* fp16 on a GPU; fc1 (509 features, 31 x 127 rows) does most of the work. */
    amp_run("float16", "cuda", 8.0);
    exec(LAYERS_TABLE);
    layer("fc1", "Linear", 512, 509, 31 * 127, "float16", "cuda:0", 0.006);
    layer("fc2", "Linear", 512, 512, 32 * 128, "float16", "cuda:0", 0.002);
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "tensor_cores"), "warning", "misaligned hot layer: warning");
    CHECK(strstr(claim(doc, "tensor_cores"), "fc1") != NULL, "names fc1");
    CHECK(strstr(claim(doc, "tensor_cores"), "fc2") == NULL, "does not name the aligned fc2");
    CHECK(strstr(claim(doc, "tensor_cores"), "out_features 509") != NULL &&
              strstr(claim(doc, "tensor_cores"), "rows (batch x sequence) 3937") != NULL,
          "says which dimensions");
    CHECK(strstr(advice(doc, "tensor_cores"), "multiples of 8 (FP16) or 16 (BF16)") != NULL,
          "recommendation from seed 002");
    CHECK(finding_num(doc, "tensor_cores", "misaligned") == 1, "numbers: 1 misaligned layer");
    CHECK(sql_reruns(finding(doc, "tensor_cores")), "its SQL re-runs");
    json_decref(doc);

    /* A 10-class head in bf16: misaligned, but a small share of the time. */
    amp_run("bfloat16", "cuda", 9.0);
    exec(LAYERS_TABLE);
    layer("body", "Linear", 1024, 1024, 64, "bfloat16", "cuda:0", 0.008);
    layer("head", "Linear", 1024, 10, 64, "bfloat16", "cuda:0", 0.0001);
    layer("stem", "Conv2d", 3, 64, 64 * 32 * 32, "bfloat16", "cuda:0", 0.0002);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "tensor_cores"), "info", "small misaligned head: info");
    CHECK(strstr(claim(doc, "tensor_cores"), "stem") == NULL,
          "an RGB stem convolution (3 input channels) is left out");
    CHECK(problems(doc) == 0, "healthy bf16 GPU run: no problem");
    json_decref(doc);

    /* Aligned */
    amp_run("float16", "cuda", 8.0);
    exec(LAYERS_TABLE);
    layer("fc", "Linear", 512, 512, 64 * 128, "float16", "cuda:0", 0.008);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "tensor_cores"), "ok", "aligned layers: ok");
    json_decref(doc);

    /* CPU: does not apply, whatever the shapes */
    amp_run("", "", -1);
    exec(LAYERS_TABLE);
    layer("fc", "Linear", 509, 509, 31, "float32", "cpu", 0.008);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "tensor_cores"), "skipped", "CPU layers: skipped");
    CHECK(strstr(claim(doc, "tensor_cores"), "does not apply (the model runs on the CPU)") != NULL,
          "CPU: says it does not apply");
    CHECK(problems(doc) == 0, "CPU: no problem invented");
    json_decref(doc);

    /* fp32 on a GPU */
    amp_run("", "", 8.0);
    exec(LAYERS_TABLE);
    layer("fc", "Linear", 509, 509, 31, "float32", "cuda:0", 0.008);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "tensor_cores"), "skipped", "fp32 GPU layers: skipped");
    CHECK(strstr(claim(doc, "tensor_cores"), "float32") != NULL, "fp32: says so");
    json_decref(doc);
}

/* ------------------------------------------------------------------ load imbalance */

static const char STEPS_TABLE[] =
    "CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL, forward REAL,"
    " backward REAL, optimizer REAL, collectives REAL, grad_sync REAL, other REAL,"
    " samples INTEGER, syncs INTEGER, rank INTEGER)";

static sqlite3 *peer_db[2];

/* Rows of python.steps; grad_sync < 0: a table without that column (an older agent). */
static void steps_rows(sqlite3 *h, int rank, int steps, double wall, double data, double forward,
                       double grad_sync, double other)
{
    for (int s = 0; s < steps; s++) {
        char sql[512], sync[32] = "";
        if (grad_sync >= 0) snprintf(sync, sizeof sync, "%f, ", grad_sync);
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.steps VALUES (%d, %f, %f, %f, 0.004, 0.0005, 0.001, %s%f,"
                 " 32, 0, %d)",
                 s, s == 0 ? 0.5 : wall, data, forward, sync, other, rank);
        if (sqlite3_exec(h, sql, NULL, NULL, NULL) != SQLITE_OK) {
            printf("setup SQL failed: %s\n  %s\n", sqlite3_errmsg(h), sql);
            exit(2);
        }
    }
}

/* A peer database holding python.steps (with grad_sync unless old). */
static sqlite3 *peer(int i, int rank, int old)
{
    if (peer_db[i]) sqlite3_close(peer_db[i]);
    sqlite3_open(":memory:", &peer_db[i]);
    sqlite3_exec(peer_db[i], "ATTACH ':memory:' AS python", NULL, NULL, NULL);
    sqlite3_exec(peer_db[i],
                 old ? "CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL,"
                       " forward REAL, backward REAL, optimizer REAL, collectives REAL,"
                       " other REAL, samples INTEGER, syncs INTEGER, rank INTEGER)"
                     : STEPS_TABLE,
                 NULL, NULL, NULL);
    test_peers[test_npeers].rank = rank;
    test_peers[test_npeers].target = i ? "5002" : "5001";
    test_peers[test_npeers].query = query_sqlite;
    test_peers[test_npeers].ctx = peer_db[i];
    test_npeers++;
    return peer_db[i];
}

/* Rank 0 (the target) and its steps, world of `world`. */
static void rank0(int world, double data, double grad_sync, double other)
{
    fresh(1);
    exec(STEPS_TABLE);
    for (int s = 0; s < 20; s++) add_step(s, 0.004, 0.005, 0.0005, s == 0 ? 0.5 : 0.040, 300);
    steps_rows(db, 0, 20, 0.040, data, 0.005, grad_sync, other);
    test_info = json_pack("{s:i,s:i,s:s,s:i}", "rank", 0, "world_size", world, "job",
                          "127.0.0.1:29500/none", "pid", 5000);
}

static void test_load_imbalance(void)
{
    /* Balanced */
    rank0(2, 0.001, 0.002, 0.025);
    steps_rows(peer(0, 1, 0), 1, 20, 0.040, 0.001, 0.005, 0.0021, 0.0249);
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "load_imbalance"), "ok", "balanced ranks: ok");
    CHECK(finding_num(doc, "load_imbalance", "ranks_reached") == 2, "two ranks read");
    CHECK(problems(doc) == 1 && !strcmp(severity(doc, "unaccounted_time"), "critical"),
          "balanced: the only problem is the host time planted in `other` (25 of 40 ms)");
    CHECK(sql_reruns(finding(doc, "load_imbalance")), "its SQL re-runs");
    json_decref(doc);

    /* Rank 1 loads data 30 ms per step; rank 0 waits for it in DDP's gradient sync. */
    rank0(2, 0.001, 0.030, 0.003);
    steps_rows(peer(0, 1, 0), 1, 20, 0.040, 0.030, 0.005, 0.001, 0.003);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "load_imbalance"), "warning", "slow data on rank 1: warning");
    CHECK_STR(primary(doc), "load_imbalance", "it is the primary finding");
    CHECK(strstr(claim(doc, "load_imbalance"), "rank 1") != NULL, "names rank 1");
    CHECK_STR(json_string_value(json_object_get(
                  json_object_get(finding(doc, "load_imbalance"), "numbers"), "differs_most")),
              "data_wait", "data loading differs most");
    CHECK(strstr(advice(doc, "load_imbalance"), "data loading") != NULL,
          "recommendation: seed 000's load imbalance in data loading");
    CHECK(finding_num(doc, "load_imbalance", "step_imbalance") < 0.01,
          "the step times themselves are equal (synchronous training)");
    json_decref(doc);

    /* Ranks that do not synchronise: 40 vs 60 ms steps */
    rank0(2, 0.001, 0.001, 0.004);
    steps_rows(peer(0, 1, 0), 1, 20, 0.060, 0.001, 0.005, 0.001, 0.004);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "load_imbalance"), "warning", "step times 40 vs 60 ms: warning");
    CHECK(finding_num(doc, "load_imbalance", "step_imbalance") == 0.2,
          "imbalance = (max - mean) / mean = 20%%");
    json_decref(doc);

    /* A peer from before grad_sync: still compared, with a note */
    rank0(2, 0.001, 0.002, 0.025);
    steps_rows(peer(0, 1, 1), 1, 20, 0.040, 0.001, 0.005, -1, 0.0249);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "load_imbalance"), "ok", "old peer: compared");
    CHECK(json_is_string(json_object_get(
              json_object_get(finding(doc, "load_imbalance"), "numbers"), "note")),
          "old peer: the numbers say grad_sync is missing there");
    json_decref(doc);

    /* A peer that cannot be read */
    rank0(2, 0.001, 0.002, 0.025);
    peer(0, 1, 0);
    sqlite3_exec(peer_db[0], "DROP TABLE python.steps", NULL, NULL, NULL);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "load_imbalance"), "skipped", "unreadable peer: skipped");
    CHECK(strstr(claim(doc, "load_imbalance"), "1 rank readable") != NULL,
          "unreadable peer: says how many ranks could be read");
    json_decref(doc);

    /* Rank of a 2-rank job whose other rank was not found */
    rank0(2, 0.001, 0.002, 0.025);
    test_peers_note = "0 of the 1 other rank found among the agents in /tmp/x";
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "load_imbalance"), "skipped", "no peer found: skipped");
    CHECK(strstr(claim(doc, "load_imbalance"), "0 of the 1 other rank found") != NULL,
          "no peer found: says where it looked");
    json_decref(doc);

    /* A single process */
    rank0(1, 0.001, 0, 0.025);
    doc = build(0, NULL);
    CHECK_STR(claim(doc, "load_imbalance"),
              "load imbalance: does not apply (a single process, world size 1)",
              "world size 1: does not apply");
    json_decref(doc);
    for (int i = 0; i < 2; i++)
        if (peer_db[i]) sqlite3_close(peer_db[i]);
}


/* Detail windows (python.steps.detail): module rows exist only on detail steps, which probing's
 * recording slows by 60 % here (more than warm-up detection's 1.5x); steps 0-7 and 64-71 are detail steps, step 0 is warm-up. */
static void detail_steps(int n, int module_rows)
{
    fresh(1);
    exec("CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL, forward REAL,"
         " backward REAL, optimizer REAL, collectives REAL, other REAL, samples INTEGER,"
         " syncs INTEGER, rank INTEGER, grad_sync REAL, detail INTEGER)");
    for (int s = 0; s < n; s++) {
        int d = s % 64 < 8;
        double k = (s == 0 ? 4.0 : 1.0) * (d ? 1.6 : 1.0);
        char sql[512];
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.steps VALUES (%d, %f, 0.0001, %f, %f, 0.0005, 0, 0.0006, 64,"
                 " 0, 0, 0, %d)",
                 s, 0.0102 * k, 0.004 * k, 0.005 * k, d);
        exec(sql);
        if (d && module_rows) add_step(s, 0.004 * k, 0.005 * k, 0.0005, 0.0102 * k, 300);
    }
}

static void test_detail_windows(void)
{
    detail_steps(100, 1);
    json_t *doc = build(0, NULL);
    json_t *b = json_object_get(doc, "baseline");
    CHECK(json_integer_value(json_object_get(b, "warmup_steps")) == 1,
          "detail windows: only step 0 is warm-up (detail steps are compared with detail steps)");
    CHECK(json_is_true(json_object_get(b, "detail_steps_left_out")) &&
              json_integer_value(json_object_get(b, "detail_steps")) == 15,
          "detail windows: the 15 steady detail steps are left out of the timing");
    CHECK(stat(doc, "max_s") < 0.0103 && stat(doc, "p99_s") < 0.0103,
          "detail windows: p99 and max are the job's, not probing's detail steps (max %g)", stat(doc, "max_s"));
    CHECK(json_number_value(json_object_get(b, "detail_median_s")) > 0.014,
          "detail windows: the detail steps' median is shown beside");
    CHECK(finding(doc, "outlier_steps") == NULL, "detail windows: detail steps are not outliers");
    CHECK_STR(primary(doc), "(none)", "detail windows: nothing wrong with this job");
    json_t *top = json_object_get(json_object_get(doc, "component"), "top_by_self");
    CHECK(json_array_size(top) > 0, "detail windows: the module ranking comes from the detail steps");
    json_decref(doc);

    /* --last 20 (steps 80..99) holds no detail step: the modules of the last window (64-71) */
    doc = build(20, NULL);
    top = json_object_get(json_object_get(doc, "component"), "top_by_self");
    const char *sql = json_string_value(json_object_get(json_object_get(doc, "component"), "top_by_self_sql"));
    CHECK(json_array_size(top) > 0 && sql && strstr(sql, "step BETWEEN 64 AND 71"),
          "--last 20 without detail steps: modules from the last detail window, steps 64-71");
    json_decref(doc);

    /* every step in detail (PROBING_DETAIL_EVERY=1): all of them time the job */
    fresh(1);
    exec("CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL, forward REAL,"
         " backward REAL, optimizer REAL, collectives REAL, other REAL, samples INTEGER,"
         " syncs INTEGER, rank INTEGER, grad_sync REAL, detail INTEGER)");
    for (int s = 0; s < 20; s++) {
        char sql2[512];
        snprintf(sql2, sizeof sql2,
                 "INSERT INTO python.steps VALUES (%d, 0.0102, 0.0001, 0.004, 0.005, 0.0005, 0, 0.0006,"
                 " 64, 0, 0, 0, 1)", s);
        exec(sql2);
        add_step(s, 0.004, 0.005, 0.0005, 0.0102, 300);
    }
    doc = build(0, NULL);
    b = json_object_get(doc, "baseline");
    CHECK(!json_is_true(json_object_get(b, "detail_steps_left_out")) &&
              json_integer_value(json_object_get(b, "steady_steps")) == 20,
          "every step in detail: all 20 steps time the job");
    json_decref(doc);
}


/* python.steps as today's agent writes it (batches, grad_sync, detail); python.memory with
 * limit_mb. */
static const char STEPS_NOW[] =
    "CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL, forward REAL,"
    " backward REAL, optimizer REAL, collectives REAL, grad_sync REAL, other REAL,"
    " samples INTEGER, syncs INTEGER, rank INTEGER, batches INTEGER, detail INTEGER);"
    "CREATE TABLE python.memory (step INTEGER, phase TEXT, device TEXT, allocated_mb REAL,"
    " max_allocated_mb REAL, reserved_mb REAL, rss_mb REAL, limit_mb REAL, rank INTEGER)";

/* One step of python.steps and its end-of-step memory row (device, MB, limit). Times in ms. */
static void step_now(int step, double wall, double data, double fwd, double bwd, double opt,
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

static void fresh_now(void)
{
    fresh(1);
    exec(STEPS_NOW);
}

/* Host time: a slow Python generator feeding the loop (no DataLoader: batches 0, data_wait 0)
 * and per-step logging with a DataLoader; each against a healthy twin. */
static void test_host_time(void)
{
    fresh_now();
    for (int s = 0; s < 40; s++) step_now(s, 170, 0, 12, 18, 5, 0, 64, 0, "cpu", 500, 24000);
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "unaccounted_time", "generator: host time is the primary finding");
    CHECK_STR(bottleneck(doc), "data_likely", "generator: no DataLoader, so likely the input");
    CHECK(strstr(claim(doc, "unaccounted_time"), "no DataLoader fed the loop") != NULL,
          "generator: says no DataLoader was seen (not 'no wait')");
    CHECK(strstr(advice(doc, "unaccounted_time"), "capture --stack") != NULL,
          "generator: says how to see the lines");
    CHECK(json_is_null(json_object_get(json_object_get(json_object_get(doc, "component"),
                                                       "shares"), "data")),
          "generator: the data share is unknown, not 0");
    CHECK_STR(severity(doc, "host_syncs"), "skipped", "CPU: the host-sync check does not apply");
    CHECK(strstr(claim(doc, "host_syncs"), "does not apply (the model runs on the CPU") != NULL,
          "CPU: and says why");
    json_decref(doc);

    fresh_now(); /* logging every step with a DataLoader that keeps up */
    for (int s = 0; s < 40; s++) step_now(s, 26, 0.2, 4, 6, 1.5, 0, 64, 1, "cpu", 500, 24000);
    doc = build(0, NULL);
    CHECK_STR(primary(doc), "unaccounted_time", "logging: host time is the primary finding");
    CHECK_STR(bottleneck(doc), "host", "logging: bottleneck host time");
    CHECK(strstr(claim(doc, "unaccounted_time"), "outside data wait, forward, backward") != NULL,
          "logging: a DataLoader was seen and its wait is counted");
    json_decref(doc);

    fresh_now(); /* the healthy twin: the same loop without the logging */
    for (int s = 0; s < 40; s++) step_now(s, 12.5, 0.2, 4, 6, 1.5, 0, 64, 1, "cpu", 500, 24000);
    doc = build(0, NULL);
    CHECK_STR(primary(doc), "(none)", "healthy twin: nothing flagged");
    CHECK_STR(bottleneck(doc), "compute", "healthy twin: compute");
    CHECK(strstr(advice(doc, "compute_bound"), "GPU") == NULL,
          "CPU run: no GPU recommendation");
    json_decref(doc);
}

/* A leak projected against the memory available; the same job without it stays clean. */
static void test_leak_projection(void)
{
    fresh_now(); /* +0.125 MB per step, 22 ms steps, 24 GB: ~20 GB per hour */
    for (int s = 0; s < 3000; s++)
        step_now(s, 22, 0.1, 6, 9, 2, 0, 32, 1, "cpu", 2000 + 0.125 * s + (s % 7) * 0.05, 24000);
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "memory_growth"), "critical", "slow leak, ~1 h to exhaustion: critical");
    double slope = finding_num(doc, "memory_growth", "slope_mb_per_step");
    CHECK(slope > 0.124 && slope < 0.126, "slow leak: 0.125 MB per step (Theil-Sen)");
    double hours = finding_num(doc, "memory_growth", "hours_to_limit");
    CHECK(hours > 0.9 && hours < 1.3, "slow leak: out of memory in about an hour");
    CHECK(strstr(claim(doc, "memory_growth"), "GB per hour at this pace; out of memory in ~1 h")
              != NULL, "slow leak: the claim gives the pace and the time left");
    json_decref(doc);

    fresh_now(); /* the same leak with a terabyte: days away, reported as info */
    for (int s = 0; s < 3000; s++)
        step_now(s, 22, 0.1, 6, 9, 2, 0, 32, 1, "cpu", 2000 + 0.125 * s, 4e6);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "memory_growth"), "info", "a week to exhaustion: info");
    json_decref(doc);

    fresh_now(); /* healthy: caches fill over the first steps, then flat with noise */
    for (int s = 0; s < 300; s++)
        step_now(s, 22, 0.1, 6, 9, 2, 0, 32, 1, "cpu", 2000 + (s < 20 ? s * 2.0 : 40) + (s * 7 % 5) * 0.4,
                 24000);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "memory_growth"), "ok", "filled caches, then flat: no leak");
    json_decref(doc);

    /* A short run's leak (issue 28): 36 steps of 100 ms at +0.35 MB each, ~15 min from the
     * limit. Under 16 MB in all, yet never "no steady memory growth" beside its own numbers. */
    fresh_now();
    for (int s = 0; s < 36; s++)
        step_now(s, 100, 0.1, 30, 40, 5, 0, 32, 1, "cpu", 2000 + 0.35 * s, 5160);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "memory_growth"), "warning", "short leak near the limit: a warning");
    CHECK(strstr(claim(doc, "memory_growth"), "memory climbs steadily: +0.35 MB/step") != NULL,
          "short leak: the claim gives the pace");
    CHECK(strstr(claim(doc, "memory_growth"), "out of memory in ~15 min") != NULL,
          "short leak: and the time left");
    CHECK_STR(primary(doc), "memory_growth", "short leak: the primary finding");
    json_decref(doc);

    fresh_now(); /* the same short climb with a terabyte to go: too few steps to tell */
    for (int s = 0; s < 36; s++)
        step_now(s, 100, 0.1, 30, 40, 5, 0, 32, 1, "cpu", 2000 + 0.35 * s, 1e6);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "memory_growth"), "info", "short climb, limit far: info");
    CHECK(strstr(claim(doc, "memory_growth"), "too few steps to tell") != NULL,
          "short climb, limit far: too few steps to tell");
    json_decref(doc);

    double x[6] = {0, 1, 2, 3, 4, 5}, y[6] = {1, 3, 5, 7, 9, 100}, m, b, r2;
    pb__report_theil_sen(x, y, 6, &m, &b, &r2);
    CHECK(m == 2 && b == 1, "Theil-Sen: one wild point does not tilt the line");
}

/* A busy machine (issue 28): steps stretched because the kernel gave the training thread's core
 * to other processes (CPU time far below wall, many involuntary switches) are the machine's,
 * said so at info, never the primary finding; the same slow steps with the thread blocked in
 * its own wait (few involuntary switches) stay the job's. */
static void machine_run(int descheduled_steps)
{
    static const int slow[] = {23, 31, 47, 58, 66, 79, 91, 104, 117, 129, 142, 153, 168, 177, 191};
    fresh(1);
    exec("CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL, forward REAL,"
         " backward REAL, optimizer REAL, collectives REAL, grad_sync REAL, other REAL,"
         " samples INTEGER, syncs INTEGER, rank INTEGER, batches INTEGER, detail INTEGER,"
         " cpu REAL, involuntary_switches INTEGER)");
    for (int st = 0; st < 200; st++) {
        int is_slow = 0;
        for (size_t k = 0; k < sizeof slow / sizeof slow[0]; k++) is_slow |= slow[k] == st;
        double wall = is_slow ? 0.120 : 0.020, fwd = is_slow ? 0.106 : 0.006;
        char sql[512];
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.steps VALUES (%d, %.6f, 0.0002, %.6f, 0.009, 0.002, 0, 0,"
                 " %.6f, 32, 0, 0, 1, 0, %.6f, %d)",
                 st, wall, fwd, wall - 0.0002 - fwd - 0.011, is_slow ? 0.017 : 0.018,
                 is_slow && descheduled_steps ? 40 : 2);
        exec(sql);
    }
}

static void test_machine_noise(void)
{
    machine_run(1);
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "outlier_steps"), "info", "descheduled steps: info");
    CHECK(strcmp(primary(doc), "outlier_steps") != 0, "descheduled steps: not the primary finding");
    CHECK(strstr(claim(doc, "outlier_steps"), "the machine's, not the job's: in them the training "
                                              "thread ran 14% of the wall time (90% in the other "
                                              "steps) and the kernel descheduled it 40 times a "
                                              "step (2 in the others)") != NULL,
          "descheduled steps: the claim gives the evidence");
    CHECK(strstr(claim(doc, "outlier_steps"), "evaluation") == NULL,
          "descheduled steps: no evaluation claimed");
    json_decref(doc);

    machine_run(0); /* the same steps blocked in the job's own wait: the job's */
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "outlier_steps"), "warning", "blocked steps: still the job's, a warning");
    CHECK(strstr(claim(doc, "outlier_steps"), "machine") == NULL, "blocked steps: not the machine");
    json_decref(doc);
}

/* DDP's gradient all-reduce is communication; a single 2-rank job of the same shape without
 * it is not flagged. */
static void test_grad_sync(void)
{
    fresh_now();
    exec("WITH RECURSIVE g(value) AS (SELECT 0 UNION ALL SELECT value + 1 FROM g WHERE value < 29)"
         " INSERT INTO python.nccl_trace SELECT value, 'all_reduce', 'gloo', 62000000, 'float',"
         " 2, 1, 51.8, 0.05, 0 FROM g");
    for (int s = 0; s < 30; s++) step_now(s, 112.8, 0.5, 15, 30, 5, 57.8, 32, 1, "cpu", 500, 24000);
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "communication", "grad_sync 51%: communication is the primary");
    CHECK(strstr(claim(doc, "communication"),
                 "51% of the step (57.8 ms) waits for DDP's gradient all-reduce (62 MB per step, "
                 "gloo)") != NULL,
          "grad_sync: the claim says what is waited for");
    CHECK(finding_num(doc, "collectives", "grad_sync_s") > 0.057,
          "the collectives check counts grad_sync");
    json_decref(doc);
}

/* Eval every 40 steps holds most of the wall time; a checkpoint every 25 steps is a period
 * with a small share. */
static void test_periodic(void)
{
    /* The evaluation steps also took the validation loader's batches (2048 samples more, as
     * Lightning's validation every 40 batches): the evidence for "an evaluation pass"; the
     * batch size and throughput are the training steps' (issue 28). */
    fresh_now();
    double wall = 0;
    for (int s = 0; s < 200; s++) {
        int eval = s % 40 == 39;
        step_now(s, eval ? 1200 : 20, 0.2, eval ? 1185 : 6, 9, 2, 0, eval ? 32 + 2048 : 32, 1,
                 "cpu", 500, 24000);
    }
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "outlier_steps", "eval: the slow steps are the headline");
    CHECK(finding_num(doc, "outlier_steps", "period_steps") == 40, "eval: period 40");
    CHECK(strstr(claim(doc, "outlier_steps"),
                 "over 2048 more samples than a training step: an evaluation pass") != NULL,
          "eval: forwards without backward, with the evaluation's batches as evidence");
    json_t *base = json_object_get(doc, "baseline");
    CHECK(json_number_value(json_object_get(base, "batch_size")) == 32,
          "eval: the batch size is the training batch, not inflated by the validation batches");
    wall = 0;
    {
        json_t *rows = NULL;
        char *err = NULL;
        size_t warm = (size_t)json_integer_value(json_object_get(base, "warmup_steps"));
        char sql[256];
        snprintf(sql, sizeof sql, "SELECT SUM(wall) AS w, COUNT(*) AS n FROM python.steps WHERE "
                 "step >= %zu", warm);
        query_sqlite(NULL, sql, &rows, &err);
        double w = json_number_value(json_object_get(json_array_get(rows, 0), "w"));
        double n = json_number_value(json_object_get(json_array_get(rows, 0), "n"));
        wall = 32 * n / w;
        json_decref(rows);
        free(err);
    }
    double per_s = json_number_value(json_object_get(base, "samples_per_s"));
    CHECK(per_s > wall * 0.999 && per_s < wall * 1.001,
          "eval: throughput counts 32 training samples per step over the whole wall time");
    CHECK(json_integer_value(json_object_get(base, "steps_with_extra_samples")) >= 4,
          "eval: the evaluation steps are counted at the batch size");
    json_decref(doc);

    fresh_now(); /* the same slow forwards without extra batches: no evaluation claimed */
    for (int s = 0; s < 200; s++) {
        int slow = s % 40 == 39;
        step_now(s, slow ? 1200 : 20, 0.2, slow ? 1185 : 6, 9, 2, 0, 32, 1, "cpu", 500, 24000);
    }
    doc = build(0, NULL);
    CHECK(strstr(claim(doc, "outlier_steps"), "evaluation pass") == NULL &&
              strstr(claim(doc, "outlier_steps"), "not shown to be an evaluation") != NULL,
          "slow forwards without extra batches: no evaluation claimed without its evidence");
    json_decref(doc);

    fresh_now();
    for (int s = 0; s < 200; s++) {
        int ckpt = s % 25 == 24;
        step_now(s, ckpt ? 20 * (2 + (s / 25) % 3) : 20, 0.2, 6, 9, 2, 0, 32, 1, "cpu", 500, 24000);
    }
    doc = build(0, NULL);
    CHECK(finding_num(doc, "outlier_steps", "period_steps") == 25, "checkpoint: period 25");
    CHECK_STR(json_string_value(json_object_get(json_object_get(finding(doc, "outlier_steps"),
                                                                "numbers"), "grew")),
              "other", "checkpoint: host time outside the model grows");
    CHECK_STR(severity(doc, "outlier_steps"), "info", "checkpoint: 10% of the wall, info");
    json_decref(doc);
}

/* Non-exclusive causes, throughput from samples, a small sample. */
static void test_causes_throughput_sample(void)
{
    fresh_now();
    for (int s = 0; s < 30; s++) step_now(s, 40, 0.1, 4, 6, 20, 0, 64, 1, "cpu", 500, 24000);
    /* an eval loader's batches of 256 must not become the training batch size */
    exec("CREATE TABLE python.dataloader_trace (step INTEGER, wait REAL, batch_size INTEGER);"
         "INSERT INTO python.dataloader_trace VALUES (5, 0.001, 256), (6, 0.001, 64)");
    for (int s = 0; s < 30; s++) {
        char sql[256];
        snprintf(sql, sizeof sql,
                 "WITH RECURSIVE g(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM g WHERE"
                 " value < 150) INSERT INTO python.torch_trace SELECT %d, value, 'blocks.' ||"
                 " value, 'Linear', 'forward', 0.00001, 0.00001, 0, 0, 0, 1, 1, 0 FROM g",
                 s);
        exec(sql);
    }
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "optimizer_heavy"), "warning", "optimizer heavy");
    CHECK_STR(severity(doc, "host_overhead"), "warning", "and per-op overhead beside it");
    json_t *causes = json_object_get(json_object_get(doc, "bottleneck"), "causes");
    CHECK(json_array_size(causes) == 2 &&
              !strcmp(json_string_value(json_object_get(json_array_get(causes, 0), "type")),
                      "optimizer"),
          "both causes, costliest first");
    double per_s = json_number_value(
        json_object_get(json_object_get(doc, "baseline"), "samples_per_s"));
    CHECK(per_s > 1590 && per_s < 1610,
          "throughput from python.steps samples (64 per 40 ms step), not the largest batch");
    json_decref(doc);

    fresh_now();
    for (int s = 0; s < 4; s++) step_now(s, 12.5, 0.2, 4, 6, 1.5, 0, 64, 1, "cpu", 500, 24000);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "small_sample"), "info", "4 steps: too small a sample");
    json_decref(doc);
}

/* A DDP straggler: rank 1 does ~3x the forward/backward work; rank 0 waits in grad_sync. */
static void test_straggler_mirror(void)
{
    fresh_now();
    test_info = json_pack("{s:i,s:i,s:s,s:i}", "rank", 0, "world_size", 2, "job", "j", "pid", 1);
    for (int s = 0; s < 30; s++) step_now(s, 27, 0.2, 3.3, 4.9, 0.5, 17.3, 32, 1, "cpu", 500, 24000);
    sqlite3 *h = peer(0, 1, 0);
    sqlite3_exec(h, "DROP TABLE python.steps", NULL, NULL, NULL);
    sqlite3_exec(h,
                 "CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL, forward REAL,"
                 " backward REAL, optimizer REAL, collectives REAL, grad_sync REAL, other REAL)",
                 NULL, NULL, NULL);
    for (int s = 0; s < 30; s++) {
        char sql[256];
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.steps VALUES (%d, 0.027, 0.0002, 0.0085, 0.0151, 0.0005, 0,"
                 " 0.0016, 0.0011)", s);
        sqlite3_exec(h, sql, NULL, NULL, NULL);
    }
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "load_imbalance", "straggler: load imbalance is the primary");
    CHECK(finding_num(doc, "load_imbalance", "slow_rank") == 1, "straggler: rank 1 is slow");
    CHECK(strstr(claim(doc, "load_imbalance"), "rank 1 is the slow rank") != NULL &&
              strstr(claim(doc, "load_imbalance"), "backward differs most") != NULL,
          "straggler: names the rank and its slow phase");
    CHECK_STR(severity(doc, "communication"), "info",
              "rank 0's grad_sync is the wait for rank 1, not a communication problem");
    json_decref(doc);
}

/* python.gil: a background thread holding the GIL 70% of the samples, and a quiet twin. */
static void test_gil(void)
{
    for (int busy = 1; busy >= 0; busy--) {
        fresh_now();
        exec("CREATE TABLE python.gil (step INTEGER, thread_id INTEGER, thread_name TEXT,"
             " training INTEGER, held INTEGER, samples INTEGER, rank INTEGER)");
        for (int s = 0; s < 30; s++) {
            char sql[256];
            step_now(s, 80, 0.2, 20, 30, 5, 0, 64, 1, "cpu", 500, 24000);
            snprintf(sql, sizeof sql,
                     "INSERT INTO python.gil VALUES (%d, 1, 'MainThread', 1, %d, 8, 0),"
                     " (%d, 7, 'metrics-aggregator', 0, %d, 8, 0)",
                     s, busy ? 1 : 6, s, busy ? 6 : 0);
            exec(sql);
        }
        json_t *doc = build(0, NULL);
        if (busy) {
            CHECK_STR(severity(doc, "gil_contention"), "warning", "GIL held by another thread");
            CHECK(strstr(claim(doc, "gil_contention"), "thread 'metrics-aggregator' holds the GIL 75%")
                      != NULL, "names the thread and its share");
            CHECK(sql_reruns(finding(doc, "gil_contention")), "the GIL SQL re-runs");
        } else {
            CHECK_STR(severity(doc, "gil_contention"), "ok", "quiet twin: GIL ok");
        }
        json_decref(doc);
    }
    fresh_now();
    for (int s = 0; s < 30; s++) step_now(s, 80, 0.2, 20, 30, 5, 0, 64, 1, "cpu", 500, 24000);
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "gil_contention"), "skipped", "no python.gil: skipped");
    json_decref(doc);
}

/* python.device_steps (device time, CUDA events): GPU-bound when the device runs far behind the
 * host, launch-bound when it keeps up while the host's step is mostly forward/backward/optimizer,
 * host-bound when it keeps up while the host does something else; silent without the table. */
static void device_case(double host_wall, double data, double fwd, double bwd, double opt, double dev_wall,
                        double lag, double sync_wait)
{
    fresh(1);
    exec("CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL, forward REAL,"
         " backward REAL, optimizer REAL, collectives REAL, other REAL, samples INTEGER,"
         " syncs INTEGER, rank INTEGER)");
    exec("CREATE TABLE python.device_steps (step INTEGER, device INTEGER, wall REAL, data_wait REAL,"
         " forward REAL, backward REAL, optimizer REAL, collectives REAL, grad_sync REAL, other REAL,"
         " lag REAL, sync_wait REAL, syncs INTEGER, anchor_error REAL, dropped INTEGER, rank INTEGER)");
    for (int st = 0; st < 20; st++) {
        char sql[512];
        add_step(st, fwd, bwd, opt, host_wall, 300);
        snprintf(sql, sizeof sql, "INSERT INTO python.steps VALUES (%d, %.9f, %.9f, %.9f, %.9f, %.9f, 0, %.9f, 64, %d, 0)",
                 st, host_wall, data, fwd, bwd, opt, host_wall - data - fwd - bwd - opt, sync_wait > 0);
        exec(sql);
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.device_steps VALUES (%d, 0, %.9f, 0, %.9f, %.9f, %.9f, 0, 0, %.9f, %.9f, %.9f, %d, 2e-5, 0, 0)",
                 st, dev_wall, dev_wall * 0.33, dev_wall * 0.6, dev_wall * 0.03, dev_wall * 0.04, lag, sync_wait, sync_wait > 0);
        exec(sql);
    }
}

static const char *device_type(json_t *doc)
{
    return json_string_value(json_object_get(finding(doc, "device_time"), "type"));
}

static void test_device_time(void)
{
    /* the H200 run of gpu_check: 4 bf16 8192x8192 layers, the host queues a step in 1.8 ms */
    device_case(0.0018, 0, 0.0002, 0.00024, 0.00016, 0.019, 0.093, 0);
    json_t *doc = build(0, NULL);
    CHECK_STR(device_type(doc), "gpu_bound", "device far behind the host: GPU-bound");
    CHECK(claim(doc, "device_time") && strstr(claim(doc, "device_time"), "19 ms per step"), "the claim names the device step");
    CHECK(sql_reruns(finding(doc, "device_time")), "the device_time SQL re-runs");
    json_decref(doc);
    /* a planted .item() per step: lag 0 at the step's end, but the sync waited 16.5 ms */
    device_case(0.0191, 0, 0.0002, 0.00024, 0.00016, 0.0192, 0.00001, 0.0165);
    doc = build(0, NULL);
    CHECK_STR(device_type(doc), "gpu_bound", "a sync that waits most of the step: GPU-bound");
    CHECK(claim(doc, "device_time") && strstr(claim(doc, "device_time"), "waits 16.5 ms"), "the claim names the sync's wait");
    json_decref(doc);
    /* 200 tiny layers: the device finishes 8 us after the host, the host is 89 % fwd/bwd/opt */
    device_case(0.031, 0, 0.0085, 0.0165, 0.0025, 0.0318, 0.000008, 0);
    doc = build(0, NULL);
    CHECK_STR(device_type(doc), "launch_bound", "device keeps up, host launching: launch-bound");
    CHECK_STR(severity(doc, "device_time"), "warning", "launch-bound is a warning");
    json_decref(doc);
    /* the device keeps up while the host waits for data */
    device_case(0.03, 0.02, 0.003, 0.004, 0.001, 0.03, 0.00002, 0);
    doc = build(0, NULL);
    CHECK_STR(device_type(doc), "host_bound", "device keeps up, host elsewhere: host-bound");
    json_decref(doc);
    /* no device rows (a CPU job, an older agent): no finding at all */
    fresh(1);
    for (int st = 0; st < 10; st++) add_step(st, 0.004, 0.005, 0.0005, 0.0102, 300);
    doc = build(0, NULL);
    CHECK(finding(doc, "device_time") == NULL, "without python.device_steps: no device_time finding");
    json_decref(doc);
}

/* ------------------------------------------------------------------ arrival order */

enum { AO_RANKS = 4, AO_COLLS = 30 };
static pb_arrival_rank ao_ranks[AO_RANKS];
static pb_arrival ao_arr[AO_RANKS][AO_COLLS];

/* Four ranks, one all-reduce per 40 ms step; rank r enters late[r] ms late and its forward is
 * that much longer; host[r] its node. Deterministic jitter of up to 0.9 ms. */
static void ao_job(const double *late, const char *const *host)
{
    for (int r = 0; r < AO_RANKS; r++) {
        ao_ranks[r] = (pb_arrival_rank){r, host[r], 40, {1, 5 + late[r], 5, 0.5}, ao_arr[r],
                                        AO_COLLS};
        for (int s = 0; s < AO_COLLS; s++) {
            int64_t enter = (int64_t)s * 40000000 + (int64_t)(((s * 7 + r * 3) % 10) * 90000) +
                            (int64_t)(late[r] * 1e6);
            ao_arr[r][s] = (pb_arrival){1, (uint64_t)s + 101, "all_reduce", 1 << 20, enter,
                                        enter + 1000000};
        }
    }
    test_arrivals = ao_ranks;
    test_n_arrivals = AO_RANKS;
}

static int finding_index(json_t *doc, const char *id)
{
    json_t *list = json_object_get(doc, "findings"), *f;
    size_t i;
    json_array_foreach(list, i, f) if (!strcmp(json_string_value(json_object_get(f, "id")), id)) return (int)i;
    return -1;
}

static void test_arrival_order(void)
{
    static const char *const one_node[AO_RANKS] = {"n0", "n0", "n0", "n0"};
    static const char *const two_nodes[AO_RANKS] = {"n0", "n0", "n1", "n1"};
    const double none[AO_RANKS] = {0, 0, 0, 0}, rank2[AO_RANKS] = {0, 0, 25, 0},
                 node1[AO_RANKS] = {0, 0, 25, 25};

    /* Healthy: the others do not wait; an ok finding, nothing else changes. */
    rank0(4, 0.001, 0.025, 0.003);
    ao_job(none, one_node);
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "arrival_order"), "ok", "healthy arrivals: ok");
    CHECK(strstr(claim(doc, "arrival_order"), "no rank makes the others wait") != NULL,
          "healthy arrivals: says nobody makes the others wait");
    CHECK_STR(severity(doc, "communication"), "critical",
              "healthy arrivals: 62% of the step in DDP's sync stays a communication problem");
    json_decref(doc);

    /* Rank 2 enters every all-reduce 25 ms late (its forward is longer): the 25 ms of
     * gradient sync on rank 0 are the wait for it. */
    rank0(4, 0.001, 0.025, 0.003);
    ao_job(rank2, one_node);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "arrival_order"), "critical",
              "rank 2 late: critical (the others wait for it over half the time)");
    CHECK_STR(primary(doc), "arrival_order", "rank 2 late: the primary finding");
    CHECK(strstr(claim(doc, "arrival_order"), "rank 2 (n0) makes the others wait") != NULL &&
              strstr(claim(doc, "arrival_order"), "last in 30 of 30") != NULL,
          "names rank 2, last in 30 of 30: %s", claim(doc, "arrival_order"));
    CHECK(strstr(claim(doc, "arrival_order"), "its forward is 25.0 ms longer") != NULL,
          "names its forward");
    CHECK(finding_num(doc, "arrival_order", "culprit") == 2, "numbers.culprit is 2");
    double share = finding_num(doc, "arrival_order", "wait_share");
    CHECK(share > 0.6 && share < 0.7, "the others wait 25 of 40 ms (%.3f)", share);
    CHECK_STR(severity(doc, "communication"), "info", "communication steps back to info");
    CHECK(strstr(claim(doc, "communication"), "mostly the wait for rank 2") != NULL,
          "communication says it is the wait for rank 2");
    CHECK(finding_index(doc, "arrival_order") < finding_index(doc, "communication"),
          "arrival_order takes communication's place among the findings");
    json_decref(doc);

    /* The target is the late rank: its own communication is not a wait for itself. */
    rank0(4, 0.001, 0.025, 0.003);
    json_object_set_new(test_info, "rank", json_integer(2));
    ao_job(rank2, one_node);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "communication"), "critical", "target is the late rank: "
              "communication unchanged");
    CHECK_STR(severity(doc, "arrival_order"), "critical", "target is the late rank: still named");
    json_decref(doc);

    /* Both ranks of node n1 late: the node is named. */
    rank0(4, 0.001, 0.025, 0.003);
    ao_job(node1, two_nodes);
    doc = build(0, NULL);
    CHECK(strstr(claim(doc, "arrival_order"), "node n1 is late") == claim(doc, "arrival_order"),
          "late node named first: %s", claim(doc, "arrival_order"));
    CHECK(strstr(claim(doc, "communication"), "mostly the wait for node n1") != NULL,
          "communication says it is the wait for node n1");
    json_decref(doc);

    /* A small lag (1.5 ms of a 40 ms step) with little communication: warning, not primary
     * over a bigger problem, and communication is not touched (under 30%). */
    rank0(4, 0.001, 0.002, 0.025);
    const double small[AO_RANKS] = {0, 0, 2.5, 0};
    ao_job(small, one_node);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "arrival_order"), "warning", "2.5 ms late each step: warning");
    CHECK_STR(primary(doc), "unaccounted_time", "the 25 ms of host time stays the primary");
    json_decref(doc);

    /* No collective seen by every member: skipped. */
    rank0(4, 0.001, 0.025, 0.003);
    ao_job(none, one_node);
    ao_ranks[3].n_arrivals = 0;
    ao_ranks[1].arrivals = ao_arr[1] + 15; /* rank 1 holds the later half only */
    ao_ranks[1].n_arrivals = 15;
    ao_ranks[0].n_arrivals = 15;           /* rank 0 the first half only */
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "arrival_order"), "skipped", "no complete collective: skipped");
    json_decref(doc);

    /* One rank's arrivals only (or none fetched): no finding. */
    rank0(4, 0.001, 0.025, 0.003);
    ao_job(rank2, one_node);
    test_n_arrivals = 1;
    doc = build(0, NULL);
    CHECK(finding(doc, "arrival_order") == NULL, "one rank's arrivals: no finding");
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
    test_detail_windows();
    test_collectives_amp();
    test_memory_cpu_adam();
    test_memory_missing();
    test_memory_cuda();
    test_amp_bf16();
    test_tensor_cores();
    test_load_imbalance();
    test_host_time();
    test_leak_projection();
    test_machine_noise();
    test_grad_sync();
    test_periodic();
    test_causes_throughput_sample();
    test_straggler_mirror();
    test_arrival_order();
    test_gil();
    test_device_time();
    json_decref(test_info);
    sqlite3_close(db);
    return check_summary();
}
