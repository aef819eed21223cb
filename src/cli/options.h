/*
 * options.h - parsing the `probing` command line into a pb_cli_args (options.c): the options
 * before the command and those after it, by the option table of the command's row.
 *
 * Both parsers print what is wrong ("probing: unknown option '--x' for query; see ...") and
 * return PB_EXIT_USAGE on a bad command line; what main.c does next they say with the
 * PB_OPTIONS_* codes below (negative, so never an exit status).
 */
#ifndef PB_CLI_OPTIONS_H
#define PB_CLI_OPTIONS_H

#include "commands.h"

enum {
    PB_OPTIONS_GO_ON = -1,   /* parsed: run the command */
    PB_OPTIONS_HELP = -2,    /* -h/--help was given: print the help, exit 0 */
    PB_OPTIONS_VERSION = -3, /* -V/--version was given (before the command) */
};

/* Parses the options before the command, from argv[*i] on, stopping at the first argument that
 * is not an option (*i is left on it): -t/--target (into a->target), --token (for the target
 * resolution), -h/--help and -V/--version (returned at once). Returns PB_OPTIONS_GO_ON,
 * PB_OPTIONS_HELP, PB_OPTIONS_VERSION, or PB_EXIT_USAGE after printing why. [main thread] */
int pb_options_parse_global(int argc, char **argv, int *i, pb_cli_args *a);

/* Parses what follows command c's name (argv[i] on) into a: the options of c's option table
 * (option.h), -t/--target anywhere, positional arguments (a->positional, malloc'ed: the caller
 * frees it, also on error), and for a PB_CMD_EXEC command the command line to run.
 * Checks what c needs: a target or none, positional text or none. Returns PB_OPTIONS_GO_ON,
 * PB_OPTIONS_HELP (after the whole line parsed without error), or an exit status after
 * printing why. [main thread] */
int pb_options_parse(const pb_command *c, int argc, char **argv, int i, pb_cli_args *a);

/* Sets a->target, or, when a different target was already given, prints "two targets given"
 * and returns PB_EXIT_USAGE. Returns 0 when set. Borrows target. [main thread] */
int pb_options_set_target(pb_cli_args *a, const char *target);

#endif
