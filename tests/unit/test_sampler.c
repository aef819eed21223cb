/* test_sampler.c - the samplers' thread (src/agent/collect/sampler.c), which the GIL, memory and
 * system samplers share: it ticks, a stop wakes it at once (a period of an hour would otherwise
 * hang this test until meson's timeout), it starts again after a stop, and a second start or
 * stop changes nothing. No assertion depends on how fast the machine is: counts are polled with
 * a generous deadline. */
#include "check.h"
#include "sampler.h"

#include <stdatomic.h>
#include <time.h>

static _Atomic int ticks;

static void tick(void) { atomic_fetch_add(&ticks, 1); }

/* Waits until ticks >= n, at most 20 s. Returns whether it got there. */
static int wait_ticks(int n)
{
    struct timespec ms = {0, 1000000L};
    for (int i = 0; i < 20000; i++) {
        if (atomic_load(&ticks) >= n) return 1;
        nanosleep(&ms, NULL);
    }
    return 0;
}

int main(void)
{
    static pb_sampler s = {.tick = tick, .period_ms = 1, .tick_first = 1, .fixed_rate = 1};
    CHECK(pb_sampler_start(&s) == 0 && s.running, "starts");
    CHECK(pb_sampler_start(&s) == 0, "a second start while running is a no-op");
    CHECK(wait_ticks(5), "ticks every period (5 ticks seen)");
    pb_sampler_stop(&s);
    CHECK(!s.running, "stops");
    int after = atomic_load(&ticks);
    struct timespec pause = {0, 20000000L};
    nanosleep(&pause, NULL);
    CHECK(atomic_load(&ticks) == after, "no tick after the stop returned");
    pb_sampler_stop(&s); /* not running: nothing to do */

    /* An hour's period: the first tick comes at once (tick_first), the stop must not wait for
     * the second. */
    atomic_store(&ticks, 0);
    s.period_ms = 3600 * 1000L;
    s.fixed_rate = 0;
    CHECK(pb_sampler_start(&s) == 0, "starts again after a stop");
    CHECK(wait_ticks(1), "tick_first: the first tick comes without waiting a period");
    pb_sampler_stop(&s);
    CHECK(atomic_load(&ticks) == 1 && !s.running, "a stop wakes the thread in its hour-long wait");

    /* Waiting first: an hour's period and a stop before it ends: no tick at all. */
    atomic_store(&ticks, 0);
    s.tick_first = 0;
    CHECK(pb_sampler_start(&s) == 0, "starts (waiting first)");
    pb_sampler_stop(&s);
    CHECK(atomic_load(&ticks) == 0, "tick_first off: stopped before its first period, it never ticked");
    return check_summary();
}
