/*
 * test_report_compile.c - the torch.compile rule (src/report/compile.c) on fixture tables:
 * recompiles every step (the primary finding, with the guard and the remedy), four sizes in
 * rotation (compile time at the start, no steady-state finding), the recompile limit reached,
 * a graph break, a healthy compiled model (no problem), and a job without compiles (silent).
 */
#include "report_fixture.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

static const char COMPILES_TABLE[] =
    "CREATE TABLE python.compiles (step INTEGER, compile_id TEXT, kind TEXT, function TEXT,"
    " file TEXT, line INTEGER, reason TEXT, graph_breaks INTEGER, break_reason TEXT,"
    " duration REAL, dynamo REAL, aot_autograd REAL, inductor REAL, rank INTEGER)";

static void compile_row(int step, int attempt, const char *kind, const char *reason, int breaks)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "INSERT INTO python.compiles VALUES (%d, '0/%d', '%s', 'forward', '/w/model.py', 26,"
             " '%s', %d, '%s', 0.8, 0.7, 0.1, 0, 0)",
             step, attempt, kind, reason, breaks, breaks ? "Unsupported Tensor.item() call" : "");
    exec(sql);
}

/* 30 steps of 10 ms; `slow` compiles steps pay 1 s more. */
static void steps(int n)
{
    for (int s = 0; s < n; s++) add_step(s, 0.004, 0.005, 0.0005, 0.0102, 300);
}

static void test_recompile_every_step(void)
{
    fresh(1);
    exec(COMPILES_TABLE);
    steps(30);
    compile_row(0, 0, "compile", "", 0);
    for (int s = 1; s < 30; s++)
        compile_row(s, s, "recompile", "0/0: tensor ''x'' size mismatch at index 0. expected 4, actual 5", 0);
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "recompiles", "recompiles every step: the primary finding");
    CHECK(strstr(claim(doc, "recompiles"), "size mismatch at index 0") != NULL,
          "the claim says the guard that failed: %s", claim(doc, "recompiles"));
    CHECK(strstr(claim(doc, "recompiles"), "forward (model.py:26)") != NULL, "and the frame");
    CHECK(strstr(advice(doc, "recompiles"), "dynamic=True") &&
              strstr(advice(doc, "recompiles"), "mark_dynamic") && strstr(advice(doc, "recompiles"), "buckets"),
          "the remedy: dynamic shapes, mark_dynamic, buckets");
    CHECK(finding(doc, "compile_time") == NULL, "not called compile time at the start");
    CHECK_STR(severity(doc, "compiled_model"), "info", "the compiled model's module rows are explained");
    json_decref(doc);
}

static void test_rotation_is_compile_time_at_start(void)
{
    fresh(1);
    exec(COMPILES_TABLE);
    steps(30);
    compile_row(0, 0, "compile", "", 0);
    for (int s = 1; s < 4; s++) compile_row(s, s, "recompile", "0/0: tensor ''x'' size mismatch at index 0", 0);
    json_t *doc = build(0, NULL);
    CHECK(finding(doc, "recompiles") == NULL, "rotation of four sizes: no steady-state recompiles");
    CHECK_STR(severity(doc, "compile_time"), "info", "rotation: compile time at the start, named");
    CHECK(strstr(claim(doc, "compile_time"), "steps 0..3") != NULL, "with its steps: %s",
          claim(doc, "compile_time"));
    json_decref(doc);
}

static void test_limit_and_graph_break(void)
{
    fresh(1);
    exec(COMPILES_TABLE);
    steps(30);
    compile_row(0, 0, "compile", "", 1);
    for (int s = 1; s < 4; s++) compile_row(s, s, "recompile", "0/0: tensor ''x'' size mismatch", 1);
    compile_row(4, 4, "limit", "Dynamo recompile limit exceeded", 0);
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "recompile_limit", "the limit reached: the primary finding");
    CHECK(strstr(claim(doc, "recompile_limit"), "runs eagerly") != NULL, "the frame runs eagerly");
    CHECK_STR(severity(doc, "graph_breaks"), "warning", "a graph break: a finding");
    CHECK(finding_num(doc, "graph_breaks", "graph_breaks") == 1, "counted once per frame");
    CHECK(strstr(claim(doc, "graph_breaks"), "Tensor.item()") != NULL, "with its reason");
    json_decref(doc);
}

static void test_healthy_and_absent(void)
{
    fresh(1);
    exec(COMPILES_TABLE);
    steps(30);
    compile_row(0, 0, "compile", "", 0);
    json_t *doc = build(0, NULL);
    CHECK(problems(doc) == 0, "a healthy compiled model: no problem (%s)", primary(doc));
    CHECK_STR(severity(doc, "compile_time"), "info", "its one compile named as compile time");
    json_decref(doc);
    fresh(1);
    steps(30);
    doc = build(0, NULL);
    CHECK(finding(doc, "compiled_model") == NULL && finding(doc, "compile_time") == NULL,
          "no python.compiles table: the rule is silent");
    json_decref(doc);
}

/* python.steps with compile_time and python.memory's step rows: every 5th step compiles (1 s
 * more) and memory grows 20 MB in it, flat otherwise. compiled: whether compile_time says so. */
static void compiling_steps(int compiled)
{
    exec("CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL, forward REAL,"
         " backward REAL, optimizer REAL, collectives REAL, other REAL, samples INTEGER,"
         " syncs INTEGER, rank INTEGER, compile_time REAL)");
    exec("CREATE TABLE python.memory (step INTEGER, phase TEXT, device TEXT, allocated_mb REAL,"
         " max_allocated_mb REAL, reserved_mb REAL, rss_mb REAL, limit_mb REAL, rank INTEGER)");
    double mem = 300;
    for (int s = 0; s < 40; s++) {
        int compiles = s % 5 == 0;
        double extra = compiles ? 1.0 : 0, wall = 0.0102 + extra;
        if (compiles && s > 0) mem += 20;
        char sql[512];
        add_step(s, 0.004 + extra, 0.005, 0.0005, wall, mem);
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.steps VALUES (%d, %f, 0.0001, %f, 0.005, 0.0005, 0, 0.0006,"
                 " 64, 6, 0, %f); INSERT INTO python.memory VALUES (%d, 'step', 'cpu', %f, %f,"
                 " NULL, %f, 24000, 0)",
                 s, wall, 0.004 + extra, compiled && compiles ? extra : 0, s, mem, mem, mem);
        exec(sql);
        if (compiles)
            compile_row(s, s / 5, s ? "recompile" : "compile", s ? "0/0: tensor ''x'' size mismatch" : "", 0);
    }
}

static void test_compiling_steps_are_compiles(void)
{
    fresh(1);
    exec(COMPILES_TABLE);
    compiling_steps(1);
    json_t *doc = build(0, NULL);
    CHECK_STR(primary(doc), "recompiles", "a recompile every 5 steps: the primary finding");
    const char *mem = severity(doc, "memory_growth");
    CHECK(mem && (!strcmp(mem, "ok") || !strcmp(mem, "info")),
          "memory that grows only in compiling steps is no leak: %s %s", mem ? mem : "-",
          claim(doc, "memory_growth"));
    CHECK(strstr(claim(doc, "memory_growth"), "that torch.compile compiled in left out") != NULL,
          "the fit says it left the compiling steps out: %s", claim(doc, "memory_growth"));
    CHECK(finding_num(doc, "memory_growth", "compile_growth_mb") >= 100,
          "with the memory grown in them: %g", finding_num(doc, "memory_growth", "compile_growth_mb"));
    CHECK_STR(severity(doc, "outlier_steps"), "info", "slow steps that compiled: info");
    CHECK(strstr(claim(doc, "outlier_steps"), "torch.compile compiled in") != NULL,
          "named as compiles: %s", claim(doc, "outlier_steps"));
    CHECK(strstr(claim(doc, "first_iteration"), "torch.compile compiled for") != NULL,
          "the warm-up that compiled says so: %s", claim(doc, "first_iteration"));
    json_decref(doc);
    /* the same steps and memory without compile_time: the growth is read as memory growth */
    fresh(1);
    exec(COMPILES_TABLE);
    compiling_steps(0);
    doc = build(0, NULL);
    mem = severity(doc, "memory_growth");
    CHECK(mem && (!strcmp(mem, "warning") || !strcmp(mem, "critical") || !strcmp(mem, "info")) &&
              strstr(claim(doc, "memory_growth"), "left out") == NULL,
          "without compile_time the growth counts: %s %s", mem ? mem : "-", claim(doc, "memory_growth"));
    CHECK(strstr(claim(doc, "outlier_steps") ? claim(doc, "outlier_steps") : "", "torch.compile") == NULL,
          "and slow steps are not called compiles");
    json_decref(doc);
}

int main(void)
{
    test_recompile_every_step();
    test_rotation_is_compile_time_at_start();
    test_limit_and_graph_break();
    test_healthy_and_absent();
    test_compiling_steps_are_compiles();
    json_decref(test_info);
    sqlite3_close(db);
    return check_summary();
}
