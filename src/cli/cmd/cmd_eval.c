/*
 * cmd_eval.c - `probing <target> eval "CODE" [--timeout S]`.
 *
 * The code runs in the target's __main__ (client/eval.c: POST /api/eval). Its captured stdout
 * and stderr are written out verbatim; an exception's traceback goes to stderr (exit 1), a
 * timeout exits with PB_EXIT_TIMEOUT. A note of the agent's (the output was cut to its bound)
 * follows them on stderr as "probing: <note>"; the exit status stays the code's.
 */
#include "client/eval.h"
#include "client/input.h"
#include "cmd/command.h"

#include <stdio.h>
#include <stdlib.h>

/* The options of eval (option.h): the parser and 'eval --help' read them. */
const pb_option pb_options_eval[] = {
    PB_OPTION_ARGUMENTS("\"CODE\""),
    PB_OPTION_TIMEOUT("give up after S seconds (default 30); exit status 2 when it does"),
    PB_OPTION_TABLE_END,
};

int cmd_eval(const pb_cli_args *a)
{
    char *code = pb_input_text(a->command, a->positional, a->positional_count, "code");
    if (!code) return PB_EXIT_USAGE;
    json_t *answer = NULL;
    int rc = pb_eval_send(&a->resolved, code, a->timeout_s, stdout, &answer);
    json_decref(answer);
    free(code);
    return rc;
}
