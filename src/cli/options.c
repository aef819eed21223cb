/*
 * options.c - the options of the `probing` command line, before the command (-t, --token,
 * --help, --version) and after it: -t, --token, --help, and each command's own, by one loop over
 * the command's option table (option.h, declared beside the command in cmd/cmd_<name>.c). What
 * an option is, and what its value must be, is in its table row; this file only applies it.
 *
 * An argument is an option only when it starts with '-' and holds no whitespace, so SQL such as
 * "-- comment\nSELECT 1" passes as an argument; "--" ends the options. A valued option takes its
 * value as "-sVALUE", "-s VALUE", "--long=VALUE" or "--long VALUE". Each bad value gets a
 * message that says what is wanted, and exit status 2 (PB_EXIT_USAGE).
 */
#include "options.h"
#include "usage.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Options are arguments starting with '-' that are not "-" and contain no whitespace. */
static int is_option(const char *arg)
{
    return arg[0] == '-' && arg[1] && !strpbrk(arg, " \t\n\r");
}

/* Matches argv[*i] against -s / --long, taking a value as "-sVALUE", "-s VALUE", "--long=VALUE"
 * or "--long VALUE". Returns 1 (matched, *value set, *i advanced past a separate value), 0 (no
 * match) or -1 (matched but no value; message printed). */
static int match_valued(int argc, char **argv, int *i, char short_name, const char *long_name,
                        const char **value)
{
    const char *arg = argv[*i];
    size_t long_len = strlen(long_name);
    const char *attached = NULL;
    if (short_name && arg[0] == '-' && arg[1] == short_name) {
        if (arg[2]) attached = arg + 2;
    } else if (arg[0] == '-' && arg[1] == '-' && strncmp(arg + 2, long_name, long_len) == 0 &&
               (arg[2 + long_len] == '\0' || arg[2 + long_len] == '=')) {
        if (arg[2 + long_len] == '=') attached = arg + 3 + long_len;
    } else {
        return 0;
    }
    if (attached) {
        *value = attached;
        return 1;
    }
    if (*i + 1 >= argc) {
        pb_cli_error("option %s needs a value", arg);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

int pb_options_set_target(pb_cli_args *a, const char *target)
{
    if (a->target && strcmp(a->target, target) != 0)
        return pb_cli_usage_error("two targets given ('%s' and '%s'); give one", a->target,
                                  target);
    a->target = target;
    return 0;
}

static int unknown_option(const char *arg, const char *command_name)
{
    if (command_name)
        return pb_cli_usage_error("unknown option '%s' for %s; see 'probing %s --help' (use -- "
                                  "before an argument that starts with '-')", arg, command_name,
                                  command_name);
    return pb_cli_usage_error("unknown option '%s'; see 'probing --help'", arg);
}

/* Stores value, the value of option o typed as arg, into a by o's kind, after checking it.
 * Returns 0, or PB_EXIT_USAGE after printing what is wanted. */
static int store_value(const pb_command *c, const pb_option *o, const char *arg, const char *value,
                       pb_cli_args *a)
{
    char *field = (char *)a + o->offset;
    char *end;
    errno = 0;
    switch (o->kind) {
    case PB_OPTION_FILE:
        if (value[0] == '-' && value[1] == '-') {
            char spelled[3] = {'-', o->short_name, '\0'};
            return pb_cli_usage_error("%s needs a file name before '%s': probing %s %s%s FILE ...",
                                      arg, value, c->name, o->short_name ? spelled : "--",
                                      o->short_name ? "" : o->long_name);
        }
        /* fall through */
    case PB_OPTION_STRING:
        *(const char **)field = value;
        return 0;
    case PB_OPTION_INT: {
        long n = strtol(value, &end, 10);
        if (errno || end == value || *end || n < o->min || n > o->max)
            return pb_cli_usage_error("--%s wants %s, not '%s'", o->long_name, o->wants, value);
        *(int *)field = (int)n;
        return 0;
    }
    case PB_OPTION_SECONDS: {
        double t = strtod(value, &end);
        if (errno || end == value || *end || !isfinite(t) || t <= o->min || t > o->max)
            return pb_cli_usage_error("--%s wants %s, not '%s'", o->long_name, o->wants, value);
        *(double *)field = t;
        return 0;
    }
    case PB_OPTION_FLAG:
    case PB_OPTION_ARGUMENTS:
    case PB_OPTION_END:
        break;
    }
    return pb_cli_error("option %s has no kind of value (a defect of its table)", arg);
}

/* Matches argv[*i] against the options of c's table (option.h) and stores what it sets in a.
 * Returns 1 (matched and stored; *i advanced past a separate value), 0 (not one of c's
 * options) or -1 (matched, but its value is missing or wrong; message printed). */
static int match_table(const pb_command *c, int argc, char **argv, int *i, pb_cli_args *a)
{
    const char *arg = argv[*i];
    for (const pb_option *o = c->options; o && o->kind != PB_OPTION_END; o++) {
        if (o->kind == PB_OPTION_ARGUMENTS) continue; /* the usage line's, not an option */
        if (o->kind == PB_OPTION_FLAG) {
            if (arg[0] == '-' && arg[1] == '-' && strcmp(arg + 2, o->long_name) == 0) {
                *(int *)((char *)a + o->offset) = 1;
                return 1;
            }
            continue;
        }
        const char *value;
        int m = match_valued(argc, argv, i, o->short_name, o->long_name, &value);
        if (m == 0) continue;
        if (m < 0 || store_value(c, o, arg, value, a)) return -1;
        return 1;
    }
    return 0;
}

int pb_options_parse(const pb_command *c, int argc, char **argv, int i, pb_cli_args *a)
{
    int help = 0, positional_only = 0;
    const char *value = NULL;
    a->positional = calloc((size_t)argc + 1, sizeof *a->positional);
    if (!a->positional) return pb_cli_error("out of memory");
    for (; i < argc; i++) {
        const char *arg = argv[i];
        int m;
        if (c->needs & PB_CMD_EXEC) { /* everything from the first non-option is the command */
            if (strcmp(arg, "--") == 0) {
                i++;
                break;
            }
            if (!is_option(arg)) break;
        }
        if (positional_only || !is_option(arg)) {
            a->positional[a->positional_count++] = argv[i];
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            positional_only = 1;
        } else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            help = 1;
        } else if ((m = match_valued(argc, argv, &i, 't', "target", &value)) != 0) {
            if (m < 0 || pb_options_set_target(a, value)) return PB_EXIT_USAGE;
        } else if ((c->needs & PB_CMD_TARGET) &&
                   (m = match_valued(argc, argv, &i, 0, "token", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            pb_target_set_token(value);
        } else if ((m = match_table(c, argc, argv, &i, a)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
        } else {
            return unknown_option(arg, c->name);
        }
    }
    if (help) return PB_OPTIONS_HELP;
    if (c->needs & PB_CMD_EXEC) {
        if (a->target)
            return pb_cli_usage_error("run does not take a target; it starts a new process: "
                                      "probing run -- python train.py");
        a->exec_argv = argv + i;
        a->exec_argc = argc - i;
        if (a->exec_argc == 0)
            return pb_cli_usage_error("run needs a command after '--': probing run -- python "
                                      "train.py");
        return PB_OPTIONS_GO_ON;
    }
    if (a->positional_count && !(c->needs & PB_CMD_TEXT))
        return pb_cli_usage_error("%s takes no arguments (got '%s'); see 'probing %s --help'",
                                  c->name, a->positional[0], c->name);
    if (!(c->needs & PB_CMD_TARGET) && a->target)
        return pb_cli_usage_error("%s does not take a target (got '%s')", c->name, a->target);
    if ((c->needs & PB_CMD_TARGET) && !a->target) {
        char usage[PB_USAGE_MAX];
        return pb_cli_usage_error("%s needs a target: %s (see 'probing list')", c->name,
                                  pb_usage_line(c, usage, sizeof usage));
    }
    return PB_OPTIONS_GO_ON;
}

int pb_options_parse_global(int argc, char **argv, int *i, pb_cli_args *a)
{
    const char *value;
    int m;
    for (; *i < argc && is_option(argv[*i]); ++*i) {
        const char *arg = argv[*i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) return PB_OPTIONS_HELP;
        if (strcmp(arg, "-V") == 0 || strcmp(arg, "--version") == 0) return PB_OPTIONS_VERSION;
        if ((m = match_valued(argc, argv, i, 't', "target", &value)) != 0) {
            if (m < 0 || pb_options_set_target(a, value)) return PB_EXIT_USAGE;
            continue;
        }
        if ((m = match_valued(argc, argv, i, 0, "token", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            pb_target_set_token(value);
            continue;
        }
        return unknown_option(arg, NULL);
    }
    return PB_OPTIONS_GO_ON;
}
