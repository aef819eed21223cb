/*
 * buf.h - a growable byte buffer, the one string builder of the project.
 *
 * A pb_buf owns its memory. It is always NUL-terminated after any successful append, so
 * buf->data can be used as a C string. Appends return 0 or -ENOMEM; after a failed append the
 * buffer keeps its previous content. A limit (max_len, 0 = none) makes appends past it fail
 * with PB_ETOOBIG, which is how result sizes are capped. Not thread-safe.
 */
#ifndef PB_COMMON_BUF_H
#define PB_COMMON_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct pb_buf {
    char *data;
    size_t len;
    size_t cap;
    size_t max_len; /* 0 = unlimited */
} pb_buf;

#define PB_BUF_INIT {0}

int pb_buf_reserve(pb_buf *b, size_t extra);
int pb_buf_append(pb_buf *b, const void *data, size_t len);
int pb_buf_puts(pb_buf *b, const char *s);
int pb_buf_putc(pb_buf *b, char c);
int pb_buf_printf(pb_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int pb_buf_vprintf(pb_buf *b, const char *fmt, va_list ap);
void pb_buf_reset(pb_buf *b); /* len = 0, keeps memory */
void pb_buf_free(pb_buf *b);  /* frees memory; b may be reused after. NULL-safe. */
/* Appends s[0..len) with every control character escaped (\n, \t, \r, \x1b, C1 controls
 * such as CSI as \u009b), so that text from outside (a job, a file) cannot drive a terminal:
 * no ESC or OSC sequence, no carriage return, no line of its own. keep_newlines leaves '\n'
 * as is (a message of several lines). The one sanitiser of everything printed for people.
 * Returns 0 or the pb_buf error. */
int pb_buf_sanitize(pb_buf *b, const char *s, size_t len, int keep_newlines);

/* Writes src (NULL as "") into dst (dstlen bytes, always terminated) escaped as pb_buf_sanitize
 * does, cut where a whole character or escape no longer fits: for names a job controls (host
 * names, group names, a stack's files and functions) kept in fixed fields and printed later. */
void pb_buf_sanitize_into(char *dst, size_t dstlen, const char *src);

/* Writes a byte count for people into dst (always terminated): "512 bytes", "1.5 KB", "512 KB",
 * "1 MB", "2.5 MB" (KB and MB of 1024; whole multiples without a decimal). The one byte formatter
 * of the project's messages. */
void pb_buf_format_bytes(char *dst, size_t dstlen, unsigned long long bytes);

/* Hands the memory to the caller (who frees it with free()); b becomes empty. */
char *pb_buf_steal(pb_buf *b, size_t *len_out);

#endif
