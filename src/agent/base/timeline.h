/*
 * timeline.h - a step as a timeline: every instant of a step's wall time goes to exactly one
 * activity, the innermost one running on the training thread, from the intervals the recorders
 * saw (a root module's forward, a backward pass, optimizer.step(), a collective, a DataLoader
 * wait, ...).
 *
 * Frameworks nest these: Lightning runs forward and backward inside optimizer.step(closure),
 * FSDP2 runs its all-gathers inside module forward and backward, activation checkpointing runs a
 * forward inside backward. Summing the phases counts such time twice (shares of 118 % or 143 %).
 * Here recorders only add closed intervals [start, end) with what ran; pb_timeline_attribute()
 * then cuts the step at every start and end and gives each piece to the interval covering it
 * that started last (for nested intervals, the innermost; for intervals that start together,
 * the shorter). Time no interval covers is PB_ACT_HOST. The shares add up to the wall time
 * exactly, whatever the nesting or overlap, and intervals may arrive in any order (a backward
 * pass is added when it ends, after the collectives inside it).
 *
 * One timeline per clock: the host clock (pb_now_ns(), the training thread), and the device's
 * (base/devtime.h: CUDA events placed on the host clock), each attributed the same way by the
 * thread that owns it.
 *
 * Plain C, no Python: tests/unit/test_timeline.c drives it directly.
 */
#ifndef PB_AGENT_TIMELINE_H
#define PB_AGENT_TIMELINE_H

#include <stdint.h>

/* What an instant of a step is spent on. PB_ACT_HOST is also what an interval of host work
 * inside another activity is marked as (the closure's own code inside optimizer.step()). */
typedef enum pb_activity {
    PB_ACT_HOST = 0,   /* nothing below: Python and host work of the training loop */
    PB_ACT_DATA_WAIT,  /* blocked in DataLoader next() */
    PB_ACT_FORWARD,    /* a root module call */
    PB_ACT_BACKWARD,   /* a backward pass */
    PB_ACT_OPTIMIZER,  /* optimizer.step() */
    PB_ACT_COLLECTIVE, /* a collective operation (torch.distributed) */
    PB_ACT_GRAD_SYNC,  /* autograd's final callbacks after a backward pass (DDP's all-reduces) */
    PB_ACT_COUNT
} pb_activity;

/* The clocks a step can be seen on. */
typedef enum pb_clock {
    PB_CLOCK_HOST = 0, /* the training thread's wall clock (pb_now_ns()) */
    PB_CLOCK_DEVICE,   /* the device's: when it ran the work each phase queued (devtime.h) */
    PB_CLOCK_COUNT
} pb_clock;

#define PB_TIMELINE_MAX 4096 /* intervals kept per step; later ones are counted in `dropped` */

typedef struct pb_interval {
    int64_t start_ns, end_ns;
    uint32_t order; /* order of addition, the last tie-break */
    uint8_t activity;
} pb_interval;

typedef struct pb_timeline {
    pb_interval intervals[PB_TIMELINE_MAX];
    int count;
    uint32_t added;
    int64_t dropped; /* intervals not kept because the step had PB_TIMELINE_MAX already: their
                      * time goes to whatever covers it otherwise */
    int active[PB_TIMELINE_MAX]; /* pb_timeline_attribute's scratch: the intervals covering a point */
    uint64_t resets; /* pb_timeline_reset calls: a reader keeping an index into intervals
                      * compares it to know the index is stale */
} pb_timeline;

/* Forgets every interval. */
void pb_timeline_reset(pb_timeline *tl);

/* Adds an interval of `activity` from start_ns to end_ns (end before start: nothing). Returns 0,
 * or -1 when the timeline is full (counted in dropped). */
int pb_timeline_add(pb_timeline *tl, pb_activity activity, int64_t start_ns, int64_t end_ns);

/* Attributes [from_ns, to_ns) to activities, each instant to the innermost interval covering it
 * (latest start, then earliest end, then the one added last), instants covered by none to
 * PB_ACT_HOST; writes the nanoseconds of each into out[PB_ACT_COUNT]. The values add up to
 * to_ns - from_ns exactly. Intervals are clipped to the range. Sorts tl's intervals in place. */
void pb_timeline_attribute(pb_timeline *tl, int64_t from_ns, int64_t to_ns, int64_t out[PB_ACT_COUNT]);

/* The phase of python.steps (common/phases.h) an activity's time is counted in: PB_ACT_HOST's
 * in PB_PHASE_OTHER; -1 for a value that is no activity. */
int pb_activity_phase(pb_activity activity);

/* Name of an activity: its phase's python.steps column ("forward", "collectives", ...), but
 * "host" for PB_ACT_HOST (whose time python.steps calls other); "?" for no activity. */
const char *pb_activity_name(pb_activity activity);

#endif
