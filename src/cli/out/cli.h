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

#include <stddef.h>

enum {
    PB_EXIT_OK = 0,
    PB_EXIT_ERROR = 1,   /* the request failed: SQL error, eval exception, target unreachable */
    PB_EXIT_USAGE = 2,   /* bad command line */
    PB_EXIT_TIMEOUT = 124, /* eval or capture timed out in the target, inject waited too long (as GNU timeout) */
    PB_EXIT_INTERRUPTED = 130, /* capture: Ctrl-C (the capture was cancelled) */
    PB_EXIT_PARTIAL = 3, /* --ranks, ranks, hang: some ranks did not answer (the others' output is printed) */
};

/* Timeouts of the client, in milliseconds. */
#define PB_CLI_CONNECT_TIMEOUT_MS 5000L
#define PB_CLI_QUERY_TIMEOUT_MS 120000L
#define PB_CLI_INFO_TIMEOUT_MS 15000L
#define PB_CLI_LIST_TIMEOUT_MS 1000L

/* capture --steps bound; the agent's PB_CAPTURE_MAX_STEPS (api.h) says the same. */
#define PB_CLI_CAPTURE_MAX_STEPS 20

/* Prints "probing: <message>\n" on stderr and returns PB_EXIT_ERROR, so that a command can end
 * with `return pb_cli_error(...)` (git's error()). [main thread] */
int pb_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The same for a bad command line: prints "probing: <message>\n" on stderr and returns
 * PB_EXIT_USAGE. [main thread] */
int pb_cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
