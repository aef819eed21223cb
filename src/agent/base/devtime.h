/*
 * devtime.h - device time: when the accelerator ran a step's phases and modules, not when the
 * host queued them.
 *
 * On CUDA the host only enqueues work; a module's host "forward" is its launch time. Here the
 * hooks that already see each boundary (a root forward, backward, optimizer.step(), a collective,
 * grad sync, a detail step's module, a host-device synchronisation, the step's end) record a CUDA
 * event on the step's stream: a mark. An event completes when everything queued before it on
 * that stream has run, so a mark's device time is when the device got through the work queued
 * before the boundary. Between a begin and an end mark lies the device's time for the work
 * queued in between.
 *
 * Mechanism (docs/tables.md, "Device time"):
 *   - events from a pool created once, lazily, one per slot of a bounded queue; recorded from C
 *     at the boundaries, never a synchronize on the training thread; a full queue drops the mark
 *     and counts it;
 *   - a reader thread (collect/device.c) makes the training thread's context its own (never a
 *     call on a thread that has not set the device, pytorch#122731) and resolves the marks in
 *     order with a non-blocking cuEventQuery;
 *   - each event's time comes from cuEventElapsedTime against an anchor event that the reader
 *     records on a stream of its own and synchronises (on the reader thread) about once a
 *     second, with the host clock read around it: every device time is then on the host clock
 *     (pb_now_ns()), so device and host intervals compare directly; the anchor's uncertainty is
 *     kept with it;
 *   - resolved marks are paired into spans (a stack: marks nest as the calls did) and go to a
 *     device timeline per step (timeline.h, PB_CLOCK_DEVICE), attributed as the host's is, and to
 *     module rows.
 *
 * The CUDA driver API is opened with dlopen (libcuda.so.1, only if the process already loaded it)
 * and called through pb_dev_api, so nothing links against CUDA and a test can substitute a
 * simulated runtime (tests/unit/test_devtime.c).
 *
 * Plain C, no Python.
 */
#ifndef PB_AGENT_DEVTIME_H
#define PB_AGENT_DEVTIME_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "timeline.h"

/* The CUDA driver calls used, as function pointers (CUresult: 0 success, 600 not ready). */
typedef struct pb_dev_api {
    int (*ctx_get_current)(void **ctx);
    int (*ctx_set_current)(void *ctx);
    int (*ctx_get_device)(int *device);
    int (*event_create)(void **event, unsigned flags);
    int (*event_destroy)(void *event);
    int (*event_record)(void *event, void *stream);
    int (*event_query)(void *event);
    int (*event_synchronize)(void *event);
    int (*event_elapsed)(float *ms, void *start, void *end);
    int (*stream_create)(void **stream, unsigned flags);
    int (*stream_destroy)(void *stream);
} pb_dev_api;

#define PB_DEV_NOT_READY 600 /* CUDA_ERROR_NOT_READY */

/* Loads the driver API from the already-loaded libcuda.so.1 (RTLD_NOLOAD: never loads CUDA into a
 * process that did not). Returns 0, or -1 with the reason in why. */
int pb_dev_api_load(pb_dev_api *api, char *why, size_t whylen);

/* What a mark stands for. */
typedef enum pb_dev_mark_kind {
    PB_DEV_BEGIN = 0, /* a span starts: a phase (activity) and/or a module (name != 0) */
    PB_DEV_END,       /* the span begun last ends */
    PB_DEV_STEP,      /* a step boundary: ends step `step` and begins the next */
    PB_DEV_SYNC,      /* the host is about to wait for the device (.item(), synchronize) */
} pb_dev_mark_kind;

typedef struct pb_dev_mark {
    void *event;       /* the slot's event */
    int64_t host_ns;   /* pb_now_ns() when recorded */
    int64_t step;      /* the step it was recorded in */
    uint32_t name, type, seq; /* a module span's: interned name and class, order in step */
    uint8_t kind;      /* pb_dev_mark_kind */
    int8_t activity;   /* pb_activity of a phase span, -1 for a module-only span */
    uint8_t stage;     /* a module span's stage (torch_trace's) */
    uint8_t depth;     /* a module span's depth */
} pb_dev_mark;

/* A step as the device saw it; every *_ns is device time on the host clock. */
typedef struct pb_dev_step {
    int64_t step;
    int64_t start_ns, end_ns;   /* device times of the step's two boundary marks */
    int64_t host_start_ns;      /* when the host recorded the opening mark (its step began) */
    int64_t host_end_ns;        /* when the host recorded the closing mark */
    int64_t share[PB_ACT_COUNT]; /* the device span attributed to activities (add up to span) */
    int64_t sync_wait_ns;       /* sum over the step's syncs of how far the device ran behind */
    int32_t syncs;              /* syncs timed */
    int32_t device;
    int64_t dropped;            /* marks dropped so far (queue full, event errors), cumulative */
    int64_t anchor_error_ns;    /* uncertainty of the anchor used for the closing mark */
} pb_dev_step;

/* A module span on a detail step. */
typedef struct pb_dev_module {
    int64_t step;
    int64_t start_ns, total_ns, self_ns; /* self: total less the spans nested in it */
    uint32_t name, type, seq;
    uint8_t stage, depth;
} pb_dev_module;

typedef struct pb_dev_sink {
    void (*step)(const pb_dev_step *row, void *ctx);
    void (*module)(const pb_dev_module *row, void *ctx);
    void *ctx;
} pb_dev_sink;

#define PB_DEV_QUEUE 8192 /* marks in flight (events in the pool) */
#define PB_DEV_STACK 128  /* span nesting kept */
#define PB_DEV_ANCHORS 4

typedef struct pb_dev_anchor {
    void *event;
    int64_t host_ns, error_ns;
    int valid;
} pb_dev_anchor;

/* The whole state: one per process (collect/device.c), or one per test. Zero-initialise, then
 * pb_devtime_init. */
typedef struct pb_devtime {
    pb_dev_api api;
    void *ctx;     /* the training thread's context, taken at the first mark */
    int device;
    void *stream;  /* the stream marks are recorded on (NULL: the legacy default stream) */
    /* the queue: the producer (GIL held) writes at head, the reader resolves at tail */
    pb_dev_mark marks[PB_DEV_QUEUE];
    _Atomic uint64_t head, tail;
    _Atomic int64_t dropped;
    /* the reader's */
    void *anchor_stream;
    pb_dev_anchor anchors[PB_DEV_ANCHORS];
    int anchor_next;
    int64_t anchor_period_ns;
    struct {
        int64_t begin_ns, child_ns;
        pb_dev_mark mark;
    } stack[PB_DEV_STACK];
    int depth, stack_overflow;
    int have_step;
    int64_t step, step_start_ns, step_host_start_ns, sync_wait_ns;
    int32_t syncs;
    pb_timeline timeline;
    int failed; /* a driver call failed in a way that stops device timing; reason in why */
    char why[160];
} pb_devtime;

/* Prepares d with `api`. */
void pb_devtime_init(pb_devtime *d, const pb_dev_api *api);

/* Records a mark on d's stream (producer side). Fields of m other than event and host_ns are the
 * caller's. Returns 0, or -1 when it was dropped (counted). [one producer at a time: GIL held] */
int pb_devtime_mark(pb_devtime *d, pb_dev_mark *m, int64_t now_ns);

/* Resolves the marks whose events have completed, in order, and hands spans and steps to sink.
 * `now_ns` is the host clock (the anchor is refreshed when older than anchor_period_ns).
 * Returns the number of marks resolved. [the reader thread, which has made d->ctx current] */
int pb_devtime_poll(pb_devtime *d, const pb_dev_sink *sink, int64_t (*clock_ns)(void));

/* Frees the events and the reader's stream (the reader thread, context current). */
void pb_devtime_release(pb_devtime *d);

#endif
