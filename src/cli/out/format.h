/*
 * format.h - printing query results and other tables: aligned text, CSV, JSON.
 *
 * Results arrive as jansson values: columns (array of strings) and rows (array of arrays of
 * scalars). Text meant for a terminal is sanitized (control characters shown as escapes) so a
 * hostile or binary value cannot move the cursor or break alignment; CSV and JSON carry values
 * exactly.
 */
#ifndef PB_CLI_FORMAT_H
#define PB_CLI_FORMAT_H

#include "buf.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

typedef enum pb_format { PB_FORMAT_TABLE = 1, PB_FORMAT_CSV = 2, PB_FORMAT_JSON = 4 } pb_format;

/* Parses a -f value among the formats in allowed (a mask of pb_format). NULL name gives
 * PB_FORMAT_TABLE. Returns 0, or prints a usage error and returns PB_EXIT_USAGE. */
int pb_format_parse(const char *name, unsigned allowed, const char *command, pb_format *out);

typedef enum pb_table_style {
    PB_TABLE_GRID,  /* psql-like: " a | b ", separator line, "(N rows)" */
    PB_TABLE_PLAIN, /* ps-like: left-aligned header, two spaces between columns */
} pb_table_style;

/* Prints columns (array of strings) and rows (array of arrays), both borrowed, to out in fmt.
 * Rows shorter than the header are padded with NULL, extra cells are ignored. Returns 0 or
 * -EIO when writing out failed. */
int pb_format_rows(FILE *out, pb_format fmt, pb_table_style style, json_t *columns,
                   json_t *rows);

/* Writes a JSON value (borrowed) to b compactly, with doubles in their shortest exact form.
 * Returns 0 or the pb_buf error. */
int pb_format_json_value(pb_buf *b, json_t *v);

/* Writes v (borrowed) to out as indented JSON (two spaces), doubles in their shortest exact
 * form, then a newline. Returns 0 or -EIO / -ENOMEM. */
int pb_format_json_pretty(FILE *out, json_t *v);

/* A REAL for people: up to 6 significant digits below 1, 6 decimals above, exponent form only
 * for very large or very small magnitudes ("0.000123", "12.345679", "1.5e+20"). */
void pb_format_real_human(double v, char *out, size_t outlen);

/* The shortest decimal form that reads back as exactly v ("0.1", not 0.10000000000000001). */
void pb_format_real_exact(double v, char *out, size_t outlen);

/* Appends s[0..len) to b with control characters escaped (\n, \t, \x1b, \u009b) so it stays on
 * one line and cannot drive the terminal. Returns 0 or the pb_buf error. */
int pb_format_sanitize(pb_buf *b, const char *s, size_t len);

/* Replaces, in place, every string inside v (values of objects, items of arrays, at any depth)
 * that holds a control character by its pb_format_sanitize form: for an answer of a rank that
 * is printed as text (hang, ranks), so that nothing the job controls reaches the terminal raw
 * and no name can start a line of its own. Keys are left alone (only known keys are read).
 * Returns 0 or -ENOMEM. */
int pb_format_sanitize_json(json_t *v);

/* Terminal columns taken by UTF-8 text (wide East Asian characters count 2). */
size_t pb_format_display_width(const char *s, size_t len);

/* Writes the "tables" array of a target's GET /api/tables (borrowed) as `probing <target>
 * tables` shows it: each table with its fill level, its doc and why it is empty, then its
 * columns with their types and docs, everything the agent sent sanitized. Returns 0 or -EIO. */
int pb_format_tables(FILE *out, json_t *tables);

/* Seconds as "42s", "5m07s", "1h02m", "3d04h". */
void pb_format_duration(double seconds, char *out, size_t outlen);

#endif
