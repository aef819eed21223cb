/*
 * test_report_inference.c - the report of a process that generates and does not train
 * (src/report/inference.c; docs/report.md, "Inference"): its figures from python.generations and
 * python.tokens planted with known values, its words (none of training's), the use_cache=False
 * finding, and a training job that also generates keeping the training report.
 */
#include "report_fixture.h"

#include <math.h>

/* `calls` generations of 4 sequences, 10 prompt tokens, 8 new tokens each: a prefill of 5 ms and
 * decode forwards of 2 ms (cache) or 5 ms growing by 1 ms a position (no cache), with 0.5 ms of
 * host work between forwards; python.steps has one step per generation, no optimizer time
 * (train: the steps have optimizer and backward time). */
static void plant(int calls, int cache, int train)
{
    fresh(1);
    exec("CREATE TABLE python.generations (id INTEGER, step INTEGER, thread_id INTEGER, start REAL,"
         " wall REAL, batch_size INTEGER, prompt_tokens INTEGER, new_tokens INTEGER, forwards INTEGER,"
         " prefill REAL, ttft REAL, decode REAL, kv_cache_bytes INTEGER, cache INTEGER, grad INTEGER,"
         " rank INTEGER);"
         "CREATE TABLE python.tokens (generation INTEGER, idx INTEGER, kind TEXT, position INTEGER,"
         " forward REAL, latency REAL, thread_id INTEGER, rank INTEGER);"
         "CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL, forward REAL, backward REAL,"
         " optimizer REAL, collectives REAL, other REAL, samples INTEGER, syncs INTEGER, rank INTEGER,"
         " batches INTEGER)");
    char sql[512];
    for (int g = 1; g <= calls; g++) {
        double t = 0.0005 + 0.005, decode = 0;
        snprintf(sql, sizeof sql, "INSERT INTO python.tokens VALUES (%d, 0, 'prefill', 10, 0.005, %.6f, 7, 0)", g, t);
        exec(sql);
        for (int i = 1; i < 8; i++) {
            double fwd = cache ? 0.002 : 0.005 + 0.001 * i;
            decode += fwd;
            t += fwd + 0.0005;
            snprintf(sql, sizeof sql, "INSERT INTO python.tokens VALUES (%d, %d, 'decode', %d, %.6f, %.6f, 7, 0)", g,
                     i, 10 + i, fwd, fwd + 0.0005);
            exec(sql);
        }
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.generations VALUES (%d, %d, 7, 0, %.6f, 4, 10, 8, 8, 0.005, 0.0055, %.6f, %s, %d,"
                 " 0, 0)",
                 g, g - 1, t + 0.001, decode, cache ? "73728" : "NULL", cache);
        exec(sql);
        snprintf(sql, sizeof sql, "INSERT INTO python.steps VALUES (%d, %.6f, 0, %.6f, %s, 0, 0.001, 0, 0, 0, 0)",
                 g - 1, t + 0.001, 0.005 + decode, train ? "0.01, 0.002" : "0, 0");
        exec(sql);
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.torch_trace VALUES (%d, 0, 'GPT2LMHeadModel', 'GPT2LMHeadModel', 'forward',"
                 " %.6f, %.6f, 0, 0, 0, 0, 1, 0)",
                 g - 1, 0.005 + decode, 0.005 + decode);
        exec(sql);
    }
}

/* The text of the report of doc. Malloc'ed. */
static char *rendered(json_t *doc)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f) return NULL;
    pb_report_render(f, doc);
    fclose(f);
    return text;
}

static void test_healthy_generations(void)
{
    plant(6, 1, 0);
    json_t *doc = build(0, NULL);
    CHECK(doc != NULL, "a report of a process that only generates");
    if (!doc) return;
    CHECK_STR(json_string_value(json_object_get(doc, "workload")), "inference", "it is an inference report");
    json_t *s = json_object_get(doc, "inference");
    CHECK(json_integer_value(json_object_get(s, "generations")) == 6, "6 generations");
    CHECK(json_integer_value(json_object_get(s, "sequences")) == 24, "of 4 sequences each");
    CHECK(json_integer_value(json_object_get(s, "new_tokens")) == 6 * 4 * 8, "8 new tokens a sequence");
    double wall = 0.0055 + 7 * 0.0025 + 0.001;
    CHECK(fabs(json_real_value(json_object_get(s, "tokens_per_s")) - 32 / wall) < 0.01, "tokens/s: new tokens over generation time");
    CHECK(near(json_real_value(json_object_get(s, "ttft_p50_s")), 0.0055), "time to first token p50");
    CHECK(near(json_real_value(json_object_get(s, "tpot_p50_s")), (wall - 0.0055) / 7), "time per output token p50");
    CHECK(near(json_real_value(json_object_get(s, "decode_forward_p50_s")), 0.002), "decode forward p50");
    CHECK(near(json_real_value(json_object_get(s, "itl_p99_s")), 0.0025), "inter-token latency p99");
    CHECK(json_integer_value(json_object_get(s, "kv_cache_last_bytes")) == 73728, "KV-cache bytes of the last generation");
    CHECK_STR(primary(doc), "(none)", "a healthy generate() loop has no finding");
    CHECK(json_is_null(json_object_get(doc, "baseline")), "no training baseline");
    CHECK(json_array_size(json_object_get(doc, "missing")) == 0, "no training table listed as missing");
    char *text = rendered(doc);
    CHECK(text && strstr(text, "6 generations of 24 sequences on 1 thread: 192 new tokens"), "the text says the generations");
    CHECK(text && strstr(text, "time to first token (ms): p50 5.500"), "and the time to first token");
    static const char *const training_words[] = {"optimizer", "backward to match", "training thread", "samples/s",
                                                 "step time", NULL};
    for (int i = 0; training_words[i]; i++)
        CHECK(text && !strstr(text, training_words[i]), "no \"%s\" in an inference report", training_words[i]);
    free(text);
    json_decref(doc);
}

static void test_no_kv_cache(void)
{
    plant(4, 0, 0);
    json_t *doc = build(0, NULL);
    if (!doc) return;
    CHECK_STR(primary(doc), "no_kv_cache", "use_cache=False is the primary finding");
    CHECK(near(finding_num(doc, "no_kv_cache", "last_over_first"), 0.012 / 0.006), "decode forwards grow with position");
    CHECK(json_is_null(json_object_get(json_object_get(doc, "inference"), "kv_cache_last_bytes")), "no cache bytes");
    char *text = rendered(doc);
    CHECK(text && strstr(text, "primary finding: 4 of 4 generations ran without a KV cache (use_cache=False)"),
          "the report says so first");
    free(text);
    json_decref(doc);
}

static void test_training_that_generates(void)
{
    plant(6, 1, 1);
    json_t *doc = build(0, NULL);
    if (!doc) return;
    CHECK(json_object_get(doc, "workload") == NULL, "a training job that generates keeps the training report");
    CHECK(json_is_object(json_object_get(doc, "baseline")), "with its baseline");
    json_decref(doc);
}

int main(void)
{
    test_healthy_generations();
    test_no_kv_cache();
    test_training_that_generates();
    json_decref(test_info);
    sqlite3_close(db);
    return check_summary();
}
