/*
 * suggest.h - what `probing` says about an unknown command name (suggest.c).
 */
#ifndef PB_CLI_SUGGEST_H
#define PB_CLI_SUGGEST_H

/* Prints "probing: unknown command 'NAME'; did you mean 'GUESS'? (see 'probing help')", or
 * without a guess "probing: unknown command 'NAME'; see 'probing --help'", on stderr. Returns
 * PB_EXIT_USAGE. [main thread] */
int pb_suggest_unknown_command(const char *name);

#endif
