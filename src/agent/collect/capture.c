/*
 * capture.c - the Python side of `probing <target> capture`; see capture.h.
 *
 * Costs when no capture runs: one relaxed atomic load per step (pb_capture_wanted, in
 * torch_hooks.c end_step) and one plain int test per module call (pb_capture_ranges). While a
 * capture runs, each module call costs two calls of torch's record-function ops (about 10-30 us
 * on a CPU; the profiler's own cost per op comes on top), and each step boundary one call into
 * probing._capture. Processing the results (parsing, aggregating, the trace file) happens on a
 * thread of probing._capture's own, not on the training thread.
 */
#include "capture.h"

#include "capture_state.h"
#include "config.h"
#include "intern.h"
#include "log.h"
#include "step.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define MODULE_RANGE_PREFIX "module: " /* probing/_capture.py MODULE_RANGE */

int pb_capture_ranges;

static PyObject *capture_py;                /* probing._capture, imported at the first capture */
static PyObject *range_enter, *range_exit;  /* torch's record-function ops, from start() */
static PyObject **range_names;              /* "module: <name>" by intern id, while capturing */
static uint32_t range_names_cap;
static int in_hook;                         /* a capture call is running (no re-entry) */

/* ---- the table ---- */

static const char *const stage_names[] = {"forward", "backward", "optimizer", "other", NULL};
static const char *const device_names[] = {"cpu", "cuda", NULL};

#define COL(name, kind, field, doc) {name, kind, offsetof(pb_torch_ops_row, field), NULL, doc}

static const pb_column ops_cols[] = {
    COL("capture", PB_COL_U32, capture, "capture number in this process (1, 2, ...), as 'probing <target> capture' prints it"),
    COL("step", PB_COL_I64, step, "training step the op ran in (kernel rows: the step of the op that launched the kernel)"),
    COL("rank", PB_COL_U16, rank, "distributed rank (RANK), 0 when not distributed"),
    COL("name", PB_COL_STR_ID, name, "op (aten::addmm), record_function range (Optimizer.step#SGD.step), backward function, or on kernel rows the kernel"),
    COL("module", PB_COL_STR_ID_NULL, module, "qualified name of the innermost module the op ran under; backward: the module whose forward created the autograd node, else the node's name; NULL outside any module"),
    {"stage", PB_COL_ENUM_U8, offsetof(pb_torch_ops_row, stage), stage_names, "'forward' (under a module), 'backward' (under an autograd node), 'optimizer' (optimizer.step/zero_grad) or 'other'"},
    {"device_type", PB_COL_ENUM_U8, offsetof(pb_torch_ops_row, device_type), device_names, "'cpu' for ops run by the CPU (their kernels' time is in the device columns), 'cuda' for kernel rows"},
    COL("calls", PB_COL_U32, calls, "executions summed in this row"),
    COL("self_cpu_us", PB_COL_F64, self_cpu_us, "microseconds of CPU time in the op itself, without the ops it called; NULL on kernel rows"),
    COL("total_cpu_us", PB_COL_F64, total_cpu_us, "microseconds from the op's start to its end, the ops it called included; NULL on kernel rows"),
    COL("self_device_us", PB_COL_F64, self_device_us, "microseconds of device kernels the op launched itself (kernel rows: the kernel's time); NULL when only CPU activities were captured"),
    COL("total_device_us", PB_COL_F64, total_device_us, "microseconds of device kernels of the op and the ops it called; NULL when only CPU activities were captured"),
    COL("self_cpu_memory", PB_COL_I64_NULL, self_cpu_memory, "bytes allocated minus bytes freed on the CPU by the op itself; NULL without --memory"),
    COL("self_device_memory", PB_COL_I64_NULL, self_device_memory, "bytes allocated minus bytes freed on the device by the op itself; NULL without --memory or without a device"),
    COL("input_shapes", PB_COL_STR_ID_NULL, input_shapes, "shapes of the op's inputs ([[8, 32], [32, 64], []]); NULL without --shapes"),
    COL("stack", PB_COL_STR_ID_NULL, stack, "innermost Python frames outside torch that called the op ('file(line): function; ...'); NULL without --stack"),
};

pb_table pb_table_torch_ops = {
    .schema = "python",
    .name = "torch_ops",
    .doc = "op-level results of 'probing <target> capture' (torch.profiler), summed per step, op, module, stage, shapes and stack",
    .columns = ops_cols,
    .ncolumns = (int)(sizeof ops_cols / sizeof ops_cols[0]),
    .row_size = sizeof(pb_torch_ops_row),
    .step_column = 1, /* captures end before the next starts, and each pushes its rows by step */
    .empty_reason = "empty until 'probing <target> capture' has captured steps",
};

int pb_capture_init(const char *trace_prefix)
{
    int64_t rows = pb_config_int("PROBING_CAPTURE_ROWS", 128 * 1024);
    if (rows < 1) rows = 1;
    int rc = pb_ring_create(&pb_table_torch_ops.ring, sizeof(pb_torch_ops_row), (uint64_t)rows);
    if (rc) return rc;
    if ((rc = pb_registry_add(&pb_table_torch_ops))) {
        pb_ring_destroy(pb_table_torch_ops.ring);
        pb_table_torch_ops.ring = NULL;
        return rc;
    }
    pb_capture_state_reset(trace_prefix);
    return 0;
}

/* ---- helpers (GIL held) ---- */

/* The pending Python exception as "Type: message" in buf, cleared. */
static const char *take_error(char *buf, size_t len)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    const char *type = et ? ((PyTypeObject *)et)->tp_name : "error";
    const char *dot = strrchr(type, '.');
    PyObject *s = ev ? PyObject_Str(ev) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
    if (!msg) PyErr_Clear();
    snprintf(buf, len, "%s: %s", dot ? dot + 1 : type, msg && *msg ? msg : "(no message)");
    Py_XDECREF(s);
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    return buf;
}

/* probing._capture.<fn>(args...) (args: a new tuple, stolen). A new reference, or NULL with
 * the reason in err. */
static PyObject *call_helper(const char *fn, PyObject *args, char *err, size_t errlen)
{
    PyObject *r = NULL;
    if (!args) goto fail;
    if (!capture_py && !(capture_py = PyImport_ImportModule("probing._capture"))) goto fail;
    PyObject *f = PyObject_GetAttrString(capture_py, fn);
    if (!f) goto fail;
    r = PyObject_Call(f, args, NULL);
    Py_DECREF(f);
fail:
    Py_XDECREF(args);
    if (!r) take_error(err, errlen);
    return r;
}

static void ranges_off(void)
{
    pb_capture_ranges = 0;
    for (uint32_t i = 0; i < range_names_cap; i++) Py_CLEAR(range_names[i]);
}

/* ---- the boundary hook ---- */

static void abort_capture(uint32_t id)
{
    char err[1024];
    ranges_off();
    PyObject *r = call_helper("abort", PyTuple_New(0), err, sizeof err);
    if (!r) pb_log_warn("capture %u: could not stop torch.profiler: %s", id, err);
    Py_XDECREF(r);
    pb_capture_state_aborted(id);
}

static void start_capture(const pb_capture_job *job, int64_t step, unsigned long thread)
{
    char err[1024];
    const pb_capture_request *o = &job->options;
    PyObject *r = call_helper("start", Py_BuildValue("(iii)", o->memory, o->shapes, o->stack),
                              err, sizeof err);
    const char *device = NULL;
    if (r) {
        PyObject *dev = NULL, *enter = NULL, *exit_ = NULL;
        if (!PyArg_ParseTuple(r, "OOO", &dev, &enter, &exit_)) {
            take_error(err, sizeof err);
        } else {
            device = dev == Py_None ? NULL : "cuda";
            Py_INCREF(enter);
            Py_INCREF(exit_);
            Py_XSETREF(range_enter, enter);
            Py_XSETREF(range_exit, exit_);
        }
    }
    int running = pb_capture_state_started(job->id, step, thread, device, r && range_exit ? NULL : err);
    if (running) {
        pb_capture_ranges = 1;
    } else if (r) { /* cancelled while starting: drop what started */
        PyObject *a = call_helper("abort", PyTuple_New(0), err, sizeof err);
        Py_XDECREF(a);
    }
    Py_XDECREF(r);
}

static void stop_capture(const pb_capture_job *job)
{
    char err[1024];
    ranges_off();
    PyObject *path = Py_None;
    Py_INCREF(path);
    if (job->trace_path[0]) Py_SETREF(path, PyUnicode_FromString(job->trace_path));
    PyObject *args = path ? Py_BuildValue("(ILN)", job->id, (long long)job->first_step, path) : NULL;
    PyObject *r = call_helper("stop", args, err, sizeof err);
    if (!r) pb_capture_state_stop_failed(job->id, err);
    Py_XDECREF(r);
}

void pb_capture_boundary(int64_t step)
{
    if (in_hook) return;
    in_hook = 1;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb); /* never disturb an exception of the program's */
    unsigned long thread = PyThread_get_thread_ident();
    pb_capture_job job;
    char err[1024];
    switch (pb_capture_state_boundary(step, thread, &job)) {
    case PB_CAPTURE_ACT_START:
        start_capture(&job, step, thread);
        break;
    case PB_CAPTURE_ACT_MARK: {
        PyObject *r = call_helper("mark", Py_BuildValue("(L)", (long long)step), err, sizeof err);
        Py_XDECREF(r); /* a lost mark only blurs the step of a few ops */
        break;
    }
    case PB_CAPTURE_ACT_STOP:
        stop_capture(&job);
        break;
    case PB_CAPTURE_ACT_ABORT:
        abort_capture(job.id);
        break;
    case PB_CAPTURE_ACT_NONE:
        break;
    }
    PyErr_Restore(et, ev, tb);
    in_hook = 0;
}

void pb_capture_root_call(void)
{
    uint32_t id;
    if (in_hook || pb_capture_state_root_call(PyThread_get_thread_ident()) != PB_CAPTURE_ACT_ABORT) return;
    in_hook = 1;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    pb_capture_state_phase(&id, NULL);
    abort_capture(id);
    PyErr_Restore(et, ev, tb);
    in_hook = 0;
}

/* ---- module ranges ---- */

/* "module: <name>" for intern id name, cached while the capture runs (borrowed). */
static PyObject *range_name(uint32_t name)
{
    if (name >= range_names_cap) {
        uint32_t cap = range_names_cap ? range_names_cap : 256;
        while (cap <= name) cap *= 2;
        PyObject **grown = PyMem_Realloc(range_names, cap * sizeof *grown);
        if (!grown) return NULL;
        memset(grown + range_names_cap, 0, (cap - range_names_cap) * sizeof *grown);
        range_names = grown;
        range_names_cap = cap;
    }
    if (!range_names[name])
        range_names[name] = PyUnicode_FromFormat(MODULE_RANGE_PREFIX "%s", pb_intern_get(name));
    return range_names[name];
}

PyObject *pb_capture_range_enter(uint32_t name)
{
    if (!range_enter) return NULL;
    PyObject *n = range_name(name);
    PyObject *args[2] = {n, Py_None};
    PyObject *handle = n ? PyObject_Vectorcall(range_enter, args, 2, NULL) : NULL;
    if (!handle) PyErr_Clear();
    return handle;
}

void pb_capture_range_exit(PyObject *handle)
{
    if (!handle) return;
    if (range_exit) {
        PyObject *r = PyObject_CallOneArg(range_exit, handle);
        if (r) Py_DECREF(r);
        else PyErr_Clear();
    }
    Py_DECREF(handle);
}

/* ---- results ---- */

static double number_or_nan(PyObject *o)
{
    if (o == Py_None) return NAN;
    double d = PyFloat_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return NAN;
    }
    return d;
}

static int64_t int_or_null(PyObject *o)
{
    if (o == Py_None) return INT64_MIN;
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return INT64_MIN;
    }
    return v;
}

static uint32_t intern_or_zero(const char *s) { return s && *s ? pb_intern_cstr(s) : 0; }

/* One row tuple of probing._capture.to_rows() into r. Returns 0 or -1 (exception set). */
static int parse_row(PyObject *t, uint32_t capture, pb_torch_ops_row *r)
{
    long long step;
    const char *name, *module, *device, *shapes, *stack;
    int stage;
    unsigned int calls;
    PyObject *self_cpu, *total_cpu, *self_dev, *total_dev, *cpu_mem, *dev_mem;
    if (!PyArg_ParseTuple(t, "Lszisi" "OOOO" "OO" "zz", &step, &name, &module, &stage, &device,
                          &calls, &self_cpu, &total_cpu, &self_dev, &total_dev, &cpu_mem, &dev_mem,
                          &shapes, &stack))
        return -1;
    memset(r, 0, sizeof *r);
    r->capture = capture;
    r->step = step;
    r->rank = pb_step_rank();
    r->name = pb_intern_cstr(name);
    r->module = intern_or_zero(module);
    r->stage = (uint8_t)(stage >= PB_OPS_FORWARD && stage <= PB_OPS_OTHER ? stage : PB_OPS_OTHER);
    r->device_type = strcmp(device, "cpu") == 0 ? PB_OPS_CPU : PB_OPS_CUDA;
    r->calls = calls;
    r->self_cpu_us = number_or_nan(self_cpu);
    r->total_cpu_us = number_or_nan(total_cpu);
    r->self_device_us = number_or_nan(self_dev);
    r->total_device_us = number_or_nan(total_dev);
    r->self_cpu_memory = int_or_null(cpu_mem);
    r->self_device_memory = int_or_null(dev_mem);
    r->input_shapes = intern_or_zero(shapes);
    r->stack = intern_or_zero(stack);
    return 0;
}

PyObject *pb_capture_finished_py(PyObject *self, PyObject *args)
{
    unsigned int id;
    PyObject *rows, *error, *info;
    char err[1024];
    if (!PyArg_ParseTuple(args, "IOOO", &id, &rows, &error, &info)) return NULL;
    uint32_t current;
    if (pb_capture_state_phase(&current, NULL) != PB_CAPTURE_PROCESSING || current != id) Py_RETURN_NONE;

    double seconds = 0;
    uint64_t events = 0, stored = 0;
    char trace_error[512];
    trace_error[0] = '\0';
    if (PyDict_Check(info)) {
        PyObject *v = PyDict_GetItemString(info, "processing_s"); /* borrowed */
        if (v) seconds = number_or_nan(v);
        v = PyDict_GetItemString(info, "events");
        if (v && PyLong_Check(v)) events = PyLong_AsUnsignedLongLong(v);
        v = PyDict_GetItemString(info, "trace_error");
        const char *te = v && PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
        if (te) snprintf(trace_error, sizeof trace_error, "%s", te);
        PyErr_Clear();
    }
    const char *why = NULL;
    if (error != Py_None) {
        PyObject *s = PyObject_Str(error);
        const char *cs = s ? PyUnicode_AsUTF8(s) : NULL;
        snprintf(err, sizeof err, "processing the results failed: %s", cs ? cs : "(unknown)");
        PyErr_Clear();
        Py_XDECREF(s);
        why = err;
    } else if (!PyList_Check(rows)) {
        why = "processing the results failed: no rows";
    } else {
        /* Pushes hold the GIL, and so does the agent's stop, which frees the ring. */
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++) {
            pb_torch_ops_row r;
            if (parse_row(PyList_GET_ITEM(rows, i), id, &r)) {
                why = take_error(err, sizeof err);
                break;
            }
            if (!pb_table_torch_ops.ring) break;
            pb_ring_push(pb_table_torch_ops.ring, &r);
            stored++;
        }
    }
    pb_capture_state_finished(id, stored, events, seconds, why, trace_error[0] ? trace_error : NULL);
    Py_RETURN_NONE;
}

/* ---- server ---- */

int pb_capture_serve(void *ctx, pb_capture_verb verb, const pb_capture_request *req, pb_buf *out)
{
    (void)ctx;
    switch (verb) {
    case PB_CAPTURE_START:
        return pb_capture_state_request(req, pb_step_current(), pb_step_active(), out);
    case PB_CAPTURE_STATUS: return pb_capture_state_status(out);
    case PB_CAPTURE_CANCEL: return pb_capture_state_cancel(req ? req->id : 0, out);
    case PB_CAPTURE_TRACE: return pb_capture_state_trace(out);
    case PB_CAPTURE_CLOSE: return pb_capture_state_close(out);
    }
    return 500;
}

/* ---- stop, fork ---- */

void pb_capture_stop(void)
{
    uint32_t id;
    unsigned long thread;
    if (pb_capture_state_phase(&id, &thread) == PB_CAPTURE_RUNNING &&
        thread == PyThread_get_thread_ident()) {
        /* torch.profiler can only be stopped by the thread that started it: from any other
         * thread it stays on until the process ends (detach refuses to run then). */
        char err[1024];
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        ranges_off();
        PyObject *r = call_helper("abort", PyTuple_New(0), err, sizeof err);
        if (!r) pb_log_debug("capture %u left running: %s", id, err);
        Py_XDECREF(r);
        PyErr_Restore(et, ev, tb);
    }
    ranges_off();
    pb_capture_state_free();
    Py_CLEAR(range_enter);
    Py_CLEAR(range_exit);
    PyMem_Free(range_names);
    range_names = NULL;
    range_names_cap = 0;
    pb_ring_destroy(pb_table_torch_ops.ring);
    pb_table_torch_ops.ring = NULL;
}

void pb_capture_forget_after_fork(void)
{
    pb_capture_ranges = 0;
    atomic_store(&pb_capture_wanted, 0);
}
