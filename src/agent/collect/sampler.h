/*
 * sampler.h - one background thread that calls a function every period until stopped: the
 * start, the wait and the stop that the GIL (gil.c), memory (memsample.c) and system (sysmon.c)
 * samplers share.
 *
 * The thread blocks every signal (the program's signals must never be delivered to it) and waits
 * on a CLOCK_MONOTONIC condition variable, so a stop wakes it at once rather than after its
 * period. It never touches Python. Callers own the pb_sampler (a static, zero-initialised).
 */
#ifndef PB_AGENT_SAMPLER_H
#define PB_AGENT_SAMPLER_H

#include <pthread.h>

typedef struct pb_sampler {
    /* set by the owner before pb_sampler_start */
    void (*tick)(void);  /* one sample; [sampler thread] */
    long period_ms;
    int tick_first;      /* tick at once, then every period (else wait one period first) */
    int fixed_rate;      /* periods are counted from the start (else from the end of a tick) */
    /* the thread's */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int lock_ready, stop_requested, running;
} pb_sampler;

/* Starts the thread. Returns 0 (also when it already runs) or a negative errno. [one thread
 * at a time: the agent's start] */
int pb_sampler_start(pb_sampler *s);

/* Asks the thread to stop and joins it (at most one tick's time). No-op when not running.
 * [the agent's stop; not from the sampler thread] */
void pb_sampler_stop(pb_sampler *s);

/* The child after fork(): the thread does not exist there; forgets it and re-creates the lock
 * without touching what the parent's thread may have held. */
void pb_sampler_forget_after_fork(pb_sampler *s);

#endif
