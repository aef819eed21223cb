/*
 * serve.h - requests: each request a server in the process serves, and the model forwards and
 * generate() calls made for it, as python.requests rows (collect/requests.h).
 *
 * A request is an object held by a context variable (contextvars): the http.server wrappers set
 * it on the handler's thread for the length of one handle_one_request(), the ASGI wrapper in the
 * task that runs the application (uvicorn runs each request in a task of its own; Starlette's
 * and FastAPI's sync endpoints run in worker threads that copy it). A root forward, or an
 * outermost generate(), whose context holds an open request is that request's: its time is the
 * request's time in the model, and it ends no training step (torch_hooks.c). Per forward this is
 * one counter test while no request is open anywhere, else one context variable read; per
 * request a few attribute reads. [GIL held]
 */
#ifndef PB_AGENT_SERVE_H
#define PB_AGENT_SERVE_H

#include <Python.h>
#include <stdint.h>

/* A root module forward begins on this thread. Returns 1 when it is made for a request (its
 * time is the request's and it ends no step), else 0. */
int pb_serve_forward_begin(void);

/* The root forward that pb_serve_forward_begin saw ends. Returns 1 when it was a request's. */
int pb_serve_forward_end(void);

/* An outermost generate() call begins / ends on this thread; begin returns 1 when it is made for
 * a request. `tokens` is what it made (new tokens x batch; INT64_MIN unknown). */
int pb_serve_generate_begin(void);
void pb_serve_generate_end(int64_t tokens);

/* python.requests.id of the open request of this context, or INT64_MIN. */
int64_t pb_serve_request_id(void);

/* Wrap the standard library's http.server.BaseHTTPRequestHandler (handle_one_request,
 * parse_request, send_response_only), or uvicorn's Config.load (so that the application it
 * loads is called through probing's ASGI wrapper). Each returns 0, or -1 with a Python
 * exception set; undone by pb_serve_remove (torch_install.c's remove). */
int pb_serve_install_http_server(void);
int pb_serve_install_uvicorn(void);
void pb_serve_remove(void);

/* Readies the request and ASGI wrapper types; made by the module init. 0 or -1 with an
 * exception set. */
int pb_serve_ready_types(void);

#endif
