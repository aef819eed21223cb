/*
 * walk.h - the tensors in a call's arguments or results: a tensor itself, or the items of a
 * tuple or list, or the values of a dict, one level of nesting down, at most 16 per container.
 * Used by the forward hooks (the first grad_fn among a module's inputs and outputs) and by the
 * data-loader collector (the batch size of a batch): one walker, so both read arguments alike.
 *
 * Borrowed references only; the walk itself never calls Python (PyDict_Next and the sequence
 * macros do not), a visit may. [GIL held]
 */
#ifndef PB_AGENT_WALK_H
#define PB_AGENT_WALK_H

#include <Python.h>

/* Returns nonzero to stop the walk (the visit found what it looked for). */
typedef int (*pb_walk_fn)(PyObject *tensor, void *ctx);

#define PB_WALK_MAX_ITEMS 16

/* Visits the tensors of o (instances of tensor_type, which must not be NULL) in order, from
 * nesting `depth` (0: o is the value itself; containers below depth 1 are not opened), until
 * visit returns nonzero. Returns that value, or 0 when no visit stopped the walk. */
static inline int pb_walk_tensors(PyObject *o, PyTypeObject *tensor_type, int depth, pb_walk_fn visit, void *ctx)
{
    if (PyObject_TypeCheck(o, tensor_type)) return visit(o, ctx);
    if (depth > 1) return 0;
    if (PyTuple_Check(o) || PyList_Check(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject **items = PySequence_Fast_ITEMS(o);
        for (Py_ssize_t i = 0; i < n && i < PB_WALK_MAX_ITEMS; i++) {
            int r = pb_walk_tensors(items[i], tensor_type, depth + 1, visit, ctx);
            if (r) return r;
        }
    } else if (PyDict_Check(o)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        int seen = 0;
        while (PyDict_Next(o, &pos, &k, &v) && seen++ < PB_WALK_MAX_ITEMS) {
            int r = pb_walk_tensors(v, tensor_type, depth + 1, visit, ctx);
            if (r) return r;
        }
    }
    return 0;
}

#endif
