/*
 * autograd.h - module backward times from probes on autograd nodes: python.torch_trace's
 * 'backward' rows and python.steps' backward and grad_sync times.
 *
 * The forward hooks (torch_hooks.c) tell this unit what each module execution made: the node its
 * output came from and the node its input had (pb_autograd_frame_output). A probe, registered
 * once per node as a grad_fn pre-hook, then sees the backward pass reach those nodes; the
 * engine's final callback closes the pass. See autograd.c for the method. This unit never calls
 * the forward hooks: it calls down to frames.h, step.h and the collectors. [GIL held]
 */
#ifndef PB_AGENT_AUTOGRAD_H
#define PB_AGENT_AUTOGRAD_H

#include <Python.h>
#include <stdint.h>

#include "autograd_api.h"
#include "frames.h"

/* The extension probing._autograd, or NULL (Python-level probes); set by pb_autograd_load_ext. */
extern const pb_autograd_api *pb_autograd_ext PB_STEP_HIDDEN;

/* Loads probing._autograd when backward is recorded, PROBING_AUTOGRAD_EXT is not 0 and the
 * extension is there for this very torch; otherwise the probes are Python-level. At install. */
void pb_autograd_load_ext(int record_backward);

/* A backward pass is running (Python probes: a probe ran; extension: a node event came). */
int pb_autograd_in_pass(void);

/* Lets go of what the forward hooks' grad_fn lookup returned (a new reference, or with the
 * extension a node address whose handle is held until the probes are cleared). */
static inline void pb_autograd_node_drop(PyObject **gf)
{
    if (!pb_autograd_ext) Py_XDECREF(*gf);
    *gf = NULL;
}

/* A probe ran in this backward pass and its final callback is queued. */
extern int pb_autograd_pass_active PB_STEP_HIDDEN;
/* A forward runs inside the pass (activation-checkpoint recompute): its time is forward's. */
extern int pb_autograd_paused PB_STEP_HIDDEN;

/* Interns the names it calls and makes its callables and the probe type; once, at start-up.
 * Returns 0, or -1 with a Python exception set. */
int pb_autograd_ready_types(void);

/* Keeps torch's Variable._execution_engine.queue_callback (a new reference, or NULL: then no
 * pass is ever closed and input modules' backward spans stay open). */
void pb_autograd_set_queue_callback(PyObject *queue_callback);

/* Takes the C fast path for grad_fn.register_prehook of our probes (autograd_register.c), and
 * puts torch's own back. */
void pb_autograd_install_fast_register(void);
void pb_autograd_remove_fast_register(void);

/* o is one of autograd.c's Python-level probes. */
int pb_autograd_is_probe(PyObject *o);

/* A root forward begins while a pass is active (pb_autograd_pass_active): the time until
 * pb_autograd_resume() is forward time, not backward. */
void pb_autograd_pause(void);

/* The root forward that paused the pass returned. */
void pb_autograd_resume(void);

/* A detail frame with autograd on begins: it gets its backward span, nested in up's (up: the
 * enclosing frame, or NULL at the root). */
void pb_autograd_frame_begin(pb_frame *f, pb_frame *up);

/* The frame's execution made a graph whose output node is out_gf (borrowed): its span starts
 * there and ends at f->in_grad_fn (or at the end of the pass). */
void pb_autograd_frame_output(pb_frame *f, PyObject *out_gf, uint64_t out_handle, uint16_t depth);

/* A root module call of a summary step returned a tensor whose grad_fn is gf (borrowed): a probe
 * on it times the backward pass that will run through it. */
void pb_autograd_probe_root(PyObject *gf, uint64_t handle);

/* Drops a reference to a span (autograd.c owns the type). */
void pb_autograd_span_unref(struct pb_bspan *s);

/* Drops a frame's span reference (its probes keep the span while the graph lives). */
static inline void pb_autograd_frame_drop(pb_frame *f)
{
    if (f->span) pb_autograd_span_unref(f->span);
    f->span = NULL;
}

/* Drops the spans of a pass whose final callback never ran, and the probed nodes. */
void pb_autograd_abandon(void);

/* The step ends: a pass still marked active (and not paused by a forward inside it) raised or
 * never reached the engine's final callbacks: its spans are dropped. */
void pb_autograd_step_end(void);

/* Forgets everything (hooks removed): abandons the pass, clears the pause and the pending
 * grad-sync timing, lets go of queue_callback. */
void pb_autograd_reset(void);

#endif
