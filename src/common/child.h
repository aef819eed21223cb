/*
 * child.h - the one way probing starts a child process (git's run-command.h, smaller): the web
 * view's `probing report --json` children and the browser (src/cli/serve/ui.c), `inject`'s
 * sys.remote_exec helper (cmd_inject.c) and `export --parquet`'s Python (cmd_export.c).
 * posix_spawn underneath: no code runs in the child between fork and exec, so a caller with
 * threads (the web view's server) may use it.
 * [any thread; the caller reaps what it starts]
 */
#ifndef PB_COMMON_CHILD_H
#define PB_COMMON_CHILD_H

#include <stddef.h>
#include <sys/types.h>

#include "buf.h"

/* Where one of the child's stdin, stdout and stderr comes from or goes (stdin: not PIPE). */
enum pb_child_io {
    PB_CHILD_INHERIT = 0, /* ours */
    PB_CHILD_NULL,        /* /dev/null */
    PB_CHILD_PIPE,        /* a pipe whose read end pb_child_start() returns */
};

typedef struct pb_child_opts {
    const char *file;   /* the executable: a path, or a name looked up in PATH when search */
    char *const *argv;  /* NULL-terminated; argv[0] is what the child sees as its name */
    char *const *envp;  /* NULL: this process's environ */
    int search;         /* 1: look file up in PATH (posix_spawnp) */
    enum pb_child_io in, out, err;
} pb_child_opts;

/* Starts the child. Sets *pid; for each stream that is PB_CHILD_PIPE, the read end of its pipe
 * (close-on-exec, the caller's to close) into *out_fd / *err_fd, else -1 there (both may be
 * NULL when no stream is a pipe). Borrows o and everything it points to. Returns 0, or a
 * negative errno (nothing started, nothing left open): -ENOENT when file is not there,
 * -EINVAL for in = PB_CHILD_PIPE. */
int pb_child_start(const pb_child_opts *o, pid_t *pid, int *out_fd, int *err_fd);

/* Reads out_fd into out and err_fd into err (either fd may be -1: not read; each buffer keeps
 * at most max bytes, the rest is read and dropped) until both reach end of file, timeout_ms
 * passes, or cancelled (may be NULL; polled every 200 ms) returns non-zero. Closes both fds.
 * Returns 0 (both ended), -ETIMEDOUT or -ECANCELED: then the child has been sent SIGKILL.
 * Does not reap the child: pb_child_wait() does. */
int pb_child_collect(pid_t pid, int out_fd, int err_fd, pb_buf *out, pb_buf *err, size_t max,
                     int timeout_ms, int (*cancelled)(void));

/* Waits for the child to end (retrying on EINTR). Returns its exit status (0 to 255), or -1
 * when it was killed by a signal or cannot be waited for. */
int pb_child_wait(pid_t pid);

#endif
