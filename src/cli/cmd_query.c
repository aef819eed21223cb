/*
 * cmd_query.c - `probing <target> query "SQL" [-f table|csv|json]`.
 *
 * POST /api/query {"sql"} and print the rows. A SQL error is shown with the offending line and a
 * caret under the byte offset the server reports, psql-style.
 */
#include "cli.h"
#include "client.h"
#include "format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints the line of sql holding byte offset, and a caret under that byte. */
static void show_error_position(const char *sql, long long offset)
{
    size_t len = strlen(sql);
    if (offset < 0 || (size_t)offset > len) return;
    size_t at = (size_t)offset, start = at, end = at;
    while (start > 0 && sql[start - 1] != '\n') start--;
    while (end < len && sql[end] != '\n') end++;
    fprintf(stderr, "  %.*s\n  ", (int)(end - start), sql + start);
    /* Keep tabs so the caret lines up with what the terminal shows; other bytes are spaces,
     * one per display column. */
    for (size_t i = start; i < at;) {
        if (sql[i] == '\t') {
            fputc('\t', stderr);
            i++;
            continue;
        }
        size_t n = 1;
        while (i + n < at && ((unsigned char)sql[i + n] & 0xC0) == 0x80) n++;
        for (size_t w = pb_format_display_width(sql + i, n); w; w--) fputc(' ', stderr);
        i += n;
    }
    fputs("^\n", stderr);
}

int cmd_query(const pb_cli_args *a)
{
    pb_format fmt;
    int rc = pb_format_parse(a->format, PB_FORMAT_TABLE | PB_FORMAT_CSV | PB_FORMAT_JSON,
                             "query", &fmt);
    if (rc) return rc;
    char *sql = pb_cli_positional_text(a, "SQL");
    if (!sql) return PB_EXIT_USAGE;
    if (a->ranks) { /* every selected rank of the job (cmd_ranks.c) */
        rc = pb_query_ranks(a, sql);
        free(sql);
        return rc;
    }
    if (a->deadline_s > 0) {
        free(sql);
        return pb_cli_usage_error("--deadline goes with --ranks (the time to wait for every rank)");
    }

    json_t *request = NULL, *root = NULL;
    long status;
    rc = PB_EXIT_ERROR;
    json_t *sql_value = json_string(sql);
    if (!sql_value) {
        pb_cli_error("the SQL is not valid UTF-8");
        goto done;
    }
    request = json_pack("{s:o}", "sql", sql_value);
    if (!request) {
        pb_cli_error("out of memory");
        goto done;
    }
    rc = pb_client_call(&a->resolved, "POST", "/api/query", request, PB_CLI_QUERY_TIMEOUT_MS,
                        &root, &status);
    if (rc) goto done;
    rc = PB_EXIT_ERROR;
    if (status != 200) {
        json_t *offset = json_object_get(root, "offset");
        const char *msg = json_string_value(json_object_get(root, "error"));
        if (status == 400 && offset && msg) {
            const char *prefix = strncmp(msg, "SQL error", 9) == 0 ? "" : "SQL error: ";
            pb_cli_error("%s%s", prefix, msg);
            if (json_is_integer(offset)) show_error_position(sql, json_integer_value(offset));
        } else {
            pb_client_print_error(status, root);
        }
        goto done;
    }
    json_t *columns = json_object_get(root, "columns");
    json_t *rows = json_object_get(root, "rows");
    if (!json_is_array(columns) || !json_is_array(rows)) {
        pb_cli_error("the target sent an incomplete answer (no %s); is it a probing agent of "
                     "the same version?", json_is_array(columns) ? "rows" : "columns");
        goto done;
    }
    if (pb_format_rows(stdout, fmt, PB_TABLE_GRID, columns, rows)) goto done;
    rc = PB_EXIT_OK;
    if (json_is_true(json_object_get(root, "truncated"))) {
        const char *msg = json_string_value(json_object_get(root, "message"));
        fflush(stdout);
        pb_cli_error("%s", msg && *msg ? msg : "the result was truncated by the target; add a "
                                                "LIMIT or select fewer columns");
    }
done:
    json_decref(request);
    json_decref(root);
    free(sql);
    return rc;
}
