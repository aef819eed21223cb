/*
 * usage.h - a command's usage line ("probing <target> query \"SQL\" [-f table|csv|json] ..."),
 * made from its row of the command table and its option table (usage.c), for the help and for
 * the errors that quote it.
 */
#ifndef PB_CLI_USAGE_H
#define PB_CLI_USAGE_H

#include "commands.h"

#include <stddef.h>

enum { PB_USAGE_MAX = 512 }; /* room for the longest usage line, with its NUL */

/* Writes c's usage line into line (size bytes, NUL-terminated, cut when it does not fit):
 * "probing", the target it takes by its needs (<target>, <pid>, <target-or-recording...>),
 * its name, then each row of its option table in order (option.h: [-s VALUE], [--long VALUE],
 * [--flag], a row's PB_USAGE text, a PB_OPTION_ARGUMENTS row's arguments). Returns line.
 * [any thread] */
const char *pb_usage_line(const pb_command *c, char *line, size_t size);

#endif
