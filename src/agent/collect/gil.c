/*
 * gil.c - the GIL sampler; see gil.h.
 *
 * Where CPython keeps the GIL: 3.9-3.11 in _PyRuntime.ceval.gil, 3.12-3.13 behind the main
 * interpreter's ceval.gil pointer (internal headers, hence Py_BUILD_CORE in this file only). The
 * sampler reads two words, `locked` and `last_holder`, with relaxed atomic loads and keeps a
 * count per holder pointer; it never touches a Python object, so it cannot crash on a thread
 * state freed meanwhile. Pointers become threads at the step end, under the GIL, by walking the
 * interpreter's thread states (an exited thread's pointer matches none: "(exited thread)").
 *
 * Cost: one wake-up per period (10 ms) and two loads; at a step end, a walk of the thread list
 * and one dict lookup (threading._active) per thread that held the GIL.
 */
#define Py_BUILD_CORE 1
#include "gil.h"

#include "config.h"
#include "intern.h"
#include "sampler.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#if PY_VERSION_HEX >= 0x03090000 && PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define PB_GIL_READABLE 1
#if PY_VERSION_HEX >= 0x030C0000
#include "internal/pycore_interp.h"
#else
#include "internal/pycore_runtime.h"
#endif
#else
#define PB_GIL_READABLE 0
#endif

#define SLOTS 32

static struct {
    uintptr_t holder; /* PyThreadState pointer; 0 = free slot */
    int32_t held;
} slots[SLOTS];
static int32_t samples_taken;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pb_sampler sampler;

#if PB_GIL_READABLE
static struct _gil_runtime_state *gil;

/* The locked flag and the last holder, or 0 when the GIL is free. [sampler thread] */
static uintptr_t read_holder(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    if (!_Py_atomic_load_int_relaxed(&gil->locked)) return 0;
    return (uintptr_t)_Py_atomic_load_ptr_relaxed(&gil->last_holder);
#else
    if (!_Py_atomic_load_relaxed(&gil->locked)) return 0;
    return (uintptr_t)_Py_atomic_load_relaxed(&gil->last_holder);
#endif
}
#endif

/* One sample: who holds the GIL now. [sampler thread] */
static void sample(void)
{
#if PB_GIL_READABLE
    uintptr_t h = read_holder();
    pthread_mutex_lock(&lock);
    samples_taken++;
    for (int i = 0; h && i < SLOTS; i++) {
        if (slots[i].holder == h || slots[i].holder == 0) {
            slots[i].holder = h;
            slots[i].held++;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
#endif
}

int pb_gil_start(void)
{
    if (sampler.running) return 0;
#if !PB_GIL_READABLE
    return -ENOTSUP;
#else
    long period = (long)pb_config_int("PROBING_GIL_SAMPLE_MS", 10);
    if (period <= 0) return 0;
#if PY_VERSION_HEX >= 0x030C0000
    PyInterpreterState *main = PyInterpreterState_Main();
    gil = main ? main->ceval.gil : NULL;
#else
    gil = &_PyRuntime.ceval.gil;
#endif
    if (!gil) return -ENOTSUP;
    pthread_mutex_lock(&lock);
    memset(slots, 0, sizeof slots);
    samples_taken = 0;
    pthread_mutex_unlock(&lock);
    sampler.tick = sample;
    sampler.period_ms = period;
    sampler.tick_first = 1;
    sampler.fixed_rate = 0; /* every period after the end of the last sample */
    return pb_sampler_start(&sampler);
#endif
}

const char *pb_gil_status(void)
{
    static char text[64];
#if !PB_GIL_READABLE
    return "not supported on this Python (CPython 3.9-3.13 with a GIL); python.gil stays empty";
#else
    long period = (long)pb_config_int("PROBING_GIL_SAMPLE_MS", 10);
    if (period <= 0) return "off (PROBING_GIL_SAMPLE_MS=0)";
    if (!sampler.running) return "starts at the first step (python.gil)";
    snprintf(text, sizeof text, "every %ld ms (python.gil)", period);
    return text;
#endif
}

void pb_gil_stop(void) { pb_sampler_stop(&sampler); }

void pb_gil_forget_after_fork(void)
{
    pb_sampler_forget_after_fork(&sampler);
    pthread_mutex_init(&lock, NULL);
}

/* threading._active[ident].name as an intern id, or "(thread <ident>)". [GIL held] */
static uint32_t thread_name(unsigned long ident)
{
    char fallback[48];
    uint32_t id = 0;
    PyObject *threading = PyDict_GetItemString(PyImport_GetModuleDict(), "threading");
    Py_XINCREF(threading);
    PyObject *active = threading ? PyObject_GetAttrString(threading, "_active") : NULL;
    PyObject *key = active ? PyLong_FromUnsignedLong(ident) : NULL;
    PyObject *t = key && PyDict_Check(active) ? PyDict_GetItemWithError(active, key) : NULL;
    PyObject *name = t ? PyObject_GetAttrString(t, "name") : NULL;
    const char *s = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (s) id = pb_intern_cstr(s);
    Py_XDECREF(name);
    Py_XDECREF(key);
    Py_XDECREF(active);
    Py_XDECREF(threading);
    PyErr_Clear();
    if (!id) {
        snprintf(fallback, sizeof fallback, "(thread %lu)", ident);
        id = pb_intern_cstr(fallback);
    }
    return id;
}

/* Fills *r, but for step, samples and rank, for the thread state `holder` (`me`, the training
 * thread, for its row even when it held none of the samples), which held the GIL `held` times. */
static void fill_row(pb_gil_row *r, PyThreadState *me, uintptr_t holder, int32_t held)
{
    memset(r, 0, sizeof *r);
    r->held = held;
    r->training = (uintptr_t)me == holder;
    PyThreadState *t = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
    while (t && (uintptr_t)t != holder) t = PyThreadState_Next(t);
    if (t) {
        r->thread_id = (int64_t)t->thread_id;
        r->name = thread_name(t->thread_id);
    } else {
        r->name = pb_intern_cstr("(exited thread)");
    }
}

int pb_gil_take(int64_t step, uint16_t rank, pb_gil_row *rows, int max)
{
    uintptr_t holder[SLOTS];
    int32_t held[SLOTS], taken;
    int n = 0, mine = 0;
    if (!sampler.running || max <= 0) return 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < SLOTS; i++) holder[i] = slots[i].holder, held[i] = slots[i].held;
    taken = samples_taken;
    memset(slots, 0, sizeof slots);
    samples_taken = 0;
    pthread_mutex_unlock(&lock);
    if (taken <= 0) return 0;
    PyThreadState *me = PyThreadState_Get();
    for (int i = 0; i < SLOTS && n < max && holder[i]; i++) {
        fill_row(&rows[n++], me, holder[i], held[i]);
        mine |= holder[i] == (uintptr_t)me;
    }
    /* The training thread's row is there whenever the step has samples, held 0 when every
     * sample found the GIL free or another thread holding it: a step's samples are never lost
     * for want of a holder (inside torch's operations the GIL is released). */
    if (!mine) {
        if (n == max) n--; /* rows full: the last holder's row gives way */
        fill_row(&rows[n++], me, (uintptr_t)me, 0);
    }
    for (int i = 0; i < n; i++) rows[i].step = step, rows[i].samples = taken, rows[i].rank = rank;
    return n;
}
