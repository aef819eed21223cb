/*
 * test_report_requests.c - the report of a process that serves requests (src/report/serving.c;
 * docs/report.md, "Inference", "Requests"): its figures from python.requests planted with known
 * values, its words (none of training's), the two findings each primary on its planted case (a
 * slow tokeniser: host work outside the model; a lock: one request at a time in the model), no
 * serialisation claimed without the evidence for it, and a training job that also serves keeping
 * the training report.
 */
#include "report_fixture.h"

#include <math.h>

typedef struct plan {
    int clients, per_client;  /* requests: clients x per_client, each client one after another */
    double model, outside;    /* seconds of each request in the model and outside it */
    double first_forward;     /* arrival to the first forward */
    int forwards, concurrency; /* root forwards of each, model_concurrency of each */
    int missing_every;        /* every n-th request a 404 that runs no forward (0: none) */
    int train;                /* python.steps has optimizer and backward time */
} plan;

/* Requests of `p`: client c's k-th request arrives at k x wall + c x wall / clients and takes
 * wall = model + outside; in_flight is the clients (after the first round). */
static void plant(const plan *p)
{
    fresh(1);
    exec("CREATE TABLE python.requests (id INTEGER, thread_id INTEGER, server TEXT, method TEXT, path TEXT,"
         " status INTEGER, arrival REAL, wall REAL, model REAL, outside REAL, first_forward REAL, forwards INTEGER,"
         " generations INTEGER, tokens INTEGER, cpu REAL, in_flight INTEGER, model_concurrency INTEGER,"
         " rank INTEGER);"
         "CREATE TABLE python.steps (step INTEGER, wall REAL, data_wait REAL, forward REAL, backward REAL,"
         " optimizer REAL, collectives REAL, other REAL, samples INTEGER, syncs INTEGER, rank INTEGER,"
         " batches INTEGER)");
    char sql[768];
    double wall = p->model + p->outside;
    int id = 1;
    for (int k = 0; k < p->per_client; k++)
        for (int c = 0; c < p->clients; c++, id++) {
            int missing = p->missing_every && id % p->missing_every == 0;
            double arrival = 1000 + k * wall + c * wall / p->clients;
            int in_flight = k == 0 ? c + 1 : p->clients;
            if (missing)
                snprintf(sql, sizeof sql,
                         "INSERT INTO python.requests VALUES (%d, %d, 'http.server', 'POST', '/missing', 404, %.6f,"
                         " 0.001, 0, 0.001, NULL, 0, 0, NULL, 0.001, %d, 0, 0)",
                         id, 100 + c, arrival, in_flight);
            else
                snprintf(sql, sizeof sql,
                         "INSERT INTO python.requests VALUES (%d, %d, 'http.server', 'POST', '/generate', 200, %.6f,"
                         " %.6f, %.6f, %.6f, %.6f, %d, 0, NULL, %.6f, %d, %d, 0)",
                         id, 100 + c, arrival, wall, p->model, p->outside, p->first_forward, p->forwards, wall / 2,
                         in_flight, p->concurrency);
            exec(sql);
        }
    for (int s = 0; s < 7; s++) { /* a warm-up before serving, or the training job's steps */
        snprintf(sql, sizeof sql, "INSERT INTO python.steps VALUES (%d, 0.01, 0, 0.004, %s, 0, 0, 0, 0, 0, 0)", s,
                 p->train ? "0.004, 0.002" : "0, 0");
        exec(sql);
        snprintf(sql, sizeof sql,
                 "INSERT INTO python.torch_trace VALUES (%d, 0, 'TinyLM', 'TinyLM', 'forward', 0.004, 0.004, 0, 0, 0,"
                 " 0, 1, 0)",
                 s);
        exec(sql);
    }
}

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

static const char *const training_words[] = {"optimizer", "backward to match", "training thread", "samples/s",
                                             "step time", NULL};

static void test_healthy_server(void)
{
    plan p = {.clients = 4, .per_client = 8, .model = 0.09, .outside = 0.01, .first_forward = 0.005, .forwards = 8,
              .concurrency = 4, .missing_every = 8};
    plant(&p);
    json_t *doc = build(0, NULL);
    CHECK(doc != NULL, "a report of a process that serves");
    if (!doc) return;
    CHECK_STR(json_string_value(json_object_get(doc, "workload")), "inference", "it is an inference report");
    CHECK(json_is_null(json_object_get(doc, "inference")), "no generations section without generations");
    json_t *s = json_object_get(doc, "requests");
    CHECK(json_integer_value(json_object_get(s, "requests")) == 32, "32 requests");
    CHECK(json_integer_value(json_object_get(s, "model_requests")) == 28, "28 of them ran the model");
    CHECK(json_integer_value(json_object_get(s, "client_errors")) == 4, "4 answered 404");
    /* the last to end is client 2's in round 7 (client 3's, id 32, is a 404 of 1 ms): at
     * 7 x 0.1 + 0.05 + 0.1 after the first arrival */
    double span = 0.85;
    CHECK(near(json_real_value(json_object_get(s, "span_s")), span), "the span: first arrival to last end");
    CHECK(near(json_real_value(json_object_get(s, "requests_per_s")), 32 / span), "requests/s over the span");
    CHECK(near(json_real_value(json_object_get(s, "latency_p99_s")), 0.1), "latency p99");
    CHECK(near(json_real_value(json_object_get(s, "in_flight_mean")), (28 * 0.1 + 4 * 0.001) / span),
          "mean in flight: the requests' time over the span");
    CHECK(json_integer_value(json_object_get(s, "in_flight_max")) == 4, "at most 4 in flight");
    CHECK(json_integer_value(json_object_get(s, "model_concurrency_max")) == 4, "4 in the model at once");
    CHECK(near(json_real_value(json_object_get(s, "model_p50_s")), 0.09), "in the model p50 (404s left out)");
    CHECK(near(json_real_value(json_object_get(s, "outside_p50_s")), 0.01), "outside p50");
    CHECK(near(json_real_value(json_object_get(s, "model_share")), 0.9), "share of their time in the model");
    CHECK_STR(primary(doc), "(none)", "a healthy server has no finding");
    CHECK(json_array_size(json_object_get(doc, "missing")) == 0, "no training table listed as missing");
    char *text = rendered(doc);
    CHECK(text && strstr(text, "1. Serving: requests (python.requests)"), "the serving section comes first");
    CHECK(text && strstr(text, "32 requests to http.server (28 answered 2xx/3xx, 4 4xx, 0 5xx, 0 without a status)"),
          "the text counts the requests by status");
    CHECK(text && strstr(text, "latency (ms): p50 100.000"), "and gives the latency");
    CHECK(text && strstr(text, "in flight: max 4, mean"), "and the requests in flight");
    CHECK(text && strstr(text, "2. Operation: what to look at next"), "then the operation");
    for (int i = 0; training_words[i]; i++)
        CHECK(text && !strstr(text, training_words[i]), "no \"%s\" in a server's report", training_words[i]);
    free(text);
    json_decref(doc);
}

static void test_slow_tokeniser(void)
{
    plan p = {.clients = 4, .per_client = 6, .model = 0.03, .outside = 0.07, .first_forward = 0.065, .forwards = 8,
              .concurrency = 2};
    plant(&p);
    json_t *doc = build(0, NULL);
    if (!doc) return;
    CHECK_STR(primary(doc), "host_work_per_request", "host work outside the model is the primary finding");
    CHECK(near(finding_num(doc, "host_work_per_request", "outside_p50_ms"), 70), "70 ms outside the model");
    CHECK(near(finding_num(doc, "host_work_per_request", "before_first_forward_p50_ms"), 65),
          "65 ms of it before the first forward");
    CHECK(finding(doc, "serialised_requests") == NULL, "requests met in the model: not served one at a time");
    const char *c = claim(doc, "host_work_per_request");
    CHECK(c && strstr(c, "70.0 ms of each request outside the model, on the request's thread (p50: 70% of its "
                         "100.0 ms, against 30.0 ms in the model)"),
          "the claim says how much, where and against what: %s", c ? c : "(none)");
    json_decref(doc);
}

static void test_lock_around_the_model(void)
{
    plan p = {.clients = 4, .per_client = 4, .model = 0.05, .outside = 0.35, .first_forward = 0.34, .forwards = 8,
              .concurrency = 1};
    plant(&p);
    json_t *doc = build(0, NULL);
    if (!doc) return;
    CHECK_STR(primary(doc), "serialised_requests", "one request at a time in the model is the primary finding");
    CHECK(finding(doc, "host_work_per_request") == NULL, "the wait is not reported again as host work");
    CHECK(finding_num(doc, "serialised_requests", "expected_meetings") >= 5, "chance is ruled out");
    const char *c = claim(doc, "serialised_requests");
    CHECK(c && strstr(c, "requests are served one at a time: up to 4 in flight") &&
              strstr(c, "never more than one in the model at once") && strstr(c, "340.0 ms of it before its first forward"),
          "the claim says one at a time, and where they wait: %s", c ? c : "(none)");
    char *text = rendered(doc);
    CHECK(text && strstr(text, "primary finding: requests are served one at a time"), "the report says so first");
    for (int i = 0; training_words[i]; i++)
        CHECK(text && !strstr(text, training_words[i]), "no \"%s\" in a server's report", training_words[i]);
    free(text);
    json_decref(doc);
}

/* One in the model at a time by chance: the model is 0.2% of each request, two in flight. */
static void test_no_serialisation_without_evidence(void)
{
    plan p = {.clients = 2, .per_client = 6, .model = 0.0002, .outside = 0.0998, .first_forward = 0.05, .forwards = 1,
              .concurrency = 1};
    plant(&p);
    json_t *doc = build(0, NULL);
    if (!doc) return;
    CHECK(finding(doc, "serialised_requests") == NULL, "too few chances to meet in the model: no serialisation claimed");
    CHECK_STR(primary(doc), "host_work_per_request", "the time outside the model is the finding");
    json_decref(doc);
    plan one = {.clients = 1, .per_client = 12, .model = 0.05, .outside = 0.35, .first_forward = 0.34, .forwards = 8,
                .concurrency = 1};
    plant(&one);
    doc = build(0, NULL);
    if (!doc) return;
    CHECK(finding(doc, "serialised_requests") == NULL, "one client: nothing waits for another");
    json_decref(doc);
}

static void test_training_that_serves(void)
{
    plan p = {.clients = 2, .per_client = 4, .model = 0.05, .outside = 0.35, .first_forward = 0.34, .forwards = 8,
              .concurrency = 1, .train = 1};
    plant(&p);
    json_t *doc = build(0, NULL);
    if (!doc) return;
    CHECK(json_object_get(doc, "workload") == NULL, "a training job that serves keeps the training report");
    CHECK(finding(doc, "serialised_requests") == NULL && finding(doc, "host_work_per_request") == NULL,
          "with no serving finding");
    json_decref(doc);
}

int main(void)
{
    test_healthy_server();
    test_slow_tokeniser();
    test_lock_around_the_model();
    test_no_serialisation_without_evidence();
    test_training_that_serves();
    json_decref(test_info);
    sqlite3_close(db);
    return check_summary();
}
