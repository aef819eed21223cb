/*
 * test_intern.c - string interning: the empty string, dedup, stable ids and pointers, lengths
 * without NUL, unknown ids, concurrent interning from several threads (same ids everywhere) and
 * lock-free lookups from another thread while the table grows, then reset.
 */
#include "check.h"
#include "intern.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define NAMES 5000
#define THREADS 4

static uint32_t ids[THREADS][NAMES];
static atomic_int interners_done;
static atomic_ulong lookups_bad;

static void *interner(void *arg)
{
    int t = (int)(intptr_t)arg;
    char name[32];
    for (int k = 0; k < NAMES; k++) {
        int i = (t & 1) ? NAMES - 1 - k : k; /* half the threads go backwards */
        snprintf(name, sizeof name, "module.layer%d", i);
        ids[t][i] = pb_intern_cstr(name);
    }
    atomic_fetch_add(&interners_done, 1);
    return NULL;
}

static void *looker(void *arg)
{
    (void)arg;
    do {
        uint32_t n = pb_intern_count();
        for (uint32_t id = 1; id < n; id++) {
            const char *s = pb_intern_get(id);
            if (!s || (strncmp(s, "module.layer", 12) != 0 && strcmp(s, "alpha") != 0 && strcmp(s, "beta") != 0 &&
                       strcmp(s, "abc") != 0))
                atomic_fetch_add(&lookups_bad, 1);
        }
    } while (atomic_load(&interners_done) < THREADS);
    return NULL;
}

int main(void)
{
    CHECK(pb_intern("", 0) == 0 && pb_intern_cstr(NULL) == 0 && strcmp(pb_intern_get(0), "") == 0,
          "id 0 is the empty string");
    uint32_t a = pb_intern_cstr("alpha"), b = pb_intern_cstr("beta");
    CHECK(a != 0 && b != 0 && a != b, "distinct strings get distinct ids");
    CHECK(pb_intern_cstr("alpha") == a, "the same string gets the same id");
    const char *pa = pb_intern_get(a);
    CHECK(strcmp(pa, "alpha") == 0 && strcmp(pb_intern_get(b), "beta") == 0, "lookup returns the text");
    CHECK(pb_intern("abcdef", 3) == pb_intern_cstr("abc") && strcmp(pb_intern_get(pb_intern("abcdef", 3)), "abc") == 0,
          "length-limited input is copied, not read to NUL");
    CHECK(strcmp(pb_intern_get(999999), "") == 0, "an unknown id reads as \"\"");
    uint32_t before = pb_intern_count();
    CHECK(before == 4, "count includes id 0 (%u)", before);

    pthread_t th[THREADS], lk;
    pthread_create(&lk, NULL, looker, NULL);
    for (intptr_t t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, interner, (void *)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    pthread_join(lk, NULL);
    int same = 1, right = 1;
    char name[32];
    for (int i = 0; i < NAMES; i++) {
        for (int t = 1; t < THREADS; t++) same &= ids[t][i] == ids[0][i];
        snprintf(name, sizeof name, "module.layer%d", i);
        right &= ids[0][i] != 0 && strcmp(pb_intern_get(ids[0][i]), name) == 0;
    }
    CHECK(same, "%d threads interning the same %d names agree on every id", THREADS, NAMES);
    CHECK(right, "each id looks up to its name from the main thread");
    CHECK(pb_intern_count() == before + NAMES, "no duplicates were created (%u)", pb_intern_count());
    CHECK(atomic_load(&lookups_bad) == 0, "lock-free lookups during growth never saw a bad string");
    CHECK(pb_intern_get(a) == pa, "string pointers stay put while the table grows");

    pb_intern_reset();
    CHECK(pb_intern_count() == 1 && strcmp(pb_intern_get(a), "") == 0, "reset forgets every string");
    CHECK(pb_intern_cstr("again") == 1, "ids start over after reset");
    pb_intern_reset();
    return check_summary();
}
