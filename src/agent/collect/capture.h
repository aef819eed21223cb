/*
 * capture.h - `probing <target> capture` inside the process: torch.profiler for N steps, started
 * and stopped at step boundaries on the training thread, and its results as python.torch_ops.
 *
 * The state machine (what happens when) is capture_state.c; this file is its Python side:
 *   - the step-boundary hook (torch_hooks.c end_step) calls pb_capture_boundary() while a
 *     capture is wanted, which calls probing._capture (start, mark, stop, abort), catching
 *     everything: a failed capture is reported to the client, never raised into the program;
 *   - while the profiler runs, the module-call hook opens a profiler range named
 *     "module: <qualified name>" around every module call (pb_capture_range_enter/exit), so
 *     each op's innermost module range says which module it ran under;
 *   - the thread that processes the results calls probing._agent._capture_finished(), which
 *     stores the rows (pb_capture_finished_py);
 *   - the server's capture callback (pb_capture_serve) answers the /api/capture routes.
 * See docs/tables.md (python.torch_ops) and docs/cli.md (capture).
 */
#ifndef PB_AGENT_CAPTURE_H
#define PB_AGENT_CAPTURE_H

#include <Python.h>
#include <stdint.h>

#include "registry.h"
#include "server.h"

enum { PB_OPS_FORWARD = 0, PB_OPS_BACKWARD, PB_OPS_OPTIMIZER, PB_OPS_OTHER };
enum { PB_OPS_CPU = 0, PB_OPS_CUDA };

typedef struct pb_torch_ops_row {
    int64_t step;
    double self_cpu_us, total_cpu_us;       /* NaN (NULL) on kernel rows */
    double self_device_us, total_device_us; /* NaN (NULL) when only CPU activities ran */
    int64_t self_cpu_memory, self_device_memory; /* bytes; INT64_MIN (NULL) without --memory */
    uint32_t capture;
    uint32_t calls;
    uint32_t name;         /* intern ids; 0 reads as NULL for module, input_shapes, stack */
    uint32_t module;
    uint32_t input_shapes;
    uint32_t stack;
    uint16_t rank;
    uint8_t stage;         /* PB_OPS_FORWARD.. */
    uint8_t device_type;   /* PB_OPS_CPU, PB_OPS_CUDA */
} pb_torch_ops_row;

extern pb_table pb_table_torch_ops;

/* Nonzero while module calls must open profiler ranges. [read and written with the GIL] */
extern int pb_capture_ranges;

/* Creates the ring (PROBING_CAPTURE_ROWS rows) and registers python.torch_ops; resets the
 * capture state. trace_prefix: <socket dir>/<pid>, where trace files go. Returns 0 or a negative
 * errno. [agent start, GIL held] */
int pb_capture_init(const char *trace_prefix);

/* Stops a running capture if this thread started it (else it is left to die with the process),
 * drops Python references, removes a trace file not yet fetched and frees the ring.
 * [agent stop, GIL held] */
void pb_capture_stop(void);

/* After fork(): the child does not capture. [atfork child: flags only] */
void pb_capture_forget_after_fork(void);

/* The server callback of the /api/capture routes (pb_capture_fn). [server thread] */
int pb_capture_serve(void *ctx, pb_capture_verb verb, const pb_capture_request *req, pb_buf *out);

/* Step `step` begins on this thread (pb_capture_wanted was set). [GIL held] */
void pb_capture_boundary(int64_t step);

/* A root module call begins while ranges are on: ends a cancelled capture here. [GIL held] */
void pb_capture_root_call(void);

/* A profiler range around a module call named by intern id `name`: a new handle, or NULL
 * (nothing to close). pb_capture_range_exit closes it and drops the reference. Neither leaves
 * a Python exception set. [GIL held] */
PyObject *pb_capture_range_enter(uint32_t name);
void pb_capture_range_exit(PyObject *handle);

/* probing._agent._capture_finished(capture_id, rows, error, info). [GIL held] */
PyObject *pb_capture_finished_py(PyObject *self, PyObject *args);

#endif
