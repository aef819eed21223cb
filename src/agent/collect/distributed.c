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
 * The same callback completes the call's per-group state for `probing hang` (job.h): an async
 * collective stays "entered" until its Work completes, not until the call returns.
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
#include "device.h"
#include "intern.h"
#include "job.h"
#include "registry.h"
#include "step.h"
#include "wrap.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- python.nccl_trace: its row, columns and ring ---- */

typedef struct pb_nccl_row {
    int64_t step;
    int64_t duration_ns;
    int64_t time_offset_ns;
    int64_t bytes;
    uint32_t operation_type; /* intern id: all_reduce, all_gather, ... */
    uint32_t backend;        /* intern id: nccl, gloo, ... */
    uint32_t dtype;          /* intern id */
    uint32_t group_size;
    uint32_t origin;         /* intern id: "call" (the program's call) or "ddp" (DDP's bucket) */
    uint16_t rank;
    uint8_t async_op;
} pb_nccl_row;


#define COL PB_COL

static const pb_column nccl_cols[] = {
    COL("step", PB_COL_I64, pb_nccl_row, step, "training step the collective was issued in"),
    COL("operation_type", PB_COL_STR_ID, pb_nccl_row, operation_type, "all_reduce, all_gather, reduce_scatter, broadcast, barrier, ..."),
    COL("backend", PB_COL_STR_ID, pb_nccl_row, backend, "nccl, gloo, ..."),
    COL("bytes", PB_COL_I64, pb_nccl_row, bytes, "payload size in bytes"),
    COL("dtype", PB_COL_STR_ID, pb_nccl_row, dtype, "element type"),
    COL("group_size", PB_COL_U32, pb_nccl_row, group_size, "ranks in the process group"),
    COL("async_op", PB_COL_U8, pb_nccl_row, async_op, "1 when issued with async_op=True"),
    COL("duration_ms", PB_COL_NS_MS, pb_nccl_row, duration_ns, "milliseconds (see docs/tables.md)"),
    COL("time_offset", PB_COL_NS_SEC, pb_nccl_row, time_offset_ns, "seconds from the start of the step"),
    COL("rank", PB_COL_U16, pb_nccl_row, rank, "distributed rank"),
    COL("origin", PB_COL_STR_ID, pb_nccl_row, origin, "call: the program called torch.distributed; ddp: a DistributedDataParallel gradient bucket"),
};

static pb_table pb_table_nccl_trace = {
    .schema = "python",
    .name = "nccl_trace",
    .doc = "collective communication operations (every torch.distributed backend)",
    .columns = nccl_cols,
    .ncolumns = (int)(sizeof nccl_cols / sizeof nccl_cols[0]),
    .row_size = sizeof(pb_nccl_row),
    .step_column = -1, /* async collectives complete (and are pushed) after later steps' rows */
    .empty_reason = "empty until the program calls a torch.distributed collective or a DistributedDataParallel model all-reduces its gradients (docs/tables.md)",
};

int pb_distributed_tables_init(void)
{
    int rc = pb_ring_create(&pb_table_nccl_trace.ring, sizeof(pb_nccl_row), 1 << 16);
    if (rc) return rc;
    return pb_registry_add(&pb_table_nccl_trace);
}

void pb_distributed_tables_free(void)
{
    pb_ring_destroy(pb_table_nccl_trace.ring);
    pb_table_nccl_trace.ring = NULL;
}


/* Where a function keeps its arguments: positions and keyword names (-1 / NULL: none). */
typedef struct op_spec {
    const char *name;
    int payload_pos;
    const char *payload_kw;
    int group_pos;
    int async_pos;   /* -1: synchronous unless always_async */
    int always_async;
    int dist_only;   /* defined in torch.distributed only (from torch._C), not distributed_c10d */
} op_spec;

static const op_spec specs[] = {
    {"all_reduce", 0, "tensor", 2, 3, 0, 0},
    {"all_reduce_coalesced", 0, "tensors", 2, 3, 0, 0},
    {"reduce", 0, "tensor", 3, 4, 0, 0},
    {"broadcast", 0, "tensor", 2, 3, 0, 0},
    {"all_gather", 1, "tensor", 2, 3, 0, 0},
    {"all_gather_single", 1, "input_tensor", 2, 3, 0, 0},
    {"all_gather_into_tensor", 1, "input_tensor", 2, 3, 0, 0},
    {"_all_gather_base", 1, "input_tensor", 2, 3, 0, 0},
    {"all_gather_coalesced", 1, "input_tensor_list", 2, 3, 0, 0},
    {"gather", 0, "tensor", 3, 4, 0, 0},
    {"scatter", 0, "tensor", 3, 4, 0, 0},
    {"reduce_scatter", 1, "input_list", 3, 4, 0, 0},
    {"reduce_scatter_single", 1, "input", 3, 4, 0, 0},
    {"reduce_scatter_tensor", 1, "input", 3, 4, 0, 0},
    {"_reduce_scatter_base", 1, "input", 3, 4, 0, 0},
    {"all_to_all", 1, "input_tensor_list", 2, 3, 0, 0},
    {"all_to_all_single", 1, "input", 4, 5, 0, 0},
    {"barrier", -1, NULL, 0, 1, 0, 0},
    {"send", 0, "tensor", 2, -1, 0, 0},
    {"recv", 0, "tensor", 2, -1, 0, 0},
    {"isend", 0, "tensor", 2, -1, 1, 0},
    {"irecv", 0, "tensor", 2, -1, 1, 0},
    /* DDP's buffer broadcast at the start of each forward (models with buffers, e.g. BatchNorm)
     * and its parameter broadcast at construction: (process_group, tensors, buffer_size, src). */
    {"_broadcast_coalesced", 1, "tensors", 0, -1, 0, 1},
};
#define NSPECS ((int)(sizeof specs / sizeof specs[0]))

typedef struct pb_collective {
    PyObject_HEAD
    PyObject *original;
    const op_spec *spec;
    uint32_t op_id;
} pb_collective;

/* A row waiting for its Work to complete; called by the future's then(). What the chained
 * future then holds: None (a side chain; the caller keeps the Work's own future), the value, or
 * the value's first item (DDP's Reducer wants the bucket tensor as a Python object, which a
 * Work's future does not hold, so the hook returns fut.then(p) as torch's allreduce_hook returns
 * fut.then(lambda f: f.value()[0])). */
enum { RESULT_NONE, RESULT_VALUE, RESULT_FIRST };

typedef struct pb_pending {
    PyObject_HEAD
    pb_nccl_row row;
    int64_t start_ns;
    int record; /* push the row */
    int result; /* RESULT_* */
    int slot;     /* the job's collective slot to complete (job.h), or -1 */
    uint64_t seq; /* the sequence number the call got on that slot */
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
static uint32_t origin_call, origin_ddp, op_all_reduce, op_comm_hook;

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
    /* NULL once the agent detached: a collective or a DDP hook that was running then (it let go
     * of the GIL) ends after the detach dropped them */
    if (!get_world_size || !get_backend) return;
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
    PyObject *value = NULL;
    if (p->slot >= 0) {
        /* The async collective completed (or failed): its state for `probing hang`. */
        PyObject *fut = NULL, *v = NULL;
        if (PyArg_ParseTuple(args, "O", &fut)) v = PyObject_CallMethod(fut, "value", NULL);
        pb_job_coll_exit_at(p->slot, p->seq, v != NULL);
        Py_XDECREF(v);
        PyErr_Clear();
    }
    if (p->result != RESULT_NONE) {
        PyObject *fut;
        if (!PyArg_ParseTuple(args, "O", &fut)) return NULL;
        value = PyObject_CallMethod(fut, "value", NULL);
        if (!value) return NULL; /* the collective failed: the waiter sees the same error */
    }
    if (p->record && atomic_load_explicit(&enabled, memory_order_relaxed) && pb_table_nccl_trace.ring) {
        p->row.duration_ns = pb_now_ns() - p->start_ns;
        pb_ring_push(pb_table_nccl_trace.ring, &p->row);
    }
    if (p->result == RESULT_NONE) Py_RETURN_NONE;
    if (p->result == RESULT_VALUE) return value;
    PyObject *item = PySequence_GetItem(value, 0);
    Py_DECREF(value);
    return item;
}

/* fut.then(a pending row), or NULL with an exception. */
static PyObject *then_row(PyObject *fut, const pb_nccl_row *row, int64_t start_ns, int record, int result,
                          int slot, uint64_t seq)
{
    pb_pending *p = PyObject_New(pb_pending, &pending_type);
    if (!p) return NULL;
    p->row = *row;
    p->start_ns = start_ns;
    p->record = record;
    p->result = result;
    p->slot = slot;
    p->seq = seq;
    PyObject *chained = PyObject_CallMethod(fut, "then", "O", (PyObject *)p);
    Py_DECREF((PyObject *)p);
    return chained;
}

/* Chains the row, and the completion of the job's collective slot (slot, seq), to the Work's
 * future. Returns 1 if both will be done on completion, 0 if the caller must do them now. Never
 * leaves an exception set. */
static int chain_row(PyObject *fut, const pb_nccl_row *row, int64_t start_ns, int slot, uint64_t seq)
{
    PyObject *chained = fut ? then_row(fut, row, start_ns, 1, RESULT_NONE, slot, seq) : NULL;
    int ok = chained != NULL;
    Py_XDECREF(chained);
    PyErr_Clear();
    return ok;
}

static int push_on_completion(PyObject *work, const pb_nccl_row *row, int64_t start_ns, int slot, uint64_t seq)
{
    if (!work || work == Py_None) return 0;
    PyObject *fut = PyObject_CallMethod(work, "get_future", NULL);
    int ok = fut ? chain_row(fut, row, start_ns, slot, seq) : 0;
    Py_XDECREF(fut);
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
    int64_t step = pb_step_current();
    int64_t step_start = pb_step_start();
    pb_nccl_row r = {0};
    PyObject *saved_type, *saved_value, *saved_tb;
    PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
    if (spec->payload_pos >= 0 || spec->payload_kw)
        add_payload(arg_at(args, kwargs, spec->payload_pos, spec->payload_kw), 0, &r.bytes, &r.dtype);
    PyErr_Restore(saved_type, saved_value, saved_tb);
    /* Sequence number and state per group, for `probing hang` (job.h). */
    int slot = pb_job_coll_enter(arg_at(args, kwargs, spec->group_pos, "group"), c->op_id, r.bytes);
    uint64_t seq = pb_job_coll_seq(slot);
    depth++;
    /* on CUDA, the device's time for it: a span of its own in python.device_trace (named by the
     * operation, seq = its sequence number in the group) that is also the step's collectives */
    int device = pb_device_on;
    if (device) pb_device_module(1, PB_ACT_COLLECTIVE, c->op_id, c->op_id, (uint32_t)seq, PB_DEVICE_STAGE_COLLECTIVE, 0);
    int64_t start = pb_now_ns();
    PyObject *result = PyObject_Call(c->original, args, kwargs);
    int64_t end = pb_now_ns();
    /* The collective let go of the GIL: the agent may have detached meanwhile (and another may
     * have started). What the agent's stop frees is used only while it still records. */
    int recording = atomic_load_explicit(&enabled, memory_order_relaxed) && pb_table_nccl_trace.ring;
    if (device && recording)
        pb_device_module(0, PB_ACT_COLLECTIVE, c->op_id, c->op_id, (uint32_t)seq, PB_DEVICE_STAGE_COLLECTIVE, 0);
    depth--;
    if (!result) {
        pb_job_coll_exit_at(slot, seq, 0);
        return NULL;
    }

    pb_step_collectives_total_ns += end - start;
    pb_step_interval(PB_ACT_COLLECTIVE, start, end);
    r.step = step;
    r.time_offset_ns = step_start ? start - step_start : 0;
    r.duration_ns = end - start;
    r.operation_type = c->op_id;
    r.origin = origin_call;
    r.rank = rank;
    PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
    if (recording) describe_group(arg_at(args, kwargs, spec->group_pos, "group"), &r);
    int async_op = spec->always_async;
    PyObject *flag = spec->async_pos >= 0 ? arg_at(args, kwargs, spec->async_pos, "async_op") : NULL;
    if (flag) {
        int t = PyObject_IsTrue(flag);
        async_op = t > 0;
        if (t < 0) PyErr_Clear();
    }
    r.async_op = (uint8_t)async_op;
    /* An async call's row and its job state (entered until the Work completes, so a rank blocked
     * in work.wait() shows as waiting in it) go to the Work's future; a synchronous call, or a
     * Work without a future, is done at return. */
    if (!recording || !async_op || !push_on_completion(result, &r, start, slot, seq)) {
        pb_job_coll_exit_at(slot, seq, 1);
        if (recording) pb_ring_push(pb_table_nccl_trace.ring, &r);
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

/* ---------------------------------------------------------------- DDP gradient buckets [GIL held]
 *
 * DistributedDataParallel all-reduces gradients from C++ (its Reducer), out of sight of the
 * wrappers above. The Reducer calls a communication hook per gradient bucket when one is
 * registered, so probing registers one at the first forward of each DDP module: it does what the
 * built-in path does (divide the bucket by the group size, SUM all-reduce on DDP's process group,
 * return the Work's future) and chains a row to that future. Numerics: the built-in path divides
 * while copying gradients into the bucket, the hook divides the bucket after the copy, with
 * div_(n). For a group size that is a power of two, x / n is exact scaling and every way of
 * dividing gives the same bits, so the hook is installed by default only then
 * (PROBING_DDP_HOOK=1 forces it for other sizes, =0 turns it off). It is not installed when the
 * program registered a built-in hook, uses DDP's mixed_precision, the Python reducer
 * (compiled autograd), delayed all-reduce, or sparse gradients.
 * A hook the program registers itself (register_comm_hook, before or after the first forward) is
 * called by probing's with the program's own state and bucket, and its future is returned
 * unchanged: its rows are "ddp_comm_hook" (what it sends is its business). Detach cannot take a
 * hook out of a Reducer: it stays, and records nothing.
 */

typedef struct pb_ddp_hook {
    PyObject_HEAD
    PyObject *group;                  /* DDP's process group */
    long world;
    PyObject *user_hook, *user_state; /* the program's own hook, or NULL */
} pb_ddp_hook;

static PyTypeObject ddp_hook_type = {PyVarObject_HEAD_INIT(NULL, 0).tp_name = "probing._agent.DDPCommHook"};

static PyObject *ddp_cls, *wrap_ddp_forward, *wrap_ddp_register, *wrap_ddp_builtin;
static PyObject *register_comm_hook_fn; /* torch.distributed._register_comm_hook */
static const char MARK[] = "_probing_comm_hook";

static void ddp_hook_row(pb_ddp_hook *h, PyObject *bucket, uint32_t op, pb_nccl_row *r, int64_t start)
{
    int64_t step_start = pb_step_start();
    r->step = pb_step_current();
    r->time_offset_ns = step_start ? start - step_start : 0;
    r->operation_type = op;
    r->origin = origin_ddp;
    r->rank = rank;
    r->async_op = 1;
    r->group_size = (uint32_t)h->world;
    PyObject *buf = PyObject_CallMethod(bucket, "buffer", NULL);
    if (buf) add_payload(buf, 0, &r->bytes, &r->dtype);
    Py_XDECREF(buf);
    PyErr_Clear();
    describe_group(h->group, r);
    r->group_size = (uint32_t)h->world;
}

/* hook(state, bucket) -> Future, called by the Reducer for each bucket. */
static PyObject *ddp_hook_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    pb_ddp_hook *h = (pb_ddp_hook *)self;
    PyObject *state, *bucket, *fut = NULL;
    if (!PyArg_ParseTuple(args, "OO", &state, &bucket)) return NULL;
    int64_t start = pb_now_ns();
    if (h->user_hook) {
        fut = PyObject_CallFunctionObjArgs(h->user_hook, h->user_state, bucket, NULL);
    } else {
        PyObject *buf = PyObject_CallMethod(bucket, "buffer", NULL);
        PyObject *list = NULL, *work = NULL;
        if (buf && h->world > 1) {
            PyObject *r = PyObject_CallMethod(buf, "div_", "l", h->world);
            if (!r) Py_CLEAR(buf);
            Py_XDECREF(r);
        }
        if (buf) list = PyList_New(1);
        if (list) {
            Py_INCREF(buf);
            PyList_SET_ITEM(list, 0, buf);
            work = PyObject_CallMethod(h->group, "allreduce", "O", list);
        }
        if (work) fut = PyObject_CallMethod(work, "get_future", NULL);
        Py_XDECREF(work);
        Py_XDECREF(list);
        Py_XDECREF(buf);
    }
    if (!fut) return NULL; /* the program's hook (or the all-reduce) failed: as without probing */
    pb_nccl_row r = {0};
    int record = atomic_load_explicit(&enabled, memory_order_relaxed) && pb_table_nccl_trace.ring;
    if (record) ddp_hook_row(h, bucket, h->user_hook ? op_comm_hook : op_all_reduce, &r, start);
    /* The bucket's all-reduce counts in its group's sequence (job.h): hang's state and the
     * arrivals of `stragglers`. Every rank runs the same buckets in the same order. */
    int slot = pb_job_coll_enter(h->group, h->user_hook ? op_comm_hook : op_all_reduce, r.bytes);
    uint64_t seq = pb_job_coll_seq(slot);
    PyObject *chained = then_row(fut, &r, start, record, h->user_hook ? RESULT_VALUE : RESULT_FIRST, slot, seq);
    Py_DECREF(fut);
    return chained;
}

static void ddp_hook_dealloc(PyObject *self)
{
    pb_ddp_hook *h = (pb_ddp_hook *)self;
    Py_XDECREF(h->group);
    Py_XDECREF(h->user_hook);
    Py_XDECREF(h->user_state);
    Py_TYPE(self)->tp_free(self);
}

/* The DDP instance's marker: our hook, Py_None (decided: no hook), or NULL (not decided yet).
 * Borrowed. */
static PyObject *ddp_mark(PyObject *ddp)
{
    PyObject **dictptr = _PyObject_GetDictPtr(ddp);
    if (!dictptr || !*dictptr) return NULL;
    return PyDict_GetItemString(*dictptr, MARK);
}

static void ddp_set_mark(PyObject *ddp, PyObject *value)
{
    PyObject **dictptr = _PyObject_GetDictPtr(ddp);
    if (dictptr && *dictptr) PyDict_SetItemString(*dictptr, MARK, value);
    PyErr_Clear();
}

static int attr_true(PyObject *o, const char *name)
{
    PyObject *v = PyObject_GetAttrString(o, name);
    int t = v ? PyObject_IsTrue(v) : 0;
    Py_XDECREF(v);
    PyErr_Clear();
    return t > 0;
}

/* A new hook for ddp, registered with its Reducer; NULL (no exception) when it cannot be. */
static pb_ddp_hook *ddp_register(PyObject *ddp)
{
    PyObject *group = PyObject_GetAttrString(ddp, "process_group");
    PyObject *reducer = group ? PyObject_GetAttrString(ddp, "reducer") : NULL;
    PyObject *size = group ? PyObject_CallMethod(group, "size", NULL) : NULL;
    pb_ddp_hook *h = NULL;
    if (!reducer || !size || !register_comm_hook_fn) goto out;
    h = PyObject_New(pb_ddp_hook, &ddp_hook_type);
    if (!h) goto out;
    h->group = group;
    group = NULL;
    h->world = PyLong_AsLong(size);
    h->user_hook = h->user_state = NULL;
    PyObject *r = PyObject_CallFunctionObjArgs(register_comm_hook_fn, reducer, Py_None, (PyObject *)h, NULL);
    if (!r) Py_CLEAR(h);
    Py_XDECREF(r);
out:
    Py_XDECREF(size);
    Py_XDECREF(reducer);
    Py_XDECREF(group);
    PyErr_Clear();
    return h;
}

/* Whether probing may stand in for DDP's built-in all-reduce on this instance. */
static int ddp_hook_allowed(PyObject *ddp)
{
    int forced = pb_config_int("PROBING_DDP_HOOK", -1);
    if (forced == 0) return 0;
    PyObject *hooks = PyObject_GetAttrString(ddp, "_comm_hooks");
    Py_ssize_t n = hooks && PyList_Check(hooks) ? PyList_GET_SIZE(hooks) : -1;
    Py_XDECREF(hooks);
    PyErr_Clear();
    if (n != 0) return 0; /* the program's hook is registered, or this DDP is not what we know */
    PyObject *mp = PyObject_GetAttrString(ddp, "mixed_precision");
    int has_mp = mp && mp != Py_None;
    Py_XDECREF(mp);
    PyErr_Clear();
    if (has_mp || attr_true(ddp, "_use_python_reducer") || attr_true(ddp, "_delay_all_reduce_all_params"))
        return 0;
    /* Sparse gradients (nn.Embedding(sparse=True) and the like) take another path. */
    PyObject *inner = PyObject_GetAttrString(ddp, "module");
    PyObject *mods = inner ? PyObject_CallMethod(inner, "modules", NULL) : NULL;
    PyObject *it = mods ? PyObject_GetIter(mods) : NULL, *m;
    int sparse = !it;
    while (it && !sparse && (m = PyIter_Next(it))) {
        sparse = attr_true(m, "sparse");
        Py_DECREF(m);
    }
    Py_XDECREF(it);
    Py_XDECREF(mods);
    Py_XDECREF(inner);
    PyErr_Clear();
    if (sparse) return 0;
    if (forced == 1) return 1;
    PyObject *group = PyObject_GetAttrString(ddp, "process_group");
    PyObject *size = group ? PyObject_CallMethod(group, "size", NULL) : NULL;
    long world = size ? PyLong_AsLong(size) : -1;
    Py_XDECREF(size);
    Py_XDECREF(group);
    PyErr_Clear();
    return world >= 1 && (world & (world - 1)) == 0;
}

/* DistributedDataParallel.forward(self, ...): decides once per instance. */
static PyObject *ddp_forward(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n >= 1 && !ddp_mark(args[0])) {
        PyObject *saved_type, *saved_value, *saved_tb;
        PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
        pb_ddp_hook *h = ddp_hook_allowed(args[0]) ? ddp_register(args[0]) : NULL;
        ddp_set_mark(args[0], h ? (PyObject *)h : Py_None);
        Py_XDECREF((PyObject *)h);
        PyErr_Restore(saved_type, saved_value, saved_tb);
    }
    return PyObject_Vectorcall(orig, args, nargsf, kwnames);
}

/* What DistributedDataParallel.register_comm_hook does besides registering with the Reducer. */
static int ddp_bookkeeping(PyObject *ddp, PyObject *state, PyObject *hook)
{
    PyObject *r = PyObject_CallMethod(ddp, "_check_comm_hook", "O", hook);
    if (!r) return -1;
    Py_DECREF(r);
    PyObject *logger = PyObject_GetAttrString(ddp, "logger");
    PyObject *qualname = logger && logger != Py_None ? PyObject_GetAttrString(hook, "__qualname__") : NULL;
    if (!qualname) PyErr_Clear();
    if (qualname) {
        r = PyObject_CallMethod(logger, "_set_comm_hook_name", "O", qualname);
        Py_XDECREF(r);
        Py_DECREF(qualname);
    }
    Py_XDECREF(logger);
    PyErr_Clear();
    PyObject *hooks = PyObject_GetAttrString(ddp, "_comm_hooks");
    PyObject *pair = hooks ? PyTuple_Pack(2, hook, state) : NULL;
    int rc = pair && PyList_Check(hooks) ? PyList_Append(hooks, pair) : -1;
    Py_XDECREF(pair);
    Py_XDECREF(hooks);
    if (rc) PyErr_Clear();
    return 0;
}

/* DistributedDataParallel.register_comm_hook(self, state, hook). */
static PyObject *ddp_register_comm_hook(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames || n != 3 || !atomic_load_explicit(&enabled, memory_order_relaxed))
        return PyObject_Vectorcall(orig, args, nargsf, kwnames);
    PyObject *ddp = args[0], *state = args[1], *hook = args[2];
    PyObject *mark = ddp_mark(ddp);
    pb_ddp_hook *h = NULL;
    if (mark && mark != Py_None && Py_IS_TYPE(mark, &ddp_hook_type)) {
        h = (pb_ddp_hook *)mark;
        if (h->user_hook) {
            PyErr_SetString(PyExc_RuntimeError, "register_comm_hook or register_builtin_comm_hook can only be called once.");
            return NULL;
        }
        Py_INCREF(h);
    } else if (mark || pb_config_int("PROBING_DDP_HOOK", -1) == 0) {
        return PyObject_Vectorcall(orig, args, nargsf, kwnames);
    }
    if (ddp_bookkeeping(ddp, state, hook)) {
        Py_XDECREF((PyObject *)h);
        return NULL; /* _check_comm_hook's error, as torch raises it */
    }
    if (!h && !(h = ddp_register(ddp))) {
        /* Could not stand in: register the program's hook the plain way. */
        PyObject *reducer = PyObject_GetAttrString(ddp, "reducer");
        PyObject *r = reducer ? PyObject_CallFunctionObjArgs(register_comm_hook_fn, reducer, state, hook, NULL) : NULL;
        Py_XDECREF(reducer);
        ddp_set_mark(ddp, Py_None);
        if (!r) return NULL;
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    Py_INCREF(hook);
    Py_INCREF(state);
    h->user_hook = hook;
    h->user_state = state;
    ddp_set_mark(ddp, (PyObject *)h);
    Py_DECREF((PyObject *)h);
    Py_RETURN_NONE;
}

/* DistributedDataParallel._register_builtin_comm_hook(self, type): probing keeps out. */
static PyObject *ddp_register_builtin(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) >= 1 && !ddp_mark(args[0])) ddp_set_mark(args[0], Py_None);
    return PyObject_Vectorcall(orig, args, nargsf, kwnames);
}

int pb_distributed_install_ddp(void)
{
    if (ddp_cls) return 0;
    PyObject *mod = PyImport_ImportModule("torch.nn.parallel.distributed");
    PyObject *dist = mod ? PyImport_ImportModule("torch.distributed") : NULL;
    if (!dist) {
        Py_XDECREF(mod);
        return -1;
    }
    register_comm_hook_fn = PyObject_GetAttrString(dist, "_register_comm_hook");
    ddp_cls = register_comm_hook_fn ? PyObject_GetAttrString(mod, "DistributedDataParallel") : NULL;
    Py_DECREF(dist);
    Py_DECREF(mod);
    if (!ddp_cls) return -1;
    if (!origin_ddp) {
        origin_call = pb_intern_cstr("call");
        origin_ddp = pb_intern_cstr("ddp");
        op_all_reduce = pb_intern_cstr("all_reduce");
        op_comm_hook = pb_intern_cstr("ddp_comm_hook");
    }
    if (pb_wrap_attr(ddp_cls, "forward", ddp_forward, &wrap_ddp_forward) ||
        pb_wrap_attr(ddp_cls, "register_comm_hook", ddp_register_comm_hook, &wrap_ddp_register) ||
        pb_wrap_attr(ddp_cls, "_register_builtin_comm_hook", ddp_register_builtin, &wrap_ddp_builtin))
        return -1;
    return 0;
}

static void ddp_remove(void)
{
    if (!ddp_cls) return;
    pb_unwrap_attr(ddp_cls, "forward", &wrap_ddp_forward);
    pb_unwrap_attr(ddp_cls, "register_comm_hook", &wrap_ddp_register);
    pb_unwrap_attr(ddp_cls, "_register_builtin_comm_hook", &wrap_ddp_builtin);
    Py_CLEAR(ddp_cls);
    Py_CLEAR(register_comm_hook_fn);
}

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
    ddp_hook_type.tp_basicsize = sizeof(pb_ddp_hook);
    ddp_hook_type.tp_flags = Py_TPFLAGS_DEFAULT;
    ddp_hook_type.tp_call = ddp_hook_call;
    ddp_hook_type.tp_dealloc = ddp_hook_dealloc;
    ddp_hook_type.tp_doc = "probing's DDP communication hook: DDP's all-reduce, recorded into python.nccl_trace";
    if (PyType_Ready(&collective_type) || PyType_Ready(&pending_type) || PyType_Ready(&ddp_hook_type))
        return -1;
    return 0;
}

/* ---------------------------------------------------------------- the job registry [GIL held]
 * init_process_group registers this rank in the job's store once it returns (job.h);
 * destroy_process_group stops the heartbeat first, while the store still exists. */

static PyObject *wrap_init_pg, *wrap_destroy_pg;

static PyObject *init_pg(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *r = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    if (r && atomic_load_explicit(&enabled, memory_order_relaxed)) pb_job_register();
    return r;
}

static PyObject *destroy_pg(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    int whole = n == 0 || args[0] == Py_None;
    if (kwnames) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++)
            if (args[n + i] != Py_None) whole = 0;
    }
    if (whole) pb_job_stop();
    return PyObject_Vectorcall(orig, args, nargsf, kwnames);
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
    origin_call = pb_intern_cstr("call");
    origin_ddp = pb_intern_cstr("ddp");
    op_all_reduce = pb_intern_cstr("all_reduce");
    op_comm_hook = pb_intern_cstr("ddp_comm_hook");
    for (int i = 0; i < NSPECS; i++) {
        PyObject *home = specs[i].dist_only ? dist : c10d;
        if (!home) continue;
        PyObject *orig = PyObject_GetAttrString(home, specs[i].name);
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
        int rc = PyObject_SetAttrString(home, specs[i].name, (PyObject *)w);
        if (!rc && dist && home != dist) {
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
    if (pb_wrap_attr(c10d, "init_process_group", init_pg, &wrap_init_pg) ||
        pb_wrap_attr(c10d, "destroy_process_group", destroy_pg, &wrap_destroy_pg)) {
        PyErr_Clear(); /* the job registry is off; collectives are still recorded */
    } else if (dist) {
        const char *names[2] = {"init_process_group", "destroy_process_group"};
        for (int i = 0; i < 2; i++) {
            PyObject *there = PyObject_GetAttrString(dist, names[i]);
            PyObject *wrapped = PyObject_GetAttrString(c10d, names[i]);
            if (there && wrapped && there != wrapped && Py_TYPE(there) == &PyFunction_Type)
                PyObject_SetAttrString(dist, names[i], wrapped);
            Py_XDECREF(there);
            Py_XDECREF(wrapped);
            PyErr_Clear();
        }
    }
    Py_XDECREF(dist);
    installed = 1;
    atomic_store(&enabled, 1);
    pb_job_register(); /* attached after init_process_group (inject): register now */
    return 0;
fail:
    Py_XDECREF(dist);
    return -1;
}

void pb_distributed_remove(void)
{
    atomic_store(&enabled, 0);
    ddp_remove();
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
    if (c10d) {
        pb_unwrap_attr(c10d, "init_process_group", &wrap_init_pg);
        pb_unwrap_attr(c10d, "destroy_process_group", &wrap_destroy_pg);
    }
    Py_CLEAR(get_world_size);
    Py_CLEAR(get_backend);
    Py_CLEAR(c10d);
    installed = 0;
}

void pb_distributed_disable(void) { atomic_store(&enabled, 0); }
