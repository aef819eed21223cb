/*
 * options.c - the options of the `probing` command line, before the command (-t, --token,
 * --help, --version) and after it (each command's own, by the PB_OPT_* bits of its row in
 * commands.c).
 *
 * An argument is an option only when it starts with '-' and holds no whitespace, so SQL such as
 * "-- comment\nSELECT 1" passes as an argument; "--" ends the options. A valued option takes its
 * value as "-sVALUE", "-s VALUE", "--long=VALUE" or "--long VALUE". Each bad value gets a
 * message that says what is wanted, and exit status 2 (PB_EXIT_USAGE).
 */
#include "options.h"

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
        } else if ((c->options & PB_OPT_FORMAT) &&
                   (m = match_valued(argc, argv, &i, 'f', "format", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            a->format = value;
        } else if ((c->options & PB_OPT_TIMEOUT) &&
                   (m = match_valued(argc, argv, &i, 0, "timeout", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            char *end;
            errno = 0;
            double t = strtod(value, &end);
            if (errno || end == value || *end || !isfinite(t) || t <= 0 || t > 7 * 86400)
                return pb_cli_usage_error("--timeout wants a number of seconds above 0 (up to "
                                          "604800), not '%s'", value);
            a->timeout_s = t;
        } else if ((c->options & PB_OPT_RANKS) &&
                   (m = match_valued(argc, argv, &i, 0, "ranks", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            a->ranks = value;
        } else if ((c->options & PB_OPT_DEADLINE) &&
                   (m = match_valued(argc, argv, &i, 0, "deadline", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            char *end;
            errno = 0;
            double t = strtod(value, &end);
            if (errno || end == value || *end || !isfinite(t) || t <= 0 || t > 3600)
                return pb_cli_usage_error("--deadline wants a number of seconds above 0 (up to "
                                          "3600), not '%s'", value);
            a->deadline_s = t;
        } else if ((c->options & PB_OPT_NATIVE) && strcmp(arg, "--native") == 0) {
            a->native = 1;
        } else if ((c->options & PB_OPT_JSON) && strcmp(arg, "--json") == 0) {
            a->json = 1;
        } else if ((c->options & PB_OPT_LAST) &&
                   (m = match_valued(argc, argv, &i, 0, "last", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            char *end;
            errno = 0;
            long n = strtol(value, &end, 10);
            if (errno || end == value || *end || n < 1 || n > 100000000)
                return pb_cli_usage_error("--last wants a number of steps of 1 or more, not '%s'",
                                          value);
            a->last_steps = (int)n;
        } else if ((c->options & PB_OPT_OUTPUT) &&
                   (m = match_valued(argc, argv, &i, 'o', "output", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            if (strcmp(value, "--") == 0 || (value[0] == '-' && value[1] == '-'))
                return pb_cli_usage_error("%s needs a file name before '%s': probing %s -o FILE "
                                          "...", arg, value, c->name);
            a->output = value;
        } else if ((c->options & PB_OPT_STAGE) &&
                   (m = match_valued(argc, argv, &i, 0, "stage", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            a->stage = value;
        } else if ((c->options & PB_OPT_FOLDED) && strcmp(arg, "--folded") == 0) {
            a->folded = 1;
        } else if ((c->options & PB_OPT_CAPTURE) &&
                   (m = match_valued(argc, argv, &i, 0, "steps", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            char *end;
            errno = 0;
            long n = strtol(value, &end, 10);
            if (errno || end == value || *end || n < 1 || n > PB_CLI_CAPTURE_MAX_STEPS)
                return pb_cli_usage_error("--steps wants a number of steps from 1 to %d, not '%s'",
                                          PB_CLI_CAPTURE_MAX_STEPS, value);
            a->steps = (int)n;
        } else if ((c->options & PB_OPT_CAPTURE) && strcmp(arg, "--memory") == 0) {
            a->memory = 1;
        } else if ((c->options & PB_OPT_CAPTURE) && strcmp(arg, "--shapes") == 0) {
            a->shapes = 1;
        } else if ((c->options & PB_OPT_CAPTURE) && strcmp(arg, "--stack") == 0) {
            a->stack = 1;
        } else if ((c->options & PB_OPT_RECORD) && strcmp(arg, "--stop") == 0) {
            a->stop = 1;
        } else if ((c->options & (PB_OPT_RECORD | PB_OPT_FORCE)) && strcmp(arg, "--force") == 0) {
            a->force = 1;
        } else if ((c->options & (PB_OPT_EXPORTER | PB_OPT_UI)) &&
                   (m = match_valued(argc, argv, &i, 0, "listen", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            a->listen = value;
        } else if ((c->options & PB_OPT_EXPORTER) &&
                   (m = match_valued(argc, argv, &i, 0, "sd", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            a->sd_file = value;
        } else if ((c->options & PB_OPT_PARQUET) &&
                   (m = match_valued(argc, argv, &i, 0, "parquet", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            a->parquet_dir = value;
        } else if ((c->options & PB_OPT_UI) && strcmp(arg, "--open") == 0) {
            a->open_browser = 1;
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
    if ((c->needs & PB_CMD_TARGET) && !a->target)
        return pb_cli_usage_error("%s needs a target: %s (see 'probing list')", c->name, c->usage);
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
