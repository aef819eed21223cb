/*
 * jsonw.h - a streaming JSON writer over pb_buf.
 *
 * Used where results are large (query rows) and building a tree first (jansson) would double
 * memory. It tracks nothing but commas: callers write well-formed structure. Strings are
 * escaped per RFC 8259; invalid UTF-8 bytes are replaced with U+FFFD so output is always valid
 * JSON. Doubles that are not finite are written as null. Each function returns 0 or the error of
 * the underlying pb_buf append (-ENOMEM, PB_ETOOBIG).
 *
 * Errors are sticky, as SQLite's sqlite3_str: the first one is kept and every later call returns
 * it and writes nothing, so a document may be written without checking each call and checked
 * once at its end with pb_jsonw_error (the text written is then incomplete: the caller answers
 * an error instead). pb_jsonw_save / pb_jsonw_restore take back what was written since a mark,
 * the error included (a row that crossed a byte cap).
 */
#ifndef PB_COMMON_JSONW_H
#define PB_COMMON_JSONW_H

#include "buf.h"

#include <stddef.h>
#include <stdint.h>

typedef struct pb_jsonw {
    pb_buf *out;      /* borrowed */
    int need_comma;   /* a value was written at the current level */
    int after_key;    /* the next value follows a key */
    int err;          /* the first error (0 none): sticky */
} pb_jsonw;

/* A point to go back to (pb_jsonw_restore). */
typedef struct pb_jsonw_mark {
    size_t len;
    int need_comma, after_key;
} pb_jsonw_mark;

void pb_jsonw_init(pb_jsonw *w, pb_buf *out);
int pb_jsonw_obj_begin(pb_jsonw *w);
int pb_jsonw_obj_end(pb_jsonw *w);
int pb_jsonw_arr_begin(pb_jsonw *w);
int pb_jsonw_arr_end(pb_jsonw *w);
int pb_jsonw_key(pb_jsonw *w, const char *key);
int pb_jsonw_str(pb_jsonw *w, const char *s);
int pb_jsonw_strn(pb_jsonw *w, const char *s, size_t len);
int pb_jsonw_int(pb_jsonw *w, int64_t v);
int pb_jsonw_double(pb_jsonw *w, double v);
int pb_jsonw_bool(pb_jsonw *w, int v);
int pb_jsonw_null(pb_jsonw *w);
/* A value that may be missing: s, or null when s is NULL or ""; v, or null when !present. */
int pb_jsonw_str_or_null(pb_jsonw *w, const char *s);
int pb_jsonw_int_or_null(pb_jsonw *w, int present, int64_t v);
int pb_jsonw_double_or_null(pb_jsonw *w, int present, double v);
/* The first error of any call since init (or the last restore), 0 when none. */
int pb_jsonw_error(const pb_jsonw *w);
pb_jsonw_mark pb_jsonw_save(const pb_jsonw *w);
/* Takes back everything written since m, and the error: the writer is as it was at m. */
void pb_jsonw_restore(pb_jsonw *w, pb_jsonw_mark m);
/* Appends s as an escaped JSON string (with quotes) to b, no comma logic. */
int pb_json_escape(pb_buf *b, const char *s, size_t len);

/* How many bytes pb_json_escape writes for s between its quotes, or a value above stop as soon
 * as the count passes stop (so a huge s is not scanned to its end). Escaping a concatenation
 * never takes more than the sum of its parts. [any thread] */
size_t pb_json_escaped_len(const char *s, size_t len, size_t stop);

#endif
