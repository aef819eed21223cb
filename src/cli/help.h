/*
 * help.h - printing the help of `probing` and of one command (help.c), from the command table.
 */
#ifndef PB_CLI_HELP_H
#define PB_CLI_HELP_H

#include "commands.h"

#include <stdio.h>

/* Prints `probing --help` to out: the usage and summary of every command in the table, what a
 * target is, the options and exit statuses. [main thread] */
void pb_help_print(FILE *out);

/* Prints `probing <command> --help` to stdout: c's usage, summary and details, a line for each
 * option of its table that has a help line, then which target it takes (any, a live process, or
 * a pid) when it needs one. [main thread] */
void pb_help_command(const pb_command *c);

#endif
