/*
 * option.h - how a command declares its options: one table per command, beside the command
 * (cmd/cmd_<name>.c exports pb_options_<name>[]), that drives the parser (options.c), the
 * option lines of `probing <command> --help` (help.c) and the command's usage line (usage.c).
 * git's parse-options `struct option`.
 *
 * A row says the option's spelling, what kind of value it takes and its bounds, where the value
 * goes in pb_cli_args (an offsetof), and its help line. Options that several commands accept
 * (-f, -o, --timeout, --ranks, --deadline, --json, --force, --listen) are defined once, by the
 * PB_OPTION_* macros below; the command gives only its own help line (and, for -f and -o, the
 * values or file it means), so their spelling, checks and error messages are the same in every
 * command. A table ends with PB_OPTION_TABLE_END. Header only: the commands, the parser and
 * the help all stand above it.
 *
 * The usage line ("probing <target> query \"SQL\" [-f table|csv|json] ...") is the rows in
 * order: each option as [-s VALUE] or [--long VALUE], and the command's positional arguments
 * where a PB_OPTION_ARGUMENTS row stands. What a flat table cannot say (an option that must be
 * given, one that only goes with another, alternatives) a row says by PB_USAGE(text) after its
 * help line: the text stands for it in the usage line ("" when another row's text shows it).
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
    PB_OPTION_ARGUMENTS, /* not an option: where the usage line shows the command's positional
                          * arguments (its usage text); the parser and the option lines skip it */
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
    const char *usage;      /* NULL: the usage line shows it as [-s VALUE] or [--long VALUE];
                             * else the text that stands for it there ("": none, another row's
                             * text shows it). Set by PB_USAGE() */
} pb_option;

/* The rows, by designated initializers. Each macro's last arguments are the help line and,
 * optionally, PB_USAGE(text) for the usage line; a field not named is 0 or NULL. */
#define PB_USAGE(text) .usage = (text)
#define PB_USAGE_SHOWN_ABOVE PB_USAGE("") /* a row above's PB_USAGE text shows this option */

/* A command's own option (one command accepts it). */
#define PB_OPTION_FLAG_(long_, field, ...)                                                   \
    {.kind = PB_OPTION_FLAG, .long_name = long_, .offset = offsetof(pb_cli_args, field),     \
     .help = __VA_ARGS__}
#define PB_OPTION_STRING_(short_, long_, value_, field, ...)                                 \
    {.kind = PB_OPTION_STRING, .short_name = short_, .long_name = long_, .value_name = value_, \
     .offset = offsetof(pb_cli_args, field), .help = __VA_ARGS__}
#define PB_OPTION_INT_(long_, value_, field, min_, max_, wants_, ...)                        \
    {.kind = PB_OPTION_INT, .long_name = long_, .value_name = value_,                        \
     .offset = offsetof(pb_cli_args, field), .min = min_, .max = max_, .wants = wants_,       \
     .help = __VA_ARGS__}

/* The command's positional arguments, as its usage line shows them ("\"SQL\"", "[RANK.db ...]"),
 * at this place among its options. Which arguments it takes is its PB_CMD_* needs. */
#define PB_OPTION_ARGUMENTS(text) {.kind = PB_OPTION_ARGUMENTS, .usage = (text)}

/* The options several commands accept: one definition each. */
#define PB_OPTION_FORMAT(values, ...) PB_OPTION_STRING_('f', "format", values, format, __VA_ARGS__)
#define PB_OPTION_OUTPUT(file, ...)                                                         \
    {.kind = PB_OPTION_FILE, .short_name = 'o', .long_name = "output", .value_name = file,    \
     .offset = offsetof(pb_cli_args, output), .help = __VA_ARGS__}
#define PB_OPTION_TIMEOUT(...)                                                              \
    {.kind = PB_OPTION_SECONDS, .long_name = "timeout", .value_name = "S",                  \
     .offset = offsetof(pb_cli_args, timeout_s), .min = 0, .max = 7 * 86400,                \
     .wants = "a number of seconds above 0 (up to 604800)", .help = __VA_ARGS__}
#define PB_OPTION_DEADLINE(...)                                                             \
    {.kind = PB_OPTION_SECONDS, .long_name = "deadline", .value_name = "S",                 \
     .offset = offsetof(pb_cli_args, deadline_s), .min = 0, .max = 3600,                     \
     .wants = "a number of seconds above 0 (up to 3600)", .help = __VA_ARGS__}
#define PB_OPTION_RANKS(...) PB_OPTION_STRING_(0, "ranks", "R", ranks, __VA_ARGS__)
#define PB_OPTION_JSON(...) PB_OPTION_FLAG_("json", json, __VA_ARGS__)
#define PB_OPTION_FORCE(...) PB_OPTION_FLAG_("force", force, __VA_ARGS__)
#define PB_OPTION_LISTEN(...) PB_OPTION_STRING_(0, "listen", "ADDR:PORT", listen, __VA_ARGS__)
/* --ranks with --deadline (which applies only to --ranks), as query and timeline show them. */
#define PB_USAGE_RANKS_DEADLINE PB_USAGE("[--ranks all|0,2-5 [--deadline S]]")
#define PB_OPTION_TABLE_END {.kind = PB_OPTION_END}

#endif
