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
static pthread_mutex_t stop_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stop_cond = PTHREAD_COND_INITIALIZER;
static int stop_requested, running;
static pthread_t thread;

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

static void *sampler_main(void *arg)
{
    long period_ms = (long)(intptr_t)arg;
    pthread_mutex_lock(&stop_lock);
    while (!stop_requested) {
        pthread_mutex_unlock(&stop_lock);
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
        struct timespec next;
        clock_gettime(CLOCK_MONOTONIC, &next);
        next.tv_sec += period_ms / 1000;
        next.tv_nsec += (period_ms % 1000) * 1000000L;
        if (next.tv_nsec >= 1000000000L) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&stop_lock);
        while (!stop_requested && pthread_cond_timedwait(&stop_cond, &stop_lock, &next) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&stop_lock);
    return NULL;
}

int pb_gil_start(void)
{
    if (running) return 0;
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
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_destroy(&stop_cond);
    pthread_cond_init(&stop_cond, &ca);
    pthread_condattr_destroy(&ca);
    stop_requested = 0;
    pthread_mutex_lock(&lock);
    memset(slots, 0, sizeof slots);
    samples_taken = 0;
    pthread_mutex_unlock(&lock);
    sigset_t all, old;
    sigfillset(&all); /* the sampler must never receive the program's signals */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&thread, NULL, sampler_main, (void *)(intptr_t)period);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) return -rc;
    running = 1;
    return 0;
#endif
}

void pb_gil_stop(void)
{
    if (!running) return;
    pthread_mutex_lock(&stop_lock);
    stop_requested = 1;
    pthread_cond_signal(&stop_cond);
    pthread_mutex_unlock(&stop_lock);
    pthread_join(thread, NULL);
    running = 0;
}

void pb_gil_forget_after_fork(void)
{
    running = 0;
    pthread_mutex_init(&lock, NULL);
    pthread_mutex_init(&stop_lock, NULL);
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

int pb_gil_take(int64_t step, uint16_t rank, pb_gil_row *rows, int max)
{
    uintptr_t holder[SLOTS];
    int32_t held[SLOTS], taken;
    int n = 0;
    if (!running) return 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < SLOTS; i++) holder[i] = slots[i].holder, held[i] = slots[i].held;
    taken = samples_taken;
    memset(slots, 0, sizeof slots);
    samples_taken = 0;
    pthread_mutex_unlock(&lock);
    PyThreadState *me = PyThreadState_Get();
    for (int i = 0; i < SLOTS && n < max && holder[i]; i++) {
        pb_gil_row *r = &rows[n++];
        memset(r, 0, sizeof *r);
        r->step = step;
        r->held = held[i];
        r->samples = taken;
        r->rank = rank;
        r->training = (uintptr_t)me == holder[i];
        PyThreadState *t = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
        while (t && (uintptr_t)t != holder[i]) t = PyThreadState_Next(t);
        if (t) {
            r->thread_id = (int64_t)t->thread_id;
            r->name = thread_name(t->thread_id);
        } else {
            r->name = pb_intern_cstr("(exited thread)");
        }
    }
    return n;
}
