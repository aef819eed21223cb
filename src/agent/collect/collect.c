/*
 * collect.c - data loading, step breakdown, layers and mixed-precision collectors; see collect.h.
 * The memory tables are memtables.c's; this file registers them with its own and tells
 * memtables.c of the phases, optimizer steps and step ends it sees.
 *
 * Costs, per what they observe: a batch costs two clock reads, five attribute reads on the
 * iterator and a look at the batch's first tensor shape; a step costs two ring pushes here (and
 * memtables.c's memory row); a primary root forward costs two (four with autocast on) calls into
 * torch's autocast state. python.layers reads a few attributes of each Linear/convolution module
 * once, after its first forward.
 */
#include "collect.h"

#include "clock.h"
#include "compiles.h"
#include "config.h"
#include "device.h"
#include "generations.h"
#include "gil.h"
#include "intern.h"
#include "log.h"
#include "pyvalue.h"
#include "requests.h"
#include "step.h"
#include "torch_trace.h"
#include "walk.h"
#include "wrap.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>


/* ---- per-step state (GIL held) ---- */

static int64_t samples;
static int32_t syncs;
static int32_t batches;          /* DataLoader batches fetched in the step */
static int gil_tried;            /* pb_gil_start was called */
static uint64_t optimizer_steps; /* optimizer.step() calls seen, ever */
static int in_scaler_step;       /* inside GradScaler.step: it writes the amp row itself */
static int autocast_on;
static uint32_t autocast_dtype;
static uint32_t autocast_device;
static double cuda_capability = NAN; /* read once, when CUDA is first seen initialised */

/* ---- torch objects (owned, set by install) ---- */

static PyObject *dataloader_iter_cls, *grad_scaler_cls, *optimizer_cls, *torch_cuda;
static PyObject *wrap_next, *wrap_scaler_step, *wrap_zero_grad, *wrap_synchronize;
static PyObject *wrap_item, *wrap_tolist, *wrap_cpu;
static PyObject *autograd_mod, *wrap_backward; /* torch.autograd.backward, wrapped on CUDA only */
static PyTypeObject *tensor_type;
static PyObject *is_autocast_enabled, *get_autocast_dtype, *str_cpu, *str_cuda;
static PyObject *cuda_get_device_capability;
static PyObject *linear_cls, *conv_cls, *embedding_cls, *embedding_bag_cls, *str_parameters;
static PyObject *str_num_workers, *str_pin_memory, *str_prefetch_factor, *str_persistent_workers,
    *str_num_yielded, *str_shape, *str_enabled, *str_get_scale, *str_is_cuda, *str_device,
    *str_dtype, *str_weight, *str_in_features, *str_out_features, *str_in_channels,
    *str_out_channels;
static uint32_t device_cpu, device_cuda;

/* ---- tables ---- */

#define COL PB_COL

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
    COL("data_wait", PB_COL_NS_SEC, pb_steps_row, data_wait_ns, "seconds blocked in DataLoader next() during the step, less what ran inside it (the columns below to other add up to wall: each instant of the step counts once, for the innermost activity)"),
    COL("forward", PB_COL_NS_SEC, pb_steps_row, forward_ns, "seconds in root module calls (the model, the loss module), less the collectives inside them (FSDP all-gathers): on detail steps the sum of the step's forward self times in torch_trace; a forward recomputed inside backward (activation checkpointing) counts here"),
    COL("backward", PB_COL_NS_SEC, pb_steps_row, backward_ns, "seconds of backward passes: from the first probed autograd node (a module's output) to the engine's final callbacks, forwards recomputed and collectives run inside left out"),
    COL("optimizer", PB_COL_NS_SEC, pb_steps_row, optimizer_ns, "seconds of the optimizer's own work in optimizer.step(): a closure passed to it (Lightning's training_step, forward and backward) is not the optimizer's and counts where it belongs"),
    COL("collectives", PB_COL_NS_SEC, pb_steps_row, collectives_ns, "seconds in collective operations issued during the step, also those inside forward and backward (FSDP)"),
    COL("grad_sync", PB_COL_NS_SEC, pb_steps_row, grad_sync_ns, "seconds in autograd's final callbacks after the backward pass: DistributedDataParallel waiting for its gradient all-reduces (about 0 without DDP)"),
    COL("other", PB_COL_NS_SEC, pb_steps_row, other_ns, "host time nothing above covers (the loop's own Python, host work in a closure or training_step): wall minus all of the above, exactly"),
    COL("samples", PB_COL_I64, pb_steps_row, samples, "sum of the batch_size of the step's batches; 0 when unknown"),
    COL("syncs", PB_COL_I32, pb_steps_row, syncs, "host-device synchronisations in the step: torch.cuda.synchronize(), and .item()/.tolist()/.cpu() on CUDA tensors (0 on CPU)"),
    COL("rank", PB_COL_U16, pb_steps_row, rank, "distributed rank (RANK), 0 when not distributed"),
    COL("batches", PB_COL_I32, pb_steps_row, batches, "DataLoader batches fetched during the step: 0 means no DataLoader was seen (an input pipeline of its own), so data_wait 0 is then not a measured wait"),
    COL("detail", PB_COL_U8, pb_steps_row, detail, "1 when the step's module executions are in torch_trace (a detail step); 0 for a summary step (PROBING_DETAIL_EVERY)"),
    COL("cpu", PB_COL_F64, pb_steps_row, cpu_s, "seconds of CPU time the training thread got in the step (CLOCK_THREAD_CPUTIME_ID); far below wall with many involuntary_switches: the machine took the CPU away; NULL for the first step"),
    COL("involuntary_switches", PB_COL_I64_NULL, pb_steps_row, involuntary_switches, "times the kernel descheduled the training thread in the step for another (getrusage RUSAGE_THREAD ru_nivcsw): other processes on its core; NULL for the first step"),
    COL("compile_time", PB_COL_NS_SEC, pb_steps_row, compile_ns, "seconds of torch.compile compiles that ended in the step (the sum of its python.compiles durations): part of the columns above (mostly forward), not added to them"),
};

static const pb_column gil_cols[] = {
    COL("step", PB_COL_I64, pb_gil_row, step, "training step"),
    COL("thread_id", PB_COL_I64, pb_gil_row, thread_id, "threading.get_ident() of the thread that held the GIL; 0 when it has exited since"),
    COL("thread_name", PB_COL_STR_ID, pb_gil_row, name, "the thread's name (threading), e.g. MainThread"),
    COL("training", PB_COL_U8, pb_gil_row, training, "1 for the thread that runs the training steps"),
    COL("held", PB_COL_I32, pb_gil_row, held, "samples of the step in which this thread held the GIL"),
    COL("samples", PB_COL_I32, pb_gil_row, samples, "GIL samples taken during the step (every PROBING_GIL_SAMPLE_MS, held or not)"),
    COL("rank", PB_COL_U16, pb_gil_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

static const pb_column amp_cols[] = {
    COL("step", PB_COL_I64, pb_amp_row, step, "training step of the optimizer step"),
    COL("scale", PB_COL_F64, pb_amp_row, scale, "GradScaler scale the step's gradients were scaled by; NULL without an enabled GradScaler"),
    COL("found_inf", PB_COL_U8, pb_amp_row, found_inf, "1 when the GradScaler found inf/NaN gradients"),
    COL("skipped", PB_COL_U8, pb_amp_row, skipped, "1 when the GradScaler skipped optimizer.step()"),
    COL("autocast_enabled", PB_COL_U8, pb_amp_row, autocast_enabled, "1 when autocast was on when the model's forward began"),
    COL("autocast_dtype", PB_COL_STR_ID, pb_amp_row, autocast_dtype, "autocast dtype (bfloat16, float16); '' when autocast was off"),
    COL("autocast_device", PB_COL_STR_ID, pb_amp_row, autocast_device, "device type autocast was on for: 'cuda' or 'cpu'; '' when autocast was off"),
    COL("cuda_capability", PB_COL_F64, pb_amp_row, cuda_capability, "compute capability of the current CUDA device as major.minor (8.0 = A100); NULL until the program initialises CUDA"),
    COL("rank", PB_COL_U16, pb_amp_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

static const pb_column layer_cols[] = {
    COL("step", PB_COL_I64, pb_layer_row, step, "training step of the module's first forward"),
    COL("module", PB_COL_STR_ID, pb_layer_row, module, "qualified name, as in python.torch_trace"),
    COL("type", PB_COL_STR_ID, pb_layer_row, type, "class name (Linear, Conv2d, ...)"),
    COL("in_features", PB_COL_I64, pb_layer_row, in_features, "Linear in_features, or the convolution's in_channels"),
    COL("out_features", PB_COL_I64, pb_layer_row, out_features, "Linear out_features, or the convolution's out_channels"),
    COL("rows", PB_COL_I64, pb_layer_row, rows, "output elements / out_features: the GEMM's M dimension (batch x sequence for Linear); 0 when the output is not a tensor"),
    COL("output_shape", PB_COL_STR_ID, pb_layer_row, output_shape, "shape of the first output, '64x128x512'"),
    COL("weight_dtype", PB_COL_STR_ID, pb_layer_row, weight_dtype, "dtype of the weight (float32 under autocast)"),
    COL("compute_dtype", PB_COL_STR_ID, pb_layer_row, compute_dtype, "dtype of the output: what the layer computed in (float16/bfloat16 under autocast)"),
    COL("device", PB_COL_STR_ID, pb_layer_row, device, "device of the output ('cpu', 'cuda:0')"),
    COL("rank", PB_COL_U16, pb_layer_row, rank, "distributed rank (RANK), 0 when not distributed"),
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
      "one row per training step: wall time split into data wait, forward, backward, optimizer, collectives, grad_sync and other, each instant counted once (they add up to wall)",
      "empty until the first step ends (optimizer.step(), or the next forward of the model)");
TABLE(pb_table_amp_trace, "amp_trace", amp_cols, pb_amp_row,
      "one row per optimizer step: GradScaler scale, inf checks, skipped steps, autocast state",
      "empty until the first optimizer step");
TABLE(pb_table_layers, "layers", layer_cols, pb_layer_row,
      "one row per nn.Linear and convolution module, at its first forward: GEMM dimensions, dtypes, device",
      "empty until a Linear or convolution module runs outside a compiled region");

TABLE(pb_table_gil, "gil", gil_cols, pb_gil_row,
      "per step, the threads that held the GIL when sampled (every PROBING_GIL_SAMPLE_MS): a thread other than the training one holding it for a real share of the step slows the step",
      "empty until the first step ends; always empty on a Python without a readable GIL (3.14+, free-threaded builds) or with PROBING_GIL_SAMPLE_MS=0");

static pb_table *const tables[] = {&pb_table_dataloader_trace, &pb_table_steps, &pb_table_memory,
                                   &pb_table_amp_trace, &pb_table_memory_breakdown,
                                   &pb_table_layers, &pb_table_gil, &pb_table_generations,
                                   &pb_table_tokens, &pb_table_compiles, &pb_table_requests};
#define NTABLES (sizeof tables / sizeof tables[0])

int pb_collect_tables_init(void)
{
    int drc = pb_device_tables_init();
    if (drc) return drc;
    static const uint64_t capacity[NTABLES] = {1 << 16, 1 << 16, 1 << 17, 1 << 16, 1 << 14, 1 << 14,
                                               1 << 16, 1 << 14, 1 << 16, 1 << 14, 1 << 14};
    int rc = 0;
    for (size_t i = 0; i < NTABLES; i++)
        if ((rc = pb_ring_create(&tables[i]->ring, tables[i]->row_size, capacity[i]))) goto fail;
    for (size_t i = 0; i < NTABLES; i++)
        if ((rc = pb_registry_add(tables[i]))) goto fail;
    device_cpu = pb_intern_cstr("cpu");
    device_cuda = pb_intern_cstr("cuda");
    return 0;
fail:
    pb_collect_tables_free(); /* a partly registered set: lifecycle resets the registry on stop */
    return rc;
}

void pb_collect_tables_free(void)
{
    pb_device_tables_free();
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

/* A visit of pb_walk_tensors: stops at a tensor whose first dimension is above 0, kept in *ctx. */
static int batch_size_visit(PyObject *t, void *ctx)
{
    PyObject *shape = PyObject_GetAttr(t, str_shape);
    int64_t n = 0;
    if (shape && PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) > 0) {
        n = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, 0));
        if (n < 0) n = 0;
    }
    Py_XDECREF(shape);
    PyErr_Clear();
    *(int64_t *)ctx = n;
    return n != 0;
}

/* First dimension of the first tensor in a batch (a tensor, or a tuple/list/dict holding one,
 * one level down; walk.h), 0 when there is none. */
static int64_t batch_size_of(PyObject *o, int depth)
{
    int64_t n = 0;
    if (tensor_type) pb_walk_tensors(o, tensor_type, depth, batch_size_visit, &n);
    return n;
}

static int64_t positive(int64_t v) { return v > 0 ? v : 0; }

/* pb_py_str_id(o.attr) */
static uint32_t intern_attr(PyObject *o, PyObject *attr)
{
    PyObject *v = PyObject_GetAttr(o, attr);
    uint32_t id = v ? pb_py_str_id(v) : 0;
    Py_XDECREF(v);
    PyErr_Clear();
    return id;
}

/* Reads the current CUDA device's compute capability once CUDA is initialised (never before:
 * probing must not initialise CUDA). */
static void read_cuda_capability(void)
{
    if (!isnan(cuda_capability) || !cuda_get_device_capability || !pb_memory_cuda_in_use()) return;
    PyObject *r = PyObject_CallNoArgs(cuda_get_device_capability);
    if (r && PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
        long major = PyLong_AsLong(PyTuple_GET_ITEM(r, 0));
        long minor = PyLong_AsLong(PyTuple_GET_ITEM(r, 1));
        if (!PyErr_Occurred() && major >= 0 && minor >= 0 && minor < 10)
            cuda_capability = (double)major + (double)minor / 10.0;
    }
    Py_XDECREF(r);
    PyErr_Clear();
}

/* ---- python.layers ---- */

/* The module's own 2-D `weight` parameter (not a child's), as a new reference, or NULL. */
static PyObject *own_matrix_weight(PyObject *mod)
{
    PyObject *params = str_parameters ? PyObject_GetAttr(mod, str_parameters) : NULL;
    PyObject *w = params && PyDict_Check(params) ? PyDict_GetItemWithError(params, str_weight) : NULL; /* borrowed */
    PyObject *res = NULL;
    if (w && PyObject_TypeCheck(w, tensor_type)) {
        PyObject *shape = PyObject_GetAttr(w, str_shape);
        if (shape && PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) == 2) {
            res = w;
            Py_INCREF(res);
        }
        Py_XDECREF(shape);
    }
    Py_XDECREF(params);
    PyErr_Clear();
    return res;
}

/* A module that carries a matrix multiply: nn.Linear and convolutions by class, and any other
 * module with a 2-D `weight` parameter of its own (Hugging Face's Conv1D, a hand-written
 * `x @ self.weight`), except embeddings (a lookup, not a GEMM). Whether the weight is used as
 * a GEMM operand is checked by shape at the first forward (pb_collect_layer). Once per module. */
int pb_collect_is_layer(PyObject *mod)
{
    int yes = (linear_cls && PyObject_IsInstance(mod, linear_cls) == 1) ||
              (conv_cls && PyObject_IsInstance(mod, conv_cls) == 1);
    PyErr_Clear();
    if (yes || !tensor_type) return yes;
    if ((embedding_cls && PyObject_IsInstance(mod, embedding_cls) == 1) ||
        (embedding_bag_cls && PyObject_IsInstance(mod, embedding_bag_cls) == 1)) {
        PyErr_Clear();
        return 0;
    }
    PyErr_Clear();
    PyObject *w = own_matrix_weight(mod);
    yes = w != NULL;
    Py_XDECREF(w);
    return yes;
}

/* dims[0..2) of a 2-D tensor's shape; 0 on failure. */
static int matrix_dims(PyObject *w, int64_t dims[2])
{
    PyObject *shape = PyObject_GetAttr(w, str_shape);
    int ok = shape && PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) == 2;
    for (int i = 0; ok && i < 2; i++) {
        dims[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        if (dims[i] <= 0) ok = 0;
    }
    Py_XDECREF(shape);
    PyErr_Clear();
    return ok;
}

/* Last dimension of a tensor's shape, or -1. */
static int64_t last_dim(PyObject *t)
{
    PyObject *shape = PyObject_GetAttr(t, str_shape);
    int64_t d = -1;
    if (shape && PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) > 0)
        d = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, PyTuple_GET_SIZE(shape) - 1));
    Py_XDECREF(shape);
    PyErr_Clear();
    return d;
}

/* The first tensor of a module's output: the output itself, or the first element of a tuple or
 * list. Borrowed, or NULL. */
static PyObject *first_tensor(PyObject *o)
{
    if (PyObject_TypeCheck(o, tensor_type)) return o;
    if ((PyTuple_Check(o) || PyList_Check(o)) && PySequence_Fast_GET_SIZE(o) > 0) {
        PyObject *t = PySequence_Fast_GET_ITEM(o, 0);
        if (PyObject_TypeCheck(t, tensor_type)) return t;
    }
    return NULL;
}

void pb_collect_layer(PyObject *mod, uint32_t name, uint32_t type, PyObject *output)
{
    if (!tensor_type) return;
    pb_layer_row r;
    memset(&r, 0, sizeof r);
    r.step = pb_step_current();
    r.rank = pb_step_rank();
    r.module = name;
    r.type = type;
    r.in_features = int_attr(mod, str_in_features, -1);
    if (r.in_features < 0) r.in_features = int_attr(mod, str_in_channels, 0);
    r.out_features = int_attr(mod, str_out_features, -1);
    if (r.out_features < 0) r.out_features = int_attr(mod, str_out_channels, 0);
    PyObject *weight = PyObject_GetAttr(mod, str_weight);
    if (weight && PyObject_TypeCheck(weight, tensor_type)) r.weight_dtype = intern_attr(weight, str_dtype);
    Py_XDECREF(weight);
    PyErr_Clear();
    PyObject *t = output ? first_tensor(output) : NULL;
    if (r.in_features <= 0 && r.out_features <= 0) {
        /* neither a Linear nor a convolution: a module with a 2-D weight (pb_collect_is_layer).
         * The output's last dimension says how the weight is used: (out, in) as nn.Linear keeps
         * it, or (in, out) as Conv1D; a weight matching neither is not a GEMM operand. */
        PyObject *w = own_matrix_weight(mod);
        int64_t dims[2], out = t ? last_dim(t) : -1;
        int ok = w && matrix_dims(w, dims);
        Py_XDECREF(w);
        if (!ok || out <= 0) return;
        if (out == dims[0]) {
            r.out_features = dims[0];
            r.in_features = dims[1];
        } else if (out == dims[1]) {
            r.out_features = dims[1];
            r.in_features = dims[0];
        } else {
            return;
        }
    }
    if (t) {
        PyObject *shape = PyObject_GetAttr(t, str_shape);
        if (shape && PyTuple_Check(shape)) {
            char text[128];
            size_t len = 0;
            int64_t numel = 1;
            text[0] = '\0';
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
                long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
                if (d < 0) break;
                numel *= d;
                if (len < sizeof text) len += (size_t)snprintf(text + len, sizeof text - len, "%s%lld", i ? "x" : "", d);
            }
            if (!PyErr_Occurred()) {
                r.output_shape = pb_intern_cstr(text);
                if (r.out_features > 0 && PyTuple_GET_SIZE(shape) > 0) r.rows = numel / r.out_features;
            }
        }
        Py_XDECREF(shape);
        PyErr_Clear();
        r.compute_dtype = intern_attr(t, str_dtype);
        r.device = intern_attr(t, str_device);
    }
    push(&pb_table_layers, &r);
}

/* ---- hooks from torch_hooks.c ---- */

/* torch.get_autocast_dtype(device) as an intern id of its short name ("bfloat16"). */
static uint32_t autocast_dtype_of(PyObject *device)
{
    PyObject *d = get_autocast_dtype ? PyObject_CallOneArg(get_autocast_dtype, device) : NULL;
    uint32_t id = d ? pb_py_str_id(d) : 0;
    Py_XDECREF(d);
    PyErr_Clear();
    return id;
}

void pb_collect_forward_begin(void)
{
    pb_collect_phase(PB_PHASE_BEFORE_FORWARD);
    if (!is_autocast_enabled) return;
    PyObject *devices[2] = {str_cuda, str_cpu};
    autocast_on = 0;
    autocast_dtype = 0;
    autocast_device = 0;
    for (int i = 0; i < 2; i++) {
        PyObject *r = PyObject_CallOneArg(is_autocast_enabled, devices[i]);
        int on = r == Py_True;
        Py_XDECREF(r);
        PyErr_Clear();
        if (on) {
            autocast_on = 1;
            autocast_dtype = autocast_dtype_of(devices[i]);
            autocast_device = i == 0 ? device_cuda : device_cpu;
            return;
        }
    }
}

void pb_collect_phase(int phase) { pb_memory_phase(phase); }

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
    r.autocast_device = autocast_on ? autocast_device : 0;
    read_cuda_capability();
    r.cuda_capability = cuda_capability;
    r.rank = pb_step_rank();
    push(&pb_table_amp_trace, &r);
}

void pb_collect_optimizer_done(PyObject *optimizer)
{
    optimizer_steps++;
    pb_memory_optimizer_done(optimizer);
    if (!in_scaler_step) push_amp(pb_step_current(), NAN, 0, 0);
}

/* The training thread's involuntary context switches at the last step boundary, so each step
 * gets its own (a busy machine's steps are told from the job's: docs/report.md, "Slow steps").
 * The step's CPU time comes from the caller, which measures it once for the detail policy too. */
static struct {
    long tid; /* the thread the snapshot is of; 0 none */
    long nivcsw;
} boundary;

static void step_cpu(pb_steps_row *s, int64_t cpu_ns)
{
    struct rusage ru;
    long tid = (long)syscall(SYS_gettid);
    s->cpu_s = cpu_ns >= 0 ? (double)cpu_ns / 1e9 : NAN;
    s->involuntary_switches = INT64_MIN;
    if (getrusage(RUSAGE_THREAD, &ru) != 0) {
        boundary.tid = 0;
        return;
    }
    /* another thread, or a fork()ed child whose counters started again: no step figure */
    if (boundary.tid == tid && ru.ru_nivcsw >= boundary.nivcsw)
        s->involuntary_switches = ru.ru_nivcsw - boundary.nivcsw;
    boundary.tid = tid;
    boundary.nivcsw = ru.ru_nivcsw;
}

void pb_collect_step_end(int64_t step, int64_t wall_ns, int64_t cpu_ns, int detail)
{
    pb_steps_row s;
    memset(&s, 0, sizeof s);
    s.step = step;
    s.wall_ns = wall_ns;
    /* Every instant of the step goes to one activity, the innermost one (timeline.h): forward
     * without the collectives inside it, optimizer without the closure's forward and backward,
     * other the host time nothing covers. The columns add up to wall. */
    int64_t start = pb_step_start(), share[PB_ACT_COUNT];
    pb_timeline_attribute(&pb_step_timeline, start, start + wall_ns, share);
    pb_timeline_reset(&pb_step_timeline);
    s.data_wait_ns = share[PB_ACT_DATA_WAIT];
    s.forward_ns = share[PB_ACT_FORWARD];
    s.backward_ns = share[PB_ACT_BACKWARD];
    s.optimizer_ns = share[PB_ACT_OPTIMIZER];
    s.collectives_ns = share[PB_ACT_COLLECTIVE];
    s.grad_sync_ns = share[PB_ACT_GRAD_SYNC];
    s.other_ns = share[PB_ACT_HOST];
    s.samples = samples;
    s.syncs = syncs;
    s.batches = batches;
    s.rank = pb_step_rank();
    s.detail = (uint8_t)(detail != 0);
    s.compile_ns = pb_compiles_take_step_ns();
    step_cpu(&s, cpu_ns);
    push(&pb_table_steps, &s);

    pb_memory_step_end(step);

    /* The GIL's holders in this step; the sampler starts with the first step. */
    pb_gil_row g[8];
    if (!gil_tried) {
        gil_tried = 1;
        pb_gil_start();
    }
    int ng = pb_gil_take(step, s.rank, g, 8);
    for (int i = 0; i < ng; i++) push(&pb_table_gil, &g[i]);

    samples = 0;
    syncs = batches = 0;
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
    r.step = pb_step_current();
    r.wait_ns = end - start;
    r.time_offset_ns = start - pb_step_start();
    r.batch_index = positive(int_attr(it, str_num_yielded, 1) - 1);
    r.num_workers = (int32_t)int_attr(it, str_num_workers, 0);
    r.pin_memory = int_attr(it, str_pin_memory, 0) != 0;
    r.prefetch_factor = r.num_workers > 0 ? (int32_t)int_attr(it, str_prefetch_factor, 0) : 0;
    r.persistent_workers = int_attr(it, str_persistent_workers, 0) != 0;
    r.batch_size = batch_size_of(batch, 0);
    r.rank = pb_step_rank();
    push(&pb_table_dataloader_trace, &r);
    pb_step_interval(PB_ACT_DATA_WAIT, start, end);
    samples += r.batch_size;
    batches++;
    pb_collect_phase(PB_PHASE_AFTER_DATA);
    return batch;
}

/* GradScaler.step(self, optimizer, ...): one amp row per call that returns. When the scaler
 * skips optimizer.step(), no optimizer hook ends the step, so this does. */
static PyObject *scaler_step(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    int64_t step = pb_step_current();
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
    if (skipped && scaler_on) pb_step_end_now();
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
    pb_device_sync();
    PyObject *res = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    if (res) syncs++;
    return res;
}

/* Tensor.item(), .tolist(), .cpu() on a CUDA tensor: the host waits for the device
 * (docs/report.md, "Host time", and its `host_syncs` check). Counted after a successful return
 * when self.is_cuda. */
static PyObject *host_sync(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (pb_device_on && PyVectorcall_NARGS(nargsf) >= 1) { /* how far the device runs behind now */
        PyObject *cuda = PyObject_GetAttr(args[0], str_is_cuda);
        if (cuda == Py_True) pb_device_sync();
        Py_XDECREF(cuda);
        if (!cuda) PyErr_Clear();
    }
    PyObject *res = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    if (res && PyVectorcall_NARGS(nargsf) >= 1) {
        PyObject *cuda = PyObject_GetAttr(args[0], str_is_cuda);
        if (cuda == Py_True) syncs++;
        Py_XDECREF(cuda);
        if (!cuda) PyErr_Clear();
    }
    return res;
}

/* torch.autograd.backward(...) (what Tensor.backward() calls): the device time of the work the
 * backward pass queues (device.h). The host's backward span comes from the autograd probes. */
static PyObject *autograd_backward(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    int device = pb_device_on;
    if (device) pb_device_phase(1, PB_ACT_BACKWARD);
    PyObject *res = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    if (device) pb_device_phase(0, PB_ACT_BACKWARD);
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
        {&str_is_cuda, "is_cuda"}, {&str_device, "device"}, {&str_dtype, "dtype"},
        {&str_weight, "weight"}, {&str_in_features, "in_features"},
        {&str_out_features, "out_features"}, {&str_in_channels, "in_channels"},
        {&str_out_channels, "out_channels"},
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
        Py_XSETREF(cuda_get_device_capability, PyObject_GetAttrString(torch_cuda, "get_device_capability"));
        PyErr_Clear();
    }
    if (pb_memory_install(tensor_type, torch_cuda)) {
        PyErr_Clear();
        return 0;
    }
    Py_XSETREF(linear_cls, import_attr("torch.nn", "Linear"));
    PyErr_Clear();
    Py_XSETREF(conv_cls, import_attr("torch.nn.modules.conv", "_ConvNd"));
    PyErr_Clear();
    Py_XSETREF(embedding_cls, import_attr("torch.nn", "Embedding"));
    PyErr_Clear();
    Py_XSETREF(embedding_bag_cls, import_attr("torch.nn", "EmbeddingBag"));
    PyErr_Clear();
    if (!str_parameters) str_parameters = PyUnicode_InternFromString("_parameters");
    PyErr_Clear();
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
    /* Only where a CUDA tensor can exist: elsewhere .item()/.cpu() never wait for a device and
     * keep torch's own methods (no wrapper on a path programs call in their loops). */
    PyObject *avail = torch_cuda ? PyObject_CallMethod(torch_cuda, "is_available", NULL) : NULL;
    if (avail == Py_True) {
        PyObject *tensor_cls = (PyObject *)tensor_type;
        wrap_or_skip(tensor_cls, "torch.Tensor", "item", host_sync, &wrap_item);
        wrap_or_skip(tensor_cls, "torch.Tensor", "tolist", host_sync, &wrap_tolist);
        wrap_or_skip(tensor_cls, "torch.Tensor", "cpu", host_sync, &wrap_cpu);
        autograd_mod = PyImport_ImportModule("torch.autograd");
        PyErr_Clear();
        wrap_or_skip(autograd_mod, "torch.autograd", "backward", autograd_backward, &wrap_backward);
    }
    Py_XDECREF(avail);
    PyErr_Clear();
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
    if (autograd_mod) pb_unwrap_attr(autograd_mod, "backward", &wrap_backward);
    Py_CLEAR(autograd_mod);
    pb_device_stop();
    PyErr_Restore(et, ev, tb);
    samples = 0;
    syncs = batches = 0;
    pb_timeline_reset(&pb_step_timeline);
    in_scaler_step = 0;
    autocast_on = 0;
    autocast_device = 0;
    pb_memory_remove();
    pb_gil_stop();
    gil_tried = 0;
    pb_compiles_reset();
}
