/*
 * gil.h - who holds the GIL: a low-rate sampler (python.gil, docs/tables.md).
 *
 * A thread of the agent reads the interpreter's GIL state every PROBING_GIL_SAMPLE_MS (10 ms;
 * 0 turns it off) the way py-spy's --gil does: whether the GIL is locked and its last holder
 * (a PyThreadState pointer, never dereferenced by the sampler). At each step end the training
 * thread, holding the GIL, turns the counts into rows: the holder's thread id and name, and
 * whether it is the training thread. Supported on CPython 3.9-3.13 with a GIL; elsewhere the
 * sampler does not start and python.gil stays empty.
 */
#ifndef PB_AGENT_GIL_H
#define PB_AGENT_GIL_H

#include <Python.h>
#include <stdint.h>

typedef struct pb_gil_row {
    int64_t step;
    int64_t thread_id; /* threading.get_ident() of the holder; 0 when it has exited */
    int32_t held;      /* samples in the step in which this thread held the GIL */
    int32_t samples;   /* samples taken in the step (the GIL held or not) */
    uint32_t name;     /* intern id of the thread's name */
    uint16_t rank;
    uint8_t training;  /* 1 for the thread that ends the steps */
} pb_gil_row;

/* Starts the sampler once (later calls do nothing). Returns 0, or a negative errno; -ENOTSUP
 * when this Python has no readable GIL state. [GIL held] */
int pb_gil_start(void);

/* What the sampler does, in words for `probing <target> info`: "every 10 ms", "off
 * (PROBING_GIL_SAMPLE_MS=0)", "not supported on this Python (...)" or "starts at the first
 * step". Static text. [any thread] */
const char *pb_gil_status(void);

/* Stops and joins the sampler. [GIL held or not] */
void pb_gil_stop(void);

/* After fork in the child: the sampler thread does not exist there. */
void pb_gil_forget_after_fork(void);

/* The counts since the previous call as rows for `step` (at most max; returns how many) and
 * resets them: one row per holder, and the training thread's row (held 0 if it held none)
 * whenever at least one sample was taken, so that every sample is counted in some row. The
 * calling thread is the training thread. [GIL held] */
int pb_gil_take(int64_t step, uint16_t rank, pb_gil_row *rows, int max);

#endif
