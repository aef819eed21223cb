/*
 * flight_recorder.c - PyTorch's flight recorder read into JSON; see flight_recorder.h.
 *
 * torch (2.5 and later) keeps a flight recorder of collectives when TORCH_FR_BUFFER_SIZE (or
 * TORCH_NCCL_TRACE_BUFFER_SIZE) is above 0 at init_process_group: per process group the last
 * enqueued and last completed collective, and a ring of entries (collective_seq_id,
 * profiling_name "gloo:all_reduce", input sizes and dtypes, time created). gloo records into it
 * too (checked with torch 2.13 on CPU; its entries stay in state "scheduled", but pg_status
 * moves). The job thread reads it with the GIL (torch's
 * _dump_fr_trace_json, then Python's json) when /api/rank asks, and keeps per group one item:
 *   {"pg": "0", "group": "default_pg", "last_enqueued": 4, "last_started": -1,
 *    "last_completed": 3, "op": "gloo:all_reduce", "input_sizes": [[8]], "input_dtypes":
 *    ["Float"], "for_s": 94.2}
 * ("op".. "for_s" are those of the last enqueued entry, when the ring still holds it).
 *
 * State: fr_on only (whether the recorder is on), written once by the server thread that asks
 * first.
 */
#include "flight_recorder.h"

#include "clock.h"
#include "jsonw.h"

#include <Python.h>

#include <stdlib.h>
#include <string.h>

static int fr_on = -1; /* TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE > 0 */

/* Whether the job has the recorder on (read once). [server thread] */
int pb_fr_enabled(void)
{
    if (fr_on < 0) {
        const char *a = getenv("TORCH_FR_BUFFER_SIZE"), *b = getenv("TORCH_NCCL_TRACE_BUFFER_SIZE");
        fr_on = (a && atol(a) > 0) || (b && atol(b) > 0);
    }
    return fr_on;
}

/* d[key] as an integer (the recorder writes some as strings), -1 when absent. [GIL held] */
static long long dict_ll(PyObject *d, const char *key)
{
    PyObject *v = d && PyDict_Check(d) ? PyDict_GetItemString(d, key) : NULL; /* borrowed */
    long long r = -1;
    if (v && PyLong_Check(v)) r = PyLong_AsLongLong(v);
    else if (v && PyUnicode_Check(v)) r = atoll(PyUnicode_AsUTF8(v) ?: "-1");
    PyErr_Clear();
    return r;
}

/* json.dumps(v) into out as raw JSON (null when v is NULL or fails). [GIL held] */
static void put_json(pb_buf *out, PyObject *dumps, PyObject *v)
{
    PyObject *s = v && dumps ? PyObject_CallOneArg(dumps, v) : NULL;
    const char *t = s ? PyUnicode_AsUTF8(s) : NULL;
    pb_buf_printf(out, "%s", t ? t : "null");
    Py_XDECREF(s);
    PyErr_Clear();
}

/* Reads the flight recorder into items (the "groups" array's items). [GIL held, job thread] */
/* json.loads(_dump_fr_trace_json(includeCollectives=with_entries, onlyActive=True)), a dict or
 * NULL. [GIL held] */
static PyObject *fr_dump(PyObject *dump, PyObject *json, int with_entries)
{
    PyObject *kw = Py_BuildValue("{s:O,s:O}", "includeCollectives", with_entries ? Py_True : Py_False,
                                 "onlyActive", Py_True);
    PyObject *empty = kw ? PyTuple_New(0) : NULL;
    PyObject *raw = empty ? PyObject_Call(dump, empty, kw) : NULL;
    PyObject *doc = raw ? PyObject_CallMethod(json, "loads", "O", raw) : NULL;
    Py_XDECREF(raw);
    Py_XDECREF(empty);
    Py_XDECREF(kw);
    if (doc && !PyDict_Check(doc)) Py_CLEAR(doc);
    return doc;
}

/* The entries are dumped only when some group has a collective in flight (enqueued, not
 * completed): the dump of a full ring costs tens of milliseconds with the GIL (about 90 ms for
 * 2,000 entries, torch 2.13), pg_status alone next to nothing. */
void pb_fr_read(pb_buf *items)
{
    PyObject *c10d = PyImport_ImportModule("torch._C._distributed_c10d");
    PyObject *dump = c10d ? PyObject_GetAttrString(c10d, "_dump_fr_trace_json") : NULL;
    PyObject *json = dump ? PyImport_ImportModule("json") : NULL;
    PyObject *doc = json ? fr_dump(dump, json, 0) : NULL;
    PyObject *dumps = json ? PyObject_GetAttrString(json, "dumps") : NULL;
    PyObject *status = doc ? PyDict_GetItemString(doc, "pg_status") : NULL;
    PyObject *pg_key, *st;
    Py_ssize_t pos = 0;
    int in_flight = 0;
    while (status && PyDict_Check(status) && PyDict_Next(status, &pos, &pg_key, &st))
        in_flight |= dict_ll(st, "last_enqueued_collective") > dict_ll(st, "last_completed_collective");
    if (in_flight) {
        PyObject *full = fr_dump(dump, json, 1);
        if (full) {
            Py_SETREF(doc, full);
            status = PyDict_GetItemString(doc, "pg_status");
        }
    }
    PyObject *entries = doc ? PyDict_GetItemString(doc, "entries") : NULL;
    pos = 0;
    int64_t wall = pb_wall_ns();
    while (status && PyDict_Check(status) && PyDict_Next(status, &pos, &pg_key, &st)) {
        const char *pg = PyUnicode_Check(pg_key) ? PyUnicode_AsUTF8(pg_key) : NULL;
        if (!pg) continue;
        long long enq = dict_ll(st, "last_enqueued_collective");
        PyObject *last = NULL; /* borrowed: the entry of the last enqueued collective */
        Py_ssize_t n = entries && PyList_Check(entries) ? PyList_GET_SIZE(entries) : 0;
        for (Py_ssize_t i = n - 1; i >= 0 && !last; i--) {
            PyObject *e = PyList_GET_ITEM(entries, i);
            PyObject *p2p = PyDict_Check(e) ? PyDict_GetItemString(e, "is_p2p") : NULL;
            if (dict_ll(e, "pg_id") == atoll(pg) && dict_ll(e, "collective_seq_id") == enq && p2p != Py_True)
                last = e;
        }
        PyObject *names = last ? PyDict_GetItemString(last, "process_group") : NULL;
        PyObject *name = names && PyList_Check(names) && PyList_GET_SIZE(names) > 1 ? PyList_GET_ITEM(names, 1) : NULL;
        pb_buf_printf(items, "%s{\"pg\":", items->len ? "," : "");
        pb_json_escape(items, pg, strlen(pg));
        pb_buf_printf(items, ",\"group\":");
        const char *nm = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        if (nm) pb_json_escape(items, nm, strlen(nm));
        else pb_buf_printf(items, "null");
        pb_buf_printf(items, ",\"last_enqueued\":%lld,\"last_started\":%lld,\"last_completed\":%lld", enq,
                      dict_ll(st, "last_started_collective"), dict_ll(st, "last_completed_collective"));
        if (last) {
            pb_buf_printf(items, ",\"op\":");
            put_json(items, dumps, PyDict_GetItemString(last, "profiling_name"));
            pb_buf_printf(items, ",\"input_sizes\":");
            put_json(items, dumps, PyDict_GetItemString(last, "input_sizes"));
            pb_buf_printf(items, ",\"input_dtypes\":");
            put_json(items, dumps, PyDict_GetItemString(last, "input_dtypes"));
            long long created = dict_ll(last, "time_created_ns");
            if (created > 0) pb_buf_printf(items, ",\"for_s\":%.3f", (double)(wall - created) / 1e9);
        }
        pb_buf_printf(items, "}");
        PyErr_Clear();
    }
    PyErr_Clear();
    Py_XDECREF(dumps);
    Py_XDECREF(doc);
    Py_XDECREF(json);
    Py_XDECREF(dump);
    Py_XDECREF(c10d);
}
