/*
 * extension.c - the CPython extension probing._agent.
 *
 * The whole agent is C; this file only exposes its entry points to the thin Python package:
 *   start() -> socket path or None     stop()      endpoint()      install_torch_hooks()
 *   install_distributed()              _capture_finished() (called by probing._capture)
 *   install_generate()                 install_http_server()             install_uvicorn()
 * start() also registers an atexit handler that stops the server (removing the socket file).
 */
#include <Python.h>

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "capture.h"
#include "compiles.h"
#include "config.h"
#include "lifecycle.h"
#include "record.h"
#include "serve.h"
#include "eval.h"
#include "torch_hooks.h"
#include "distributed.h"
#include "job.h"

#include <errno.h>

static PyObject *py_start(PyObject *self, PyObject *unused)
{
    static int atexit_done;
    if (pb_agent_start() != 0) Py_RETURN_NONE;
    if (!atexit_done) {
        PyObject *atexit = PyImport_ImportModule("atexit");
        PyObject *fn = atexit ? PyObject_GetAttrString(self, "_atexit") : NULL;
        PyObject *r = fn ? PyObject_CallMethod(atexit, "register", "O", fn) : NULL;
        if (!r) PyErr_Clear();
        else atexit_done = 1;
        Py_XDECREF(r);
        Py_XDECREF(fn);
        Py_XDECREF(atexit);
    }
    const char *p = pb_agent_endpoint();
    if (!p) Py_RETURN_NONE;
    return PyUnicode_FromString(p);
}

static PyObject *py_stop(PyObject *self, PyObject *unused)
{
    pb_agent_stop();
    Py_RETURN_NONE;
}

static PyObject *py_atexit(PyObject *self, PyObject *unused)
{
    pb_record_exiting();
    pb_agent_stop();
    Py_RETURN_NONE;
}

/* note_exception(type, message, stack): the uncaught exception that ends the program
 * (probing's sys.excepthook), kept for the recording's `run` row. */
static PyObject *py_note_exception(PyObject *self, PyObject *args)
{
    const char *type, *message, *stack;
    if (!PyArg_ParseTuple(args, "sss", &type, &message, &stack)) return NULL;
    pb_record_note_exception(type, message, stack);
    Py_RETURN_NONE;
}

static PyObject *py_endpoint(PyObject *self, PyObject *unused)
{
    const char *p = pb_agent_endpoint();
    if (!p) Py_RETURN_NONE;
    return PyUnicode_FromString(p);
}

static PyObject *py_install_torch_hooks(PyObject *self, PyObject *unused)
{
    if (!pb_agent_endpoint() || pb_config_int("PROBING_TORCH", 1) == 0) Py_RETURN_FALSE;
    if (pb_torch_hooks_install()) return NULL;
    Py_RETURN_TRUE;
}

static PyObject *py_install_distributed(PyObject *self, PyObject *unused)
{
    if (!pb_agent_endpoint() || pb_config_int("PROBING_TORCH", 1) == 0) Py_RETURN_FALSE;
    if (pb_distributed_install()) return NULL;
    Py_RETURN_TRUE;
}

/* _release_inject_page(addr, size): `probing <pid> inject` wrote its bootstrap into a private
 * page of this process (src/remote/inject.h); the bootstrap gives it back when it has run (its
 * source is compiled by then). Only once, and only a page-aligned address. */
static PyObject *py_release_inject_page(PyObject *self, PyObject *args)
{
    static int released;
    unsigned long long addr, size;
    long page = sysconf(_SC_PAGESIZE);
    if (!PyArg_ParseTuple(args, "KK", &addr, &size)) return NULL;
    if (released || page <= 0 || addr == 0 || addr % (unsigned long long)page ||
        size == 0 || size % (unsigned long long)page || size > ((unsigned long long)1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "not the inject page");
        return NULL;
    }
    released = 1;
    if (munmap((void *)(uintptr_t)addr, (size_t)size) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyObject *py_install_generate(PyObject *self, PyObject *unused)
{
    if (!pb_agent_endpoint() || pb_config_int("PROBING_TORCH", 1) == 0 || !pb_torch_hooks_active()) Py_RETURN_FALSE;
    if (pb_torch_install_generate()) return NULL;
    Py_RETURN_TRUE;
}

static PyObject *py_install_http_server(PyObject *self, PyObject *unused)
{
    if (!pb_agent_endpoint() || pb_config_int("PROBING_TORCH", 1) == 0) Py_RETURN_FALSE;
    if (pb_serve_install_http_server()) return NULL;
    Py_RETURN_TRUE;
}

static PyObject *py_install_uvicorn(PyObject *self, PyObject *unused)
{
    if (!pb_agent_endpoint() || pb_config_int("PROBING_TORCH", 1) == 0) Py_RETURN_FALSE;
    if (pb_serve_install_uvicorn()) return NULL;
    Py_RETURN_TRUE;
}

static PyObject *py_install_ddp(PyObject *self, PyObject *unused)
{
    if (!pb_agent_endpoint() || pb_config_int("PROBING_TORCH", 1) == 0) Py_RETURN_FALSE;
    if (pb_distributed_install_ddp()) return NULL;
    Py_RETURN_TRUE;
}

/* _register_job(store, rank, world): joins a job through any object with the c10d Store
 * methods (job.h); for bench/fanout.py's agents without torch. */
static PyObject *py_register_job(PyObject *self, PyObject *args)
{
    PyObject *store;
    int rank, world;
    if (!PyArg_ParseTuple(args, "Oii", &store, &rank, &world)) return NULL;
    int rc = pb_job_register_store(store, rank, world);
    if (rc) {
        PyErr_Format(PyExc_RuntimeError, "cannot register in the job: %s",
                     rc == -EINVAL ? "rank must be in 0..world-1" : "already registered, or the agent is off");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *py_hook_functions(PyObject *self, PyObject *unused) { return pb_torch_hook_functions(); }

static PyMethodDef methods[] = {
    {"hook_functions", py_hook_functions, METH_NOARGS, "The hook callables (for torch.compile's ignore list)."},
    {"start", py_start, METH_NOARGS, "Start the agent; returns the socket path or None."},
    {"stop", py_stop, METH_NOARGS, "Remove hooks, stop threads and server, free memory."},
    {"_atexit", py_atexit, METH_NOARGS, "Interpreter exit: stop the agent."},
    {"endpoint", py_endpoint, METH_NOARGS, "Socket path or None."},
    {"note_exception", py_note_exception, METH_VARARGS, "The uncaught exception ending the program (type, message, stack), for the recording."},
    {"install_torch_hooks", py_install_torch_hooks, METH_NOARGS, "Register torch hooks (torch must be imported)."},
    {"install_distributed", py_install_distributed, METH_NOARGS, "Record torch.distributed collectives (c10d must be imported)."},
    {"install_ddp", py_install_ddp, METH_NOARGS, "Record DistributedDataParallel's gradient all-reduces."},
    {"install_generate", py_install_generate, METH_NOARGS, "Record transformers' generate() calls (python.generations)."},
    {"install_http_server", py_install_http_server, METH_NOARGS, "Record http.server's requests (python.requests)."},
    {"install_uvicorn", py_install_uvicorn, METH_NOARGS, "Record the requests of the ASGI application uvicorn loads (python.requests)."},
    {"_register_job", py_register_job, METH_VARARGS, "Join a job through a store object (bench)."},
    {"_release_inject_page", py_release_inject_page, METH_VARARGS, "inject's bootstrap gives its page back."},
    {"_compiled", pb_compiles_push_py, METH_VARARGS, "probing._compiles hands over one torch.compile compile (compiles.h)."},
    {"_capture_finished", pb_capture_finished_py, METH_VARARGS, "probing._capture hands over a capture's rows (capture_id, rows, error, info)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "_agent", "probing's C agent", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__agent(void)
{
    if (pb_torch_hooks_ready_types() || pb_eval_ready_types() || pb_distributed_ready_types()) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    if (PyModule_AddStringConstant(m, "__version__", PB_VERSION)) goto fail;
    /* The hook functions are named probing._agent.<name> (torch.compile's config writes them
     * out as such in its repro scripts): make those names resolve. */
    PyObject *hooks = pb_torch_hook_functions();
    if (!hooks) goto fail;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(hooks); i++) {
        PyObject *fn = PyTuple_GET_ITEM(hooks, i), *name = PyObject_GetAttrString(fn, "__name__");
        const char *cs = name ? PyUnicode_AsUTF8(name) : NULL;
        int rc = -1;
        if (cs) {
            Py_INCREF(fn);
            if ((rc = PyModule_AddObject(m, cs, fn))) Py_DECREF(fn);
        }
        Py_XDECREF(name);
        if (rc) {
            Py_DECREF(hooks);
            goto fail;
        }
    }
    Py_DECREF(hooks);
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
