/*
 * record.h - recordings: the agent's whole record kept in a SQLite file, readable after the
 * process is gone (docs/recordings.md). Started at agent start when PROBING_RECORD is set
 * (`probing run -o path`), or on a live agent through POST /api/record (`probing <pid> record
 * -o path`); one recording at a time, stopped by POST /api/record/stop, agent stop or exit.
 */
#ifndef PB_AGENT_RECORD_H
#define PB_AGENT_RECORD_H

#include "buf.h"

/* The one reset of the recorder's state (one struct in record.c): what the last agent in this
 * process left (its last recording's path and counts, after a detach) or what a forked child
 * must not inherit (the parent's recording: its thread, connection and file lock; SIGTERM's
 * handler, which only the parent's recorder thread acts on). Kept: what belongs to the process
 * (how it exits, an uncaught exception, the on_exit() registration). forked=0: agent start,
 * before pb_record_expect [GIL held, no server or recorder thread]; forked=1: the child after
 * fork(), from the atfork handler (only flags, close() and making the locks anew: the child has
 * one thread and any lock may have been held). */
void pb_record_reset(int forked);

/* Agent start, before the server listens: from now on until pb_record_start() (or
 * pb_record_stop()), a record request waits for the recorder (at most PB_RECORD_START_WAIT_MS)
 * instead of being refused, so `probing <pid> record` works as soon as the socket is there.
 * [GIL held] */
void pb_record_expect(void);

#define PB_RECORD_START_WAIT_MS 10000

/* Agent start: opens the recorder for requests and, when PROBING_RECORD is set, starts
 * recording into it (the file is replaced), with info_json (the /api/info body, borrowed for
 * this call only) as the file's info row. On any failure prints one warning and records
 * nothing; training goes on. [GIL held, registry complete] */
void pb_record_start(const pb_buf *info_json);

/* Keeps the file's info row current: every flush replaces it with what fn writes (the
 * /api/info body now: step, torch, detail), so a recording's `info` shows the job's last state,
 * not its state at start. NULL writes the body once more, then stops the refresh (agent stop,
 * before the hooks fn reads are removed): the row keeps that last body. fn runs on the recorder
 * thread and here, never takes the GIL. [any thread; NULL: takes the recorder's locks, waits
 * for a flush in progress] */
typedef int (*pb_record_info_fn)(void *ctx, pb_buf *out);
void pb_record_refresh_info(pb_record_info_fn fn);

/* Agent stop (and the C atexit fallback): stops a recording after a last flush and refuses new
 * ones until the next pb_record_start(). Safe to call when nothing records. [any thread; call
 * without the GIL: it joins a thread that never takes it] */
void pb_record_stop(void);

/* The interpreter is exiting (the agent's Python atexit handler, before it stops the agent):
 * the recording closed next ends in state 'exited' or 'exception', and exit() later adds the
 * exit status to it (docs/recordings.md, "How the job ended"). [GIL held] */
void pb_record_exiting(void);

/* An uncaught exception ended (or is about to end) the program: its type, message and
 * formatted stack (copied) go into the recording's `run` row when it closes. NULL clears.
 * [any thread] */
void pb_record_note_exception(const char *type, const char *message, const char *stack);

/* For another SIGTERM handler that stands where the recorder's own would (the agent's, which
 * removes the socket files first): when a recorder runs, marks SIGTERM seen, so that the
 * recorder thread makes its last flush and re-sends SIGTERM with the default action, and
 * returns 1; returns 0 when nothing records (the caller then ends the process itself).
 * [async-signal-safe] */
int pb_record_take_sigterm(void);

/* Names that handler (NULL: none), so that the status the recorder reports says SIGTERM
 * flushes the recording while that handler is SIGTERM's. [any thread] */
void pb_record_sigterm_via_agent(void (*handler)(int));

/* ---- the /api/record routes; each fills out and returns the HTTP status [server thread] ---- */

/* Starts recording into path (absolute; routes.c checks it), with info_json (borrowed) as the
 * file's info row. The file must not exist unless force is set (then it is replaced). The
 * recording begins at the oldest row each ring still holds; rows already overwritten are
 * counted in the file's tables.rows_dropped. The rows are copied by the recorder thread, so this
 * returns at once: 200 with the status (pb_record_status). 409 when the file exists (without
 * force) or a recording runs; 400 when the path cannot be created (nothing changes then; with
 * force, the old file is only removed when its directory lets a new one be made); 503 when
 * leaving (the agent was asked to detach) or after pb_record_stop(), or without tables, or when
 * the agent is still starting after PB_RECORD_START_WAIT_MS (pb_record_expect: it waits until
 * then); 500 when SQLite or the thread cannot start. */
int pb_record_request_start(const char *path, int force, int leaving, const pb_buf *info_json,
                            pb_buf *out);

/* Stops the recording after a last flush and closes the file: 200 with the final status; 409
 * when nothing records. Joins the recorder thread (which never takes the GIL). */
int pb_record_request_stop(pb_buf *out);

/* 200 with {"recording", "path", "started_unix", "flush_every_ms", "on_sigterm", "flushes",
 * "rows": {"schema.table": n}, "rows_dropped": {...}, "error"}: the current recording, or the
 * last one of this agent (recording false), or nulls and empty objects when none was made.
 * Never waits for a flush. */
int pb_record_status(pb_buf *out);

#endif
