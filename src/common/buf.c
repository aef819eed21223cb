/* buf.c - growable byte buffer; see buf.h. */
#include "buf.h"

#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pb_buf_reserve(pb_buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (b->max_len && b->len + extra > b->max_len) return PB_ETOOBIG;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > ((size_t)-1) / 2) return -ENOMEM;
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p) return -ENOMEM;
    if (!b->data) p[0] = '\0'; /* a new buffer holds "" (pb_buf_steal of an empty one) */
    b->data = p;
    b->cap = cap;
    return 0;
}

int pb_buf_append(pb_buf *b, const void *data, size_t len)
{
    int rc = pb_buf_reserve(b, len);
    if (rc) return rc;
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int pb_buf_puts(pb_buf *b, const char *s) { return pb_buf_append(b, s, strlen(s)); }

int pb_buf_putc(pb_buf *b, char c) { return pb_buf_append(b, &c, 1); }

int pb_buf_vprintf(pb_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap2);
    va_end(ap2);
    if (n < 0) return PB_EINTERNAL;
    if ((size_t)n < sizeof small) return pb_buf_append(b, small, (size_t)n);
    int rc = pb_buf_reserve(b, (size_t)n);
    if (rc) return rc;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int pb_buf_printf(pb_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = pb_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void pb_buf_reset(pb_buf *b)
{
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

void pb_buf_free(pb_buf *b)
{
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

char *pb_buf_steal(pb_buf *b, size_t *len_out)
{
    if (!b->data && pb_buf_reserve(b, 0)) return NULL;
    char *p = b->data;
    if (len_out) *len_out = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

int pb_buf_sanitize(pb_buf *b, const char *s, size_t len, int keep_newlines)
{
    int rc = 0;
    for (size_t i = 0; i < len && !rc; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') rc = keep_newlines ? pb_buf_putc(b, '\n') : pb_buf_puts(b, "\\n");
        else if (c == '\t') rc = pb_buf_puts(b, "\\t");
        else if (c == '\r') rc = pb_buf_puts(b, "\\r");
        else if (c < 0x20 || c == 0x7f) rc = pb_buf_printf(b, "\\x%02x", c);
        else if (c == 0xC2 && i + 1 < len && (unsigned char)s[i + 1] >= 0x80 &&
                 (unsigned char)s[i + 1] <= 0x9f) { /* C1 controls such as CSI */
            rc = pb_buf_printf(b, "\\u%04x", (unsigned char)s[i + 1]);
            i++;
        } else rc = pb_buf_putc(b, (char)c);
    }
    return rc;
}

void pb_buf_format_bytes(char *dst, size_t dstlen, unsigned long long bytes)
{
    const unsigned long long kb = 1024, mb = kb * kb;
    /* a count that rounds to 1024.0 KB is 1.0 MB */
    int in_mb = bytes >= mb || (bytes * 10 + kb / 2) / kb >= 10 * kb;
    unsigned long long unit = in_mb ? mb : kb;
    const char *name = in_mb ? "MB" : "KB";
    if (bytes < kb) snprintf(dst, dstlen, "%llu bytes", bytes);
    else if (bytes % unit == 0) snprintf(dst, dstlen, "%llu %s", bytes / unit, name);
    else snprintf(dst, dstlen, "%.1f %s", (double)bytes / (double)unit, name);
}

void pb_buf_sanitize_into(char *dst, size_t dstlen, const char *src)
{
    size_t n = 0, len = src ? strlen(src) : 0;
    if (!dstlen) return;
    for (size_t i = 0; i < len;) {
        /* one source character at a time: its escape or its UTF-8 bytes, whole or not at all */
        pb_buf piece = PB_BUF_INIT;
        size_t take = 1;
        unsigned char c = (unsigned char)src[i];
        if (c == 0xC2 && i + 1 < len) take = 2;
        else if ((c & 0xE0) == 0xC0) take = 2;
        else if ((c & 0xF0) == 0xE0) take = 3;
        else if ((c & 0xF8) == 0xF0) take = 4;
        if (i + take > len) take = len - i;
        int rc = pb_buf_sanitize(&piece, src + i, take, 0);
        int fits = !rc && piece.data && n + piece.len < dstlen;
        if (fits) {
            memcpy(dst + n, piece.data, piece.len);
            n += piece.len;
        }
        pb_buf_free(&piece);
        if (!fits) break;
        i += take;
    }
    dst[n] = '\0';
}
