/*
 * pool.h - the SQL connections of the server and the admission of queries to them; internal to
 * src/server.
 *
 * Opening a pb_db creates a virtual table per registered table, so idle connections are kept (at
 * most 8) and lent to one query at a time. The job comes first (docs/security.md, "Round two"): at most
 * PROBING_QUERY_THREADS queries run at once, and all results in flight share one budget,
 * PROBING_RESULTS_MB. A query reserves its result cap while it runs and the size of its answer
 * until the answer has been sent; an eval reserves its ceiling (PB_EVAL_RESERVE, api.h) when it
 * starts and the table list a megabyte, then each keeps its answer's size until it is sent. Evals
 * run one at a time (an eval slot): one that waits for the slot holds nothing of the budget. One
 * that does not fit waits a few seconds, then gets 503 "busy: ...". A stop interrupts the running queries and turns the waiting ones away.
 *
 * The routes (routes.c) borrow connections and begin and end queries; the transport (server.c)
 * creates the pool, gives back what an answer held once it has been sent, and stops it. The
 * pool calls neither: below both of them, it knows only src/sql and the API's error shape.
 * A request's hold on the result budget is a size_t the caller keeps (zero at first) and passes
 * to every call about that request.
 */
#ifndef PB_SERVER_POOL_H
#define PB_SERVER_POOL_H

#include "buf.h"
#include "db.h"

#include <stddef.h>

typedef struct pb__pool pb__pool;

/* Makes an empty pool with the limits of PROBING_QUERY_THREADS (at least 1) and
 * PROBING_RESULTS_MB (at least 1 MB). *out is owned by the caller (pb__pool_free). Returns 0 or
 * -ENOMEM. [any thread] */
int pb__pool_new(pb__pool **out);

/* Interrupts the queries running now (they return PB_ECANCELLED) and wakes the waiting ones;
 * every later pb__pool_query_begin answers 503. NULL-safe. [any thread] */
void pb__pool_stop(pb__pool *p);

/* Closes the idle connections and frees the pool. Every borrowed connection must have been
 * given back and every request's reservation released. NULL-safe. [any thread, once no server
 * thread runs] */
void pb__pool_free(pb__pool *p);

/* Borrows an idle connection, or opens one if none is idle. Returns 0 or the pb_db_open error.
 * [server thread] */
int pb__pool_acquire(pb__pool *p, pb_db **out);

/* Gives db back (closed if the pool already keeps 8). NULL-safe. [server thread] */
void pb__pool_release(pb__pool *p, pb_db *db);

/* Waits (at most 5 s) for a query slot and for want bytes of the result budget (want is first
 * cut to the budget), then registers db as running (a stop interrupts it), adds what it took to
 * *reserved and sets *cap to the byte limit the query gets. Returns 0, or writes the 503 answer
 * ("busy: N MB of results in flight ...", "busy: N queries are running ...", "the process is
 * exiting ...") into out and returns 503. [server thread] */
int pb__pool_query_begin(pb__pool *p, pb_db *db, size_t want, size_t *cap, size_t *reserved,
                         pb_buf *out);

/* For an answer that is not a query's (an eval's, the table list): waits (at most 5 s) for
 * want bytes of the result budget (want is first cut to the budget), with no query slot, and
 * adds them to *reserved. Returns 0, or writes the 503 answer into out and returns 503: "busy:
 * N MB of results in flight (the limit is M MB, PROBING_RESULTS_MB); <hint>", or "the process
 * is exiting or probing is detaching; <not_done>". [server thread] */
int pb__pool_reserve(pb__pool *p, size_t want, size_t *reserved, const char *not_done,
                     const char *hint, pb_buf *out);

/* For an eval: waits until no other eval holds the eval slot (at most *wait_s, its timeout)
 * and want bytes of the result budget are free (at most 5 s once the slot is free), checking
 * cancelled(cancel_ctx) every 100 ms; then takes the slot, adds want (first cut to the budget)
 * to *reserved and takes the time it waited off *wait_s (leaving at least 1 ms). Evals that
 * wait hold nothing of the budget. Returns 0, or writes the 503 answer into out and returns
 * 503: "busy: another eval is running (evals run one at a time) and this one waited its whole
 * timeout, T s; ...", "busy: N MB of results in flight (the limit is M MB, PROBING_RESULTS_MB);
 * try again in a moment (the code was not run)", "eval was cancelled: ...", "the process is
 * exiting ...". Release the slot with pb__pool_eval_end. [server thread] */
int pb__pool_eval_begin(pb__pool *p, size_t want, double *wait_s, pb_db_cancel_fn cancelled,
                        void *cancel_ctx, size_t *reserved, pb_buf *out);

/* The eval that holds the slot is over (its capture buffers are gone): the next one may run.
 * What it reserved stays on its *reserved (pb__pool_results_kept, _sent). [server thread] */
void pb__pool_eval_end(pb__pool *p);

/* The answer has been built: its hold becomes exactly kept bytes (its size), smaller or larger
 * than what was reserved, until pb__pool_results_sent. [server thread] */
void pb__pool_results_kept(pb__pool *p, size_t kept, size_t *reserved);

/* After a begun query: frees its slot and keeps `kept` bytes (the answer's) of *reserved until
 * pb__pool_results_sent. [server thread] */
void pb__pool_query_end(pb__pool *p, pb_db *db, size_t kept, size_t *reserved);

/* The answer of a request has been sent (or the client left): gives back *reserved and sets it
 * to 0. [server thread] */
void pb__pool_results_sent(pb__pool *p, size_t *reserved);

#endif
