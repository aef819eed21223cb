/*
 * routes.h - between server.c (transport) and routes.c (what each path does); internal.
 *
 * server.c reads a whole request, then asks pb__route_request() for the response. routes.c
 * borrows SQL connections from the server's pool through the two pb__server_db_* functions.
 */
#ifndef PB_SERVER_ROUTES_H
#define PB_SERVER_ROUTES_H

#include "db.h"
#include "server.h"

/* Answers one request: fills out with the JSON body and returns the HTTP status; *allow is set
 * to the Allow header value for 405 (else NULL). body may be NULL when body_len is 0.
 * [server thread] */
int pb__route_request(pb_server *s, void *req_ctx, const char *method, const char *path,
                      const char *body, size_t body_len, pb_buf *out, const char **allow);

/* Writes {"error": <formatted message>} into out (reset first) and returns status. */
int pb__route_error(pb_buf *out, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The options the server was started with (strings owned by the server). */
const pb_server_opts *pb__server_opts(const pb_server *s);

/* Borrows a connection from the pool (opening one if none is idle). Returns 0 or the
 * pb_db_open error. [server thread] */
int pb__server_db_acquire(pb_server *s, pb_db **out);
/* Gives it back (closed if the pool is full). NULL-safe. [server thread] */
void pb__server_db_release(pb_server *s, pb_db *db);

/* req_ctx: the server's state of the request being answered (opaque here). */

/* Why the request should stop now: PB_DB_CANCEL_EXITING (the server is stopping),
 * PB_DB_CANCEL_CLIENT_GONE (the client closed its connection) or 0. A pb_db_cancel_fn.
 * [server thread] */
int pb__server_cancelled(void *req_ctx);

/* Waits (at most a few seconds) for a query slot (PROBING_QUERY_THREADS) and for want bytes of
 * the result budget (PROBING_RESULTS_MB; want is first cut to the budget), then registers db
 * as running (a stop interrupts it) and sets *cap to the byte limit the query gets. Returns 0,
 * or writes the 503 answer ("busy: N MB of results in flight", "the process is exiting") into
 * out and returns 503. [server thread] */
int pb__server_query_begin(pb_server *s, void *req_ctx, pb_db *db, size_t want, size_t *cap,
                           pb_buf *out);

/* After a begun query: frees its slot and keeps `kept` bytes (the answer's) of its reservation
 * until the answer has been sent. [server thread] */
void pb__server_query_end(pb_server *s, void *req_ctx, pb_db *db, size_t kept);

#endif
