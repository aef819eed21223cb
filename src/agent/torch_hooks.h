/*
 * torch_hooks.h - records python.torch_trace from inside torch, with no change to user code.
 *
 * Module executions: a C wrapper of torch.nn.Module.__call__ (default), or C callables registered
 * as torch's global forward pre/post hooks (PROBING_HOOK_MODE=hooks). Optimizer steps: C
 * callables registered as torch.optim's global step pre/post hooks. Backward time: autograd node
 * pre-hooks on the grad_fn of a module's output (start) and of its input as it was before the
 * forward ran (end) — not full module backward hooks, which wrap tensors in an identity Function
 * and break in-place ops. See docs/tables.md.
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

/* Version string of the torch the hooks were installed into, or NULL. [any thread] */
const char *pb_torch_version(void);

/* The current step number. [any thread, racy read] */
int64_t pb_torch_current_step(void);

/* pb_now_ns() when the current step began (0 before the first module ran). [training thread] */
int64_t pb_torch_step_start_ns(void);

/* The four hook callables, as a new tuple. torch.compile (dynamo) must treat them as no-ops
 * rather than graph-break on them: the package adds them to
 * torch._dynamo.config.ignore_logging_functions when dynamo is imported. [GIL held] */
PyObject *pb_torch_hook_functions(void);

/* Python type objects and hook callables defined here; made by the module init. */
int pb_torch_hooks_ready_types(void);

#endif
