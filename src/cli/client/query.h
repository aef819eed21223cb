/*
 * query.h - one read-only SQL statement on a target, or on ranks of its job: what `probing
 * <target> query` prints and the MCP server's query tool returns (mcp/tools.c).
 */
#ifndef PB_CLI_QUERY_H
#define PB_CLI_QUERY_H

#include "client/target.h"

#include <jansson.h>
#include <stddef.h>

/* POST /api/query {"sql"} to t (borrowed), asking the agent to stop its rows below
 * max_result_bytes when that is > 0 (it cuts at a row boundary and says so). On success returns
 * 0 and *answer (caller owns) is the agent's object, whose "columns" and "rows" are arrays
 * ("truncated" true and "message" when it was cut). On failure prints the error: a SQL error as
 * "probing: SQL error: ..." followed by the statement's line and a caret under the byte the agent
 * names (psql-style, on pb_cli_messages()), or the connection's or the agent's message; returns
 * PB_EXIT_ERROR with *answer NULL. [main thread] */
int pb_query_run(const pb_target *t, const char *sql, size_t max_result_bytes, json_t **answer);

/* The same statement on the ranks of t's job that ranks selects ("all", "0,2-5"), in parallel,
 * waiting deadline_s seconds (0: the default of fanout.h). The rows come back with "rank" and
 * "host" columns first: *columns and *rows (caller owns; NULL when no rank answered with rows).
 * Problems known before the rows (a rank's result cut at its share of the answer budget; the SQL
 * error every rank gave) are printed at once; what is said after the rows (the ranks that did
 * not answer, and why) goes into *notes, an array of message strings without "probing: " (caller
 * owns, may be empty), for the caller to print after them. Returns PB_EXIT_OK, PB_EXIT_PARTIAL
 * (some ranks did not answer), PB_EXIT_ERROR (no rank did, or all refused the statement) or
 * PB_EXIT_USAGE (a bad ranks). [main thread] */
int pb_query_ranks(const pb_target *t, const char *sql, const char *ranks, double deadline_s,
                   json_t **columns, json_t **rows, json_t **notes);

#endif
