/*
 * error.h - the one place error codes are defined.
 *
 * Functions return int: 0 on success, a negative errno (-ENOMEM, -EINVAL, ...) or one of the
 * PB_E* codes below (all negative and far from errno values). pb_strerror() turns either kind
 * into a short English phrase; messages a user reads are composed at the boundaries (SQL, HTTP,
 * CLI) on top of it. A failure is never a bare -1: that is -EPERM, and pb_strerror would
 * misname it.
 *
 * The layers that talk to a user (src/cli: its client/, cmd/, out/, serve/) keep four kinds of
 * function apart, and a header says which kind each one is:
 *   - quiet (prints nothing): returns 0 or a negative code of this header and, where it has
 *     one, leaves a message for the user in a buffer the caller passed (err/why);
 *   - printing (its name or contract says it prints, "probing: ..." on stderr): returns a
 *     PB_EXIT_* code of src/cli/out/cli.h, which the command passes on as its exit status;
 *   - predicate: returns 1 or 0 and is named as a question (pb_target_is_pid, is_recording);
 *   - constructor: returns the new object, or NULL on failure (its contract says whether it
 *     printed why).
 * Callers of a quiet function test its result against 0 (< 0 or != 0), never against one value
 * unless the contract names that value.
 */
#ifndef PB_COMMON_ERROR_H
#define PB_COMMON_ERROR_H

enum {
    PB_EINTERNAL = -10000, /* a bug in probing */
    PB_ESQL = -10001,      /* SQLite rejected or failed a statement */
    PB_ETOOBIG = -10002,   /* a result or request exceeded its limit */
    PB_ETIMEOUT = -10003,  /* an operation did not finish before its deadline */
    PB_ENOPYTHON = -10004, /* the Python interpreter is not available */
    PB_EDISABLED = -10005, /* the agent is turned off (forked child, failed start) */
    PB_EBADTOKEN = -10006, /* a TCP token given by the user is unusable */
    PB_ECANCELLED = -10007, /* stopped on purpose: the client left or the agent is stopping */
    PB_EBUSY = -10008,     /* a shared budget (results in flight) is spent; try again later */
    PB_ESTOPPED = -10009,  /* the process asked is stopped (SIGSTOP, Ctrl-Z, a debugger) */
};

/* Returns a static string describing err (negative errno or PB_E*). [any thread] */
const char *pb_strerror(int err);

#endif
