/*
 * nonces.c - the replay store of signed requests; see nonces.h.
 *
 * Open addressing over 2 x capacity slots (a power of two), keyed by the nonce's 16 bytes. A
 * slot with expires == 0 is empty. An add probes from the nonce's home slot to the first empty
 * one: a live equal nonce is a replay, an expired equal one is renewed in place. When the table
 * holds capacity entries, expired ones are swept out first (a full pass, at most once per second
 * of now_s: expiries are whole seconds, so nothing more can have expired within the same
 * second); only if every held entry is still live is the add refused. The load stays at or
 * below one half, so probes are short.
 */
#include "nonces.h"

#include "auth.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    unsigned char key[PB_AUTH_NONCE_HEX / 2];
    int64_t expires; /* 0: empty */
} slot;

struct pb__nonces {
    pthread_mutex_t lock;
    slot *slots;
    size_t mask;      /* slots - 1 */
    size_t capacity;  /* entries held at most */
    size_t count;     /* entries held, live or expired */
    int64_t swept_at; /* now_s of the last sweep, or INT64_MIN */
    int64_t first_expiry; /* the earliest expiry the last sweep left, for retry_s */
};

static int unhex(const char *hex, unsigned char *out, size_t n)
{
    for (size_t i = 0; i < 2 * n; i++) {
        char c = hex[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return -EINVAL;
        if (i % 2 == 0) out[i / 2] = (unsigned char)(v << 4);
        else out[i / 2] |= (unsigned char)v;
    }
    return hex[2 * n] == '\0' ? 0 : -EINVAL;
}

static size_t home(const pb__nonces *n, const unsigned char *key)
{
    uint64_t h;
    memcpy(&h, key, sizeof h); /* random bytes; splitmix64's finaliser spreads a chosen one */
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return (size_t)h & n->mask;
}

int pb__nonces_new(pb__nonces **out, size_t capacity)
{
    *out = NULL;
    if (capacity < 1 || capacity > ((size_t)1 << 28)) return -EINVAL;
    size_t slots = 2;
    while (slots < 2 * capacity) slots <<= 1;
    pb__nonces *n = calloc(1, sizeof *n);
    if (!n) return -ENOMEM;
    n->slots = calloc(slots, sizeof *n->slots);
    if (!n->slots) {
        free(n);
        return -ENOMEM;
    }
    pthread_mutex_init(&n->lock, NULL);
    n->mask = slots - 1;
    n->capacity = capacity;
    n->swept_at = INT64_MIN;
    *out = n;
    return 0;
}

void pb__nonces_free(pb__nonces *n)
{
    if (!n) return;
    pthread_mutex_destroy(&n->lock);
    free(n->slots);
    free(n);
}

/* Empties slot i and moves later entries of its cluster back so that every probe still finds
 * them (backward-shift deletion). */
static void delete_at(pb__nonces *n, size_t i)
{
    size_t j = i;
    for (;;) {
        j = (j + 1) & n->mask;
        if (!n->slots[j].expires) break;
        size_t k = home(n, n->slots[j].key);
        /* the entry at j stays when its home lies cyclically in (i, j] */
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays) continue;
        n->slots[i] = n->slots[j];
        i = j;
    }
    n->slots[i].expires = 0;
    n->count--;
}

/* Removes every entry whose expiry is past; notes the earliest one left. A slot is looked at
 * again after a deletion, since a later entry may have moved into it. */
static void sweep(pb__nonces *n, int64_t now_s)
{
    n->swept_at = now_s;
    n->first_expiry = INT64_MAX;
    for (size_t i = 0; i <= n->mask; i++) {
        while (n->slots[i].expires && n->slots[i].expires < now_s) delete_at(n, i);
        if (n->slots[i].expires && n->slots[i].expires < n->first_expiry)
            n->first_expiry = n->slots[i].expires;
    }
}

int pb__nonces_add(pb__nonces *n, const char *nonce, int64_t expires_s, int64_t now_s,
                   int64_t *retry_s)
{
    unsigned char key[PB_AUTH_NONCE_HEX / 2];
    if (unhex(nonce, key, sizeof key)) return -EINVAL;
    if (expires_s < 1) expires_s = 1; /* 0 marks an empty slot */
    int rc = 0;
    pthread_mutex_lock(&n->lock);
    size_t i = home(n, key);
    while (n->slots[i].expires && memcmp(n->slots[i].key, key, sizeof key) != 0)
        i = (i + 1) & n->mask;
    if (n->slots[i].expires) { /* the same nonce */
        if (n->slots[i].expires >= now_s) {
            rc = -EEXIST;
        } else if (expires_s > n->slots[i].expires) {
            n->slots[i].expires = expires_s; /* past: remembered anew */
        }
        goto done;
    }
    if (n->count >= n->capacity) {
        if (n->swept_at != now_s) sweep(n, now_s);
        if (n->count >= n->capacity) {
            if (retry_s) retry_s[0] = n->first_expiry - now_s + 1;
            rc = -ENOSPC;
            goto done;
        }
        i = home(n, key); /* the sweep moved entries: find the empty slot again */
        while (n->slots[i].expires) i = (i + 1) & n->mask;
    }
    memcpy(n->slots[i].key, key, sizeof key);
    n->slots[i].expires = expires_s;
    n->count++;
done:
    pthread_mutex_unlock(&n->lock);
    return rc;
}

size_t pb__nonces_count(pb__nonces *n)
{
    pthread_mutex_lock(&n->lock);
    size_t c = n->count;
    pthread_mutex_unlock(&n->lock);
    return c;
}
