/*
 * autograd_register.c - the C fast path for registering a Python-level probe on a grad_fn (the
 * probes without the extension, autograd.c). See autograd.h.
 */
#include "autograd.h"

#include "log.h"
#include "wrap.h"

/* grad_fn.register_prehook() is implemented in C++ (registerFunctionPreHook), which asks the
 * Python staticmethod torch.autograd.function.Function._register_hook(hooks_dict, hook) for the
 * dict to keep on the node and the handle to return: for a node without Python hooks yet it
 * builds an OrderedDict and a torch.utils.hooks.RemovableHandle (weak references, an id
 * counter) in Python, about 6 us, which made registration the largest part of recording
 * backward (one new node per module per step). Probing's own probes take a C fast path: a
 * fresh OrderedDict holding the probe (keyed by itself, so no RemovableHandle id can collide)
 * and no handle (probing never removes a probe: the node dies with its graph). Every other
 * call, and a probe on a node that already has Python hooks, goes to torch's own function,
 * unchanged. The wrapper is a staticmethod, as the original; detach deletes it again. */
static PyObject *function_cls, *wrap_register_hook, *ordered_dict;

static PyObject *fast_register_hook(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (kwnames || PyVectorcall_NARGS(nargsf) != 2 || args[0] != Py_None || !pb_autograd_is_probe(args[1]) ||
        !ordered_dict)
        return PyObject_Vectorcall(orig, args, nargsf, kwnames);
    PyObject *d = PyObject_CallNoArgs(ordered_dict);
    if (!d) return NULL;
    PyObject *res = PyDict_SetItem(d, args[1], args[1]) ? NULL : PyTuple_Pack(2, d, Py_None);
    Py_DECREF(d);
    return res;
}

void pb_autograd_install_fast_register(void)
{
    PyObject *fmod = PyImport_ImportModule("torch.autograd.function");
    PyObject *coll = fmod ? PyImport_ImportModule("collections") : NULL;
    Py_XSETREF(function_cls, fmod ? PyObject_GetAttrString(fmod, "Function") : NULL);
    Py_XSETREF(ordered_dict, coll ? PyObject_GetAttrString(coll, "OrderedDict") : NULL);
    Py_XDECREF(fmod);
    Py_XDECREF(coll);
    if (!function_cls || !ordered_dict || pb_wrap_attr(function_cls, "_register_hook", fast_register_hook, &wrap_register_hook)) {
        PyErr_Clear();
        pb_log_debug("grad_fn hooks are registered through torch's own Function._register_hook");
        return;
    }
    PyObject *sm = PyStaticMethod_New(wrap_register_hook);
    if (!sm || PyObject_SetAttrString(function_cls, "_register_hook", sm)) {
        PyErr_Clear();
        pb_unwrap_attr(function_cls, "_register_hook", &wrap_register_hook);
    }
    Py_XDECREF(sm);
}

void pb_autograd_remove_fast_register(void)
{
    if (function_cls && wrap_register_hook) pb_unwrap_attr(function_cls, "_register_hook", &wrap_register_hook);
    Py_CLEAR(function_cls);
    Py_CLEAR(ordered_dict);
}
