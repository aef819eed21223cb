/*
 * distributed.c - python.nccl_trace; see distributed.h and docs/tables.md.
 *
 * Each wrapped function becomes a pb_collective object: calling it calls the original with the
 * same arguments and returns its result untouched (exceptions included), so the program cannot
 * tell the difference except through attribute introspection, which is forwarded to the
 * original. Around the call it reads the clock; after a successful return it reads the payload
 * tensors' numel()*element_size() and dtype, the group's size and backend name, and pushes a row.
 *
 * Durations: a synchronous call is timed from call to return, which for gloo/mpi is completion.
 * For async_op=True (and isend/irecv) a callback chained with work.get_future().then() pushes the
 * row when the Work completes, with the time from the call to completion; the caller is never
 * blocked. When the Work has no future, the row is pushed at return with the call-to-return time.
 * On CUDA (nccl) both of these are host times: a synchronous NCCL call returns once the kernel is
 * enqueued, and a CUDA future's callbacks run when the work is enqueued, not done.
 *
 * Calls nested inside a recorded call (a wrapped function that calls another one, such as
 * _all_gather_base -> all_gather_into_tensor) are not recorded twice: a thread-local depth
 * counter lets only the outermost one record.
 */
#include "distributed.h"

#include "clock.h"
#include "config.h"
#include "intern.h"
#include "tables.h"
#include "torch_hooks.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>


/* Where a function keeps its arguments: positions and keyword names (-1 / NULL: none). */
typedef struct op_spec {
    const char *name;
    int payload_pos;
    const char *payload_kw;
    int group_pos;
    int async_pos;   /* -1: synchronous unless always_async */
    int always_async;
} op_spec;

static const op_spec specs[] = {
    {"all_reduce", 0, "tensor", 2, 3, 0},
    {"all_reduce_coalesced", 0, "tensors", 2, 3, 0},
    {"reduce", 0, "tensor", 3, 4, 0},
    {"broadcast", 0, "tensor", 2, 3, 0},
    {"all_gather", 1, "tensor", 2, 3, 0},
    {"all_gather_single", 1, "input_tensor", 2, 3, 0},
    {"all_gather_into_tensor", 1, "input_tensor", 2, 3, 0},
    {"_all_gather_base", 1, "input_tensor", 2, 3, 0},
    {"all_gather_coalesced", 1, "input_tensor_list", 2, 3, 0},
    {"gather", 0, "tensor", 3, 4, 0},
    {"scatter", 0, "tensor", 3, 4, 0},
    {"reduce_scatter", 1, "input_list", 3, 4, 0},
    {"reduce_scatter_single", 1, "input", 3, 4, 0},
    {"reduce_scatter_tensor", 1, "input", 3, 4, 0},
    {"_reduce_scatter_base", 1, "input", 3, 4, 0},
    {"all_to_all", 1, "input_tensor_list", 2, 3, 0},
    {"all_to_all_single", 1, "input", 4, 5, 0},
    {"barrier", -1, NULL, 0, 1, 0},
    {"send", 0, "tensor", 2, -1, 0},
    {"recv", 0, "tensor", 2, -1, 0},
    {"isend", 0, "tensor", 2, -1, 1},
    {"irecv", 0, "tensor", 2, -1, 1},
};
#define NSPECS ((int)(sizeof specs / sizeof specs[0]))

typedef struct pb_collective {
    PyObject_HEAD
    PyObject *original;
    const op_spec *spec;
    uint32_t op_id;
} pb_collective;

/* A row waiting for its Work to complete; called by the future's then(). */
typedef struct pb_pending {
    PyObject_HEAD
    pb_nccl_row row;
    int64_t start_ns;
} pb_pending;

static PyTypeObject collective_type = {PyVarObject_HEAD_INIT(NULL, 0).tp_name = "probing._agent.Collective"};
static PyTypeObject pending_type = {PyVarObject_HEAD_INIT(NULL, 0).tp_name = "probing._agent.PendingCollective"};
static _Atomic int enabled;
static int installed;
static PyObject *c10d;               /* torch.distributed.distributed_c10d */
static PyObject *get_world_size, *get_backend;
static PyObject *originals[NSPECS];  /* strong refs, to restore */
static uint16_t rank;
static _Thread_local int depth;

/* ---------------------------------------------------------------- argument reading [GIL held] */

static PyObject *arg_at(PyObject *args, PyObject *kwargs, int pos, const char *kw)
{
    if (pos >= 0 && pos < PyTuple_GET_SIZE(args)) return PyTuple_GET_ITEM(args, pos);
    if (kw && kwargs) return PyDict_GetItemString(kwargs, kw); /* borrowed, no exception */
    return NULL;
}

/* Adds the bytes of one tensor (or of the tensors in a list/tuple, one level of nesting more for
 * the *_coalesced lists of lists) and remembers the first dtype seen. Clears any exception. */
static void add_payload(PyObject *obj, int nesting, int64_t *bytes, uint32_t *dtype)
{
    if (!obj || obj == Py_None) return;
    if (PyList_Check(obj) || PyTuple_Check(obj)) {
        if (nesting > 1) return;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
        PyObject **items = PySequence_Fast_ITEMS(obj);
        for (Py_ssize_t i = 0; i < n; i++) add_payload(items[i], nesting + 1, bytes, dtype);
        return;
    }
    PyObject *numel = PyObject_CallMethod(obj, "numel", NULL);
    PyObject *size = numel ? PyObject_CallMethod(obj, "element_size", NULL) : NULL;
    if (size) *bytes += PyLong_AsLongLong(numel) * PyLong_AsLongLong(size);
    Py_XDECREF(numel);
    Py_XDECREF(size);
    if (!*dtype) {
        PyObject *dt = PyObject_GetAttrString(obj, "dtype");
        PyObject *text = dt ? PyObject_Str(dt) : NULL;
        const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
        if (s) *dtype = pb_intern_cstr(strncmp(s, "torch.", 6) == 0 ? s + 6 : s);
        Py_XDECREF(text);
        Py_XDECREF(dt);
    }
    PyErr_Clear();
}

/* group_size and backend of the call's group (None: the default group). Clears exceptions. */
static void describe_group(PyObject *group, pb_nccl_row *r)
{
    PyObject *g = group ? group : Py_None;
    PyObject *n = PyObject_CallOneArg(get_world_size, g);
    if (n) r->group_size = (uint32_t)PyLong_AsLong(n);
    Py_XDECREF(n);
    PyErr_Clear();
    PyObject *b = PyObject_CallOneArg(get_backend, g);
    PyObject *text = b ? PyObject_Str(b) : NULL;
    const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
    if (s) r->backend = pb_intern_cstr(s);
    Py_XDECREF(text);
    Py_XDECREF(b);
    PyErr_Clear();
}

/* ---------------------------------------------------------------- completion of async work */

static PyObject *pending_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    pb_pending *p = (pb_pending *)self;
    if (atomic_load_explicit(&enabled, memory_order_relaxed) && pb_table_nccl_trace.ring) {
        p->row.duration_ns = pb_now_ns() - p->start_ns;
        pb_ring_push(pb_table_nccl_trace.ring, &p->row);
    }
    Py_RETURN_NONE;
}

/* Chains the row to the Work's future. Returns 1 if the row will be pushed on completion, 0 if
 * the caller must push it now. Never leaves an exception set. */
static int push_on_completion(PyObject *work, const pb_nccl_row *row, int64_t start_ns)
{
    if (!work || work == Py_None) return 0;
    PyObject *fut = PyObject_CallMethod(work, "get_future", NULL);
    pb_pending *p = fut ? PyObject_New(pb_pending, &pending_type) : NULL;
    PyObject *chained = NULL;
    if (p) {
        p->row = *row;
        p->start_ns = start_ns;
        chained = PyObject_CallMethod(fut, "then", "O", (PyObject *)p);
    }
    Py_XDECREF((PyObject *)p);
    Py_XDECREF(fut);
    int ok = chained != NULL;
    Py_XDECREF(chained);
    PyErr_Clear();
    return ok;
}

/* ---------------------------------------------------------------- the wrapper [GIL held] */

static PyObject *collective_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    pb_collective *c = (pb_collective *)self;
    if (!atomic_load_explicit(&enabled, memory_order_relaxed) || depth > 0 || !pb_table_nccl_trace.ring)
        return PyObject_Call(c->original, args, kwargs);
    const op_spec *spec = c->spec;
    int64_t step = pb_torch_current_step();
    int64_t step_start = pb_torch_step_start_ns();
    depth++;
    int64_t start = pb_now_ns();
    PyObject *result = PyObject_Call(c->original, args, kwargs);
    int64_t end = pb_now_ns();
    depth--;
    if (!result) return NULL;

    pb_step_collectives_ns += end - start;
    pb_nccl_row r = {0};
    r.step = step;
    r.time_offset_ns = step_start ? start - step_start : 0;
    r.duration_ns = end - start;
    r.operation_type = c->op_id;
    r.rank = rank;
    PyObject *saved_type, *saved_value, *saved_tb;
    PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
    if (spec->payload_pos >= 0 || spec->payload_kw)
        add_payload(arg_at(args, kwargs, spec->payload_pos, spec->payload_kw), 0, &r.bytes, &r.dtype);
    describe_group(arg_at(args, kwargs, spec->group_pos, "group"), &r);
    int async_op = spec->always_async;
    PyObject *flag = spec->async_pos >= 0 ? arg_at(args, kwargs, spec->async_pos, "async_op") : NULL;
    if (flag) {
        int t = PyObject_IsTrue(flag);
        async_op = t > 0;
        if (t < 0) PyErr_Clear();
    }
    r.async_op = (uint8_t)async_op;
    /* The collective let go of the GIL: the agent may have detached meanwhile. */
    if (!atomic_load_explicit(&enabled, memory_order_relaxed) || !pb_table_nccl_trace.ring) {
        /* detached: nothing to record */
    } else if (!async_op || !push_on_completion(result, &r, start)) {
        pb_ring_push(pb_table_nccl_trace.ring, &r);
    }
    PyErr_Restore(saved_type, saved_value, saved_tb);
    return result;
}

static void collective_dealloc(PyObject *self)
{
    Py_XDECREF(((pb_collective *)self)->original);
    Py_TYPE(self)->tp_free(self);
}

/* __name__, __doc__, __wrapped__, __module__ ...: the original's. */
static PyObject *collective_getattro(PyObject *self, PyObject *name)
{
    PyObject *v = PyObject_GenericGetAttr(self, name);
    if (v || !PyErr_ExceptionMatches(PyExc_AttributeError)) return v;
    PyErr_Clear();
    return PyObject_GetAttr(((pb_collective *)self)->original, name);
}

static PyObject *collective_repr(PyObject *self) { return PyObject_Repr(((pb_collective *)self)->original); }

int pb_distributed_ready_types(void)
{
    collective_type.tp_basicsize = sizeof(pb_collective);
    collective_type.tp_flags = Py_TPFLAGS_DEFAULT;
    collective_type.tp_call = collective_call;
    collective_type.tp_dealloc = collective_dealloc;
    collective_type.tp_getattro = collective_getattro;
    collective_type.tp_repr = collective_repr;
    collective_type.tp_doc = "a torch.distributed function recorded into python.nccl_trace";
    pending_type.tp_basicsize = sizeof(pb_pending);
    pending_type.tp_flags = Py_TPFLAGS_DEFAULT;
    pending_type.tp_call = pending_call;
    if (PyType_Ready(&collective_type) || PyType_Ready(&pending_type)) return -1;
    return 0;
}

/* ---------------------------------------------------------------- install / remove [GIL held] */

int pb_distributed_install(void)
{
    if (installed) return 0;
    PyObject *dist = NULL;
    c10d = PyImport_ImportModule("torch.distributed.distributed_c10d");
    if (!c10d) goto fail;
    get_world_size = PyObject_GetAttrString(c10d, "get_world_size");
    get_backend = get_world_size ? PyObject_GetAttrString(c10d, "get_backend") : NULL;
    if (!get_backend) goto fail;
    /* torch.distributed may still be running its own body (star import of c10d pending): then its
     * copies are made from our wrappers; if it is complete, replace the same objects there too. */
    dist = PyDict_GetItemString(PyImport_GetModuleDict(), "torch.distributed");
    Py_XINCREF(dist);
    const char *r = getenv("RANK");
    rank = r ? (uint16_t)atoi(r) : 0;
    for (int i = 0; i < NSPECS; i++) {
        PyObject *orig = PyObject_GetAttrString(c10d, specs[i].name);
        if (!orig) {
            PyErr_Clear();
            continue;
        }
        if (Py_IS_TYPE(orig, &collective_type) || !PyCallable_Check(orig)) {
            Py_DECREF(orig);
            continue;
        }
        pb_collective *w = PyObject_New(pb_collective, &collective_type);
        if (!w) {
            Py_DECREF(orig);
            goto fail;
        }
        Py_INCREF(orig);
        w->original = orig;
        w->spec = &specs[i];
        w->op_id = pb_intern_cstr(specs[i].name[0] == '_' ? specs[i].name + 1 : specs[i].name);
        int rc = PyObject_SetAttrString(c10d, specs[i].name, (PyObject *)w);
        if (!rc && dist) {
            PyObject *there = PyObject_GetAttrString(dist, specs[i].name);
            if (there == orig) rc = PyObject_SetAttrString(dist, specs[i].name, (PyObject *)w);
            Py_XDECREF(there);
            PyErr_Clear();
        }
        Py_DECREF((PyObject *)w);
        if (rc) {
            Py_DECREF(orig);
            goto fail;
        }
        originals[i] = orig;
    }
    Py_XDECREF(dist);
    installed = 1;
    atomic_store(&enabled, 1);
    return 0;
fail:
    Py_XDECREF(dist);
    return -1;
}

void pb_distributed_remove(void)
{
    atomic_store(&enabled, 0);
    if (!installed) return;
    PyObject *dist = PyDict_GetItemString(PyImport_GetModuleDict(), "torch.distributed");
    PyObject *modules[2] = {c10d, dist};
    for (int i = 0; i < NSPECS; i++) {
        if (!originals[i]) continue;
        for (int m = 0; m < 2; m++) {
            if (!modules[m]) continue;
            PyObject *cur = PyObject_GetAttrString(modules[m], specs[i].name);
            if (cur && Py_IS_TYPE(cur, &collective_type) && ((pb_collective *)cur)->original == originals[i])
                PyObject_SetAttrString(modules[m], specs[i].name, originals[i]);
            Py_XDECREF(cur);
            PyErr_Clear();
        }
        Py_CLEAR(originals[i]);
    }
    Py_CLEAR(get_world_size);
    Py_CLEAR(get_backend);
    Py_CLEAR(c10d);
    installed = 0;
}

void pb_distributed_disable(void) { atomic_store(&enabled, 0); }
