/*
 * wrap.h - wrapping a torch callable in C: the Wrapper type that stands in for
 * torch.nn.Module.__call__ (hot/torch_hooks.c) and for the functions the collectors watch
 * (DataLoader's __next__, GradScaler.step, the c10d collectives, ...).
 *
 * A Wrapper is a method descriptor: a bound method when read from an instance, itself when read
 * from a class or module, so the wrapped attribute looks and behaves like the original. Calls go
 * straight to the original while recording is off (step.h's switch).
 */
#ifndef PB_AGENT_WRAP_H
#define PB_AGENT_WRAP_H

#include <Python.h>

#include "step.h"

/* fn must call orig with the same arguments and return its result untouched (or NULL with its
 * exception untouched). */
typedef PyObject *(*pb_wrap_fn)(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames);

typedef struct pb_wrapper {
    PyObject_HEAD
    vectorcallfunc vectorcall; /* the module-call fast path, or wrap_vectorcall for pb_wrap_attr */
    PyObject *orig; /* the callable it wraps (owned) */
    PyObject *dict; /* __wrapped__, __name__, ... for inspect */
    pb_wrap_fn fn;  /* pb_wrap_attr wrappers only */
    int inherited;  /* the owner (a class) had no attribute of its own: unwrapping deletes ours */
} pb_wrapper;

extern PyTypeObject pb_wrapper_type PB_STEP_HIDDEN;

/* A new wrapper of orig (borrowed) whose calls go to `call`, with orig's inspect attributes
 * (__wrapped__, __name__, __qualname__, __doc__, __module__); fn is kept for pb_wrap_attr's
 * calls. Returns NULL with an exception set. [GIL held] */
pb_wrapper *pb_wrapper_new(PyObject *orig, vectorcallfunc call, pb_wrap_fn fn);

/* owner.attr is replaced by a wrapper whose calls go to fn(orig, args, nargsf, kwnames) while
 * recording is on, and straight to the original otherwise. Stores the wrapper (new reference) in
 * *wrapper; returns 0 (also when owner.attr already is one of ours), or -1 with a Python
 * exception set. [GIL held] */
int pb_wrap_attr(PyObject *owner, const char *attr, pb_wrap_fn fn, PyObject **wrapper);

/* pb_wrap_attr, but every call goes to fn, recording on or off: for a call that must be seen
 * whenever it happens (uvicorn's Config.load, which may import torch itself, and so run before
 * recording is on); fn checks the switch for what it records. [GIL held] */
int pb_wrap_attr_always(PyObject *owner, const char *attr, pb_wrap_fn fn, PyObject **wrapper);

/* Puts the original back if owner.attr is still *wrapper (else someone wrapped it after us:
 * theirs stays, ours passes calls through), and clears *wrapper. [GIL held] */
void pb_unwrap_attr(PyObject *owner, const char *attr, PyObject **wrapper);

/* A C function object for def, named probing._agent.<name> (never __module__ None, which
 * Inductor's config serialisation cannot take). New reference, or NULL with an exception set.
 * [GIL held] */
PyObject *pb_wrap_function(PyMethodDef *def);

/* Readies the Wrapper type; made by the module init. Returns 0 or -1 with an exception set. */
int pb_wrap_ready_types(void);

#endif
