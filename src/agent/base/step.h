/*
 * step.h - the training step every recorder stamps its rows with: the recording switch, the step
 * number, when it started, the order of executions in it, the rank, and what collectors add to
 * the step's python.steps row.
 *
 * This unit sits below everything that records (hot path, collectors, capture, services): they
 * read the step here instead of asking the hooks that drive it. Only the step boundary
 * (hot/torch_hooks.c) advances it. A collector that sees a step end which the hooks cannot see
 * (GradScaler skipped optimizer.step()) ends it through pb_step_end_now(), which runs the
 * boundary the hooks registered at install: the way Redis' event loop takes a before-sleep
 * procedure (aeSetBeforeSleepProc) instead of calling up into the server. The variables are plain globals, hidden inside the extension,
 * so reading one on the hot path costs the same one load as a file-static did.
 */
#ifndef PB_AGENT_STEP_H
#define PB_AGENT_STEP_H

#include <stdatomic.h>
#include <stdint.h>

#include "timeline.h"

#define PB_STEP_HIDDEN __attribute__((visibility("hidden")))

/* Recording on (hooks installed and not detached). Written at install, remove, disable.
 * [any thread, relaxed reads] */
extern _Atomic int pb_step_enabled PB_STEP_HIDDEN;

/* The current step number; advanced at each step boundary. [written GIL held; any thread reads] */
extern _Atomic int64_t pb_step_number PB_STEP_HIDDEN;

/* Start of the current step (pb_now_ns() clock). [GIL held] */
extern int64_t pb_step_start_ns PB_STEP_HIDDEN;

/* Order of start within the step of the next torch_trace row; reset at each boundary. [GIL held] */
extern uint32_t pb_step_seq PB_STEP_HIDDEN;

/* The torch hooks are installed (set at the end of install, cleared at remove). [any thread,
 * racy read] */
extern int pb_step_installed PB_STEP_HIDDEN;

/* The distributed rank the rows carry (RANK, 0 when unset); set at install. [any thread] */
extern uint16_t pb_step_rank_id PB_STEP_HIDDEN;

/* The collectives' nanoseconds since the process started, never reset: a frame or a backward
 * span reads it at its start and end to leave out the collectives nested in it. [GIL held] */
extern int64_t pb_step_collectives_total_ns PB_STEP_HIDDEN;

/* The current step's intervals on the host clock (timeline.h): the recorders add what they saw
 * run on the training thread, the step's end attributes its wall time from them (python.steps)
 * and resets it. [GIL held] */
extern pb_timeline pb_step_timeline PB_STEP_HIDDEN;

/* Adds an interval of `activity` to the current step's timeline. [GIL held] */
static inline void pb_step_interval(pb_activity activity, int64_t start_ns, int64_t end_ns)
{
    pb_timeline_add(&pb_step_timeline, activity, start_ns, end_ns);
}

/* The current step number. [any thread, racy read] */
static inline int64_t pb_step_current(void)
{
    return atomic_load_explicit(&pb_step_number, memory_order_relaxed);
}

/* Start of the current step (pb_now_ns() clock). [GIL held] */
static inline int64_t pb_step_start(void) { return pb_step_start_ns; }

/* The distributed rank the rows carry. [any thread] */
static inline uint16_t pb_step_rank(void) { return pb_step_rank_id; }

/* Whether recording is on. [any thread, racy read] */
static inline int pb_step_recording(void)
{
    return atomic_load_explicit(&pb_step_enabled, memory_order_relaxed);
}

/* Whether the hooks are installed and recording (step boundaries will be seen).
 * [any thread, racy read] */
static inline int pb_step_active(void) { return pb_step_installed && pb_step_recording(); }

/* What ends the current step now: the hooks' step boundary. NULL (before install, after
 * remove): pb_step_end_now() does nothing. [GIL held] */
typedef void (*pb_step_boundary_fn)(void);
void pb_step_set_boundary(pb_step_boundary_fn fn);

/* Ends the current step now, as optimizer.step() would. [GIL held] */
void pb_step_end_now(void);

#endif
