/*
 * eval.c - code run in a target (eval.h).
 *
 * POST /api/eval {"code", "timeout_s"}; the code runs in the target's __main__. The HTTP timeout
 * is the eval timeout plus a margin so that the server's own 504 answer, which says which phase
 * timed out, arrives before the client gives up.
 */
#include "client/eval.h"

#include "client/client.h"
#include "out/cli.h"

#include <math.h>
#include <stdlib.h>

#define EVAL_HTTP_MARGIN_S 5.0

static void write_field(json_t *root, const char *key, FILE *to)
{
    json_t *v = json_object_get(root, key);
    if (!json_is_string(v)) return;
    fwrite(json_string_value(v), 1, json_string_length(v), to);
    fflush(to);
}

int pb_eval_send(const pb_target *t, const char *code, double timeout_s, FILE *out,
                json_t **answer)
{
    json_t *request = NULL, *root = NULL;
    long status;
    int rc = PB_EXIT_ERROR;
    FILE *messages = pb_cli_messages();
    *answer = NULL;
    if (timeout_s <= 0) timeout_s = PB_EVAL_DEFAULT_TIMEOUT_S;
    json_t *code_value = json_string(code);
    if (!code_value) return pb_cli_error("the code is not valid UTF-8");
    json_t *timeout_value = timeout_s == floor(timeout_s) ? json_integer((json_int_t)timeout_s)
                                                          : json_real(timeout_s);
    request = json_pack("{s:o,s:o}", "code", code_value, "timeout_s", timeout_value);
    if (!request) return pb_cli_error("out of memory");
    long http_timeout_ms = (long)((timeout_s * 1.1 + EVAL_HTTP_MARGIN_S) * 1000);
    rc = pb_client_call(t, "POST", "/api/eval", request, http_timeout_ms, &root, &status);
    json_decref(request);
    if (rc) return rc;
    rc = PB_EXIT_ERROR;
    if (status == 504) {
        write_field(root, "stdout", out);
        write_field(root, "stderr", messages);
        pb_client_print_error(status, root);
        *answer = root;
        return PB_EXIT_TIMEOUT;
    }
    if (status != 200) {
        pb_client_print_error(status, root);
        json_decref(root);
        return PB_EXIT_ERROR;
    }
    json_t *ok = json_object_get(root, "ok");
    if (!json_is_boolean(ok)) {
        pb_cli_error("the target sent an incomplete answer (no \"ok\"); is it a probing agent "
                     "of the same version?");
        json_decref(root);
        return PB_EXIT_ERROR;
    }
    write_field(root, "stdout", out);
    write_field(root, "stderr", messages);
    json_t *message = json_object_get(root, "message"); /* e.g. the output was cut */
    if (json_is_string(message)) pb_cli_error("%s", json_string_value(message));
    *answer = root;
    if (json_is_true(ok)) return PB_EXIT_OK;
    json_t *error = json_object_get(root, "error");
    if (json_is_string(error) && json_string_length(error)) {
        size_t len = json_string_length(error);
        fwrite(json_string_value(error), 1, len, messages);
        if (json_string_value(error)[len - 1] != '\n') fputc('\n', messages);
    } else {
        pb_cli_error("the code raised an exception (the target sent no traceback)");
    }
    return rc;
}
