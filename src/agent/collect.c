/*
 * collect.c - data loading, step breakdown, memory and mixed-precision collectors; see collect.h.
 *
 * Costs, per what they observe: a batch costs two clock reads, five attribute reads on the
 * iterator and a look at the batch's first tensor shape; a step costs one pread of
 * /proc/self/statm (on CUDA: four calls into torch.cuda instead) and two ring pushes; a primary
 * root forward costs two (four with autocast on) calls into torch's autocast state. Phase rows
 * (python.memory) read memory at each phase, on every PROBING_MEMORY_PHASE_EVERY-th step only.
 */
#include "collect.h"

#include "clock.h"
#include "config.h"
#include "intern.h"
#include "log.h"
#include "memsample.h"
#include "tables.h"
#include "torch_hooks.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

int64_t pb_step_collectives_ns;

/* ---- per-step state (GIL held) ---- */

static int64_t stage_ns[3];      /* by PB_STAGE_* */
static int64_t data_wait_ns;
static int64_t samples;
static int32_t syncs;
static uint64_t optimizer_steps; /* optimizer.step() calls seen, ever */
static int in_scaler_step;       /* inside GradScaler.step: it writes the amp row itself */
static int autocast_on;
static uint32_t autocast_dtype;
static int64_t phase_every = 50;
static unsigned phases_seen;     /* bit per PB_PHASE_*: each phase row once per sampled step */

/* ---- torch objects (owned, set by install) ---- */

static PyObject *dataloader_iter_cls, *grad_scaler_cls, *optimizer_cls, *torch_cuda;
static PyObject *wrap_next, *wrap_scaler_step, *wrap_zero_grad, *wrap_synchronize;
static PyObject *wrap_item, *wrap_tolist, *wrap_cpu, *str_is_cuda;
static PyTypeObject *tensor_type;
static PyObject *is_autocast_enabled, *get_autocast_dtype, *str_cpu, *str_cuda;
static PyObject *cuda_is_initialized, *cuda_memory_allocated, *cuda_max_memory_allocated,
    *cuda_memory_reserved, *cuda_current_device;
static PyObject *str_num_workers, *str_pin_memory, *str_prefetch_factor, *str_persistent_workers,
    *str_num_yielded, *str_shape, *str_enabled, *str_get_scale;
static uint32_t device_cpu;

/* ---- tables ---- */

#define COL(name, kind, type, field, doc) {name, kind, offsetof(type, field), NULL, doc}

static const pb_column dataloader_cols[] = {
    COL("step", PB_COL_I64, pb_dataloader_row, step, "training step in which next() returned the batch"),
    COL("batch_index", PB_COL_I64, pb_dataloader_row, batch_index, "batches the iterator had yielded before this one (0 = first batch of the epoch)"),
    COL("wait", PB_COL_NS_SEC, pb_dataloader_row, wait_ns, "seconds the training loop blocked in next()"),
    COL("time_offset", PB_COL_NS_SEC, pb_dataloader_row, time_offset_ns, "seconds from the start of the step to the call of next()"),
    COL("num_workers", PB_COL_I32, pb_dataloader_row, num_workers, "DataLoader num_workers"),
    COL("pin_memory", PB_COL_U8, pb_dataloader_row, pin_memory, "1 when batches are pinned (torch turns it off without an accelerator)"),
    COL("prefetch_factor", PB_COL_I32, pb_dataloader_row, prefetch_factor, "batches loaded ahead per worker; 0 when num_workers is 0"),
    COL("persistent_workers", PB_COL_U8, pb_dataloader_row, persistent_workers, "1 when workers outlive an epoch"),
    COL("batch_size", PB_COL_I64, pb_dataloader_row, batch_size, "first dimension of the first tensor in the batch; 0 when unknown"),
    COL("rank", PB_COL_U16, pb_dataloader_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

static const pb_column steps_cols[] = {
    COL("step", PB_COL_I64, pb_steps_row, step, "training step"),
    COL("wall", PB_COL_NS_SEC, pb_steps_row, wall_ns, "seconds from the start of the step to its end"),
    COL("data_wait", PB_COL_NS_SEC, pb_steps_row, data_wait_ns, "seconds blocked in DataLoader next() during the step"),
    COL("forward", PB_COL_NS_SEC, pb_steps_row, forward_ns, "seconds of forward: sum of the step's forward self times in torch_trace"),
    COL("backward", PB_COL_NS_SEC, pb_steps_row, backward_ns, "seconds of backward: sum of the step's backward self times in torch_trace"),
    COL("optimizer", PB_COL_NS_SEC, pb_steps_row, optimizer_ns, "seconds in optimizer.step()"),
    COL("collectives", PB_COL_NS_SEC, pb_steps_row, collectives_ns, "seconds in collective operations issued during the step"),
    COL("other", PB_COL_NS_SEC, pb_steps_row, other_ns, "wall minus all of the above, never below 0: host time nothing above accounts for"),
    COL("samples", PB_COL_I64, pb_steps_row, samples, "sum of the batch_size of the step's batches; 0 when unknown"),
    COL("syncs", PB_COL_I32, pb_steps_row, syncs, "host-device synchronisations in the step: torch.cuda.synchronize(), and .item()/.tolist()/.cpu() on CUDA tensors (0 on CPU)"),
    COL("rank", PB_COL_U16, pb_steps_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

static const char *const phase_names[] = {"step", "after_data", "after_forward", "after_loss",
                                          "after_backward", "after_optimizer", "after_zero_grad", NULL};

static const pb_column memory_cols[] = {
    COL("step", PB_COL_I64, pb_memory_row, step, "training step"),
    {"phase", PB_COL_ENUM_U8, offsetof(pb_memory_row, phase), phase_names, "'step' (end of step) or the phase of a sampled step the figures were read after"},
    COL("device", PB_COL_STR_ID, pb_memory_row, device, "'cpu', or 'cuda:N' once torch.cuda is initialised"),
    COL("allocated_mb", PB_COL_F64, pb_memory_row, allocated_mb, "MB: torch.cuda.memory_allocated(); on CPU the process RSS (as torch_trace.allocated)"),
    COL("max_allocated_mb", PB_COL_F64, pb_memory_row, max_allocated_mb, "MB: torch.cuda.max_memory_allocated(); on CPU the peak sampled RSS since the step began"),
    COL("reserved_mb", PB_COL_F64, pb_memory_row, reserved_mb, "MB: torch.cuda.memory_reserved(); NULL on CPU"),
    COL("rss_mb", PB_COL_F64, pb_memory_row, rss_mb, "MB: process resident set size"),
    COL("rank", PB_COL_U16, pb_memory_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

static const pb_column amp_cols[] = {
    COL("step", PB_COL_I64, pb_amp_row, step, "training step of the optimizer step"),
    COL("scale", PB_COL_F64, pb_amp_row, scale, "GradScaler scale the step's gradients were scaled by; NULL without an enabled GradScaler"),
    COL("found_inf", PB_COL_U8, pb_amp_row, found_inf, "1 when the GradScaler found inf/NaN gradients"),
    COL("skipped", PB_COL_U8, pb_amp_row, skipped, "1 when the GradScaler skipped optimizer.step()"),
    COL("autocast_enabled", PB_COL_U8, pb_amp_row, autocast_enabled, "1 when autocast was on when the model's forward began"),
    COL("autocast_dtype", PB_COL_STR_ID, pb_amp_row, autocast_dtype, "autocast dtype (bfloat16, float16); '' when autocast was off"),
    COL("rank", PB_COL_U16, pb_amp_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

#define TABLE(var, nm, cols, row, docstr, empty)                                                  \
    pb_table var = {                                                                              \
        .schema = "python", .name = nm, .doc = docstr, .columns = cols,                           \
        .ncolumns = (int)(sizeof cols / sizeof cols[0]), .row_size = sizeof(row), .step_column = 0, \
        .empty_reason = empty,                                                                    \
    }

TABLE(pb_table_dataloader_trace, "dataloader_trace", dataloader_cols, pb_dataloader_row,
      "one row per batch the training loop took from a torch DataLoader",
      "empty until the program iterates a torch.utils.data.DataLoader");
TABLE(pb_table_steps, "steps", steps_cols, pb_steps_row,
      "one row per training step: wall time split into data wait, forward, backward, optimizer, collectives, other",
      "empty until the first step ends (optimizer.step(), or the next forward of the model)");
TABLE(pb_table_memory, "memory", memory_cols, pb_memory_row,
      "memory per step, and per phase on every PROBING_MEMORY_PHASE_EVERY-th step",
      "empty until the first step ends");
TABLE(pb_table_amp_trace, "amp_trace", amp_cols, pb_amp_row,
      "one row per optimizer step: GradScaler scale, inf checks, skipped steps, autocast state",
      "empty until the first optimizer step");

static pb_table *const tables[] = {&pb_table_dataloader_trace, &pb_table_steps, &pb_table_memory,
                                   &pb_table_amp_trace};
#define NTABLES (sizeof tables / sizeof tables[0])

int pb_collect_tables_init(void)
{
    static const uint64_t capacity[NTABLES] = {1 << 16, 1 << 16, 1 << 17, 1 << 16};
    int rc = 0;
    for (size_t i = 0; i < NTABLES; i++)
        if ((rc = pb_ring_create(&tables[i]->ring, tables[i]->row_size, capacity[i]))) goto fail;
    for (size_t i = 0; i < NTABLES; i++)
        if ((rc = pb_registry_add(tables[i]))) goto fail;
    phase_every = pb_config_int("PROBING_MEMORY_PHASE_EVERY", 50);
    device_cpu = pb_intern_cstr("cpu");
    return 0;
fail:
    pb_collect_tables_free(); /* a partly registered set: lifecycle resets the registry on stop */
    return rc;
}

void pb_collect_tables_free(void)
{
    for (size_t i = 0; i < NTABLES; i++) {
        pb_ring_destroy(tables[i]->ring);
        tables[i]->ring = NULL;
    }
}

static inline void push(pb_table *t, const void *row)
{
    if (t->ring) pb_ring_push(t->ring, row);
}

/* ---- helpers (GIL held) ---- */

/* An integer attribute of o, or deflt when it is missing or not an integer (bools count). */
static int64_t int_attr(PyObject *o, PyObject *name, int64_t deflt)
{
    PyObject *v = PyObject_GetAttr(o, name);
    int64_t r = deflt;
    if (v && PyLong_Check(v)) {
        r = PyLong_AsLongLong(v);
        if (r == -1 && PyErr_Occurred()) r = deflt;
    }
    Py_XDECREF(v);
    PyErr_Clear();
    return r;
}

/* First dimension of the first tensor in a batch (a tensor, or a tuple/list/dict holding one,
 * one level down), 0 when there is none. */
static int64_t batch_size_of(PyObject *o, int depth)
{
    if (tensor_type && PyObject_TypeCheck(o, tensor_type)) {
        PyObject *shape = PyObject_GetAttr(o, str_shape);
        int64_t n = 0;
        if (shape && PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) > 0) {
            n = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, 0));
            if (n < 0) n = 0;
        }
        Py_XDECREF(shape);
        PyErr_Clear();
        return n;
    }
    if (depth > 1) return 0;
    if (PyTuple_Check(o) || PyList_Check(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject **items = PySequence_Fast_ITEMS(o);
        for (Py_ssize_t i = 0; i < n && i < 16; i++) {
            int64_t b = batch_size_of(items[i], depth + 1);
            if (b) return b;
        }
    } else if (PyDict_Check(o)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        int seen = 0;
        while (PyDict_Next(o, &pos, &k, &v) && seen++ < 16) {
            int64_t b = batch_size_of(v, depth + 1);
            if (b) return b;
        }
    }
    return 0;
}

/* fn() as a double, NaN on any failure. */
static double call_double(PyObject *fn)
{
    if (!fn) return NAN;
    PyObject *r = PyObject_CallNoArgs(fn);
    double d = r ? PyFloat_AsDouble(r) : NAN;
    if (d == -1.0 && PyErr_Occurred()) d = NAN;
    Py_XDECREF(r);
    PyErr_Clear();
    return d;
}

/* Whether torch.cuda has been initialised by the program (never initialises it). */
static int cuda_in_use(void)
{
    if (!cuda_is_initialized) return 0;
    PyObject *r = PyObject_CallNoArgs(cuda_is_initialized);
    int on = r == Py_True;
    Py_XDECREF(r);
    PyErr_Clear();
    return on;
}

static void read_memory(pb_memory_row *r, int phase)
{
    r->step = pb_torch_current_step();
    r->phase = (uint8_t)phase;
    r->rank = pb_torch_rank();
    r->rss_mb = pb_memsample_read_now_mb();
    if (cuda_in_use()) {
        double dev = call_double(cuda_current_device);
        char name[32];
        snprintf(name, sizeof name, "cuda:%d", isnan(dev) ? 0 : (int)dev);
        r->device = pb_intern_cstr(name);
        r->allocated_mb = call_double(cuda_memory_allocated) / (1024.0 * 1024.0);
        r->max_allocated_mb = call_double(cuda_max_memory_allocated) / (1024.0 * 1024.0);
        r->reserved_mb = call_double(cuda_memory_reserved) / (1024.0 * 1024.0);
    } else {
        double peak = pb_memsample_peak_mb();
        r->device = device_cpu;
        r->allocated_mb = r->rss_mb;
        r->max_allocated_mb = peak > r->rss_mb ? peak : r->rss_mb;
        r->reserved_mb = NAN;
    }
}

static int64_t positive(int64_t v) { return v > 0 ? v : 0; }

/* ---- hooks from torch_hooks.c ---- */

void pb_collect_stage_time(int stage, int64_t self_ns)
{
    if (stage >= 0 && stage < 3) stage_ns[stage] += self_ns;
}

/* torch.get_autocast_dtype(device) as an intern id of its short name ("bfloat16"). */
static uint32_t autocast_dtype_of(PyObject *device)
{
    PyObject *d = get_autocast_dtype ? PyObject_CallOneArg(get_autocast_dtype, device) : NULL;
    PyObject *s = d ? PyObject_Str(d) : NULL;
    const char *cs = s ? PyUnicode_AsUTF8(s) : NULL;
    uint32_t id = 0;
    if (cs) id = pb_intern_cstr(strncmp(cs, "torch.", 6) == 0 ? cs + 6 : cs);
    Py_XDECREF(s);
    Py_XDECREF(d);
    PyErr_Clear();
    return id;
}

void pb_collect_forward_begin(void)
{
    if (!is_autocast_enabled) return;
    PyObject *devices[2] = {str_cuda, str_cpu};
    autocast_on = 0;
    autocast_dtype = 0;
    for (int i = 0; i < 2; i++) {
        PyObject *r = PyObject_CallOneArg(is_autocast_enabled, devices[i]);
        int on = r == Py_True;
        Py_XDECREF(r);
        PyErr_Clear();
        if (on) {
            autocast_on = 1;
            autocast_dtype = autocast_dtype_of(devices[i]);
            return;
        }
    }
}

void pb_collect_phase(int phase)
{
    if (phase_every <= 0 || pb_torch_current_step() % phase_every != 0 || (phases_seen & (1u << phase))) return;
    phases_seen |= 1u << phase;
    pb_memory_row r;
    memset(&r, 0, sizeof r);
    read_memory(&r, phase);
    push(&pb_table_memory, &r);
}

static void push_amp(int64_t step, double scale, int found_inf, int skipped)
{
    pb_amp_row r;
    memset(&r, 0, sizeof r);
    r.step = step;
    r.scale = scale;
    r.found_inf = (uint8_t)found_inf;
    r.skipped = (uint8_t)skipped;
    r.autocast_enabled = (uint8_t)autocast_on;
    r.autocast_dtype = autocast_on ? autocast_dtype : 0;
    r.rank = pb_torch_rank();
    push(&pb_table_amp_trace, &r);
}

void pb_collect_optimizer_done(void)
{
    optimizer_steps++;
    pb_collect_phase(PB_PHASE_AFTER_OPTIMIZER);
    if (!in_scaler_step) push_amp(pb_torch_current_step(), NAN, 0, 0);
}

void pb_collect_step_end(int64_t step, int64_t wall_ns)
{
    pb_steps_row s;
    memset(&s, 0, sizeof s);
    s.step = step;
    s.wall_ns = wall_ns;
    s.data_wait_ns = data_wait_ns;
    s.forward_ns = stage_ns[PB_STAGE_FORWARD];
    s.backward_ns = stage_ns[PB_STAGE_BACKWARD];
    s.optimizer_ns = stage_ns[PB_STAGE_STEP];
    s.collectives_ns = pb_step_collectives_ns;
    s.other_ns = positive(wall_ns - s.data_wait_ns - s.forward_ns - s.backward_ns - s.optimizer_ns - s.collectives_ns);
    s.samples = samples;
    s.syncs = syncs;
    s.rank = pb_torch_rank();
    push(&pb_table_steps, &s);

    pb_memory_row m;
    memset(&m, 0, sizeof m);
    read_memory(&m, PB_PHASE_STEP);
    m.step = step;
    push(&pb_table_memory, &m);

    memset(stage_ns, 0, sizeof stage_ns);
    data_wait_ns = samples = 0;
    syncs = 0;
    phases_seen = 0;
    pb_step_collectives_ns = 0;
}

/* ---- wrappers ---- */

/* _BaseDataLoaderIter.__next__(self): the batch goes back untouched; StopIteration and every
 * other exception pass through without a row. */
static PyObject *dataloader_next(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    int64_t start = pb_now_ns();
    PyObject *batch = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    int64_t end = pb_now_ns();
    if (!batch || PyVectorcall_NARGS(nargsf) < 1) return batch;
    PyObject *it = args[0];
    pb_dataloader_row r;
    memset(&r, 0, sizeof r);
    r.step = pb_torch_current_step();
    r.wait_ns = end - start;
    r.time_offset_ns = start - pb_torch_step_start_ns();
    r.batch_index = positive(int_attr(it, str_num_yielded, 1) - 1);
    r.num_workers = (int32_t)int_attr(it, str_num_workers, 0);
    r.pin_memory = int_attr(it, str_pin_memory, 0) != 0;
    r.prefetch_factor = r.num_workers > 0 ? (int32_t)int_attr(it, str_prefetch_factor, 0) : 0;
    r.persistent_workers = int_attr(it, str_persistent_workers, 0) != 0;
    r.batch_size = batch_size_of(batch, 0);
    r.rank = pb_torch_rank();
    push(&pb_table_dataloader_trace, &r);
    data_wait_ns += r.wait_ns;
    samples += r.batch_size;
    pb_collect_phase(PB_PHASE_AFTER_DATA);
    return batch;
}

/* GradScaler.step(self, optimizer, ...): one amp row per call that returns. When the scaler
 * skips optimizer.step(), no optimizer hook ends the step, so this does. */
static PyObject *scaler_step(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    int64_t step = pb_torch_current_step();
    uint64_t before = optimizer_steps;
    in_scaler_step++;
    PyObject *res = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    in_scaler_step--;
    if (!res || PyVectorcall_NARGS(nargsf) < 1) return res;
    PyObject *scaler = args[0];
    int skipped = optimizer_steps == before;
    PyObject *en = PyObject_GetAttr(scaler, str_enabled);
    int scaler_on = en == Py_True;
    Py_XDECREF(en);
    PyErr_Clear();
    double scale = NAN;
    if (scaler_on) {
        /* The scaler has read found_inf with .item() already: this read adds no new wait. */
        PyObject *s = PyObject_CallMethodNoArgs(scaler, str_get_scale);
        if (s) scale = PyFloat_AsDouble(s);
        if (PyErr_Occurred()) scale = NAN;
        Py_XDECREF(s);
        PyErr_Clear();
    }
    /* GradScaler skips optimizer.step() exactly when it found inf/NaN gradients. */
    push_amp(step, scale, scaler_on && skipped, scaler_on && skipped);
    if (skipped && scaler_on) pb_torch_end_step();
    return res;
}

/* Optimizer.zero_grad(self, ...) */
static PyObject *zero_grad(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *res = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    if (res) pb_collect_phase(PB_PHASE_AFTER_ZERO_GRAD);
    return res;
}

/* torch.cuda.synchronize(device=None): counted when it returns (it raises without CUDA). */
static PyObject *synchronize(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *res = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    if (res) syncs++;
    return res;
}

/* Tensor.item(), .tolist(), .cpu() on a CUDA tensor: the host waits for the device (seed 002's
 * "synchronization overhead"). Counted after a successful return when self.is_cuda. */
static PyObject *host_sync(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *res = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    if (res && PyVectorcall_NARGS(nargsf) >= 1) {
        PyObject *cuda = PyObject_GetAttr(args[0], str_is_cuda);
        if (cuda == Py_True) syncs++;
        Py_XDECREF(cuda);
        if (!cuda) PyErr_Clear();
    }
    return res;
}

/* ---- install / remove ---- */

static PyObject *import_attr(const char *module, const char *attr)
{
    PyObject *m = PyImport_ImportModule(module);
    PyObject *a = m ? PyObject_GetAttrString(m, attr) : NULL;
    Py_XDECREF(m);
    return a;
}

static int intern_strings(void)
{
    struct {
        PyObject **p;
        const char *s;
    } strs[] = {
        {&str_num_workers, "_num_workers"}, {&str_pin_memory, "_pin_memory"},
        {&str_prefetch_factor, "_prefetch_factor"}, {&str_persistent_workers, "_persistent_workers"},
        {&str_num_yielded, "_num_yielded"}, {&str_shape, "shape"}, {&str_enabled, "_enabled"},
        {&str_get_scale, "get_scale"}, {&str_cpu, "cpu"}, {&str_cuda, "cuda"},
        {&str_is_cuda, "is_cuda"},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (!*strs[i].p && !(*strs[i].p = PyUnicode_InternFromString(strs[i].s))) return -1;
    return 0;
}

/* Wraps owner.attr, or says at debug level why not (the collector is then simply absent). */
static void wrap_or_skip(PyObject *owner, const char *what, const char *attr, pb_wrap_fn fn, PyObject **wrapper)
{
    if (owner && pb_wrap_attr(owner, attr, fn, wrapper) == 0) return;
    PyErr_Clear();
    pb_log_debug("not wrapping %s.%s: not found in this torch", what, attr);
}

int pb_collect_install(void)
{
    if (intern_strings()) {
        PyErr_Clear();
        return 0;
    }
    Py_XSETREF(tensor_type, (PyTypeObject *)import_attr("torch", "Tensor"));
    Py_XSETREF(is_autocast_enabled, import_attr("torch", "is_autocast_enabled"));
    Py_XSETREF(get_autocast_dtype, import_attr("torch", "get_autocast_dtype"));
    PyErr_Clear();
    if (is_autocast_enabled) { /* torch < 2.4 takes no device argument: then not sampled */
        PyObject *r = PyObject_CallOneArg(is_autocast_enabled, str_cpu);
        if (!r) Py_CLEAR(is_autocast_enabled);
        Py_XDECREF(r);
        PyErr_Clear();
    }
    Py_XSETREF(torch_cuda, PyImport_ImportModule("torch.cuda"));
    PyErr_Clear();
    if (torch_cuda) {
        Py_XSETREF(cuda_is_initialized, PyObject_GetAttrString(torch_cuda, "is_initialized"));
        Py_XSETREF(cuda_memory_allocated, PyObject_GetAttrString(torch_cuda, "memory_allocated"));
        Py_XSETREF(cuda_max_memory_allocated, PyObject_GetAttrString(torch_cuda, "max_memory_allocated"));
        Py_XSETREF(cuda_memory_reserved, PyObject_GetAttrString(torch_cuda, "memory_reserved"));
        Py_XSETREF(cuda_current_device, PyObject_GetAttrString(torch_cuda, "current_device"));
        PyErr_Clear();
    }
    Py_XSETREF(dataloader_iter_cls, import_attr("torch.utils.data.dataloader", "_BaseDataLoaderIter"));
    PyErr_Clear();
    Py_XSETREF(grad_scaler_cls, import_attr("torch.amp.grad_scaler", "GradScaler"));
    PyErr_Clear();
    Py_XSETREF(optimizer_cls, import_attr("torch.optim.optimizer", "Optimizer"));
    PyErr_Clear();
    wrap_or_skip(dataloader_iter_cls, "_BaseDataLoaderIter", "__next__", dataloader_next, &wrap_next);
    wrap_or_skip(grad_scaler_cls, "GradScaler", "step", scaler_step, &wrap_scaler_step);
    wrap_or_skip(optimizer_cls, "Optimizer", "zero_grad", zero_grad, &wrap_zero_grad);
    wrap_or_skip(torch_cuda, "torch.cuda", "synchronize", synchronize, &wrap_synchronize);
    PyObject *tensor_cls = (PyObject *)tensor_type;
    wrap_or_skip(tensor_cls, "torch.Tensor", "item", host_sync, &wrap_item);
    wrap_or_skip(tensor_cls, "torch.Tensor", "tolist", host_sync, &wrap_tolist);
    wrap_or_skip(tensor_cls, "torch.Tensor", "cpu", host_sync, &wrap_cpu);
    return 0;
}

void pb_collect_remove(void)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (dataloader_iter_cls) pb_unwrap_attr(dataloader_iter_cls, "__next__", &wrap_next);
    if (grad_scaler_cls) pb_unwrap_attr(grad_scaler_cls, "step", &wrap_scaler_step);
    if (optimizer_cls) pb_unwrap_attr(optimizer_cls, "zero_grad", &wrap_zero_grad);
    if (torch_cuda) pb_unwrap_attr(torch_cuda, "synchronize", &wrap_synchronize);
    if (tensor_type) {
        pb_unwrap_attr((PyObject *)tensor_type, "item", &wrap_item);
        pb_unwrap_attr((PyObject *)tensor_type, "tolist", &wrap_tolist);
        pb_unwrap_attr((PyObject *)tensor_type, "cpu", &wrap_cpu);
    }
    PyErr_Restore(et, ev, tb);
    memset(stage_ns, 0, sizeof stage_ns);
    data_wait_ns = samples = 0;
    syncs = 0;
    pb_step_collectives_ns = 0;
    in_scaler_step = 0;
    phases_seen = 0;
    autocast_on = 0;
}
