/* device.c - python.device_steps and python.device_trace; see device.h and base/devtime.h. */
#include "device.h"

#include "clock.h"
#include "config.h"
#include "devtime.h"
#include "log.h"
#include "memtables.h"
#include "sampler.h"
#include "step.h"
#include "torch_trace.h"

#include <Python.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct pb_device_step_row {
    int64_t step;
    int64_t wall_ns, data_wait_ns, forward_ns, backward_ns, optimizer_ns, collectives_ns, grad_sync_ns, other_ns;
    int64_t lag_ns, sync_wait_ns, anchor_error_ns, dropped, time_offset_ns;
    int32_t syncs, device;
    uint16_t rank;
} pb_device_step_row;

typedef struct pb_device_trace_row {
    int64_t step;
    int64_t duration_ns, total_ns, time_offset_ns;
    uint32_t seq, module, type;
    uint16_t depth, rank;
    uint8_t stage;
} pb_device_trace_row;

#define COL PB_COL

static const pb_column step_cols[] = {
    COL("step", PB_COL_I64, pb_device_step_row, step, "training step, as in python.steps"),
    COL("device", PB_COL_I32, pb_device_step_row, device, "CUDA device ordinal the step's work ran on (the training thread's current device)"),
    COL("wall", PB_COL_NS_SEC, pb_device_step_row, wall_ns, "seconds of device time from the step's start boundary to its end boundary: when the device finished the work queued before each (the columns below to other add up to it)"),
    COL("data_wait", PB_COL_NS_SEC, pb_device_step_row, data_wait_ns, "always 0: DataLoader waits queue no device work of their own (their time is in other)"),
    COL("forward", PB_COL_NS_SEC, pb_device_step_row, forward_ns, "device seconds of the work root module calls queued, less what collectives inside them queued"),
    COL("backward", PB_COL_NS_SEC, pb_device_step_row, backward_ns, "device seconds of the work torch.autograd.backward() queued, less grad sync and collectives inside it"),
    COL("optimizer", PB_COL_NS_SEC, pb_device_step_row, optimizer_ns, "device seconds of the work optimizer.step() queued (a closure's forward and backward are theirs)"),
    COL("collectives", PB_COL_NS_SEC, pb_device_step_row, collectives_ns, "device seconds of the work collective calls queued (NCCL kernels on the current stream; async work on NCCL's own stream counts where the current stream waits for it)"),
    COL("grad_sync", PB_COL_NS_SEC, pb_device_step_row, grad_sync_ns, "device seconds of the work autograd's final callbacks queued (DDP's bucket all-reduces when they run on the current stream)"),
    COL("other", PB_COL_NS_SEC, pb_device_step_row, other_ns, "device seconds no phase above queued: work the loop's own code queued (a loss outside a module, copies to the device) and the device idle waiting for the host"),
    COL("time_offset", PB_COL_NS_SEC, pb_device_step_row, time_offset_ns, "seconds from the host's start of the step (python.steps) to the device's: how far behind the device began it (timeline places the device track with it)"),
    COL("lag", PB_COL_NS_SEC, pb_device_step_row, lag_ns, "seconds the device finished the step's work after the host ended the step: large = the host runs ahead and waits on the device (GPU-bound); about 0 = the device waits on the host (host- or launch-bound)"),
    COL("sync_wait", PB_COL_NS_SEC, pb_device_step_row, sync_wait_ns, "seconds the host waited for the device in the step's synchronisations (.item(), .cpu(), torch.cuda.synchronize()): for each, how far the device's queue ran behind when the host asked"),
    COL("syncs", PB_COL_I32, pb_device_step_row, syncs, "synchronisations timed in the step"),
    COL("anchor_error", PB_COL_NS_SEC, pb_device_step_row, anchor_error_ns, "seconds of uncertainty in placing device times on the host clock (the anchor event's bracket); lag and sync_wait are good to about this"),
    COL("dropped", PB_COL_I64, pb_device_step_row, dropped, "marks dropped since device timing began (queue full, another device's context, driver errors): nonzero means some spans are missing"),
    COL("rank", PB_COL_U16, pb_device_step_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

static const char *const stage_names[] = {"forward", "backward", "step", "collective", NULL};

static const pb_column trace_cols[] = {
    COL("step", PB_COL_I64, pb_device_trace_row, step, "training step (a detail step: python.steps.detail = 1)"),
    COL("seq", PB_COL_U32, pb_device_trace_row, seq, "order in the step, as python.torch_trace.seq: join on (step, seq) for host and device time side by side; for a collective its sequence number in its process group"),
    COL("module", PB_COL_STR_ID, pb_device_trace_row, module, "qualified name, as in python.torch_trace; for a collective the operation (all_reduce)"),
    COL("type", PB_COL_STR_ID, pb_device_trace_row, type, "class name"),
    {"stage", PB_COL_ENUM_U8, offsetof(pb_device_trace_row, stage), stage_names, "'forward' (module calls of detail steps), 'step' (optimizer.step() of detail steps) or 'collective' (every collective call, every step)"},
    COL("duration", PB_COL_NS_SEC, pb_device_trace_row, duration_ns, "device seconds of self time: the work the call queued, less nested module calls and collectives"),
    COL("total_duration", PB_COL_NS_SEC, pb_device_trace_row, total_ns, "device seconds from when the device reached the call's first work to when it finished its last"),
    COL("time_offset", PB_COL_NS_SEC, pb_device_trace_row, time_offset_ns, "device seconds from the step's device start to the call's start"),
    COL("depth", PB_COL_U16, pb_device_trace_row, depth, "nesting depth, root = 0"),
    COL("rank", PB_COL_U16, pb_device_trace_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

static char empty_reason[240] = "no CUDA: device time is measured only when the program uses a CUDA device";

pb_table pb_table_device_steps = {
    .schema = "python",
    .name = "device_steps",
    .doc = "one row per training step on a CUDA device: the device time of the step and of its phases (CUDA events at the boundaries python.steps uses), how far the device ran behind the host, and the device wait behind synchronisations",
    .columns = step_cols,
    .ncolumns = (int)(sizeof step_cols / sizeof step_cols[0]),
    .row_size = sizeof(pb_device_step_row),
    .step_column = 0,
    .empty_reason = empty_reason,
};

pb_table pb_table_device_trace = {
    .schema = "python",
    .name = "device_trace",
    .doc = "one row per module call and optimizer step of a detail step, and per collective call, on a CUDA device: device self and total time (join python.torch_trace on step, seq)",
    .columns = trace_cols,
    .ncolumns = (int)(sizeof trace_cols / sizeof trace_cols[0]),
    .row_size = sizeof(pb_device_trace_row),
    .step_column = 0,
    .empty_reason = empty_reason,
};

int pb_device_on;

static pb_devtime dt;
static int state;      /* 0 not yet known, 1 on, -1 off for good */
static int64_t checks; /* step ends seen while state is 0 */
static PyObject *current_stream, *str_cuda_stream;
static pb_sampler reader;
static _Atomic int reader_ctx_set; /* [reader thread] */
static char status[240] = "off: no CUDA device in use yet";

int pb_device_tables_init(void)
{
    int rc;
    if ((rc = pb_ring_create(&pb_table_device_steps.ring, sizeof(pb_device_step_row), 1 << 16))) goto fail;
    if ((rc = pb_ring_create(&pb_table_device_trace.ring, sizeof(pb_device_trace_row), 1 << 18))) goto fail;
    if ((rc = pb_registry_add(&pb_table_device_steps))) goto fail;
    if ((rc = pb_registry_add(&pb_table_device_trace))) goto fail;
    return 0;
fail:
    pb_device_tables_free();
    return rc;
}

void pb_device_tables_free(void)
{
    pb_ring_destroy(pb_table_device_steps.ring);
    pb_table_device_steps.ring = NULL;
    pb_ring_destroy(pb_table_device_trace.ring);
    pb_table_device_trace.ring = NULL;
}

const char *pb_device_status(void) { return status; }

/* ---------------------------------------------------------------- the reader [reader thread] */

static void on_step(const pb_dev_step *s, void *ctx)
{
    pb_device_step_row r;
    memset(&r, 0, sizeof r);
    r.step = s->step;
    r.wall_ns = s->end_ns - s->start_ns;
    r.data_wait_ns = s->share[PB_ACT_DATA_WAIT];
    r.forward_ns = s->share[PB_ACT_FORWARD];
    r.backward_ns = s->share[PB_ACT_BACKWARD];
    r.optimizer_ns = s->share[PB_ACT_OPTIMIZER];
    r.collectives_ns = s->share[PB_ACT_COLLECTIVE];
    r.grad_sync_ns = s->share[PB_ACT_GRAD_SYNC];
    r.other_ns = s->share[PB_ACT_HOST];
    r.lag_ns = s->end_ns - s->host_end_ns;
    r.time_offset_ns = s->start_ns - s->host_start_ns;
    r.sync_wait_ns = s->sync_wait_ns;
    r.syncs = s->syncs;
    r.anchor_error_ns = s->anchor_error_ns;
    r.dropped = s->dropped;
    r.device = s->device;
    r.rank = pb_step_rank();
    if (pb_table_device_steps.ring) pb_ring_push(pb_table_device_steps.ring, &r);
}

static void on_module(const pb_dev_module *m, void *ctx)
{
    pb_device_trace_row r;
    memset(&r, 0, sizeof r);
    r.step = m->step;
    r.seq = m->seq;
    r.module = m->name;
    r.type = m->type;
    r.stage = m->stage;
    r.depth = m->depth;
    r.duration_ns = m->self_ns;
    r.total_ns = m->total_ns;
    /* modules resolve after their step's start mark: the step being assembled is theirs */
    r.time_offset_ns = dt.have_step && dt.step == m->step ? m->start_ns - dt.step_start_ns : 0;
    r.rank = pb_step_rank();
    if (pb_table_device_trace.ring) pb_ring_push(pb_table_device_trace.ring, &r);
}

static const pb_dev_sink sink = {on_step, on_module, NULL};

static void tick(void)
{
    if (atomic_load_explicit(&dt.head, memory_order_acquire) == 0) return; /* dt.ctx is set before */
    if (!atomic_load_explicit(&reader_ctx_set, memory_order_relaxed)) {
        if (dt.api.ctx_set_current(dt.ctx) != 0) {
            snprintf(status, sizeof status, "off: the reader thread could not make the training thread's CUDA context current");
            pb_device_on = 0;
            dt.failed = 1;
            return;
        }
        atomic_store_explicit(&reader_ctx_set, 1, memory_order_relaxed);
    }
    pb_devtime_poll(&dt, &sink, pb_now_ns);
    if (dt.failed && pb_device_on) {
        pb_device_on = 0;
        snprintf(status, sizeof status, "off: %s", dt.why);
        snprintf(empty_reason, sizeof empty_reason, "device timing stopped: %s", dt.why);
    }
}

/* ---------------------------------------------------------------- marks [GIL held] */

void pb_device_phase(int begin, pb_activity activity)
{
    pb_dev_mark m;
    memset(&m, 0, sizeof m);
    m.kind = begin ? PB_DEV_BEGIN : PB_DEV_END;
    m.activity = (int8_t)activity;
    m.step = pb_step_current();
    pb_devtime_mark(&dt, &m, pb_now_ns());
}

void pb_device_module(int begin, pb_activity activity, uint32_t name, uint32_t type, uint32_t seq, int stage, int depth)
{
    if (!pb_device_on) return;
    pb_dev_mark m;
    memset(&m, 0, sizeof m);
    m.kind = begin ? PB_DEV_BEGIN : PB_DEV_END;
    m.activity = (int8_t)activity;
    m.name = name;
    m.type = type;
    m.seq = seq;
    m.stage = (uint8_t)stage;
    m.depth = (uint8_t)(depth > 255 ? 255 : depth);
    m.step = pb_step_current();
    pb_devtime_mark(&dt, &m, pb_now_ns());
}

void pb_device_sync(void)
{
    if (!pb_device_on) return;
    pb_dev_mark m;
    memset(&m, 0, sizeof m);
    m.kind = PB_DEV_SYNC;
    m.activity = -1;
    m.step = pb_step_current();
    pb_devtime_mark(&dt, &m, pb_now_ns());
}

static void turn_off(const char *why)
{
    state = -1;
    pb_device_on = 0;
    snprintf(status, sizeof status, "off: %s", why);
    snprintf(empty_reason, sizeof empty_reason, "no device time: %s", why);
}

/* Turns device timing on once the program uses CUDA. [GIL held] */
static void try_on(void)
{
    if (checks++ % 16) return;
    if (!pb_config_int("PROBING_DEVICE_TIME", 1)) {
        turn_off("PROBING_DEVICE_TIME=0");
        return;
    }
    if (!pb_memory_cuda_in_use()) return; /* not yet (or never: a CPU program) */
    pb_dev_api api;
    char why[160];
    if (pb_dev_api_load(&api, why, sizeof why)) {
        turn_off(why);
        return;
    }
    PyObject *cuda = PyImport_ImportModule("torch.cuda");
    current_stream = cuda ? PyObject_GetAttrString(cuda, "current_stream") : NULL;
    Py_XDECREF(cuda);
    if (!str_cuda_stream) str_cuda_stream = PyUnicode_InternFromString("cuda_stream");
    if (!current_stream || !str_cuda_stream) {
        PyErr_Clear();
        turn_off("torch.cuda.current_stream is missing");
        return;
    }
    pb_devtime_init(&dt, &api);
    long period = (long)pb_config_int("PROBING_DEVICE_POLL_MS", 10);
    reader.tick = tick;
    reader.period_ms = period < 1 ? 1 : period;
    reader.tick_first = 0;
    reader.fixed_rate = 0;
    int rc = pb_sampler_start(&reader);
    if (rc) {
        turn_off("the reader thread could not start");
        return;
    }
    state = 1;
    pb_device_on = 1;
    snprintf(empty_reason, sizeof empty_reason, "empty until the device finishes the first step after CUDA came into use");
}

/* The stream the step's marks go on: torch's current stream now. [GIL held] */
static void read_stream(void)
{
    PyObject *s = PyObject_CallNoArgs(current_stream);
    PyObject *h = s ? PyObject_GetAttr(s, str_cuda_stream) : NULL;
    if (h && PyLong_Check(h)) dt.stream = (void *)(uintptr_t)PyLong_AsUnsignedLongLongMask(h);
    Py_XDECREF(h);
    Py_XDECREF(s);
    PyErr_Clear();
}

void pb_device_step_end(int64_t step)
{
    if (state < 0) return;
    if (state == 0) {
        try_on();
        if (state != 1) return;
    }
    if (!pb_device_on) return;
    read_stream();
    pb_dev_mark m;
    memset(&m, 0, sizeof m);
    m.kind = PB_DEV_STEP;
    m.activity = -1;
    m.step = step;
    if (pb_devtime_mark(&dt, &m, pb_now_ns()) == 0 && dt.ctx)
        snprintf(status, sizeof status, "on (cuda:%d; CUDA events at the step's boundaries, modules on detail steps)", dt.device);
}

void pb_device_stop(void)
{
    pb_device_on = 0;
    if (reader.running) pb_sampler_stop(&reader);
    if (state == 1) state = 0; /* a later start turns it on again */
    checks = 0;
    atomic_store_explicit(&reader_ctx_set, 0, memory_order_relaxed);
}

void pb_device_forget_after_fork(void)
{
    pb_device_on = 0;
    state = -1;
    pb_sampler_forget_after_fork(&reader);
}
