/*
 * torch_hooks.c - the recording hot path: module executions, backward and optimizer steps, in C.
 *
 * Everything here runs with the GIL held (torch calls into it from Python), so the state
 * (pb_torch, torch_state.h) needs no lock; only the ring push (lock-free) and the copies
 * of the detail policy (pb_torch_detail) are seen by other threads.
 *
 * Module executions are seen through a C wrapper of torch.nn.Module.__call__ (default) or through
 * torch's global forward pre/post hooks (PROBING_HOOK_MODE=hooks); both feed enter()/leave().
 * Per execution the work is: one hash lookup for the module's interned name, a push onto a
 * per-thread frame stack, two clock reads, one row pushed into the ring. The names are
 * torch_names.c's, found once per model the first time a root module runs; the lookup is inline
 * (torch_state.h). `duration` is self time (frames accumulate their children's time).
 *
 * Steps: an optimizer.step() (global optimizer step hooks) ends the step; its own duration (less
 * a closure passed to it) is a 'step' row. Once an optimizer is constructed (Optimizer.__init__
 * wrapped) or stepped, only optimizer steps end steps, so gradient accumulation before the first
 * one makes no extra steps; before that (no optimizer: inference), the start of a new forward of
 * the first root module ends the step, so inference loops get one step per forward. An evaluation loop
 * after training (forwards of that module under no_grad, more of them since the last optimizer
 * step than any optimizer step had) goes back to one step per forward, until a forward with
 * autograd on or an optimizer step: see evaluation_stretch().
 *
 * Detail and summary steps (detail.h): rows are pushed only on detail steps. On the others a
 * module call costs a frame push and pop (no name lookup, no clock read below the root, no
 * grad_fn lookups), and the step's forward, backward and optimizer times still reach
 * python.steps: forward from the root module calls, backward from one probe per root output
 * (the backward pass: its first probed node to the engine's final callback).
 *
 * Backward: autograd.c (probes on autograd nodes). The callable wrapper is wrap.c, the frame
 * stacks and the row push frames.h, the step state step.h: this file calls them, never the other
 * way round. Installing and removing the hooks is torch_install.c, which calls this file; the
 * state this file shares with it and with torch_names.c is one struct, pb_torch (torch_state.h).
 */
#include "torch_hooks.h"

#include "autograd.h"
#include "capture.h"
#include "capture_state.h"
#include "clock.h"
#include "collect.h"
#include "detail.h"
#include "device.h"
#include "frames.h"
#include "generate.h"
#include "intern.h"
#include "memsample.h"
#include "serve.h"
#include "step.h"
#include "torch_names.h"
#include "torch_state.h"
#include "torch_trace.h"
#include "walk.h"
#include "wrap.h"

#include <stdatomic.h>
#include <string.h>

/* ---- this file's own state (pb_torch is torch_state.h's; all written under the GIL) ---- */

/* the running optimizer.step() (opt_pre to opt_post) */

static int64_t opt_start_ns;
static int64_t opt_closure_ns; /* time in the closure of the running optimizer.step() */
static uint32_t opt_seq;
static int opt_device;                          /* 1: optimizer phase marked on the device, 2: and its module span */
static uint32_t opt_device_name, opt_device_type; /* the optimizer's row, for its device END */

/* copies of the detail policy for other threads (pb_torch_detail) */
static _Atomic int64_t shown_period, shown_window, shown_cost_ppm = -1, shown_budget_pct_e6;
static _Atomic int shown_automatic, shown_windows_only, shown_every_step, shown_now;
static _Atomic int64_t shown_steps;
static _Atomic int64_t shown_spread_lo_ppm, shown_spread_hi_ppm, shown_rejected;

void pb_torch_show_detail(void)
{
    const pb_detail *d = &pb_torch.detail_policy;
    atomic_store_explicit(&shown_period, d->period, memory_order_relaxed);
    atomic_store_explicit(&shown_window, d->window, memory_order_relaxed);
    atomic_store_explicit(&shown_cost_ppm, d->cost < 0 ? -1 : (int64_t)(d->cost * 1e6), memory_order_relaxed);
    atomic_store_explicit(&shown_budget_pct_e6, (int64_t)(d->budget * 1e8), memory_order_relaxed);
    atomic_store_explicit(&shown_automatic, d->automatic, memory_order_relaxed);
    atomic_store_explicit(&shown_windows_only, d->windows_only, memory_order_relaxed);
    atomic_store_explicit(&shown_every_step, d->mode == PB_DETAIL_EVERY_STEP, memory_order_relaxed);
    atomic_store_explicit(&shown_steps, d->steps, memory_order_relaxed);
    atomic_store_explicit(&shown_now, pb_torch.detail, memory_order_relaxed);
    atomic_store_explicit(&shown_spread_lo_ppm, (int64_t)(d->spread_lo * 1e6), memory_order_relaxed);
    atomic_store_explicit(&shown_spread_hi_ppm, (int64_t)(d->spread_hi * 1e6), memory_order_relaxed);
    atomic_store_explicit(&shown_rejected, d->rejected, memory_order_relaxed);
}

/* The training thread's CPU time at the last step boundary, and which thread that was: the
 * step's CPU time tells the detail policy whether the step was descheduled (detail.h). */
static int64_t step_start_cpu_ns = -1;
static unsigned long step_cpu_thread;

static void end_step(int64_t now)
{
    int64_t done = atomic_load_explicit(&pb_step_number, memory_order_relaxed), wall = now - pb_step_start_ns;
    int64_t cpu_now = pb_thread_cpu_ns(), cpu = -1;
    unsigned long thread = PyThread_get_thread_ident();
    if (cpu_now >= step_start_cpu_ns && step_start_cpu_ns >= 0 && thread == step_cpu_thread)
        cpu = cpu_now - step_start_cpu_ns;
    step_start_cpu_ns = cpu_now;
    step_cpu_thread = thread;
    pb_collect_step_end(done, wall, cpu, pb_torch.detail);
    pb_device_step_end(done);
    pb_detail_step_done(&pb_torch.detail_policy, done, wall, cpu, pb_torch.detail,
                        pb_torch.detail_measured && !pb_capture_ranges);
    atomic_fetch_add_explicit(&pb_step_number, 1, memory_order_relaxed);
    pb_step_start_ns = now;
    pb_step_seq = 0;
    pb_torch.primary_ran = 0;
    pb_memsample_reset_peak();
    /* No backward pass is running at a step boundary (the optimizer steps after backward
     * returned; a recomputing forward inside backward does not end steps once an optimizer was
     * seen), so one still marked active raised or never reached the engine's final callbacks:
     * its spans are dropped. Graphs built and never run backward are let go either way. */
    pb_autograd_step_end();
    if (atomic_load_explicit(&pb_capture_wanted, memory_order_relaxed))
        pb_capture_boundary(atomic_load_explicit(&pb_step_number, memory_order_relaxed));
    pb_torch.detail = pb_detail_on(&pb_torch.detail_policy, atomic_load_explicit(&pb_step_number, memory_order_relaxed)) ||
                      pb_capture_ranges;
    pb_torch.detail_measured = !pb_capture_ranges;
    pb_torch_show_detail();
}

typedef struct node_found {
    PyObject *gf;    /* new reference, or with the extension the node's address */
    uint64_t handle; /* the extension's handle */
} node_found;

/* A visit of pb_walk_tensors: stops at a tensor with a grad_fn, kept in *ctx (a node_found). */
static int grad_fn_visit(PyObject *t, void *ctx)
{
    node_found *found = ctx;
    if (pb_autograd_ext) { /* no grad_fn object: the node read from the tensor (autograd_api.h) */
        const void *id;
        found->handle = pb_autograd_ext->node_of(t, &id);
        found->gf = (PyObject *)id;
        return id != NULL;
    }
    PyObject *gf = PyObject_GetAttr(t, pb_torch.str_grad_fn);
    if (!gf) {
        PyErr_Clear();
        return 0;
    }
    if (gf == Py_None) {
        Py_DECREF(gf);
        return 0;
    }
    found->gf = gf;
    return 1;
}

/* First grad_fn among a hook argument's tensors (a tensor, or a tuple/list/dict of them; walk.h).
 * Returns a new reference or NULL; with the extension, the node's address (never dereferenced)
 * and its handle in *handle. Released with pb_autograd_node_drop. [GIL held] */
static PyObject *first_grad_fn(PyObject *o, int depth, uint64_t *handle)
{
    node_found found = {NULL, 0};
    pb_walk_tensors(o, pb_torch.tensor_type, depth, grad_fn_visit, &found);
    *handle = found.handle;
    return found.gf;
}

/* ---- the hooks ---- */

/* Whether autograd records right now (no backward to time under no_grad/inference_mode): one
 * C call, cheaper than looking for grad_fn on every input and output. */
static inline int grad_enabled(void)
{
    if (pb_autograd_ext) return pb_autograd_ext->grad_enabled();
    if (!pb_torch.is_grad_enabled) return 1;
    PyObject *r = PyObject_CallNoArgs(pb_torch.is_grad_enabled);
    if (!r) {
        PyErr_Clear();
        return 1;
    }
    int on = r == Py_True;
    Py_DECREF(r);
    return on;
}

/* A forward of the model (primary_root) begins in a training job (an optimizer step was seen):
 * does an evaluation stretch begin or end here?
 * Training steps end at optimizer.step(), however many forwards they run (gradient
 * accumulation, a target computed under no_grad); an evaluation loop after training has no
 * optimizer step, and one step would take all of its forwards. So: a forward under no_grad (or
 * inference_mode), after the model already ran in this step, when more no_grad forwards have run
 * since the last optimizer step than any optimizer step had (measured over the optimizer steps
 * after the first, whose stretch began with the agent in forward-only mode) and more than
 * PB_EVAL_STRETCH_MIN, starts an evaluation stretch (a shorter evaluation pass inside the
 * training loop stays in its training step, so step numbers keep counting iterations and the
 * report sees that step as a periodic slow step): steps end at each forward again, as before the first optimizer step (the
 * caller ends this one). The next forward with autograd on, or an optimizer step, ends the
 * stretch. One is_grad_enabled() call per forward of the model. [GIL held] */
#define PB_EVAL_STRETCH_MIN 512 /* no_grad forwards: a shorter pass stays in its training step */
static void evaluation_stretch(void)
{
    int grad = grad_enabled();
    if (pb_torch.evaluating) {
        if (!grad) return;
        pb_torch.evaluating = 0; /* training again: this forward opens a training step */
        if (pb_torch.primary_ran) end_step(pb_now_ns());
        pb_torch.training_latched = 1;
        return;
    }
    if (grad) return;
    int64_t threshold = pb_torch.nograd_per_optimizer > PB_EVAL_STRETCH_MIN ? pb_torch.nograd_per_optimizer
                                                                    : PB_EVAL_STRETCH_MIN;
    if (pb_torch.nograd_forwards++ > threshold && pb_torch.nograd_learned && pb_torch.primary_ran) {
        pb_torch.training_latched = 0;
        pb_torch.evaluating = 1;
        pb_torch.nograd_forwards = 0;
    }
}

/* An optimizer step (or a step the GradScaler skipped) ends the step. [GIL held] */
void pb_torch_optimizer_stepped(void)
{
    if (pb_torch.training_latched) { /* no_grad forwards were counted since the last optimizer step */
        if (pb_torch.nograd_forwards > pb_torch.nograd_per_optimizer) pb_torch.nograd_per_optimizer = pb_torch.nograd_forwards;
        pb_torch.nograd_learned = 1;
    }
    pb_torch.training_latched = 1;
    pb_torch.evaluating = 0;
    pb_torch.nograd_forwards = 0;
    end_step(pb_now_ns());
}

/* A module execution begins. inputs[0..n) are its arguments (positional, then keyword values).
 * [GIL held] */
static void enter(PyObject *mod, PyObject *const *inputs, Py_ssize_t n)
{
    pb_tstate *ts = pb_frames_get();
    if (!ts) return;
    if (ts->depth >= PB_FRAMES_MAX_DEPTH) {
        ts->overflow++;
        return;
    }
    if (ts->depth == 0) {
        if (pb_capture_ranges) pb_capture_root_call();
        if (pb_autograd_in_pass()) pb_autograd_pause(); /* a forward inside backward (checkpoint
                                                            * recompute): its time is forward's */
        if (!pb_torch.primary_root) pb_torch.primary_root = mod;
        /* A forward made for a request (serve.h) is the request's, never a step's: it neither
         * ends a step nor adds to one, whatever thread trains meanwhile. */
        int served = pb_serve_forward_begin();
        if (served || pb_generate_active()) { /* a decode forward is no step: the generation is (pb_torch_generate) */
        } else if (mod == pb_torch.primary_root && (pb_torch.training_latched || pb_torch.evaluating)) {
            evaluation_stretch();
        }
        if (!served && !pb_torch.training_latched && mod == pb_torch.primary_root && pb_torch.primary_ran &&
            !pb_generate_active())
            end_step(pb_now_ns());
        if (!served && mod == pb_torch.primary_root) pb_collect_forward_begin();
    }
    pb_frame *f = &ts->stack[ts->depth];
    f->module = mod;
    f->span = NULL;
    f->in_grad_fn = NULL;
    f->in_handle = 0;
    f->range = NULL;
    f->layer_capture = 0;
    f->detail = (uint8_t)(ts->depth ? ts->stack[ts->depth - 1].detail : pb_torch.detail);
    ts->depth++;
    if (ts->depth == 1) pb_device_begin(PB_ACT_FORWARD);
    if (!f->detail) { /* summary: only the root's time is needed */
        if (ts->depth == 1) f->start_ns = pb_now_ns();
        return;
    }
    pb_mod_entry fallback, *e = pb_torch_map_find(mod);
    if (!e) e = pb_torch_discover(mod, ts, &fallback);
    f->name = e->name;
    f->type = e->type;
    f->seq = pb_step_seq++;
    f->child_ns = 0;
    f->collectives_at_start = pb_step_collectives_total_ns;
    f->layer_capture = e->layer_pending;
    e->layer_pending = 0;
    if (pb_torch.record_backward && grad_enabled()) {
        for (Py_ssize_t i = 0; i < n && i < 16 && !f->in_grad_fn; i++) f->in_grad_fn = first_grad_fn(inputs[i], 1, &f->in_handle);
        pb_autograd_frame_begin(f, ts->depth > 1 ? &ts->stack[ts->depth - 2] : NULL);
    }
    f->range = pb_capture_ranges ? pb_capture_range_enter(f->name) : NULL;
    if (pb_device_on) pb_device_module(1, (pb_activity)-1, f->name, f->type, f->seq, PB_STAGE_FORWARD, ts->depth - 1);
    f->start_ns = pb_now_ns();
}

/* Ends a frame's capture range, if it has one. [GIL held] */
static inline void end_capture_range(pb_frame *f)
{
    if (f->range) {
        PyObject *handle = f->range;
        f->range = NULL;
        pb_capture_range_exit(handle);
    }
}

/* A root module call of a summary step returned `output`: a probe on its grad_fn times the
 * backward pass that will run through it. [GIL held] */
static void probe_root_output(PyObject *output)
{
    if (!pb_torch.record_backward || output == Py_None || !grad_enabled()) return;
    uint64_t handle = 0;
    PyObject *gf = first_grad_fn(output, 0, &handle);
    if (!gf) return;
    pb_autograd_probe_root(gf, handle);
    pb_autograd_node_drop(&gf);
}

/* A module execution ended with `output`, or with an exception (output NULL: no row). The
 * clock is read here, first thing once the frame is found, and only for the frames whose time is
 * kept (detail frames and root calls): a summary step's nested calls read no clock. [GIL held] */
static void leave(PyObject *mod, PyObject *output)
{
    pb_tstate *ts = pb_frames_get();
    if (!ts) return;
    if (ts->overflow) {
        ts->overflow--;
        return;
    }
    /* Normally the top frame; deeper only if an execution began without ending (hooks installed
     * in the middle of a forward, an exception that skipped a post-hook). */
    int d = ts->depth - 1;
    while (d >= 0 && ts->stack[d].module != mod) d--;
    if (d < 0) return;
    while (ts->depth - 1 > d) {
        pb_frame *skipped = &ts->stack[--ts->depth];
        end_capture_range(skipped);
        pb_autograd_node_drop(&skipped->in_grad_fn);
        pb_autograd_frame_drop(skipped);
    }
    pb_frame *f = &ts->stack[--ts->depth];
    uint16_t depth = (uint16_t)ts->depth;
    if (!f->detail && depth > 0) return; /* a summary step's nested call: nothing to record */
    int64_t now = pb_now_ns(), start = f->start_ns, total = now - start;
    if (f->detail) {
        end_capture_range(f);
        if (pb_device_on) pb_device_module(0, (pb_activity)-1, f->name, f->type, f->seq, PB_STAGE_FORWARD, depth);
        int64_t own = total - (pb_step_collectives_total_ns - f->collectives_at_start); /* without collectives */
        if (output) {
            pb_frames_push_row(start, now, own - f->child_ns, f->seq, f->name, f->type, depth, PB_STAGE_FORWARD, ts->tid);
            if (pb_torch.record_backward && output != Py_None && (f->in_grad_fn || grad_enabled())) {
                uint64_t out_handle = 0;
                PyObject *out_gf = first_grad_fn(output, 0, &out_handle);
                if (out_gf) {
                    pb_autograd_frame_output(f, out_gf, out_handle, depth);
                    pb_autograd_node_drop(&out_gf);
                }
            }
        }
        if (depth > 0) ts->stack[depth - 1].child_ns += own;
        pb_autograd_node_drop(&f->in_grad_fn);
        pb_autograd_frame_drop(f);
        if (f->layer_capture) { /* last use of f: reading the layer may run Python that enters modules */
            uint32_t name = f->name, type = f->type;
            f->layer_capture = 0;
            if (output) {
                pb_collect_layer(mod, name, type, output);
            } else { /* raised: try again at its next execution */
                pb_mod_entry *e = pb_torch_map_find(mod);
                if (e) e->layer_pending = 1;
            }
        }
    } else if (depth == 0 && output) {
        probe_root_output(output);
    }
    if (depth > 0) return;
    int served = pb_serve_forward_end(); /* a request's forward: no part of any step */
    /* a root call: its whole time is forward time on the step's timeline, less what runs
     * inside it (collectives, a nested backward), which the timeline gives to the innermost */
    if (!served) pb_step_interval(PB_ACT_FORWARD, start, now); /* not f->start_ns: the layer read
                                                                * above may have run modules that reused f */
    pb_device_end(PB_ACT_FORWARD);
    if (pb_autograd_paused) pb_autograd_resume();
    if (output && !served) pb_collect_phase(mod == pb_torch.primary_root ? PB_PHASE_AFTER_FORWARD : PB_PHASE_AFTER_LOSS);
    if (mod == pb_torch.primary_root && !served) pb_torch.primary_ran = 1;
    if (pb_generate_active()) pb_generate_forward(output, start, now);
}

/* forward pre-hook(module, args) — PROBING_HOOK_MODE=hooks */
static PyObject *fwd_pre(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (atomic_load_explicit(&pb_step_enabled, memory_order_relaxed) && nargs >= 1) enter(args[0], args + 1, nargs - 1);
    Py_RETURN_NONE;
}

/* forward hook(module, args, output), registered with always_call=True */
static PyObject *fwd_post(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (atomic_load_explicit(&pb_step_enabled, memory_order_relaxed) && nargs >= 1)
        leave(args[0], nargs >= 3 ? args[2] : Py_None);
    Py_RETURN_NONE;
}


/* ---- torch.nn.Module.__call__ replaced by a C wrapper (PROBING_HOOK_MODE=call; wrap.h) ---- */

static PyObject *modcall_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    pb_wrapper *mc = (pb_wrapper *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || !atomic_load_explicit(&pb_step_enabled, memory_order_relaxed))
        return PyObject_Vectorcall(mc->orig, args, nargsf, kwnames);
    PyObject *mod = args[0];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    enter(mod, args + 1, nargs - 1 + nkw);
    PyObject *res = PyObject_Vectorcall(mc->orig, args, nargsf, kwnames);
    if (res) {
        leave(mod, res);
    } else {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb); /* our bookkeeping must not see or disturb the user's exception */
        leave(mod, NULL);
        PyErr_Restore(et, ev, tb);
    }
    return res;
}

static pb_wrapper *installed_call;

/* Points dynamo's notion of the unpatched Module.__call__ from `from` to `to`, in the modules
 * that hold it (already imported ones; later imports read the patched attribute themselves). */
static void retarget_dynamo(PyObject *from, PyObject *to)
{
    static const char *const mods[] = {"torch._dynamo.utils", "torch._dynamo.variables.nn_module",
                                       "torch._dynamo.variables.functions", "torch._dynamo.trace_rules", NULL};
    PyObject *sysmods = PyImport_GetModuleDict(); /* borrowed */
    for (int i = 0; mods[i]; i++) {
        PyObject *m = PyDict_GetItemString(sysmods, mods[i]); /* borrowed */
        if (!m) continue;
        PyObject *cur = PyObject_GetAttrString(m, "unpatched_nn_module_call");
        if (cur == from) PyObject_SetAttrString(m, "unpatched_nn_module_call", to);
        Py_XDECREF(cur);
        PyErr_Clear();
    }
}

int pb_torch_install_call_wrapper(void)
{
    int rc = -1;
    PyObject *nn = NULL, *Module = NULL, *orig = NULL, *code = NULL;
    pb_wrapper *mc = NULL;
    nn = PyImport_ImportModule("torch.nn");
    if (!nn) goto out;
    Module = PyObject_GetAttrString(nn, "Module");
    if (!Module) goto out;
    orig = PyObject_GetAttrString(Module, "__call__");
    if (!orig) goto out;
    if (Py_TYPE(orig) == &pb_wrapper_type) { /* already wrapped (a second agent start) */
        rc = 0;
        goto out;
    }
    if (!(mc = pb_wrapper_new(orig, modcall_vectorcall, NULL))) goto out;
    code = PyObject_GetAttrString(orig, "__code__");
    if (code && PyDict_SetItemString(mc->dict, "__code__", code)) goto out;
    PyErr_Clear();
    if (PyObject_SetAttrString(Module, "__call__", (PyObject *)mc)) goto out;
    retarget_dynamo(orig, (PyObject *)mc);
    installed_call = mc;
    mc = NULL;
    rc = 0;
out:
    Py_XDECREF(mc);
    Py_XDECREF(code);
    Py_XDECREF(orig);
    Py_XDECREF(Module);
    Py_XDECREF(nn);
    return rc;
}

void pb_torch_remove_call_wrapper(void)
{
    if (!installed_call) return;
    PyObject *nn = PyImport_ImportModule("torch.nn");
    PyObject *Module = nn ? PyObject_GetAttrString(nn, "Module") : NULL;
    PyObject *cur = Module ? PyObject_GetAttrString(Module, "__call__") : NULL;
    if (cur == (PyObject *)installed_call) PyObject_SetAttrString(Module, "__call__", installed_call->orig);
    /* else someone wrapped it after us: leave theirs in place; ours passes calls straight through
     * once disabled */
    retarget_dynamo((PyObject *)installed_call, installed_call->orig);
    PyErr_Clear();
    Py_XDECREF(cur);
    Py_XDECREF(Module);
    Py_XDECREF(nn);
    if (cur == (PyObject *)installed_call) Py_CLEAR(installed_call);
}

/* ---- generations: transformers' GenerationMixin.generate() ---- */

/* GenerationMixin.generate(self, ...) (pb_wrap_attr): one generation (generate.h). Its forwards
 * end no step (enter()); in a process that does not train, the generation's end ends the step,
 * so python.steps gets one row per generation, not one per token; a generation made for a
 * request (serve.h) is the request's time in the model and ends no step. A training loop that
 * generates (an evaluation, RLHF rollouts) keeps its steps at optimizer.step(). [GIL held] */
PyObject *pb_torch_generate(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    int outermost = pb_generate_begin(args, nargsf, kwnames);
    int served = outermost && pb_serve_generate_begin(); /* made for a request: its time in the model */
    PyObject *res = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    PyObject *self = PyVectorcall_NARGS(nargsf) >= 1 ? args[0] : NULL;
    if (!atomic_load_explicit(&pb_step_enabled, memory_order_relaxed)) { /* detached meanwhile */
        pb_generate_end(self, NULL);
        if (served) pb_serve_generate_end(INT64_MIN);
        return res;
    }
    pb_generate_end(self, res);
    if (served) pb_serve_generate_end(res ? pb_generate_made() : INT64_MIN);
    if (outermost && !served && !pb_torch.training_latched && pb_torch.primary_ran) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        end_step(pb_now_ns());
        PyErr_Restore(et, ev, tb);
    }
    return res;
}

/* ---- optimizers: construction, the closure of step(), the step hooks ---- */

/* torch.optim.Optimizer.__init__(self, ...) returned: a training job, whose steps end at
 * optimizer.step() from now on, also before the first one (gradient accumulation, Lightning's
 * sanity-check validation: no forward ends a step). An inference loop that merely holds an
 * optimizer still gets a step per forward once its no_grad forwards pass the evaluation
 * stretch's minimum (evaluation_stretch()). [GIL held] */
PyObject *pb_torch_optimizer_made(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *res = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    if (res && !pb_torch.training_latched && !pb_torch.evaluating) {
        if (pb_torch.primary_ran) end_step(pb_now_ns()); /* forwards before it (an inference pass) were steps */
        pb_torch.training_latched = 1;
        pb_torch.nograd_learned = 1;
        pb_torch.nograd_forwards = 0;
    }
    return res;
}

/* A closure passed to optimizer.step(closure) (Lightning's training_step, forward and
 * backward; LBFGS' re-evaluations): its time is not the optimizer's. The wrapper marks it as host
 * time on the step's timeline, so the forward and backward inside it are theirs, and what is
 * left of optimizer.step() is the optimizer's own work. */
static PyObject *closure_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    pb_wrapper *w = (pb_wrapper *)self;
    int64_t start = pb_now_ns();
    int device = pb_device_on;
    if (device) pb_device_phase(1, PB_ACT_HOST);
    PyObject *res = PyObject_Vectorcall(w->orig, args, nargsf, kwnames);
    if (device) pb_device_phase(0, PB_ACT_HOST);
    if (atomic_load_explicit(&pb_step_enabled, memory_order_relaxed)) {
        int64_t end = pb_now_ns();
        pb_step_interval(PB_ACT_HOST, start, end);
        opt_closure_ns += end - start;
    }
    return res;
}

/* (args, kwargs) with the closure among them wrapped (closure_vectorcall), or NULL (no closure,
 * or it could not be wrapped: the step runs unchanged). New reference. [GIL held] */
static PyObject *with_wrapped_closure(PyObject *step_args, PyObject *step_kwargs)
{
    PyObject *closure = NULL, *new_args = NULL, *new_kwargs = NULL, *result = NULL;
    int in_kwargs = 0;
    if (step_kwargs && PyDict_Check(step_kwargs)) {
        closure = PyDict_GetItemString(step_kwargs, "closure"); /* borrowed */
        in_kwargs = closure != NULL;
    }
    if (!closure && step_args && PyTuple_Check(step_args) && PyTuple_GET_SIZE(step_args) >= 2)
        closure = PyTuple_GET_ITEM(step_args, 1);
    if (!closure || closure == Py_None || !PyCallable_Check(closure) || Py_TYPE(closure) == &pb_wrapper_type) return NULL;
    pb_wrapper *w = pb_wrapper_new(closure, closure_vectorcall, NULL);
    if (!w) goto out;
    if (in_kwargs) {
        new_args = pb_torch_new_ref(step_args);
        if (!(new_kwargs = PyDict_Copy(step_kwargs)) || PyDict_SetItemString(new_kwargs, "closure", (PyObject *)w)) goto out;
    } else {
        Py_ssize_t n = PyTuple_GET_SIZE(step_args); /* a new tuple: GetSlice may return the same one */
        if (!(new_args = PyTuple_New(n))) goto out;
        for (Py_ssize_t i = 0; i < n; i++)
            PyTuple_SET_ITEM(new_args, i, pb_torch_new_ref(i == 1 ? (PyObject *)w : PyTuple_GET_ITEM(step_args, i)));
        new_kwargs = step_kwargs && PyDict_Check(step_kwargs) ? pb_torch_new_ref(step_kwargs) : PyDict_New();
        if (!new_kwargs) goto out;
    }
    result = PyTuple_Pack(2, new_args, new_kwargs);
out:
    Py_XDECREF((PyObject *)w);
    Py_XDECREF(new_args);
    Py_XDECREF(new_kwargs);
    PyErr_Clear();
    return result;
}

/* optimizer step pre-hook(optimizer, args, kwargs): returns None, or (args, kwargs) with the
 * closure wrapped */
static PyObject *opt_pre(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!atomic_load_explicit(&pb_step_enabled, memory_order_relaxed)) Py_RETURN_NONE;
    opt_seq = pb_step_seq++;
    opt_closure_ns = 0;
    opt_device = 0;
    if (pb_device_on) { /* on detail steps also the optimizer's own row in python.device_trace */
        opt_device = 1;
        pb_device_phase(1, PB_ACT_OPTIMIZER);
        if (pb_torch.detail && nargs >= 1) {
            opt_device_type = pb_intern_cstr(pb_torch_class_name(args[0]));
            opt_device_name = pb_torch_optimizer_name(args[0], opt_device_type);
            pb_device_module(1, (pb_activity)-1, opt_device_name, opt_device_type, opt_seq, PB_STAGE_STEP, 0);
            opt_device = 2;
        }
    }
    opt_start_ns = pb_now_ns();
    PyObject *changed = nargs >= 3 ? with_wrapped_closure(args[1], args[2]) : NULL;
    if (changed) return changed;
    Py_RETURN_NONE;
}

/* optimizer step post-hook(optimizer, args, kwargs) */
static PyObject *opt_post(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t now = pb_now_ns();
    if (!atomic_load_explicit(&pb_step_enabled, memory_order_relaxed) || nargs < 1) Py_RETURN_NONE;
    if (opt_device == 2) pb_device_module(0, (pb_activity)-1, opt_device_name, opt_device_type, opt_seq, PB_STAGE_STEP, 0);
    if (opt_device) pb_device_phase(0, PB_ACT_OPTIMIZER);
    opt_device = 0;
    if (opt_start_ns) {
        pb_step_interval(PB_ACT_OPTIMIZER, opt_start_ns, now);
        if (pb_torch.detail) {
            pb_tstate *ts = pb_frames_get();
            uint32_t type = pb_intern_cstr(pb_torch_class_name(args[0])), name = pb_torch_optimizer_name(args[0], type);
            pb_frames_push_row(opt_start_ns, now, now - opt_start_ns - opt_closure_ns, opt_seq, name, type, 0, PB_STAGE_STEP,
                               ts ? ts->tid : 0);
        }
    }
    opt_start_ns = 0;
    pb_collect_optimizer_done(args[0]);
    pb_torch_optimizer_stepped();
    Py_RETURN_NONE;
}

PyMethodDef pb_torch_hook_defs[4] = {
    {"_forward_pre_hook", (PyCFunction)(void (*)(void))fwd_pre, METH_FASTCALL, NULL},
    {"_forward_hook", (PyCFunction)(void (*)(void))fwd_post, METH_FASTCALL, NULL},
    {"_optimizer_pre_hook", (PyCFunction)(void (*)(void))opt_pre, METH_FASTCALL, NULL},
    {"_optimizer_post_hook", (PyCFunction)(void (*)(void))opt_post, METH_FASTCALL, NULL},
};

/* ---- what other threads read ---- */

int pb_torch_hooks_active(void) { return pb_step_active(); }

void pb_torch_detail(pb_torch_detail_info *out)
{
    memset(out, 0, sizeof *out);
    out->installed = pb_torch_hooks_active();
    if (!out->installed) return;
    out->automatic = atomic_load_explicit(&shown_automatic, memory_order_relaxed);
    out->windows_only = atomic_load_explicit(&shown_windows_only, memory_order_relaxed);
    out->every_step = atomic_load_explicit(&shown_every_step, memory_order_relaxed);
    out->steps = atomic_load_explicit(&shown_steps, memory_order_relaxed);
    out->now = atomic_load_explicit(&shown_now, memory_order_relaxed);
    out->period = atomic_load_explicit(&shown_period, memory_order_relaxed);
    out->window = atomic_load_explicit(&shown_window, memory_order_relaxed);
    out->budget_pct = (double)atomic_load_explicit(&shown_budget_pct_e6, memory_order_relaxed) / 1e6;
    int64_t ppm = atomic_load_explicit(&shown_cost_ppm, memory_order_relaxed);
    out->cost = ppm < 0 ? -1 : (double)ppm / 1e6;
    out->spread_lo = (double)atomic_load_explicit(&shown_spread_lo_ppm, memory_order_relaxed) / 1e6;
    out->spread_hi = (double)atomic_load_explicit(&shown_spread_hi_ppm, memory_order_relaxed) / 1e6;
    out->rejected = atomic_load_explicit(&shown_rejected, memory_order_relaxed);
}
