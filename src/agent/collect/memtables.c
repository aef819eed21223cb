/*
 * memtables.c - python.memory and python.memory_breakdown; see memtables.h.
 *
 * Costs: a step's end-of-step row costs one pread of /proc/self/statm (on CUDA four calls into
 * torch.cuda instead) and one ring push; phase rows are taken on every
 * PROBING_MEMORY_PHASE_EVERY-th step only. The breakdown walks an optimizer's parameters, their
 * .grad and every tensor in optimizer.state, asking each for its storage (untyped_storage():
 * data_ptr(), nbytes()) so that a storage shared by several tensors (tied weights, views of one
 * flat buffer) is counted once: about three Python calls per tensor, so it runs on the first
 * optimizer step and on the sampled steps only (bench/RESULTS.md has its cost).
 */
#include "memtables.h"

#include "config.h"
#include "intern.h"
#include "memsample.h"
#include "pyvalue.h"
#include "step.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- state (GIL held) ---- */

static double cpu_limit_mb = -1;  /* read once: cgroup limit or RAM; NaN when unknown */
static double cuda_total_mb = -1; /* read once: the current GPU's total memory; NaN unknown */
static int64_t phase_every = 50;
static unsigned phases_seen;      /* bit per PB_PHASE_*: each phase row once per sampled step */
static int64_t breakdown_first_step = -1; /* step of the first optimizer step seen */
#define BREAKDOWN_PER_STEP 8
static PyObject *breakdown_done[BREAKDOWN_PER_STEP]; /* optimizers done this step: compared only */
static int breakdown_count;

/* ---- torch objects (owned, set by install) ---- */

static PyTypeObject *tensor_type;
static PyObject *cuda_is_initialized, *cuda_memory_allocated, *cuda_max_memory_allocated,
    *cuda_memory_reserved, *cuda_current_device, *cuda_get_device_properties;
static PyObject *str_param_groups, *str_params, *str_grad, *str_state, *str_untyped_storage,
    *str_data_ptr, *str_nbytes, *str_is_cuda, *str_device, *str_total_memory, *str_local_tensor;
static uint32_t device_cpu, device_mixed;

/* ---- tables ---- */

#define COL PB_COL

static const char *const phase_names[] = {"step", "after_data", "after_forward", "after_loss",
                                          "after_backward", "after_optimizer", "after_zero_grad",
                                          "before_forward", NULL};

static const pb_column memory_cols[] = {
    COL("step", PB_COL_I64, pb_memory_row, step, "training step"),
    {"phase", PB_COL_ENUM_U8, offsetof(pb_memory_row, phase), phase_names, "'step' (end of step) or the phase of a sampled step the figures were read after"},
    COL("device", PB_COL_STR_ID, pb_memory_row, device, "'cpu', or 'cuda:N' once torch.cuda is initialised"),
    COL("allocated_mb", PB_COL_F64, pb_memory_row, allocated_mb, "MB: torch.cuda.memory_allocated(); on CPU the process RSS (as torch_trace.allocated)"),
    COL("max_allocated_mb", PB_COL_F64, pb_memory_row, max_allocated_mb, "MB: torch.cuda.max_memory_allocated(); on CPU the peak sampled RSS since the step began"),
    COL("reserved_mb", PB_COL_F64, pb_memory_row, reserved_mb, "MB: torch.cuda.memory_reserved(); NULL on CPU"),
    COL("rss_mb", PB_COL_F64, pb_memory_row, rss_mb, "MB: process resident set size"),
    COL("limit_mb", PB_COL_F64, pb_memory_row, limit_mb, "MB the process can use: on CUDA the device's total memory; on CPU the cgroup's memory.max, or MemTotal of /proc/meminfo when lower or unlimited; NULL when unknown"),
    COL("rank", PB_COL_U16, pb_memory_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

static const pb_column breakdown_cols[] = {
    COL("step", PB_COL_I64, pb_breakdown_row, step, "training step of the optimizer step"),
    COL("optimizer", PB_COL_STR_ID, pb_breakdown_row, optimizer, "optimizer class (Adam, SGD, ...)"),
    COL("device", PB_COL_STR_ID, pb_breakdown_row, device, "device of the first parameter ('cpu', 'cuda:0'); 'mixed' when some counted tensors are on a GPU and some are not"),
    COL("params", PB_COL_U32, pb_breakdown_row, params, "parameter tensors in the optimizer's param_groups"),
    COL("param_bytes", PB_COL_I64, pb_breakdown_row, param_bytes, "bytes of the parameters' storages, each storage counted once (tied weights, views of one buffer)"),
    COL("grad_bytes", PB_COL_I64, pb_breakdown_row, grad_bytes, "bytes of the parameters' .grad storages as optimizer.step() returned; 0 when gradients are None"),
    COL("state_bytes", PB_COL_I64, pb_breakdown_row, state_bytes, "bytes of the tensor storages in optimizer.state (Adam: exp_avg, exp_avg_sq, step)"),
    COL("state_tensors", PB_COL_U32, pb_breakdown_row, state_tensors, "tensors in optimizer.state"),
    COL("device_total_mb", PB_COL_F64, pb_breakdown_row, device_total_mb, "MB of memory on the parameters' GPU (get_device_properties().total_memory); NULL on CPU"),
    COL("rank", PB_COL_U16, pb_breakdown_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

#define TABLE(var, nm, cols, row, docstr, empty)                                                  \
    pb_table var = {                                                                              \
        .schema = "python", .name = nm, .doc = docstr, .columns = cols,                           \
        .ncolumns = (int)(sizeof cols / sizeof cols[0]), .row_size = sizeof(row), .step_column = 0, \
        .empty_reason = empty,                                                                    \
    }

TABLE(pb_table_memory, "memory", memory_cols, pb_memory_row,
      "memory per step, and per phase on every PROBING_MEMORY_PHASE_EVERY-th step",
      "empty until the first step ends");
TABLE(pb_table_memory_breakdown, "memory_breakdown", breakdown_cols, pb_breakdown_row,
      "bytes of each optimizer's parameters, gradients and state, on the first optimizer step and every PROBING_MEMORY_PHASE_EVERY-th step",
      "empty until the first optimizer step (none without an optimizer, or with PROBING_MEMORY_PHASE_EVERY=0)");
static inline void push(pb_table *t, const void *row)
{
    if (t->ring) pb_ring_push(t->ring, row);
}

/* ---- python.memory ---- */

/* Whether torch.cuda has been initialised by the program (never initialises it). */
int pb_memory_cuda_in_use(void)
{
    if (!cuda_is_initialized) return 0;
    PyObject *r = PyObject_CallNoArgs(cuda_is_initialized);
    int on = r == Py_True;
    Py_XDECREF(r);
    PyErr_Clear();
    return on;
}

/* The first number in file `path` (bytes, or kB with kb set, after `key` when key is not NULL);
 * NaN when the file is absent, says "max" or has no such line. [any thread] */
static double read_limit_bytes(const char *path, const char *key)
{
    char buf[4096];
    FILE *f = fopen(path, "re");
    if (!f) return NAN;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = buf;
    if (key) {
        p = strstr(buf, key);
        if (!p) return NAN;
        p += strlen(key);
    }
    char *end = NULL;
    double v = strtod(p, &end);
    if (end == p || !(v > 0)) return NAN;
    return key ? v * 1024.0 : v;
}

/* MB of memory this process can use on the CPU: the cgroup's limit (v2 memory.max, v1
 * memory.limit_in_bytes) or the machine's RAM, whichever is lower; NaN when neither can be read.
 * Read once: a leak's projection needs the order of magnitude, not a live figure. [GIL held] */
static double cpu_limit(void)
{
    if (cpu_limit_mb >= 0 || isnan(cpu_limit_mb)) return cpu_limit_mb;
    double ram = read_limit_bytes("/proc/meminfo", "MemTotal:");
    double cg = read_limit_bytes("/sys/fs/cgroup/memory.max", NULL);
    if (isnan(cg)) cg = read_limit_bytes("/sys/fs/cgroup/memory/memory.limit_in_bytes", NULL);
    double b = isnan(cg) || (!isnan(ram) && ram < cg) ? ram : cg;
    cpu_limit_mb = isnan(b) ? NAN : b / (1024.0 * 1024.0);
    return cpu_limit_mb;
}

/* MB of the current CUDA device, read once; NaN when it cannot be had. [GIL held] */
static double cuda_limit(double dev)
{
    if (cuda_total_mb >= 0 || isnan(cuda_total_mb)) return cuda_total_mb;
    cuda_total_mb = NAN;
    if (!cuda_get_device_properties || isnan(dev)) return cuda_total_mb;
    PyObject *idx = PyLong_FromLong((long)dev);
    PyObject *props = idx ? PyObject_CallOneArg(cuda_get_device_properties, idx) : NULL;
    PyObject *total = props ? PyObject_GetAttr(props, str_total_memory) : NULL;
    double bytes = total ? PyFloat_AsDouble(total) : NAN;
    if (!PyErr_Occurred() && bytes > 0) cuda_total_mb = bytes / (1024.0 * 1024.0);
    Py_XDECREF(total);
    Py_XDECREF(props);
    Py_XDECREF(idx);
    PyErr_Clear();
    return cuda_total_mb;
}

static void read_memory(pb_memory_row *r, int phase)
{
    r->step = pb_step_current();
    r->phase = (uint8_t)phase;
    r->rank = pb_step_rank();
    r->rss_mb = pb_memsample_read_now_mb();
    if (pb_memory_cuda_in_use()) {
        double dev = pb_py_call_double(cuda_current_device);
        char name[32];
        snprintf(name, sizeof name, "cuda:%d", isnan(dev) ? 0 : (int)dev);
        r->device = pb_intern_cstr(name);
        r->allocated_mb = pb_py_call_double(cuda_memory_allocated) / (1024.0 * 1024.0);
        r->max_allocated_mb = pb_py_call_double(cuda_max_memory_allocated) / (1024.0 * 1024.0);
        r->reserved_mb = pb_py_call_double(cuda_memory_reserved) / (1024.0 * 1024.0);
        r->limit_mb = cuda_limit(dev);
    } else {
        double peak = pb_memsample_peak_mb();
        r->device = device_cpu;
        r->allocated_mb = r->rss_mb;
        r->max_allocated_mb = peak > r->rss_mb ? peak : r->rss_mb;
        r->reserved_mb = NAN;
        r->limit_mb = cpu_limit();
    }
}

static const char *short_class_name(PyObject *o)
{
    const char *n = Py_TYPE(o)->tp_name;
    const char *dot = strrchr(n, '.');
    return dot ? dot + 1 : n;
}

/* ---- the memory breakdown (python.memory_breakdown) ---- */

/* A set of storage addresses, so each storage is counted once per breakdown. */
typedef struct ptr_set {
    uint64_t *slots; /* 0 = empty */
    size_t cap, used;
} ptr_set;

static size_t ptr_hash(uint64_t p) { return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull); }

/* Adds p (not 0). Returns 1 when it was new, 0 when it was there, -1 when out of memory. */
static int ptr_set_add(ptr_set *s, uint64_t p)
{
    if ((s->used + 1) * 2 > s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 256;
        uint64_t *n = calloc(ncap, sizeof *n);
        if (!n) return -1;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->slots[i]) continue;
            size_t j = ptr_hash(s->slots[i]) & (ncap - 1);
            while (n[j]) j = (j + 1) & (ncap - 1);
            n[j] = s->slots[i];
        }
        free(s->slots);
        s->slots = n;
        s->cap = ncap;
    }
    size_t j = ptr_hash(p) & (s->cap - 1);
    while (s->slots[j]) {
        if (s->slots[j] == p) return 0;
        j = (j + 1) & (s->cap - 1);
    }
    s->slots[j] = p;
    s->used++;
    return 1;
}

typedef struct walk {
    ptr_set seen;
    int first_is_cuda; /* -1 until the first counted tensor (the first parameter) */
    int mixed;         /* a counted tensor's device type differs from the first one's */
    int out_of_memory;
} walk;

/* The tensor whose storage holds t's data (new reference): a DTensor's local shard (FSDP2's
 * sharded parameters, their gradients and optimizer state are DTensors, which have no storage
 * of their own; the rank holds DTensor._local_tensor), else t itself. */
static PyObject *local_tensor(PyObject *t)
{
    if (Py_TYPE(t) != tensor_type && strcmp(Py_TYPE(t)->tp_name, "DTensor") == 0) {
        PyObject *local = PyObject_GetAttr(t, str_local_tensor);
        if (local && PyObject_TypeCheck(local, tensor_type)) return local;
        Py_XDECREF(local);
        PyErr_Clear();
    }
    Py_INCREF(t);
    return t;
}

/* Bytes of t's storage when this walk has not counted that storage yet, else 0. Also 0 when t
 * is not a tensor or has no plain storage (sparse, some tensor subclasses). A DTensor counts
 * its local shard. */
static int64_t storage_bytes(walk *w, PyObject *dtensor_or_tensor)
{
    if (!tensor_type || !PyObject_TypeCheck(dtensor_or_tensor, tensor_type)) return 0;
    PyObject *t = local_tensor(dtensor_or_tensor);
    int64_t bytes = 0;
    PyObject *st = PyObject_CallMethodNoArgs(t, str_untyped_storage);
    PyObject *ptr = st ? PyObject_CallMethodNoArgs(st, str_data_ptr) : NULL;
    PyObject *nb = ptr ? PyObject_CallMethodNoArgs(st, str_nbytes) : NULL;
    if (nb) {
        unsigned long long address = PyLong_AsUnsignedLongLong(ptr);
        long long n = PyLong_AsLongLong(nb);
        if (!PyErr_Occurred() && address && n > 0) {
            int added = ptr_set_add(&w->seen, (uint64_t)address);
            if (added < 0) w->out_of_memory = 1;
            if (added > 0) bytes = n;
        }
    }
    PyErr_Clear();
    if (bytes) {
        PyObject *c = PyObject_GetAttr(t, str_is_cuda);
        int cuda = c == Py_True;
        Py_XDECREF(c);
        PyErr_Clear();
        if (w->first_is_cuda < 0) w->first_is_cuda = cuda;
        else if (cuda != w->first_is_cuda) w->mixed = 1;
    }
    Py_XDECREF(nb);
    Py_XDECREF(ptr);
    Py_XDECREF(st);
    Py_DECREF(t);
    return bytes;
}

/* The parameters of an optimizer's param_groups as a new list (each group's params copied, so
 * the walk does not depend on lists the program might change), or NULL. */
static PyObject *optimizer_params(PyObject *optimizer)
{
    PyObject *all = PyList_New(0);
    PyObject *groups = all ? PyObject_GetAttr(optimizer, str_param_groups) : NULL;
    PyObject *gs = groups ? PySequence_Tuple(groups) : NULL;
    for (Py_ssize_t g = 0; gs && g < PyTuple_GET_SIZE(gs); g++) {
        PyObject *params = PyObject_GetItem(PyTuple_GET_ITEM(gs, g), str_params);
        PyObject *ps = params ? PySequence_Tuple(params) : NULL;
        for (Py_ssize_t i = 0; ps && i < PyTuple_GET_SIZE(ps); i++)
            if (PyList_Append(all, PyTuple_GET_ITEM(ps, i))) break;
        Py_XDECREF(ps);
        Py_XDECREF(params);
        PyErr_Clear();
    }
    Py_XDECREF(gs);
    Py_XDECREF(groups);
    PyErr_Clear();
    return all;
}

/* Adds the tensors among the values of a mapping (one optimizer.state entry), and of lists or
 * tuples among them, to r. */
static void count_state_entry(walk *w, pb_breakdown_row *r, PyObject *entry)
{
    PyObject *values = PyMapping_Check(entry) ? PyMapping_Values(entry) : NULL;
    for (Py_ssize_t i = 0; values && i < PyList_GET_SIZE(values); i++) {
        PyObject *v = PyList_GET_ITEM(values, i);
        if (PyList_Check(v) || PyTuple_Check(v)) {
            PyObject *items = PySequence_Tuple(v);
            for (Py_ssize_t k = 0; items && k < PyTuple_GET_SIZE(items); k++) {
                PyObject *t = PyTuple_GET_ITEM(items, k);
                if (!PyObject_TypeCheck(t, tensor_type)) continue;
                r->state_tensors++;
                r->state_bytes += storage_bytes(w, t);
            }
            Py_XDECREF(items);
        } else if (PyObject_TypeCheck(v, tensor_type)) {
            r->state_tensors++;
            r->state_bytes += storage_bytes(w, v);
        }
    }
    Py_XDECREF(values);
    PyErr_Clear();
}

/* Writes the python.memory_breakdown row of one optimizer: its parameters, then their
 * gradients, then its state, each storage counted once across the three. */
static void breakdown(PyObject *optimizer)
{
    pb_breakdown_row r;
    walk w;
    memset(&r, 0, sizeof r);
    memset(&w, 0, sizeof w);
    w.first_is_cuda = -1;
    r.step = pb_step_current();
    r.rank = pb_step_rank();
    r.optimizer = pb_intern_cstr(short_class_name(optimizer));
    r.device = device_cpu;
    r.device_total_mb = NAN;
    PyObject *params = optimizer_params(optimizer);
    Py_ssize_t n = params ? PyList_GET_SIZE(params) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PyList_GET_ITEM(params, i);
        if (!PyObject_TypeCheck(p, tensor_type)) continue;
        r.params++;
        r.param_bytes += storage_bytes(&w, p);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *g = PyObject_GetAttr(PyList_GET_ITEM(params, i), str_grad);
        if (g && g != Py_None) r.grad_bytes += storage_bytes(&w, g);
        Py_XDECREF(g);
        PyErr_Clear();
    }
    PyObject *state = PyObject_GetAttr(optimizer, str_state);
    PyObject *entries = state && PyMapping_Check(state) ? PyMapping_Values(state) : NULL;
    for (Py_ssize_t i = 0; entries && i < PyList_GET_SIZE(entries); i++)
        count_state_entry(&w, &r, PyList_GET_ITEM(entries, i));
    Py_XDECREF(entries);
    Py_XDECREF(state);
    PyErr_Clear();
    if (n > 0) {
        PyObject *first = PyList_GET_ITEM(params, 0);
        PyObject *dev = PyObject_GetAttr(first, str_device);
        if (dev) {
            uint32_t id = pb_py_str_id(dev);
            if (id) r.device = id;
            if (w.first_is_cuda == 1 && cuda_get_device_properties) {
                PyObject *props = PyObject_CallOneArg(cuda_get_device_properties, dev);
                PyObject *total = props ? PyObject_GetAttr(props, str_total_memory) : NULL;
                double bytes = total ? PyFloat_AsDouble(total) : NAN;
                if (!PyErr_Occurred() && bytes > 0) r.device_total_mb = bytes / (1024.0 * 1024.0);
                Py_XDECREF(total);
                Py_XDECREF(props);
            }
        }
        Py_XDECREF(dev);
        PyErr_Clear();
        if (w.mixed) r.device = device_mixed;
    }
    Py_XDECREF(params);
    free(w.seen.slots);
    PyErr_Clear();
    if (!w.out_of_memory) push(&pb_table_memory_breakdown, &r);
}

/* Whether this optimizer step gets a breakdown row: the first optimizer step seen and the
 * sampled steps, once per optimizer per step. */
static int breakdown_due(PyObject *optimizer)
{
    int64_t s = pb_step_current();
    if (phase_every <= 0 || !optimizer || !tensor_type) return 0;
    if (breakdown_first_step < 0) breakdown_first_step = s;
    if (s != breakdown_first_step && s % phase_every != 0) return 0;
    for (int i = 0; i < breakdown_count; i++)
        if (breakdown_done[i] == optimizer) return 0;
    if (breakdown_count == BREAKDOWN_PER_STEP) return 0;
    breakdown_done[breakdown_count++] = optimizer;
    return 1;
}

/* ---- called by collect.c ---- */

void pb_memory_phase(int phase)
{
    if (phase_every <= 0 || pb_step_current() % phase_every != 0 || (phases_seen & (1u << phase))) return;
    phases_seen |= 1u << phase;
    pb_memory_row r;
    memset(&r, 0, sizeof r);
    read_memory(&r, phase);
    push(&pb_table_memory, &r);
}

void pb_memory_optimizer_done(PyObject *optimizer)
{
    pb_memory_phase(PB_PHASE_AFTER_OPTIMIZER);
    if (breakdown_due(optimizer)) breakdown(optimizer);
}

void pb_memory_step_end(int64_t step)
{
    pb_memory_row m;
    memset(&m, 0, sizeof m);
    read_memory(&m, PB_PHASE_STEP);
    m.step = step;
    push(&pb_table_memory, &m);
    phases_seen = 0;
    breakdown_count = 0;
}

int pb_memory_install(PyTypeObject *tensor, PyObject *torch_cuda)
{
    struct {
        PyObject **p;
        const char *s;
    } strs[] = {
        {&str_param_groups, "param_groups"}, {&str_params, "params"}, {&str_grad, "grad"},
        {&str_state, "state"}, {&str_untyped_storage, "untyped_storage"},
        {&str_data_ptr, "data_ptr"}, {&str_nbytes, "nbytes"}, {&str_is_cuda, "is_cuda"},
        {&str_device, "device"}, {&str_total_memory, "total_memory"},
        {&str_local_tensor, "_local_tensor"},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (!*strs[i].p && !(*strs[i].p = PyUnicode_InternFromString(strs[i].s))) return -1;
    phase_every = pb_config_int("PROBING_MEMORY_PHASE_EVERY", 50);
    device_cpu = pb_intern_cstr("cpu");
    device_mixed = pb_intern_cstr("mixed");
    Py_XINCREF(tensor);
    Py_XSETREF(tensor_type, tensor);
    if (torch_cuda) {
        Py_XSETREF(cuda_is_initialized, PyObject_GetAttrString(torch_cuda, "is_initialized"));
        Py_XSETREF(cuda_memory_allocated, PyObject_GetAttrString(torch_cuda, "memory_allocated"));
        Py_XSETREF(cuda_max_memory_allocated, PyObject_GetAttrString(torch_cuda, "max_memory_allocated"));
        Py_XSETREF(cuda_memory_reserved, PyObject_GetAttrString(torch_cuda, "memory_reserved"));
        Py_XSETREF(cuda_current_device, PyObject_GetAttrString(torch_cuda, "current_device"));
        Py_XSETREF(cuda_get_device_properties, PyObject_GetAttrString(torch_cuda, "get_device_properties"));
        PyErr_Clear();
    }
    return 0;
}

void pb_memory_remove(void)
{
    phases_seen = 0;
    breakdown_first_step = -1;
    breakdown_count = 0;
}
