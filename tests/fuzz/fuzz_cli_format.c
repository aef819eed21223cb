/*
 * fuzz_cli_format.c - libFuzzer target for the CLI's handling of an agent's answer: the bytes
 * of a response body go through what `probing query` does with them (json_loadb with
 * JSON_ALLOW_NUL, as pb_client_call() decodes; then pb_format_rows() on "columns"/"rows" in
 * every format and table style) and through pb_format_json_pretty(), pb_format_sanitize() and
 * pb_format_display_width() on the raw bytes. Output goes to /dev/null; the checks are the
 * sanitizers', plus: sanitized text holds no control byte. Built and run by scripts/fuzz.sh.
 */
#include "out/cli.h"
#include "out/format.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FILE *devnull;

/* The CLI's error printers live in out/cli.c and write to stderr; these format and drop the message
 * (every input would print one), and return what cli.c's return. */
int pb_cli_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return PB_EXIT_ERROR;
}

int pb_cli_usage_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return PB_EXIT_USAGE;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    devnull = fopen("/dev/null", "w");
    if (!devnull) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pb_buf b = PB_BUF_INIT;
    if (pb_format_sanitize(&b, (const char *)data, size) == 0) {
        for (size_t i = 0; i < b.len; i++) {
            unsigned char c = (unsigned char)b.data[i];
            unsigned char next = i + 1 < b.len ? (unsigned char)b.data[i + 1] : 0;
            if (c < 0x20 || c == 0x7f || (c == 0xC2 && next >= 0x80 && next <= 0x9f)) {
                fprintf(stderr, "fuzz_cli_format: control byte 0x%02x left by pb_format_sanitize\n", c);
                abort();
            }
        }
    }
    pb_buf_free(&b);
    (void)pb_format_display_width((const char *)data, size);

    json_error_t jerr;
    json_t *root = json_loadb((const char *)data, size, JSON_ALLOW_NUL, &jerr);
    if (!root) return 0;
    pb_format_json_pretty(devnull, root);
    json_t *columns = json_object_get(root, "columns");
    json_t *rows = json_object_get(root, "rows");
    if (json_is_array(columns) && json_is_array(rows)) {
        static const pb_format formats[] = {PB_FORMAT_TABLE, PB_FORMAT_CSV, PB_FORMAT_JSON};
        for (size_t f = 0; f < 3; f++) {
            pb_format_rows(devnull, formats[f], PB_TABLE_GRID, columns, rows);
            if (formats[f] == PB_FORMAT_TABLE)
                pb_format_rows(devnull, formats[f], PB_TABLE_PLAIN, columns, rows);
        }
    }
    json_decref(root);
    return 0;
}
