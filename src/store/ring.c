/*
 * ring.c - lock-free overwrite ring; see ring.h for the contract.
 *
 * Slot layout: an 8-byte sequence word followed by the row, padded to 8 bytes. seq == index + 1
 * means "slot holds row `index`, complete"; seq == 0 means empty; the top bit set means a
 * writer owns the slot. A writer:
 *   i = fetch_add(head); CAS seq -> (i + 1) | BUSY ; release fence ; copy row ;
 *   seq = i + 1 (release)
 * A reader of index i:
 *   s1 = seq (acquire) ; copy row ; acquire fence ; s2 = seq ; valid iff s1 == s2 == i + 1
 * Two writers a full lap apart on the same slot (a writer preempted mid-push while others push a
 * whole capacity's worth) never interleave: the CAS lets only one own the slot, and the other
 * gives its row up (it is a lap old for the reader either way). A plain "seq = 0" store here
 * let both copy at once and a reader could take the mix for a whole row (seen under TSan).
 *
 * The row is copied as relaxed atomic 8-byte words, not memcpy: a reader may copy a slot while a
 * writer overwrites it (the seq check then discards the copy), and with plain memcpy that is a
 * data race, undefined behaviour in C11 and a ThreadSanitizer report. Relaxed word stores and
 * loads compile to the same plain moves on x86-64 and arm64 (measured in docs/security.md).
 */
#include "ring.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

struct pb_ring {
    _Atomic uint64_t head;
    char pad_[56]; /* keep writers' counter off the read-mostly line below */
    uint64_t mask;
    uint64_t capacity;
    size_t row_size;
    size_t slot_size;
    size_t map_size;
    unsigned char *slots;
};

static inline _Atomic uint64_t *slot_seq(const pb_ring *r, uint64_t index)
{
    return (_Atomic uint64_t *)(r->slots + (index & r->mask) * r->slot_size);
}

static inline unsigned char *slot_row(const pb_ring *r, uint64_t index)
{
    return r->slots + (index & r->mask) * r->slot_size + sizeof(uint64_t);
}

int pb_ring_create(pb_ring **out, size_t row_size, uint64_t capacity)
{
    *out = NULL;
    if (row_size == 0 || row_size > 4096 || capacity == 0 || capacity > (1ull << 34)) return -EINVAL;
    uint64_t cap = 1;
    while (cap < capacity) cap <<= 1;
    pb_ring *r;
    void *mem = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return -ENOMEM;
    r = mem;
    r->row_size = row_size;
    r->slot_size = sizeof(uint64_t) + ((row_size + 7) & ~(size_t)7);
    r->capacity = cap;
    r->mask = cap - 1;
    r->map_size = r->slot_size * cap;
    void *slots =
        mmap(NULL, r->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (slots == MAP_FAILED) {
        munmap(r, sizeof *r);
        return -ENOMEM;
    }
    r->slots = slots;
    atomic_init(&r->head, 0);
    *out = r;
    return 0;
}

void pb_ring_destroy(pb_ring *r)
{
    if (!r) return;
    munmap(r->slots, r->map_size);
    munmap(r, sizeof *r);
}

/* Copies n bytes into an 8-byte aligned slot row, word by word; the last word is zero-padded.
 * src needs no alignment. */
static inline void store_words(unsigned char *slot, const unsigned char *src, size_t n)
{
    _Atomic uint64_t *dst = (_Atomic uint64_t *)slot;
    size_t words = n / 8, k;
    for (k = 0; k < words; k++) {
        uint64_t v;
        memcpy(&v, src + 8 * k, 8);
        atomic_store_explicit(&dst[k], v, memory_order_relaxed);
    }
    if (n & 7) {
        uint64_t v = 0;
        memcpy(&v, src + 8 * k, n & 7);
        atomic_store_explicit(&dst[k], v, memory_order_relaxed);
    }
}

/* The reverse of store_words(): n bytes out of a slot row into dst (any alignment). */
static inline void load_words(unsigned char *dst, const unsigned char *slot, size_t n)
{
    _Atomic uint64_t *src = (_Atomic uint64_t *)slot;
    size_t words = n / 8, k;
    for (k = 0; k < words; k++) {
        uint64_t v = atomic_load_explicit(&src[k], memory_order_relaxed);
        memcpy(dst + 8 * k, &v, 8);
    }
    if (n & 7) {
        uint64_t v = atomic_load_explicit(&src[k], memory_order_relaxed);
        memcpy(dst + 8 * k, &v, n & 7);
    }
}

#define SLOT_BUSY (1ull << 63) /* seq | SLOT_BUSY: a writer owns the slot */

void pb_ring_push(pb_ring *r, const void *row)
{
    uint64_t i = atomic_fetch_add_explicit(&r->head, 1, memory_order_relaxed);
    _Atomic uint64_t *seq = slot_seq(r, i);
    uint64_t cur = atomic_load_explicit(seq, memory_order_relaxed);
    /* A writer a lap behind or ahead still owns the slot, or a newer row is already there:
     * this row is lost (it is older than capacity rows by the time anyone could read it). */
    do {
        if ((cur & SLOT_BUSY) || cur > i + 1) return;
    } while (!atomic_compare_exchange_weak_explicit(seq, &cur, (i + 1) | SLOT_BUSY, memory_order_relaxed,
                                                    memory_order_relaxed));
    atomic_thread_fence(memory_order_release);
    store_words(slot_row(r, i), row, r->row_size);
    atomic_store_explicit(seq, i + 1, memory_order_release);
}

uint64_t pb_ring_head(const pb_ring *r)
{
    return atomic_load_explicit(&((pb_ring *)r)->head, memory_order_acquire);
}

uint64_t pb_ring_first(const pb_ring *r)
{
    uint64_t h = pb_ring_head(r);
    return h > r->capacity ? h - r->capacity : 0;
}

uint64_t pb_ring_capacity(const pb_ring *r) { return r->capacity; }
size_t pb_ring_row_size(const pb_ring *r) { return r->row_size; }
uint64_t pb_ring_dropped(const pb_ring *r) { return pb_ring_first(r); }

int pb_ring_read(const pb_ring *r, uint64_t index, void *row_out)
{
    _Atomic uint64_t *seq = slot_seq(r, index);
    uint64_t s1 = atomic_load_explicit(seq, memory_order_acquire);
    if (s1 != index + 1) return 0;
    load_words(row_out, slot_row(r, index), r->row_size);
    atomic_thread_fence(memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(seq, memory_order_relaxed);
    return s2 == s1;
}

void pb_ring_clear(pb_ring *r)
{
    madvise(r->slots, r->map_size, MADV_DONTNEED); /* private anonymous: pages read back as zero */
}
