/*
 * routes.h - what each path of the HTTP API does; internal to src/server.
 *
 * The transport (server.c) reads a whole request, checks who sent it, then asks
 * pb__routes_answer() for the response; routes.c never calls back into the transport. What
 * the handlers need comes in two structs: the environment, set up once when the server starts
 * (the agent's callbacks of api.h, the query limits, the connection pool of pool.h), and the
 * request, with the transport's answer to "should this request stop now?".
 */
#ifndef PB_SERVER_ROUTES_H
#define PB_SERVER_ROUTES_H

#include "api.h"
#include "buf.h"
#include "db.h"
#include "pool.h"

#include <stddef.h>

/* Borrowed by the routes for the server's life. A NULL callback makes its routes answer 503
 * "... is not available in this process". */
typedef struct pb__routes_env {
    pb_eval_fn eval;       /* POST /api/eval */
    pb_info_fn info;       /* GET /api/info */
    pb_detach_fn detach;   /* POST /api/detach: only checked here; the transport calls it */
    pb_capture_fn capture; /* /api/capture* (and CLOSE before a detach) */
    pb_record_fn record;   /* /api/record* */
    pb_info_fn job;        /* GET /api/job */
    pb_info_fn rank;       /* GET /api/rank */
    pb_info_fn stack;      /* GET /api/stack */
    pb_info_fn arrivals;   /* GET /api/arrivals */
    void *ctx;             /* passed to every callback above */
    pb_query_limits limits; /* of every query (its cancelled/cancel_ctx are the request's) */
    pb__pool *pool;        /* SQL connections and query admission */
} pb__routes_env;

typedef struct pb__routes_request {
    const char *method;
    const char *path;
    const char *body;          /* not NUL-terminated; may be NULL when body_len is 0 */
    size_t body_len;
    pb_db_cancel_fn cancelled; /* PB_DB_CANCEL_* when the request should stop (client gone,
                                * server stopping), else 0; NULL: never */
    void *cancel_ctx;
    size_t *results_reserved;  /* the request's hold on the pool's result budget (starts at 0);
                                * the transport gives it back once the answer has been sent */
} pb__routes_request;

/* Answers one request: fills out with the JSON body and returns the HTTP status; *allow is set
 * to the Allow header value for 405 (else NULL). [server thread] */
int pb__routes_answer(const pb__routes_env *env, const pb__routes_request *req, pb_buf *out,
                      const char **allow);

#endif
