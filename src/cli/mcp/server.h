/*
 * server.h - `probing mcp`: a Model Context Protocol server on stdin/stdout (docs/mcp.md).
 *
 * Layers, each calling only the ones below it:
 *   server.c     JSON-RPC 2.0 and MCP's lifecycle: initialize (the protocol version and the
 *                capabilities), ping, the methods' table, the error codes
 *   tools.c      the tools, prompts.c the prompts, resources.c the resources
 *   stdio.c      the transport: newline-delimited messages, a reader thread, cancellation
 * The tools call the commands' own functions in client/ (no second implementation of any
 * command); cmd/cmd_mcp.c only parses `probing mcp [--allow-eval]` and calls pb_mcp_serve.
 */
#ifndef PB_CLI_MCP_SERVER_H
#define PB_CLI_MCP_SERVER_H

typedef struct pb_mcp_options {
    int allow_eval; /* the eval tool exists (--allow-eval) */
} pb_mcp_options;

/* Serves MCP on stdin/stdout until stdin ends (the client closed it or went away). Returns
 * PB_EXIT_OK then, or PB_EXIT_ERROR when stdio cannot be taken over (said on stderr). [main
 * thread, once] */
int pb_mcp_serve(const pb_mcp_options *opts);

#endif
