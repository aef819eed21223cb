/*
 * cli.c - the one way any file of the `probing` command prints an error (out/cli.h).
 *
 * It stands at the bottom of the CLI (out/), below the dispatch, the commands, the web view's
 * server and the client layer, and calls none of them. Errors follow git's error():
 * pb_cli_error prints "probing: <message>" and returns the exit status, so a command ends with
 * `return pb_cli_error(...)` or `return pb_cli_usage_error(...)`.
 */
#include "out/cli.h"

#include "buf.h"

#include <stdarg.h>
#include <stdio.h>

static void vreport(const char *fmt, va_list ap)
{
    /* Messages carry what ranks, recordings and rosters said (host names, errors): escaped,
     * so that none of it drives the terminal. */
    pb_buf msg = PB_BUF_INIT, shown = PB_BUF_INIT;
    if (pb_buf_vprintf(&msg, fmt, ap) == 0 && msg.data &&
        pb_buf_sanitize(&shown, msg.data, msg.len, 1) == 0 && shown.data)
        fprintf(stderr, "probing: %s\n", shown.data);
    else
        fputs("probing: out of memory while writing an error message\n", stderr);
    pb_buf_free(&msg);
    pb_buf_free(&shown);
}

int pb_cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
    return PB_EXIT_ERROR;
}

int pb_cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
    return PB_EXIT_USAGE;
}
