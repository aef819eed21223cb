/*
 * record.h - recordings: the agent's whole record kept in a SQLite file (PROBING_RECORD=path,
 * which `probing run -o path` sets), readable after the process is gone (docs/recordings.md).
 */
#ifndef PB_AGENT_RECORD_H
#define PB_AGENT_RECORD_H

#include "buf.h"

/* Starts the recorder when PROBING_RECORD is set: creates/truncates the file, writes the schema
 * and info_json (the /api/info body, borrowed for this call only) and starts the flush thread.
 * On any failure prints one warning and records nothing; training goes on. Also registers an
 * atexit flush and, when SIGTERM has the default action, a SIGTERM handler that flushes and
 * then terminates the process as SIGTERM would. [GIL held, registry complete] */
void pb_record_start(const pb_buf *info_json);

/* Stops the flush thread after a last flush. Safe to call when not started. [any thread;
 * call without the GIL: it joins a thread that never takes it] */
void pb_record_stop(void);

#endif
