/*
 * prompts.h - the MCP server's prompts: the profiling method as the messages an assistant is
 * given ("diagnose", "is_it_stuck", "did_my_change_help"), each naming the tool that answers
 * each of its steps.
 */
#ifndef PB_CLI_MCP_PROMPTS_H
#define PB_CLI_MCP_PROMPTS_H

#include <jansson.h>
#include <stddef.h>

/* The prompts as prompts/list answers them: [{name, title, description, arguments}] (caller
 * owns), or NULL when out of memory. */
json_t *pb_mcp_prompts_list(void);

/* prompts/get of name with arguments (an object of strings or NULL; borrowed): 0 and *result
 * ({description, messages}; caller owns); -ENOENT for no such prompt; -EINVAL for a bad
 * argument, with why in err; -ENOMEM. */
int pb_mcp_prompts_get(const char *name, json_t *arguments, json_t **result, char *err,
                       size_t errlen);

#endif
