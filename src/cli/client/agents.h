/*
 * agents.h - the traced processes of this user on this machine, as `probing list` finds them:
 * the socket directory's live <pid>.sock, each asked for its /api/info with a short timeout.
 * `list` prints them; the MCP server's list_targets tool returns them (mcp/tools.c).
 */
#ifndef PB_CLI_AGENTS_H
#define PB_CLI_AGENTS_H

#include <jansson.h>
#include <stddef.h>

/* Scans the socket directory (paths.h; its name goes into dir, dirlen bytes) and asks every live
 * agent for GET /api/info (PB_CLI_LIST_TIMEOUT_MS each, so one stuck process cannot stall the
 * rest). On success *agents is an array (caller owns), in pid order, of each agent's /api/info
 * object, or {"pid", "endpoint", "error"} for one that did not answer properly (error says why:
 * "no answer within 1 s", "HTTP 500", ...); it is empty when no process is traced (or there is
 * no socket directory yet), and 0 is returned. On failure (another user's directory, an
 * unreadable one) prints the error ("probing: ...") and returns PB_EXIT_ERROR. [main thread] */
int pb_agents_list(char *dir, size_t dirlen, json_t **agents);

#endif
