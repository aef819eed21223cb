/*
 * cmd_mcp.c - `probing mcp [--allow-eval]`: a Model Context Protocol server on stdin/stdout, for
 * AI assistants (Claude Code, Cursor, VS Code). The server is mcp/server.c (docs/mcp.md); this
 * file hands it the options.
 */
#include "cmd/command.h"
#include "mcp/server.h"

/* The options of mcp (option.h): the parser and 'mcp --help' read them. */
const pb_option pb_options_mcp[] = {
    PB_OPTION_FLAG_("allow-eval", allow_eval,
                    "offer the eval tool, which runs the assistant's Python code inside the "
                    "training process (off by default: every other tool only reads)"),
    PB_OPTION_TABLE_END,
};

int cmd_mcp(const pb_cli_args *a)
{
    pb_mcp_options opts = {a->allow_eval};
    return pb_mcp_serve(&opts);
}
