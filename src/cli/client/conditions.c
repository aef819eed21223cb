/*
 * conditions.c - the measurement conditions of a live target (see conditions.h): the report's
 * conditions code (src/report/report.c) run through POST /api/eval with a short timeout.
 */
#include "client/conditions.h"
#include "client/client.h"
#include "report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_TIMEOUT_S 3

json_t *pb_conditions_fetch(const pb_target *t, char *buf, size_t len, const char **why)
{
    json_t *request = json_pack("{s:s,s:i}", "code", pb_report_conditions_code, "timeout_s",
                                EVAL_TIMEOUT_S);
    char *body = request ? json_dumps(request, JSON_COMPACT) : NULL;
    char err[1024];
    pb_response resp;
    json_error_t jerr;
    json_t *root = NULL, *result = NULL;
    json_decref(request);
    *why = "out of memory";
    if (!body) return NULL;
    int rc = pb_client_request(t, "POST", "/api/eval", body, (EVAL_TIMEOUT_S * 11 / 10 + 5) * 1000L,
                               &resp, err, sizeof err);
    free(body);
    if (rc) {
        snprintf(buf, len, "eval failed: %s", err);
        *why = buf;
        return NULL;
    }
    root = json_loadb(resp.body.data, resp.body.len, JSON_ALLOW_NUL, &jerr);
    pb_buf_free(&resp.body);
    const char *out = json_string_value(json_object_get(root, "stdout"));
    if (resp.status == 200 && json_is_true(json_object_get(root, "ok")) && out)
        result = json_loads(out, 0, &jerr);
    if (!json_is_object(result)) {
        const char *msg = json_string_value(json_object_get(root, "error"));
        snprintf(buf, len, "eval %s%s%s",
                 resp.status == 504 ? "timed out" : "gave no answer",
                 msg ? ": " : "", msg ? msg : "");
        char *nl = strchr(buf, '\n');
        if (nl) *nl = '\0';
        *why = buf;
        json_decref(result);
        result = NULL;
    }
    json_decref(root);
    return result;
}

