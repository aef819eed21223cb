/*
 * serve.c - one request as a row: when it arrived, what it asked (method, path), what it answered
 * (status), how long it took, how much of that was in the model, and how many requests were in
 * flight and in the model with it; see serve.h.
 *
 * Where a request begins and ends, read from the servers' source:
 *   - http.server: BaseHTTPRequestHandler.handle() calls handle_one_request() once per request of
 *     the connection; that reads the request line (a keep-alive connection waits there for the
 *     next one), calls parse_request() and then the do_<METHOD> handler. The request arrives at
 *     parse_request() (the line is read) and ends when handle_one_request() returns; the status is
 *     the code send_response_only() was given (send_response and send_error go through it).
 *   - ASGI under uvicorn: Config.load() builds the application every protocol calls, once per
 *     HTTP request, as app(scope, receive, send) inside the task that serves that request. The
 *     loaded application is replaced by a wrapper (pb_asgi_app) that begins the request at that
 *     call and passes a wrapper of send (pb_asgi_send), which reads the status off
 *     http.response.start and ends the request at the last http.response.body.
 * A request the application never finished (it raised before its last body, the client went
 * away) ends when its object is freed, with the context that held it.
 *
 * The time in the model is the union of the request's root forwards and generate() calls:
 * model_depth counts them, and in_model (how many requests are in the model now) gives each
 * request the most it saw as it entered (model_concurrency). Everything here holds the GIL.
 */
#include "serve.h"

#include "clock.h"
#include "intern.h"
#include "requests.h"
#include "step.h"
#include "wrap.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

typedef struct pb_request {
    PyObject_HEAD
    pb_request_row row;
    int64_t start_ns, model_start_ns, cpu_start_ns;
    int64_t cpu_thread; /* the thread whose CPU time cpu_start_ns is */
    int model_depth;    /* forwards and generate() calls of this request running now */
    uint8_t open;
} pb_request;

static PyTypeObject request_type;
static PyObject *current_var; /* contextvars.ContextVar("probing_request") */
static int64_t next_id = 1;
static int open_requests, in_model;
static uint32_t paths_interned; /* distinct paths are capped: a path is often an id */
#define MAX_PATHS 4096
#define MAX_PATH_BYTES 256

/* ---- one request ---- */

static pb_request *request_begin(uint8_t server, int with_cpu)
{
    pb_request *r = PyObject_New(pb_request, &request_type);
    if (!r) {
        PyErr_Clear();
        return NULL;
    }
    memset(&r->row, 0, sizeof r->row);
    r->row.id = next_id++;
    r->row.thread_id = (int64_t)PyThread_get_thread_ident();
    r->row.arrival_unix = pb_wall_s();
    r->row.tokens = r->row.status = INT64_MIN;
    r->row.first_forward_s = r->row.cpu_s = NAN;
    r->row.server = server;
    r->row.rank = pb_step_rank();
    r->row.in_flight = ++open_requests;
    r->model_depth = 0;
    r->open = 1;
    r->cpu_thread = r->row.thread_id;
    r->cpu_start_ns = with_cpu ? pb_thread_cpu_ns() : -1;
    r->start_ns = r->model_start_ns = pb_now_ns();
    return r;
}

static void model_enter(pb_request *r)
{
    if (r->model_depth++ > 0) return;
    int64_t now = pb_now_ns();
    r->model_start_ns = now;
    if (isnan(r->row.first_forward_s)) r->row.first_forward_s = (double)(now - r->start_ns) / 1e9;
    if (++in_model > r->row.model_concurrency) r->row.model_concurrency = in_model;
}

static void model_leave(pb_request *r)
{
    if (r->model_depth <= 0 || --r->model_depth > 0) return; /* 0: the request ended meanwhile */
    in_model--;
    r->row.model_ns += pb_now_ns() - r->model_start_ns;
}

/* The request is answered (or given up): its row. Only the first call of a request counts. */
static void request_end(pb_request *r)
{
    if (!r->open) return;
    r->open = 0;
    open_requests--;
    int64_t now = pb_now_ns();
    if (r->model_depth > 0) { /* a forward for it still runs on another thread */
        r->model_depth = 0;
        in_model--;
        r->row.model_ns += now - r->model_start_ns;
    }
    r->row.wall_ns = now - r->start_ns;
    r->row.outside_ns = r->row.wall_ns > r->row.model_ns ? r->row.wall_ns - r->row.model_ns : 0;
    if (r->cpu_start_ns >= 0 && (int64_t)PyThread_get_thread_ident() == r->cpu_thread) {
        int64_t cpu = pb_thread_cpu_ns() - r->cpu_start_ns;
        if (cpu >= 0) r->row.cpu_s = (double)cpu / 1e9;
    }
    pb_requests_push(&r->row);
}

static void request_dealloc(PyObject *self)
{
    request_end((pb_request *)self);
    PyObject_Free(self);
}

static PyTypeObject request_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "probing._agent.Request",
    .tp_basicsize = sizeof(pb_request),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = request_dealloc,
    .tp_doc = "probing: one request being served (python.requests)",
};

/* The intern id of a method or path (its first `max` bytes); 0 for anything but a str. */
static uint32_t intern_text(PyObject *s, int is_path)
{
    if (!s || !PyUnicode_Check(s)) return 0;
    Py_ssize_t len = 0;
    const char *c = PyUnicode_AsUTF8AndSize(s, &len);
    if (!c) {
        PyErr_Clear();
        return 0;
    }
    if (!is_path) return pb_intern(c, (size_t)(len > 32 ? 32 : len));
    const char *q = memchr(c, '?', (size_t)len);
    if (q) len = q - c;
    if (len > MAX_PATH_BYTES) len = MAX_PATH_BYTES;
    if (paths_interned >= MAX_PATHS) return pb_intern_cstr("(more distinct paths than probing keeps)");
    uint32_t before = pb_intern_count(), id = pb_intern(c, (size_t)len);
    if (pb_intern_count() != before) paths_interned++;
    return id;
}

/* This context's open request (new reference), or NULL. */
static pb_request *current(void)
{
    if (!open_requests || !current_var) return NULL;
    PyObject *v = NULL;
    if (PyContextVar_Get(current_var, NULL, &v) < 0) {
        PyErr_Clear();
        return NULL;
    }
    if (v && Py_TYPE(v) == &request_type && ((pb_request *)v)->open) return (pb_request *)v;
    Py_XDECREF(v);
    return NULL;
}

/* ---- forwards and generate() calls (torch_hooks.c) ---- */

static __thread pb_request *forward_req, *generate_req; /* owned: the request of the running one */

int pb_serve_forward_begin(void)
{
    if (forward_req) { /* a root forward that never ended (an exception skipped its post-hook) */
        model_leave(forward_req);
        Py_CLEAR(forward_req);
    }
    if (!open_requests) return 0;
    pb_request *r = current();
    if (!r) return 0;
    r->row.forwards++;
    model_enter(r);
    forward_req = r;
    return 1;
}

int pb_serve_forward_end(void)
{
    pb_request *r = forward_req;
    if (!r) return 0;
    forward_req = NULL;
    model_leave(r);
    Py_DECREF(r);
    return 1;
}

int pb_serve_generate_begin(void)
{
    if (generate_req) {
        model_leave(generate_req);
        Py_CLEAR(generate_req);
    }
    pb_request *r = current();
    if (!r) return 0;
    r->row.generations++;
    model_enter(r);
    generate_req = r;
    return 1;
}

void pb_serve_generate_end(int64_t tokens)
{
    pb_request *r = generate_req;
    if (!r) return;
    generate_req = NULL;
    if (tokens != INT64_MIN) r->row.tokens = (r->row.tokens == INT64_MIN ? 0 : r->row.tokens) + tokens;
    model_leave(r);
    Py_DECREF(r);
}

int64_t pb_serve_request_id(void)
{
    pb_request *r = current();
    if (!r) return INT64_MIN;
    int64_t id = r->row.id;
    Py_DECREF(r);
    return id;
}

/* ---- http.server: BaseHTTPRequestHandler ---- */

static PyObject *http_handler_cls, *wrap_handle_one, *wrap_parse, *wrap_send_response;

static __thread struct {
    int depth;        /* handle_one_request() calls running on this thread */
    pb_request *req;  /* owned: the request its parse_request() began */
    PyObject *token;  /* owned: current_var's token, to put the context back */
} http;

/* Puts current_var back as it was before the request (its token), clearing the Python error. */
static void http_reset_context(void)
{
    if (!http.token) return;
    if (PyContextVar_Reset(current_var, http.token) < 0) { /* the handler switched contexts */
        PyErr_Clear();
        PyObject *t = PyContextVar_Set(current_var, Py_None);
        Py_XDECREF(t);
        PyErr_Clear();
    }
    Py_CLEAR(http.token);
}

/* BaseHTTPRequestHandler.handle_one_request(self): ends the request its parse_request began. */
static PyObject *http_handle_one(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    http.depth++;
    PyObject *res = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    if (--http.depth > 0 || !http.req) return res;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    pb_request *r = http.req;
    http.req = NULL;
    if (PyVectorcall_NARGS(nargsf) >= 1) { /* set by parse_request */
        PyObject *command = PyObject_GetAttrString(args[0], "command");
        PyObject *path = command ? PyObject_GetAttrString(args[0], "path") : NULL;
        PyErr_Clear();
        r->row.method = intern_text(command, 0);
        r->row.path = intern_text(path, 1);
        Py_XDECREF(command);
        Py_XDECREF(path);
    }
    request_end(r);
    Py_DECREF(r);
    http_reset_context();
    PyErr_Restore(et, ev, tb);
    return res;
}

/* BaseHTTPRequestHandler.parse_request(self): the request line was read, the request arrived. */
static PyObject *http_parse(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (http.depth > 0 && !http.req && current_var) {
        pb_request *r = request_begin(PB_SERVER_HTTP, 1);
        if (r) {
            http.req = r;
            http.token = PyContextVar_Set(current_var, (PyObject *)r);
            if (!http.token) PyErr_Clear();
        }
    }
    return PyObject_Vectorcall(orig, args, nargsf, kwnames);
}

/* BaseHTTPRequestHandler.send_response_only(self, code, message=None): the status. */
static PyObject *http_send_response(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (http.req && PyVectorcall_NARGS(nargsf) >= 2 && PyLong_Check(args[1])) {
        long long code = PyLong_AsLongLong(args[1]); /* an HTTPStatus is an int */
        if (code == -1 && PyErr_Occurred()) PyErr_Clear();
        else http.req->row.status = code;
    }
    return PyObject_Vectorcall(orig, args, nargsf, kwnames);
}

/* ---- ASGI: the application uvicorn loaded, and the send it is given ---- */

typedef struct pb_asgi_send {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    pb_request *req; /* owned */
    PyObject *send;  /* owned: the server's send */
} pb_asgi_send;

typedef struct pb_asgi_app {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *app; /* owned: the application as uvicorn loaded it */
} pb_asgi_app;

static PyTypeObject asgi_send_type, asgi_app_type;

/* An item of an ASGI message (a dict with str keys), borrowed, or NULL. */
static PyObject *item(PyObject *d, const char *key)
{
    PyObject *v = PyDict_GetItemString(d, key); /* borrowed; never raises */
    return v;
}

static int is_str(PyObject *o, const char *s) { return o && PyUnicode_Check(o) && PyUnicode_CompareWithASCIIString(o, s) == 0; }

/* send(message): http.response.start carries the status, the last http.response.body (no
 * more_body, or a false one) ends the request. Then the server's send, with the same message. */
static PyObject *asgi_send_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    pb_asgi_send *s = (pb_asgi_send *)self;
    if (PyVectorcall_NARGS(nargsf) == 1 && !kwnames && PyDict_Check(args[0]) && s->req->open) {
        PyObject *type = item(args[0], "type");
        if (is_str(type, "http.response.start")) {
            PyObject *status = item(args[0], "status");
            if (status && PyLong_Check(status)) {
                long long code = PyLong_AsLongLong(status);
                if (code == -1 && PyErr_Occurred()) PyErr_Clear();
                else s->req->row.status = code;
            }
        } else if (is_str(type, "http.response.body")) {
            PyObject *more = item(args[0], "more_body");
            int again = more ? PyObject_IsTrue(more) : 0;
            if (again < 0) PyErr_Clear();
            if (again <= 0) request_end(s->req);
        }
    }
    return PyObject_Vectorcall(s->send, args, nargsf, kwnames);
}

static int asgi_send_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((pb_asgi_send *)self)->send);
    return 0;
}

static int asgi_send_clear(PyObject *self)
{
    Py_CLEAR(((pb_asgi_send *)self)->send);
    return 0;
}

static void asgi_send_dealloc(PyObject *self)
{
    pb_asgi_send *s = (pb_asgi_send *)self;
    PyObject_GC_UnTrack(self);
    Py_CLEAR(s->req);
    Py_CLEAR(s->send);
    PyObject_GC_Del(self);
}

/* app(scope, receive, send): an HTTP request begins, in the context of the task that serves it
 * (the context variable stays set there: the task is this request's). */
static PyObject *asgi_app_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    pb_asgi_app *a = (pb_asgi_app *)self;
    PyObject *scope = PyVectorcall_NARGS(nargsf) == 3 && !kwnames ? args[0] : NULL;
    if (!scope || !PyDict_Check(scope) || !current_var || !is_str(item(scope, "type"), "http") ||
        !atomic_load_explicit(&pb_step_enabled, memory_order_relaxed))
        return PyObject_Vectorcall(a->app, args, nargsf, kwnames); /* lifespan, websocket, off */
    pb_request *outer = current();
    if (outer) { /* an application that calls another one for the same request */
        Py_DECREF(outer);
        return PyObject_Vectorcall(a->app, args, nargsf, kwnames);
    }
    pb_request *r = request_begin(PB_SERVER_ASGI, 0);
    pb_asgi_send *s = r ? PyObject_GC_New(pb_asgi_send, &asgi_send_type) : NULL;
    if (!s) {
        PyErr_Clear();
        Py_XDECREF(r);
        return PyObject_Vectorcall(a->app, args, nargsf, kwnames);
    }
    r->row.method = intern_text(item(scope, "method"), 0);
    r->row.path = intern_text(item(scope, "path"), 1);
    s->vectorcall = asgi_send_call;
    s->req = r;
    Py_INCREF(r);
    s->send = args[2];
    Py_INCREF(s->send);
    PyObject_GC_Track((PyObject *)s);
    PyObject *token = PyContextVar_Set(current_var, (PyObject *)r);
    if (!token) PyErr_Clear();
    Py_XDECREF(token);
    PyObject *call[3] = {scope, args[1], (PyObject *)s};
    PyObject *res = PyObject_Vectorcall(a->app, call, 3, NULL);
    Py_DECREF(s);
    if (!res) { /* raised before its coroutine: nothing was answered */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        request_end(r);
        PyErr_Restore(et, ev, tb);
    }
    Py_DECREF(r);
    return res;
}

static int asgi_app_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((pb_asgi_app *)self)->app);
    return 0;
}

static int asgi_app_clear(PyObject *self)
{
    Py_CLEAR(((pb_asgi_app *)self)->app);
    return 0;
}

static void asgi_app_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    asgi_app_clear(self);
    PyObject_GC_Del(self);
}

/* Attributes the wrapper does not have are the application's (uvicorn reads none, a user may). */
static PyObject *asgi_app_getattro(PyObject *self, PyObject *name)
{
    PyObject *v = PyObject_GenericGetAttr(self, name);
    if (v || !PyErr_ExceptionMatches(PyExc_AttributeError) || !((pb_asgi_app *)self)->app) return v;
    PyErr_Clear();
    return PyObject_GetAttr(((pb_asgi_app *)self)->app, name);
}

static PyTypeObject asgi_send_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "probing._agent.ASGISend",
    .tp_basicsize = sizeof(pb_asgi_send),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(pb_asgi_send, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = asgi_send_traverse,
    .tp_clear = asgi_send_clear,
    .tp_dealloc = asgi_send_dealloc,
    .tp_doc = "probing: the ASGI send of one request, read for its status and end (python.requests)",
};

static PyTypeObject asgi_app_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "probing._agent.ASGIApp",
    .tp_basicsize = sizeof(pb_asgi_app),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(pb_asgi_app, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_getattro = asgi_app_getattro,
    .tp_traverse = asgi_app_traverse,
    .tp_clear = asgi_app_clear,
    .tp_dealloc = asgi_app_dealloc,
    .tp_doc = "probing: an ASGI application with each HTTP request recorded (python.requests); the "
              "application is __wrapped__",
};

static PyObject *uvicorn_config_cls, *wrap_load;

/* uvicorn.config.Config.load(self): the application it loaded is called through pb_asgi_app.
 * Wrapped with pb_wrap_attr_always: load() may import the model's module, and torch with it. */
static PyObject *uvicorn_load(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *res = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    if (!res || PyVectorcall_NARGS(nargsf) < 1) return res;
    PyObject *app = PyObject_GetAttrString(args[0], "loaded_app");
    if (app && Py_TYPE(app) != &asgi_app_type) {
        pb_asgi_app *w = PyObject_GC_New(pb_asgi_app, &asgi_app_type);
        if (w) {
            w->vectorcall = asgi_app_call;
            w->app = app;
            Py_INCREF(app);
            PyObject_GC_Track((PyObject *)w);
            if (PyObject_SetAttrString(args[0], "loaded_app", (PyObject *)w)) PyErr_Clear();
            Py_DECREF(w);
        }
    }
    Py_XDECREF(app);
    PyErr_Clear();
    return res;
}

static PyObject *asgi_wrapped(PyObject *self, void *closure)
{
    PyObject *app = ((pb_asgi_app *)self)->app;
    return Py_NewRef(app ? app : Py_None);
}

static PyGetSetDef asgi_app_getset[] = {
    {"__wrapped__", asgi_wrapped, NULL, "the application", NULL},
    {NULL},
};

/* ---- install and remove ---- */

static int make_var(void)
{
    if (!current_var) current_var = PyContextVar_New("probing_request", NULL);
    return current_var ? 0 : -1;
}

int pb_serve_install_http_server(void)
{
    if (wrap_handle_one) return 0;
    if (make_var()) return -1;
    PyObject *m = PyImport_ImportModule("http.server");
    PyObject *cls = m ? PyObject_GetAttrString(m, "BaseHTTPRequestHandler") : NULL;
    Py_XDECREF(m);
    if (!cls) return -1;
    if (pb_wrap_attr(cls, "parse_request", http_parse, &wrap_parse) ||
        pb_wrap_attr(cls, "send_response_only", http_send_response, &wrap_send_response) ||
        pb_wrap_attr(cls, "handle_one_request", http_handle_one, &wrap_handle_one)) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        pb_unwrap_attr(cls, "parse_request", &wrap_parse);
        pb_unwrap_attr(cls, "send_response_only", &wrap_send_response);
        Py_DECREF(cls);
        PyErr_Restore(et, ev, tb);
        return -1;
    }
    http_handler_cls = cls;
    return 0;
}

int pb_serve_install_uvicorn(void)
{
    if (wrap_load) return 0;
    if (make_var()) return -1;
    PyObject *m = PyImport_ImportModule("uvicorn.config");
    PyObject *cls = m ? PyObject_GetAttrString(m, "Config") : NULL;
    Py_XDECREF(m);
    if (!cls) return -1;
    if (pb_wrap_attr_always(cls, "load", uvicorn_load, &wrap_load)) {
        Py_DECREF(cls);
        return -1;
    }
    uvicorn_config_cls = cls;
    return 0;
}

void pb_serve_remove(void)
{
    if (http_handler_cls) {
        pb_unwrap_attr(http_handler_cls, "handle_one_request", &wrap_handle_one);
        pb_unwrap_attr(http_handler_cls, "parse_request", &wrap_parse);
        pb_unwrap_attr(http_handler_cls, "send_response_only", &wrap_send_response);
        Py_CLEAR(http_handler_cls);
    }
    if (uvicorn_config_cls) {
        pb_unwrap_attr(uvicorn_config_cls, "load", &wrap_load);
        Py_CLEAR(uvicorn_config_cls);
    }
    PyErr_Clear();
    /* an application loaded meanwhile keeps its pb_asgi_app, which passes calls through while
     * recording is off */
}

int pb_serve_ready_types(void)
{
    asgi_app_type.tp_getset = asgi_app_getset;
    if (PyType_Ready(&request_type) || PyType_Ready(&asgi_send_type) || PyType_Ready(&asgi_app_type)) return -1;
    return 0;
}
