/*
 * format.c - table, CSV and JSON output of result sets; see format.h.
 *
 * The aligned table needs column widths before the first line is printed, so it makes two
 * passes over the rows, formatting each cell into a scratch buffer both times: memory stays at
 * one cell rather than a second copy of a result that may be hundreds of megabytes.
 */
#include "out/format.h"

#include "jsonw.h"
#include "out/cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int pb_format_parse(const char *name, unsigned allowed, const char *command, pb_format *out)
{
    static const struct {
        const char *name;
        pb_format format;
    } formats[] = {{"table", PB_FORMAT_TABLE}, {"csv", PB_FORMAT_CSV}, {"json", PB_FORMAT_JSON}};
    if (!name) {
        *out = PB_FORMAT_TABLE;
        return 0;
    }
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        if (strcmp(name, formats[i].name) == 0 && (allowed & formats[i].format)) {
            *out = formats[i].format;
            return 0;
        }
    }
    return pb_cli_usage_error("unknown output format '%s' for %s: use %s", name, command,
                              (allowed & PB_FORMAT_CSV) ? "table, csv or json" : "table or json");
}

void pb_format_real_exact(double v, char *out, size_t outlen)
{
    if (!isfinite(v)) {
        snprintf(out, outlen, "%s", isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
        return;
    }
    for (int precision = 15; precision <= 17; precision++) {
        snprintf(out, outlen, "%.*g", precision, v);
        if (strtod(out, NULL) == v) return;
    }
}

/* Drops trailing zeros after a decimal point, keeping one digit after it. */
static void strip_zeros(char *s)
{
    char *dot = strchr(s, '.');
    if (!dot) return;
    char *end = s + strlen(s) - 1;
    while (end > dot + 1 && *end == '0') *end-- = '\0';
}

void pb_format_real_human(double v, char *out, size_t outlen)
{
    double magnitude = fabs(v);
    if (!isfinite(v) || magnitude >= 1e15 || (magnitude < 1e-6 && magnitude != 0)) {
        pb_format_real_exact(v, out, outlen);
        if (isfinite(v)) snprintf(out, outlen, "%.6g", v);
        return;
    }
    if (magnitude == 0) {
        snprintf(out, outlen, "0.0");
        return;
    }
    int decimals = 6;
    if (magnitude < 1) decimals = 5 - (int)floor(log10(magnitude)); /* 6 significant digits */
    snprintf(out, outlen, "%.*f", decimals, v);
    strip_zeros(out);
}

int pb_format_sanitize(pb_buf *b, const char *s, size_t len)
{
    return pb_buf_sanitize(b, s, len, 0);
}

static int has_control(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) return 1;
        if (c == 0xC2 && i + 1 < len && (unsigned char)s[i + 1] >= 0x80 &&
            (unsigned char)s[i + 1] <= 0x9f)
            return 1;
    }
    return 0;
}

/* The sanitized copy of string v (new reference), or NULL when v needs none. */
static json_t *sanitized_string(json_t *v, int *rc)
{
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (!s || !has_control(s, len)) return NULL;
    pb_buf b = PB_BUF_INIT;
    json_t *out = NULL;
    if (pb_format_sanitize(&b, s, len) == 0 && b.data) out = json_stringn(b.data, b.len);
    pb_buf_free(&b);
    if (!out) *rc = -ENOMEM;
    return out;
}

int pb_format_sanitize_json(json_t *v)
{
    int rc = 0;
    if (json_is_object(v)) {
        const char *key;
        json_t *item;
        void *iter = json_object_iter(v);
        while (iter && !rc) {
            key = json_object_iter_key(iter);
            item = json_object_iter_value(iter);
            json_t *clean = sanitized_string(item, &rc);
            if (clean) json_object_iter_set_new(v, iter, clean);
            else if (!rc) rc = pb_format_sanitize_json(item);
            (void)key;
            iter = json_object_iter_next(v, iter);
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v) && !rc; i++) {
            json_t *item = json_array_get(v, i);
            json_t *clean = sanitized_string(item, &rc);
            if (clean) json_array_set_new(v, i, clean);
            else if (!rc) rc = pb_format_sanitize_json(item);
        }
    }
    return rc;
}

static int is_wide(unsigned cp)
{
    return (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF && cp != 0x303F) ||
           (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
           (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
           (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x1F300 && cp <= 0x1F64F) ||
           (cp >= 0x1F900 && cp <= 0x1F9FF) || (cp >= 0x20000 && cp <= 0x3FFFD);
}

size_t pb_format_display_width(const char *s, size_t len)
{
    size_t width = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        unsigned cp;
        size_t n;
        if (c < 0x80) { cp = c; n = 1; }
        else if ((c & 0xE0) == 0xC0) { cp = c & 0x1F; n = 2; }
        else if ((c & 0xF0) == 0xE0) { cp = c & 0x0F; n = 3; }
        else if ((c & 0xF8) == 0xF0) { cp = c & 0x07; n = 4; }
        else { width++; i++; continue; } /* stray byte: shown as one replacement glyph */
        if (i + n > len) { width++; break; }
        for (size_t k = 1; k < n; k++) cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
        i += n;
        if (cp >= 0x300 && cp <= 0x36F) continue; /* combining marks take no column */
        if (cp == 0x200B || cp == 0xFEFF) continue;
        width += is_wide(cp) ? 2 : 1;
    }
    return width;
}

void pb_format_duration(double seconds, char *out, size_t outlen)
{
    if (!(seconds >= 0)) {
        snprintf(out, outlen, "?");
        return;
    }
    long long s = (long long)seconds;
    if (s < 60) snprintf(out, outlen, "%llds", s);
    else if (s < 3600) snprintf(out, outlen, "%lldm%02llds", s / 60, s % 60);
    else if (s < 86400) snprintf(out, outlen, "%lldh%02lldm", s / 3600, s % 3600 / 60);
    else snprintf(out, outlen, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
}

int pb_format_json_value(pb_buf *b, json_t *v)
{
    char num[64];
    switch (json_typeof(v)) {
    case JSON_STRING:
        return pb_json_escape(b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        return pb_buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    case JSON_REAL:
        if (!isfinite(json_real_value(v))) return pb_buf_puts(b, "null");
        pb_format_real_exact(json_real_value(v), num, sizeof num);
        return pb_buf_puts(b, num);
    case JSON_TRUE: return pb_buf_puts(b, "true");
    case JSON_FALSE: return pb_buf_puts(b, "false");
    case JSON_NULL: return pb_buf_puts(b, "null");
    case JSON_ARRAY: {
        int rc = pb_buf_putc(b, '[');
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item) {
            if (!rc && i) rc = pb_buf_puts(b, ", ");
            if (!rc) rc = pb_format_json_value(b, item);
        }
        return rc ? rc : pb_buf_putc(b, ']');
    }
    case JSON_OBJECT: {
        int rc = pb_buf_putc(b, '{'), first = 1;
        const char *key;
        json_t *item;
        json_object_foreach(v, key, item) {
            if (!rc && !first) rc = pb_buf_puts(b, ", ");
            first = 0;
            if (!rc) rc = pb_json_escape(b, key, strlen(key));
            if (!rc) rc = pb_buf_puts(b, ": ");
            if (!rc) rc = pb_format_json_value(b, item);
        }
        return rc ? rc : pb_buf_putc(b, '}');
    }
    }
    return pb_buf_puts(b, "null");
}

static int json_pretty(pb_buf *b, json_t *v, int depth)
{
    int rc = 0;
    size_t i, count = json_is_array(v) ? json_array_size(v) : json_is_object(v) ? json_object_size(v) : 0;
    if (!count) return pb_format_json_value(b, v);
    rc = pb_buf_putc(b, json_is_array(v) ? '[' : '{');
    if (json_is_array(v)) {
        json_t *item;
        json_array_foreach(v, i, item) {
            if (!rc) rc = pb_buf_printf(b, "%s\n%*s", i ? "," : "", 2 * (depth + 1), "");
            if (!rc) rc = json_pretty(b, item, depth + 1);
        }
    } else {
        const char *key;
        json_t *item;
        i = 0;
        json_object_foreach(v, key, item) {
            if (!rc) rc = pb_buf_printf(b, "%s\n%*s", i++ ? "," : "", 2 * (depth + 1), "");
            if (!rc) rc = pb_json_escape(b, key, strlen(key));
            if (!rc) rc = pb_buf_puts(b, ": ");
            if (!rc) rc = json_pretty(b, item, depth + 1);
        }
    }
    if (!rc) rc = pb_buf_printf(b, "\n%*s%c", 2 * depth, "", json_is_array(v) ? ']' : '}');
    return rc;
}

int pb_format_json_pretty(FILE *out, json_t *v)
{
    pb_buf b = PB_BUF_INIT;
    int rc = json_pretty(&b, v, 0);
    if (!rc) rc = pb_buf_putc(&b, '\n');
    if (!rc) fwrite(b.data, 1, b.len, out);
    pb_buf_free(&b);
    if (rc) pb_cli_error("cannot format the answer: out of memory");
    return rc ? -ENOMEM : (ferror(out) ? -EIO : 0);
}

/* Formats one cell for the aligned table into b (reset first). *numeric tells whether it is a
 * number (right-aligned). NULL and a missing cell print as nothing. */
static int table_cell(pb_buf *b, json_t *v, int *numeric)
{
    char num[64];
    pb_buf_reset(b);
    *numeric = 0;
    if (!v || json_is_null(v)) return pb_buf_puts(b, "");
    if (json_is_string(v)) return pb_format_sanitize(b, json_string_value(v), json_string_length(v));
    if (json_is_integer(v)) {
        *numeric = 1;
        return pb_buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    }
    if (json_is_real(v)) {
        *numeric = 1;
        pb_format_real_human(json_real_value(v), num, sizeof num);
        return pb_buf_puts(b, num);
    }
    if (json_is_boolean(v)) return pb_buf_puts(b, json_is_true(v) ? "true" : "false");
    pb_buf scratch = PB_BUF_INIT;
    int rc = pb_format_json_value(&scratch, v);
    if (!rc) rc = pb_format_sanitize(b, scratch.data, scratch.len);
    pb_buf_free(&scratch);
    return rc;
}

static int pad(pb_buf *line, size_t n)
{
    int rc = 0;
    while (n-- && !rc) rc = pb_buf_putc(line, ' ');
    return rc;
}

/* Appends text to line padded to width: 'l'eft-aligned, 'r'ight-aligned or 'c'entered. */
static int put_aligned(pb_buf *line, const char *text, size_t len, size_t width, char align)
{
    size_t w = pb_format_display_width(text, len);
    size_t slack = width > w ? width - w : 0;
    size_t before = align == 'r' ? slack : align == 'c' ? slack / 2 : 0;
    int rc = pad(line, before);
    if (!rc) rc = pb_buf_append(line, text, len);
    if (!rc) rc = pad(line, slack - before);
    return rc;
}

/* Writes line without trailing blanks, then a newline. */
static void emit_line(FILE *out, pb_buf *line)
{
    size_t n = line->len;
    while (n && line->data[n - 1] == ' ') n--;
    fwrite(line->data, 1, n, out);
    fputc('\n', out);
}

static int format_table(FILE *out, pb_table_style style, json_t *columns, json_t *rows)
{
    size_t ncol = json_array_size(columns), nrow = json_array_size(rows);
    const char *sep = style == PB_TABLE_GRID ? " | " : "  ";
    const char *lead = style == PB_TABLE_GRID ? " " : "";
    pb_buf cell = PB_BUF_INIT, line = PB_BUF_INIT, header = PB_BUF_INIT;
    size_t *widths = calloc(ncol ? ncol : 1, sizeof *widths);
    int rc = widths ? 0 : -ENOMEM, numeric;

    for (size_t c = 0; c < ncol && !rc; c++) {
        pb_buf_reset(&header);
        json_t *name = json_array_get(columns, c);
        rc = table_cell(&header, name, &numeric);
        widths[c] = pb_format_display_width(header.data, header.len);
    }
    for (size_t r = 0; r < nrow && !rc; r++) {
        json_t *row = json_array_get(rows, r);
        for (size_t c = 0; c < ncol && !rc; c++) {
            rc = table_cell(&cell, json_array_get(row, c), &numeric);
            size_t w = pb_format_display_width(cell.data, cell.len);
            if (w > widths[c]) widths[c] = w;
        }
    }
    if (ncol && !rc) {
        pb_buf_reset(&line);
        rc = pb_buf_puts(&line, lead);
        for (size_t c = 0; c < ncol && !rc; c++) {
            if (c) rc = pb_buf_puts(&line, sep);
            if (!rc) rc = table_cell(&header, json_array_get(columns, c), &numeric);
            if (!rc) rc = put_aligned(&line, header.data, header.len, widths[c],
                                      style == PB_TABLE_GRID ? 'c' : 'l');
        }
        if (!rc) emit_line(out, &line);
        if (style == PB_TABLE_GRID && !rc) {
            pb_buf_reset(&line);
            for (size_t c = 0; c < ncol && !rc; c++) {
                if (c) rc = pb_buf_putc(&line, '+');
                for (size_t k = 0; k < widths[c] + 2 && !rc; k++) rc = pb_buf_putc(&line, '-');
            }
            if (!rc) emit_line(out, &line);
        }
    }
    for (size_t r = 0; r < nrow && ncol && !rc; r++) {
        json_t *row = json_array_get(rows, r);
        pb_buf_reset(&line);
        rc = pb_buf_puts(&line, lead);
        for (size_t c = 0; c < ncol && !rc; c++) {
            if (c) rc = pb_buf_puts(&line, sep);
            if (!rc) rc = table_cell(&cell, json_array_get(row, c), &numeric);
            if (!rc) rc = put_aligned(&line, cell.data, cell.len, widths[c], numeric ? 'r' : 'l');
        }
        if (!rc) emit_line(out, &line);
    }
    if (style == PB_TABLE_GRID && !rc) fprintf(out, "(%zu %s)\n", nrow, nrow == 1 ? "row" : "rows");
    free(widths);
    pb_buf_free(&cell);
    pb_buf_free(&line);
    pb_buf_free(&header);
    if (rc) pb_cli_error("cannot format the result: %s", rc == -ENOMEM ? "out of memory" : "too large");
    return rc;
}

/* Appends one CSV field, quoted when RFC 4180 requires it. */
static int csv_field(pb_buf *b, json_t *v)
{
    char num[64];
    if (!v || json_is_null(v)) return 0;
    if (json_is_integer(v)) return pb_buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    if (json_is_real(v)) {
        pb_format_real_exact(json_real_value(v), num, sizeof num);
        return pb_buf_puts(b, num);
    }
    if (json_is_boolean(v)) return pb_buf_puts(b, json_is_true(v) ? "true" : "false");
    pb_buf scratch = PB_BUF_INIT;
    const char *s;
    size_t len;
    int rc = 0;
    if (json_is_string(v)) {
        s = json_string_value(v);
        len = json_string_length(v);
    } else {
        rc = pb_format_json_value(&scratch, v);
        s = scratch.data;
        len = scratch.len;
    }
    int quote = 0;
    for (size_t i = 0; i < len && !rc; i++)
        if (s[i] == ',' || s[i] == '"' || s[i] == '\n' || s[i] == '\r') quote = 1;
    if (!rc && quote) rc = pb_buf_putc(b, '"');
    for (size_t i = 0; i < len && !rc; i++)
        rc = s[i] == '"' ? pb_buf_puts(b, "\"\"") : pb_buf_putc(b, s[i]);
    if (!rc && quote) rc = pb_buf_putc(b, '"');
    pb_buf_free(&scratch);
    return rc;
}

static int format_csv(FILE *out, json_t *columns, json_t *rows)
{
    size_t ncol = json_array_size(columns), r;
    pb_buf line = PB_BUF_INIT;
    int rc = 0;
    for (size_t c = 0; c < ncol && !rc; c++) {
        if (c) rc = pb_buf_putc(&line, ',');
        if (!rc) rc = csv_field(&line, json_array_get(columns, c));
    }
    if (!rc && ncol) {
        fwrite(line.data, 1, line.len, out);
        fputc('\n', out);
    }
    json_t *row;
    json_array_foreach(rows, r, row) {
        if (rc || !ncol) break;
        pb_buf_reset(&line);
        for (size_t c = 0; c < ncol && !rc; c++) {
            if (c) rc = pb_buf_putc(&line, ',');
            if (!rc) rc = csv_field(&line, json_array_get(row, c));
        }
        if (!rc) {
            fwrite(line.data, 1, line.len, out);
            fputc('\n', out);
        }
    }
    pb_buf_free(&line);
    if (rc) pb_cli_error("cannot format the result: out of memory");
    return rc;
}

static int format_json(FILE *out, json_t *columns, json_t *rows)
{
    size_t ncol = json_array_size(columns), r;
    pb_buf line = PB_BUF_INIT;
    int rc = 0;
    json_t *row;
    fputc('[', out);
    json_array_foreach(rows, r, row) {
        pb_buf_reset(&line);
        rc = pb_buf_puts(&line, r ? ",\n  {" : "\n  {");
        for (size_t c = 0; c < ncol && !rc; c++) {
            json_t *name = json_array_get(columns, c);
            if (c) rc = pb_buf_puts(&line, ", ");
            if (!rc && json_is_string(name)) rc = pb_format_json_value(&line, name);
            else if (!rc) rc = pb_buf_printf(&line, "\"column%zu\"", c + 1);
            if (!rc) rc = pb_buf_puts(&line, ": ");
            json_t *v = json_array_get(row, c);
            if (!rc) rc = v ? pb_format_json_value(&line, v) : pb_buf_puts(&line, "null");
        }
        if (!rc) rc = pb_buf_putc(&line, '}');
        if (rc) break;
        fwrite(line.data, 1, line.len, out);
    }
    fputs(json_array_size(rows) ? "\n]\n" : "]\n", out);
    pb_buf_free(&line);
    if (rc) pb_cli_error("cannot format the result: out of memory");
    return rc;
}

int pb_format_rows(FILE *out, pb_format fmt, pb_table_style style, json_t *columns,
                   json_t *rows)
{
    int rc;
    if (fmt == PB_FORMAT_CSV) rc = format_csv(out, columns, rows);
    else if (fmt == PB_FORMAT_JSON) rc = format_json(out, columns, rows);
    else rc = format_table(out, style, columns, rows);
    if (rc) return rc;
    return ferror(out) ? -EIO : 0;
}

/* ---- the catalog of a target's tables (tables) */

/* Appends a sanitized string field of obj, or "" when missing. */
static void put_field(pb_buf *b, json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_string(v)) pb_format_sanitize(b, json_string_value(v), json_string_length(v));
}

static void put_count(pb_buf *b, json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_integer(v)) pb_buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else pb_buf_putc(b, '?');
}

static void print_table(FILE *out, json_t *table)
{
    pb_buf line = PB_BUF_INIT, cell = PB_BUF_INIT;
    put_field(&line, table, "schema");
    if (line.len) pb_buf_putc(&line, '.');
    put_field(&line, table, "name");
    pb_buf_puts(&line, "  rows=");
    put_count(&line, table, "rows");
    pb_buf_puts(&line, " capacity=");
    put_count(&line, table, "capacity");
    pb_buf_puts(&line, " dropped=");
    put_count(&line, table, "rows_dropped");
    fprintf(out, "%s\n", line.data ? line.data : "");

    pb_buf_reset(&line);
    put_field(&line, table, "doc");
    if (line.len) fprintf(out, "    %s\n", line.data);
    /* The agent states why a table may be empty; that only matters while it is. */
    json_t *rows = json_object_get(table, "rows");
    pb_buf_reset(&line);
    if (!json_is_integer(rows) || json_integer_value(rows) == 0)
        put_field(&line, table, "empty_reason");
    if (line.len) fprintf(out, "    (empty: %s)\n", line.data);

    json_t *columns = json_object_get(table, "columns"), *column;
    size_t i, name_width = 0, type_width = 0;
    json_array_foreach(columns, i, column) {
        pb_buf_reset(&cell);
        put_field(&cell, column, "name");
        size_t w = pb_format_display_width(cell.data ? cell.data : "", cell.len);
        if (w > name_width) name_width = w;
        pb_buf_reset(&cell);
        put_field(&cell, column, "type");
        if (cell.len > type_width) type_width = cell.len;
    }
    json_array_foreach(columns, i, column) {
        pb_buf_reset(&line);
        pb_buf_puts(&line, "    ");
        pb_buf_reset(&cell);
        put_field(&cell, column, "name");
        pb_buf_append(&line, cell.data ? cell.data : "", cell.len);
        for (size_t w = pb_format_display_width(cell.data ? cell.data : "", cell.len);
             w < name_width + 2; w++)
            pb_buf_putc(&line, ' ');
        pb_buf_reset(&cell);
        put_field(&cell, column, "type");
        pb_buf_append(&line, cell.data ? cell.data : "", cell.len);
        for (size_t w = cell.len; w < type_width + 2; w++) pb_buf_putc(&line, ' ');
        put_field(&line, column, "doc");
        while (line.len && line.data[line.len - 1] == ' ') line.data[--line.len] = '\0';
        fprintf(out, "%s\n", line.data);
    }
    pb_buf_free(&line);
    pb_buf_free(&cell);
}

int pb_format_tables(FILE *out, json_t *tables)
{
    size_t i;
    json_t *table;
    json_array_foreach(tables, i, table) {
        if (i) fputc('\n', out);
        if (json_is_object(table)) print_table(out, table);
    }
    if (!json_array_size(tables)) fprintf(out, "(no tables)\n");
    return ferror(out) ? -EIO : 0;
}
