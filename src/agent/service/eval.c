/* eval.c - the eval thread and output capture; see eval.h.
 *
 * What an eval holds is bounded by the contract in api.h: its stdout and stderr are kept up to
 * PB_EVAL_CAPTURE_MAX each and its traceback up to PB_EVAL_ERROR_MAX, measured as escaped JSON,
 * so the answer built from them is at most PB_EVAL_ANSWER_MAX. Captures are appended under
 * `lock`; once a request is abandoned (timed out, its client left) its buffers are freed and
 * later output of its code is dropped, so an abandoned eval holds no capture memory. */
#include <Python.h>

#include "eval.h"

#include "api.h"

#include "clock.h"
#include "config.h"
#include "error.h"
#include "jsonw.h"
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SHUTDOWN_WAIT_MS 500 /* how long an exit waits for a running eval to take its interrupt */
#define CANCEL_CHECK_MS 100  /* how often a waiting request checks its client is still there */

enum { REQ_QUEUED, REQ_WAITING_GIL, REQ_RUNNING, REQ_DONE };

typedef struct eval_req {
    struct eval_req *next;
    char *code;
    int state;
    int abandoned;
    int refs;            /* the waiting server thread and the eval thread */
    int ok;
    unsigned long generation;
    pb_buf out, err, error;           /* guarded by lock once queued (capture_append) */
    size_t out_esc, err_esc;          /* their size as escaped JSON */
    int out_cut, err_cut, error_cut;
} eval_req;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake;  /* eval thread: a request arrived or shutdown */
static pthread_cond_t done;  /* server threads: a request finished */
static eval_req *queue_head, *queue_tail;
static int running, stopping;
static pthread_t thread;

/* Owned by the eval thread while it holds the GIL. */
static eval_req *capturing;
static unsigned long capture_ident;
static unsigned long run_generation; /* protected by lock */
static unsigned long running_generation;

static void req_release(eval_req *r) /* lock held */
{
    if (--r->refs > 0) return;
    free(r->code);
    pb_buf_free(&r->out);
    pb_buf_free(&r->err);
    pb_buf_free(&r->error);
    free(r);
}

/* Appends s to r's stdout (which 1), stderr (2) or traceback (3) if its escaped size still fits
 * under the ceiling (api.h); otherwise marks that capture cut and drops s whole. Nothing is kept
 * for an abandoned request: its buffers were freed when it was abandoned. [eval thread] */
static void capture_append(eval_req *r, int which, const char *s, size_t len)
{
    pb_buf *b = which == 1 ? &r->out : which == 2 ? &r->err : &r->error;
    int *cut = which == 1 ? &r->out_cut : which == 2 ? &r->err_cut : &r->error_cut;
    size_t ceiling = which == 3 ? PB_EVAL_ERROR_MAX : PB_EVAL_CAPTURE_MAX;
    size_t esc_other = 0, *esc = which == 1 ? &r->out_esc : which == 2 ? &r->err_esc : &esc_other;
    pthread_mutex_lock(&lock);
    if (!r->abandoned) {
        size_t used = which == 3 ? pb_json_escaped_len(b->data, b->len, ceiling) : *esc;
        size_t n = used <= ceiling ? pb_json_escaped_len(s, len, ceiling - used) : 1;
        if (used + n <= ceiling && pb_buf_append(b, s, len) == 0) *esc = used + n;
        else *cut = 1;
    }
    pthread_mutex_unlock(&lock);
}

/* Frees what r captured; later captures are dropped (r->abandoned). [lock held] */
static void capture_drop(eval_req *r)
{
    pb_buf_free(&r->out);
    pb_buf_free(&r->err);
    pb_buf_free(&r->error);
    r->out_esc = r->err_esc = 0;
}

/* ---- stdout/stderr proxy: captures the eval thread's writes, passes others through ---- */

typedef struct proxy {
    PyObject_HEAD
    PyObject *orig; /* owned; may be Py_None */
    int which;      /* 1 stdout, 2 stderr */
} proxy;

static int is_capturing_thread(void) { return capturing && PyThread_get_thread_ident() == capture_ident; }

static PyObject *proxy_write(proxy *self, PyObject *arg)
{
    if (is_capturing_thread()) {
        if (!PyUnicode_Check(arg)) {
            PyErr_Format(PyExc_TypeError, "write() argument must be str, not %.100s", Py_TYPE(arg)->tp_name);
            return NULL;
        }
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(arg, &len);
        if (!s) return NULL;
        capture_append(capturing, self->which, s, (size_t)len);
        return PyLong_FromSsize_t(PyUnicode_GET_LENGTH(arg));
    }
    if (self->orig == Py_None) return PyLong_FromSsize_t(0);
    return PyObject_CallMethod(self->orig, "write", "O", arg);
}

static PyObject *proxy_flush(proxy *self, PyObject *unused)
{
    if (is_capturing_thread() || self->orig == Py_None) Py_RETURN_NONE;
    return PyObject_CallMethod(self->orig, "flush", NULL);
}

static PyObject *proxy_getattro(PyObject *self, PyObject *name)
{
    PyObject *r = PyObject_GenericGetAttr(self, name);
    if (r || !PyErr_ExceptionMatches(PyExc_AttributeError)) return r;
    PyErr_Clear();
    return PyObject_GetAttr(((proxy *)self)->orig, name);
}

static void proxy_dealloc(proxy *self)
{
    Py_XDECREF(self->orig);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef proxy_methods[] = {
    {"write", (PyCFunction)proxy_write, METH_O, NULL},
    {"flush", (PyCFunction)proxy_flush, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject proxy_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "probing._agent.StreamProxy",
    .tp_basicsize = sizeof(proxy),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)proxy_dealloc,
    .tp_getattro = proxy_getattro,
    .tp_methods = proxy_methods,
    .tp_doc = "probing: routes the eval thread's output to the eval result",
};

int pb_eval_ready_types(void) { return PyType_Ready(&proxy_type); }

/* Replaces sys.<name> by a proxy; returns the original (new ref) or NULL. [GIL held] */
static PyObject *swap_in(const char *name, int which)
{
    PyObject *orig = PySys_GetObject(name); /* borrowed */
    if (!orig) orig = Py_None;
    proxy *p = PyObject_New(proxy, &proxy_type);
    if (!p) return NULL;
    Py_INCREF(orig);
    p->orig = orig;
    p->which = which;
    if (PySys_SetObject(name, (PyObject *)p)) {
        Py_DECREF(p);
        return NULL;
    }
    Py_DECREF(p);
    Py_INCREF(orig);
    return orig;
}

static void swap_out(const char *name, PyObject *orig)
{
    PyObject *cur = PySys_GetObject(name);
    if (cur && Py_TYPE(cur) == &proxy_type) PySys_SetObject(name, orig); /* unless the code replaced it */
    Py_XDECREF(orig);
}

/* Formats the current exception into r->error and clears it. [GIL held] */
static void take_traceback(eval_req *r)
{
    PyObject *t, *v, *tb, *mod = NULL, *lines = NULL, *empty = NULL, *joined = NULL;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb && v) PyException_SetTraceback(v, tb);
    mod = PyImport_ImportModule("traceback");
    if (mod) lines = PyObject_CallMethod(mod, "format_exception", "OOO", t ? t : Py_None, v ? v : Py_None,
                                         tb ? tb : Py_None);
    if (lines) empty = PyUnicode_FromString("");
    if (empty) joined = PyUnicode_Join(empty, lines);
    Py_ssize_t len = 0;
    const char *s = joined ? PyUnicode_AsUTF8AndSize(joined, &len) : NULL;
    if (!s) {
        s = "an exception was raised, and formatting its traceback failed too\n";
        len = (Py_ssize_t)strlen(s);
    }
    /* A traceback over the ceiling keeps its end, where the exception is: a sixth of the
     * ceiling in raw bytes fits however it escapes. */
    size_t tail = (PB_EVAL_ERROR_MAX - 256) / 6;
    if (pb_json_escaped_len(s, (size_t)len, PB_EVAL_ERROR_MAX) > PB_EVAL_ERROR_MAX) {
        static const char head[] = "[the traceback was longer than 1 MB; its end:]\n";
        capture_append(r, 3, head, sizeof head - 1);
        s += (size_t)len - tail;
        len = (Py_ssize_t)tail;
    }
    capture_append(r, 3, s, (size_t)len);
    PyErr_Clear();
    Py_XDECREF(joined);
    Py_XDECREF(empty);
    Py_XDECREF(lines);
    Py_XDECREF(mod);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
}

static void run_code(eval_req *r) /* [GIL held, eval thread] */
{
    PyObject *main_mod = PyImport_AddModule("__main__"); /* borrowed */
    PyObject *globals = main_mod ? PyModule_GetDict(main_mod) : NULL;
    PyObject *out_orig = NULL, *err_orig = NULL, *co = NULL, *res = NULL;
    if (!globals) {
        take_traceback(r);
        return;
    }
    out_orig = swap_in("stdout", 1);
    err_orig = swap_in("stderr", 2);
    if (!out_orig || !err_orig) {
        take_traceback(r);
        goto out;
    }
    capturing = r;
    capture_ident = PyThread_get_thread_ident();
    int is_expr = 1;
    co = Py_CompileString(r->code, "<probing eval>", Py_eval_input);
    if (!co && PyErr_ExceptionMatches(PyExc_SyntaxError)) {
        PyErr_Clear();
        is_expr = 0;
        co = Py_CompileString(r->code, "<probing eval>", Py_file_input);
    }
    if (co) res = PyEval_EvalCode(co, globals, globals);
    if (res) {
        r->ok = 1;
        if (is_expr && res != Py_None) {
            PyObject *rep = PyObject_Repr(res);
            Py_ssize_t len = 0;
            const char *s = rep ? PyUnicode_AsUTF8AndSize(rep, &len) : NULL;
            if (s) {
                int cut = r->out_cut; /* written by this thread only */
                capture_append(r, 1, s, (size_t)len);
                if (r->out_cut == cut) capture_append(r, 1, "\n", 1);
            }
            Py_XDECREF(rep);
            PyErr_Clear();
        }
    } else {
        take_traceback(r);
    }
out:
    capturing = NULL;
    capture_ident = 0;
    if (err_orig) swap_out("stderr", err_orig);
    if (out_orig) swap_out("stdout", out_orig);
    Py_XDECREF(res);
    Py_XDECREF(co);
    PyErr_Clear();
}

/* Raises exc in the eval thread if the eval of generation gen is still running. [main thread,
 * GIL held: a pending call] */
static int raise_in_eval(void *arg, PyObject *exc)
{
    unsigned long gen = (unsigned long)(uintptr_t)arg;
    pthread_mutex_lock(&lock);
    int still = running_generation == gen && capturing;
    unsigned long ident = capture_ident;
    pthread_mutex_unlock(&lock);
    if (still) PyThreadState_SetAsyncExc(ident, exc);
    return 0;
}

/* Pending call: interrupts a timed-out eval. */
static int interrupt_eval(void *arg)
{
    return raise_in_eval(arg, PyExc_TimeoutError);
}

/* Pending call: the client of a running eval left; KeyboardInterrupt, which `except Exception`
 * in the eval's code does not catch. */
static int cancel_eval(void *arg)
{
    return raise_in_eval(arg, PyExc_KeyboardInterrupt);
}

static void *eval_main(void *unused)
{
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!queue_head && !stopping) pthread_cond_wait(&wake, &lock);
        if (stopping) break;
        eval_req *r = queue_head;
        queue_head = r->next;
        if (!queue_head) queue_tail = NULL;
        if (r->abandoned) {
            req_release(r);
            continue;
        }
        r->state = REQ_WAITING_GIL;
        pthread_mutex_unlock(&lock);

        PyGILState_STATE g = PyGILState_Ensure(); /* may block for as long as the GIL is held */

        pthread_mutex_lock(&lock);
        int skip = r->abandoned || stopping;
        if (!skip) {
            r->state = REQ_RUNNING;
            r->generation = ++run_generation;
            running_generation = r->generation;
        }
        pthread_mutex_unlock(&lock);
        if (!skip) run_code(r);
        pthread_mutex_lock(&lock);
        running_generation = 0;
        pthread_cond_broadcast(&done);
        pthread_mutex_unlock(&lock);
        PyGILState_Release(g);

        pthread_mutex_lock(&lock);
        r->state = REQ_DONE;
        pthread_cond_broadcast(&done);
        req_release(r);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void init_conds(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wake, &ca);
    pthread_cond_init(&done, &ca);
    pthread_condattr_destroy(&ca);
}

int pb_eval_start(void)
{
    if (running) return 0;
    static int conds_ready;
    if (!conds_ready) {
        init_conds();
        conds_ready = 1;
    }
    stopping = 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&thread, NULL, eval_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) return -rc;
    pthread_detach(thread);
    running = 1;
    return 0;
}

void pb_eval_shutdown(void)
{
    /* The process exits (or detaches): the running eval gets a KeyboardInterrupt now and up to
     * SHUTDOWN_WAIT_MS to end, so that its code is not still running while the interpreter and
     * C++ libraries tear down; after that nobody waits for it. */
    int have_gil = Py_IsInitialized() && PyGILState_Check();
    if (have_gil && capturing) PyThreadState_SetAsyncExc(capture_ident, PyExc_KeyboardInterrupt);
    pthread_mutex_lock(&lock);
    stopping = 1;
    pthread_cond_broadcast(&done); /* waiting server threads answer 503 at once */
    if (have_gil && running_generation) {
        struct timespec until = pb_deadline_ns(CLOCK_MONOTONIC, (int64_t)SHUTDOWN_WAIT_MS * 1000000);
        pthread_mutex_unlock(&lock);
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&lock);
        while (running_generation && pthread_cond_timedwait(&done, &lock, &until) != ETIMEDOUT) {
        }
        pthread_mutex_unlock(&lock);
        Py_END_ALLOW_THREADS
        pthread_mutex_lock(&lock);
    }
    while (queue_head) {
        eval_req *r = queue_head;
        queue_head = r->next;
        r->abandoned = 1;
        r->state = REQ_DONE;
        req_release(r);
    }
    queue_tail = NULL;
    pthread_cond_broadcast(&wake);
    pthread_cond_broadcast(&done);
    running = 0;
    pthread_mutex_unlock(&lock);
}

void pb_eval_forget_after_fork(void)
{
    pthread_mutex_init(&lock, NULL);
    init_conds();
    queue_head = queue_tail = NULL; /* leaks queued requests in the child: they belong to the parent */
    running = 0;
    stopping = 1;
    capturing = NULL;
}

static void write_error(pb_buf *out, const char *msg, const char *phase)
{
    pb_jsonw w;
    pb_buf_reset(out);
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "error");
    pb_jsonw_str(&w, msg);
    if (phase) {
        pb_jsonw_key(&w, "phase");
        pb_jsonw_str(&w, phase);
    }
    pb_jsonw_obj_end(&w);
}

/* The earlier of a and now + ms. */
static struct timespec earlier(struct timespec a, long ms)
{
    struct timespec t = pb_deadline_ns(CLOCK_MONOTONIC, (int64_t)ms * 1000000);
    return pb_timespec_before(t, a) ? t : a;
}

int pb_eval_run(void *ctx, const char *code, double timeout_s, pb_db_cancel_fn cancelled,
                void *cancel_ctx, pb_buf *out, int *http_status)
{
    if (timeout_s <= 0) timeout_s = pb_config_double("PROBING_EVAL_TIMEOUT", 30);
    if (timeout_s > 86400) timeout_s = 86400;
    eval_req *r = calloc(1, sizeof *r);
    if (!r || !(r->code = strdup(code))) {
        free(r);
        *http_status = 500;
        write_error(out, "out of memory", NULL);
        return -ENOMEM;
    }
    r->refs = 2;
    pthread_mutex_lock(&lock);
    if (!running || stopping) {
        pthread_mutex_unlock(&lock);
        free(r->code);
        free(r);
        *http_status = 503;
        write_error(out, "eval is not available: the process is exiting or the agent is stopped", NULL);
        return PB_EDISABLED;
    }
    if (queue_tail) queue_tail->next = r;
    else queue_head = r;
    queue_tail = r;
    pthread_cond_signal(&wake);

    struct timespec deadline = pb_deadline_s(CLOCK_MONOTONIC, timeout_s);
    int rc = 0, why = 0;
    while (r->state != REQ_DONE && rc != ETIMEDOUT && !stopping) {
        struct timespec slice = earlier(deadline, CANCEL_CHECK_MS);
        rc = pthread_cond_timedwait(&done, &lock, &slice);
        if (rc == ETIMEDOUT && (slice.tv_sec != deadline.tv_sec || slice.tv_nsec != deadline.tv_nsec))
            rc = 0; /* only a slice ended */
        if (r->state != REQ_DONE && cancelled && (why = cancelled(cancel_ctx))) break;
    }
    if (r->state != REQ_DONE && stopping) why = PB_DB_CANCEL_EXITING;

    int result = 0;
    if (why) {
        r->abandoned = 1;
        capture_drop(r);
        if (r->state == REQ_RUNNING && why == PB_DB_CANCEL_CLIENT_GONE)
            Py_AddPendingCall(cancel_eval, (void *)(uintptr_t)r->generation);
        *http_status = 503;
        write_error(out, why == PB_DB_CANCEL_CLIENT_GONE
                             ? "eval was cancelled: the client closed its connection"
                             : "eval was cancelled: the process is exiting",
                    NULL);
        result = PB_ECANCELLED;
    } else if (r->state == REQ_DONE && !r->abandoned) {
        pb_jsonw w;
        pb_buf_reset(out);
        /* Sized once, not grown copy by copy; what is written stays within PB_EVAL_ANSWER_MAX. */
        pb_buf_reserve(out, r->out_esc + r->err_esc +
                                pb_json_escaped_len(r->error.data, r->error.len, SIZE_MAX) + 512);
        pb_jsonw_init(&w, out);
        pb_jsonw_obj_begin(&w);
        pb_jsonw_key(&w, "ok");
        pb_jsonw_bool(&w, r->ok);
        pb_jsonw_key(&w, "stdout");
        pb_jsonw_strn(&w, r->out.data ? r->out.data : "", r->out.len);
        pb_jsonw_key(&w, "stderr");
        pb_jsonw_strn(&w, r->err.data ? r->err.data : "", r->err.len);
        if (!r->ok) {
            pb_jsonw_key(&w, "error");
            pb_jsonw_strn(&w, r->error.data ? r->error.data : "", r->error.len);
        }
        if (r->out_cut || r->err_cut) {
            pb_jsonw_key(&w, "message");
            pb_jsonw_str(&w, "output was cut: stdout and stderr are each kept up to 16 MB as "
                             "escaped in this answer (a control character counts 6 bytes)");
        }
        pb_jsonw_obj_end(&w);
        *http_status = 200;
        if (pb_jsonw_error(&w)) { /* sticky: the first failed write; the text is incomplete */
            *http_status = 500;
            write_error(out, "out of memory writing the eval's answer", NULL);
            result = -ENOMEM;
        }
    } else if (r->state == REQ_DONE) {
        *http_status = 503;
        write_error(out, "eval was cancelled: the process is exiting", NULL);
        result = PB_EDISABLED;
    } else {
        char msg[512];
        r->abandoned = 1;
        capture_drop(r);
        if (r->state == REQ_RUNNING) {
            snprintf(msg, sizeof msg,
                     "eval timed out: the code was still running after %.3g s; a TimeoutError is being raised "
                     "in it (use --timeout to allow longer)",
                     timeout_s);
            Py_AddPendingCall(interrupt_eval, (void *)(uintptr_t)r->generation);
            write_error(out, msg, "running");
        } else {
            snprintf(msg, sizeof msg,
                     "eval timed out: the interpreter did not become available within %.3g s (a thread holds "
                     "the GIL, e.g. a long C call or a deadlock); the code was not run. Try 'probing <pid> "
                     "query' (needs no GIL) or a longer --timeout",
                     timeout_s);
            write_error(out, msg, "gil");
        }
        *http_status = 504;
        result = PB_ETIMEOUT;
    }
    req_release(r);
    pthread_mutex_unlock(&lock);
    return result;
}
