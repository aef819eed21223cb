/* test_devtime.c - device time's event bookkeeping (src/agent/base/devtime.c) against a SIMULATED
 * CUDA runtime: no GPU and no CUDA library are involved. The simulation is a device with one
 * compute stream (work runs in order, starting when it is queued or when the work before it ends)
 * and idle side streams; an event completes at the device time it reaches the head of its stream;
 * cuEventElapsedTime subtracts completion times as a float of milliseconds, as CUDA's does. What
 * it checks: phase spans nest into a device timeline whose shares add up to the device step; a
 * GPU-bound step (host far ahead) and a launch-bound one (device waiting on the host) show as
 * such in lag; module self times add up to the root's total; the device wait behind a sync;
 * marks dropped and counted when the queue is full or no context is current; events are read
 * only once complete and never block; anchors rotate over long runs.
 *
 * What this cannot check (scripts/gpu_check.sh does, on a GPU): that real CUDA events behave as
 * this model does, the driver calls' signatures, the cost of a mark. */
#include "check.h"
#include "devtime.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the simulated runtime */

#define MAX_EVENTS 20000
typedef struct sim_event {
    int64_t time; /* device completion time (same scale as the host clock), -1 never recorded */
    int used;
} sim_event;

static struct {
    int64_t host;       /* the host clock the test drives */
    int64_t busy_until; /* the compute stream: when the work queued so far is done */
    sim_event events[MAX_EVENTS];
    int nevents;
    int ctx_present;
    int record_fails;
    int syncs_called;   /* event_synchronize calls (only the reader's anchor may call it) */
} sim;

static int64_t host_clock(void) { return sim.host; }
static int s_ctx_get_current(void **ctx) { *ctx = sim.ctx_present ? (void *)0x1 : NULL; return 0; }
static int s_ctx_set_current(void *ctx) { return 0; }
static int s_ctx_get_device(int *d) { *d = 3; return 0; }
static int s_event_create(void **ev, unsigned flags)
{
    if (sim.nevents >= MAX_EVENTS) return 2;
    sim.events[sim.nevents].time = -1;
    sim.events[sim.nevents].used = 1;
    *ev = &sim.events[sim.nevents++];
    return 0;
}
static int s_event_destroy(void *ev) { ((sim_event *)ev)->used = 0; return 0; }
static int s_event_record(void *ev, void *stream)
{
    if (sim.record_fails) return 1;
    sim_event *e = ev;
    /* stream NULL or 0x10: the compute stream; anything else an idle side stream */
    if (stream == NULL || stream == (void *)0x10) e->time = sim.busy_until > sim.host ? sim.busy_until : sim.host;
    else e->time = sim.host + 2000; /* an idle stream: done 2 us after it is queued */
    return 0;
}
static int s_event_query(void *ev)
{
    sim_event *e = ev;
    if (e->time < 0) return 0; /* never recorded: complete, as CUDA says */
    return e->time <= sim.host ? 0 : PB_DEV_NOT_READY;
}
static int s_event_synchronize(void *ev)
{
    sim_event *e = ev;
    sim.syncs_called++;
    if (e->time > sim.host) sim.host = e->time;
    return 0;
}
static int s_event_elapsed(float *ms, void *a, void *b)
{
    sim_event *x = a, *y = b;
    if (x->time < 0 || y->time < 0 || x->time > sim.host || y->time > sim.host) return PB_DEV_NOT_READY;
    *ms = (float)((double)(y->time - x->time) / 1e6);
    return 0;
}
static int s_stream_create(void **s, unsigned flags) { *s = (void *)0x20; return 0; }
static int s_stream_destroy(void *s) { return 0; }

static const pb_dev_api sim_api = {s_ctx_get_current, s_ctx_set_current, s_ctx_get_device, s_event_create,
                                   s_event_destroy, s_event_record, s_event_query, s_event_synchronize,
                                   s_event_elapsed, s_stream_create, s_stream_destroy};

/* the host queues `dev_ns` of device work and spends `host_ns` doing so */
static void launch(int64_t host_ns, int64_t dev_ns)
{
    int64_t start = sim.busy_until > sim.host ? sim.busy_until : sim.host;
    sim.busy_until = start + dev_ns;
    sim.host += host_ns;
}

/* ---------------------------------------------------------------- the sink */

#define MAX_ROWS 4096
static pb_dev_step steps[MAX_ROWS];
static int nsteps;
static pb_dev_module mods[MAX_ROWS];
static int nmods;
static void on_step(const pb_dev_step *s, void *ctx) { if (nsteps < MAX_ROWS) steps[nsteps++] = *s; }
static void on_module(const pb_dev_module *m, void *ctx) { if (nmods < MAX_ROWS) mods[nmods++] = *m; }
static const pb_dev_sink sink = {on_step, on_module, NULL};

static pb_devtime d;

static void reset(void)
{
    memset(&sim, 0, sizeof sim);
    sim.host = 1000000000; /* 1 s */
    sim.ctx_present = 1;
    memset(&d, 0, sizeof d);
    pb_devtime_init(&d, &sim_api);
    nsteps = nmods = 0;
}

static void mark(pb_dev_mark_kind kind, int activity, int64_t step)
{
    pb_dev_mark m;
    memset(&m, 0, sizeof m);
    m.kind = (uint8_t)kind;
    m.activity = (int8_t)activity;
    m.step = step;
    pb_devtime_mark(&d, &m, sim.host);
}

static void module(pb_dev_mark_kind kind, uint32_t name, uint32_t seq, int depth, int64_t step)
{
    pb_dev_mark m;
    memset(&m, 0, sizeof m);
    m.kind = (uint8_t)kind;
    m.activity = -1;
    m.name = name;
    m.type = name + 100;
    m.seq = seq;
    m.depth = (uint8_t)depth;
    m.step = step;
    pb_devtime_mark(&d, &m, sim.host);
}

static int64_t share_sum(const pb_dev_step *s)
{
    int64_t t = 0;
    for (int a = 0; a < PB_ACT_COUNT; a++) t += s->share[a];
    return t;
}

static int near(int64_t got, int64_t want, int64_t tol) { return llabs(got - want) <= tol; }

/* one training step: forward, backward, optimizer, each with host and device times (ns) */
static void train_step(int64_t step, int64_t fh, int64_t fd, int64_t bh, int64_t bd, int64_t oh, int64_t od)
{
    mark(PB_DEV_BEGIN, PB_ACT_FORWARD, step);
    launch(fh, fd);
    mark(PB_DEV_END, PB_ACT_FORWARD, step);
    mark(PB_DEV_BEGIN, PB_ACT_BACKWARD, step);
    launch(bh, bd);
    mark(PB_DEV_END, PB_ACT_BACKWARD, step);
    mark(PB_DEV_BEGIN, PB_ACT_OPTIMIZER, step);
    launch(oh, od);
    mark(PB_DEV_END, PB_ACT_OPTIMIZER, step);
    mark(PB_DEV_STEP, -1, step);
}

int main(void)
{
    const int64_t US = 1000, MS = 1000000;

    /* GPU-bound: the host queues a step in 2.5 ms, the device needs 35 ms */
    reset();
    mark(PB_DEV_STEP, -1, 0); /* the boundary before step 1 */
    for (int64_t s = 1; s <= 3; s++) {
        train_step(s, 1 * MS, 10 * MS, 1 * MS, 20 * MS, MS / 2, 5 * MS);
        int resolved = pb_devtime_poll(&d, &sink, host_clock); /* the device is behind: little done */
        CHECK(resolved >= 0, "GPU-bound: poll never blocks (resolved %d)", resolved);
        sim.host += 30 * MS; /* the host waits somewhere (an .item()) */
    }
    sim.host += 200 * MS;
    pb_devtime_poll(&d, &sink, host_clock);
    CHECK(nsteps == 3, "GPU-bound: three device steps (got %d)", nsteps);
    if (nsteps >= 2) {
        const pb_dev_step *s = &steps[1];
        CHECK(s->step == 2, "GPU-bound: rows carry their step (%lld)", (long long)s->step);
        CHECK(near(s->share[PB_ACT_FORWARD], 10 * MS, 20 * US), "GPU-bound: device forward 10 ms (got %.3f ms)", s->share[PB_ACT_FORWARD] / 1e6);
        CHECK(near(s->share[PB_ACT_BACKWARD], 20 * MS, 20 * US), "GPU-bound: device backward 20 ms (got %.3f ms)", s->share[PB_ACT_BACKWARD] / 1e6);
        CHECK(near(s->share[PB_ACT_OPTIMIZER], 5 * MS, 20 * US), "GPU-bound: device optimizer 5 ms (got %.3f ms)", s->share[PB_ACT_OPTIMIZER] / 1e6);
        CHECK(share_sum(s) == s->end_ns - s->start_ns, "GPU-bound: the shares add up to the device step exactly");
        CHECK(s->end_ns - s->host_end_ns > 20 * MS, "GPU-bound: the device finished the step >20 ms after the host ended it (lag %.3f ms)",
              (s->end_ns - s->host_end_ns) / 1e6);
        CHECK(s->device == 3, "the context's device is named (%d)", s->device);
        CHECK(s->start_ns - s->host_start_ns > 20 * MS, "GPU-bound: the device began the step >20 ms after the host (%.3f ms)",
              (s->start_ns - s->host_start_ns) / 1e6);
        CHECK(s->anchor_error_ns >= 0 && s->anchor_error_ns < MS, "the anchor's error is kept (%lld ns)", (long long)s->anchor_error_ns);
    }
    CHECK(sim.syncs_called > 0 && atomic_load(&d.dropped) == 0, "GPU-bound: only the anchor synchronised, nothing dropped");

    /* Launch-bound: the host spends 10 ms launching 100 kernels of 5 us each */
    reset();
    mark(PB_DEV_STEP, -1, 0);
    for (int64_t s = 1; s <= 2; s++) {
        mark(PB_DEV_BEGIN, PB_ACT_FORWARD, s);
        for (int k = 0; k < 100; k++) launch(100 * US, 5 * US);
        mark(PB_DEV_END, PB_ACT_FORWARD, s);
        sim.host += 1 * MS; /* the loop's own Python */
        mark(PB_DEV_STEP, -1, s);
        sim.host += 1 * US;
        pb_devtime_poll(&d, &sink, host_clock);
    }
    CHECK(nsteps == 2, "launch-bound: two device steps (got %d)", nsteps);
    if (nsteps == 2) {
        const pb_dev_step *s = &steps[1];
        CHECK(s->end_ns - s->host_end_ns < 50 * US, "launch-bound: the device keeps up with the host (lag %.3f ms)", (s->end_ns - s->host_end_ns) / 1e6);
        CHECK(near(s->share[PB_ACT_FORWARD], 10 * MS, 20 * US), "launch-bound: device forward spans the host's launches, 10 ms (got %.3f)", s->share[PB_ACT_FORWARD] / 1e6);
        CHECK(near(s->share[PB_ACT_HOST], 1 * MS, 20 * US), "launch-bound: the device idles 1 ms while the loop runs Python (got %.3f)", s->share[PB_ACT_HOST] / 1e6);
    }

    /* Modules on a detail step: root 1 (depth 0) holds 2 and 3; 3 holds 4; self times add up */
    reset();
    mark(PB_DEV_STEP, -1, 0);
    mark(PB_DEV_BEGIN, PB_ACT_FORWARD, 1);
    module(PB_DEV_BEGIN, 1, 0, 0, 1);
    launch(10 * US, 1 * MS);
    module(PB_DEV_BEGIN, 2, 1, 1, 1);
    launch(10 * US, 3 * MS);
    module(PB_DEV_END, 2, 1, 1, 1);
    module(PB_DEV_BEGIN, 3, 2, 1, 1);
    launch(10 * US, 2 * MS);
    module(PB_DEV_BEGIN, 4, 3, 2, 1);
    launch(10 * US, 4 * MS);
    module(PB_DEV_END, 4, 3, 2, 1);
    module(PB_DEV_END, 3, 2, 1, 1);
    launch(10 * US, 1 * MS);
    module(PB_DEV_END, 1, 0, 0, 1);
    mark(PB_DEV_END, PB_ACT_FORWARD, 1);
    mark(PB_DEV_STEP, -1, 1);
    sim.host += 100 * MS;
    pb_devtime_poll(&d, &sink, host_clock);
    CHECK(nmods == 4, "modules: four rows (got %d)", nmods);
    int64_t self_sum = 0, root_total = 0;
    for (int i = 0; i < nmods; i++) {
        self_sum += mods[i].self_ns;
        if (mods[i].name == 1) root_total = mods[i].total_ns;
        if (mods[i].name == 3) CHECK(near(mods[i].self_ns, 2 * MS, 20 * US) && near(mods[i].total_ns, 6 * MS, 20 * US),
                                     "modules: 3 has self 2 ms, total 6 ms (got %.3f, %.3f)", mods[i].self_ns / 1e6, mods[i].total_ns / 1e6);
        if (mods[i].name == 4) CHECK(mods[i].seq == 3 && mods[i].depth == 2 && mods[i].type == 104, "modules: a row keeps seq, depth and type");
    }
    CHECK(near(root_total, 11 * MS, 20 * US), "modules: the root's device total is 11 ms (got %.3f)", root_total / 1e6);
    CHECK(near(self_sum, root_total, 20 * US), "modules: self times add up to the root's total (%.3f vs %.3f ms)", self_sum / 1e6, root_total / 1e6);
    if (nsteps == 1) CHECK(near(steps[0].share[PB_ACT_FORWARD], 11 * MS, 20 * US), "modules: the step's device forward is the root's total");

    /* An END whose BEGIN raised past it (an exception skipped a module's end): the outer span still closes */
    reset();
    mark(PB_DEV_STEP, -1, 0);
    mark(PB_DEV_BEGIN, PB_ACT_FORWARD, 1);
    module(PB_DEV_BEGIN, 1, 0, 0, 1);
    module(PB_DEV_BEGIN, 2, 1, 1, 1); /* never ends */
    launch(10 * US, 2 * MS);
    module(PB_DEV_END, 1, 0, 0, 1);
    mark(PB_DEV_END, PB_ACT_FORWARD, 1);
    mark(PB_DEV_STEP, -1, 1);
    sim.host += 100 * MS;
    pb_devtime_poll(&d, &sink, host_clock);
    CHECK(nmods == 1 && mods[0].name == 1 && near(mods[0].total_ns, 2 * MS, 20 * US), "a lost END: the enclosing module still has its row");
    CHECK(nsteps == 1 && near(steps[0].share[PB_ACT_FORWARD], 2 * MS, 20 * US), "a lost END: forward still 2 ms");

    /* Sync: the host calls .item() while 7 ms of work is queued */
    reset();
    mark(PB_DEV_STEP, -1, 0);
    launch(100 * US, 7 * MS + 100 * US);
    mark(PB_DEV_SYNC, -1, 1);
    sim.host = sim.busy_until; /* .item() returns when the device is done */
    mark(PB_DEV_STEP, -1, 1);
    sim.host += 1 * MS;
    pb_devtime_poll(&d, &sink, host_clock);
    CHECK(nsteps == 1 && steps[0].syncs == 1, "sync: one sync timed");
    if (nsteps == 1)
        CHECK(near(steps[0].sync_wait_ns, 7 * MS, 20 * US), "sync: the device wait behind it is 7 ms (got %.3f)", steps[0].sync_wait_ns / 1e6);

    /* Nothing resolves before the device gets there, and poll never waits for it */
    reset();
    mark(PB_DEV_STEP, -1, 0);
    launch(10 * US, 50 * MS);
    mark(PB_DEV_STEP, -1, 1);
    int before = sim.syncs_called;
    int n = pb_devtime_poll(&d, &sink, host_clock);
    CHECK(n == 1 && nsteps == 0, "pending: only the first mark resolves while the device works (%d)", n);
    CHECK(sim.syncs_called == before + 1, "pending: the only wait is the reader's anchor");
    sim.host += 60 * MS;
    n = pb_devtime_poll(&d, &sink, host_clock);
    CHECK(n == 1 && nsteps == 1 && near(steps[0].end_ns - steps[0].start_ns, 50 * MS, 20 * US), "pending: the step resolves once done (50 ms)");

    /* Drops: no context on the thread, a record that fails, a full queue */
    reset();
    sim.ctx_present = 0;
    mark(PB_DEV_STEP, -1, 0);
    CHECK(atomic_load(&d.dropped) == 1 && atomic_load(&d.head) == 0, "no context: the mark is dropped and counted");
    sim.ctx_present = 1;
    sim.record_fails = 1;
    mark(PB_DEV_STEP, -1, 0);
    CHECK(atomic_load(&d.dropped) == 2, "a failed record is dropped and counted");
    sim.record_fails = 0;
    launch(10 * US, 10 * 1000 * MS); /* the device is 10 s behind: nothing completes */
    for (int i = 0; i < PB_DEV_QUEUE + 10; i++) mark(PB_DEV_SYNC, -1, 1);
    CHECK(atomic_load(&d.head) - atomic_load(&d.tail) == PB_DEV_QUEUE, "full queue: %d marks in flight at most", PB_DEV_QUEUE);
    CHECK(atomic_load(&d.dropped) == 12, "full queue: the 10 over it are dropped and counted (%lld)", (long long)atomic_load(&d.dropped));
    CHECK(sim.nevents <= PB_DEV_QUEUE, "the pool holds one event per slot (%d created)", sim.nevents);

    /* A long run: anchors rotate every second; events are reused; times stay exact */
    reset();
    mark(PB_DEV_STEP, -1, 0);
    for (int64_t s = 1; s <= 900; s++) { /* 9,000 marks: the queue wraps */
        train_step(s, 1 * MS, 3 * MS, 1 * MS, 6 * MS, 1 * MS, 1 * MS);
        sim.host += 10 * MS;
        pb_devtime_poll(&d, &sink, host_clock);
    }
    sim.host += 100 * MS;
    pb_devtime_poll(&d, &sink, host_clock);
    int exact = 1;
    for (int i = 0; i < nsteps; i++) {
        if (!near(steps[i].share[PB_ACT_BACKWARD], 6 * MS, 2 * US) || share_sum(&steps[i]) != steps[i].end_ns - steps[i].start_ns) exact = 0;
    }
    CHECK(nsteps == 900 && exact, "long run: 900 steps, each backward 6 ms within 2 us (%d rows)", nsteps);
    CHECK(sim.nevents <= PB_DEV_QUEUE + PB_DEV_ANCHORS, "long run: the pool stops growing at one event per slot, then reuses them (%d created)", sim.nevents);
    CHECK(sim.syncs_called >= 6, "long run: the anchor was refreshed about once a second (%d)", sim.syncs_called);

    return check_summary();
}
