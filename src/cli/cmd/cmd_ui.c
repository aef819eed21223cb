/*
 * cmd_ui.c - `probing <target> ui [--listen ADDR:PORT] [--open]`: the web view (docs/ui.md),
 * served by serve/ui.c until Ctrl-C.
 */
#include "cmd/command.h"
#include "serve/ui.h"

/* The options of ui (option.h): the parser and 'ui --help' read them. */
const pb_option pb_options_ui[] = {
    PB_OPTION_LISTEN("listen there (default 127.0.0.1 and a free port)"),
    PB_OPTION_FLAG_("open", open_browser, "open the URL in a browser ($BROWSER, else xdg-open)"),
    PB_OPTION_TABLE_END,
};

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
