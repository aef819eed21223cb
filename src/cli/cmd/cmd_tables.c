/*
 * cmd_tables.c - `probing <target> tables [-f table|json]`: what can be queried.
 *
 * GET /api/tables (pb_client_tables). The text form (pb_format_tables) lists each table with its
 * fill level, then its columns; json prints the server's answer as it came.
 */
#include "client/client.h"
#include "cmd/command.h"
#include "out/format.h"

#include <stdio.h>

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
    json_t *root = pb_client_tables(&a->resolved);
    if (!root) return PB_EXIT_ERROR;
    if (fmt == PB_FORMAT_JSON) pb_format_json_pretty(stdout, root);
    else pb_format_tables(stdout, json_object_get(root, "tables"));
    json_decref(root);
    return PB_EXIT_OK;
}
