/*
 * wrap.c - the Wrapper type and pb_wrap_attr; see wrap.h.
 *
 * With any global module hook registered, torch leaves its fast call path for every module and
 * runs several microseconds of Python per call (closures, hook dict iteration) — more than a
 * small module's work. Wrapping Module.__call__ instead keeps torch on its fast path: the wrapper
 * records, then calls the original __call__ with the very same arguments (vectorcall, no
 * repacking), and records again. User hooks, compiled modules and everything else run inside the
 * original as before. The wrapper is a method descriptor (unbound calls, no bound-method object
 * per call); attribute access yields a real bound method whose __func__ is the wrapper, which is
 * what torch.compile checks to recognise an unpatched Module.__call__ (probing points dynamo's
 * reference at the wrapper, so compiled regions still inline forward directly).
 */
#include "wrap.h"

#include <stdatomic.h>
#include <stddef.h>

/* Generic wrapper (pb_wrap_attr): hands the call to fn with the original. */
static PyObject *wrap_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    pb_wrapper *mc = (pb_wrapper *)self;
    if (!atomic_load_explicit(&pb_step_enabled, memory_order_relaxed)) return PyObject_Vectorcall(mc->orig, args, nargsf, kwnames);
    return mc->fn(mc->orig, args, nargsf, kwnames);
}

/* Wrapper of pb_wrap_attr_always: hands every call to fn, recording on or off. */
static PyObject *wrap_vectorcall_always(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    pb_wrapper *mc = (pb_wrapper *)self;
    return mc->fn(mc->orig, args, nargsf, kwnames);
}

static PyObject *wrapper_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static void wrapper_dealloc(PyObject *self)
{
    pb_wrapper *mc = (pb_wrapper *)self;
    Py_XDECREF(mc->orig);
    Py_XDECREF(mc->dict);
    PyObject_Free(self);
}

PyTypeObject pb_wrapper_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "probing._agent.Wrapper",
    .tp_basicsize = sizeof(pb_wrapper),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(pb_wrapper, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = wrapper_get,
    .tp_dealloc = wrapper_dealloc,
    .tp_dictoffset = offsetof(pb_wrapper, dict),
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_doc = "probing: a torch function with recording around the original (see __wrapped__)",
};

pb_wrapper *pb_wrapper_new(PyObject *orig, vectorcallfunc call, pb_wrap_fn fn)
{
    pb_wrapper *mc = PyObject_New(pb_wrapper, &pb_wrapper_type);
    if (!mc) return NULL;
    mc->vectorcall = call;
    mc->fn = fn;
    mc->inherited = 0;
    Py_INCREF(orig);
    mc->orig = orig;
    mc->dict = PyDict_New();
    if (!mc->dict || PyDict_SetItemString(mc->dict, "__wrapped__", orig)) goto fail;
    static const char *const copied[] = {"__name__", "__qualname__", "__doc__", "__module__", NULL};
    for (int i = 0; copied[i]; i++) {
        PyObject *v = PyObject_GetAttrString(orig, copied[i]);
        if (v) {
            int rc = PyDict_SetItemString(mc->dict, copied[i], v);
            Py_DECREF(v);
            if (rc) goto fail;
        }
        PyErr_Clear();
    }
    return mc;
fail:
    Py_DECREF(mc);
    return NULL;
}

static int wrap_attr(PyObject *owner, const char *attr, pb_wrap_fn fn, vectorcallfunc call, PyObject **wrapper)
{
    int rc = -1;
    pb_wrapper *mc = NULL;
    PyObject *orig = PyObject_GetAttrString(owner, attr);
    if (!orig) goto out;
    if (Py_TYPE(orig) == &pb_wrapper_type) { /* already ours */
        rc = 0;
        goto out;
    }
    if (!(mc = pb_wrapper_new(orig, call, fn))) goto out;
    if (PyType_Check(owner)) {
        PyObject *own = PyDict_GetItemString(((PyTypeObject *)owner)->tp_dict, attr); /* borrowed */
        mc->inherited = own == NULL;
    }
    if (PyObject_SetAttrString(owner, attr, (PyObject *)mc)) goto out;
    Py_XSETREF(*wrapper, (PyObject *)mc);
    mc = NULL;
    rc = 0;
out:
    Py_XDECREF(mc);
    Py_XDECREF(orig);
    return rc;
}

int pb_wrap_attr(PyObject *owner, const char *attr, pb_wrap_fn fn, PyObject **wrapper)
{
    return wrap_attr(owner, attr, fn, wrap_vectorcall, wrapper);
}

int pb_wrap_attr_always(PyObject *owner, const char *attr, pb_wrap_fn fn, PyObject **wrapper)
{
    return wrap_attr(owner, attr, fn, wrap_vectorcall_always, wrapper);
}

void pb_unwrap_attr(PyObject *owner, const char *attr, PyObject **wrapper)
{
    if (!*wrapper) return;
    PyObject *cur = PyObject_GetAttrString(owner, attr);
    if (cur == *wrapper) {
        if (((pb_wrapper *)*wrapper)->inherited) PyObject_DelAttrString(owner, attr);
        else PyObject_SetAttrString(owner, attr, ((pb_wrapper *)*wrapper)->orig);
    }
    /* else wrapped again by someone after us: theirs stays; ours passes calls through */
    PyErr_Clear();
    Py_XDECREF(cur);
    Py_CLEAR(*wrapper);
}


/* A C function object for def, named probing._agent.<name>: a builtin made without a module has
 * __module__ None, and torch.compile's config (dynamo's ignore_logger_methods, which holds the
 * hook functions) is serialised by Inductor's codegen_config(), whose get_module_name() adds
 * strings to __module__: every real compile failed with a TypeError. [GIL held] */
PyObject *pb_wrap_function(PyMethodDef *def)
{
    static PyObject *modname;
    if (!modname && !(modname = PyUnicode_InternFromString("probing._agent"))) return NULL;
    return PyCFunction_NewEx(def, NULL, modname);
}

int pb_wrap_ready_types(void) { return PyType_Ready(&pb_wrapper_type); }
