/*
 * cmd_ui.c - `probing <target> ui [--listen ADDR:PORT] [--open]`: the web view (docs/ui.md),
 * served by serve/ui.c until Ctrl-C.
 */
#include "cmd/command.h"
#include "serve/ui.h"

int cmd_ui(const pb_cli_args *a)
{
    pb_ui_options o = {
        .target = a->target,
        .resolved = a->resolved,
        .listen = a->listen,
        .open_browser = a->open_browser,
    };
    return pb_ui_serve(&o);
}
