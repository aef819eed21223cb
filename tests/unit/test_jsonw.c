/*
 * test_jsonw.c - the size of escaped JSON strings (src/common/jsonw.c, pb_json_escaped_len).
 *
 * An eval's output is kept up to a ceiling measured as it will be escaped in the answer
 * (src/server/api.h), so the count must be exactly what pb_json_escape writes, on every kind of
 * byte: plain ASCII, quotes and backslashes, control characters (six bytes each), valid UTF-8
 * of every length and the invalid bytes that become U+FFFD. Pieces written one at a time must
 * never escape to more together than the sum of their counts (the ceiling adds pieces up).
 *
 * The writer's errors are sticky (jsonw.h): after the first failed append every call returns it
 * and writes nothing, so a document checked once at its end (pb_jsonw_error) is never answered
 * half-written; pb_jsonw_restore takes back a row that crossed a cap, its error included.
 *
 * Beside them, the one byte formatter of messages (buf.h, pb_buf_format_bytes): units, decimals
 * and a destination too small for the text.
 */
#include "buf.h"
#include "check.h"
#include "error.h"
#include "jsonw.h"

#include <stdint.h>
#include <string.h>

/* What pb_json_escape writes between its quotes. */
static size_t escaped(const char *s, size_t len)
{
    pb_buf b = PB_BUF_INIT;
    size_t n = pb_json_escape(&b, s, len) == 0 ? b.len - 2 : SIZE_MAX;
    pb_buf_free(&b);
    return n;
}

static void sticky_errors(void)
{
    pb_buf b = PB_BUF_INIT;
    b.max_len = 16;
    pb_jsonw w;
    pb_jsonw_init(&w, &b);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "k");
    pb_jsonw_str(&w, "a value far longer than sixteen bytes");
    size_t len_at_error = b.len;
    int first = pb_jsonw_error(&w);
    CHECK(first == PB_ETOOBIG, "the append past the cap is the writer's error (%d)", first);
    CHECK(pb_jsonw_key(&w, "x") == first && pb_jsonw_int(&w, 1) == first &&
              pb_jsonw_obj_end(&w) == first && pb_jsonw_null(&w) == first,
          "every later call returns the first error");
    CHECK(b.len == len_at_error, "and writes nothing (%zu bytes, %zu at the error)", b.len, len_at_error);
    CHECK(pb_jsonw_error(&w) == first, "checked once at the end, the error is still there");
    pb_buf_free(&b);

    /* a row taken back: the writer goes on as if it had never been written */
    b = (pb_buf)PB_BUF_INIT;
    pb_jsonw_init(&w, &b);
    pb_jsonw_arr_begin(&w);
    pb_jsonw_int(&w, 1);
    pb_jsonw_mark m = pb_jsonw_save(&w);
    b.max_len = b.len + 4;
    pb_jsonw_str(&w, "too long for the cap");
    CHECK(pb_jsonw_error(&w) == PB_ETOOBIG, "the row crossing the cap fails");
    b.max_len = 0;
    pb_jsonw_restore(&w, m);
    CHECK(pb_jsonw_error(&w) == 0, "restore clears the error");
    pb_jsonw_int(&w, 2);
    pb_jsonw_arr_end(&w);
    CHECK(pb_jsonw_error(&w) == 0 && b.data && strcmp(b.data, "[1,2]") == 0,
          "and takes the row back: %s", b.data ? b.data : "(null)");
    pb_buf_free(&b);
}

/* The values that may be missing: null exactly when missing. */
static void or_null(void)
{
    pb_buf b = PB_BUF_INIT;
    pb_jsonw w;
    pb_jsonw_init(&w, &b);
    pb_jsonw_arr_begin(&w);
    pb_jsonw_str_or_null(&w, "a");
    pb_jsonw_str_or_null(&w, "");
    pb_jsonw_str_or_null(&w, NULL);
    pb_jsonw_int_or_null(&w, 1, -7);
    pb_jsonw_int_or_null(&w, 0, 7);
    pb_jsonw_double_or_null(&w, 1, 0.5);
    pb_jsonw_double_or_null(&w, 0, 0.5);
    pb_jsonw_arr_end(&w);
    CHECK(pb_jsonw_error(&w) == 0 && pb_buf_puts(&b, "") == 0 &&
              strcmp(b.data, "[\"a\",null,null,-7,null,0.5,null]") == 0,
          "or_null: each value, or null when missing (%s)", b.data ? b.data : "");
    pb_buf_free(&b);
}

static void format_bytes(void)
{
    static const struct {
        unsigned long long bytes;
        const char *want;
    } cases[] = {{0, "0 bytes"},       {1023, "1023 bytes"}, {1024, "1 KB"},  {1536, "1.5 KB"},
                 {512 * 1024, "512 KB"}, {1 << 20, "1 MB"},     {3 << 19, "1.5 MB"},
                 {3ull << 30, "3072 MB"}, {1048524, "1023.9 KB"}, {1048525, "1.0 MB"},
                 {1047552, "1023 KB"}};
    char out[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pb_buf_format_bytes(out, sizeof out, cases[i].bytes);
        CHECK(strcmp(out, cases[i].want) == 0, "format_bytes(%llu) = \"%s\", want \"%s\"", cases[i].bytes, out,
              cases[i].want);
    }
    char small[4];
    pb_buf_format_bytes(small, sizeof small, 1 << 20);
    CHECK(strcmp(small, "1 M") == 0, "format_bytes cuts to the destination, terminated (\"%s\")", small);
}

int main(void)
{
    sticky_errors();
    format_bytes();
    or_null();
    static const struct {
        const char *s;
        size_t len;
        size_t want;
        const char *what;
    } cases[] = {
        {"hello", 5, 5, "plain ASCII counts one byte each"},
        {"a\"b\\c", 5, 7, "a quote and a backslash count two"},
        {"\n\r\t", 3, 6, "newline, return and tab count two"},
        {"\x01\x1f", 2, 12, "other control characters count six (\\u00XX)"},
        {"\xc3\xa9", 2, 2, "a valid two-byte character is copied"},
        {"\xe2\x82\xac\xf0\x9f\x98\x80", 7, 7, "valid three- and four-byte characters are copied"},
        {"\xff", 1, 3, "an invalid byte becomes U+FFFD, three bytes"},
        {"\xe2\x82", 2, 6, "a cut sequence is two invalid bytes"},
        {"\xc0\xaf", 2, 6, "an overlong encoding is invalid"},
        {"\xed\xa0\x80", 3, 9, "an encoded surrogate is invalid"},
        {"", 0, 0, "nothing counts nothing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = pb_json_escaped_len(cases[i].s, cases[i].len, SIZE_MAX);
        CHECK(n == cases[i].want && n == escaped(cases[i].s, cases[i].len), "%s (%zu, want %zu)",
              cases[i].what, n, cases[i].want);
    }
    CHECK(pb_json_escaped_len("\x01\x01\x01\x01", 4, 10) > 10,
          "the count stops once it passes the limit, above it");

    /* Random bytes, biased to the interesting ones: the count is exact, and two pieces escape
     * to no more together than apart. */
    uint32_t seed = 12345;
    int exact = 1, additive = 1;
    char s[64];
    for (int round = 0; round < 20000 && exact && additive; round++) {
        size_t len = 0;
        seed = seed * 1103515245u + 12345u;
        len = (seed >> 16) % sizeof s;
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            static const unsigned char pick[] = {'a', '"', '\\', '\n', 0x01, 0x7f, 0x80, 0xbf,
                                                 0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0xff};
            s[i] = (char)pick[(seed >> 16) % sizeof pick];
        }
        size_t whole = pb_json_escaped_len(s, len, SIZE_MAX);
        exact = whole == escaped(s, len);
        seed = seed * 1103515245u + 12345u;
        size_t cut = len ? (seed >> 16) % (len + 1) : 0;
        additive = whole <= pb_json_escaped_len(s, cut, SIZE_MAX) +
                                 pb_json_escaped_len(s + cut, len - cut, SIZE_MAX);
    }
    CHECK(exact, "the count is what pb_json_escape writes, on 20000 random strings");
    CHECK(additive, "a string never escapes to more than its two pieces counted apart");
    return check_summary();
}
