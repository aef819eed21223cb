/*
 * cmd_report.c - `probing <target> report [--json] [--last N]`: the four-phase diagnosis.
 *
 * The rules live in src/report; this file only gives them their data: a query function that
 * posts each SQL statement to the target's /api/query, the agent's /api/info, and the
 * measurement conditions from one short eval (EVAL_TIMEOUT_S). When eval is unavailable or
 * times out the report says the conditions are unknown; it never fails for that.
 */
#include "cli.h"
#include "client.h"
#include "report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_TIMEOUT_S 3

/* pb_report_query_fn over POST /api/query. ctx is the pb_target. [main thread] */
static int query_target(void *ctx, const char *sql, json_t **rows, char **error)
{
    const pb_target *t = ctx;
    json_t *root = NULL, *request = json_pack("{s:s}", "sql", sql);
    long status = 0;
    char err[1024];
    pb_response resp;
    json_error_t jerr;
    *rows = NULL;
    *error = NULL;
    char *body = request ? json_dumps(request, JSON_COMPACT) : NULL;
    json_decref(request);
    if (!body) {
        *error = strdup("out of memory");
        return -1;
    }
    int rc = pb_client_request(t, "POST", "/api/query", body, PB_CLI_QUERY_TIMEOUT_MS, &resp,
                               err, sizeof err);
    free(body);
    if (rc) {
        *error = strdup(err);
        return -1;
    }
    status = resp.status;
    root = json_loadb(resp.body.data, resp.body.len, JSON_ALLOW_NUL, &jerr);
    pb_buf_free(&resp.body);
    if (!json_is_object(root)) {
        json_decref(root);
        *error = strdup("the target sent a response that is not valid JSON");
        return -1;
    }
    json_t *columns = json_object_get(root, "columns"), *data = json_object_get(root, "rows");
    if (status != 200 || !json_is_array(columns) || !json_is_array(data)) {
        const char *msg = json_string_value(json_object_get(root, "error"));
        *error = strdup(msg ? msg : "the target sent an incomplete answer");
        json_decref(root);
        return -1;
    }
    json_t *out = json_array(), *row;
    size_t i;
    json_array_foreach(data, i, row) {
        json_t *obj = json_object();
        for (size_t c = 0; c < json_array_size(columns) && c < json_array_size(row); c++)
            json_object_set(obj, json_string_value(json_array_get(columns, c)),
                            json_array_get(row, c));
        json_array_append_new(out, obj);
    }
    json_decref(root);
    *rows = out;
    return 0;
}

/* Runs the conditions code with a short timeout. Returns the object (caller owns) or NULL with
 * *why set to a static reason or one in `buf`. */
static json_t *conditions(const pb_target *t, char *buf, size_t len, const char **why)
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

int cmd_report(const pb_cli_args *a)
{
    json_t *info = NULL, *cond = NULL, *doc = NULL;
    long status = 0;
    char why_buf[1200];
    char *error = NULL;
    int rc = pb_client_call(&a->resolved, "GET", "/api/info", NULL, PB_CLI_INFO_TIMEOUT_MS,
                            &info, &status);
    if (rc) return rc;
    rc = PB_EXIT_ERROR;
    if (status != 200) {
        pb_client_print_error(status, info);
        goto done;
    }
    pb_report_source src;
    memset(&src, 0, sizeof src);
    src.query = query_target;
    src.ctx = (void *)&a->resolved;
    src.target = a->target;
    src.info = info;
    cond = conditions(&a->resolved, why_buf, sizeof why_buf, &src.conditions_error);
    src.conditions = cond;
    if (pb_report_build(&src, a->last_steps, &doc, &error)) {
        pb_cli_error("cannot build the report: %s", error ? error : "unknown error");
        goto done;
    }
    if (a->json) {
        char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
        if (!text) {
            pb_cli_error("out of memory");
            goto done;
        }
        puts(text);
        free(text);
    } else {
        pb_report_render(stdout, doc);
    }
    rc = PB_EXIT_OK;
done:
    free(error);
    json_decref(info);
    json_decref(cond);
    json_decref(doc);
    return rc;
}
