/*
 * intern.c - process-wide string interning; see intern.h.
 *
 * Strings live in a two-level array: a fixed directory of chunk pointers, each chunk holding
 * CHUNK string pointers. Chunks are allocated once and never moved, so readers index without a
 * lock: they load `count` (acquire) and any id below it is fully published. A small open-address
 * hash (guarded by the mutex, used only by writers) maps text to id.
 */
#include "intern.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BITS 12
#define CHUNK (1u << CHUNK_BITS)
#define NCHUNKS (PB_INTERN_MAX / CHUNK)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char **chunks[NCHUNKS];
static _Atomic uint32_t count;
static uint32_t *hash_ids; /* 0 = empty slot (id 0 is never stored: the empty string is implicit) */
static uint32_t hash_cap;
static uint32_t misses;

static uint64_t fnv1a(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static const char *get_locked(uint32_t id) { return chunks[id >> CHUNK_BITS][id & (CHUNK - 1)]; }

static int hash_grow(void)
{
    uint32_t ncap = hash_cap ? hash_cap * 2 : 1024;
    uint32_t *n = calloc(ncap, sizeof *n);
    if (!n) return -1;
    uint32_t c = atomic_load_explicit(&count, memory_order_relaxed);
    for (uint32_t id = 1; id < c; id++) {
        const char *s = get_locked(id);
        uint32_t j = (uint32_t)fnv1a(s, strlen(s)) & (ncap - 1);
        while (n[j]) j = (j + 1) & (ncap - 1);
        n[j] = id;
    }
    free(hash_ids);
    hash_ids = n;
    hash_cap = ncap;
    return 0;
}

uint32_t pb_intern(const char *s, size_t len)
{
    if (len == 0) return 0;
    uint32_t id = 0;
    pthread_mutex_lock(&lock);
    uint32_t c = atomic_load_explicit(&count, memory_order_relaxed);
    if (c == 0) c = 1; /* id 0 reserved */
    if ((c + 1) * 2 > hash_cap && hash_grow()) goto out;
    uint64_t h = fnv1a(s, len);
    uint32_t j = (uint32_t)h & (hash_cap - 1);
    while (hash_ids[j]) {
        const char *t = get_locked(hash_ids[j]);
        if (strlen(t) == len && memcmp(t, s, len) == 0) {
            id = hash_ids[j];
            goto out;
        }
        j = (j + 1) & (hash_cap - 1);
    }
    if (c >= PB_INTERN_MAX) {
        misses++;
        goto out;
    }
    uint32_t chunk = c >> CHUNK_BITS;
    if (!chunks[chunk]) {
        chunks[chunk] = calloc(CHUNK, sizeof(char *));
        if (!chunks[chunk]) goto out;
    }
    if (chunk == 0 && !chunks[0][0]) chunks[0][0] = "";
    char *copy = malloc(len + 1);
    if (!copy) goto out;
    memcpy(copy, s, len);
    copy[len] = '\0';
    chunks[chunk][c & (CHUNK - 1)] = copy;
    hash_ids[j] = c;
    id = c;
    atomic_store_explicit(&count, c + 1, memory_order_release);
out:
    pthread_mutex_unlock(&lock);
    return id;
}

uint32_t pb_intern_cstr(const char *s) { return s ? pb_intern(s, strlen(s)) : 0; }

const char *pb_intern_get(uint32_t id)
{
    uint32_t c = atomic_load_explicit(&count, memory_order_acquire);
    if (id == 0 || id >= c) return "";
    return chunks[id >> CHUNK_BITS][id & (CHUNK - 1)];
}

uint32_t pb_intern_count(void)
{
    uint32_t c = atomic_load_explicit(&count, memory_order_acquire);
    return c ? c : 1;
}

void pb_intern_reset(void)
{
    pthread_mutex_lock(&lock);
    uint32_t c = atomic_load_explicit(&count, memory_order_relaxed);
    for (uint32_t id = 1; id < c; id++) free((char *)get_locked(id));
    for (uint32_t k = 0; k < NCHUNKS; k++) {
        free(chunks[k]);
        chunks[k] = NULL;
    }
    free(hash_ids);
    hash_ids = NULL;
    hash_cap = 0;
    misses = 0;
    atomic_store_explicit(&count, 0, memory_order_release);
    pthread_mutex_unlock(&lock);
}
