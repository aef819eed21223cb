/*
 * test_report_ranks.c - the rules of src/report that read python.steps and other ranks, on
 * synthetic table contents (the fixture: report_fixture.h): load imbalance across ranks, detail
 * windows, host time, machine noise, grad sync, periodic work, stragglers, the
 * GIL, device time and arrival order. Other ranks are further in-memory databases handed to the
 * report as peers.
 */
#include "check.h"
#include "report_fixture.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

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
    CHECK(step_stat(doc, "max_s") < 0.0103 && step_stat(doc, "p99_s") < 0.0103,
          "detail windows: p99 and max are the job's, not probing's detail steps (max %g)", step_stat(doc, "max_s"));
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

/* The other rank of a 2-rank DDP job: 30 steps of 27 ms in python.steps as an agent without
 * the samples/batches columns writes them, with the given forward, backward, grad_sync and
 * other host time (s). */
static void peer_ddp_steps(int rank, double fwd, double bwd, double grad_sync, double other)
{
    sqlite3 *h = peer(0, rank, 0);
    sqlite3_exec(h, "DROP TABLE python.steps", NULL, NULL, NULL);
    sqlite3_exec(h,
                 "CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL, forward REAL,"
                 " backward REAL, optimizer REAL, collectives REAL, grad_sync REAL, other REAL)",
                 NULL, NULL, NULL);
    for (int s = 0; s < 30; s++) {
        char sql[256];
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.steps VALUES (%d, 0.027, 0.0002, %g, %g, 0.0005, 0, %g, %g)",
                 s, fwd, bwd, grad_sync, other);
        sqlite3_exec(h, sql, NULL, NULL, NULL);
    }
}

/* A DDP straggler: rank 1 does ~3x the forward/backward work; rank 0 waits in grad_sync. */
static void test_straggler_mirror(void)
{
    fresh_now();
    test_info = json_pack("{s:i,s:i,s:s,s:i}", "rank", 0, "world_size", 2, "job", "j", "pid", 1);
    for (int s = 0; s < 30; s++) step_now(s, 27, 0.2, 3.3, 4.9, 0.5, 17.3, 32, 1, "cpu", 500, 24000);
    peer_ddp_steps(1, 0.0085, 0.0151, 0.0016, 0.0011);
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

/* The slow rank's own report (issue 50: the rank the others wait for is the primary finding on
 * every rank's report): rank 1's optimizer step is 15 ms of its 27, rank 0 waits for it in
 * grad_sync; load imbalance comes before rank 1's optimizer_heavy. */
static void test_slow_rank_own_report(void)
{
    fresh_now();
    test_info = json_pack("{s:i,s:i,s:s,s:i}", "rank", 1, "world_size", 2, "job", "j", "pid", 2);
    for (int s = 0; s < 30; s++) step_now(s, 27, 0.2, 3.3, 4.9, 15, 0.5, 32, 1, "cpu", 500, 24000);
    peer_ddp_steps(0, 0.0033, 0.0049, 0.0175, 0.0006);
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "optimizer_heavy"), "warning", "slow rank: its optimizer is heavy");
    CHECK_STR(severity(doc, "load_imbalance"), "warning", "slow rank: imbalance named");
    CHECK_STR(primary(doc), "load_imbalance", "slow rank: the imbalance is its primary finding");
    json_decref(doc);
}

/* An evaluation every 2nd step (issue 50): the median rises with it, so no step is slow
 * against it; the steps that took the validation batches are compared with the others. */
static void test_frequent_evaluation(void)
{
    fresh_now();
    for (int s = 0; s < 40; s++)
        step_now(s, s % 2 ? 200 : 100, 0.2, s % 2 ? 130 : 30, 40, 5, 0, s % 2 ? 64 + 512 : 64, 1,
                 "cpu", 500, 24000);
    json_t *doc = build(0, NULL);
    CHECK(finding(doc, "outlier_steps") == NULL, "eval every 2nd step: no slow steps");
    CHECK_STR(severity(doc, "frequent_evaluation"), "warning", "eval every 2nd step: a warning");
    CHECK(strstr(claim(doc, "frequent_evaluation"),
                 "an evaluation runs in 20 of 40 steps, every 2 steps (512 more samples") != NULL &&
              strstr(claim(doc, "frequent_evaluation"), "take 100 ms more (2.0x the others), "
                                                        "33% of the wall time") != NULL,
          "eval every 2nd step: how often, how much");
    CHECK_STR(primary(doc), "frequent_evaluation", "eval every 2nd step: the primary finding");
    json_decref(doc);
    /* more samples in some steps without more forward time (a variable batch whose steps cost
     * the same, the time elsewhere): no evaluation */
    fresh_now();
    for (int s = 0; s < 40; s++)
        step_now(s, s % 2 ? 200 : 100, 0.2, 30, s % 2 ? 140 : 40, 5, 0, s % 2 ? 576 : 64, 1,
                 "cpu", 500, 24000);
    doc = build(0, NULL);
    CHECK(finding(doc, "frequent_evaluation") == NULL, "more samples, no more forward: none");
    json_decref(doc);
    /* the healthy twin: the same samples every step */
    fresh_now();
    for (int s = 0; s < 40; s++) step_now(s, 100, 0.2, 30, 40, 5, 0, 64, 1, "cpu", 500, 24000);
    doc = build(0, NULL);
    CHECK(finding(doc, "frequent_evaluation") == NULL, "healthy twin: none");
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
    /* The GIL held by another thread while the optimizer step is most of the step (issue 50):
     * the thread explains the slow optimizer, so it is the primary finding. */
    fresh_now();
    exec("CREATE TABLE python.gil (step INTEGER, thread_id INTEGER, thread_name TEXT,"
         " training INTEGER, held INTEGER, samples INTEGER, rank INTEGER)");
    for (int s = 0; s < 30; s++) {
        char sql[256];
        step_now(s, 80, 0.2, 8, 10, 55, 0, 64, 1, "cpu", 500, 24000);
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.gil VALUES (%d, 1, 'MainThread', 1, 1, 8, 0),"
                 " (%d, 7, 'metrics-aggregator', 0, 7, 8, 0)", s, s);
        exec(sql);
    }
    json_t *both = build(0, NULL);
    CHECK_STR(severity(both, "optimizer_heavy"), "warning", "GIL and optimizer: optimizer heavy");
    CHECK_STR(primary(both), "gil_contention", "GIL and optimizer: the GIL holder is primary");
    json_decref(both);
    /* probing's own thread (capture's writer) holding it as long: never a finding (issue 50) */
    fresh_now();
    exec("CREATE TABLE python.gil (step INTEGER, thread_id INTEGER, thread_name TEXT,"
         " training INTEGER, held INTEGER, samples INTEGER, rank INTEGER)");
    for (int s = 0; s < 30; s++) {
        char sql[256];
        step_now(s, 80, 0.2, 20, 30, 5, 0, 64, 1, "cpu", 500, 24000);
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.gil VALUES (%d, 1, 'MainThread', 1, 1, 8, 0),"
                 " (%d, 9, 'probing-capture', 0, 6, 8, 0)", s, s);
        exec(sql);
    }
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "gil_contention"), "ok", "probing's own thread: not a finding");
    CHECK(strstr(claim(doc, "gil_contention"), "probing's own threads (75%, not counted)") != NULL,
          "probing's own thread: its share said");
    json_decref(doc);
    fresh_now();
    for (int s = 0; s < 30; s++) step_now(s, 80, 0.2, 20, 30, 5, 0, 64, 1, "cpu", 500, 24000);
    doc = build(0, NULL);
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
    test_detail_windows();
    test_load_imbalance();
    test_host_time();
    test_machine_noise();
    test_grad_sync();
    test_periodic();
    test_causes_throughput_sample();
    test_straggler_mirror();
    test_arrival_order();
    test_gil();
    test_frequent_evaluation();
    test_slow_rank_own_report();
    test_device_time();
    json_decref(test_info);
    sqlite3_close(db);
    return check_summary();
}
