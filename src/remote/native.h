/*
 * native.h - the native (C) stack of one thread of another process, for
 * `probing <pid> backtrace --native`.
 *
 * The thread is stopped for the time of the walk (PTRACE_SEIZE + PTRACE_INTERRUPT, then
 * PTRACE_DETACH: it resumes where it was, an interrupted system call restarts) and unwound with
 * libunwind's ptrace accessors (libunwind-ptrace: DWARF CFI from .eh_frame, the same unwinder
 * many profilers use), which also name each frame from the ELF symbol tables. Python frames are
 * read without stopping anything (pystack.h); the two lists are shown side by side, not merged.
 * Built only when libunwind-ptrace is found (PB_HAVE_LIBUNWIND); otherwise pb_native_available()
 * is 0 and --native says so.
 */
#ifndef PB_REMOTE_NATIVE_H
#define PB_REMOTE_NATIVE_H

#include <stdint.h>
#include <sys/types.h>

typedef struct pb_native_frame {
    uint64_t ip;
    char symbol[160];  /* "" when unknown */
    uint64_t offset;   /* ip - start of symbol */
    char object[96];   /* base name of the mapped file that holds ip, "" when none */
} pb_native_frame;

/* 1 when this build can unwind native stacks. */
int pb_native_available(void);

/* Unwinds thread tid (a thread of pid) into frames (at most max, innermost first). Returns the
 * number of frames, or a negative errno (-EPERM: not allowed to ptrace; -ESRCH: the thread is
 * gone; -ENOSYS: not built with libunwind). */
int pb_native_stack(pid_t pid, pid_t tid, pb_native_frame *frames, int max);

#endif
