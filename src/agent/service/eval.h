/*
 * eval.h - run Python code inside the target on request, without ever deadlocking it.
 *
 * A dedicated eval thread takes the GIL (PyGILState_Ensure) and runs each request in
 * __main__'s namespace, capturing what that thread writes to sys.stdout/sys.stderr (other
 * threads' output still goes where it went). The server thread that asked waits with a deadline:
 *   - if the eval thread could not get the GIL in time (the main thread holds it in a long C call,
 *     or the process is deadlocked), the request is abandoned and never runs; the answer says so;
 *   - if the code itself runs past the deadline, the answer says so and a TimeoutError is raised
 *     inside the code (through a pending call, as soon as the interpreter gets to it).
 * An exception in the code (SystemExit included) is reported with its traceback and never
 * reaches the user's program.
 */
#ifndef PB_AGENT_EVAL_H
#define PB_AGENT_EVAL_H

#include "buf.h"
#include "db.h"

/* Starts the eval thread. Returns 0 or a negative errno. [GIL held] */
int pb_eval_start(void);

/* Fails every queued request ("the process is exiting") and tells the thread to end; waiting
 * server threads answer 503 at once. Called with the GIL held, it also raises KeyboardInterrupt
 * in a running eval and lets go of the GIL for at most 500 ms for it to end; it never joins
 * (the thread may be waiting for the GIL). [any thread] */
void pb_eval_shutdown(void);

/* In a forked child: forget the thread. [atfork child] */
void pb_eval_forget_after_fork(void);

/* Server callback (pb_eval_fn): runs code with a deadline of timeout_s seconds (<= 0: the
 * PROBING_EVAL_TIMEOUT default) and writes the JSON body of /api/eval into out_json.
 * [server thread, never holds the GIL] */
int pb_eval_run(void *ctx, const char *code, double timeout_s, pb_db_cancel_fn cancelled,
                void *cancel_ctx, pb_buf *out_json, int *http_status);

/* Readies the stream proxy type. [module init] */
int pb_eval_ready_types(void);

#endif
