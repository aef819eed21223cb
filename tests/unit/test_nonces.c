/*
 * test_nonces.c - the replay store of signed requests (src/server/nonces.c).
 *
 * With a clock of the test's own: a nonce is refused as a replay for the whole window (until
 * the request's time + PB_AUTH_WINDOW_S) however many other nonces came in between (the old
 * ring forgot one after 2,048 others); it is accepted again only once past; a store full of
 * live nonces refuses the next one (-ENOSPC, with the seconds until room) rather than forget
 * one, and takes new ones once some expire; backward-shift deletion keeps every live entry
 * findable (checked against a plain list, after many sweeps on a crowded table).
 */
#include "auth.h"
#include "check.h"
#include "nonces.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W PB_AUTH_WINDOW_S

static void nonce_of(unsigned i, char out[PB_AUTH_NONCE_HEX + 1])
{
    /* distinct, and most of them landing on few home slots, to crowd the probes */
    snprintf(out, PB_AUTH_NONCE_HEX + 1, "%08x%08x%016x", i % 7, 0u, i);
}

int main(void)
{
    pb__nonces *n = NULL;
    char a[PB_AUTH_NONCE_HEX + 1], b[PB_AUTH_NONCE_HEX + 1];
    int64_t now = 1700000000, retry = 0;
    CHECK(pb__nonces_new(&n, 0) == -EINVAL && !n, "a store for no nonce is refused");

    /* the window: 2,100 others in between do not make it forget */
    CHECK(pb__nonces_new(&n, PB__NONCES_DEFAULT) == 0, "a store of the default size");
    pb_auth_random_hex(a, PB_AUTH_NONCE_HEX / 2);
    CHECK(pb__nonces_add(n, a, now + W, now, NULL) == 0, "a new nonce is taken");
    CHECK(pb__nonces_add(n, a, now + W, now, NULL) == -EEXIST, "the same again is a replay");
    int others = 0;
    for (int i = 0; i < 2100; i++) {
        pb_auth_random_hex(b, PB_AUTH_NONCE_HEX / 2);
        others += pb__nonces_add(n, b, now + 1 + W, now + 1, NULL) == 0;
    }
    CHECK(others == 2100, "2,100 other nonces taken (%d)", others);
    CHECK(pb__nonces_add(n, a, now + W, now + W, NULL) == -EEXIST,
          "after them, and W s later (the last second its request is accepted), still a replay");
    CHECK(pb__nonces_add(n, a, now + 2 * W + 1, now + W + 1, NULL) == 0,
          "once past the window it may be taken again (its request is refused as stale anyway)");
    CHECK(pb__nonces_add(n, "ABABABABABABABABABABABABABABABAB", now + W, now, NULL) == -EINVAL &&
              pb__nonces_add(n, "abab", now + W, now, NULL) == -EINVAL,
          "a nonce that is not 32 lowercase hex digits is refused");
    pb__nonces_free(n);

    /* full: refuses, never forgets; room again once the first expire */
    CHECK(pb__nonces_new(&n, 64) == 0, "a store of 64");
    int taken = 0;
    for (unsigned i = 0; i < 64; i++) {
        nonce_of(i, b);
        taken += pb__nonces_add(n, b, now + W + (i < 10 ? 0 : 50), now, NULL) == 0;
    }
    CHECK(taken == 64, "64 nonces taken (%d)", taken);
    nonce_of(1000, b);
    CHECK(pb__nonces_add(n, b, now + W, now, &retry) == -ENOSPC && retry == W + 1,
          "the 65th is refused while all 64 are live, room in %" PRId64 " s (W + 1)", retry);
    CHECK(pb__nonces_add(n, b, now + W + 10, now + 10, &retry) == -ENOSPC && retry == W - 9,
          "10 s later still refused, room in %" PRId64 " s", retry);
    int replays = 0;
    for (unsigned i = 0; i < 64; i++) {
        nonce_of(i, a);
        replays += pb__nonces_add(n, a, now + W, now + 10, NULL) == -EEXIST;
    }
    CHECK(replays == 64, "every one of the 64 is still a replay while full (%d)", replays);
    CHECK(pb__nonces_add(n, b, now + 2 * W, now + W + 1, &retry) == 0,
          "once the first 10 are past, a new one is taken");
    CHECK(pb__nonces_count(n) == 55, "the 10 expired were swept, 54 + 1 held (%zu)",
          pb__nonces_count(n));
    replays = 0;
    for (unsigned i = 10; i < 64; i++) {
        nonce_of(i, a);
        replays += pb__nonces_add(n, a, now + W, now + W + 1, NULL) == -EEXIST;
    }
    CHECK(replays == 54, "the 54 live ones are all still found after the sweep moved them (%d)",
          replays);
    pb__nonces_free(n);

    /* many rounds of sweeps on a crowded table against a plain list */
    CHECK(pb__nonces_new(&n, 256) == 0, "a store of 256");
    static int64_t expiry_of[4096];
    int wrong = 0;
    uint64_t x = 88172645463325252ULL;
    for (int64_t t = 0; t < 4000; t++) {
        for (int k = 0; k < 3; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            unsigned i = (unsigned)(x % 4096);
            int64_t when = now + t, exp = when + (int64_t)(x >> 40) % 40;
            nonce_of(i, a);
            int rc = pb__nonces_add(n, a, exp, when, NULL);
            int live = expiry_of[i] >= when;
            if (live && rc != -EEXIST) wrong++;
            if (!live && rc == 0) expiry_of[i] = exp;
            if (!live && rc != 0 && rc != -ENOSPC) wrong++;
        }
    }
    CHECK(wrong == 0, "12,000 adds with sweeps: every live nonce found, none refused wrongly (%d)",
          wrong);
    pb__nonces_free(n);
    pb__nonces_free(NULL);
    return check_summary();
}
