/*
 * resources.h - the MCP server's resources: the method of docs/report.md (probing://method) and
 * what every table and column means (probing://tables, docs/tables.md), carried in the binary
 * (mcp/docs.h), so an installed probing serves them without its source tree.
 */
#ifndef PB_CLI_MCP_RESOURCES_H
#define PB_CLI_MCP_RESOURCES_H

#include <jansson.h>

/* The resources as resources/list answers them: [{uri, name, title, description, mimeType,
 * size}] (caller owns), or NULL when out of memory. */
json_t *pb_mcp_resources_list(void);

/* resources/read of uri: 0 and *result ({contents: [{uri, mimeType, text}]}; caller owns),
 * -ENOENT for no such resource, -ENOMEM. */
int pb_mcp_resources_read(const char *uri, json_t **result);

#endif
