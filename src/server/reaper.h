/*
 * reaper.h - closes connections whose request has not arrived whole by a deadline.
 *
 * libmicrohttpd's own idle timeout (MHD_OPTION_CONNECTION_TIMEOUT) resets on every byte, so a
 * client that sends one byte every few seconds, or many that send nothing, hold their
 * connection slots for as long as they like. A pb_reaper watches the connections of a daemon
 * that runs one thread per connection: one thread wakes each second and shuts down (SHUT_RDWR)
 * every connection still reading a request that started more than deadline_s ago; MHD then sees
 * the socket fail and closes it. A connection whose request was read whole is left alone while
 * its handler runs and its answer is sent; its next request on the same connection gets a
 * deadline of its own.
 *
 * Use from MHD's callbacks: pb_reaper_open() in MHD_CONNECTION_NOTIFY_STARTED (store the
 * result as the socket context), pb_reaper_read() when on_request has the whole request,
 * pb_reaper_next() in the request-completed notification, pb_reaper_close() in
 * MHD_CONNECTION_NOTIFY_CLOSED (MHD makes it before it closes the socket, so a watched fd is
 * never a reused one). Stop the daemon before the reaper.
 */
#ifndef PB_SERVER_REAPER_H
#define PB_SERVER_REAPER_H

typedef struct pb_reaper pb_reaper;
typedef struct pb_reaper_conn pb_reaper_conn;

/* Starts the reaper's thread (with every signal blocked). deadline_s > 0. Returns 0 and the
 * reaper in *out, or a negative errno. */
int pb_reaper_start(pb_reaper **out, double deadline_s);

/* Stops the thread and frees the reaper. Accepts NULL. Call after the daemon has stopped. */
void pb_reaper_stop(pb_reaper *r);

/* Watches the connection on fd (borrowed) from now: its first request's clock starts. Returns
 * its record (owned by the reaper until pb_reaper_close), or NULL when out of memory (then the
 * connection is not watched). [server thread] */
pb_reaper_conn *pb_reaper_open(pb_reaper *r, int fd);

/* The connection's current request was read whole: not reaped until pb_reaper_next. Accepts
 * NULL. [server thread] */
void pb_reaper_read(pb_reaper *r, pb_reaper_conn *c);

/* The answer was sent: the next request on this connection starts its clock now. Accepts NULL.
 * [server thread] */
void pb_reaper_next(pb_reaper *r, pb_reaper_conn *c);

/* The connection is closing: forget and free it. Accepts NULL. [server thread] */
void pb_reaper_close(pb_reaper *r, pb_reaper_conn *c);

/* How many connections have been shut down for missing their deadline (for tests and logs). */
unsigned long pb_reaper_reaped(pb_reaper *r);

#endif
