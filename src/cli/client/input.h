/*
 * input.h - the text a command takes from its arguments or stdin.
 */
#ifndef PB_CLI_INPUT_H
#define PB_CLI_INPUT_H

/* Joins the count positional arguments (borrowed) with spaces, or reads stdin when the only
 * one is "-"; command is the command's name for the messages. Returns a malloc'ed string the
 * caller frees, or NULL after printing why (what names the thing in messages: "SQL", "code"). */
char *pb_input_text(const char *command, char **positional, int count, const char *what);

#endif
