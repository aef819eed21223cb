/*
 * routes.c - the HTTP API, one static table of routes; see docs/architecture.md.
 *
 * Each route_<name> gets the whole request body and writes the whole JSON response into a
 * pb_buf; it returns the HTTP status. Request bodies are parsed with jansson; responses are
 * streamed with jsonw (queries) or produced by the agent's callbacks (eval, info, capture,
 * record).
 */
#include "routes.h"

#include "config.h"
#include "error.h"
#include "jsonw.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct request {
    const char *body; /* not NUL-terminated */
    size_t body_len;
    void *ctx;        /* the server's state of this request (cancel checks, result budget) */
} request;

typedef int (*route_fn)(pb_server *s, const request *req, pb_buf *out);

static int route_info(pb_server *s, const request *req, pb_buf *out);
static int route_query(pb_server *s, const request *req, pb_buf *out);
static int route_tables(pb_server *s, const request *req, pb_buf *out);
static int route_eval(pb_server *s, const request *req, pb_buf *out);
static int route_detach(pb_server *s, const request *req, pb_buf *out);
static int route_capture_start(pb_server *s, const request *req, pb_buf *out);
static int route_capture_status(pb_server *s, const request *req, pb_buf *out);
static int route_capture_cancel(pb_server *s, const request *req, pb_buf *out);
static int route_capture_trace(pb_server *s, const request *req, pb_buf *out);
static int route_record_start(pb_server *s, const request *req, pb_buf *out);
static int route_record_status(pb_server *s, const request *req, pb_buf *out);
static int route_record_stop(pb_server *s, const request *req, pb_buf *out);
static int route_job(pb_server *s, const request *req, pb_buf *out);
static int route_rank(pb_server *s, const request *req, pb_buf *out);
static int route_stack(pb_server *s, const request *req, pb_buf *out);

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
};

#define NROUTES (sizeof routes / sizeof routes[0])

int pb__route_error(pb_buf *out, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pb_buf_reset(out);
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "error");
    pb_jsonw_str(&w, msg);
    pb_jsonw_obj_end(&w);
    return status;
}

int pb__route_request(pb_server *s, void *req_ctx, const char *method, const char *path,
                      const char *body, size_t body_len, pb_buf *out, const char **allow)
{
    *allow = NULL;
    const struct route *path_match = NULL;
    for (size_t i = 0; i < NROUTES; i++) {
        if (strcmp(routes[i].path, path) != 0) continue;
        path_match = &routes[i];
        if (strcmp(routes[i].method, method) == 0) {
            request req = {body ? body : "", body_len, req_ctx};
            return routes[i].handler(s, &req, out);
        }
    }
    if (path_match) {
        *allow = path_match->allow ? path_match->allow : path_match->method;
        return pb__route_error(out, 405, "method %s is not allowed on %s; use %s", method, path,
                               *allow);
    }
    return pb__route_error(out, 404,
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
        pb__route_error(out, 400, "request body is not valid JSON: %s", err.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        pb__route_error(out, 400, "request body must be a JSON object");
        return NULL;
    }
    return j;
}

static int route_info(pb_server *s, const request *req, pb_buf *out)
{
    const pb_server_opts *o = pb__server_opts(s);
    if (!o->info) return pb__route_error(out, 503, "info is not available in this process");
    int rc = o->info(o->ctx, out);
    if (rc) return pb__route_error(out, 500, "cannot describe the process: %s", pb_strerror(rc));
    return 200;
}

static int route_tables(pb_server *s, const request *req, pb_buf *out)
{
    int rc = pb_db_tables_json(out);
    if (rc) return pb__route_error(out, 500, "cannot list the tables: %s", pb_strerror(rc));
    return 200;
}

static int route_query(pb_server *s, const request *req, pb_buf *out)
{
    int status = 400;
    pb_db *db = NULL;
    json_t *body = parse_object(req, out);
    if (!body) return 400;
    const char *sql = json_string_value(json_object_get(body, "sql"));
    if (!sql) {
        status = pb__route_error(out, 400, "missing string field \"sql\"");
        goto done;
    }
    int rc = pb__server_db_acquire(s, &db);
    if (rc) {
        status = pb__route_error(out, 500, "cannot open the SQL engine: %s", pb_strerror(rc));
        goto done;
    }
    /* One budget for every result in flight, a bounded number of queries at once (server.c). */
    pb_query_limits lim = pb__server_opts(s)->limits;
    size_t cap = 0;
    if ((status = pb__server_query_begin(s, req->ctx, db, lim.max_result_bytes, &cap, out)))
        goto done;
    lim.max_result_bytes = cap;
    lim.cancelled = pb__server_cancelled;
    lim.cancel_ctx = req->ctx;
    rc = pb_db_query_json(db, sql, &lim, out);
    pb__server_query_end(s, req->ctx, db, out->len);
    if (rc == 0) status = 200;
    else if (rc == PB_ESQL || rc == PB_ETIMEOUT) status = 400; /* body already says why */
    else if (rc == PB_ECANCELLED) status = 503;
    else status = pb__route_error(out, 500, "query failed: %s", pb_strerror(rc));
done:
    pb__server_db_release(s, db);
    json_decref(body);
    return status;
}

static int route_eval(pb_server *s, const request *req, pb_buf *out)
{
    const pb_server_opts *o = pb__server_opts(s);
    int status = 400;
    if (!o->eval) return pb__route_error(out, 503, "eval is not available in this process");
    json_t *body = parse_object(req, out);
    if (!body) return 400;
    const char *code = json_string_value(json_object_get(body, "code"));
    json_t *timeout = json_object_get(body, "timeout_s");
    double timeout_s = pb_config_double("PROBING_EVAL_TIMEOUT", 30);
    if (!code) {
        status = pb__route_error(out, 400, "missing string field \"code\"");
        goto done;
    }
    if (timeout && !json_is_null(timeout)) {
        if (!json_is_number(timeout) || json_number_value(timeout) <= 0) {
            status = pb__route_error(out, 400, "field \"timeout_s\" must be a positive number of seconds");
            goto done;
        }
        timeout_s = json_number_value(timeout);
    }
    status = 200;
    int rc = o->eval(o->ctx, code, timeout_s, pb__server_cancelled, req->ctx, out, &status);
    if (rc && out->len == 0) status = pb__route_error(out, 500, "eval failed: %s", pb_strerror(rc));
    else if (status < 100 || status > 599) status = rc ? 500 : 200;
done:
    json_decref(body);
    return status;
}

/* Answers at once; the agent detaches after the answer has been sent (server.c on_completed),
 * so the client always learns that it worked. Refused while a capture is pending or running:
 * torch.profiler can only be stopped by the thread that started it, at a step boundary. */
static int route_detach(pb_server *s, const request *req, pb_buf *out)
{
    const pb_server_opts *o = pb__server_opts(s);
    if (!o->detach) return pb__route_error(out, 503, "detach is not available in this process");
    if (o->capture) {
        int status = o->capture(o->ctx, PB_CAPTURE_CLOSE, NULL, out);
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
    if (pb_jsonw_obj_end(&w)) return pb__route_error(out, 500, "out of memory");
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
        pb__route_error(out, 400, "field \"%s\" must be true or false", key);
        return -1;
    }
    *v = json_is_true(j);
    return 0;
}

static int route_capture_start(pb_server *s, const request *req, pb_buf *out)
{
    const pb_server_opts *o = pb__server_opts(s);
    if (!o->capture) return pb__route_error(out, 503, "capture is not available in this process");
    json_t *body = parse_optional_object(req, out);
    if (!body) return 400;
    int status = 400;
    pb_capture_request r = {.steps = 3};
    json_t *steps = json_object_get(body, "steps");
    if (steps && !json_is_null(steps)) {
        if (!json_is_integer(steps) || json_integer_value(steps) < 1 ||
            json_integer_value(steps) > PB_CAPTURE_MAX_STEPS) {
            pb__route_error(out, 400, "field \"steps\" must be an integer from 1 to %d",
                            PB_CAPTURE_MAX_STEPS);
            goto done;
        }
        r.steps = (int)json_integer_value(steps);
    }
    if (bool_field(body, "memory", &r.memory, out) || bool_field(body, "shapes", &r.shapes, out) ||
        bool_field(body, "stack", &r.stack, out) || bool_field(body, "trace", &r.trace, out))
        goto done;
    status = o->capture(o->ctx, PB_CAPTURE_START, &r, out);
done:
    json_decref(body);
    return status;
}

static int route_capture_status(pb_server *s, const request *req, pb_buf *out)
{
    const pb_server_opts *o = pb__server_opts(s);
    if (!o->capture) return pb__route_error(out, 503, "capture is not available in this process");
    return o->capture(o->ctx, PB_CAPTURE_STATUS, NULL, out);
}

static int route_capture_cancel(pb_server *s, const request *req, pb_buf *out)
{
    const pb_server_opts *o = pb__server_opts(s);
    if (!o->capture) return pb__route_error(out, 503, "capture is not available in this process");
    json_t *body = parse_optional_object(req, out);
    if (!body) return 400;
    int status = 400;
    pb_capture_request r = {0};
    json_t *id = json_object_get(body, "capture");
    if (id && !json_is_null(id)) {
        if (!json_is_integer(id) || json_integer_value(id) < 1 ||
            json_integer_value(id) > UINT32_MAX) {
            pb__route_error(out, 400, "field \"capture\" must be a capture number (1 or more)");
            goto done;
        }
        r.id = (uint32_t)json_integer_value(id);
    }
    status = o->capture(o->ctx, PB_CAPTURE_CANCEL, &r, out);
done:
    json_decref(body);
    return status;
}

static int route_capture_trace(pb_server *s, const request *req, pb_buf *out)
{
    const pb_server_opts *o = pb__server_opts(s);
    if (!o->capture) return pb__route_error(out, 503, "capture is not available in this process");
    return o->capture(o->ctx, PB_CAPTURE_TRACE, NULL, out);
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
            pb__route_error(out, 400, "unknown field \"%s\": %s takes %s", key, route, takes);
            return -1;
        }
    }
    return 0;
}

static int route_record_start(pb_server *s, const request *req, pb_buf *out)
{
    static const char *const fields[] = {"path", "force", NULL};
    const pb_server_opts *o = pb__server_opts(s);
    if (!o->record) return pb__route_error(out, 503, "record is not available in this process");
    json_t *body = parse_optional_object(req, out);
    if (!body) return 400;
    int status = 400;
    pb_record_request r = {0};
    if (only_fields(body, fields, "POST /api/record", "\"path\" and \"force\"", out)) goto done;
    json_t *path = json_object_get(body, "path");
    if (!json_is_string(path)) {
        pb__route_error(out, 400, "missing string field \"path\"");
        goto done;
    }
    r.path = json_string_value(path);
    if (json_string_length(path) > PB_RECORD_PATH_MAX) {
        pb__route_error(out, 400, "field \"path\" is %zu bytes long; the limit is %d",
                        json_string_length(path), PB_RECORD_PATH_MAX);
        goto done;
    }
    if (r.path[0] != '/') {
        pb__route_error(out, 400, "field \"path\" must be an absolute path, not \"%s\": the "
                        "agent's working directory is not the client's", r.path);
        goto done;
    }
    if (bool_field(body, "force", &r.force, out)) goto done;
    status = o->record(o->ctx, PB_RECORD_START, &r, out);
done:
    json_decref(body);
    return status;
}

static int route_record_status(pb_server *s, const request *req, pb_buf *out)
{
    const pb_server_opts *o = pb__server_opts(s);
    if (!o->record) return pb__route_error(out, 503, "record is not available in this process");
    return o->record(o->ctx, PB_RECORD_STATUS, NULL, out);
}

static int route_record_stop(pb_server *s, const request *req, pb_buf *out)
{
    static const char *const fields[] = {NULL};
    const pb_server_opts *o = pb__server_opts(s);
    if (!o->record) return pb__route_error(out, 503, "record is not available in this process");
    json_t *body = parse_optional_object(req, out);
    if (!body) return 400;
    int status = 400;
    if (!only_fields(body, fields, "POST /api/record/stop", "no fields", out))
        status = o->record(o->ctx, PB_RECORD_STOP, NULL, out);
    json_decref(body);
    return status;
}

/* ---- the job (docs/cluster.md): callbacks of the agent's job registry ---- */

static int route_job_fn(pb_server *s, pb_info_fn fn, const char *what, pb_buf *out)
{
    const pb_server_opts *o = pb__server_opts(s);
    if (!fn) return pb__route_error(out, 503, "%s is not available in this process", what);
    int rc = fn(o->ctx, out);
    if (rc) return pb__route_error(out, 500, "cannot describe the %s: %s", what, pb_strerror(rc));
    return 200;
}

static int route_job(pb_server *s, const request *req, pb_buf *out)
{
    (void)req;
    return route_job_fn(s, pb__server_opts(s)->job, "job", out);
}

static int route_rank(pb_server *s, const request *req, pb_buf *out)
{
    (void)req;
    return route_job_fn(s, pb__server_opts(s)->rank, "rank", out);
}

static int route_stack(pb_server *s, const request *req, pb_buf *out)
{
    (void)req;
    return route_job_fn(s, pb__server_opts(s)->stack, "stack", out);
}
