/* jsonw.c - streaming JSON writer; see jsonw.h. */
#include "jsonw.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void pb_jsonw_init(pb_jsonw *w, pb_buf *out)
{
    w->out = out;
    w->need_comma = 0;
    w->after_key = 0;
    w->err = 0;
}

int pb_jsonw_error(const pb_jsonw *w) { return w->err; }

pb_jsonw_mark pb_jsonw_save(const pb_jsonw *w)
{
    return (pb_jsonw_mark){.len = w->out->len, .need_comma = w->need_comma, .after_key = w->after_key};
}

void pb_jsonw_restore(pb_jsonw *w, pb_jsonw_mark m)
{
    if (m.len <= w->out->len) {
        w->out->len = m.len;
        if (w->out->data) w->out->data[m.len] = '\0';
    }
    w->need_comma = m.need_comma;
    w->after_key = m.after_key;
    w->err = 0;
}

/* Keeps the first error. */
static int keep(pb_jsonw *w, int rc)
{
    if (rc && !w->err) w->err = rc;
    return rc;
}

static int sep(pb_jsonw *w)
{
    if (w->after_key) {
        w->after_key = 0;
        return 0;
    }
    if (w->need_comma) return pb_buf_putc(w->out, ',');
    return 0;
}

static int open_(pb_jsonw *w, char c)
{
    int rc = sep(w);
    if (rc) return rc;
    w->need_comma = 0;
    return pb_buf_putc(w->out, c);
}

static int close_(pb_jsonw *w, char c)
{
    w->need_comma = 1;
    return pb_buf_putc(w->out, c);
}

int pb_jsonw_obj_begin(pb_jsonw *w) { return w->err ? w->err : keep(w, open_(w, '{')); }
int pb_jsonw_obj_end(pb_jsonw *w) { return w->err ? w->err : keep(w, close_(w, '}')); }
int pb_jsonw_arr_begin(pb_jsonw *w) { return w->err ? w->err : keep(w, open_(w, '[')); }
int pb_jsonw_arr_end(pb_jsonw *w) { return w->err ? w->err : keep(w, close_(w, ']')); }

int pb_jsonw_key(pb_jsonw *w, const char *key)
{
    if (w->err) return w->err;
    int rc = sep(w);
    if (!rc) rc = pb_json_escape(w->out, key, strlen(key));
    if (!rc) rc = pb_buf_putc(w->out, ':');
    w->need_comma = 1;
    w->after_key = 1;
    return keep(w, rc);
}

static int value_done(pb_jsonw *w, int rc)
{
    w->need_comma = 1;
    return keep(w, rc);
}

int pb_jsonw_str(pb_jsonw *w, const char *s)
{
    if (w->err) return w->err;
    if (!s) return pb_jsonw_null(w);
    return pb_jsonw_strn(w, s, strlen(s));
}

int pb_jsonw_strn(pb_jsonw *w, const char *s, size_t len)
{
    if (w->err) return w->err;
    int rc = sep(w);
    if (!rc) rc = pb_json_escape(w->out, s, len);
    return value_done(w, rc);
}

int pb_jsonw_int(pb_jsonw *w, int64_t v)
{
    if (w->err) return w->err;
    int rc = sep(w);
    if (!rc) rc = pb_buf_printf(w->out, "%" PRId64, v);
    return value_done(w, rc);
}

int pb_jsonw_double(pb_jsonw *w, double v)
{
    if (w->err) return w->err;
    if (!isfinite(v)) return pb_jsonw_null(w);
    int rc = sep(w);
    if (!rc) {
        char tmp[40];
        int n = snprintf(tmp, sizeof tmp, "%.17g", v);
        /* %.17g can print "1e+20" or "3": both are valid JSON numbers. */
        rc = pb_buf_append(w->out, tmp, (size_t)n);
    }
    return value_done(w, rc);
}

int pb_jsonw_bool(pb_jsonw *w, int v)
{
    if (w->err) return w->err;
    int rc = sep(w);
    if (!rc) rc = pb_buf_puts(w->out, v ? "true" : "false");
    return value_done(w, rc);
}

int pb_jsonw_null(pb_jsonw *w)
{
    if (w->err) return w->err;
    int rc = sep(w);
    if (!rc) rc = pb_buf_puts(w->out, "null");
    return value_done(w, rc);
}

int pb_jsonw_str_or_null(pb_jsonw *w, const char *s)
{
    return s && s[0] ? pb_jsonw_str(w, s) : pb_jsonw_null(w);
}

int pb_jsonw_int_or_null(pb_jsonw *w, int present, int64_t v)
{
    return present ? pb_jsonw_int(w, v) : pb_jsonw_null(w);
}

int pb_jsonw_double_or_null(pb_jsonw *w, int present, double v)
{
    return present ? pb_jsonw_double(w, v) : pb_jsonw_null(w);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0];
    size_t n;
    uint32_t cp;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
    else return 0;
    if (n > avail) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

int pb_json_escape(pb_buf *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    int rc = pb_buf_reserve(b, len + 2);
    if (rc) return rc;
    rc = pb_buf_putc(b, '"');
    size_t i = 0;
    while (!rc && i < len) {
        size_t run = i;
        /* copy plain ASCII runs in one append */
        while (run < len && p[run] >= 0x20 && p[run] < 0x80 && p[run] != '"' && p[run] != '\\')
            run++;
        if (run > i) {
            rc = pb_buf_append(b, s + i, run - i);
            i = run;
            continue;
        }
        unsigned char c = p[i];
        if (c == '"') rc = pb_buf_append(b, "\\\"", 2);
        else if (c == '\\') rc = pb_buf_append(b, "\\\\", 2);
        else if (c == '\n') rc = pb_buf_append(b, "\\n", 2);
        else if (c == '\r') rc = pb_buf_append(b, "\\r", 2);
        else if (c == '\t') rc = pb_buf_append(b, "\\t", 2);
        else if (c < 0x20) {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            rc = pb_buf_append(b, esc, 6);
        } else {
            size_t n = utf8_len(p + i, len - i);
            if (n == 0) {
                rc = pb_buf_append(b, "\xEF\xBF\xBD", 3);
                i++;
                continue;
            }
            rc = pb_buf_append(b, s + i, n);
            i += n;
            continue;
        }
        i++;
    }
    if (!rc) rc = pb_buf_putc(b, '"');
    return rc;
}

size_t pb_json_escaped_len(const char *s, size_t len, size_t stop)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0, i = 0;
    while (i < len && n <= stop) {
        unsigned char c = p[i];
        if (c >= 0x20 && c < 0x80) {
            n += (c == '"' || c == '\\') ? 2 : 1;
            i++;
        } else if (c < 0x20) {
            n += (c == '\n' || c == '\r' || c == '\t') ? 2 : 6;
            i++;
        } else {
            size_t k = utf8_len(p + i, len - i);
            n += k ? k : 3; /* an invalid byte becomes U+FFFD, three bytes */
            i += k ? k : 1;
        }
    }
    return n;
}
