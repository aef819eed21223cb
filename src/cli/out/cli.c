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

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* The open capture (pb_cli_capture_begin), or NULL. */
static struct {
    FILE *stream;
    char *text;
    size_t len;
} capture;

FILE *pb_cli_messages(void) { return capture.stream ? capture.stream : stderr; }

int pb_cli_capture_begin(void)
{
    if (capture.stream) return -EBUSY;
    capture.text = NULL;
    capture.len = 0;
    capture.stream = open_memstream(&capture.text, &capture.len);
    return capture.stream ? 0 : -ENOMEM;
}

char *pb_cli_capture_end(void)
{
    if (!capture.stream) return NULL;
    int failed = fclose(capture.stream) != 0;
    capture.stream = NULL;
    char *text = capture.text;
    capture.text = NULL;
    if (failed) {
        free(text);
        return NULL;
    }
    return text;
}

static void vreport(const char *fmt, va_list ap)
{
    /* Messages carry what ranks, recordings and rosters said (host names, errors): escaped,
     * so that none of it drives the terminal. */
    pb_buf msg = PB_BUF_INIT, shown = PB_BUF_INIT;
    if (pb_buf_vprintf(&msg, fmt, ap) == 0 && msg.data &&
        pb_buf_sanitize(&shown, msg.data, msg.len, 1) == 0 && shown.data)
        fprintf(pb_cli_messages(), "probing: %s\n", shown.data);
    else
        fputs("probing: out of memory while writing an error message\n", pb_cli_messages());
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

void pb_cli_note(json_t *notes, const char *fmt, ...)
{
    pb_buf b = PB_BUF_INIT;
    va_list ap;
    va_start(ap, fmt);
    int rc = pb_buf_vprintf(&b, fmt, ap);
    va_end(ap);
    if (!rc && b.data) json_array_append_new(notes, json_stringn(b.data, b.len));
    pb_buf_free(&b);
}

void pb_cli_print_notes(json_t *notes)
{
    size_t i;
    json_t *line;
    json_array_foreach(notes, i, line) pb_cli_error("%s", json_string_value(line));
}
