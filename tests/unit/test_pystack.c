/*
 * test_pystack.c - the CPython 3.11+ location-table decoder of src/remote/pystack.c.
 *
 * The table and the expected lines come from CPython 3.11.7 itself: co_linetable of
 *   def f(a):
 *       x = 1
 *       if a:
 *           y = [i
 *                for i in range(3)]
 *       return (x +
 *               2)
 * and, per 2-byte code unit, the line co_lines() gives (None written as 0).
 */
#include "pystack.h"

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            failures++;                                                                           \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                           \
            printf(__VA_ARGS__);                                                                  \
            printf("\n");                                                                         \
        }                                                                                         \
    } while (0)

static const uint8_t table[] = {128, 0, 216, 8, 9, 128, 65, 216, 7, 8, 240, 0, 2, 5, 32, 240, 2,
                                1, 13, 32, 240, 0, 1, 13, 32, 221, 22, 27, 152, 65, 145, 104, 148,
                                104, 240, 3, 1, 13, 32, 241, 0, 1, 13, 32, 244, 0, 1, 13, 32, 136,
                                1, 224, 12, 13, 216, 12, 13, 241, 3, 1, 13, 14, 240, 0, 1, 5, 15};
static const int expected[] = {1, 2, 2, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
                               5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4, 4, 6, 7, 6, 6, 6};

int main(void)
{
    int n = (int)(sizeof expected / sizeof expected[0]);
    for (int i = 0; i < n; i++) {
        int line = pb_pystack_line_311(table, sizeof table, 1, i);
        CHECK(line == expected[i], "instruction %d: line %d, expected %d", i, line, expected[i]);
    }
    /* Before the first instruction (a frame that has not started): the first line. */
    CHECK(pb_pystack_line_311(table, sizeof table, 1, -1) == 1, "index -1");
    /* Past the end, a truncated table and a table that does not start at an entry: 0. */
    CHECK(pb_pystack_line_311(table, sizeof table, 1, n + 5) == 0, "past the end");
    CHECK(pb_pystack_line_311(table, 12, 1, 30) == 0, "truncated");
    CHECK(pb_pystack_line_311(table + 1, sizeof table - 1, 1, 0) == 0, "not at an entry");
    /* A long-form entry whose varint runs off the end must not read past it. */
    static const uint8_t cut[] = {0xF0, 0x40};
    CHECK(pb_pystack_line_311(cut, sizeof cut, 10, 0) == 0, "cut varint");

    /* 3.9 co_lnotab: (address increment, line increment) pairs from co_firstlineno. */
    static const uint8_t lnotab[] = {2, 1, 4, 2, 2, (uint8_t)-1};
    CHECK(pb_pystack_line_lnotab(lnotab, sizeof lnotab, 1, 0) == 1, "lnotab 0");
    CHECK(pb_pystack_line_lnotab(lnotab, sizeof lnotab, 1, 2) == 2, "lnotab 2");
    CHECK(pb_pystack_line_lnotab(lnotab, sizeof lnotab, 1, 5) == 2, "lnotab 5");
    CHECK(pb_pystack_line_lnotab(lnotab, sizeof lnotab, 1, 6) == 4, "lnotab 6");
    CHECK(pb_pystack_line_lnotab(lnotab, sizeof lnotab, 1, 8) == 3, "lnotab negative delta");
    CHECK(pb_pystack_line_lnotab(lnotab, 3, 1, 100) == 2, "lnotab odd length");

    /* 3.10 co_linetable: (byte length, line delta or -128) ranges. */
    static const uint8_t lt[] = {2, 0, 4, 1, 2, (uint8_t)-128, 2, 2};
    CHECK(pb_pystack_line_310(lt, sizeof lt, 10, 0) == 10, "310 first range");
    CHECK(pb_pystack_line_310(lt, sizeof lt, 10, 4) == 11, "310 second range");
    CHECK(pb_pystack_line_310(lt, sizeof lt, 10, 6) == 0, "310 no line");
    CHECK(pb_pystack_line_310(lt, sizeof lt, 10, 8) == 13, "310 after a no-line range");
    CHECK(pb_pystack_line_310(lt, sizeof lt, 10, 10) == 0, "310 past the end");
    CHECK(pb_pystack_line_310(lt, sizeof lt, 10, -1) == 10, "310 before the start");
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
    return failures != 0;
}
