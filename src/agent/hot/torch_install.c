/*
 * torch_install.c - puts the torch hooks (torch_hooks.c) into torch and takes them out again:
 * the global forward pre/post hooks or the Module.__call__ wrapper (PROBING_HOOK_MODE), the
 * optimizer step hooks, the Optimizer.__init__ wrapper, transformers' GenerationMixin.generate
 * wrapper (once transformers.generation.utils is imported), the backward probes' setup, the
 * collectors, and at removal the servers' wrappers (serve.h); and torch's version and the backward probes' kind for /api/info.
 *
 * Install and remove run with the GIL held, from the agent's start and stop (service/); they
 * set the state the hooks read (pb_torch, torch_state.h) and reset it (pb_torch_state_reset)
 * when the hooks go. The handles of the registrations are this file's alone. Calls the hooks
 * (torch_hooks.c) and torch_names.c, never the other way round. pb_torch_version,
 * pb_torch_backward_probes and pb_torch_hooks_disable are for any thread.
 */
#include "torch_hooks.h"

#include "autograd.h"
#include "autograd_ext.h"
#include "clock.h"
#include "collect.h"
#include "config.h"
#include "detail.h"
#include "log.h"
#include "serve.h"
#include "step.h"
#include "torch_names.h"
#include "torch_state.h"
#include "wrap.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static PyObject *handles[4]; /* RemovableHandles of our four registrations */
static PyObject *str_remove;
static PyObject *wrap_optimizer_init;
static PyObject *generation_mixin, *wrap_generate; /* transformers' GenerationMixin, its generate */
static char torch_version[64];
static _Atomic int torch_version_set;

static PyObject *call_register(const char *modname, const char *fn, PyObject *hook, int always_call)
{
    PyObject *m = NULL, *reg = NULL, *args = NULL, *kw = NULL, *h = NULL;
    m = PyImport_ImportModule(modname);
    if (!m) goto out;
    reg = PyObject_GetAttrString(m, fn);
    if (!reg) goto out;
    args = PyTuple_Pack(1, hook);
    if (!args) goto out;
    if (always_call) {
        kw = Py_BuildValue("{s:O}", "always_call", Py_True);
        if (!kw) goto out;
    }
    h = PyObject_Call(reg, args, kw);
out:
    Py_XDECREF(m);
    Py_XDECREF(reg);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return h;
}

static PyObject *hook_fns[4]; /* created once, kept for the life of the process */

int pb_torch_hooks_ready_types(void)
{
    if (pb_autograd_ready_types() || pb_wrap_ready_types() || pb_serve_ready_types()) return -1;
    for (int i = 0; i < 4; i++) {
        if (!hook_fns[i] && !(hook_fns[i] = pb_wrap_function(&pb_torch_hook_defs[i]))) return -1;
    }
    return 0;
}

PyObject *pb_torch_hook_functions(void)
{
    return PyTuple_Pack(4, hook_fns[0], hook_fns[1], hook_fns[2], hook_fns[3]);
}

int pb_torch_hooks_install(void)
{
    if (pb_step_installed) return 0;
    PyObject *torch = NULL, *tc = NULL, *var = NULL, *engine = NULL, *ver = NULL;
    PyObject **fns = hook_fns;
    int rc = -1;

    if (!pb_torch.str_grad_fn) {
        pb_torch.str_grad_fn = PyUnicode_InternFromString("grad_fn");
        int names = pb_torch_names_ready(); /* the weakref callback, "named_modules" */
        str_remove = PyUnicode_InternFromString("remove");
        if (!pb_torch.str_grad_fn || names || !str_remove) goto out;
    }
    torch = PyImport_ImportModule("torch");
    if (!torch) goto out;
    tc = PyObject_GetAttrString(torch, "_C");
    if (!tc) goto out;
    Py_XDECREF(pb_torch.tensor_type);
    pb_torch.tensor_type = (PyTypeObject *)PyObject_GetAttrString(tc, "TensorBase");
    if (!pb_torch.tensor_type) {
        PyErr_Clear();
        pb_torch.tensor_type = (PyTypeObject *)PyObject_GetAttrString(tc, "_TensorBase");
        if (!pb_torch.tensor_type) goto out;
    }
    Py_XDECREF(pb_torch.is_grad_enabled);
    pb_torch.is_grad_enabled = PyObject_GetAttrString(tc, "is_grad_enabled");
    PyErr_Clear();
    if (!PyType_Check((PyObject *)pb_torch.tensor_type)) {
        PyErr_SetString(PyExc_TypeError, "torch._C.TensorBase is not a type");
        goto out;
    }
    var = PyImport_ImportModule("torch.autograd.variable");
    if (var) {
        PyObject *V = PyObject_GetAttrString(var, "Variable");
        if (V) {
            engine = PyObject_GetAttrString(V, "_execution_engine");
            Py_DECREF(V);
        }
        if (engine) pb_autograd_set_queue_callback(PyObject_GetAttrString(engine, "queue_callback"));
    }
    PyErr_Clear(); /* without queue_callback, backward of input modules is simply not closed */
    ver = PyObject_GetAttrString(torch, "__version__");
    if (ver) {
        PyObject *s = PyObject_Str(ver);
        const char *cs = s ? PyUnicode_AsUTF8(s) : NULL;
        if (cs) {
            snprintf(torch_version, sizeof torch_version, "%s", cs);
            atomic_store(&torch_version_set, 1);
        }
        Py_XDECREF(s);
    }
    PyErr_Clear();

    pb_torch.record_backward = pb_config_int("PROBING_BACKWARD", 1) != 0;
    pb_autograd_load_ext(pb_torch.record_backward);
    if (pb_detail_init(&pb_torch.detail_policy, pb_config_str("PROBING_DETAIL_EVERY"), pb_config_int("PROBING_DETAIL_STEPS", 8),
                       pb_config_double("PROBING_DETAIL_BUDGET", PB_DETAIL_DEFAULT_BUDGET_PCT)))
        pb_log_warn("ignoring PROBING_DETAIL_EVERY=%s: not 'auto', 'windows' or a number of steps; using auto",
                    pb_config_str("PROBING_DETAIL_EVERY"));
    pb_torch.detail = pb_detail_on(&pb_torch.detail_policy, atomic_load_explicit(&pb_step_number, memory_order_relaxed));
    pb_torch.detail_measured = 1;
    pb_torch_show_detail();
    const char *r = getenv("RANK");
    pb_step_rank_id = r ? (uint16_t)atoi(r) : 0;
    if (!pb_step_start_ns) pb_step_start_ns = pb_now_ns();

    atomic_store(&pb_step_enabled, 1);
    const char *mode = pb_config_str("PROBING_HOOK_MODE");
    if (mode && strcmp(mode, "hooks") == 0) {
        handles[0] = call_register("torch.nn.modules.module", "register_module_forward_pre_hook", fns[0], 0);
        if (!handles[0]) goto out;
        handles[1] = call_register("torch.nn.modules.module", "register_module_forward_hook", fns[1], 1);
        if (!handles[1]) goto out;
    } else if (pb_torch_install_call_wrapper()) {
        goto out;
    }
    if (pb_torch.record_backward) pb_autograd_install_fast_register();
    handles[2] = call_register("torch.optim.optimizer", "register_optimizer_step_pre_hook", fns[2], 0);
    if (!handles[2]) goto out;
    handles[3] = call_register("torch.optim.optimizer", "register_optimizer_step_post_hook", fns[3], 0);
    if (!handles[3]) goto out;
    PyObject *optim = PyImport_ImportModule("torch.optim");
    PyObject *optimizer_cls = optim ? PyObject_GetAttrString(optim, "Optimizer") : NULL;
    if (!optimizer_cls || pb_wrap_attr(optimizer_cls, "__init__", pb_torch_optimizer_made, &wrap_optimizer_init))
        PyErr_Clear(); /* without it steps end at forwards until the first optimizer.step(), as before */
    Py_XDECREF(optimizer_cls);
    Py_XDECREF(optim);
    pb_step_installed = 1;
    pb_step_set_boundary(pb_torch_optimizer_stepped);
    if (pb_collect_install()) { /* the collectors are extras: module recording goes on */
        PyErr_Clear();
        pb_log_warn("data loader, AMP and sync collectors are off: torch is not as expected");
    }
    rc = 0;
out:
    if (rc) {
        atomic_store(&pb_step_enabled, 0);
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        pb_torch_remove_call_wrapper();
        pb_autograd_remove_fast_register();
        for (int i = 0; i < 4; i++) {
            if (handles[i]) {
                PyObject *x = PyObject_CallMethodNoArgs(handles[i], str_remove);
                Py_XDECREF(x);
                Py_CLEAR(handles[i]);
            }
        }
        PyErr_Restore(et, ev, tb);
    }
    Py_XDECREF(torch);
    Py_XDECREF(tc);
    Py_XDECREF(var);
    Py_XDECREF(engine);
    Py_XDECREF(ver);
    return rc;
}

int pb_torch_install_generate(void)
{
    if (wrap_generate) return 0;
    PyObject *utils = PyImport_ImportModule("transformers.generation.utils");
    PyObject *mixin = utils ? PyObject_GetAttrString(utils, "GenerationMixin") : NULL;
    Py_XDECREF(utils);
    if (!mixin) return -1;
    if (pb_wrap_attr(mixin, "generate", pb_torch_generate, &wrap_generate)) {
        Py_DECREF(mixin);
        return -1;
    }
    generation_mixin = mixin;
    return 0;
}

void pb_torch_hooks_remove(void)
{
    atomic_store(&pb_step_enabled, 0);
    pb_collect_remove();
    pb_serve_remove();
    if (wrap_generate) {
        pb_unwrap_attr(generation_mixin, "generate", &wrap_generate);
        Py_CLEAR(generation_mixin);
        PyErr_Clear();
    }
    if (wrap_optimizer_init) {
        PyObject *optim = PyImport_ImportModule("torch.optim");
        PyObject *optimizer_cls = optim ? PyObject_GetAttrString(optim, "Optimizer") : NULL;
        if (optimizer_cls) pb_unwrap_attr(optimizer_cls, "__init__", &wrap_optimizer_init);
        Py_XDECREF(optimizer_cls);
        Py_XDECREF(optim);
        PyErr_Clear();
    }
    pb_torch_remove_call_wrapper();
    pb_autograd_remove_fast_register();
    for (int i = 0; i < 4; i++) {
        if (!handles[i]) continue;
        PyObject *x = PyObject_CallMethodNoArgs(handles[i], str_remove);
        if (!x) PyErr_Clear();
        Py_XDECREF(x);
        Py_CLEAR(handles[i]);
    }
    pb_torch_state_reset(); /* every module name, where steps end */
    pb_autograd_reset();
    pb_step_set_boundary(NULL);
    pb_step_installed = 0;
}

void pb_torch_hooks_disable(void) { atomic_store(&pb_step_enabled, 0); }

const char *pb_torch_version(void) { return atomic_load(&torch_version_set) ? torch_version : NULL; }

const char *pb_torch_backward_probes(void) { return pb_autograd_backward_probes(); }
