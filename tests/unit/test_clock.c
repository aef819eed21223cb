/*
 * test_clock.c - src/common/clock.h: the deadline arithmetic every waiter uses (carries, borrows,
 * ordering) and that a deadline lies on the clock it names.
 */
#include "check.h"
#include "clock.h"

#include <stdint.h>
#include <time.h>

int main(void)
{
    struct timespec t = {.tv_sec = 10, .tv_nsec = 999999999};
    struct timespec u = pb_timespec_add_ns(t, 1);
    CHECK(u.tv_sec == 11 && u.tv_nsec == 0, "+1 ns carries into the seconds");
    u = pb_timespec_add_ns(t, 2500000001LL);
    CHECK(u.tv_sec == 13 && u.tv_nsec == 500000000, "+2.5 s + 1 ns (got %ld.%09ld)",
          (long)u.tv_sec, u.tv_nsec);
    u = pb_timespec_add_ns((struct timespec){.tv_sec = 10, .tv_nsec = 0}, -1);
    CHECK(u.tv_sec == 9 && u.tv_nsec == 999999999, "-1 ns borrows from the seconds");
    u = pb_timespec_add_ns((struct timespec){.tv_sec = 10, .tv_nsec = 5}, -1500000000LL);
    CHECK(u.tv_sec == 8 && u.tv_nsec == 500000005, "-1.5 s (got %ld.%09ld)", (long)u.tv_sec,
          u.tv_nsec);
    CHECK(pb_timespec_ns(t) == 10999999999LL, "as nanoseconds");

    struct timespec a = {.tv_sec = 5, .tv_nsec = 10}, b = {.tv_sec = 5, .tv_nsec = 11};
    CHECK(pb_timespec_before(a, b) && !pb_timespec_before(b, a), "ordered by nanoseconds");
    CHECK(!pb_timespec_before(a, a), "not before itself");
    CHECK(pb_timespec_before((struct timespec){4, 999999999}, a), "ordered by seconds first");

    int64_t before = pb_now_ns();
    struct timespec d = pb_deadline_ns(CLOCK_MONOTONIC, 2000000000);
    int64_t after = pb_now_ns();
    CHECK(pb_timespec_ns(d) >= before + 2000000000 && pb_timespec_ns(d) <= after + 2000000000,
          "a monotonic deadline is now + 2 s on CLOCK_MONOTONIC");
    before = pb_wall_ns();
    d = pb_deadline_s(CLOCK_REALTIME, 0.25);
    after = pb_wall_ns();
    CHECK(pb_timespec_ns(d) >= before + 250000000 && pb_timespec_ns(d) <= after + 250000000,
          "a wall-clock deadline is now + 0.25 s on CLOCK_REALTIME");
    CHECK(d.tv_nsec >= 0 && d.tv_nsec < 1000000000, "tv_nsec normalised");
    return check_summary();
}
