/*
 * check.h - the few macros the C unit tests share.
 *
 * CHECK(cond, fmt, ...) prints "ok   - <what>" or "FAIL - <what> (file:line)" and counts
 * failures; a test's main() ends with `return check_summary();`, which is non-zero when any
 * check failed. Tests keep going after a failure so one run shows every broken behaviour.
 */
#ifndef PB_TESTS_CHECK_H
#define PB_TESTS_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        int check_ok_ = !!(cond);                                                              \
        check_count++;                                                                         \
        printf("%s - ", check_ok_ ? "ok  " : "FAIL");                                          \
        printf(__VA_ARGS__);                                                                   \
        if (!check_ok_) {                                                                      \
            check_failures++;                                                                  \
            printf("  (%s:%d: %s)", __FILE__, __LINE__, #cond);                                \
        }                                                                                      \
        printf("\n");                                                                          \
        fflush(stdout);                                                                        \
    } while (0)

#define CHECK_STR(got, want, what)                                                             \
    do {                                                                                       \
        const char *check_got_ = (got), *check_want_ = (want);                                 \
        CHECK(check_got_ && strcmp(check_got_, check_want_) == 0, "%s", what);                 \
        if (!check_got_ || strcmp(check_got_, check_want_) != 0)                               \
            printf("       got:  %s\n       want: %s\n", check_got_ ? check_got_ : "(null)",    \
                   check_want_);                                                               \
    } while (0)

static inline int check_summary(void)
{
    printf("%d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
