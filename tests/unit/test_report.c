/*
 * test_report.c - the step rules of src/report on synthetic table contents.
 *
 * The fixture (report_fixture.h) runs the report's SQL against an in-memory SQLite database where
 * each test creates the same schema-qualified tables the agent serves and inserts rows with known
 * causes planted. Each test checks the primary finding, the absence of false ones, and the edge
 * cases: no steps, one step, no optimizer, no data loader, a single huge outlier step, missing
 * tables.
 *
 * The memory section and the AMP hardware checks are in test_report_memory.c; load imbalance,
 * other ranks, device time and arrival order in test_report_ranks.c.
 */
#include "check.h"
#include "report_fixture.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

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
    CHECK(step_stat(doc, "median_s") > 0.0101 && step_stat(doc, "median_s") < 0.0103,
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

/* Every 4th optimizer step 3.5x slower (seen under load: a memory-bound Adam step): the slow
 * steps are the optimizer bottleneck, slower still; optimizer_heavy stays the primary finding. */
static void test_optimizer_slow_every_few(void)
{
    fresh(1);
    for (int s = 0; s < 20; s++) {
        double opt = s % 4 == 3 ? 0.070 : 0.020;
        add_step(s, 0.002, 0.003, opt, 0.0055 + opt, 300);
    }
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "outlier_steps"), "warning", "slow optimizer steps: a warning");
    CHECK_STR(primary(doc), "optimizer_heavy", "slow optimizer steps: the optimizer is primary");
    CHECK(strstr(claim(doc, "outlier_steps"), "see optimizer_heavy") != NULL,
          "slow optimizer steps: the claim points to the bottleneck");
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
    CHECK(step_stat(doc, "median_s") > 0.0091 && step_stat(doc, "median_s") < 0.0093,
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
    CHECK(step_stat(doc, "std_s") == 0, "one step: std 0");
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
    CHECK(step_stat(doc, "median_s") < 0.0103, "outlier: the median is unaffected");
    CHECK(step_stat(doc, "max_s") == 0.5, "outlier: max shows it");
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
    CHECK(strstr(advice(doc, "communication"), "bucket_cap_mb") != NULL,
          "communication: DDP's knobs without DeepSpeed");
    json_decref(doc);
    /* the same job under a DeepSpeed engine (ZeRO 2): DeepSpeed's knobs, not DDP's (issue 50) */
    test_conditions = json_pack("{s:s,s:i}", "framework", "deepspeed", "zero_stage", 2);
    doc = build(0, NULL);
    CHECK(strstr(advice(doc, "communication"), "\"overlap_comm\": true") != NULL &&
              strstr(advice(doc, "communication"), "reduce_bucket_size") != NULL &&
              strstr(advice(doc, "communication"), "ZeRO stage 2 and 3") != NULL,
          "DeepSpeed: its own knobs");
    CHECK(strstr(advice(doc, "communication"), "bucket_cap_mb") == NULL &&
              strstr(advice(doc, "communication"), "DDP") == NULL,
          "DeepSpeed: no DDP knob");
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
    test_optimizer_slow_every_few();
    test_no_optimizer();
    test_one_step();
    test_outlier();
    test_leak();
    test_host_overhead();
    test_last();
    test_steps_table();
    test_collectives_amp();
    json_decref(test_info);
    sqlite3_close(db);
    return check_summary();
}
