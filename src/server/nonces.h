/*
 * nonces.h - the nonces of the signed requests an agent served, each remembered for as long as
 * its request could still be accepted; internal to src/server.
 *
 * A signed request (common/auth.h) is accepted while its time t is within PB_AUTH_WINDOW_S of
 * the agent's clock, so its nonce must be remembered until t + PB_AUTH_WINDOW_S: forgetting it
 * sooner (the old ring of the last 2,048) lets a captured request be served again. The store
 * holds at most `capacity` nonces whose time is not past; when it is full of them it refuses the
 * next request rather than forget one (the transport answers 503, saying when to try again).
 * Memory is fixed at creation: 2 x capacity slots of 24 bytes (a hash table with linear probing
 * and deletion by backward shift, so no tombstones). Only requests whose MAC verified are added:
 * no one without the token can fill it. Times are the caller's (tests pass their own clock).
 * [any thread: one mutex]
 */
#ifndef PB_SERVER_NONCES_H
#define PB_SERVER_NONCES_H

#include <stddef.h>
#include <stdint.h>

#define PB__NONCES_DEFAULT 16384 /* signed requests an agent serves per PB_AUTH_WINDOW_S at most */

typedef struct pb__nonces pb__nonces;

/* A store for at most capacity live nonces (>= 1) into *out (caller owns: pb__nonces_free).
 * Returns 0 or -ENOMEM / -EINVAL. */
int pb__nonces_new(pb__nonces **out, size_t capacity);

/* NULL-safe. */
void pb__nonces_free(pb__nonces *n);

/* Remembers nonce (PB_AUTH_NONCE_HEX lowercase hex digits, borrowed) until expires_s (the
 * request's time + PB_AUTH_WINDOW_S), at now_s. Returns 0 when it was not remembered (it is now);
 * -EEXIST when it is (a replay: nothing changes); -ENOSPC when capacity nonces are remembered
 * whose expiry is not past: nothing changes, and *retry_s (may be NULL) is the number of seconds
 * until the first of them expires; -EINVAL for a nonce that is not hex. A nonce is remembered
 * while now_s <= its expires_s. */
int pb__nonces_add(pb__nonces *n, const char *nonce, int64_t expires_s, int64_t now_s,
                   int64_t *retry_s);

/* How many nonces are held (live or expired, not yet swept); for tests. */
size_t pb__nonces_count(pb__nonces *n);

#endif
