/*
 * serving.c - the report of a process that serves requests (docs/report.md, "Inference",
 * "Requests"): the "requests" section (requests/s, latency percentiles, requests in flight, time
 * in the model against outside it) from python.requests, and its findings:
 *   - serialised_requests: many requests in flight, never more than one in the model at once,
 *     where independent requests would have met there many times: they are let in one at a time;
 *   - host_work_per_request: most of each request is spent outside the model, on its thread.
 * The first that holds is the finding; the second is not looked for when the first holds (the
 * wait for the model is time outside it too). The rule reads only through the toolkit's queries.
 */
#include "rules.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REQUESTS 16384    /* python.requests' ring */
#define MIN_MODEL_REQUESTS 8  /* requests that ran the model, for either finding */
#define SERIAL_IN_FLIGHT 1.5  /* mean requests in flight from which one at a time is a finding */
#define SERIAL_EXPECTED 5.0   /* expected meetings in the model (independent requests) at least */
#define HOST_SHARE 0.40       /* outside the model over latency (medians) from which it is a finding */
#define HOST_MIN_S 0.002      /* ... and at least this much outside the model per request */

static double p(const double *v, size_t n, double pct) { return n ? pb__report_percentile(v, n, pct) : NAN; }

/* The p50 of `key` over rows, NaN without numbers. */
static double median_of(json_t *rows, const char *key)
{
    size_t n = 0;
    double *v = pb__report_sorted_column(rows, key, &n);
    double m = v ? p(v, n, 50) : NAN;
    free(v);
    return m;
}

void pb__report_requests(pb__report *r)
{
    static const char *sql =
        "SELECT id, server, method, path, status, arrival, wall, model, outside, first_forward, forwards, "
        "generations, tokens, in_flight, model_concurrency, thread_id FROM python.requests ORDER BY id";
    static const char *model_sql =
        "SELECT id, wall, model, outside, first_forward, forwards, generations, in_flight, model_concurrency "
        "FROM python.requests WHERE forwards > 0 OR generations > 0 ORDER BY id";
    char *error = NULL;
    json_t *rows = pb__report_try(r, sql, &error);
    free(error);
    if (!rows || !json_array_size(rows)) {
        json_decref(rows);
        json_object_set_new(r->doc, "requests", json_null());
        return;
    }
    json_t *model_rows = pb__report_run(r, model_sql);
    json_t *s = json_object();
    size_t n = json_array_size(rows), i, m = json_array_size(model_rows);
    json_t *row;
    double first = INFINITY, last = -INFINITY, walls = 0, tokens = 0;
    long long ok = 0, client = 0, server = 0, unknown = 0, in_flight_max = 0, concurrency_max = 0, nthreads = 0;
    long long threads[64];
    int have_tokens = 0, http = 0, asgi = 0;
    json_array_foreach(rows, i, row) {
        int known;
        double arrival = pb__report_num(row, "arrival", NULL), wall = pb__report_num(row, "wall", NULL);
        if (arrival < first) first = arrival;
        if (arrival + wall > last) last = arrival + wall;
        walls += wall;
        double status = pb__report_num(row, "status", &known);
        if (!known) unknown++;
        else if (status >= 500) server++;
        else if (status >= 400) client++;
        else ok++;
        double t = pb__report_num(row, "tokens", &known);
        if (known) tokens += t, have_tokens = 1;
        long long f = (long long)pb__report_num(row, "in_flight", NULL);
        if (f > in_flight_max) in_flight_max = f;
        const char *kind = json_string_value(json_object_get(row, "server"));
        if (kind && !strcmp(kind, "asgi")) asgi = 1;
        else http = 1;
        long long tid = (long long)pb__report_num(row, "thread_id", NULL);
        int seen = 0;
        for (long long k = 0; k < nthreads; k++) seen |= threads[k] == tid;
        if (!seen && nthreads < 64) threads[nthreads++] = tid;
    }
    double span = last > first ? last - first : NAN;
    double in_flight_mean = span > 0 ? walls / span : NAN;
    /* The requests that ran the model: their split, and how often they would have met in it. */
    double model_sum = 0, model_walls = 0, share_sum = 0, entries = 0;
    json_array_foreach(model_rows, i, row) {
        double wall = pb__report_num(row, "wall", NULL), model = pb__report_num(row, "model", NULL);
        long long c = (long long)pb__report_num(row, "model_concurrency", NULL);
        if (c > concurrency_max) concurrency_max = c;
        model_sum += model;
        model_walls += wall;
        if (wall > 0) share_sum += model / wall;
        double gens = pb__report_num(row, "generations", NULL), fwd = pb__report_num(row, "forwards", NULL);
        entries += gens > 0 ? gens : fwd; /* a generate() call is one stay in the model, its forwards inside it */
    }
    double latency_p50 = NAN, latency_p95 = NAN, latency_p99 = NAN;
    {
        size_t k = 0;
        double *v = pb__report_sorted_column(rows, "wall", &k);
        if (v) latency_p50 = p(v, k, 50), latency_p95 = p(v, k, 95), latency_p99 = p(v, k, 99);
        free(v);
    }
    double model_p50 = median_of(model_rows, "model"), outside_p50 = median_of(model_rows, "outside");
    double first_p50 = median_of(model_rows, "first_forward"), model_latency_p50 = median_of(model_rows, "wall");
    double mean_model_share = m ? share_sum / (double)m : NAN;
    /* Independent requests, mean_model_share of their time in the model, in_flight_mean at once:
     * each stay in the model finds another there with a chance of about (in flight - 1) x that
     * share; this many meetings would be expected over the recorded stays. */
    double expected = m && in_flight_mean > 1 ? entries * (in_flight_mean - 1) * mean_model_share : 0;

    json_object_set_new(s, "requests", json_integer((json_int_t)n));
    json_object_set_new(s, "model_requests", json_integer((json_int_t)m));
    json_object_set_new(s, "ok", json_integer(ok));
    json_object_set_new(s, "client_errors", json_integer(client));
    json_object_set_new(s, "server_errors", json_integer(server));
    json_object_set_new(s, "no_status", json_integer(unknown));
    json_object_set_new(s, "server", json_string(http && asgi ? "http.server and asgi" : asgi ? "asgi" : "http.server"));
    json_object_set_new(s, "threads", json_integer(nthreads));
    json_object_set_new(s, "span_s", pb__report_real(span));
    json_object_set_new(s, "requests_per_s", pb__report_real(span > 0 ? (double)n / span : NAN));
    json_object_set_new(s, "latency_p50_s", pb__report_real(latency_p50));
    json_object_set_new(s, "latency_p95_s", pb__report_real(latency_p95));
    json_object_set_new(s, "latency_p99_s", pb__report_real(latency_p99));
    json_object_set_new(s, "in_flight_max", json_integer(in_flight_max));
    json_object_set_new(s, "in_flight_mean", pb__report_real(in_flight_mean));
    json_object_set_new(s, "model_concurrency_max", json_integer(concurrency_max));
    json_object_set_new(s, "model_p50_s", pb__report_real(model_p50));
    json_object_set_new(s, "outside_p50_s", pb__report_real(outside_p50));
    json_object_set_new(s, "first_forward_p50_s", pb__report_real(first_p50));
    json_object_set_new(s, "model_share", pb__report_real(model_walls > 0 ? model_sum / model_walls : NAN));
    json_object_set_new(s, "tokens", have_tokens ? json_integer((json_int_t)tokens) : json_null());
    json_object_set_new(s, "tokens_per_s", pb__report_real(have_tokens && span > 0 ? tokens / span : NAN));
    json_object_set_new(s, "truncated", json_boolean(n >= MAX_REQUESTS));
    json_object_set_new(s, "sql", json_string(sql));
    json_object_set_new(r->doc, "requests", s);
    json_decref(rows);
    json_decref(model_rows);

    int serialised = m >= MIN_MODEL_REQUESTS && in_flight_mean >= SERIAL_IN_FLIGHT && concurrency_max <= 1 &&
                     expected >= SERIAL_EXPECTED;
    if (serialised) {
        double before = first_p50, wait = outside_p50;
        json_t *numbers = json_object();
        json_object_set_new(numbers, "in_flight_max", json_integer(in_flight_max));
        json_object_set_new(numbers, "in_flight_mean", pb__report_real(in_flight_mean));
        json_object_set_new(numbers, "model_concurrency_max", json_integer(concurrency_max));
        json_object_set_new(numbers, "expected_meetings", pb__report_real(expected));
        json_object_set_new(numbers, "outside_p50_ms", pb__report_real(wait * 1e3));
        json_object_set_new(numbers, "before_first_forward_p50_ms", pb__report_real(before * 1e3));
        json_object_set_new(numbers, "latency_p50_ms", pb__report_real(model_latency_p50 * 1e3));
        pb__report_finding(
            r, "serialised_requests", "serving", "warning",
            pb__report_textf("requests are served one at a time: up to %lld in flight (%.1f on average), never more than "
                             "one in the model at once (independent requests would have met there %.0f times); each "
                             "waits %.1f ms of its %.1f ms (p50) outside the model on its thread, %.1f ms of it before "
                             "its first forward: a lock, a queue or a single worker in front of the model",
                             in_flight_max, in_flight_mean, expected, wait * 1e3, model_latency_p50 * 1e3,
                             before * 1e3),
            numbers, model_sql,
            "Let the requests reach the model together: take the lock off the model call (forwards under no_grad in "
            "eval mode do not change the model) or gather the waiting requests into one batched forward; where one at "
            "a time is wanted, run more server processes");
    } else if (m >= MIN_MODEL_REQUESTS && outside_p50 >= HOST_MIN_S && model_latency_p50 > 0 &&
               outside_p50 >= HOST_SHARE * model_latency_p50) {
        double before = isfinite(first_p50) ? first_p50 : 0, after = outside_p50 - before;
        json_t *numbers = json_object();
        json_object_set_new(numbers, "outside_p50_ms", pb__report_real(outside_p50 * 1e3));
        json_object_set_new(numbers, "model_p50_ms", pb__report_real(model_p50 * 1e3));
        json_object_set_new(numbers, "latency_p50_ms", pb__report_real(model_latency_p50 * 1e3));
        json_object_set_new(numbers, "outside_share", pb__report_real(outside_p50 / model_latency_p50));
        json_object_set_new(numbers, "before_first_forward_p50_ms", pb__report_real(before * 1e3));
        pb__report_finding(
            r, "host_work_per_request", "serving", "warning",
            pb__report_textf("%.1f ms of each request outside the model, on the request's thread (p50: %.0f%% of its "
                             "%.1f ms, against %.1f ms in the model); %.1f ms of it before the first forward "
                             "(parsing, tokenising, pre-processing), %.1f ms after or between forwards",
                             outside_p50 * 1e3, 100 * outside_p50 / model_latency_p50, model_latency_p50 * 1e3,
                             model_p50 * 1e3, before * 1e3, after > 0 ? after * 1e3 : 0.0),
            numbers, model_sql,
            "Take the host work off the request's path: a compiled tokeniser (Hugging Face tokenizers) instead of a "
            "Python one, pre- and post-processing vectorised with torch or cached; python.requests has each "
            "request's split");
    }
    pb__report_suggest(r, "each request, slowest first",
                       "probing %s query \"SELECT id, method, path, status, wall, model, outside, first_forward, "
                       "in_flight, model_concurrency FROM python.requests ORDER BY wall DESC LIMIT 10\"",
                       pb__report_target(r));
}
