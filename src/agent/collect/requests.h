/*
 * requests.h - python.requests (docs/tables.md): one row per request a server in the process
 * served (the standard library's http.server, an ASGI application under uvicorn), in a bounded
 * ring.
 *
 * hot/serve.c fills the rows from what its wrappers of the servers and the root forwards show it;
 * this file only owns the table (its row, columns and ring) and pushes. collect.c registers it
 * with the other tables. [GIL held]
 */
#ifndef PB_AGENT_REQUESTS_H
#define PB_AGENT_REQUESTS_H

#include <stdint.h>

#include "registry.h"

enum { PB_SERVER_HTTP = 0, PB_SERVER_ASGI = 1 };

typedef struct pb_request_row {
    int64_t id;             /* 1, 2, ... in the order the requests arrived */
    int64_t thread_id;      /* threading.get_ident() of the thread the request began on */
    double arrival_unix;    /* wall clock at the arrival */
    int64_t wall_ns;        /* arrival to the end of the response */
    int64_t model_ns;       /* in model forwards and generate() calls of the request */
    int64_t outside_ns;     /* wall - model */
    double first_forward_s; /* arrival to the first forward or generate(); NaN (NULL) none */
    double cpu_s;           /* CPU time of the request's thread; NaN (NULL) for ASGI */
    int64_t forwards;       /* root module forwards of the request */
    int64_t generations;    /* generate() calls of the request */
    int64_t tokens;         /* tokens its generate() calls made; INT64_MIN (NULL) without one */
    int64_t status;         /* HTTP status sent; INT64_MIN (NULL) when none was seen */
    int32_t in_flight;      /* requests open at the arrival, this one included */
    int32_t model_concurrency; /* most requests in the model at once when this one entered it */
    uint32_t method, path;  /* intern ids */
    uint8_t server;         /* PB_SERVER_* */
    uint16_t rank;
} pb_request_row;

extern pb_table pb_table_requests __attribute__((visibility("hidden")));

/* Pushes a row; nothing when the ring is gone (detached) or recording is off. [GIL held] */
void pb_requests_push(const pb_request_row *row);

#endif
