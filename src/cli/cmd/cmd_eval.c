/*
 * cmd_eval.c - `probing <target> eval "CODE" [--timeout S]`.
 *
 * POST /api/eval {"code", "timeout_s"}; the code runs in the target's __main__. Its captured
 * stdout and stderr are written out verbatim; an exception's traceback goes to stderr (exit 1),
 * a timeout exits 2. A note of the agent's (the output was cut to its bound) follows them on
 * stderr as "probing: <note>"; the exit status stays the code's. The HTTP timeout is the eval timeout plus a margin so that the server's own
 * 504 answer, which says which phase timed out, arrives before the client gives up.
 */
#include "client/client.h"
#include "client/input.h"
#include "cmd/command.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_DEFAULT_TIMEOUT_S 30.0
#define EVAL_HTTP_MARGIN_S 5.0

static void write_field(json_t *root, const char *key, FILE *to)
{
    json_t *v = json_object_get(root, key);
    if (!json_is_string(v)) return;
    fwrite(json_string_value(v), 1, json_string_length(v), to);
    fflush(to);
}

/* The options of eval (option.h): the parser and 'eval --help' read them. */
const pb_option pb_options_eval[] = {
    PB_OPTION_ARGUMENTS("\"CODE\""),
    PB_OPTION_TIMEOUT("give up after S seconds (default 30); exit status 2 when it does"),
    PB_OPTION_TABLE_END,
};

int cmd_eval(const pb_cli_args *a)
{
    double timeout_s = a->timeout_s > 0 ? a->timeout_s : EVAL_DEFAULT_TIMEOUT_S;
    char *code = pb_input_text(a->command, a->positional, a->positional_count, "code");
    if (!code) return PB_EXIT_USAGE;

    json_t *request = NULL, *root = NULL;
    long status;
    int rc = PB_EXIT_ERROR;
    json_t *code_value = json_string(code);
    if (!code_value) {
        pb_cli_error("the code is not valid UTF-8");
        goto done;
    }
    json_t *timeout_value = timeout_s == floor(timeout_s) ? json_integer((json_int_t)timeout_s)
                                                          : json_real(timeout_s);
    request = json_pack("{s:o,s:o}", "code", code_value, "timeout_s", timeout_value);
    if (!request) {
        pb_cli_error("out of memory");
        goto done;
    }
    long http_timeout_ms = (long)((timeout_s * 1.1 + EVAL_HTTP_MARGIN_S) * 1000);
    rc = pb_client_call(&a->resolved, "POST", "/api/eval", request, http_timeout_ms, &root,
                        &status);
    if (rc) goto done;
    rc = PB_EXIT_ERROR;
    if (status == 504) {
        write_field(root, "stdout", stdout);
        write_field(root, "stderr", stderr);
        pb_client_print_error(status, root);
        rc = PB_EXIT_TIMEOUT;
        goto done;
    }
    if (status != 200) {
        pb_client_print_error(status, root);
        goto done;
    }
    json_t *ok = json_object_get(root, "ok");
    if (!json_is_boolean(ok)) {
        pb_cli_error("the target sent an incomplete answer (no \"ok\"); is it a probing agent "
                     "of the same version?");
        goto done;
    }
    write_field(root, "stdout", stdout);
    write_field(root, "stderr", stderr);
    json_t *message = json_object_get(root, "message"); /* e.g. the output was cut */
    if (json_is_string(message)) pb_cli_error("%s", json_string_value(message));
    if (json_is_true(ok)) {
        rc = PB_EXIT_OK;
        goto done;
    }
    json_t *error = json_object_get(root, "error");
    if (json_is_string(error) && json_string_length(error)) {
        size_t len = json_string_length(error);
        fwrite(json_string_value(error), 1, len, stderr);
        if (json_string_value(error)[len - 1] != '\n') fputc('\n', stderr);
    } else {
        pb_cli_error("the code raised an exception (the target sent no traceback)");
    }
done:
    json_decref(request);
    json_decref(root);
    free(code);
    return rc;
}
