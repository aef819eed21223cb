/*
 * routes.h - between server.c (transport) and routes.c (what each path does); internal.
 *
 * server.c reads a whole request, then asks pb__route_request() for the response. routes.c
 * borrows SQL connections from the server's pool through the two pb__server_db_* functions.
 */
#ifndef PB_SERVER_ROUTES_H
#define PB_SERVER_ROUTES_H

#include "server.h"

/* Answers one request: fills out with the JSON body and returns the HTTP status; *allow is set
 * to the Allow header value for 405 (else NULL). body may be NULL when body_len is 0.
 * [server thread] */
int pb__route_request(pb_server *s, const char *method, const char *path, const char *body,
                      size_t body_len, pb_buf *out, const char **allow);

/* Writes {"error": <formatted message>} into out (reset first) and returns status. */
int pb__route_error(pb_buf *out, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The options the server was started with (strings owned by the server). */
const pb_server_opts *pb__server_opts(const pb_server *s);

/* Borrows a connection from the pool (opening one if none is idle). Returns 0 or the
 * pb_db_open error. [server thread] */
int pb__server_db_acquire(pb_server *s, pb_db **out);
/* Gives it back (closed if the pool is full). NULL-safe. [server thread] */
void pb__server_db_release(pb_server *s, pb_db *db);

#endif
