/*
 * api.h - the contract of the agent's HTTP API: what the agent hands the server and what it
 * gets back, with no transport in sight.
 *
 * The routes (routes.c) check each request body and then call the agent through the callback
 * types below; the agent fills the response body and returns the HTTP status. Limits the routes
 * enforce on the agent's behalf (PB_CAPTURE_MAX_STEPS, PB_RECORD_PATH_MAX) live here too, so the
 * agent and the CLI can cite them. Every JSON error body of the API has the one shape
 * {"error": "<what went wrong and what to do next>"}, written by pb_api_error(); callbacks use it
 * for their own refusals. The endpoints themselves are listed in docs/architecture.md.
 *
 * The transport (server.h: sockets, libmicrohttpd, tokens) includes this header; the agent's
 * capture, record and lifecycle code includes this one only for the contract.
 */
#ifndef PB_SERVER_API_H
#define PB_SERVER_API_H

#include "buf.h"
#include "db.h"

#include <stdint.h>

/* Runs code and fills out_json with the whole /api/eval response body; may set *http_status
 * (200 when left alone; 504 for a timeout, ...). While it waits it asks cancelled(cancel_ctx)
 * now and then: non-zero (PB_DB_CANCEL_*: the client left, the server stops) means stop
 * waiting and interrupt the code. Returns 0 or an error (then, if out_json is empty, the server
 * answers 500 with pb_strerror()). [server thread] */
typedef int (*pb_eval_fn)(void *ctx, const char *code, double timeout_s, pb_db_cancel_fn cancelled,
                          void *cancel_ctx, pb_buf *out_json, int *http_status);

/* What one eval may hold in memory, so that probing's memory has a stated ceiling
 * (docs/security.md). The eval thread (src/agent/service/eval.c) captures each of stdout and
 * stderr up to PB_EVAL_CAPTURE_MAX bytes and the traceback up to PB_EVAL_ERROR_MAX, counted as
 * they will be in the JSON answer (escaped: a control character counts six bytes, \u00XX);
 * the raw captured bytes are never more than their escaped size. So an answer is at most
 * PB_EVAL_ANSWER_MAX, and while it is built the captures and the answer exist together: the
 * route (routes.c) reserves PB_EVAL_RESERVE of the result budget when the eval starts, for the
 * one eval that runs at a time. */
#define PB_EVAL_CAPTURE_MAX ((size_t)16 << 20)
#define PB_EVAL_ERROR_MAX ((size_t)1 << 20)
#define PB_EVAL_ANSWER_MAX (2 * PB_EVAL_CAPTURE_MAX + PB_EVAL_ERROR_MAX + ((size_t)64 << 10))
#define PB_EVAL_RESERVE (2 * PB_EVAL_ANSWER_MAX)

/* Fills the /api/info response body. Returns 0 or an error (-> 500). [server thread] */
typedef int (*pb_info_fn)(void *ctx, pb_buf *out_json);

/* Asked to detach (POST /api/detach), called once the 200 answer has been sent in full (from
 * MHD's request-completed callback, so it must not stop the server itself: it hands the work
 * to another thread and returns). [server thread] */
typedef void (*pb_detach_fn)(void *ctx);

/* Capture control (docs/architecture.md): POST /api/capture starts one, GET /api/capture says
 * how it goes, POST /api/capture/cancel cancels it, GET /api/capture/trace sends its Chrome
 * trace. routes.c checks the request body; the agent decides. */
#define PB_CAPTURE_MAX_STEPS 20

typedef struct pb_capture_request {
    int steps;     /* START: 1..PB_CAPTURE_MAX_STEPS */
    int memory;    /* START: torch.profiler profile_memory */
    int shapes;    /* START: record_shapes */
    int stack;     /* START: with_stack */
    int trace;     /* START: keep a Chrome trace for GET /api/capture/trace */
    uint32_t id;   /* CANCEL: the capture to cancel; 0 = the current one */
} pb_capture_request;

typedef enum pb_capture_verb {
    PB_CAPTURE_START,  /* req: steps and options */
    PB_CAPTURE_STATUS,
    PB_CAPTURE_CANCEL, /* req: id */
    PB_CAPTURE_TRACE,  /* out: the trace file itself */
    PB_CAPTURE_CLOSE,  /* before a detach: refuse new captures; 409 while one is pending or running */
} pb_capture_verb;

/* Fills out with the response body and returns the HTTP status (CLOSE: 200 and out untouched
 * when closed). req is NULL for STATUS, TRACE and CLOSE. [server thread] */
typedef int (*pb_capture_fn)(void *ctx, pb_capture_verb verb, const pb_capture_request *req,
                             pb_buf *out);

/* Recording control (docs/recordings.md): POST /api/record starts a recording into a file the
 * agent writes, GET /api/record says how it goes, POST /api/record/stop stops it. routes.c checks
 * the request body (path absolute, at most PB_RECORD_PATH_MAX bytes); the agent decides. Refused
 * on TCP (403), whatever the token: a network client would name a file on the agent's machine. */
#define PB_RECORD_PATH_MAX 4095

typedef struct pb_record_request {
    const char *path; /* START: absolute; borrowed for the call */
    int force;        /* START: replace an existing file */
} pb_record_request;

typedef enum pb_record_verb { PB_RECORD_START, PB_RECORD_STATUS, PB_RECORD_STOP } pb_record_verb;

/* Fills out with the response body and returns the HTTP status. req is NULL for STATUS and
 * STOP. [server thread] */
typedef int (*pb_record_fn)(void *ctx, pb_record_verb verb, const pb_record_request *req,
                            pb_buf *out);

/* Writes {"error": <formatted message>} into out (reset first) and returns status, so that a
 * handler can `return pb_api_error(out, 409, "...")`. A message longer than 1023 bytes is cut.
 * [any thread] */
int pb_api_error(pb_buf *out, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
