/*
 * input.c - the text a command takes from its arguments or, with "-", from stdin (query's SQL,
 * eval's code).
 */
#include "client/input.h"

#include "buf.h"
#include "out/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STDIN_MAX_BYTES ((size_t)64 << 20)

char *pb_input_text(const char *command, char **positional, int count, const char *what)
{
    char *text = NULL;
    if (count == 0) {
        pb_cli_error("%s needs %s: probing <target> %s \"%s\"", command, what, command,
                     strcmp(what, "SQL") == 0 ? "SELECT ..." : "print(...)");
        return NULL;
    }
    if (count == 1 && strcmp(positional[0], "-") == 0) {
        pb_buf b = PB_BUF_INIT;
        char chunk[65536];
        size_t n;
        b.max_len = STDIN_MAX_BYTES;
        while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0) {
            if (pb_buf_append(&b, chunk, n)) {
                pb_cli_error("the %s on stdin is too large (over 64 MiB)", what);
                pb_buf_free(&b);
                return NULL;
            }
        }
        if (ferror(stdin)) {
            pb_cli_error("cannot read the %s from stdin: %s", what, strerror(errno));
            pb_buf_free(&b);
            return NULL;
        }
        if (b.len == 0) { /* </dev/null, or a pipe closed before it wrote anything */
            pb_cli_error("no %s on standard input (it was empty): pipe the %s in, or give it "
                         "as an argument", what, what);
            return NULL;
        }
        text = pb_buf_steal(&b, NULL);
    } else {
        pb_buf b = PB_BUF_INIT;
        int rc = 0;
        for (int i = 0; i < count && !rc; i++) {
            if (i) rc = pb_buf_putc(&b, ' ');
            if (!rc) rc = pb_buf_puts(&b, positional[i]);
        }
        text = rc ? NULL : pb_buf_steal(&b, NULL);
        pb_buf_free(&b);
    }
    if (!text) {
        pb_cli_error("out of memory");
        return NULL;
    }
    if (strspn(text, " \t\r\n") == strlen(text)) {
        pb_cli_error("the %s is empty", what);
        free(text);
        return NULL;
    }
    return text;
}
