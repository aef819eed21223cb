/*
 * inference.c - the report of a process that generates and does not train (docs/report.md,
 * "Inference"): the "inference" section (generations, tokens/s, time to first token, time per
 * output token, prefill and decode forwards, KV-cache bytes) from python.generations and
 * python.tokens, and the findings about generation.
 *
 * A process is an inference process when python.generations or python.requests (serving.c) has
 * rows and python.steps shows no optimizer and no backward time: a training loop that generates now and then (an evaluation,
 * rollouts) keeps the training report. The rule reads only through the toolkit's queries.
 */
#include "rules.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GENERATIONS 16384 /* python.generations' ring */

/* Sets section[name] to the p-th percentile (seconds) of key over rows; NaN (null) without rows. */
static void percentiles(json_t *section, json_t *rows, const char *key, const char *const *names,
                        const double *ps, size_t count)
{
    size_t n = 0;
    double *v = pb__report_sorted_column(rows, key, &n);
    for (size_t i = 0; i < count; i++)
        json_object_set_new(section, names[i], pb__report_real(v && n ? pb__report_percentile(v, n, ps[i]) : NAN));
    free(v);
}

static long long count_where(pb__report *r, const char *sql)
{
    char *error = NULL;
    json_t *rows = pb__report_try(r, sql, &error);
    free(error);
    long long n = rows && json_array_size(rows) == 1 ? (long long)pb__report_num(json_array_get(rows, 0), "n", NULL) : -1;
    json_decref(rows);
    return n;
}

int pb__report_is_inference(pb__report *r)
{
    if (count_where(r, "SELECT count(*) AS n FROM python.generations") <= 0 &&
        count_where(r, "SELECT count(*) AS n FROM python.requests") <= 0)
        return 0;
    long long trained = count_where(r, "SELECT count(*) AS n FROM python.steps WHERE optimizer > 0 OR backward > 0");
    return trained <= 0; /* no python.steps (an older agent) reads as not trained */
}

/* The finding of a generation run without a KV cache (use_cache=False). */
static void no_cache(pb__report *r, json_t *section)
{
    static const char *sql =
        "SELECT t.idx, count(*) AS forwards, avg(t.forward) AS avg_forward_s FROM python.tokens t "
        "JOIN python.generations g ON g.id = t.generation WHERE g.cache = 0 GROUP BY t.idx ORDER BY t.idx";
    long long without = count_where(r, "SELECT count(*) AS n FROM python.generations WHERE cache = 0 AND forwards > 1");
    if (without <= 0) return;
    json_t *rows = pb__report_run(r, sql);
    size_t n = json_array_size(rows);
    if (n < 3) {
        json_decref(rows);
        return;
    }
    double prefill = pb__report_num(json_array_get(rows, 0), "avg_forward_s", NULL);
    double first = pb__report_num(json_array_get(rows, 1), "avg_forward_s", NULL);
    double last = pb__report_num(json_array_get(rows, n - 1), "avg_forward_s", NULL);
    long long last_idx = (long long)pb__report_num(json_array_get(rows, n - 1), "idx", NULL);
    json_decref(rows);
    long long all = (long long)json_integer_value(json_object_get(section, "generations"));
    json_t *numbers = json_object();
    json_object_set_new(numbers, "generations_without_cache", json_integer(without));
    json_object_set_new(numbers, "prefill_ms", pb__report_real(prefill * 1e3));
    json_object_set_new(numbers, "first_decode_ms", pb__report_real(first * 1e3));
    json_object_set_new(numbers, "last_decode_ms", pb__report_real(last * 1e3));
    json_object_set_new(numbers, "last_over_first", pb__report_real(first > 0 ? last / first : NAN));
    pb__report_finding(
        r, "no_kv_cache", "inference", "warning",
        pb__report_textf("%lld of %lld generation%s ran without a KV cache (use_cache=False): every decode forward "
                         "recomputes the whole sequence, %.3f ms for the first new token's and %.3f ms by the %lld-th "
                         "(%.2fx), against a prefill of %.3f ms",
                         without, all, all == 1 ? "" : "s", first * 1e3, last * 1e3, last_idx,
                         first > 0 ? last / first : 0.0, prefill * 1e3),
        numbers, sql,
        "Pass use_cache=True to generate() (its default) or leave config.use_cache on: decode forwards then "
        "take one new token each, reading the rest from the cache");
}

void pb__report_inference(pb__report *r)
{
    if (count_where(r, "SELECT count(*) AS n FROM python.generations") <= 0) { /* a server without generate() */
        json_object_set_new(r->doc, "inference", json_null());
        return;
    }
    static const char *gen_sql =
        "SELECT id, thread_id, wall, batch_size, prompt_tokens, new_tokens, forwards, prefill, ttft, decode, "
        "kv_cache_bytes, cache, CASE WHEN new_tokens > 1 THEN (wall - ttft) / (new_tokens - 1) END AS tpot "
        "FROM python.generations ORDER BY id";
    static const char *tok_sql = "SELECT forward, latency FROM python.tokens WHERE kind = 'decode'";
    json_t *gens = pb__report_run(r, gen_sql);
    json_t *toks = pb__report_run(r, tok_sql);
    json_t *s = json_object();
    size_t i;
    json_t *row;
    double wall = 0, tokens = 0, sequences = 0, prefill = 0;
    long long threads_seen[8], nthreads = 0, max_kv = -1, last_kv = -1;
    json_array_foreach(gens, i, row) {
        int ok;
        double batch = pb__report_num(row, "batch_size", &ok);
        double made = ok ? pb__report_num(row, "new_tokens", &ok) : 0;
        wall += pb__report_num(row, "wall", NULL);
        prefill += pb__report_num(row, "prefill", NULL);
        if (ok) {
            tokens += batch * made;
            sequences += batch;
        }
        long long kv = (long long)pb__report_num(row, "kv_cache_bytes", &ok);
        last_kv = ok ? kv : -1;
        if (ok && kv > max_kv) max_kv = kv;
        long long t = (long long)pb__report_num(row, "thread_id", NULL);
        int known = 0;
        for (long long k = 0; k < nthreads; k++) known |= threads_seen[k] == t;
        if (!known && nthreads < 8) threads_seen[nthreads++] = t;
    }
    size_t n = json_array_size(gens);
    json_object_set_new(s, "generations", json_integer((json_int_t)n));
    json_object_set_new(s, "sequences", json_integer((json_int_t)sequences));
    json_object_set_new(s, "new_tokens", json_integer((json_int_t)tokens));
    json_object_set_new(s, "threads", json_integer(nthreads));
    json_object_set_new(s, "generating_s", pb__report_real(wall));
    json_object_set_new(s, "tokens_per_s", pb__report_real(wall > 0 && tokens > 0 ? tokens / wall : NAN));
    json_object_set_new(s, "prefill_share", pb__report_real(wall > 0 ? prefill / wall : NAN));
    static const char *const ttft_names[] = {"ttft_p50_s", "ttft_p95_s"}, *const tpot_names[] = {"tpot_p50_s", "tpot_p99_s"};
    static const char *const prefill_names[] = {"prefill_p50_s"}, *const decode_names[] = {"decode_forward_p50_s", "decode_forward_p99_s"};
    static const char *const itl_names[] = {"itl_p50_s", "itl_p99_s"};
    static const double p50_95[] = {50, 95}, p50_99[] = {50, 99}, p50[] = {50};
    percentiles(s, gens, "ttft", ttft_names, p50_95, 2);
    percentiles(s, gens, "tpot", tpot_names, p50_99, 2);
    percentiles(s, gens, "prefill", prefill_names, p50, 1);
    percentiles(s, toks, "forward", decode_names, p50_99, 2);
    percentiles(s, toks, "latency", itl_names, p50_99, 2);
    json_object_set_new(s, "decode_forwards", json_integer((json_int_t)json_array_size(toks)));
    json_object_set_new(s, "kv_cache_last_bytes", last_kv >= 0 ? json_integer(last_kv) : json_null());
    json_object_set_new(s, "kv_cache_max_bytes", max_kv >= 0 ? json_integer(max_kv) : json_null());
    json_object_set_new(s, "truncated", json_boolean(n >= MAX_GENERATIONS));
    char sql[SQL_MAX];
    pb__report_sqlf(sql, "%s", gen_sql);
    json_object_set_new(s, "sql", json_string(sql));
    json_object_set_new(r->doc, "inference", s);
    json_decref(gens);
    json_decref(toks);
    no_cache(r, s);
    pb__report_suggest(r, "each generation, slowest time to first token first",
                       "probing %s query \"SELECT id, batch_size, prompt_tokens, new_tokens, ttft, prefill, decode, "
                       "kv_cache_bytes FROM python.generations ORDER BY ttft DESC LIMIT 10\"",
                       pb__report_target(r));
    pb__report_suggest(r, "decode latency by position (flat with a KV cache)",
                       "probing %s query \"SELECT position, count(*) AS n, avg(latency) AS itl_s, avg(forward) AS "
                       "forward_s FROM python.tokens GROUP BY position ORDER BY position\"",
                       pb__report_target(r));
}
