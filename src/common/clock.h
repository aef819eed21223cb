/*
 * clock.h - monotonic and wall clocks in nanoseconds.
 *
 * pb_now_ns() is CLOCK_MONOTONIC through the vDSO (about 20 ns); every duration probing records
 * comes from it. pb_wall_ns() is CLOCK_REALTIME. pb_thread_cpu_ns() is the calling thread's CPU
 * time (CLOCK_THREAD_CPUTIME_ID, a system call: about 0.3 us), -1 where there is none.
 * [any thread] [async-signal-safe]
 */
#ifndef PB_COMMON_CLOCK_H
#define PB_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t pb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t pb_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t pb_thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)) return -1;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The same two clocks in seconds, for deadlines and timestamps the CLI prints. */
static inline double pb_mono_s(void) { return (double)pb_now_ns() / 1e9; }
static inline double pb_wall_s(void) { return (double)pb_wall_ns() / 1e9; }

/* ---- deadlines: absolute struct timespec, as pthread_cond_timedwait(),
 * pthread_mutex_timedlock() and sem_timedwait() take them ----
 * Which clock: CLOCK_MONOTONIC for a condition variable made with
 * pthread_condattr_setclock(CLOCK_MONOTONIC); CLOCK_REALTIME for a default one and for
 * pthread_mutex_timedlock(). The one copy of this arithmetic: every waiter calls these. */

/* t as nanoseconds. */
static inline int64_t pb_timespec_ns(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* t + ns (ns may be negative), with tv_nsec kept in 0 to 999,999,999. */
static inline struct timespec pb_timespec_add_ns(struct timespec t, int64_t ns)
{
    t.tv_sec += (time_t)(ns / 1000000000);
    t.tv_nsec += (long)(ns % 1000000000);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    } else if (t.tv_nsec < 0) {
        t.tv_sec--;
        t.tv_nsec += 1000000000L;
    }
    return t;
}

/* 1 when a is strictly before b, else 0. */
static inline int pb_timespec_before(struct timespec a, struct timespec b)
{
    return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

/* clock's now plus ns nanoseconds (plus s seconds): the deadline of a wait that may last that
 * long. */
static inline struct timespec pb_deadline_ns(clockid_t clock, int64_t ns)
{
    struct timespec now;
    clock_gettime(clock, &now);
    return pb_timespec_add_ns(now, ns);
}

static inline struct timespec pb_deadline_s(clockid_t clock, double s)
{
    return pb_deadline_ns(clock, (int64_t)(s * 1e9));
}

#endif
