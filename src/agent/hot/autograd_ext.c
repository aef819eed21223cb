/*
 * autograd_ext.c - finding probing._autograd (autograd_api.h) for the running torch: the one
 * built with the package, one built on first use for this torch, or a build started now in the
 * background (probing/_autograd_build.py); and the one line that says which backward probes are
 * in use and why (info, doctor). See autograd_ext.h.
 */
#include "autograd_ext.h"

#include "config.h"
#include "log.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char ext_status[512] = "python"; /* pb_autograd_backward_probes() */

/* The file a background build of probing._autograd will write (_autograd_build.py), or "": the
 * step boundary looks for it every EXT_PENDING_EVERY steps and switches to the extension. */
static char ext_pending[PATH_MAX];
static unsigned ext_pending_steps;
#define EXT_PENDING_EVERY 16

/* probing._autograd_build.load(torch): imports the build made on first use for this torch, or
 * starts one in the background. 0 when probing._autograd is now importable; 1 when the probes
 * stay Python-level (ext_status says why). A cache that is not the user's own is refused by
 * load(), which hands back the one warning to print (at most once a process). [GIL held] */
static int ext_build_load(void)
{
    PyObject *builder = NULL, *torch = NULL, *r = NULL;
    int python = 1;
    if (!(builder = PyImport_ImportModule("probing._autograd_build")) || !(torch = PyImport_ImportModule("torch")) ||
        !(r = PyObject_CallMethod(builder, "load", "O", torch))) {
        snprintf(ext_status, sizeof ext_status, "python (probing._autograd not built with this install)");
        PyErr_Clear();
        goto done;
    }
    PyObject *text = PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 3 ? PyTuple_GET_ITEM(r, 0) : NULL;
    PyObject *pending = text ? PyTuple_GET_ITEM(r, 1) : NULL;
    PyObject *warning = text ? PyTuple_GET_ITEM(r, 2) : NULL;
    if (warning && PyUnicode_Check(warning) && PyUnicode_AsUTF8(warning))
        pb_log_warn("%s", PyUnicode_AsUTF8(warning));
    if (text == Py_None) python = 0;
    else if (text && PyUnicode_Check(text) && PyUnicode_AsUTF8(text))
        snprintf(ext_status, sizeof ext_status, "%s", PyUnicode_AsUTF8(text));
    if (pending && PyUnicode_Check(pending) && PyUnicode_AsUTF8(pending))
        snprintf(ext_pending, sizeof ext_pending, "%s", PyUnicode_AsUTF8(pending));
    PyErr_Clear();
done:
    Py_XDECREF(r);
    Py_XDECREF(torch);
    Py_XDECREF(builder);
    if (python) pb_log_debug("backward is timed by Python-level probes: %s", ext_status);
    return python;
}

const pb_autograd_api *pb_autograd_ext_open(int record_backward)
{
    int built_on_first_use = 0;
    if (!record_backward) {
        snprintf(ext_status, sizeof ext_status, "off (PROBING_BACKWARD=0)");
        return NULL;
    }
    if (!pb_config_int("PROBING_AUTOGRAD_EXT", 1)) {
        snprintf(ext_status, sizeof ext_status, "python (PROBING_AUTOGRAD_EXT=0)");
        return NULL;
    }
    PyObject *mod = PyImport_ImportModule("probing._autograd"); /* PyCapsule_Import does not */
    if (!mod && PyErr_ExceptionMatches(PyExc_ModuleNotFoundError)) {
        /* not built with the package (pip's build isolation hides torch): a build made on first
         * use for this torch, or one started now in the background (_autograd_build.py) */
        PyErr_Clear();
        if (ext_build_load()) return NULL;
        built_on_first_use = 1;
        mod = PyImport_ImportModule("probing._autograd");
    }
    const pb_autograd_api *a = mod ? PyCapsule_Import(PB_AUTOGRAD_CAPSULE, 0) : NULL;
    Py_XDECREF(mod);
    if (!a || a->version != PB_AUTOGRAD_API_VERSION) {
        const char *why = "its interface version differs from the agent's";
        PyObject *et, *ev, *tb, *msg = NULL;
        PyErr_Fetch(&et, &ev, &tb);
        if (ev && (msg = PyObject_Str(ev)) && PyUnicode_AsUTF8(msg)) why = PyUnicode_AsUTF8(msg);
        snprintf(ext_status, sizeof ext_status, "python (probing._autograd not usable: %s)", why);
        Py_XDECREF(msg);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        PyErr_Clear();
        pb_log_debug("backward is timed by Python-level probes: %s", ext_status);
        return NULL;
    }
    snprintf(ext_status, sizeof ext_status, "extension (probing._autograd, torch %s%s)", a->torch_version,
             built_on_first_use ? "; built on first use" : "");
    return a;
}

const char *pb_autograd_backward_probes(void) { return ext_status; }

int pb_autograd_ext_built(void)
{
    if (!*ext_pending || ++ext_pending_steps % EXT_PENDING_EVERY || access(ext_pending, R_OK)) return 0;
    ext_pending[0] = '\0';
    return 1;
}

void pb_autograd_ext_in_use_from(int64_t step)
{
    size_t len = strlen(ext_status);
    if (len > 1 && len < sizeof ext_status - 1)
        snprintf(ext_status + len - 1, sizeof ext_status - len + 1, ", in use from step %lld)", (long long)step);
    pb_log_debug("backward: switched to probing._autograd at step %lld", (long long)step);
}

void pb_autograd_ext_forget_build(void) { ext_pending[0] = '\0'; }
