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

#endif
