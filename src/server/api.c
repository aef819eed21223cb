/*
 * api.c - the one error shape of the HTTP API; see api.h.
 *
 * Kept apart from the routes and the transport so that the agent's callbacks, the routes, the
 * connection pool and the transport all write the same {"error": ...} body without any of them
 * calling another.
 */
#include "api.h"

#include "jsonw.h"

#include <stdarg.h>
#include <stdio.h>

int pb_api_error(pb_buf *out, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pb_buf_reset(out);
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "error");
    pb_jsonw_str(&w, msg);
    pb_jsonw_obj_end(&w);
    return status;
}
