/*
 * cli.h - what every file of the `probing` command shares: exit codes, client timeouts and the
 * one way to print an error (cli.c). The parsed arguments and the command entry points are in
 * cmd/command.h; where the probing package is, in client/package.h.
 *
 * main.c has options.c parse the command line into a pb_cli_args and calls one cmd_<name>()
 * from the table in commands.c; each command returns the process exit code. Every message to
 * the user goes to stderr, starts with "probing: ", says what went wrong and, where there is
 * something to do, what to do next.
 */
#ifndef PB_CLI_CLI_H
#define PB_CLI_CLI_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

enum {
    PB_EXIT_OK = 0,
    PB_EXIT_ERROR = 1,   /* the request failed: SQL error, eval exception, target unreachable */
    PB_EXIT_USAGE = 2,   /* bad command line */
    PB_EXIT_TIMEOUT = 124, /* eval or capture timed out in the target, inject waited too long (as GNU timeout) */
    PB_EXIT_INTERRUPTED = 130, /* capture: Ctrl-C (the capture was cancelled) */
    PB_EXIT_PARTIAL = 3, /* --ranks, ranks, hang: some ranks did not answer (the others' output is printed) */
    PB_EXIT_STOPPED = 4, /* the target process is stopped (state T or t) and cannot answer */
};

/* Timeouts of the client, in milliseconds. */
#define PB_CLI_CONNECT_TIMEOUT_MS 5000L
#define PB_CLI_QUERY_TIMEOUT_MS 120000L
#define PB_CLI_INFO_TIMEOUT_MS 15000L
#define PB_CLI_LIST_TIMEOUT_MS 1000L
/* A request to a local process that is seen stopped (SIGSTOP, Ctrl-Z, a debugger) for this
 * long, from its first second on, ends with PB_ESTOPPED instead of waiting for its timeout. */
#define PB_CLI_STOPPED_FOR_MS 2000L

/* capture --steps bound; the agent's PB_CAPTURE_MAX_STEPS (api.h) says the same. */
#define PB_CLI_CAPTURE_MAX_STEPS 20

/* Prints "probing: <message>\n" on stderr and returns PB_EXIT_ERROR, so that a command can end
 * with `return pb_cli_error(...)` (git's error()). [main thread] */
int pb_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The same for a bad command line: prints "probing: <message>\n" on stderr and returns
 * PB_EXIT_USAGE. [main thread] */
int pb_cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A message kept to be printed later (after the rows it is about): appended to notes (a JSON
 * array of strings, borrowed) as its text without "probing: ". pb_cli_print_notes prints each
 * with pb_cli_error. [main thread] */
void pb_cli_note(json_t *notes, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pb_cli_print_notes(json_t *notes);

/* Where the messages for the user go: stderr, or the capture's stream while a capture is open.
 * A file that writes a message of more than one line (a caret under a SQL error, a traceback)
 * writes its further lines here, never to stderr itself. [main thread] */
FILE *pb_cli_messages(void);

/* Captures the messages (git's set_error_routine): from pb_cli_capture_begin() to
 * pb_cli_capture_end(), pb_cli_error, pb_cli_usage_error and every write to pb_cli_messages()
 * go into a buffer instead of stderr, with the same text, "probing: " included. The MCP server
 * (mcp/) runs the commands' own functions between the two, so that a failed tool answers with
 * the very message the command prints. Not nested. Returns 0, or -EBUSY (a capture is open) or
 * -ENOMEM. [main thread] */
int pb_cli_capture_begin(void);

/* Ends the capture: what was written (caller frees; "" when nothing), or NULL when out of
 * memory. Messages go to stderr again. [main thread] */
char *pb_cli_capture_end(void);

#endif
