/*
 * server.h - the agent's HTTP/1.1 endpoint (libmicrohttpd), on a Unix socket and optionally TCP.
 *
 * The server answers the API of docs/architecture.md (routes.c holds the route table). Every
 * connection gets its own thread (MHD_USE_THREAD_PER_CONNECTION), so a slow eval never holds up
 * a query. Queries run on pooled pb_db connections and never take the GIL; eval and info are
 * callbacks supplied by the agent.
 *
 * The job comes first (docs/security.md, "Round two"): server threads lower their priority
 * (nice + PROBING_SERVER_NICE) on their first request; at most PROBING_QUERY_THREADS queries
 * run at once, and all results in flight share one budget, PROBING_RESULTS_MB (a query reserves
 * its cap while it runs and the size of its answer until the answer is sent; one that does not
 * fit waits a few seconds, then gets 503 "busy: ..."). A query or eval whose client closed its
 * connection is cancelled; a watchdog thread closes connections whose request has not been read
 * whole within PROBING_REQUEST_DEADLINE; on TCP one address holds at most 8 connections.
 *
 * The Unix socket is created here: mode 0600 and, on each request, the peer's uid is checked
 * (SO_PEERCRED): only our own uid and root are served. A socket file left by a dead agent is
 * replaced; one a live agent answers on is not (-EADDRINUSE). TCP is only opened when the user
 * asks for it (PROBING_LISTEN) and then every TCP request must carry the agent's token in
 * "Authorization: Bearer <token>" (else 401). The token is the user's (opts.token or
 * PROBING_TOKEN) or 32 random bytes in hex written to <socket dir>/<pid>.token (mode 0600,
 * removed on stop). /api/eval is refused on TCP (403) unless opts.tcp_eval or
 * PROBING_TCP_EVAL=1; /api/record* always is. See docs/security.md.
 *
 * All server threads run with every signal blocked, so SIGINT/SIGPIPE keep going to the traced
 * program's own threads.
 */
#ifndef PB_SERVER_SERVER_H
#define PB_SERVER_SERVER_H

#include "buf.h"
#include "db.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct pb_server pb_server;

#define PB_SERVER_TOKEN_MIN 16  /* shortest token accepted from the user */
#define PB_SERVER_TOKEN_MAX 256

/* Runs code and fills out_json with the whole /api/eval response body; may set *http_status
 * (200 when left alone; 504 for a timeout, ...). While it waits it asks cancelled(cancel_ctx)
 * now and then: non-zero (PB_DB_CANCEL_*: the client left, the server stops) means stop
 * waiting and interrupt the code. Returns 0 or an error (then, if out_json is empty, the server
 * answers 500 with pb_strerror()). [server thread] */
typedef int (*pb_eval_fn)(void *ctx, const char *code, double timeout_s, pb_db_cancel_fn cancelled,
                          void *cancel_ctx, pb_buf *out_json, int *http_status);

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

typedef struct pb_server_opts {
    const char *unix_path;    /* socket file to create (copied); NULL = no Unix socket */
    const char *tcp_listen;   /* "host:port", "[v6]:port", ":port" (all interfaces), or NULL */
    pb_eval_fn eval;          /* NULL: /api/eval answers 503 */
    pb_info_fn info;          /* NULL: /api/info answers 503 */
    pb_detach_fn detach;      /* NULL: /api/detach answers 503 */
    pb_capture_fn capture;    /* NULL: /api/capture* answer 503 */
    pb_record_fn record;      /* NULL: /api/record* answer 503 */
    void *ctx;                /* passed to eval, info, detach, capture and record */
    pb_query_limits limits;   /* zero fields take PROBING_MAX_RESULT_MB / PROBING_QUERY_TIMEOUT */
    int max_connections;      /* <= 0: 64; the next 8 get 503 "too many connections", later ones are closed */
    size_t max_request_bytes; /* larger request bodies get 413; 0: 4 MB */
    const char *token;        /* TCP bearer token (copied); NULL: PROBING_TOKEN, else generated */
    int tcp_eval;             /* 1: serve /api/eval on TCP; 0: only if PROBING_TCP_EVAL=1 */
    pb_info_fn job;           /* GET /api/job (the job's roster); NULL: 503 */
    pb_info_fn rank;          /* GET /api/rank (this rank's step and collectives); NULL: 503 */
    pb_info_fn stack;         /* GET /api/stack (this process's Python stacks); NULL: 503 */
} pb_server_opts;

/* Opens the listeners and starts serving. *out is owned by the caller (pb_server_stop).
 * Returns 0; -EADDRINUSE (a live agent owns unix_path, or the TCP port is taken); -EEXIST
 * (unix_path exists and is not a socket: left alone); -ENAMETOOLONG; -EINVAL (bad tcp_listen,
 * no listener asked for); PB_EBADTOKEN (a given token shorter than PB_SERVER_TOKEN_MIN, longer
 * than PB_SERVER_TOKEN_MAX or containing whitespace); another negative errno; or PB_EINTERNAL (libmicrohttpd refused to
 * start). Nothing is left open on failure. [any thread; registry complete] */
int pb_server_start(pb_server **out, const pb_server_opts *opts);

/* Stops accepting, interrupts running queries (they answer 503) and wakes queued ones, waits
 * for running requests to finish (an eval waiting in the agent returns once pb_eval_shutdown()
 * was called, which the agent does first), closes the sockets and removes the Unix socket file
 * if it is still the one we created. NULL-safe. After pb_server_forget_after_fork() it does
 * nothing. [any thread but a server thread] */
void pb_server_stop(pb_server *s);

/* For the child after fork(): closes the listening sockets without touching threads, locks or
 * the socket file (the parent still serves on it); the child never serves. s is then inert
 * (its memory is left behind). [child after fork, async-signal-safe: only close()] */
void pb_server_forget_after_fork(pb_server *s);

/* The TCP port actually bound (useful with port 0), or 0 without TCP. [any thread] */
int pb_server_tcp_port(const pb_server *s);

/* The token file written for TCP (<dir>/<pid>.token), or NULL when none was written (no TCP,
 * or the token was given). Borrowed; valid until pb_server_stop(). [any thread] */
const char *pb_server_token_path(const pb_server *s);

/* 1 when given (given_len bytes, not NUL-terminated) equals the non-empty expected token; the
 * time taken does not depend on where they differ. [any thread] */
int pb_server_token_equal(const char *given, size_t given_len, const char *expected);

/* Whether a peer with uid `peer` may use an agent running as `self`: the same user or root.
 * [any thread] */
int pb_server_peer_allowed(uid_t peer, uid_t self);

/* The uid of the process at the other end of the Unix socket fd (SO_PEERCRED). Returns 0 or
 * a negative errno. [any thread] */
int pb_server_peer_uid(int fd, uid_t *out);

#endif
