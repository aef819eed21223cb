/*
 * stdio.h - the MCP stdio transport (the specification's "stdio"): newline-delimited JSON-RPC
 * messages on stdin and stdout, nothing else on stdout, logs on stderr.
 *
 * A reader thread splits stdin into lines while the server (mcp/server.c) answers one request at
 * a time on the main thread, so that what arrives meanwhile still counts: a
 * notifications/cancelled for the request in progress, or the end of stdin (the client went
 * away), makes pb_mcp_stdio_cancelled() true, which the client's requests to agents check
 * (pb_client_set_cancel, client.h) and so end within about a second. A line over the cap is
 * discarded to its newline and handed on as PB_MCP_TOO_LONG, for an error answer.
 */
#ifndef PB_CLI_MCP_STDIO_H
#define PB_CLI_MCP_STDIO_H

#include <jansson.h>
#include <stddef.h>

#define PB_MCP_MAX_LINE ((size_t)4 << 20) /* the longest message accepted: 4 MiB */

typedef enum pb_mcp_input_kind {
    PB_MCP_LINE,     /* a message (line holds it, without its newline) */
    PB_MCP_TOO_LONG, /* a line over PB_MCP_MAX_LINE, discarded */
    PB_MCP_EOF,      /* stdin ended (or failed): the session is over */
} pb_mcp_input_kind;

typedef struct pb_mcp_input {
    pb_mcp_input_kind kind;
    char *line; /* PB_MCP_LINE: malloc'ed, NUL-terminated (caller frees); else NULL */
    size_t len;
} pb_mcp_input;

/* Takes stdin and stdout over: their descriptors are kept for the protocol alone, fd 1 is
 * pointed at stderr and fd 0 at /dev/null, so that nothing printed or read by mistake can
 * corrupt or steal a message; SIGPIPE is ignored; the reader thread starts. Returns 0 or a negative errno. [main thread] */
int pb_mcp_stdio_start(void);

/* The next input, waiting for it. [main thread] */
void pb_mcp_stdio_next(pb_mcp_input *in);

/* Writes msg (borrowed) as one line on the protocol's stdout and flushes it. Returns 0, or -EPIPE
 * / -EIO when the client is gone, -ENOMEM. [main thread] */
int pb_mcp_stdio_send(json_t *msg);

/* The request being answered now (its id, borrowed until the next call; NULL: none), whose
 * notifications/cancelled the reader watches for. Clears the cancelled mark. [main thread] */
void pb_mcp_stdio_working_on(json_t *id);

/* 1 when the request being answered was cancelled by the client, or the client closed our
 * stdout; else 0.
 * [any thread] */
int pb_mcp_stdio_cancelled(void);

/* Ends the reader (after PB_MCP_EOF it has ended by itself) and closes the protocol stream.
 * [main thread] */
void pb_mcp_stdio_stop(void);

#endif
