/*
 * routes.c - the HTTP API, one static table of routes; see docs/architecture.md.
 *
 * Each route_<name> gets the environment (the agent's callbacks, query limits, the connection
 * pool) and the whole request, writes the whole JSON response into a pb_buf and returns the HTTP
 * status. Request bodies are parsed with jansson; responses are streamed with jsonw (queries) or
 * produced by the agent's callbacks (eval, info, capture, record). Errors are pb_api_error()'s
 * {"error": ...}. Nothing here knows about sockets or libmicrohttpd (server.c).
 */
#include "routes.h"

#include "catalog.h"
#include "config.h"
#include "error.h"
#include "jsonw.h"

#include <jansson.h>
#include <string.h>
#include <unistd.h>

typedef pb__routes_request request;

typedef int (*route_fn)(const pb__routes_env *env, const request *req, pb_buf *out);

static int route_info(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_query(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_tables(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_eval(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_detach(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_capture_start(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_capture_status(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_capture_cancel(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_capture_trace(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_record_start(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_record_status(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_record_stop(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_job(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_rank(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_stack(const pb__routes_env *env, const request *req, pb_buf *out);
static int route_arrivals(const pb__routes_env *env, const request *req, pb_buf *out);

static const struct route {
    const char *method;
    const char *path;
    route_fn handler;
    const char *allow; /* Allow header of a 405 when the path has several methods; else method */
} routes[] = {
    {"GET", "/api/info", route_info, NULL},
    {"POST", "/api/query", route_query, NULL},
    {"GET", "/api/tables", route_tables, NULL},
    {"POST", "/api/eval", route_eval, NULL},
    {"POST", "/api/detach", route_detach, NULL},
    {"POST", "/api/capture", route_capture_start, "GET, POST"},
    {"GET", "/api/capture", route_capture_status, "GET, POST"},
    {"POST", "/api/capture/cancel", route_capture_cancel, NULL},
    {"GET", "/api/capture/trace", route_capture_trace, NULL},
    {"POST", "/api/record", route_record_start, "GET, POST"},
    {"GET", "/api/record", route_record_status, "GET, POST"},
    {"POST", "/api/record/stop", route_record_stop, NULL},
    {"GET", "/api/job", route_job, NULL},
    {"GET", "/api/rank", route_rank, NULL},
    {"GET", "/api/stack", route_stack, NULL},
    {"GET", "/api/arrivals", route_arrivals, NULL},
};

#define NROUTES (sizeof routes / sizeof routes[0])

int pb__routes_answer(const pb__routes_env *env, const pb__routes_request *req, pb_buf *out,
                      const char **allow)
{
    const char *method = req->method, *path = req->path;
    *allow = NULL;
    const struct route *path_match = NULL;
    for (size_t i = 0; i < NROUTES; i++) {
        if (strcmp(routes[i].path, path) != 0) continue;
        path_match = &routes[i];
        if (strcmp(routes[i].method, method) == 0) {
            request r = *req;
            if (!r.body) r.body = "";
            return routes[i].handler(env, &r, out);
        }
    }
    if (path_match) {
        *allow = path_match->allow ? path_match->allow : path_match->method;
        return pb_api_error(out, 405, "method %s is not allowed on %s; use %s", method, path,
                            *allow);
    }
    return pb_api_error(out, 404,
                        "no such endpoint: %s %s (endpoints: GET /api/info, POST /api/query, "
                        "GET /api/tables, POST /api/eval, POST /api/detach, GET|POST "
                        "/api/capture, POST /api/capture/cancel, GET /api/capture/trace, "
                        "GET|POST /api/record, POST /api/record/stop)",
                        method, path);
}

/* Parses the body as a JSON object. On failure writes the 400 response and returns NULL. */
static json_t *parse_object(const request *req, pb_buf *out)
{
    json_error_t err;
    json_t *j = json_loadb(req->body, req->body_len, 0, &err);
    if (!j) {
        pb_api_error(out, 400, "request body is not valid JSON: %s", err.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        pb_api_error(out, 400, "request body must be a JSON object");
        return NULL;
    }
    return j;
}

static int route_info(const pb__routes_env *env, const request *req, pb_buf *out)
{
    if (!env->info) return pb_api_error(out, 503, "info is not available in this process");
    int rc = env->info(env->ctx, out);
    if (rc) return pb_api_error(out, 500, "cannot describe the process: %s", pb_strerror(rc));
    return 200;
}

/* What the table list reserves of the result budget before it is built (pool.h): it is a few
 * kilobytes; once built it keeps its real size until sent. An eval reserves PB_EVAL_RESERVE
 * (api.h: its captures and its answer) when it starts to run. */
#define TABLES_ANSWER_RESERVE ((size_t)1 << 20)

static int route_tables(const pb__routes_env *env, const request *req, pb_buf *out)
{
    int status = pb__pool_reserve(env->pool, TABLES_ANSWER_RESERVE, req->results_reserved,
                                  "the table list was not sent", "try again in a moment", out);
    if (status) return status;
    int rc = pb_catalog_tables_json(out);
    if (rc) status = pb_api_error(out, 500, "cannot list the tables: %s", pb_strerror(rc));
    pb__pool_results_kept(env->pool, out->len, req->results_reserved);
    return rc ? status : 200;
}

static int route_query(const pb__routes_env *env, const request *req, pb_buf *out)
{
    int status = 400;
    pb_db *db = NULL;
    json_t *body = parse_object(req, out);
    if (!body) return 400;
    const char *sql = json_string_value(json_object_get(body, "sql"));
    if (!sql) {
        status = pb_api_error(out, 400, "missing string field \"sql\"");
        goto done;
    }
    int rc = pb__pool_acquire(env->pool, &db);
    if (rc) {
        status = pb_api_error(out, 500, "cannot open the SQL engine: %s", pb_strerror(rc));
        goto done;
    }
    /* One budget for every result in flight, a bounded number of queries at once (server.c). */
    pb_query_limits lim = env->limits;
    size_t cap = 0;
    if ((status = pb__pool_query_begin(env->pool, db, lim.max_result_bytes, &cap,
                                       req->results_reserved, out)))
        goto done;
    lim.max_result_bytes = cap;
    /* A client may ask for less (query --ranks bounds what each rank sends it). */
    json_t *asked = json_object_get(body, "max_result_bytes");
    if (json_is_integer(asked) && json_integer_value(asked) > 0 &&
        (size_t)json_integer_value(asked) < lim.max_result_bytes)
        lim.max_result_bytes = (size_t)json_integer_value(asked);
    lim.cancelled = req->cancelled;
    lim.cancel_ctx = req->cancel_ctx;
    rc = pb_db_query_json(db, sql, &lim, out);
    pb__pool_query_end(env->pool, db, out->len, req->results_reserved);
    if (rc == 0) status = 200;
    else if (rc == PB_ESQL || rc == PB_ETIMEOUT) status = 400; /* body already says why */
    else if (rc == PB_ECANCELLED) status = 503;
    else status = pb_api_error(out, 500, "query failed: %s", pb_strerror(rc));
done:
    pb__pool_release(env->pool, db);
    json_decref(body);
    return status;
}

static int route_eval(const pb__routes_env *env, const request *req, pb_buf *out)
{
    int status = 400;
    if (!env->eval) return pb_api_error(out, 503, "eval is not available in this process");
    json_t *body = parse_object(req, out);
    if (!body) return 400;
    const char *code = json_string_value(json_object_get(body, "code"));
    json_t *timeout = json_object_get(body, "timeout_s");
    double timeout_s = pb_config_double("PROBING_EVAL_TIMEOUT", 30);
    if (!code) {
        status = pb_api_error(out, 400, "missing string field \"code\"");
        goto done;
    }
    if (timeout && !json_is_null(timeout)) {
        if (!json_is_number(timeout) || json_number_value(timeout) <= 0) {
            status = pb_api_error(out, 400, "field \"timeout_s\" must be a positive number of seconds");
            goto done;
        }
        timeout_s = json_number_value(timeout);
    }
    /* Admitted to the eval slot and the result budget before the code runs (evals run one at
     * a time; one waiting for its turn holds nothing): a refusal runs nothing, and an answer
     * that was produced is always sent (counted at its real size). The time spent waiting
     * comes off the eval's timeout. */
    if ((status = pb__pool_eval_begin(env->pool, PB_EVAL_RESERVE, &timeout_s, req->cancelled,
                                      req->cancel_ctx, req->results_reserved, out)))
        goto done;
    status = 200;
    int rc = env->eval(env->ctx, code, timeout_s, req->cancelled, req->cancel_ctx, out, &status);
    pb__pool_eval_end(env->pool); /* the eval holds no capture any more, even if its code runs on */
    if (rc && out->len == 0) status = pb_api_error(out, 500, "eval failed: %s", pb_strerror(rc));
    else if (status < 100 || status > 599) status = rc ? 500 : 200;
    pb__pool_results_kept(env->pool, out->len, req->results_reserved);
done:
    json_decref(body);
    return status;
}

/* Answers at once; the agent detaches after the answer has been sent (the transport's request-completed callback),
 * so the client always learns that it worked. Refused while a capture is pending or running:
 * torch.profiler can only be stopped by the thread that started it, at a step boundary. */
static int route_detach(const pb__routes_env *env, const request *req, pb_buf *out)
{
    if (!env->detach) return pb_api_error(out, 503, "detach is not available in this process");
    if (env->capture) {
        int status = env->capture(env->ctx, PB_CAPTURE_CLOSE, NULL, out);
        if (status != 200) return status;
        pb_buf_reset(out);
    }
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "detached");
    pb_jsonw_bool(&w, 1);
    pb_jsonw_key(&w, "pid");
    pb_jsonw_int(&w, getpid());
    if (pb_jsonw_obj_end(&w)) return pb_api_error(out, 500, "out of memory");
    return 200;
}

/* ---- capture: the agent keeps the state; here only the request is checked ---- */

/* The body as a JSON object; an empty body counts as {}. NULL after writing a 400. */
static json_t *parse_optional_object(const request *req, pb_buf *out)
{
    if (req->body_len == 0) return json_object();
    return parse_object(req, out);
}

/* Reads an optional boolean field into *v. Returns 0, or writes a 400 and returns -1. */
static int bool_field(json_t *body, const char *key, int *v, pb_buf *out)
{
    json_t *j = json_object_get(body, key);
    if (!j || json_is_null(j)) return 0;
    if (!json_is_boolean(j)) {
        pb_api_error(out, 400, "field \"%s\" must be true or false", key);
        return -1;
    }
    *v = json_is_true(j);
    return 0;
}

static int route_capture_start(const pb__routes_env *env, const request *req, pb_buf *out)
{
    if (!env->capture) return pb_api_error(out, 503, "capture is not available in this process");
    json_t *body = parse_optional_object(req, out);
    if (!body) return 400;
    int status = 400;
    pb_capture_request r = {.steps = 3};
    json_t *steps = json_object_get(body, "steps");
    if (steps && !json_is_null(steps)) {
        if (!json_is_integer(steps) || json_integer_value(steps) < 1 ||
            json_integer_value(steps) > PB_CAPTURE_MAX_STEPS) {
            pb_api_error(out, 400, "field \"steps\" must be an integer from 1 to %d",
                         PB_CAPTURE_MAX_STEPS);
            goto done;
        }
        r.steps = (int)json_integer_value(steps);
    }
    if (bool_field(body, "memory", &r.memory, out) || bool_field(body, "shapes", &r.shapes, out) ||
        bool_field(body, "stack", &r.stack, out) || bool_field(body, "trace", &r.trace, out))
        goto done;
    status = env->capture(env->ctx, PB_CAPTURE_START, &r, out);
done:
    json_decref(body);
    return status;
}

static int route_capture_status(const pb__routes_env *env, const request *req, pb_buf *out)
{
    if (!env->capture) return pb_api_error(out, 503, "capture is not available in this process");
    return env->capture(env->ctx, PB_CAPTURE_STATUS, NULL, out);
}

static int route_capture_cancel(const pb__routes_env *env, const request *req, pb_buf *out)
{
    if (!env->capture) return pb_api_error(out, 503, "capture is not available in this process");
    json_t *body = parse_optional_object(req, out);
    if (!body) return 400;
    int status = 400;
    pb_capture_request r = {0};
    json_t *id = json_object_get(body, "capture");
    if (id && !json_is_null(id)) {
        if (!json_is_integer(id) || json_integer_value(id) < 1 ||
            json_integer_value(id) > UINT32_MAX) {
            pb_api_error(out, 400, "field \"capture\" must be a capture number (1 or more)");
            goto done;
        }
        r.id = (uint32_t)json_integer_value(id);
    }
    status = env->capture(env->ctx, PB_CAPTURE_CANCEL, &r, out);
done:
    json_decref(body);
    return status;
}

static int route_capture_trace(const pb__routes_env *env, const request *req, pb_buf *out)
{
    if (!env->capture) return pb_api_error(out, 503, "capture is not available in this process");
    return env->capture(env->ctx, PB_CAPTURE_TRACE, NULL, out);
}

/* ---- record: the agent records; here only the request is checked ---- */

/* Writes a 400 naming the first field of body not in allowed (NULL-terminated) and returns -1;
 * 0 when there is none. takes: what the route takes, in words. */
static int only_fields(json_t *body, const char *const *allowed, const char *route,
                       const char *takes, pb_buf *out)
{
    const char *key;
    json_t *value;
    json_object_foreach(body, key, value) {
        int known = 0;
        for (int i = 0; allowed[i] && !known; i++) known = strcmp(key, allowed[i]) == 0;
        if (!known) {
            pb_api_error(out, 400, "unknown field \"%s\": %s takes %s", key, route, takes);
            return -1;
        }
    }
    return 0;
}

static int route_record_start(const pb__routes_env *env, const request *req, pb_buf *out)
{
    static const char *const fields[] = {"path", "force", NULL};
    if (!env->record) return pb_api_error(out, 503, "record is not available in this process");
    json_t *body = parse_optional_object(req, out);
    if (!body) return 400;
    int status = 400;
    pb_record_request r = {0};
    if (only_fields(body, fields, "POST /api/record", "\"path\" and \"force\"", out)) goto done;
    json_t *path = json_object_get(body, "path");
    if (!json_is_string(path)) {
        pb_api_error(out, 400, "missing string field \"path\"");
        goto done;
    }
    r.path = json_string_value(path);
    if (json_string_length(path) > PB_RECORD_PATH_MAX) {
        pb_api_error(out, 400, "field \"path\" is %zu bytes long; the limit is %d",
                     json_string_length(path), PB_RECORD_PATH_MAX);
        goto done;
    }
    if (r.path[0] != '/') {
        pb_api_error(out, 400, "field \"path\" must be an absolute path, not \"%s\": the "
                     "agent's working directory is not the client's", r.path);
        goto done;
    }
    if (bool_field(body, "force", &r.force, out)) goto done;
    status = env->record(env->ctx, PB_RECORD_START, &r, out);
done:
    json_decref(body);
    return status;
}

static int route_record_status(const pb__routes_env *env, const request *req, pb_buf *out)
{
    if (!env->record) return pb_api_error(out, 503, "record is not available in this process");
    return env->record(env->ctx, PB_RECORD_STATUS, NULL, out);
}

static int route_record_stop(const pb__routes_env *env, const request *req, pb_buf *out)
{
    static const char *const fields[] = {NULL};
    if (!env->record) return pb_api_error(out, 503, "record is not available in this process");
    json_t *body = parse_optional_object(req, out);
    if (!body) return 400;
    int status = 400;
    if (!only_fields(body, fields, "POST /api/record/stop", "no fields", out))
        status = env->record(env->ctx, PB_RECORD_STOP, NULL, out);
    json_decref(body);
    return status;
}

/* ---- the job (docs/cluster.md): callbacks of the agent's job registry ---- */

static int route_job_fn(const pb__routes_env *env, pb_info_fn fn, const char *what, pb_buf *out)
{
    if (!fn) return pb_api_error(out, 503, "%s is not available in this process", what);
    int rc = fn(env->ctx, out);
    if (rc) return pb_api_error(out, 500, "cannot describe the %s: %s", what, pb_strerror(rc));
    return 200;
}

static int route_job(const pb__routes_env *env, const request *req, pb_buf *out)
{
    (void)req;
    return route_job_fn(env, env->job, "job", out);
}

static int route_rank(const pb__routes_env *env, const request *req, pb_buf *out)
{
    (void)req;
    return route_job_fn(env, env->rank, "rank", out);
}

static int route_stack(const pb__routes_env *env, const request *req, pb_buf *out)
{
    (void)req;
    return route_job_fn(env, env->stack, "stack", out);
}

static int route_arrivals(const pb__routes_env *env, const request *req, pb_buf *out)
{
    (void)req;
    return route_job_fn(env, env->arrivals, "arrivals", out);
}
