/*
 * requests.c - python.requests: its columns and the push; see requests.h. The ring is made and
 * registered by collect.c with the other tables.
 */
#include "requests.h"

#include "step.h"

#include <stdatomic.h>

#define COL PB_COL

static const char *const servers[] = {"http.server", "asgi", NULL};

static const pb_column request_cols[] = {
    COL("id", PB_COL_I64, pb_request_row, id, "1, 2, ... in the order the requests arrived"),
    COL("thread_id", PB_COL_I64, pb_request_row, thread_id, "threading.get_ident() of the thread the request began on: the handler's thread (http.server), the event loop's (ASGI)"),
    {"server", PB_COL_ENUM_U8, offsetof(pb_request_row, server), servers, "what served it: http.server (a BaseHTTPRequestHandler) or asgi (an ASGI application under uvicorn)"},
    COL("method", PB_COL_STR_ID_NULL, pb_request_row, method, "the request's method (GET, POST, ...); NULL when its request line could not be parsed"),
    COL("path", PB_COL_STR_ID_NULL, pb_request_row, path, "the request's path, without the query string (its first 256 bytes; past 4096 distinct paths, one placeholder)"),
    COL("status", PB_COL_I64_NULL, pb_request_row, status, "the HTTP status sent (the last one, when a handler sent several); NULL when none was seen"),
    COL("arrival", PB_COL_F64, pb_request_row, arrival_unix, "Unix time the request arrived: its request line was read (http.server), the application was called (ASGI)"),
    COL("wall", PB_COL_NS_SEC, pb_request_row, wall_ns, "seconds from the arrival to the end of the response: the handler returned (http.server), the last body was sent (ASGI)"),
    COL("model", PB_COL_NS_SEC, pb_request_row, model_ns, "seconds of the request in the model: inside root module forwards and generate() calls made for it (on its thread, or in a worker thread that runs in its context)"),
    COL("outside", PB_COL_NS_SEC, pb_request_row, outside_ns, "wall - model: the request's time outside the model (parsing, tokenising, pre- and post-processing, waiting for a lock or a batch)"),
    COL("first_forward", PB_COL_F64, pb_request_row, first_forward_s, "seconds from the arrival to the start of its first forward or generate(); NULL when it ran none"),
    COL("forwards", PB_COL_I64, pb_request_row, forwards, "root module forwards made for the request (a generate() call's prefill and decode forwards included)"),
    COL("generations", PB_COL_I64, pb_request_row, generations, "generate() calls made for the request"),
    COL("tokens", PB_COL_I64_NULL, pb_request_row, tokens, "tokens its generate() calls made (new tokens x batch size); NULL when no generate() call ran in it"),
    COL("cpu", PB_COL_F64, pb_request_row, cpu_s, "CPU seconds of the request's thread during it (http.server); NULL for ASGI, whose event loop thread serves many at once"),
    COL("in_flight", PB_COL_I32, pb_request_row, in_flight, "requests being served when it arrived, this one included"),
    COL("model_concurrency", PB_COL_I32, pb_request_row, model_concurrency, "the most requests in the model at once (this one included) when it entered the model; 0 when it ran no forward"),
    COL("rank", PB_COL_U16, pb_request_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

pb_table pb_table_requests = {
    .schema = "python", .name = "requests",
    .doc = "one row per request served (http.server, ASGI under uvicorn): method, path, status, arrival, latency, time in the model against outside it, requests in flight",
    .columns = request_cols, .ncolumns = (int)(sizeof request_cols / sizeof request_cols[0]),
    .row_size = sizeof(pb_request_row), .step_column = -1,
    .empty_reason = "empty until a request to an http.server handler or an ASGI application under uvicorn is answered",
};

void pb_requests_push(const pb_request_row *row)
{
    if (pb_table_requests.ring && atomic_load_explicit(&pb_step_enabled, memory_order_relaxed))
        pb_ring_push(pb_table_requests.ring, row);
}
