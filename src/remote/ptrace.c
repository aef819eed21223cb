/*
 * ptrace.c - stopping one thread of another process and waiting for its stops (see remote.h).
 * Shared by inject.c (calls made in the stopped main thread) and native.c (unwinding).
 */
#include "remote.h"

#include "clock.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>

#ifndef PTRACE_EVENT_STOP
#define PTRACE_EVENT_STOP 128
#endif

#define STOP_TIMEOUT_MS 5000

int pb_remote_wait_stop(pid_t tid, int *status, long timeout_ms)
{
    int64_t deadline = pb_now_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        pid_t r = waitpid(tid, status, __WALL | WNOHANG);
        if (r == tid) {
            if (WIFEXITED(*status) || WIFSIGNALED(*status)) return -ESRCH;
            if (WIFSTOPPED(*status)) return 0;
            continue;
        }
        if (r < 0 && errno != EINTR) return errno == ECHILD ? -ESRCH : -errno;
        if (pb_now_ns() >= deadline) return -ETIMEDOUT;
        struct timespec t = {0, 200 * 1000};
        nanosleep(&t, NULL);
    }
}

int pb_remote_is_event_stop(int status) { return (status >> 16) == PTRACE_EVENT_STOP; }

int pb_remote_interrupt(pid_t tid)
{
    int status;
    if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) != 0) return -errno;
    for (int i = 0; i < 64; i++) {
        int rc = pb_remote_wait_stop(tid, &status, STOP_TIMEOUT_MS);
        if (rc) return rc;
        if (pb_remote_is_event_stop(status)) return WSTOPSIG(status) == SIGTRAP ? 0 : -EAGAIN;
        /* A signal-delivery stop: let the signal through, the interrupt stays pending. */
        if (ptrace(PTRACE_CONT, tid, NULL, (void *)(uintptr_t)WSTOPSIG(status)) != 0) return -errno;
    }
    return -ETIMEDOUT;
}

int pb_remote_stop(pid_t tid)
{
    if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) != 0) return -errno;
    int rc = pb_remote_interrupt(tid);
    if (rc) ptrace(PTRACE_DETACH, tid, NULL, NULL);
    return rc;
}

void pb_remote_release(pid_t tid) { ptrace(PTRACE_DETACH, tid, NULL, NULL); }
