/*
 * torch_hooks.h - records python.torch_trace from inside torch, with no change to user code.
 *
 * Module executions: a C wrapper of torch.nn.Module.__call__ (default), or C callables registered
 * as torch's global forward pre/post hooks (PROBING_HOOK_MODE=hooks). Optimizer steps: C
 * callables registered as torch.optim's global step pre/post hooks. Backward time: autograd node
 * pre-hooks on the grad_fn of a module's output (start) and of its input as it was before the
 * forward ran (end) — not full module backward hooks, which wrap tensors in an identity Function
 * and break in-place ops (autograd.h). The step state is step.h, the callable wrapper wrap.h.
 * See docs/tables.md.
 */
#ifndef PB_AGENT_TORCH_HOOKS_H
#define PB_AGENT_TORCH_HOOKS_H

#include <Python.h>
#include <stdint.h>

/* Registers the hooks once torch is importable. Idempotent. Returns 0, or -1 with a Python
 * exception set. [GIL held] */
int pb_torch_hooks_install(void);

/* Removes every hook this agent registered and forgets all module names. [GIL held] */
void pb_torch_hooks_remove(void);

/* Stops recording without touching Python (fork child, shutdown). [any thread] */
void pb_torch_hooks_disable(void);

/* Whether the hooks are installed and recording (step boundaries will be seen).
 * [any thread, racy read] */
int pb_torch_hooks_active(void);

/* Version string of the torch the hooks were installed into, or NULL. [any thread] */
const char *pb_torch_version(void);

/* How backward nodes are timed: "extension (...)" (probing._autograd, C++ hooks, no Python in
 * backward), "python (why)" (hooks on grad_fn objects) or "off (PROBING_BACKWARD=0)". Static
 * text, set when the hooks are installed. [any thread] */
const char *pb_torch_backward_probes(void);

/* The detail-window policy as of the last step boundary (detail.h), for /api/info. */
typedef struct pb_torch_detail_info {
    int installed;   /* torch hooks were installed (else the rest is zero) */
    int automatic;   /* mode and period chosen from the measured cost */
    int windows_only; /* PROBING_DETAIL_EVERY=windows */
    int every_step;  /* automatic, every step in detail but one per spacing (detail.h) */
    int now;         /* the current step is a detail step */
    int64_t period, window, steps; /* steps: PROBING_DETAIL_STEPS */
    double budget_pct;
    double cost;     /* measured cost of a detail step (fraction of a summary step); < 0 none yet */
    double spread_lo, spread_hi; /* quartiles of the samples behind `cost` (detail.h) */
    int64_t rejected; /* steps left out of the comparisons as descheduled */
} pb_torch_detail_info;

/* [any thread] */
void pb_torch_detail(pb_torch_detail_info *out);

/* The four hook callables, as a new tuple. torch.compile (dynamo) must treat them as no-ops
 * rather than graph-break on them: the package adds them to
 * torch._dynamo.config.ignore_logging_functions when dynamo is imported. [GIL held] */
PyObject *pb_torch_hook_functions(void);

/* The Python type objects and hook callables of the hooks (torch_install.c); made by the
 * module init. */
int pb_torch_hooks_ready_types(void);

/* ---- torch_hooks.c for torch_install.c only (what installing puts in place) [GIL held] ---- */

/* The four hook callables' definitions: forward pre/post, optimizer step pre/post. */
extern PyMethodDef pb_torch_hook_defs[4];

/* torch.nn.Module.__call__ replaced by the C wrapper, and put back. 0, or -1 with a Python
 * exception set. */
int pb_torch_install_call_wrapper(void);
void pb_torch_remove_call_wrapper(void);

/* Wrapper of transformers' GenerationMixin.generate (pb_wrap_attr): one python.generations row
 * per call (generate.h); in a process that does not train, one step per generation. */
PyObject *pb_torch_generate(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames);

/* Wraps GenerationMixin.generate (transformers.generation.utils must be imported); returns 0,
 * or -1 with a Python exception set. Undone by pb_torch_hooks_remove. [GIL held] */
int pb_torch_install_generate(void);

/* Wrapper of torch.optim.Optimizer.__init__ (pb_wrap_attr): a training job from now on. */
PyObject *pb_torch_optimizer_made(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames);

/* An optimizer step ends the step (also the step boundary callback, step.h). */
void pb_torch_optimizer_stepped(void);

/* Copies the detail policy for other threads (pb_torch_detail). */
void pb_torch_show_detail(void);

#endif
