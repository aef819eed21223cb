/*
 * input.h - the text a command takes from its arguments or stdin.
 */
#ifndef PB_CLI_INPUT_H
#define PB_CLI_INPUT_H

#include "command.h"

/* Joins the positional arguments with spaces, or reads stdin when the only one is "-".
 * Returns a malloc'ed string the caller frees, or NULL after printing why (what names the thing
 * in messages: "SQL", "code"). */
char *pb_input_text(const pb_cli_args *a, const char *what);

#endif
