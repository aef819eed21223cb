/*
 * ui.h - the web view's server (ui.c; docs/ui.md): a libmicrohttpd server inside the CLI that
 * serves the page from web/ and the JSON routes it calls, each read from the target as the
 * commands read it. `probing <target> ui` (cmd/cmd_ui.c) is its only caller.
 */
#ifndef PB_CLI_UI_H
#define PB_CLI_UI_H

#include "client/target.h"

typedef struct pb_ui_options {
    const char *target;   /* the target as typed (the view's children run `probing <target> ...`) */
    pb_target resolved;   /* the target, resolved */
    const char *listen;   /* --listen ADDR:PORT, NULL for 127.0.0.1 on a free port */
    int open_browser;     /* --open given */
} pb_ui_options;

/* Serves the web view of o->resolved until SIGINT or SIGTERM; prints its URL (with the access
 * token) on stdout first. Returns PB_EXIT_OK when stopped by a signal, PB_EXIT_USAGE for a bad
 * --listen, PB_EXIT_ERROR after printing why it could not start. [main thread] */
int pb_ui_serve(const pb_ui_options *o);

#endif
