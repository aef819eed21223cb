/*
 * eval.h - Python code run in a target's __main__ (POST /api/eval): what `probing <target> eval`
 * prints and the MCP server's eval tool returns (mcp/tools.c; only with `probing mcp
 * --allow-eval`).
 */
#ifndef PB_CLI_EVAL_H
#define PB_CLI_EVAL_H

#include "client/target.h"

#include <jansson.h>
#include <stdio.h>

#define PB_EVAL_DEFAULT_TIMEOUT_S 30.0

/* Runs code (borrowed) in t with the agent's timeout timeout_s (<= 0: the default). Writes, as
 * `eval` shows them, the code's captured stdout to out, then to pb_cli_messages() (stderr) its
 * captured stderr, the agent's note ("probing: " and, e.g., that the output was cut), and the
 * traceback of an exception or the reason of a failure. Returns PB_EXIT_OK (the code ran to its
 * end), PB_EXIT_ERROR (it raised, or no answer came) or PB_EXIT_TIMEOUT; *answer (caller owns;
 * NULL when no answer came) is the agent's object: "ok", "stdout", "stderr", "error" (the
 * traceback), "message". [main thread] */
int pb_eval_send(const pb_target *t, const char *code, double timeout_s, FILE *out,
                json_t **answer);

#endif
