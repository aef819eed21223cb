/*
 * main.c - the `probing` command: dispatch.
 *
 * Accepted shapes (the target may come first, or as -t anywhere):
 *   probing [-t TARGET] [TARGET] COMMAND [OPTIONS] [ARGS]
 *   probing COMMAND -t TARGET [OPTIONS] [ARGS]
 * main() finds the command in the table (commands.c), has options.c parse the rest by the
 * command's row, resolves the target when the command needs one (target.c), and calls
 * cmd_<name>(). What each step says on a bad line is theirs: help.c prints help, suggest.c
 * answers an unknown command name, options.c a bad option.
 */
#include "client/client.h"
#include "cmd/command.h"
#include "commands.h"
#include "help.h"
#include "options.h"
#include "suggest.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses the command line and runs the command. Returns the exit status. */
static int run(int argc, char **argv)
{
    pb_cli_args a;
    int i = 1, rc;
    memset(&a, 0, sizeof a);

    rc = pb_options_parse_global(argc, argv, &i, &a);
    if (rc == PB_OPTIONS_HELP) {
        pb_help_print(stdout);
        return PB_EXIT_OK;
    }
    if (rc == PB_OPTIONS_VERSION) {
        printf("probing %s\n", PB_VERSION);
        return PB_EXIT_OK;
    }
    if (rc != PB_OPTIONS_GO_ON) return rc;
    if (i >= argc) {
        pb_help_print(stderr);
        return PB_EXIT_USAGE;
    }
    if (strcmp(argv[i], "help") == 0 && !a.target) { /* probing help [COMMAND] */
        if (i + 1 >= argc) {
            pb_help_print(stdout);
            return PB_EXIT_OK;
        }
        const pb_command *h = pb_commands_find(argv[i + 1]);
        if (!h || !h->run) return pb_suggest_unknown_command(argv[i + 1]);
        if (i + 2 < argc)
            return pb_cli_usage_error("help takes one command name (got '%s' too): probing help "
                                      "%s", argv[i + 2], h->name);
        pb_help_command(h);
        return PB_EXIT_OK;
    }
    const pb_command *c = pb_commands_find(argv[i]);
    if (!c) {
        int next_is_command = i + 1 < argc && pb_commands_find(argv[i + 1]);
        if (!pb_target_looks_like(argv[i]) && !next_is_command)
            return pb_suggest_unknown_command(argv[i]);
        if (pb_options_set_target(&a, argv[i])) return PB_EXIT_USAGE;
        /* Several targets before the command (export of several recordings). */
        while (i + 2 < argc && !pb_commands_find(argv[i + 1]) &&
               pb_target_looks_like(argv[i + 1])) {
            if (!a.more_targets && !(a.more_targets = calloc((size_t)argc, sizeof(char *))))
                return pb_cli_error("out of memory");
            a.more_targets[a.more_target_count++] = argv[++i];
        }
        if (++i >= argc) {
            rc = pb_cli_usage_error("missing command after the target: probing %s query "
                                    "\"SELECT ...\" (see 'probing --help')", a.target);
            goto done;
        }
        if (!(c = pb_commands_find(argv[i]))) {
            rc = pb_suggest_unknown_command(argv[i]);
            goto done;
        }
    }
    if (!c->run) {
        rc = pb_cli_usage_error("'%s' is not available in this version of probing (%s); see "
                                "'probing --help'", c->name, PB_VERSION);
        goto done;
    }
    a.command = c->name;
    rc = pb_options_parse(c, argc, argv, i + 1, &a);
    if (rc == PB_OPTIONS_HELP) {
        pb_help_command(c);
        rc = PB_EXIT_OK;
        goto done;
    }
    if (rc == PB_OPTIONS_GO_ON && a.more_target_count && !(c->needs & PB_CMD_TARGETS))
        rc = pb_cli_usage_error("%s takes one target, not %d; only export takes several",
                                c->name, a.more_target_count + 1);
    /* A PB_CMD_PID command (backtrace, inject) works on the process from outside: its target is
     * a pid, not an agent. */
    if (rc == PB_OPTIONS_GO_ON && a.target && !(c->needs & PB_CMD_PID)) {
        int resolve_rc = pb_target_resolve(a.target, &a.resolved);
        if (resolve_rc) rc = resolve_rc;
    }
    if (rc == PB_OPTIONS_GO_ON) rc = c->run(&a);
done:
    free(a.positional);
    free(a.more_targets);
    return rc;
}

int main(int argc, char **argv)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
        return pb_cli_error("cannot initialise libcurl");
    int rc = pb_client_exit_status(run(argc, argv));
    if (fflush(stdout) != 0 && rc == PB_EXIT_OK) {
        pb_cli_error("cannot write the output: %s", strerror(errno));
        rc = PB_EXIT_ERROR;
    }
    curl_global_cleanup();
    return rc;
}
