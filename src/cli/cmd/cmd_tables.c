/*
 * cmd_tables.c - `probing <target> tables [-f table|json]`: what can be queried.
 *
 * GET /api/tables. The text form lists each table with its fill level, then its columns; json
 * prints the server's answer as it came.
 */
#include "client/client.h"
#include "cmd/command.h"
#include "out/format.h"

#include <stdio.h>
#include <string.h>

/* Appends a sanitized string field of obj, or "" when missing. */
static void put_field(pb_buf *b, json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_string(v)) pb_format_sanitize(b, json_string_value(v), json_string_length(v));
}

static void put_count(pb_buf *b, json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_integer(v)) pb_buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else pb_buf_putc(b, '?');
}

static void print_table(json_t *table)
{
    pb_buf line = PB_BUF_INIT, cell = PB_BUF_INIT;
    put_field(&line, table, "schema");
    if (line.len) pb_buf_putc(&line, '.');
    put_field(&line, table, "name");
    pb_buf_puts(&line, "  rows=");
    put_count(&line, table, "rows");
    pb_buf_puts(&line, " capacity=");
    put_count(&line, table, "capacity");
    pb_buf_puts(&line, " dropped=");
    put_count(&line, table, "rows_dropped");
    printf("%s\n", line.data ? line.data : "");

    pb_buf_reset(&line);
    put_field(&line, table, "doc");
    if (line.len) printf("    %s\n", line.data);
    /* The agent states why a table may be empty; that only matters while it is. */
    json_t *rows = json_object_get(table, "rows");
    pb_buf_reset(&line);
    if (!json_is_integer(rows) || json_integer_value(rows) == 0)
        put_field(&line, table, "empty_reason");
    if (line.len) printf("    (empty: %s)\n", line.data);

    json_t *columns = json_object_get(table, "columns"), *column;
    size_t i, name_width = 0, type_width = 0;
    json_array_foreach(columns, i, column) {
        pb_buf_reset(&cell);
        put_field(&cell, column, "name");
        size_t w = pb_format_display_width(cell.data ? cell.data : "", cell.len);
        if (w > name_width) name_width = w;
        pb_buf_reset(&cell);
        put_field(&cell, column, "type");
        if (cell.len > type_width) type_width = cell.len;
    }
    json_array_foreach(columns, i, column) {
        pb_buf_reset(&line);
        pb_buf_puts(&line, "    ");
        pb_buf_reset(&cell);
        put_field(&cell, column, "name");
        pb_buf_append(&line, cell.data ? cell.data : "", cell.len);
        for (size_t w = pb_format_display_width(cell.data ? cell.data : "", cell.len);
             w < name_width + 2; w++)
            pb_buf_putc(&line, ' ');
        pb_buf_reset(&cell);
        put_field(&cell, column, "type");
        pb_buf_append(&line, cell.data ? cell.data : "", cell.len);
        for (size_t w = cell.len; w < type_width + 2; w++) pb_buf_putc(&line, ' ');
        put_field(&line, column, "doc");
        while (line.len && line.data[line.len - 1] == ' ') line.data[--line.len] = '\0';
        printf("%s\n", line.data);
    }
    pb_buf_free(&line);
    pb_buf_free(&cell);
}

/* The options of tables (option.h): the parser and 'tables --help' read them. */
const pb_option pb_options_tables[] = {
    PB_OPTION_FORMAT("table|json", NULL),
    PB_OPTION_TABLE_END,
};

int cmd_tables(const pb_cli_args *a)
{
    pb_format fmt;
    int rc = pb_format_parse(a->format, PB_FORMAT_TABLE | PB_FORMAT_JSON, "tables", &fmt);
    if (rc) return rc;
    json_t *root;
    long status;
    rc = pb_client_call(&a->resolved, "GET", "/api/tables", NULL, PB_CLI_INFO_TIMEOUT_MS, &root,
                        &status);
    if (rc) return rc;
    rc = PB_EXIT_ERROR;
    json_t *tables = json_object_get(root, "tables"), *table;
    if (status != 200) {
        pb_client_print_error(status, root);
    } else if (!json_is_array(tables)) {
        pb_cli_error("the target sent an incomplete answer (no \"tables\"); is it a probing "
                     "agent of the same version?");
    } else if (fmt == PB_FORMAT_JSON) {
        pb_format_json_pretty(stdout, root);
        rc = PB_EXIT_OK;
    } else {
        size_t i;
        json_array_foreach(tables, i, table) {
            if (i) fputc('\n', stdout);
            if (json_is_object(table)) print_table(table);
        }
        if (!json_array_size(tables)) printf("(no tables)\n");
        rc = PB_EXIT_OK;
    }
    json_decref(root);
    return rc;
}
