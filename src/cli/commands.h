/*
 * commands.h - the table of the `probing` command's subcommands: for each, its entry point, the
 * options it accepts, what it needs (a target, a pid, text...), and its help text.
 *
 * main.c dispatches through it, options.c parses a command's arguments by its bits, help.c and
 * suggest.c print from it. A command's needs are flags here, read by those files, never a test
 * of which function a command runs (git's RUN_SETUP in git.c's table). To add a command: write
 * cmd/cmd_<name>.c, declare cmd_<name> in cmd/command.h, add a row to commands.c.
 */
#ifndef PB_CLI_COMMANDS_H
#define PB_CLI_COMMANDS_H

#include "cmd/command.h"

#include <stddef.h>

/* The options a command accepts (pb_command.options); options.c parses each. */
enum {
    PB_OPT_FORMAT = 1, PB_OPT_TIMEOUT = 2, PB_OPT_OUTPUT = 4, PB_OPT_JSON = 8, PB_OPT_LAST = 16,
    PB_OPT_STAGE = 32, PB_OPT_FOLDED = 64, PB_OPT_NATIVE = 128, PB_OPT_CAPTURE = 256,
    PB_OPT_RECORD = 512, PB_OPT_FORCE = 1024, PB_OPT_EXPORTER = 2048, PB_OPT_PARQUET = 4096,
    PB_OPT_UI = 8192, PB_OPT_RANKS = 16384, PB_OPT_DEADLINE = 32768
};

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
    unsigned options;                 /* PB_OPT_* it accepts */
    unsigned needs;                   /* PB_CMD_* */
    const char *usage;
    const char *summary;
    const char *details;
} pb_command;

/* Every command, in the order `probing --help` lists them. */
extern const pb_command pb_commands_table[];
extern const size_t pb_commands_count;

/* The command named name (exactly), or NULL. [any thread] */
const pb_command *pb_commands_find(const char *name);

#endif
