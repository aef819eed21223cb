/*
 * resources.c - the MCP server's resources (resources.h): one row per resource.
 */
#include "mcp/resources.h"

#include "mcp/docs.h"

#include <errno.h>
#include <string.h>

static const struct {
    const char *uri, *name, *title, *description;
    const char *text;
} resources[] = {
    {"probing://method", "method", "The profiling method",
     "docs/report.md's method: the four phases in order (baseline, bottleneck type, component, "
     "operation), the checks, and what each phase uses and decides, as the report tool applies "
     "them.",
     pb_mcp_doc_method},
    {"probing://tables", "tables", "Tables and columns",
     "docs/tables.md: every table the query tool can read, each column, and how it is measured "
     "(python.steps, python.torch_trace, python.memory, ...), with a query cookbook.",
     pb_mcp_doc_tables},
};

#define RESOURCE_COUNT (sizeof resources / sizeof resources[0])

json_t *pb_mcp_resources_list(void)
{
    json_t *list = json_array();
    for (size_t i = 0; list && i < RESOURCE_COUNT; i++) {
        json_t *entry = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I}", "uri", resources[i].uri, "name",
                                  resources[i].name, "title", resources[i].title, "description",
                                  resources[i].description, "mimeType", "text/markdown", "size",
                                  (json_int_t)strlen(resources[i].text));
        if (!entry || json_array_append_new(list, entry)) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

int pb_mcp_resources_read(const char *uri, json_t **result)
{
    *result = NULL;
    for (size_t i = 0; i < RESOURCE_COUNT; i++) {
        if (strcmp(uri, resources[i].uri) != 0) continue;
        *result = json_pack("{s:[{s:s,s:s,s:s}]}", "contents", "uri", resources[i].uri,
                            "mimeType", "text/markdown", "text", resources[i].text);
        return *result ? 0 : -ENOMEM;
    }
    return -ENOENT;
}
