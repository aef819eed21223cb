/*
 * capture_state.h - when a capture (`probing <target> capture`) starts, stops and ends.
 *
 * One capture at a time per process. The server threads ask for one, cancel it, read how it
 * goes and fetch its trace file; the training thread asks, at every step boundary while one is
 * wanted, what to do now (start the profiler, mark a boundary, stop, abort); the thread that
 * processes the results says when they are stored. This file holds that state machine behind
 * one mutex and writes the JSON answers; it knows nothing of Python (capture.c does the
 * Python side), so the unit tests drive it directly (tests/unit/test_capture.c).
 *
 *   none ──request──▶ pending ──boundary: START, started()──▶ running ──boundary: STOP──▶
 *   processing ──finished()──▶ done | failed
 *   pending ──cancel──▶ cancelled;  running ──cancel, then boundary: ABORT, aborted()──▶ cancelled
 *   any start, stop or processing error ──▶ failed
 *
 * Locking: the mutex is taken by server threads (no GIL) and by Python threads holding the GIL;
 * nothing here takes the GIL, so the order is always GIL then mutex.
 */
#ifndef PB_AGENT_CAPTURE_STATE_H
#define PB_AGENT_CAPTURE_STATE_H

#include "buf.h"
#include "server.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef enum pb_capture_phase {
    PB_CAPTURE_NONE = 0,   /* no capture asked for since the agent started */
    PB_CAPTURE_PENDING,    /* asked for; starts at the next step boundary */
    PB_CAPTURE_RUNNING,    /* torch.profiler is on */
    PB_CAPTURE_PROCESSING, /* stopped; the results are being turned into rows */
    PB_CAPTURE_DONE,
    PB_CAPTURE_FAILED,
    PB_CAPTURE_CANCELLED,
} pb_capture_phase;

/* What the training thread does at a step boundary. */
typedef enum pb_capture_action {
    PB_CAPTURE_ACT_NONE = 0,
    PB_CAPTURE_ACT_START, /* start the profiler, then pb_capture_state_started() */
    PB_CAPTURE_ACT_MARK,  /* leave a step mark in the running profile */
    PB_CAPTURE_ACT_STOP,  /* stop and hand the results over (the state is processing already);
                             pb_capture_state_stop_failed() if that fails */
    PB_CAPTURE_ACT_ABORT, /* stop and drop everything, then pb_capture_state_aborted() */
} pb_capture_action;

/* What a boundary's action needs. */
typedef struct pb_capture_job {
    uint32_t id;
    pb_capture_request options;
    int64_t first_step;   /* ACT_STOP: the first captured step */
    char trace_path[512]; /* ACT_STOP: where to write the Chrome trace; "" for none */
} pb_capture_job;

/* Nonzero while a capture is pending or running: the step-boundary hook calls
 * pb_capture_state_boundary() only then (one relaxed load per step otherwise). [any thread] */
extern _Atomic int pb_capture_wanted;

/* Forgets any capture and opens for requests. Trace files are written as
 * <trace_prefix>.capture-<id>.json (the agent's private socket directory and pid; copied).
 * [agent start] */
void pb_capture_state_reset(const char *trace_prefix);

/* Removes a trace file not yet fetched and closes for requests. [agent stop] */
void pb_capture_state_free(void);

/* ---- server threads (no GIL); each returns the HTTP status and fills out ---- */

/* A new capture of req (borrowed; checked by routes.c). current_step is the step running now;
 * torch_ready says whether torch's hooks are installed (no step boundary comes without them).
 * 202 with the status body; 409 when one is pending, running or processing; 503 when torch is
 * not ready or the agent is detaching. */
int pb_capture_state_request(const pb_capture_request *req, int64_t current_step, int torch_ready,
                             pb_buf *out);

/* 200 with {"capture", "state", ...} (docs/architecture.md). */
int pb_capture_state_status(pb_buf *out);

/* Cancels capture id (0: the current one): a pending one at once, a running one at its next
 * step boundary (or root module call) on its thread. 200 with the status after it; 409 when
 * id is not the current capture. Cancelling a capture that has ended changes nothing. */
int pb_capture_state_cancel(uint32_t id, pb_buf *out);

/* 200 with the Chrome trace of the last capture, read from its file, which is then removed
 * (a trace is sent once); 404 when there is none; 409 while the capture has not ended. */
int pb_capture_state_trace(pb_buf *out);

/* Before a detach: 409 (and nothing changes) while a capture is pending or running, else 200
 * and further requests get 503. pb_capture_state_reopen() undoes it (a detach that failed). */
int pb_capture_state_close(pb_buf *out);
void pb_capture_state_reopen(void);

/* ---- the training thread (GIL held) ---- */

/* Step `step` begins on thread `thread`. Says what to do and fills *job for it. A running
 * capture only acts on the thread that started it (torch.profiler is stopped where it started). */
pb_capture_action pb_capture_state_boundary(int64_t step, unsigned long thread, pb_capture_job *job);

/* A root module call (depth 0) begins on thread: ACT_ABORT when the running capture was
 * cancelled and this is its thread, else ACT_NONE. Lets a cancelled capture end in a process
 * that stopped training but still runs its model. */
pb_capture_action pb_capture_state_root_call(unsigned long thread);

/* ACT_START done: error NULL (device: "cuda", or NULL for CPU only) or the reason it failed.
 * Returns 1 when the capture now runs; 0 when it was cancelled meanwhile (or failed): then a
 * profiler that did start must be stopped and dropped. */
int pb_capture_state_started(uint32_t id, int64_t first_step, unsigned long thread,
                             const char *device, const char *error);
/* ACT_STOP failed: the profiler could not be stopped or its results handed over (error). */
void pb_capture_state_stop_failed(uint32_t id, const char *error);
/* ACT_ABORT done. */
void pb_capture_state_aborted(uint32_t id);

/* ---- the thread that processed the results (any thread) ---- */

/* Capture id's rows are stored (error NULL) or could not be made; trace_error (or NULL) says
 * why its trace file could not be written. A call for a capture that is not the one processing
 * (the agent restarted meanwhile) is ignored. */
void pb_capture_state_finished(uint32_t id, uint64_t rows, uint64_t events, double processing_s,
                               const char *error, const char *trace_error);

/* The current phase, id and (when running) the profiler's thread; id and thread may be NULL.
 * [any thread] */
pb_capture_phase pb_capture_state_phase(uint32_t *id, unsigned long *thread);

#endif
