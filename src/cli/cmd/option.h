/*
 * option.h - how a command declares its options: one table per command, beside the command
 * (cmd_<name>.c exports pb_options_<name>[]), that drives both the parser (options.c) and the
 * option lines of `probing <command> --help` (help.c). git's parse-options `struct option`.
 *
 * A row says the option's spelling, what kind of value it takes and its bounds, where the value
 * goes in pb_cli_args (an offsetof), and its help line. Options that several commands accept
 * (-f, -o, --timeout, --ranks, --deadline, --json, --force, --listen) are defined once, by the
 * PB_OPTION_* macros below; the command gives only its own help line (and, for -f and -o, the
 * values or file it means), so their spelling, checks and error messages are the same in every
 * command. A table ends with PB_OPTION_TABLE_END. Header only: the commands, the parser and
 * the help all stand above it.
 *
 * To add an option to a command: add a row to its table in cmd/cmd_<name>.c (and, when the
 * value needs a field, the field to pb_cli_args in cmd/command.h). Nothing else names it.
 */
#ifndef PB_CLI_OPTION_H
#define PB_CLI_OPTION_H

#include <stddef.h>

typedef enum pb_option_kind {
    PB_OPTION_END = 0, /* the end of a table */
    PB_OPTION_FLAG,    /* no value: sets an int field to 1 */
    PB_OPTION_STRING,  /* a value kept as typed: a const char * field (borrowed from argv) */
    PB_OPTION_FILE,    /* a file name: as STRING, but a value starting with "--" is refused
                        * ("-o needs a file name before '--'"), so -o never eats an option */
    PB_OPTION_INT,     /* a whole number from min to max: an int field */
    PB_OPTION_SECONDS, /* a number of seconds above min, up to max: a double field */
} pb_option_kind;

typedef struct pb_option {
    pb_option_kind kind;
    char short_name;        /* 'f' for -f, or 0 */
    const char *long_name;  /* "format" for --format (without the dashes) */
    const char *value_name; /* what the help calls the value ("FILE", "S"); NULL for a flag */
    size_t offset;          /* where the value goes: offsetof(pb_cli_args, field) */
    double min, max;        /* INT, SECONDS: the accepted range */
    const char *wants;      /* INT, SECONDS: what the error says is wanted ("--last wants
                             * <wants>, not 'x'") */
    const char *help;       /* the help line; NULL: the option is not listed (the usage line
                             * shows it). '\n' starts a new line; help.c wraps the rest */
} pb_option;

/* A command's own option (one command accepts it). */
#define PB_OPTION_FLAG_(long_, field, help_) \
    {PB_OPTION_FLAG, 0, long_, NULL, offsetof(pb_cli_args, field), 0, 0, NULL, help_}
#define PB_OPTION_STRING_(short_, long_, value_, field, help_) \
    {PB_OPTION_STRING, short_, long_, value_, offsetof(pb_cli_args, field), 0, 0, NULL, help_}
#define PB_OPTION_INT_(long_, value_, field, min_, max_, wants_, help_) \
    {PB_OPTION_INT, 0, long_, value_, offsetof(pb_cli_args, field), min_, max_, wants_, help_}

/* The options several commands accept: one definition each. */
#define PB_OPTION_FORMAT(values, help_) PB_OPTION_STRING_('f', "format", values, format, help_)
#define PB_OPTION_OUTPUT(file, help_) \
    {PB_OPTION_FILE, 'o', "output", file, offsetof(pb_cli_args, output), 0, 0, NULL, help_}
#define PB_OPTION_TIMEOUT(help_)                                                            \
    {PB_OPTION_SECONDS, 0, "timeout", "S", offsetof(pb_cli_args, timeout_s), 0, 7 * 86400, \
     "a number of seconds above 0 (up to 604800)", help_}
#define PB_OPTION_DEADLINE(help_)                                                          \
    {PB_OPTION_SECONDS, 0, "deadline", "S", offsetof(pb_cli_args, deadline_s), 0, 3600,   \
     "a number of seconds above 0 (up to 3600)", help_}
#define PB_OPTION_RANKS(help_) PB_OPTION_STRING_(0, "ranks", "R", ranks, help_)
#define PB_OPTION_JSON(help_) PB_OPTION_FLAG_("json", json, help_)
#define PB_OPTION_FORCE(help_) PB_OPTION_FLAG_("force", force, help_)
#define PB_OPTION_LISTEN(help_) PB_OPTION_STRING_(0, "listen", "ADDR:PORT", listen, help_)
#define PB_OPTION_TABLE_END {PB_OPTION_END, 0, NULL, NULL, 0, 0, 0, NULL, NULL}

#endif
