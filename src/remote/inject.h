/*
 * inject.h - running a piece of Python in another, already running CPython process, so that it
 * can load the probing agent (`probing <pid> inject`).
 *
 * CPython before 3.14 has no interface for this, so it is done the way debuggers do it, with as
 * little as possible happening inside the target:
 *   1. ptrace-seize and interrupt the main thread; save its general, floating-point and vector
 *      registers;
 *   2. make that thread call libc's mmap() (a plain system call wrapper: it takes no lock) for a
 *      private page, and write the Python source into it from outside (process_vm_writev);
 *   3. make it call Py_AddPendingCall(PyRun_SimpleString, page). That function only takes the
 *      interpreter's pending-calls lock; if a thread of the target holds that lock at this
 *      moment, the call cannot finish, so it runs under a watchdog: after a short wait the
 *      thread is interrupted, put back exactly as it was, and the whole attempt is retried;
 *   4. put every register back and detach. The thread resumes where it was (an interrupted
 *      system call restarts, as after any signal).
 * The interpreter runs the source at its next safe point: the main thread, holding the GIL,
 * between two bytecodes. Nothing of probing runs inside a stopped thread, in the middle of
 * another thread's allocation, or while locks are held. The source must not raise (the
 * pending call's return value would turn into an error in the user's code): the caller wraps
 * it in try/except.
 * x86_64 and aarch64 (the aarch64 path is compiled, not run, on the machines we test on).
 */
#ifndef PB_REMOTE_INJECT_H
#define PB_REMOTE_INJECT_H

#include <stddef.h>
#include <sys/types.h>

enum {
    PB_INJECT_ENOTPYTHON = -20101, /* no libpython / python executable with the needed symbols */
    PB_INJECT_ENOLIBC = -20102,    /* no libc with mmap() is mapped */
    PB_INJECT_EBUSY = -20103,      /* the pending-calls lock stayed held through every retry */
    PB_INJECT_EQUEUE = -20104,     /* the interpreter's pending-call queue is full */
    PB_INJECT_ECALL = -20105,      /* a call in the target failed (mmap, ...) */
};

/* What is known about the Python in pid. */
typedef struct pb_inject_python {
    char library[4096]; /* the file that defines Py_AddPendingCall */
    int major, minor;    /* 0 when unknown */
    int micro;           /* -1 when unknown (Py_Version, which has it, exists since 3.11) */
} pb_inject_python;

/* Finds the Python of pid. Returns 0, -ESRCH, -EPERM/-EACCES or PB_INJECT_ENOTPYTHON. */
int pb_inject_find_python(pid_t pid, pb_inject_python *py);

/* Tokens in the source replaced by the address and the size of the page that holds it, in 16
 * hex digits, so the code can give the page back once it runs: int("__PB_PAGE_ADDR__", 16). */
#define PB_INJECT_PAGE_ADDR "__PB_PAGE_ADDR__"
#define PB_INJECT_PAGE_SIZE "__PB_PAGE_SIZE__"

/* Queues source (NUL-terminated Python code, borrowed) to run in pid's main thread as above.
 * Returns 0 when queued, or a negative errno (-EPERM: not allowed to ptrace; -ESRCH: the
 * process is gone) or PB_INJECT_E*; writes a sentence about a failure into why. */
int pb_inject_source(pid_t pid, const char *source, char *why, size_t why_len);

#endif
