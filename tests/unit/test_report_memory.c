/*
 * test_report_memory.c - the memory section (leak projection included) and the AMP hardware
 * checks of src/report on synthetic table contents (the fixture: report_fixture.h). Their GPU
 * branches (CUDA allocator figures, compute capability, fp16/bf16 layers on cuda) can only be
 * exercised here, on synthetic rows, on a machine without a GPU.
 */
#include "check.h"
#include "report_fixture.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

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

/* Autocast around the first blocks only (issue 50): a third of the GEMM work in bfloat16, the
 * rest named; the whole model in bfloat16: ok. */
static void test_amp_coverage(void)
{
    amp_run("", "", -1);
    exec(LAYERS_TABLE);
    layer("blocks.0.fc", "Linear", 512, 512, 64, "bfloat16", "cpu", 0.001);
    layer("blocks.1.fc", "Linear", 512, 512, 64, "bfloat16", "cpu", 0.001);
    layer("blocks.2.fc", "Linear", 512, 512, 64, "float32", "cpu", 0.001);
    layer("blocks.3.fc", "Linear", 512, 512, 64, "float32", "cpu", 0.001);
    layer("head", "Linear", 512, 1024, 64, "float32", "cpu", 0.001);
    json_t *doc = build(0, NULL);
    CHECK_STR(severity(doc, "amp_coverage"), "warning", "partial autocast: a warning");
    CHECK(strstr(claim(doc, "amp_coverage"), "33% of the matrix-multiply work runs in bfloat16 "
                                             "(2 of 5 layers); the rest in full precision, the "
                                             "largest: head (float32), blocks.2.fc") != NULL,
          "partial autocast: the share and the layers outside it");
    json_decref(doc);

    amp_run("", "", -1);
    exec(LAYERS_TABLE);
    layer("blocks.0.fc", "Linear", 512, 512, 64, "bfloat16", "cpu", 0.001);
    layer("head", "Linear", 512, 1024, 64, "bfloat16", "cpu", 0.001);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "amp_coverage"), "ok", "whole model in bf16: ok");
    json_decref(doc);

    amp_run("", "", -1);
    exec(LAYERS_TABLE);
    layer("head", "Linear", 512, 1024, 64, "float32", "cpu", 0.001);
    doc = build(0, NULL);
    CHECK(finding(doc, "amp_coverage") == NULL, "no reduced precision: no coverage finding");
    json_decref(doc);
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

    fresh_now(); /* flat, one jump of 600 MB half way, flat again: no line fits, no "ok" */
    for (int s = 0; s < 300; s++)
        step_now(s, 22, 0.1, 6, 9, 2, 0, 32, 1, "cpu", 2000 + (s < 150 ? 0 : 600) + (s * 7 % 5) * 0.4,
                 24000);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "memory_growth"), "info", "one 600 MB jump: info, not ok");
    CHECK(strstr(claim(doc, "memory_growth"), "but not steadily") != NULL,
          "a jump: said to be growth, not a steady one");
    CHECK(finding_num(doc, "memory_growth", "growth_mb") > 590, "a jump: its size in the numbers");
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

    /* A climb that slows (issue 50: a healthy Trainer run's pools filling, read as a leak at
     * step 200): +0.5 MB a step for 40 steps, then +0.1: one line fits the whole (r² > 0.9),
     * yet the last third climbs a fifth as fast: not steady yet, no projection. */
    fresh_now();
    for (int s = 0; s < 66; s++)
        step_now(s, 100, 0.1, 30, 40, 5, 0, 32, 1, "cpu",
                 2000 + (s < 40 ? 0.5 * s : 20 + 0.1 * (s - 40)), 5160);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "memory_growth"), "info", "a slowing climb: info");
    CHECK(strstr(claim(doc, "memory_growth"), "but the climb is slowing: +0.1 MB/step over the "
                                              "last third") != NULL,
          "a slowing climb: said so, with the last third's pace");
    json_decref(doc);

    /* The same climb with the limit hours away (issue 50: a DDP rank's sub-threshold climb,
     * ~50 h from the limit, outranked the straggler; here ~16 h): under the leak threshold by
     * its own numbers, so info, and never the primary finding. */
    fresh_now();
    for (int s = 0; s < 36; s++)
        step_now(s, 100, 0.1, 30, 40, 5, 0, 32, 1, "cpu", 2000 + 0.35 * s, 200000);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "memory_growth"), "info", "sub-threshold climb, limit far: info");
    CHECK(strstr(claim(doc, "memory_growth"), "if it goes on, out of memory in ~") != NULL,
          "sub-threshold climb: the projection is still given");
    CHECK(strcmp(primary(doc), "memory_growth") != 0, "sub-threshold climb: not primary");
    json_decref(doc);

    /* The same pace seen over a handful of steps (a report --last 5 of a healthy short run
     * whose RSS was still filling, +3.6 MB a step, r² 0.91, failed CI as a warning): a line
     * through so few points is no projection to warn on: too few steps to tell. */
    fresh_now();
    for (int s = 0; s < 9; s++)
        step_now(s, 100, 0.1, 30, 40, 5, 0, 32, 1, "cpu", 2000 + 1.6 * s + (s % 2) * 0.4, 5160);
    doc = build(0, NULL);
    CHECK_STR(severity(doc, "memory_growth"), "info", "a climb over a few steps: info");
    CHECK(strstr(claim(doc, "memory_growth"), "too few steps to tell") != NULL,
          "a climb over a few steps: too few steps to tell");
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

int main(void)
{
    test_leak_projection();
    test_memory_cpu_adam();
    test_memory_missing();
    test_memory_cuda();
    test_amp_coverage();
    test_amp_bf16();
    test_tensor_cores();
    json_decref(test_info);
    sqlite3_close(db);
    return check_summary();
}
