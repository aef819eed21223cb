/*
 * cli.h - what the `probing` command's files share: parsed arguments, exit codes, the command
 * entry points and the helpers of cli.c (the one way to print an error).
 *
 * main.c has options.c parse the command line into a pb_cli_args and calls one cmd_<name>()
 * from the table in commands.c; each command returns the process exit code. Every message to
 * the user goes to stderr, starts with "probing: ", says what went wrong and, where there is
 * something to do, what to do next.
 */
#ifndef PB_CLI_CLI_H
#define PB_CLI_CLI_H

#include "target.h"

enum {
    PB_EXIT_OK = 0,
    PB_EXIT_ERROR = 1,   /* the request failed: SQL error, eval exception, target unreachable */
    PB_EXIT_USAGE = 2,   /* bad command line */
    PB_EXIT_TIMEOUT = 2, /* eval or capture timed out in the target */
    PB_EXIT_INTERRUPTED = 130, /* capture: Ctrl-C (the capture was cancelled) */
    PB_EXIT_PARTIAL = 3, /* --ranks, ranks, hang: some ranks did not answer (the others' output is printed) */
};

/* Timeouts of the client, in milliseconds. */
#define PB_CLI_CONNECT_TIMEOUT_MS 5000L
#define PB_CLI_QUERY_TIMEOUT_MS 120000L
#define PB_CLI_INFO_TIMEOUT_MS 15000L
#define PB_CLI_LIST_TIMEOUT_MS 1000L

/* capture --steps bound; the agent's PB_CAPTURE_MAX_STEPS (server.h) says the same. */
#define PB_CLI_CAPTURE_MAX_STEPS 20

typedef struct pb_cli_args {
    const char *command;    /* the command name as typed */
    const char *target;     /* as typed, NULL when none */
    pb_target resolved;     /* valid when target != NULL (resolved before the command runs) */
    const char *format;     /* -f/--format value, NULL when not given */
    double timeout_s;       /* --timeout value; 0 when not given */
    char **positional;      /* borrowed from argv */
    int positional_count;
    int json;               /* --json given */
    int last_steps;         /* --last N value; 0 when not given */
    const char *output;     /* -o/--output value (timeline, flamegraph), NULL when not given */
    const char *stage;      /* --stage value (flamegraph), NULL when not given */
    int folded;             /* --folded given */
    int native;             /* --native given (backtrace) */
    int steps;              /* --steps N (capture); 0 when not given */
    int memory, shapes, stack; /* capture: --memory, --shapes, --stack given */
    int stop, force;        /* record: --stop, --force given */
    const char *ranks;      /* --ranks all|0,2-5 (query, timeline), NULL when not given */
    double deadline_s;      /* --deadline S (ranks, hang, --ranks); 0 when not given */
    char **exec_argv;       /* run: the command after "--" (NULL-terminated, borrowed) */
    int exec_argc;
    const char *listen;     /* exporter, ui: --listen ADDR:PORT, NULL when not given */
    const char *sd_file;    /* exporter: --sd FILE, NULL when not given */
    const char *parquet_dir; /* export: --parquet DIR, NULL when not given */
    char **more_targets;    /* export: targets after the first one (borrowed from argv) */
    int more_target_count;
    int open_browser;       /* ui: --open given */
} pb_cli_args;

/* Prints "probing: <message>\n" on stderr and returns PB_EXIT_ERROR, so that a command can end
 * with `return pb_cli_error(...)` (git's error()). [main thread] */
int pb_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The same for a bad command line: prints "probing: <message>\n" on stderr and returns
 * PB_EXIT_USAGE. [main thread] */
int pb_cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Joins the positional arguments with spaces, or reads stdin when the only one is "-".
 * Returns a malloc'ed string the caller frees, or NULL after printing why (what names the thing
 * in messages: "SQL", "code"). */
char *pb_cli_positional_text(const pb_cli_args *a, const char *what);

/* Writes the directory that contains the probing Python package with its built extension into
 * out (run, inject, export, ui; where it is looked for: cli.c). Returns 0, or -1 when none is
 * found. */
int pb_cli_find_package(char *out, size_t outlen);

int cmd_list(const pb_cli_args *a);
int cmd_query(const pb_cli_args *a);
int cmd_eval(const pb_cli_args *a);
int cmd_tables(const pb_cli_args *a);
int cmd_info(const pb_cli_args *a);
int cmd_run(const pb_cli_args *a);
int cmd_report(const pb_cli_args *a);
int cmd_timeline(const pb_cli_args *a);
int cmd_flamegraph(const pb_cli_args *a);
int cmd_backtrace(const pb_cli_args *a);
int cmd_detach(const pb_cli_args *a);
int cmd_inject(const pb_cli_args *a);
int cmd_capture(const pb_cli_args *a);
int cmd_record(const pb_cli_args *a);
int cmd_exporter(const pb_cli_args *a);
int cmd_export(const pb_cli_args *a);
int cmd_ui(const pb_cli_args *a);
int cmd_ranks(const pb_cli_args *a);
int cmd_hang(const pb_cli_args *a);

#endif
