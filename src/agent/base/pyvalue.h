/*
 * pyvalue.h - two small readings of Python values that several collectors share, header-only
 * (like walk.h): a value's str() as an intern id, and a no-argument call's result as a double.
 * Both swallow every Python error: a collector that cannot read a value records "unknown"
 * (0 / NaN) and the program never sees an exception it did not raise. [GIL held]
 */
#ifndef PB_AGENT_PYVALUE_H
#define PB_AGENT_PYVALUE_H

#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "intern.h"

/* str(o) as an intern id, without a leading "torch." ("torch.float16" -> "float16"); 0 when it
 * cannot be had (o NULL included). */
static inline uint32_t pb_py_str_id(PyObject *o)
{
    PyObject *s = o ? PyObject_Str(o) : NULL;
    const char *cs = s ? PyUnicode_AsUTF8(s) : NULL;
    uint32_t id = 0;
    if (cs) id = pb_intern_cstr(strncmp(cs, "torch.", 6) == 0 ? cs + 6 : cs);
    Py_XDECREF(s);
    PyErr_Clear();
    return id;
}

/* fn() as a double, NaN on any failure (fn NULL included). */
static inline double pb_py_call_double(PyObject *fn)
{
    if (!fn) return NAN;
    PyObject *r = PyObject_CallNoArgs(fn);
    double d = r ? PyFloat_AsDouble(r) : NAN;
    if (d == -1.0 && PyErr_Occurred()) d = NAN;
    Py_XDECREF(r);
    PyErr_Clear();
    return d;
}

#endif
