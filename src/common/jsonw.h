/*
 * jsonw.h - a streaming JSON writer over pb_buf.
 *
 * Used where results are large (query rows) and building a tree first (jansson) would double
 * memory. It tracks nothing but commas: callers write well-formed structure. Strings are
 * escaped per RFC 8259; invalid UTF-8 bytes are replaced with U+FFFD so output is always valid
 * JSON. Doubles that are not finite are written as null. Each function returns 0 or the error of
 * the underlying pb_buf append (-ENOMEM, PB_ETOOBIG).
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
} pb_jsonw;

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
/* Appends s as an escaped JSON string (with quotes) to b, no comma logic. */
int pb_json_escape(pb_buf *b, const char *s, size_t len);

/* How many bytes pb_json_escape writes for s between its quotes, or a value above stop as soon
 * as the count passes stop (so a huge s is not scanned to its end). Escaping a concatenation
 * never takes more than the sum of its parts. [any thread] */
size_t pb_json_escaped_len(const char *s, size_t len, size_t stop);

#endif
