/*
 * device.h - python.device_steps and python.device_trace: the step's phases and a detail step's
 * modules as the CUDA device ran them (base/devtime.h says how they are measured).
 *
 * Off on a machine or a program without CUDA: the tables stay empty with the reason, no thread
 * starts, and the hot path pays one load of pb_device_on per boundary. On CUDA it turns on at the
 * first step boundary after the program has initialised torch.cuda (checked every 16 steps until
 * then, never initialising it), unless PROBING_DEVICE_TIME=0.
 *
 * The hooks call the mark functions at the boundaries they already see; all of them need the GIL
 * (they are serialised by it: the training thread and autograd's device threads). The reader is
 * one background thread (every PROBING_DEVICE_POLL_MS, default 10) that never takes the GIL.
 */
#ifndef PB_AGENT_DEVICE_H
#define PB_AGENT_DEVICE_H

#include <stdint.h>

#include "registry.h"
#include "timeline.h"

extern pb_table pb_table_device_steps, pb_table_device_trace;

/* Device timing is running: marks are recorded. [any thread, racy read] */
extern int pb_device_on __attribute__((visibility("hidden")));

int pb_device_tables_init(void);
void pb_device_tables_free(void);

/* A phase span begins or ends (activity: a pb_activity). [GIL held] */
void pb_device_phase(int begin, pb_activity activity);
#define PB_DEVICE_STAGE_COLLECTIVE 3 /* python.device_trace's stage for a collective call */

/* A detail step's module span (stage: PB_STAGE_*), or a collective call's (activity
 * PB_ACT_COLLECTIVE, stage PB_DEVICE_STAGE_COLLECTIVE, name the operation), begins or ends.
 * [GIL held] */
void pb_device_module(int begin, pb_activity activity, uint32_t name, uint32_t type, uint32_t seq, int stage,
                      int depth);
/* The host is about to wait for the device (.item(), .cpu(), torch.cuda.synchronize()). [GIL] */
void pb_device_sync(void);
/* Step `step` ends (the hooks' boundary): turns device timing on when CUDA is in use, reads the
 * current stream, records the boundary mark. [GIL held] */
void pb_device_step_end(int64_t step);

/* Device timing in words for info/doctor: "on (cuda:0)", or why not. */
const char *pb_device_status(void);

/* Stops the reader (the marks stop first). [GIL held or not; not the reader] */
void pb_device_stop(void);
/* Fork child: forget the thread and turn marks off. [async-signal-safe: flags only] */
void pb_device_forget_after_fork(void);

/* Inline guards for the hot path. */
static inline void pb_device_begin(pb_activity a)
{
    if (pb_device_on) pb_device_phase(1, a);
}
static inline void pb_device_end(pb_activity a)
{
    if (pb_device_on) pb_device_phase(0, a);
}

#endif
