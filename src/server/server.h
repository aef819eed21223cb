/*
 * server.h - the agent's HTTP/1.1 endpoint (libmicrohttpd), on a Unix socket and optionally TCP.
 *
 * The server answers the API of docs/architecture.md. This header is the transport; the API's
 * contract (the agent's callback types, the capture and record request structs, their limits,
 * the error shape) is api.h, which the agent includes on its own. Inside src/server, server.c
 * (this) calls routes.c (the route table) and pool.c (SQL connections and query admission);
 * neither calls back. Every connection gets its own thread (MHD_USE_THREAD_PER_CONNECTION), so a
 * slow eval never holds up a query. Queries run on pooled pb_db connections and never take the
 * GIL; eval, info and the rest are callbacks supplied by the agent.
 *
 * The job comes first (docs/security.md, "Round two"): server threads lower their priority
 * (nice + PROBING_SERVER_NICE) on their first request; at most PROBING_QUERY_THREADS queries
 * run at once, and all results in flight share one budget, PROBING_RESULTS_MB (a query reserves
 * its cap while it runs and the size of its answer until the answer is sent; one that does not
 * fit waits a few seconds, then gets 503 "busy: ..."; pool.h). A query or eval whose client
 * closed its connection is cancelled; a watchdog thread (reaper.h) closes connections whose
 * request has not been read whole within PROBING_REQUEST_DEADLINE; on TCP one address holds at
 * most 8 connections.
 *
 * The Unix socket is created here: mode 0600 and, on each request, the peer's uid is checked
 * (SO_PEERCRED): only our own uid and root are served. A socket file left by a dead agent is
 * replaced; one a live agent answers on is not (-EADDRINUSE). TCP is only opened when the user
 * asks for it (PROBING_LISTEN) and then every TCP request must prove it holds the agent's token:
 * a "Probing-HMAC-SHA256" signature made with it (common/auth.h; the answer is then signed back)
 * or, for curl, "Authorization: Bearer <token>" (else 401). The token is the user's (opts.token or
 * PROBING_TOKEN) or 32 random bytes in hex written to <socket dir>/<pid>.token (mode 0600,
 * removed on stop). /api/eval is refused on TCP (403) unless opts.tcp_eval or
 * PROBING_TCP_EVAL=1; /api/record* always is. See docs/security.md.
 *
 * All server threads run with every signal blocked, so SIGINT/SIGPIPE keep going to the traced
 * program's own threads.
 */
#ifndef PB_SERVER_SERVER_H
#define PB_SERVER_SERVER_H

#include "api.h"
#include "buf.h"
#include "db.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct pb_server pb_server;

#define PB_SERVER_TOKEN_MIN 16  /* shortest token accepted from the user */
#define PB_SERVER_TOKEN_MAX 256

/* The agent's callbacks are the types of api.h. */
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
    pb_info_fn arrivals;      /* GET /api/arrivals (bounded per-group collective arrivals); NULL: 503 */
    int (*self_rank)(void *ctx); /* the rank the process registered as in its job, or -1: a
                                  * signed TCP request for another rank is refused (common/auth.h).
                                  * NULL or -1: RANK, else 0 [server thread] */
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

/* The agent id signed requests must name (common/auth.h: PB_AUTH_AGENT_HEX hex digits, drawn
 * at start), or NULL without TCP. Borrowed; valid until pb_server_stop(). [any thread] */
const char *pb_server_agent_id(const pb_server *s);

/* The token file written for TCP (<dir>/<pid>.token), or NULL when none was written (no TCP,
 * or the token was given). Borrowed; valid until pb_server_stop(). [any thread] */
const char *pb_server_token_path(const pb_server *s);

/* Whether a peer with uid `peer` may use an agent running as `self`: the same user or root.
 * [any thread] */
int pb_server_peer_allowed(uid_t peer, uid_t self);

/* The uid of the process at the other end of the Unix socket fd (SO_PEERCRED). Returns 0 or
 * a negative errno. [any thread] */
int pb_server_peer_uid(int fd, uid_t *out);

#endif
