/*
 * commands.h - the table of the `probing` command's subcommands: for each, its entry point, its
 * table of options, what it needs (a target, a pid, text...), and its help text.
 *
 * main.c dispatches through it, options.c parses a command's arguments by the row's option
 * table, usage.c makes its usage line from it, help.c and suggest.c print from it. A command's
 * needs are flags here, read by those files, never a test of which function a command runs
 * (git's RUN_SETUP in git.c's table).
 *
 * To add a command: write cmd/cmd_<name>.c with cmd_<name>() and, beside it, its options as
 * `const pb_option pb_options_<name>[]` (option.h: each row drives the parser, the option's
 * help line and its place in the usage line; shared options such as -f or --deadline by their
 * PB_OPTION_* macro; the positional arguments by a PB_OPTION_ARGUMENTS row); declare both in
 * cmd/command.h; add a row to commands.c naming them, with the summary and the details (prose
 * only: the usage line and the option lines come from the table, usage.c and help.c).
 */
#ifndef PB_CLI_COMMANDS_H
#define PB_CLI_COMMANDS_H

#include "cmd/command.h"

#include <stddef.h>

/* What a command needs (pb_command.needs). */
enum {
    PB_CMD_TARGET = 1,     /* a target: an error without one; --token accepted */
    PB_CMD_TEXT = 2,       /* positional arguments (SQL, code, RANK.db files) */
    PB_CMD_RECORDINGS = 4, /* a recording file serves as target (recording.c answers it) */
    PB_CMD_PID = 8,        /* the target is a pid worked on from outside: not resolved to an
                            * agent before the command runs */
    PB_CMD_TARGETS = 16,   /* several targets before the command (export) */
    PB_CMD_EXEC = 32,      /* everything from the first non-option on is a command to run, and
                            * there must be one (run) */
};

typedef struct pb_command {
    const char *name;
    int (*run)(const pb_cli_args *a); /* NULL: planned, not in this version */
    const pb_option *options;         /* its options (option.h), declared beside the command
                                       * in cmd/cmd_<name>.c; NULL: none */
    unsigned needs;                   /* PB_CMD_*; also which target the usage line shows */
    const char *summary;
    const char *details;
} pb_command;

/* Every command, in the order `probing --help` lists them. */
extern const pb_command pb_commands_table[];
extern const size_t pb_commands_count;

/* The command named name (exactly), or NULL. [any thread] */
const pb_command *pb_commands_find(const char *name);

#endif
