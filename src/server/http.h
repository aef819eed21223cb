/*
 * http.h - the one way probing's HTTP servers build and send an answer (libmicrohttpd): the
 * agent's API (server.c), the web view (src/cli/serve/ui.c) and the exporter
 * (src/cli/serve/exporter.c). Each server chooses its own headers; this file owns making the
 * response, its Content-Type and extra headers, queueing it and letting it go.
 * [server thread: the thread libmicrohttpd calls a server's handler on]
 */
#ifndef PB_SERVER_HTTP_H
#define PB_SERVER_HTTP_H

#include <microhttpd.h>
#include <stddef.h>

/* A response holding body[0..len) with Content-Type type and the extra headers: a list of
 * name, value pairs ended by a NULL name; a pair whose value is NULL is left out (headers may
 * be NULL: none). mode says who owns body: MHD_RESPMEM_MUST_FREE takes it (free()d once sent,
 * and at once when this fails), MHD_RESPMEM_MUST_COPY copies it, MHD_RESPMEM_PERSISTENT
 * borrows it for as long as the response lives (static text). Borrows type and headers.
 * Returns the response, or NULL when it cannot be made (out of memory). */
struct MHD_Response *pb_http_response(void *body, size_t len, enum MHD_ResponseMemoryMode mode,
                                      const char *type, const char *const *headers);

/* Queues response (NULL: MHD_NO, as when it could not be made) with status on conn, and
 * destroys this reference to it. Returns libmicrohttpd's result. */
enum MHD_Result pb_http_queue(struct MHD_Connection *conn, unsigned status,
                              struct MHD_Response *response);

/* pb_http_response() and pb_http_queue() in one: the common case. */
enum MHD_Result pb_http_respond(struct MHD_Connection *conn, unsigned status, void *body,
                                size_t len, enum MHD_ResponseMemoryMode mode, const char *type,
                                const char *const *headers);

#endif
