/*
 * recording.h - answering the agent's HTTP API from a recording file, in the CLI.
 *
 * A PB_TARGET_FILE target (probing run.db query ...) has no process to talk to: client.c hands
 * its requests here, and every command works unchanged on the same JSON. /api/query runs the
 * SQL through src/sql's pb_db_open_file (same engine, same authorizer, same JSON as live);
 * /api/tables is built from probe.tables; /api/info is the agent's info saved at start; eval
 * is refused (there is no process).
 */
#ifndef PB_CLI_RECORDING_H
#define PB_CLI_RECORDING_H

#include "client/response.h"
#include "client/target.h"

#include <stddef.h>

/* Same contract as pb_client_request(); its failures are pb_db_open_file's (-ENOMEM, PB_ESQL:
 * not a readable recording) or -ENOMEM. Every statement on the file, the check that opens it
 * included, stops after PROBING_QUERY_TIMEOUT (the CLI's environment, 30 s) or timeout_ms,
 * whichever is shorter (timeout_ms <= 0: no deadline of its own). [main thread, or one thread
 * at a time] */
int pb_recording_request(const pb_target *t, const char *method, const char *path,
                         const char *body, long timeout_ms, pb_response *resp, char *err,
                         size_t errlen);

/* Stops the statements running on every open recording (pb_db_interrupt): a command that ends
 * on a signal calls it so that threads reading a file end too. [any thread] */
void pb_recording_interrupt_all(void);

#endif
