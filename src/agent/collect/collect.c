/*
 * collect.c - data loading, step breakdown, memory and mixed-precision collectors; see collect.h.
 *
 * Costs, per what they observe: a batch costs two clock reads, five attribute reads on the
 * iterator and a look at the batch's first tensor shape; a step costs one pread of
 * /proc/self/statm (on CUDA: four calls into torch.cuda instead) and two ring pushes; a primary
 * root forward costs two (four with autocast on) calls into torch's autocast state. Phase rows
 * (python.memory) read memory at each phase, on every PROBING_MEMORY_PHASE_EVERY-th step only.
 *
 * The memory breakdown (python.memory_breakdown) walks an optimizer's parameters, their .grad
 * and every tensor in optimizer.state, asking each for its storage (untyped_storage():
 * data_ptr(), nbytes()) so that a storage shared by several tensors (tied weights, views of one
 * flat buffer) is counted once: about three Python calls per tensor, so it runs on the first
 * optimizer step and on the sampled steps only (bench/RESULTS.md has its cost). python.layers
 * reads a few attributes of each Linear/convolution module once, after its first forward.
 */
#include "collect.h"

#include "clock.h"
#include "config.h"
#include "gil.h"
#include "intern.h"
#include "log.h"
#include "memsample.h"
#include "step.h"
#include "torch_trace.h"
#include "walk.h"
#include "wrap.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- per-step state (GIL held) ---- */

static int64_t stage_ns[3];      /* by PB_STAGE_* */
static int64_t data_wait_ns;
static int64_t grad_sync_ns;
static int64_t samples;
static int32_t syncs;
static int32_t batches;          /* DataLoader batches fetched in the step */
static int gil_tried;            /* pb_gil_start was called */
static double cpu_limit_mb = -1; /* read once: cgroup limit or RAM; NaN when unknown */
static double cuda_total_mb = -1; /* read once: the current GPU's total memory; NaN unknown */
static uint64_t optimizer_steps; /* optimizer.step() calls seen, ever */
static int in_scaler_step;       /* inside GradScaler.step: it writes the amp row itself */
static int autocast_on;
static uint32_t autocast_dtype;
static uint32_t autocast_device;
static int64_t phase_every = 50;
static unsigned phases_seen;     /* bit per PB_PHASE_*: each phase row once per sampled step */
static double cuda_capability = NAN; /* read once, when CUDA is first seen initialised */
static int64_t breakdown_first_step = -1; /* step of the first optimizer step seen */
#define BREAKDOWN_PER_STEP 8
static PyObject *breakdown_done[BREAKDOWN_PER_STEP]; /* optimizers done this step: compared only */
static int breakdown_count;

/* ---- torch objects (owned, set by install) ---- */

static PyObject *dataloader_iter_cls, *grad_scaler_cls, *optimizer_cls, *torch_cuda;
static PyObject *wrap_next, *wrap_scaler_step, *wrap_zero_grad, *wrap_synchronize;
static PyObject *wrap_item, *wrap_tolist, *wrap_cpu;
static PyTypeObject *tensor_type;
static PyObject *is_autocast_enabled, *get_autocast_dtype, *str_cpu, *str_cuda;
static PyObject *cuda_is_initialized, *cuda_memory_allocated, *cuda_max_memory_allocated,
    *cuda_memory_reserved, *cuda_current_device, *cuda_get_device_capability,
    *cuda_get_device_properties;
static PyObject *linear_cls, *conv_cls, *embedding_cls, *embedding_bag_cls, *str_parameters;
static PyObject *str_num_workers, *str_pin_memory, *str_prefetch_factor, *str_persistent_workers,
    *str_num_yielded, *str_shape, *str_enabled, *str_get_scale, *str_param_groups, *str_params,
    *str_grad, *str_state, *str_untyped_storage, *str_data_ptr, *str_nbytes, *str_is_cuda,
    *str_device, *str_dtype, *str_weight, *str_in_features, *str_out_features, *str_in_channels,
    *str_out_channels, *str_total_memory;
static uint32_t device_cpu, device_cuda, device_mixed;

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
    COL("forward", PB_COL_NS_SEC, pb_steps_row, forward_ns, "seconds in root module calls (the model, the loss module): on detail steps the sum of the step's forward self times in torch_trace"),
    COL("backward", PB_COL_NS_SEC, pb_steps_row, backward_ns, "seconds of backward passes: from the first probed autograd node (a module's output) to the engine's final callbacks, forwards recomputed inside left out"),
    COL("optimizer", PB_COL_NS_SEC, pb_steps_row, optimizer_ns, "seconds in optimizer.step()"),
    COL("collectives", PB_COL_NS_SEC, pb_steps_row, collectives_ns, "seconds in collective operations issued during the step"),
    COL("grad_sync", PB_COL_NS_SEC, pb_steps_row, grad_sync_ns, "seconds in autograd's final callbacks after the backward pass: DistributedDataParallel waiting for its gradient all-reduces (about 0 without DDP)"),
    COL("other", PB_COL_NS_SEC, pb_steps_row, other_ns, "wall minus all of the above, never below 0: host time nothing above accounts for"),
    COL("samples", PB_COL_I64, pb_steps_row, samples, "sum of the batch_size of the step's batches; 0 when unknown"),
    COL("syncs", PB_COL_I32, pb_steps_row, syncs, "host-device synchronisations in the step: torch.cuda.synchronize(), and .item()/.tolist()/.cpu() on CUDA tensors (0 on CPU)"),
    COL("rank", PB_COL_U16, pb_steps_row, rank, "distributed rank (RANK), 0 when not distributed"),
    COL("batches", PB_COL_I32, pb_steps_row, batches, "DataLoader batches fetched during the step: 0 means no DataLoader was seen (an input pipeline of its own), so data_wait 0 is then not a measured wait"),
    COL("detail", PB_COL_U8, pb_steps_row, detail, "1 when the step's module executions are in torch_trace (a detail step); 0 for a summary step (PROBING_DETAIL_EVERY)"),
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
      "one row per training step: wall time split into data wait, forward, backward, optimizer, collectives, other",
      "empty until the first step ends (optimizer.step(), or the next forward of the model)");
TABLE(pb_table_memory, "memory", memory_cols, pb_memory_row,
      "memory per step, and per phase on every PROBING_MEMORY_PHASE_EVERY-th step",
      "empty until the first step ends");
TABLE(pb_table_amp_trace, "amp_trace", amp_cols, pb_amp_row,
      "one row per optimizer step: GradScaler scale, inf checks, skipped steps, autocast state",
      "empty until the first optimizer step");
TABLE(pb_table_memory_breakdown, "memory_breakdown", breakdown_cols, pb_breakdown_row,
      "bytes of each optimizer's parameters, gradients and state, on the first optimizer step and every PROBING_MEMORY_PHASE_EVERY-th step",
      "empty until the first optimizer step (none without an optimizer, or with PROBING_MEMORY_PHASE_EVERY=0)");
TABLE(pb_table_layers, "layers", layer_cols, pb_layer_row,
      "one row per nn.Linear and convolution module, at its first forward: GEMM dimensions, dtypes, device",
      "empty until a Linear or convolution module runs outside a compiled region");

TABLE(pb_table_gil, "gil", gil_cols, pb_gil_row,
      "per step, the threads that held the GIL when sampled (every PROBING_GIL_SAMPLE_MS): a thread other than the training one holding it for a real share of the step slows the step",
      "empty until the first step ends; always empty on a Python without a readable GIL (3.14+, free-threaded builds) or with PROBING_GIL_SAMPLE_MS=0");

static pb_table *const tables[] = {&pb_table_dataloader_trace, &pb_table_steps, &pb_table_memory,
                                   &pb_table_amp_trace, &pb_table_memory_breakdown,
                                   &pb_table_layers, &pb_table_gil};
#define NTABLES (sizeof tables / sizeof tables[0])

int pb_collect_tables_init(void)
{
    static const uint64_t capacity[NTABLES] = {1 << 16, 1 << 16, 1 << 17, 1 << 16, 1 << 14, 1 << 14,
                                               1 << 16};
    int rc = 0;
    for (size_t i = 0; i < NTABLES; i++)
        if ((rc = pb_ring_create(&tables[i]->ring, tables[i]->row_size, capacity[i]))) goto fail;
    for (size_t i = 0; i < NTABLES; i++)
        if ((rc = pb_registry_add(tables[i]))) goto fail;
    phase_every = pb_config_int("PROBING_MEMORY_PHASE_EVERY", 50);
    device_cpu = pb_intern_cstr("cpu");
    device_cuda = pb_intern_cstr("cuda");
    device_mixed = pb_intern_cstr("mixed");
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
    if (cuda_in_use()) {
        double dev = call_double(cuda_current_device);
        char name[32];
        snprintf(name, sizeof name, "cuda:%d", isnan(dev) ? 0 : (int)dev);
        r->device = pb_intern_cstr(name);
        r->allocated_mb = call_double(cuda_memory_allocated) / (1024.0 * 1024.0);
        r->max_allocated_mb = call_double(cuda_max_memory_allocated) / (1024.0 * 1024.0);
        r->reserved_mb = call_double(cuda_memory_reserved) / (1024.0 * 1024.0);
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

static int64_t positive(int64_t v) { return v > 0 ? v : 0; }

/* str(o) as an intern id, without a leading "torch." ("torch.float16" -> "float16"); 0 when it
 * cannot be had. */
static uint32_t intern_str(PyObject *o)
{
    PyObject *s = o ? PyObject_Str(o) : NULL;
    const char *cs = s ? PyUnicode_AsUTF8(s) : NULL;
    uint32_t id = 0;
    if (cs) id = pb_intern_cstr(strncmp(cs, "torch.", 6) == 0 ? cs + 6 : cs);
    Py_XDECREF(s);
    PyErr_Clear();
    return id;
}

/* intern_str(o.attr) */
static uint32_t intern_attr(PyObject *o, PyObject *attr)
{
    PyObject *v = PyObject_GetAttr(o, attr);
    uint32_t id = v ? intern_str(v) : 0;
    Py_XDECREF(v);
    PyErr_Clear();
    return id;
}

static const char *short_class_name(PyObject *o)
{
    const char *n = Py_TYPE(o)->tp_name;
    const char *dot = strrchr(n, '.');
    return dot ? dot + 1 : n;
}

/* Reads the current CUDA device's compute capability once CUDA is initialised (never before:
 * probing must not initialise CUDA). */
static void read_cuda_capability(void)
{
    if (!isnan(cuda_capability) || !cuda_get_device_capability || !cuda_in_use()) return;
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

/* Bytes of t's storage when this walk has not counted that storage yet, else 0. Also 0 when t
 * is not a tensor or has no plain storage (sparse, some tensor subclasses). */
static int64_t storage_bytes(walk *w, PyObject *t)
{
    if (!tensor_type || !PyObject_TypeCheck(t, tensor_type)) return 0;
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
            uint32_t id = intern_str(dev);
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

void pb_collect_stage_time(int stage, int64_t self_ns)
{
    if (stage >= 0 && stage < 3) stage_ns[stage] += self_ns;
}

/* torch.get_autocast_dtype(device) as an intern id of its short name ("bfloat16"). */
static uint32_t autocast_dtype_of(PyObject *device)
{
    PyObject *d = get_autocast_dtype ? PyObject_CallOneArg(get_autocast_dtype, device) : NULL;
    uint32_t id = d ? intern_str(d) : 0;
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

void pb_collect_phase(int phase)
{
    if (phase_every <= 0 || pb_step_current() % phase_every != 0 || (phases_seen & (1u << phase))) return;
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
    r.autocast_device = autocast_on ? autocast_device : 0;
    read_cuda_capability();
    r.cuda_capability = cuda_capability;
    r.rank = pb_step_rank();
    push(&pb_table_amp_trace, &r);
}

void pb_collect_grad_sync(int64_t ns)
{
    if (ns > 0) grad_sync_ns += ns;
}

void pb_collect_optimizer_done(PyObject *optimizer)
{
    optimizer_steps++;
    pb_collect_phase(PB_PHASE_AFTER_OPTIMIZER);
    if (breakdown_due(optimizer)) breakdown(optimizer);
    if (!in_scaler_step) push_amp(pb_step_current(), NAN, 0, 0);
}

void pb_collect_step_end(int64_t step, int64_t wall_ns, int detail)
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
    s.grad_sync_ns = grad_sync_ns;
    s.other_ns = positive(wall_ns - s.data_wait_ns - s.forward_ns - s.backward_ns - s.optimizer_ns - s.collectives_ns -
                          s.grad_sync_ns);
    s.samples = samples;
    s.syncs = syncs;
    s.batches = batches;
    s.rank = pb_step_rank();
    s.detail = (uint8_t)(detail != 0);
    push(&pb_table_steps, &s);

    pb_memory_row m;
    memset(&m, 0, sizeof m);
    read_memory(&m, PB_PHASE_STEP);
    m.step = step;
    push(&pb_table_memory, &m);

    /* The GIL's holders in this step; the sampler starts with the first step. */
    pb_gil_row g[8];
    if (!gil_tried) {
        gil_tried = 1;
        pb_gil_start();
    }
    int ng = pb_gil_take(step, s.rank, g, 8);
    for (int i = 0; i < ng; i++) push(&pb_table_gil, &g[i]);

    memset(stage_ns, 0, sizeof stage_ns);
    data_wait_ns = samples = grad_sync_ns = 0;
    syncs = batches = 0;
    phases_seen = 0;
    breakdown_count = 0;
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
    data_wait_ns += r.wait_ns;
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
    PyObject *res = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    if (res) syncs++;
    return res;
}

/* Tensor.item(), .tolist(), .cpu() on a CUDA tensor: the host waits for the device
 * (docs/report.md, "Host time", and its `host_syncs` check). Counted after a successful return
 * when self.is_cuda. */
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
        {&str_param_groups, "param_groups"}, {&str_params, "params"}, {&str_grad, "grad"},
        {&str_state, "state"}, {&str_untyped_storage, "untyped_storage"},
        {&str_data_ptr, "data_ptr"}, {&str_nbytes, "nbytes"}, {&str_is_cuda, "is_cuda"},
        {&str_device, "device"}, {&str_dtype, "dtype"}, {&str_weight, "weight"},
        {&str_in_features, "in_features"}, {&str_out_features, "out_features"},
        {&str_in_channels, "in_channels"}, {&str_out_channels, "out_channels"},
        {&str_total_memory, "total_memory"},
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
        Py_XSETREF(cuda_get_device_capability, PyObject_GetAttrString(torch_cuda, "get_device_capability"));
        Py_XSETREF(cuda_get_device_properties, PyObject_GetAttrString(torch_cuda, "get_device_properties"));
        PyErr_Clear();
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
    PyErr_Restore(et, ev, tb);
    memset(stage_ns, 0, sizeof stage_ns);
    data_wait_ns = samples = grad_sync_ns = 0;
    syncs = batches = 0;
    pb_step_collectives_ns = 0;
    in_scaler_step = 0;
    phases_seen = 0;
    autocast_on = 0;
    autocast_device = 0;
    breakdown_first_step = -1;
    breakdown_count = 0;
    pb_gil_stop();
    gil_tried = 0;
}
