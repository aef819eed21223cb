/*
 * cmd_backtrace.c - `probing <pid> backtrace [--native] [-f table|json]`: the Python stack of
 * every thread of a process, read from outside it (client/stacks.c: no agent involved, so it
 * works on a deadlocked process too), printed as text or JSON.
 */
#include "client/stacks.h"
#include "cmd/command.h"
#include "out/format.h"

#include <stdio.h>

/* The options of backtrace (option.h): the parser and 'backtrace --help' read them. */
const pb_option pb_options_backtrace[] = {
    PB_OPTION_FLAG_("native", native,
                    "also the native (C) stack of each thread: each thread is stopped for the "
                    "moment of its walk (ptrace) and unwound with libunwind"),
    PB_OPTION_FORMAT("table|json",
                     "table: text, one block per thread (default)\n"
                     "json: {pid, cmdline, python, library, threads: [{native_id, thread_id, "
                     "name, holds_gil, truncated, frames: [{function, file, line}], with --native "
                     "native: [{ip, symbol, offset, object}]}]}"),
    PB_OPTION_TABLE_END,
};

int cmd_backtrace(const pb_cli_args *a)
{
    pb_format fmt;
    pb_stacks st;
    if (pb_format_parse(a->format, PB_FORMAT_TABLE | PB_FORMAT_JSON, "backtrace", &fmt))
        return PB_EXIT_USAGE;
    int rc = pb_stacks_read(a->target, a->native, &st);
    if (rc) return rc;
    if (fmt == PB_FORMAT_JSON) {
        json_t *root = pb_stacks_json(&st);
        if (!root || pb_format_json_pretty(stdout, root)) rc = pb_cli_error("cannot print the stacks as JSON");
        json_decref(root);
    } else if (pb_stacks_text(stdout, &st)) {
        rc = PB_EXIT_ERROR;
    }
    pb_stacks_free(&st);
    return rc;
}
