/*
 * tools.h - the MCP server's tools: list_targets, query, report, tables, info, backtrace, hang,
 * stragglers, ranks, compare, and eval when the server was started with --allow-eval.
 *
 * Each tool takes its arguments (checked against its input schema's names and types) and calls
 * the very function its command calls (client/: pb_agents_list, pb_query_run, pb_report_fetch,
 * ...), with the CLI's messages captured (out/cli.h); it answers with a text item (what the
 * command shows, bounded) and, for a result with fields or rows, "structuredContent" (the
 * document the command's --json or -f json prints). A failing call (bad arguments, an
 * unreachable target, a SQL error) is a result with "isError": true whose text is the
 * command's own message ("probing: ..."), never a JSON-RPC error.
 */
#ifndef PB_CLI_MCP_TOOLS_H
#define PB_CLI_MCP_TOOLS_H

#include <jansson.h>

/* The tools as tools/list answers them: an array of {name, title, description, inputSchema,
 * annotations} (caller owns); eval only when allow_eval. NULL when out of memory. */
json_t *pb_mcp_tools_list(int allow_eval);

/* Calls the tool name with args (an object or NULL; borrowed). Returns 0 with *result the
 * CallToolResult (caller owns), or -ENOENT when no tool has that name (eval without allow_eval
 * is a result with isError saying how to enable it), -ENOMEM. [main thread] */
int pb_mcp_tools_call(const char *name, json_t *args, int allow_eval, json_t **result);

#endif
