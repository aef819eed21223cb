/*
 * test_ring.c - pb_ring: push/read, capacity rounding, wrap-around and drop counts, clear, and
 * concurrent writers with a reader that must never see a torn row.
 */
#include "check.h"
#include "ring.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

typedef struct row {
    uint64_t writer, seq;
    uint64_t check[6]; /* each = writer * 1000003 + seq * k: a torn copy breaks the pattern */
} row;

static row make_row(uint64_t writer, uint64_t seq)
{
    row r = {.writer = writer, .seq = seq};
    for (int k = 0; k < 6; k++) r.check[k] = writer * 1000003u + seq * (uint64_t)(k + 1);
    return r;
}

static int row_intact(const row *r)
{
    for (int k = 0; k < 6; k++)
        if (r->check[k] != r->writer * 1000003u + r->seq * (uint64_t)(k + 1)) return 0;
    return 1;
}

static void test_basics(void)
{
    pb_ring *r = NULL;
    CHECK(pb_ring_create(&r, 0, 8) == -EINVAL && !r, "row_size 0 -> -EINVAL");
    CHECK(pb_ring_create(&r, sizeof(row), 0) == -EINVAL, "capacity 0 -> -EINVAL");
    CHECK(pb_ring_create(&r, sizeof(row), 100) == 0 && pb_ring_capacity(r) == 128, "capacity rounds up to 128");
    CHECK(pb_ring_row_size(r) == sizeof(row), "row_size kept");
    CHECK(pb_ring_head(r) == 0 && pb_ring_first(r) == 0 && pb_ring_dropped(r) == 0, "empty ring");
    row out;
    CHECK(pb_ring_read(r, 0, &out) == 0, "reading an unwritten index fails");
    for (uint64_t i = 0; i < 10; i++) {
        row in = make_row(1, i);
        pb_ring_push(r, &in);
    }
    int all = 1;
    for (uint64_t i = 0; i < 10; i++) all &= pb_ring_read(r, i, &out) == 1 && out.seq == i && row_intact(&out);
    CHECK(all, "10 rows read back in order");
    CHECK(pb_ring_head(r) == 10 && pb_ring_read(r, 10, &out) == 0, "head 10; index 10 not yet written");
    pb_ring_destroy(r);
    pb_ring_destroy(NULL);
}

static void test_wrap(void)
{
    pb_ring *r = NULL;
    pb_ring_create(&r, sizeof(row), 8);
    for (uint64_t i = 0; i < 20; i++) {
        row in = make_row(2, i);
        pb_ring_push(r, &in);
    }
    CHECK(pb_ring_head(r) == 20 && pb_ring_first(r) == 12 && pb_ring_dropped(r) == 12,
          "after 20 pushes into 8 slots: first 12, 12 dropped");
    row out;
    CHECK(pb_ring_read(r, 11, &out) == 0 && pb_ring_read(r, 4, &out) == 0, "overwritten rows read as gone");
    int all = 1;
    for (uint64_t i = 12; i < 20; i++) all &= pb_ring_read(r, i, &out) == 1 && out.seq == i;
    CHECK(all, "the newest 8 rows are intact");
    pb_ring_clear(r);
    CHECK(pb_ring_read(r, 19, &out) == 0 && pb_ring_head(r) == 20 && pb_ring_dropped(r) == 12,
          "clear forgets rows, keeps head and drop count");
    row in = make_row(2, 20);
    pb_ring_push(r, &in);
    CHECK(pb_ring_read(r, 20, &out) == 1 && out.seq == 20, "pushes after clear are readable");
    pb_ring_destroy(r);
}

#define WRITERS 4
#define PER_WRITER 200000

static pb_ring *shared;
static atomic_int writers_done;
static atomic_int reader_started;

static void *writer(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    while (!atomic_load(&reader_started)) {} /* make the reader overlap the pushes */
    for (uint64_t i = 0; i < PER_WRITER; i++) {
        row in = make_row(id, i);
        pb_ring_push(shared, &in);
    }
    atomic_fetch_add(&writers_done, 1);
    return NULL;
}

typedef struct reader_result {
    uint64_t read_ok, torn;
} reader_result;

static void *reader(void *arg)
{
    reader_result *res = arg;
    row out;
    int last_pass = 0;
    atomic_store(&reader_started, 1);
    do {
        last_pass = atomic_load(&writers_done) == WRITERS; /* one more full pass after they stop */
        uint64_t head = pb_ring_head(shared);
        for (uint64_t i = pb_ring_first(shared); i < head; i++) {
            if (!pb_ring_read(shared, i, &out)) continue;
            res->read_ok++;
            if (!row_intact(&out) || out.writer >= WRITERS || out.seq >= PER_WRITER) res->torn++;
        }
    } while (!last_pass);
    return NULL;
}

static void test_concurrent(void)
{
    pb_ring_create(&shared, sizeof(row), 4096);
    pthread_t w[WRITERS], rd;
    reader_result res = {0};
    pthread_create(&rd, NULL, reader, &res);
    for (uintptr_t i = 0; i < WRITERS; i++) pthread_create(&w[i], NULL, writer, (void *)i);
    for (int i = 0; i < WRITERS; i++) pthread_join(w[i], NULL);
    pthread_join(rd, NULL);
    CHECK(res.read_ok > 0 && res.torn == 0, "reader saw %llu rows during concurrent pushes, none torn",
          (unsigned long long)res.read_ok);
    CHECK(pb_ring_head(shared) == (uint64_t)WRITERS * PER_WRITER, "every push counted in head");
    CHECK(pb_ring_dropped(shared) == (uint64_t)WRITERS * PER_WRITER - 4096, "drop count = pushes - capacity");

    /* after the writers stop: every held row is intact, and each writer's rows are in order */
    uint64_t last[WRITERS] = {0}, intact = 0, ordered = 1;
    int seen[WRITERS] = {0};
    row out;
    for (uint64_t i = pb_ring_first(shared); i < pb_ring_head(shared); i++) {
        if (!pb_ring_read(shared, i, &out) || !row_intact(&out)) continue;
        intact++;
        if (seen[out.writer] && out.seq <= last[out.writer]) ordered = 0;
        seen[out.writer] = 1;
        last[out.writer] = out.seq;
    }
    /* A writer preempted between reserving its index and publishing it can be lapped; when it
     * resumes it publishes an old row into a slot that now belongs to a newer index, which then
     * reads as gone. At most one slot per writer can end up like that. */
    CHECK(intact >= 4096 - WRITERS, "%llu of 4096 held rows readable after the writers stop (>= %d)",
          (unsigned long long)intact, 4096 - WRITERS);
    CHECK(ordered, "each writer's rows appear in push order");
    pb_ring_destroy(shared);
}

int main(void)
{
    test_basics();
    test_wrap();
    test_concurrent();
    return check_summary();
}
