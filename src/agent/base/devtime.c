/* devtime.c - device time from CUDA events; see devtime.h. */
#include "devtime.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define CU_EVENT_DEFAULT 0
#define CU_STREAM_NON_BLOCKING 1

int pb_dev_api_load(pb_dev_api *api, char *why, size_t whylen)
{
    memset(api, 0, sizeof *api);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) {
        snprintf(why, whylen, "the process has not loaded the CUDA driver (libcuda.so.1)");
        return -1;
    }
    static const struct {
        const char *symbol, *fallback;
        size_t offset;
    } wanted[] = {
        {"cuCtxGetCurrent", NULL, offsetof(pb_dev_api, ctx_get_current)},
        {"cuCtxSetCurrent", NULL, offsetof(pb_dev_api, ctx_set_current)},
        {"cuCtxGetDevice", NULL, offsetof(pb_dev_api, ctx_get_device)},
        {"cuEventCreate", NULL, offsetof(pb_dev_api, event_create)},
        {"cuEventDestroy_v2", "cuEventDestroy", offsetof(pb_dev_api, event_destroy)},
        {"cuEventRecord", NULL, offsetof(pb_dev_api, event_record)},
        {"cuEventQuery", NULL, offsetof(pb_dev_api, event_query)},
        {"cuEventSynchronize", NULL, offsetof(pb_dev_api, event_synchronize)},
        {"cuEventElapsedTime_v2", "cuEventElapsedTime", offsetof(pb_dev_api, event_elapsed)},
        {"cuStreamCreate", NULL, offsetof(pb_dev_api, stream_create)},
        {"cuStreamDestroy_v2", "cuStreamDestroy", offsetof(pb_dev_api, stream_destroy)},
    };
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        void *fn = dlsym(lib, wanted[i].symbol);
        if (!fn && wanted[i].fallback) fn = dlsym(lib, wanted[i].fallback);
        if (!fn) {
            snprintf(why, whylen, "libcuda.so.1 has no %s", wanted[i].symbol);
            memset(api, 0, sizeof *api);
            return -1;
        }
        memcpy((char *)api + wanted[i].offset, &fn, sizeof fn);
    }
    return 0;
}

void pb_devtime_init(pb_devtime *d, const pb_dev_api *api)
{
    d->api = *api;
    d->anchor_period_ns = 1000000000;
    atomic_store(&d->head, 0);
    atomic_store(&d->tail, 0);
    atomic_store(&d->dropped, 0);
    d->depth = d->stack_overflow = d->have_step = d->failed = 0;
    d->syncs = 0;
    d->sync_wait_ns = 0;
    d->why[0] = '\0';
    pb_timeline_reset(&d->timeline);
}

static int drop(pb_devtime *d)
{
    atomic_fetch_add_explicit(&d->dropped, 1, memory_order_relaxed);
    return -1;
}

int pb_devtime_mark(pb_devtime *d, pb_dev_mark *m, int64_t now_ns)
{
    if (d->failed) return drop(d);
    void *ctx = NULL;
    if (d->api.ctx_get_current(&ctx) != 0 || !ctx) return drop(d); /* no CUDA context on this thread */
    if (!d->ctx) {
        int dev = 0;
        if (d->api.ctx_get_device(&dev) != 0) return drop(d);
        d->device = dev;
        d->ctx = ctx;
    } else if (ctx != d->ctx) {
        return drop(d); /* another device's context: only the first device is timed */
    }
    uint64_t h = atomic_load_explicit(&d->head, memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&d->tail, memory_order_acquire);
    if (h - t >= PB_DEV_QUEUE) return drop(d);
    pb_dev_mark *slot = &d->marks[h % PB_DEV_QUEUE];
    void *ev = slot->event;
    if (!ev && d->api.event_create(&ev, CU_EVENT_DEFAULT) != 0) return drop(d);
    slot->event = ev;
    if (d->api.event_record(ev, d->stream) != 0) return drop(d);
    m->event = ev;
    m->host_ns = now_ns;
    *slot = *m;
    atomic_store_explicit(&d->head, h + 1, memory_order_release);
    return 0;
}

/* ---------------------------------------------------------------- the reader */

/* Records and waits for a fresh anchor on the reader's stream. 0, or -1 (device timing stops). */
static int refresh_anchor(pb_devtime *d, int64_t (*clock_ns)(void))
{
    if (!d->anchor_stream && d->api.stream_create(&d->anchor_stream, CU_STREAM_NON_BLOCKING) != 0) {
        snprintf(d->why, sizeof d->why, "cuStreamCreate failed on the reader thread");
        return -1;
    }
    pb_dev_anchor *a = &d->anchors[d->anchor_next];
    if (!a->event && d->api.event_create(&a->event, CU_EVENT_DEFAULT) != 0) {
        snprintf(d->why, sizeof d->why, "cuEventCreate failed on the reader thread");
        return -1;
    }
    int64_t t0 = clock_ns();
    if (d->api.event_record(a->event, d->anchor_stream) != 0) {
        a->valid = 0;
        return -1;
    }
    int64_t t1 = clock_ns();
    if (d->api.event_synchronize(a->event) != 0) {
        a->valid = 0;
        return -1;
    }
    int64_t t2 = clock_ns();
    /* The event ran after the record call began and before the wait returned; on an idle stream
     * of its own it runs as soon as it is submitted, so the end of the record call is the best
     * single guess, and the whole bracket is the error. */
    a->host_ns = t1;
    a->error_ns = t2 - t0;
    a->valid = 1;
    d->anchor_next = (d->anchor_next + 1) % PB_DEV_ANCHORS;
    return 0;
}

static const pb_dev_anchor *newest_anchor(const pb_devtime *d)
{
    const pb_dev_anchor *best = NULL;
    for (int i = 0; i < PB_DEV_ANCHORS; i++)
        if (d->anchors[i].valid && (!best || d->anchors[i].host_ns > best->host_ns)) best = &d->anchors[i];
    return best;
}

/* The anchor for a mark recorded at host_ns: the newest one recorded before it (a positive
 * elapsed time, recorded on the device before the mark), else the oldest. */
static const pb_dev_anchor *anchor_for(const pb_devtime *d, int64_t host_ns)
{
    const pb_dev_anchor *before = NULL, *oldest = NULL;
    for (int i = 0; i < PB_DEV_ANCHORS; i++) {
        const pb_dev_anchor *a = &d->anchors[i];
        if (!a->valid) continue;
        if (a->host_ns <= host_ns && (!before || a->host_ns > before->host_ns)) before = a;
        if (!oldest || a->host_ns < oldest->host_ns) oldest = a;
    }
    return before ? before : oldest;
}

static void end_step(pb_devtime *d, const pb_dev_mark *m, int64_t dev_ns, int64_t anchor_error, const pb_dev_sink *sink)
{
    if (d->have_step && dev_ns >= d->step_start_ns && sink && sink->step) {
        pb_dev_step row;
        memset(&row, 0, sizeof row);
        row.step = d->step;
        row.start_ns = d->step_start_ns;
        row.end_ns = dev_ns;
        row.host_start_ns = d->step_host_start_ns;
        row.host_end_ns = m->host_ns;
        pb_timeline_attribute(&d->timeline, d->step_start_ns, dev_ns, row.share);
        row.sync_wait_ns = d->sync_wait_ns;
        row.syncs = d->syncs;
        row.device = d->device;
        row.dropped = atomic_load_explicit(&d->dropped, memory_order_relaxed);
        row.anchor_error_ns = anchor_error;
        sink->step(&row, sink->ctx);
    }
    pb_timeline_reset(&d->timeline);
    d->have_step = 1;
    d->step = m->step + 1;
    d->step_start_ns = dev_ns;
    d->step_host_start_ns = m->host_ns;
    d->sync_wait_ns = 0;
    d->syncs = 0;
}

static void end_span(pb_devtime *d, const pb_dev_mark *m, int64_t dev_ns, const pb_dev_sink *sink)
{
    if (d->stack_overflow) {
        d->stack_overflow--;
        return;
    }
    /* the span this END closes: normally the top; deeper when a begin lost its end (an exception
     * between them), and then the ones above it are dropped */
    int k = d->depth - 1;
    while (k >= 0 && !(d->stack[k].mark.activity == m->activity && d->stack[k].mark.seq == m->seq &&
                       d->stack[k].mark.name == m->name))
        k--;
    if (k < 0) return; /* its begin was dropped */
    d->depth = k;
    int64_t begin = d->stack[k].begin_ns, total = dev_ns - begin;
    if (total < 0) total = 0;
    const pb_dev_mark *b = &d->stack[k].mark;
    if (b->activity >= 0) pb_timeline_add(&d->timeline, (pb_activity)b->activity, begin, dev_ns);
    if (b->name && sink && sink->module) {
        pb_dev_module row;
        memset(&row, 0, sizeof row);
        row.step = b->step;
        row.start_ns = begin;
        row.total_ns = total;
        row.self_ns = total - d->stack[k].child_ns;
        if (row.self_ns < 0) row.self_ns = 0;
        row.name = b->name;
        row.type = b->type;
        row.seq = b->seq;
        row.stage = b->stage;
        row.depth = b->depth;
        sink->module(&row, sink->ctx);
    }
    if (k > 0) d->stack[k - 1].child_ns += total;
}

static void resolved(pb_devtime *d, const pb_dev_mark *m, int64_t dev_ns, int64_t anchor_error, const pb_dev_sink *sink)
{
    switch (m->kind) {
    case PB_DEV_BEGIN:
        if (d->depth >= PB_DEV_STACK) {
            d->stack_overflow++;
            break;
        }
        d->stack[d->depth].begin_ns = dev_ns;
        d->stack[d->depth].child_ns = 0;
        d->stack[d->depth].mark = *m;
        d->depth++;
        break;
    case PB_DEV_END:
        end_span(d, m, dev_ns, sink);
        break;
    case PB_DEV_STEP:
        end_step(d, m, dev_ns, anchor_error, sink);
        break;
    case PB_DEV_SYNC:
        if (dev_ns > m->host_ns) d->sync_wait_ns += dev_ns - m->host_ns;
        d->syncs++;
        break;
    }
}

int pb_devtime_poll(pb_devtime *d, const pb_dev_sink *sink, int64_t (*clock_ns)(void))
{
    if (d->failed) return 0;
    uint64_t t = atomic_load_explicit(&d->tail, memory_order_relaxed);
    uint64_t h = atomic_load_explicit(&d->head, memory_order_acquire);
    if (t == h) return 0;
    const pb_dev_anchor *newest = newest_anchor(d);
    if (!newest || clock_ns() - newest->host_ns > d->anchor_period_ns) {
        if (refresh_anchor(d, clock_ns) != 0 && !newest_anchor(d)) {
            if (!d->why[0]) snprintf(d->why, sizeof d->why, "the anchor event could not be recorded");
            d->failed = 1;
            return 0;
        }
    }
    int n = 0;
    for (; t != h; t++) {
        pb_dev_mark *m = &d->marks[t % PB_DEV_QUEUE];
        int q = d->api.event_query(m->event);
        if (q == PB_DEV_NOT_READY) break; /* marks complete in order on one stream */
        const pb_dev_anchor *a = q == 0 ? anchor_for(d, m->host_ns) : NULL;
        float ms = 0;
        if (!a || d->api.event_elapsed(&ms, a->event, m->event) != 0) {
            atomic_fetch_add_explicit(&d->dropped, 1, memory_order_relaxed);
            /* an END or STEP lost: the stack and the step pair up again at the next ones */
            continue;
        }
        int64_t dev_ns = a->host_ns + (int64_t)((double)ms * 1e6);
        resolved(d, m, dev_ns, a->error_ns, sink);
        n++;
    }
    atomic_store_explicit(&d->tail, t, memory_order_release);
    return n;
}

void pb_devtime_release(pb_devtime *d)
{
    for (int i = 0; i < PB_DEV_QUEUE; i++)
        if (d->marks[i].event) {
            d->api.event_destroy(d->marks[i].event);
            d->marks[i].event = NULL;
        }
    for (int i = 0; i < PB_DEV_ANCHORS; i++)
        if (d->anchors[i].event) {
            d->api.event_destroy(d->anchors[i].event);
            d->anchors[i].event = NULL;
            d->anchors[i].valid = 0;
        }
    if (d->anchor_stream) d->api.stream_destroy(d->anchor_stream);
    d->anchor_stream = NULL;
}
