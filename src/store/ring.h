/*
 * ring.h - fixed-capacity, overwrite-oldest ring of fixed-size rows.
 *
 * Every table probing records lives in one pb_ring. Writers are the traced program's threads
 * (hooks, collectors); readers are query threads. Neither ever waits for the other:
 *
 *   - A writer reserves a global index with one atomic fetch-add, marks the slot busy, copies the
 *     row, then publishes the slot with its index (release). No allocation, no lock, no syscall.
 *   - A reader asks for [pb_ring_first(), pb_ring_head()) and reads rows one at a time with
 *     pb_ring_read(), which copies the row out and validates the slot's sequence number before and
 *     after the copy (a seqlock). A row overwritten during the read is reported as gone, never
 *     returned torn.
 *
 * When the ring is full the oldest rows are overwritten; pb_ring_dropped() counts them.
 * Memory comes from mmap, so capacity that was never written costs address space, not RSS.
 */
#ifndef PB_STORE_RING_H
#define PB_STORE_RING_H

#include <stddef.h>
#include <stdint.h>

typedef struct pb_ring pb_ring;

/* Creates a ring of at least `capacity` rows (rounded up to a power of two, minimum 1) of
 * `row_size` bytes each. *out is owned by the caller (pb_ring_destroy). Returns 0, -EINVAL or
 * -ENOMEM. [any thread] */
int pb_ring_create(pb_ring **out, size_t row_size, uint64_t capacity);

/* Frees the ring. NULL-safe. No reader or writer may use it afterwards. */
void pb_ring_destroy(pb_ring *r);

/* Appends one row (row_size bytes, borrowed). Never blocks, never allocates. [any thread] */
void pb_ring_push(pb_ring *r, const void *row);

/* Total rows ever pushed (the index the next push will get). [any thread] */
uint64_t pb_ring_head(const pb_ring *r);

/* Oldest index that may still be readable: max(0, head - capacity). [any thread] */
uint64_t pb_ring_first(const pb_ring *r);

uint64_t pb_ring_capacity(const pb_ring *r);
size_t pb_ring_row_size(const pb_ring *r);

/* Rows overwritten before anyone could read them: max(0, head - capacity). [any thread] */
uint64_t pb_ring_dropped(const pb_ring *r);

/* Copies row `index` into row_out (row_size bytes). Returns 1 if the row was copied intact,
 * 0 if it was overwritten, not yet published, or is being written right now. [any thread] */
int pb_ring_read(const pb_ring *r, uint64_t index, void *row_out);

/* Forgets every row (head stays, so drop counts stay truthful; all older rows read as gone).
 * Only for tests and detach; writers must be stopped. */
void pb_ring_clear(pb_ring *r);

#endif
