/*
 * test_http.c - the HTTP server over real sockets, driven with libcurl.
 *
 * Starts pb_server on a temporary Unix socket with a test table and fake eval/info callbacks,
 * then checks every route and error status with the exact bodies a client sees, concurrent
 * clients, an eval that blocks while queries go on, the socket file's life (stale file replaced,
 * live one refused, removed on stop), the peer uid rule, TCP, and the forked-child contract.
 */
#include "check.h"
#include "http_client.h"
#include "config.h"
#include "error.h"
#include "registry.h"
#include "auth.h"
#include "server.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct test_row {
    int64_t step;
    double loss;
} test_row;

static const pb_column test_columns[] = {
    {"step", PB_COL_I64, offsetof(test_row, step), NULL, "training step"},
    {"loss", PB_COL_F64, offsetof(test_row, loss), NULL, "loss"},
};

static pb_table trace = {
    .schema = "python", .name = "torch_trace", .doc = "test trace", .columns = test_columns,
    .ncolumns = 2, .row_size = sizeof(test_row), .step_column = 0,
};

static char dir[64], sock_path[128];

/* ---- fake agent callbacks ---- */

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_closed, eval_waiting;

static int fake_eval(void *ctx, const char *code, double timeout_s, pb_db_cancel_fn cancelled,
                     void *cancel_ctx, pb_buf *out, int *status)
{
    if (strcmp(code, "block") == 0) { /* waits until the test opens the gate */
        pthread_mutex_lock(&gate_lock);
        eval_waiting = 1;
        pthread_cond_broadcast(&gate_cond);
        while (gate_closed) pthread_cond_wait(&gate_cond, &gate_lock);
        eval_waiting = 0;
        pthread_mutex_unlock(&gate_lock);
    }
    if (strcmp(code, "timeout") == 0) {
        *status = 504;
        return pb_buf_puts(out, "{\"error\":\"eval timed out waiting for the GIL\",\"phase\":\"gil\"}");
    }
    if (strcmp(code, "fail") == 0) return -EIO;
    /* timeout_s is what is left of the request's timeout after waiting for the eval slot (a few
     * microseconds here, more under a sanitizer), so it is printed to a tenth of a second */
    return pb_buf_printf(out, "{\"ok\":true,\"stdout\":\"%s %.1f\",\"stderr\":\"\"}", code, timeout_s);
}

static int fake_info(void *ctx, pb_buf *out)
{
    return pb_buf_printf(out, "{\"pid\":%d,\"version\":\"test\"}", (int)getpid());
}

/* The capture callback records what routes.c handed it and answers with capture_status
 * (409 for CLOSE when capture_busy). */
static pb_capture_verb capture_verb;
static pb_capture_request capture_req;
static _Atomic int capture_calls, capture_busy, detach_calls; /* touched by server threads */

static int fake_capture(void *ctx, pb_capture_verb verb, const pb_capture_request *req, pb_buf *out)
{
    capture_calls++;
    capture_verb = verb;
    memset(&capture_req, 0, sizeof capture_req);
    if (req) capture_req = *req;
    switch (verb) {
    case PB_CAPTURE_START:
        pb_buf_puts(out, "{\"capture\":1,\"state\":\"pending\"}");
        return 202;
    case PB_CAPTURE_TRACE:
        pb_buf_puts(out, "{\"traceEvents\":[]}");
        return 200;
    case PB_CAPTURE_CLOSE:
        if (!capture_busy) return 200;
        pb_buf_puts(out, "{\"error\":\"cannot detach while capture 1 is running\"}");
        return 409;
    default:
        pb_buf_puts(out, "{\"capture\":1,\"state\":\"running\"}");
        return 200;
    }
}

static void fake_detach(void *ctx) { detach_calls++; }

/* The record callback keeps what routes.c handed it (the path copied: it is borrowed). */
static pb_record_verb record_verb;
static int record_force;
static char record_path[8192];
static _Atomic int record_calls;

static int fake_record(void *ctx, pb_record_verb verb, const pb_record_request *req, pb_buf *out)
{
    record_calls++;
    record_verb = verb;
    record_force = req ? req->force : -1;
    snprintf(record_path, sizeof record_path, "%s", req ? req->path : "");
    return pb_buf_puts(out, "{\"recording\":true}") ? 500 : 200;
}

static json_t *post(const char *path, const char *body, reply *r)
{
    return http(sock_path, path, "POST", body, strlen(body), r);
}

static const char *error_of(json_t *j)
{
    const char *e = json_string_value(json_object_get(j, "error"));
    return e ? e : "(no error field)";
}

/* ---- tests ---- */

static void test_routes(void)
{
    reply r;
    json_t *j = http(sock_path, "/api/info", "GET", NULL, 0, &r);
    CHECK(r.status == 200 && json_integer_value(json_object_get(j, "pid")) == getpid(), "GET /api/info -> the info callback");
    json_decref(j);

    j = http(sock_path, "/api/tables", "GET", NULL, 0, &r);
    json_t *t0 = json_array_get(json_object_get(j, "tables"), 0);
    CHECK(r.status == 200 && strcmp(json_string_value(json_object_get(t0, "name")), "torch_trace") == 0 &&
              json_integer_value(json_object_get(t0, "rows")) == 10,
          "GET /api/tables lists the registry");
    json_decref(j);

    j = post("/api/query", "{\"sql\": \"SELECT max(step) AS s, count(*) FROM python.torch_trace\"}", &r);
    CHECK(r.status == 200 && strcmp(json_string_value(json_array_get(json_object_get(j, "columns"), 0)), "s") == 0 &&
              json_integer_value(json_array_get(json_array_get(json_object_get(j, "rows"), 0), 0)) == 9,
          "POST /api/query runs SQL");
    json_decref(j);

    j = post("/api/query", "{\"sql\": \"SELECT * FROM python.nope\"}", &r);
    CHECK(r.status == 400 && strncmp(error_of(j), "no such table: python.nope", 26) == 0 &&
              json_integer_value(json_object_get(j, "offset")) == -1,
          "SQL error -> 400 with error and offset");
    json_decref(j);

    j = post("/api/query", "{\"sql\": \"INSERT INTO python.torch_trace VALUES (1, 2)\"}", &r);
    CHECK(r.status == 400 && strstr(error_of(j), "read-only"), "write attempt -> 400 read-only");
    json_decref(j);

    j = post("/api/query", "{\"sql\": ", &r);
    CHECK(r.status == 400, "bad JSON -> 400");
    CHECK_STR(error_of(j), "request body is not valid JSON: unexpected token near end of file", "bad JSON message");
    json_decref(j);

    j = post("/api/query", "{\"sql\": 3}", &r);
    CHECK(r.status == 400, "non-string sql -> 400");
    CHECK_STR(error_of(j), "missing string field \"sql\"", "missing sql message");
    json_decref(j);

    j = post("/api/query", "[1]", &r);
    CHECK_STR(error_of(j), "request body must be a JSON object", "non-object body");
    json_decref(j);

    j = http(sock_path, "/api/query", "GET", NULL, 0, &r);
    CHECK(r.status == 405 && strcmp(r.allow, "POST") == 0, "GET /api/query -> 405 with Allow: POST");
    CHECK_STR(error_of(j), "method GET is not allowed on /api/query; use POST", "405 message");
    json_decref(j);

    j = post("/api/info", "{}", &r);
    CHECK(r.status == 405 && strcmp(r.allow, "GET") == 0, "POST /api/info -> 405");
    json_decref(j);

    j = http(sock_path, "/nope", "GET", NULL, 0, &r);
    CHECK(r.status == 404, "unknown path -> 404");
    CHECK_STR(error_of(j), "no such endpoint: GET /nope (endpoints: GET /api/info, POST /api/query, GET /api/tables, "
              "POST /api/eval, POST /api/detach, GET|POST /api/capture, POST /api/capture/cancel, GET /api/capture/trace, "
              "GET|POST /api/record, POST /api/record/stop)",
              "404 message");
    json_decref(j);

    size_t big_len = 100 * 1024;
    char *big = malloc(big_len + 1);
    memset(big, ' ', big_len);
    big[big_len] = '\0';
    memcpy(big, "{\"sql\":\"SELECT 1\"}", 17);
    j = http(sock_path, "/api/query", "POST", big, big_len, &r);
    CHECK(r.status == 413, "body over max_request_bytes -> 413 (got %ld)", r.status);
    CHECK_STR(error_of(j), "request body too large: 102400 bytes, the limit is 65536 bytes", "413 message");
    json_decref(j);
    free(big);

    j = post("/api/eval", "{\"code\": \"print(1)\", \"timeout_s\": 2.5}", &r);
    CHECK(r.status == 200 && strcmp(json_string_value(json_object_get(j, "stdout")), "print(1) 2.5") == 0,
          "POST /api/eval passes code and timeout_s");
    json_decref(j);
    j = post("/api/eval", "{\"code\": \"x\"}", &r);
    CHECK(r.status == 200 && strcmp(json_string_value(json_object_get(j, "stdout")), "x 30.0") == 0,
          "eval timeout_s defaults to PROBING_EVAL_TIMEOUT");
    json_decref(j);
    j = post("/api/eval", "{\"code\": \"x\", \"timeout_s\": \"soon\"}", &r);
    CHECK(r.status == 400, "bad timeout_s -> 400");
    CHECK_STR(error_of(j), "field \"timeout_s\" must be a positive number of seconds", "timeout_s message");
    json_decref(j);
    j = post("/api/eval", "{}", &r);
    CHECK_STR(error_of(j), "missing string field \"code\"", "missing code message");
    json_decref(j);
    j = post("/api/eval", "{\"code\": \"timeout\"}", &r);
    CHECK(r.status == 504 && strcmp(json_string_value(json_object_get(j, "phase")), "gil") == 0,
          "eval callback's status and body pass through (504)");
    json_decref(j);
    j = post("/api/eval", "{\"code\": \"fail\"}", &r);
    CHECK(r.status == 500, "eval callback error with no body -> 500");
    CHECK_STR(error_of(j), "eval failed: Input/output error", "500 message");
    json_decref(j);
}

/* The capture routes check the request and hand it to the agent's callback; detach asks it
 * first. */
static void test_capture_routes(void)
{
    reply r;
    json_t *j = post("/api/capture", "{}", &r);
    CHECK(r.status == 202 && capture_verb == PB_CAPTURE_START && capture_req.steps == 3 &&
              !capture_req.memory && !capture_req.shapes && !capture_req.stack && !capture_req.trace,
          "POST /api/capture {} -> START with 3 steps and no options, 202 passes through");
    json_decref(j);
    j = http(sock_path, "/api/capture", "POST", NULL, 0, &r);
    CHECK(r.status == 202 && capture_req.steps == 3, "an empty body counts as {}");
    json_decref(j);
    j = post("/api/capture", "{\"steps\": 20, \"memory\": true, \"shapes\": true, \"stack\": true, "
             "\"trace\": true}", &r);
    CHECK(r.status == 202 && capture_req.steps == 20 && capture_req.memory && capture_req.shapes &&
              capture_req.stack && capture_req.trace,
          "steps and the four options reach the callback");
    json_decref(j);
    const char *bad_steps[] = {"{\"steps\": 0}", "{\"steps\": 21}", "{\"steps\": \"3\"}",
                               "{\"steps\": 2.5}", "{\"steps\": -1}"};
    for (size_t i = 0; i < sizeof bad_steps / sizeof bad_steps[0]; i++) {
        int calls = capture_calls;
        j = post("/api/capture", bad_steps[i], &r);
        CHECK(r.status == 400 && capture_calls == calls, "%s -> 400, callback not called", bad_steps[i]);
        CHECK_STR(error_of(j), "field \"steps\" must be an integer from 1 to 20", "bad steps message");
        json_decref(j);
    }
    j = post("/api/capture", "{\"memory\": 1}", &r);
    CHECK(r.status == 400, "non-boolean option -> 400");
    CHECK_STR(error_of(j), "field \"memory\" must be true or false", "bad option message");
    json_decref(j);
    j = post("/api/capture", "[]", &r);
    CHECK_STR(error_of(j), "request body must be a JSON object", "non-object capture body");
    json_decref(j);

    j = http(sock_path, "/api/capture", "GET", NULL, 0, &r);
    CHECK(r.status == 200 && capture_verb == PB_CAPTURE_STATUS &&
              strcmp(json_string_value(json_object_get(j, "state")), "running") == 0,
          "GET /api/capture -> STATUS");
    json_decref(j);
    j = http(sock_path, "/api/capture", "PUT", NULL, 0, &r);
    CHECK(r.status == 405 && strcmp(r.allow, "GET, POST") == 0, "PUT /api/capture -> 405, Allow: GET, POST (got '%s')", r.allow);
    CHECK_STR(error_of(j), "method PUT is not allowed on /api/capture; use GET, POST", "405 message for two methods");
    json_decref(j);

    j = post("/api/capture/cancel", "{\"capture\": 7}", &r);
    CHECK(r.status == 200 && capture_verb == PB_CAPTURE_CANCEL && capture_req.id == 7, "cancel passes the capture id");
    json_decref(j);
    j = http(sock_path, "/api/capture/cancel", "POST", NULL, 0, &r);
    CHECK(r.status == 200 && capture_verb == PB_CAPTURE_CANCEL && capture_req.id == 0, "cancel without a body: the current one");
    json_decref(j);
    j = post("/api/capture/cancel", "{\"capture\": 0}", &r);
    CHECK(r.status == 400, "capture id 0 -> 400");
    CHECK_STR(error_of(j), "field \"capture\" must be a capture number (1 or more)", "bad id message");
    json_decref(j);

    j = http(sock_path, "/api/capture/trace", "GET", NULL, 0, &r);
    CHECK(r.status == 200 && capture_verb == PB_CAPTURE_TRACE && json_is_array(json_object_get(j, "traceEvents")),
          "GET /api/capture/trace sends the callback's body as it is");
    json_decref(j);

    capture_busy = 1;
    int detached = detach_calls;
    j = post("/api/detach", "{}", &r);
    CHECK(r.status == 409 && capture_verb == PB_CAPTURE_CLOSE, "detach while a capture runs -> 409");
    CHECK_STR(error_of(j), "cannot detach while capture 1 is running", "detach refusal passes through");
    json_decref(j);
    usleep(100 * 1000);
    CHECK(detach_calls == detached, "a refused detach does not detach");
    capture_busy = 0;
    j = post("/api/detach", "{}", &r);
    CHECK(r.status == 200 && capture_verb == PB_CAPTURE_CLOSE && json_is_true(json_object_get(j, "detached")),
          "detach with no capture running -> 200");
    json_decref(j);
    for (int i = 0; i < 100 && detach_calls == detached; i++) usleep(10 * 1000);
    CHECK(detach_calls == detached + 1, "... and the agent is told once the answer is sent");
}

/* The record routes check the request (exact messages) and hand it to the agent's callback. */
static void test_record_routes(void)
{
    reply r;
    json_t *j = post("/api/record", "{\"path\": \"/data/run.db\"}", &r);
    CHECK(r.status == 200 && record_verb == PB_RECORD_START && strcmp(record_path, "/data/run.db") == 0 &&
              record_force == 0 && json_is_true(json_object_get(j, "recording")),
          "POST /api/record {path} -> START with the path, force off; the callback's answer passes through");
    json_decref(j);
    j = post("/api/record", "{\"path\": \"/data/run.db\", \"force\": true}", &r);
    CHECK(r.status == 200 && record_verb == PB_RECORD_START && record_force == 1, "force: true -> force");
    json_decref(j);
    j = post("/api/record", "{\"path\": \"/data/run.db\", \"force\": null}", &r);
    CHECK(r.status == 200 && record_force == 0, "force: null -> off");
    json_decref(j);

    char *long_path = malloc(PB_RECORD_PATH_MAX + 64);
    long_path[0] = '/';
    memset(long_path + 1, 'a', PB_RECORD_PATH_MAX - 1);
    long_path[PB_RECORD_PATH_MAX] = '\0';
    char *body = malloc(PB_RECORD_PATH_MAX + 64);
    snprintf(body, PB_RECORD_PATH_MAX + 64, "{\"path\": \"%s\"}", long_path);
    j = post("/api/record", body, &r);
    CHECK(r.status == 200 && strlen(record_path) == PB_RECORD_PATH_MAX, "a path of %d bytes is accepted",
          PB_RECORD_PATH_MAX);
    json_decref(j);
    snprintf(body, PB_RECORD_PATH_MAX + 64, "{\"path\": \"%s/\"}", long_path);
    static const struct {
        const char *body, *error;
    } bad[] = {
        {"", "missing string field \"path\""},
        {"{}", "missing string field \"path\""},
        {"{\"path\": 3}", "missing string field \"path\""},
        {"{\"path\": null}", "missing string field \"path\""},
        {"{\"path\": \"run.db\"}",
         "field \"path\" must be an absolute path, not \"run.db\": the agent's working directory is not the client's"},
        {"{\"path\": \"\"}",
         "field \"path\" must be an absolute path, not \"\": the agent's working directory is not the client's"},
        {"{\"path\": \"/x.db\", \"force\": \"yes\"}", "field \"force\" must be true or false"},
        {"{\"path\": \"/x.db\", \"force\": 1}", "field \"force\" must be true or false"},
        {"{\"path\": \"/x.db\", \"overwrite\": true}",
         "unknown field \"overwrite\": POST /api/record takes \"path\" and \"force\""},
        {"{\"path\": \"/x\\u0000y\"}", NULL}, /* jansson's own message: NUL in a string */
        {"{\"path\": ", "request body is not valid JSON: unexpected token near end of file"},
        {"[\"/x.db\"]", "request body must be a JSON object"},
        {NULL, "field \"path\" is 4096 bytes long; the limit is 4095"}, /* the long body */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int calls = record_calls;
        const char *b = bad[i].body ? bad[i].body : body;
        j = post("/api/record", b, &r);
        CHECK(r.status == 400 && record_calls == calls, "POST /api/record %.60s -> 400, callback not called", b);
        if (bad[i].error) CHECK_STR(error_of(j), bad[i].error, "... its message");
        else CHECK(strstr(error_of(j), "request body is not valid JSON: \\u0000 is not allowed") == error_of(j), "... not valid JSON (%s)", error_of(j));
        json_decref(j);
    }
    free(body);
    free(long_path);

    j = http(sock_path, "/api/record", "GET", NULL, 0, &r);
    CHECK(r.status == 200 && record_verb == PB_RECORD_STATUS && record_force == -1, "GET /api/record -> STATUS");
    json_decref(j);
    j = http(sock_path, "/api/record", "DELETE", NULL, 0, &r);
    CHECK(r.status == 405 && strcmp(r.allow, "GET, POST") == 0, "DELETE /api/record -> 405, Allow: GET, POST");
    CHECK_STR(error_of(j), "method DELETE is not allowed on /api/record; use GET, POST", "405 message");
    json_decref(j);

    j = http(sock_path, "/api/record/stop", "POST", NULL, 0, &r);
    CHECK(r.status == 200 && record_verb == PB_RECORD_STOP, "POST /api/record/stop without a body -> STOP");
    json_decref(j);
    j = post("/api/record/stop", "{}", &r);
    CHECK(r.status == 200 && record_verb == PB_RECORD_STOP, "POST /api/record/stop {} -> STOP");
    json_decref(j);
    int calls = record_calls;
    j = post("/api/record/stop", "{\"path\": \"/x.db\"}", &r);
    CHECK(r.status == 400 && record_calls == calls, "stop with a field -> 400, callback not called");
    CHECK_STR(error_of(j), "unknown field \"path\": POST /api/record/stop takes no fields", "... its message");
    json_decref(j);
    j = http(sock_path, "/api/record/stop", "GET", NULL, 0, &r);
    CHECK(r.status == 405 && strcmp(r.allow, "POST") == 0, "GET /api/record/stop -> 405, Allow: POST");
    json_decref(j);
}

static void *client_thread(void *arg)
{
    long ok = 0;
    for (int i = 0; i < 20; i++) {
        reply r;
        char body[128];
        snprintf(body, sizeof body, "{\"sql\": \"SELECT %d + count(*) FROM python.torch_trace\"}", i);
        json_t *j = post("/api/query", body, &r);
        int good = r.status == 200 &&
              json_integer_value(json_array_get(json_array_get(json_object_get(j, "rows"), 0), 0)) == i + 10;
        if (!good) fprintf(stderr, "query %d: status %ld: %s\n", i, (long)r.status, error_of(j) ? error_of(j) : "");
        ok += good;
        json_decref(j);
        pb_buf_free(&r.body);
    }
    return (void *)ok;
}

static void *blocking_eval_thread(void *arg)
{
    reply *r = arg;
    json_decref(post("/api/eval", "{\"code\": \"block\"}", r));
    return NULL;
}

static void test_concurrency(void)
{
    pthread_t th[8];
    for (int i = 0; i < 8; i++) pthread_create(&th[i], NULL, client_thread, NULL);
    long ok = 0;
    for (int i = 0; i < 8; i++) {
        void *v;
        pthread_join(th[i], &v);
        ok += (long)v;
    }
    CHECK(ok == 160, "8 threads x 20 queries all answered correctly (%ld)", ok);

    /* an eval that does not return must not hold up queries */
    reply eval_reply;
    pthread_t ev;
    gate_closed = 1;
    pthread_create(&ev, NULL, blocking_eval_thread, &eval_reply);
    pthread_mutex_lock(&gate_lock);
    while (!eval_waiting) pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    reply r;
    json_t *j = post("/api/query", "{\"sql\": \"SELECT 1\"}", &r);
    int still_blocked = eval_waiting;
    CHECK(r.status == 200 && still_blocked, "a query is answered while an eval is running");
    json_decref(j);
    pb_buf_free(&r.body);
    pthread_mutex_lock(&gate_lock);
    gate_closed = 0;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
    pthread_join(ev, NULL);
    CHECK(eval_reply.status == 200, "the blocked eval completes after release");
    pb_buf_free(&eval_reply.body);
}

static void test_peer_uid(void)
{
    CHECK(pb_server_peer_allowed(1000, 1000), "same uid may connect");
    CHECK(pb_server_peer_allowed(0, 1000), "root may connect");
    CHECK(!pb_server_peer_allowed(1001, 1000), "another uid may not");
    int sv[2];
    uid_t uid = (uid_t)-1;
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    CHECK(pb_server_peer_uid(sv[0], &uid) == 0 && uid == geteuid(), "SO_PEERCRED gives our uid");
    close(sv[0]);
    close(sv[1]);
    CHECK(pb_server_peer_uid(-1, &uid) == -EBADF, "bad fd -> -EBADF");

    if (geteuid() != 0) {
        printf("skip - 403 for another uid (needs root to switch users)\n");
        return;
    }
    /* as root: let nobody reach the socket file, then check the server itself says no */
    chmod(dir, 0711);
    chmod(sock_path, 0666);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
        reply r;
        json_t *j = http(sock_path, "/api/info", "GET", NULL, 0, &r);
        const char *e = error_of(j);
        _exit(r.status == 403 && strncmp(e, "permission denied: this agent serves uid 0 (and root) only", 58) == 0 ? 0 : 1);
    }
    int st = -1;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "another uid gets 403 permission denied");
    chmod(sock_path, 0600);
    chmod(dir, 0700);
}

static pb_server_opts test_opts(void)
{
    pb_server_opts o = {0};
    o.unix_path = sock_path;
    o.eval = fake_eval;
    o.info = fake_info;
    o.capture = fake_capture;
    o.record = fake_record;
    o.detach = fake_detach;
    o.max_request_bytes = 64 * 1024;
    return o;
}

static void test_socket_file(pb_server *live)
{
    struct stat st;
    CHECK(stat(sock_path, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 0777) == 0600,
          "socket file exists with mode 0600");

    pb_server *second = NULL;
    pb_server_opts o = test_opts();
    CHECK(pb_server_start(&second, &o) == -EADDRINUSE && !second, "second server on a live path -> -EADDRINUSE");
    reply r;
    json_decref(http(sock_path, "/api/info", "GET", NULL, 0, &r));
    CHECK(r.status == 200, "the first server still answers");
    pb_buf_free(&r.body);

    /* a stale socket file (bound, never listening, closed) is replaced */
    char stale[160];
    snprintf(stale, sizeof stale, "%s/stale.sock", dir);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strcpy(addr.sun_path, stale);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    bind(fd, (struct sockaddr *)&addr, sizeof addr);
    close(fd);
    o.unix_path = stale;
    pb_server *s2 = NULL;
    CHECK(stat(stale, &st) == 0 && pb_server_start(&s2, &o) == 0, "stale socket file replaced");
    json_decref(http(stale, "/api/info", "GET", NULL, 0, &r));
    CHECK(r.status == 200, "the new server answers on it");
    pb_buf_free(&r.body);
    pb_server_stop(s2);
    CHECK(stat(stale, &st) != 0 && errno == ENOENT, "stop() removes the socket file");

    /* a regular file is not ours to delete */
    char plain[160];
    snprintf(plain, sizeof plain, "%s/plain.sock", dir);
    FILE *f = fopen(plain, "w");
    fclose(f);
    o.unix_path = plain;
    CHECK(pb_server_start(&s2, &o) == -EEXIST && stat(plain, &st) == 0, "a regular file at the path -> -EEXIST, kept");
    unlink(plain);

    o.unix_path = NULL;
    o.tcp_listen = "nonsense";
    CHECK(pb_server_start(&s2, &o) == -EINVAL, "bad tcp_listen -> -EINVAL");
    o.tcp_listen = NULL;
    CHECK(pb_server_start(&s2, &o) == -EINVAL, "no listener -> -EINVAL");

    /* eval not available */
    o = test_opts();
    char noeval[160];
    snprintf(noeval, sizeof noeval, "%s/noeval.sock", dir);
    o.unix_path = noeval;
    o.eval = NULL;
    o.info = NULL;
    CHECK(pb_server_start(&s2, &o) == 0, "server without eval/info");
    json_t *j = http(noeval, "/api/eval", "POST", "{\"code\":\"1\"}", 12, &r);
    CHECK(r.status == 503, "eval unavailable -> 503");
    CHECK_STR(error_of(j), "eval is not available in this process", "503 message");
    json_decref(j);
    pb_buf_free(&r.body);
    j = http(noeval, "/api/info", "GET", NULL, 0, &r);
    CHECK(r.status == 503, "info unavailable -> 503");
    json_decref(j);
    pb_buf_free(&r.body);
    pb_server_stop(s2);
    o.record = NULL;
    CHECK(pb_server_start(&s2, &o) == 0, "server without record");
    j = http(noeval, "/api/record", "POST", "{\"path\":\"/x.db\"}", 16, &r);
    CHECK(r.status == 503, "record unavailable -> 503");
    CHECK_STR(error_of(j), "record is not available in this process", "503 message");
    json_decref(j);
    pb_server_stop(s2);
    (void)live;
}

static int tcp_connects(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* GET url signed with token for agent (NULL: none) of rank at time t; the reply in r, the
 * nonce in nonce. */
static json_t *signed_get(const char *url, const char *path, const char *token, const char *agent,
                          int rank, int64_t t, reply *r, char nonce[PB_AUTH_NONCE_HEX + 1])
{
    char value[PB_AUTH_HEADER_MAX];
    static char header[PB_AUTH_HEADER_MAX + 32];
    pb_auth_sign_request(token, "GET", path, NULL, 0, rank, agent, t, value, sizeof value, nonce);
    snprintf(header, sizeof header, "Authorization: %s", value);
    bearer = header;
    return http(NULL, url, "GET", NULL, 0, r);
}

/* A request signed with the token (common/auth.h) for this agent is served and its answer
 * signed by it; the identity exchange is the one request that may name no agent; a replay (also
 * after 2,100 other signed requests), a request for another agent or rank, one of the older
 * form, an old one, a changed body or another key are refused, unsigned. */
static void test_tcp_signed(int port, const char *token)
{
    char url[64], id_url[64], query_url[64], header[PB_AUTH_HEADER_MAX + 32], value[PB_AUTH_HEADER_MAX];
    char nonce[PB_AUTH_NONCE_HEX + 1], agent[PB_AUTH_AGENT_HEX + 1];
    int rank = -1;
    reply r;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/api/info", port);
    snprintf(id_url, sizeof id_url, "http://127.0.0.1:%d" PB_AUTH_IDENTITY_PATH, port);
    snprintf(query_url, sizeof query_url, "http://127.0.0.1:%d/api/query", port);
    int64_t now = (int64_t)time(NULL);
    const char *was = bearer;

    /* who listens here: the identity exchange, the one request that may name no agent */
    json_t *j = signed_get(id_url, PB_AUTH_IDENTITY_PATH, token, NULL, -1, now, &r, nonce);
    CHECK(r.status == 200 && pb_auth_parse_agent(r.agent, agent, &rank) == 0 && rank == 0 &&
              strcmp(json_string_value(json_object_get(j, "agent")), agent) == 0,
          "GET " PB_AUTH_IDENTITY_PATH " names the agent and its rank (got %ld, '%s')", r.status,
          r.agent);
    json_decref(j);
    CHECK(pb_auth_verify_answer(token, agent, rank, nonce, r.status, r.kept, r.kept_len,
                                r.signature), "and its answer's signature proves them");
    char other_agent[PB_AUTH_AGENT_HEX + 1];
    pb_auth_new_agent_id(other_agent);
    CHECK(!pb_auth_verify_answer(token, other_agent, rank, nonce, r.status, r.kept, r.kept_len,
                                 r.signature) &&
              !pb_auth_verify_answer(token, agent, 1, nonce, r.status, r.kept, r.kept_len,
                                     r.signature),
          "... and no other agent or rank");
    j = signed_get(url, "/api/info", token, NULL, -1, now, &r, nonce);
    CHECK(r.status == 401 && !r.signature[0], "any other request naming no agent -> 401 (got %ld)",
          r.status);
    CHECK_STR(error_of(j), "unauthorized: the request names no agent: only GET /api/identity may (it "
              "tells which agent this is); a request must be signed for the one agent that serves it",
              "no-agent message");
    json_decref(j);
    j = signed_get(url, "/api/info", token, other_agent, 0, now, &r, nonce);
    CHECK(r.status == 401 && !r.signature[0],
          "a request signed for another agent of the same rank -> 401 (got %ld)", r.status);
    CHECK(strstr(error_of(j), "the request was signed for another agent") != NULL, "it says why: %s",
          error_of(j));
    json_decref(j);
    /* the form of the older probing (no a=, probing-request-v1) is refused, never served */
    snprintf(header, sizeof header, "Authorization: " PB_AUTH_SCHEME " t=%lld,n=%s,r=-,b="
             "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855,"
             "m=0000000000000000000000000000000000000000000000000000000000000000",
             (long long)now, nonce);
    bearer = header;
    j = http(NULL, url, "GET", NULL, 0, &r);
    CHECK(r.status == 401 && strstr(error_of(j), "older probing (probing-request-v1)") != NULL,
          "a request of the older form -> 401 that says so (got %ld: %s)", r.status, error_of(j));
    json_decref(j);

    j = signed_get(url, "/api/info", token, agent, 0, now, &r, nonce);
    CHECK(r.status == 200, "a GET /api/info signed for this agent is served (got %ld)", r.status);
    json_decref(j);
    CHECK(pb_auth_verify_answer(token, agent, 0, nonce, r.status, r.kept, r.kept_len, r.signature),
          "its answer is signed with the token by this agent for this request's nonce");
    CHECK(!pb_auth_verify_answer("another-token-0123456789", agent, 0, nonce, r.status, r.kept,
                                 r.kept_len, r.signature),
          "the signature does not verify with another key");
    char first[PB_AUTH_HEADER_MAX + 32];
    snprintf(first, sizeof first, "%s", bearer);
    j = http(NULL, url, "GET", NULL, 0, &r);
    CHECK(r.status == 401 && !r.signature[0], "the same signed request again -> 401 (got %ld)", r.status);
    CHECK_STR(error_of(j), "unauthorized: this signed request was already served once (a replay)",
              "replay message");
    json_decref(j);
    /* the old store kept the last 2,048 nonces: after 2,100 others the first was served again */
    int served = 0;
    for (int i = 0; i < 2100; i++) {
        json_decref(signed_get(id_url, PB_AUTH_IDENTITY_PATH, token, agent, 0, now, &r, nonce));
        served += r.status == 200;
    }
    CHECK(served == 2100, "2,100 other signed requests served (%d)", served);
    bearer = first;
    json_decref(http(NULL, url, "GET", NULL, 0, &r));
    CHECK(r.status == 401 && !r.signature[0],
          "the first request replayed after them, within its window -> 401 (got %ld)", r.status);

    j = signed_get(url, "/api/info", token, agent, 3, now, &r, nonce);
    CHECK(r.status == 401, "a request meant for rank 3 -> 401 on rank 0 (got %ld)", r.status);
    CHECK_STR(error_of(j), "unauthorized: the request is meant for rank 3 and this agent is rank 0: the "
              "job's roster names the wrong endpoint for rank 3", "wrong-rank message");
    json_decref(j);
    json_decref(signed_get(url, "/api/info", token, agent, 0, now - 3600, &r, nonce));
    CHECK(r.status == 401, "a request signed an hour ago -> 401 (got %ld)", r.status);
    json_decref(signed_get(url, "/api/tables", token, agent, 0, now, &r, nonce));
    CHECK(r.status == 401, "a signature for another path -> 401 (got %ld)", r.status);
    json_decref(signed_get(url, "/api/info", "another-token-0123456789", agent, 0, now, &r, nonce));
    CHECK(r.status == 401, "a signature with another key -> 401 (got %ld)", r.status);

    const char *sql = "{\"sql\":\"SELECT 1\"}", *other = "{\"sql\":\"SELECT 2\"}";
    pb_auth_sign_request(token, "POST", "/api/query", sql, strlen(sql), 0, agent, now, value,
                         sizeof value, nonce);
    snprintf(header, sizeof header, "Authorization: %s", value);
    bearer = header;
    j = http(NULL, query_url, "POST", other, strlen(other), &r);
    CHECK(r.status == 401 && !r.signature[0], "a signed request with another body -> 401 (got %ld)",
          r.status);
    json_decref(j);
    pb_auth_sign_request(token, "POST", "/api/query", sql, strlen(sql), 0, agent, now, value,
                         sizeof value, nonce);
    snprintf(header, sizeof header, "Authorization: %s", value);
    json_decref(http(NULL, query_url, "POST", sql, strlen(sql), &r));
    CHECK(r.status == 200 && pb_auth_verify_answer(token, agent, 0, nonce, r.status, r.kept,
                                                   r.kept_len, r.signature),
          "a signed query is served and its answer signed (got %ld)", r.status);
    bearer = was;
}

static void test_tcp_and_fork(void)
{
    pb_server_opts o = test_opts();
    o.unix_path = NULL;
    o.tcp_listen = "127.0.0.1:0";
    o.token = "short";
    pb_server *s = NULL;
    CHECK(pb_server_start(&s, &o) == PB_EBADTOKEN && !s, "a token under 16 characters -> PB_EBADTOKEN");
    o.token = "0123456789abcdef0123456789abcdef";
    CHECK(pb_server_start(&s, &o) == 0 && pb_server_tcp_port(s) > 0, "TCP listener on 127.0.0.1:0");
    int port = pb_server_tcp_port(s);
    char url[64], eval_url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/api/info", port);
    snprintf(eval_url, sizeof eval_url, "http://127.0.0.1:%d/api/eval", port);
    reply r;
    bearer = NULL;
    json_t *j = http(NULL, url, "GET", NULL, 0, &r);
    CHECK(r.status == 401, "TCP without a token -> 401 (got %ld)", r.status);
    CHECK_STR(error_of(j),
              "unauthorized: this agent's TCP endpoint needs proof of its token: the probing CLI signs each "
              "request with it (--token, PROBING_TOKEN, PROBING_TOKEN_FILE or the token file in the agent's "
              "socket directory when it may read it); curl may send 'Authorization: Bearer <token>'",
              "401 message");
    json_decref(j);
    bearer = "Authorization: Bearer 0123456789abcdef0123456789abcdeX";
    json_decref(http(NULL, url, "GET", NULL, 0, &r));
    CHECK(r.status == 401, "TCP with a wrong token of the right length -> 401");
    bearer = "Authorization: Bearer 0123456789abcdef0123456789abcdef0";
    json_decref(http(NULL, url, "GET", NULL, 0, &r));
    CHECK(r.status == 401, "TCP with the token plus a character -> 401");
    bearer = "Authorization: Basic 0123456789abcdef0123456789abcdef";
    json_decref(http(NULL, url, "GET", NULL, 0, &r));
    CHECK(r.status == 401, "TCP with the token under another scheme -> 401");
    bearer = "Authorization: Bearer 0123456789abcdef0123456789abcdef";
    json_decref(http(NULL, url, "GET", NULL, 0, &r));
    CHECK(r.status == 200, "GET /api/info over TCP with the token");
    CHECK(!r.signature[0], "an answer to a Bearer request is not signed");
    test_tcp_signed(port, o.token);
    j = http(NULL, eval_url, "POST", "{\"code\":\"x\"}", 12, &r);
    CHECK(r.status == 403, "eval over TCP -> 403 (got %ld)", r.status);
    CHECK_STR(error_of(j),
              "eval over TCP is off: it runs code in the process; use the Unix socket (probing <pid> eval ...), or "
              "start the process with PROBING_TCP_EVAL=1 to allow it",
              "403 eval message");
    json_decref(j);
    CHECK(pb_server_token_path(s) == NULL, "a given token is not written to a file");
    static const char *const record_routes[][2] = {
        {"POST", "/api/record"}, {"GET", "/api/record"}, {"POST", "/api/record/stop"}};
    for (size_t i = 0; i < 3; i++) {
        char record_url[96];
        int calls = record_calls;
        snprintf(record_url, sizeof record_url, "http://127.0.0.1:%d%s", port, record_routes[i][1]);
        j = http(NULL, record_url, record_routes[i][0], "{\"path\":\"/x.db\"}", 16, &r);
        CHECK(r.status == 403 && record_calls == calls, "%s %s over TCP with the token -> 403, callback not called",
              record_routes[i][0], record_routes[i][1]);
        CHECK_STR(error_of(j),
                  "record is refused over TCP: the agent would write a file on its own machine that a network "
                  "client names; run probing on that machine",
                  "... its message");
        json_decref(j);
    }

    /* a forked child forgets the server; once the parent stops, nothing listens any more */
    int pipefd[2], readyfd[2];
    if (pipe(pipefd) != 0 || pipe(readyfd) != 0) return;
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[1]);
        pb_server_forget_after_fork(s);
        pb_server_stop(s); /* inert after forget */
        char c = 'r';
        if (write(readyfd[1], &c, 1) != 1) _exit(4);
        while (read(pipefd[0], &c, 1) > 0) {} /* live until the parent is done checking */
        _exit(0);
    }
    close(pipefd[0]);
    close(readyfd[1]);
    char c;
    CHECK(read(readyfd[0], &c, 1) == 1, "child forgot the server");
    close(readyfd[0]);
    json_decref(http(NULL, url, "GET", NULL, 0, &r));
    CHECK(r.status == 200, "parent still serves after the child forgot the server");
    pb_buf_free(&r.body);
    pb_server_stop(s);
    CHECK(!tcp_connects(port), "after stop, the child holds no listening socket");
    close(pipefd[1]);
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child exits cleanly");
    bearer = NULL;
}

/* A generated token: 64 hex digits in <dir>/<pid>.token, mode 0600, gone after stop; eval on
 * TCP when asked for. */
static void test_generated_token(void)
{
    pb_server_opts o = test_opts();
    o.tcp_listen = "127.0.0.1:0";
    o.tcp_eval = 1;
    pb_server *s = NULL;
    CHECK(pb_server_start(&s, &o) == 0, "TCP with a generated token starts");
    if (!s) return;
    char expect[PATH_MAX];
    snprintf(expect, sizeof expect, "%s/%d.token", dir, (int)getpid());
    const char *path = pb_server_token_path(s);
    CHECK(path && strcmp(path, expect) == 0, "token file is %s (got %s)", expect, path ? path : "NULL");
    struct stat st;
    CHECK(stat(expect, &st) == 0 && (st.st_mode & 0777) == 0600, "token file mode 0600");
    char text[128] = "", token[80] = "", header[128];
    int port = 0;
    FILE *f = fopen(expect, "r");
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    CHECK(sscanf(text, "%79s port %d", token, &port) == 2 && strlen(token) == 64 &&
              strspn(token, "0123456789abcdef") == 64 && port == pb_server_tcp_port(s),
          "token file holds 64 hex digits and the port (%s)", text);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/api/eval", pb_server_tcp_port(s));
    snprintf(header, sizeof header, "Authorization: Bearer %s", token);
    bearer = header;
    reply r;
    json_decref(http(NULL, url, "POST", "{\"code\":\"x\"}", 12, &r));
    CHECK(r.status == 200, "eval over TCP with tcp_eval and the token (got %ld)", r.status);
    bearer = NULL;
    pb_server_stop(s);
    CHECK(stat(expect, &st) != 0, "stop() removed the token file");
}

int main(void)
{
    /* The clients are threads of this process: server threads at nice 19 (the agent's default,
     * PROBING_SERVER_NICE) would be starved by them, and the connection count, which drops only
     * when a closed connection's thread has finished, would lag behind the 8 clients. */
    setenv("PROBING_SERVER_NICE", "0", 1);
    pb_config_load();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    snprintf(dir, sizeof dir, "/tmp/probing-test-XXXXXX");
    if (!mkdtemp(dir)) return 2;
    snprintf(sock_path, sizeof sock_path, "%s/%d.sock", dir, (int)getpid());
    if (pb_ring_create(&trace.ring, sizeof(test_row), 1024)) return 2;
    pb_registry_add(&trace);
    for (int i = 0; i < 10; i++) {
        test_row row = {.step = i, .loss = 1.0 / (i + 1)};
        pb_ring_push(trace.ring, &row);
    }

    pb_server *s = NULL;
    pb_server_opts o = test_opts();
    int rc = pb_server_start(&s, &o);
    CHECK(rc == 0 && s, "server starts on %s (%s)", sock_path, pb_strerror(rc));
    if (!s) return check_summary();
    test_routes();
    test_capture_routes();
    test_record_routes();
    test_concurrency();
    test_peer_uid();
    test_socket_file(s);
    pb_server_stop(s);
    struct stat st;
    CHECK(stat(sock_path, &st) != 0, "stop() removed %s", sock_path);
    pb_server_stop(NULL);
    test_tcp_and_fork();
    test_generated_token();

    rmdir(dir);
    pb_registry_reset();
    pb_ring_destroy(trace.ring);
    curl_global_cleanup();
    return check_summary();
}
