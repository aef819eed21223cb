/* test_detail.c - the detail-window policy (src/agent/hot/detail.c) on simulated jobs: which steps
 * are detail steps, the period it picks from measured step times, and the average cost that
 * results, with and without noise. */
#include "check.h"
#include "detail.h"

#include <math.h>
#include <stdint.h>

/* A job whose summary steps take base_ns (times 1 +- noise) and whose detail steps cost
 * `cost` more. Runs `steps` steps through the policy; returns the average added time as a
 * fraction of the plain job's time. */
typedef struct sim {
    double cost, noise;
    uint64_t rng;
    int64_t period_changes, bad_changes; /* changes after which the next step began a window */
} sim;

static double noise_factor(sim *s)
{
    s->rng = s->rng * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(s->rng >> 11) / (double)(1ull << 53); /* [0, 1) */
    return 1 + s->noise * (2 * u - 1);
}

static double run(pb_detail *d, sim *s, int64_t from, int64_t steps)
{
    const double base = 10e6;
    double plain = 0, added = 0;
    for (int64_t st = from; st < from + steps; st++) {
        int on = pb_detail_on(d, st);
        double wall = base * noise_factor(s) * (on ? 1 + s->cost : 1);
        plain += base;
        if (on) added += base * s->cost;
        int64_t before = d->period;
        pb_detail_step_done(d, st, (int64_t)wall, on, 1);
        if (d->period != before) {
            s->period_changes++;
            if (pb_detail_on(d, st + 1) && !on) s->bad_changes++;
            if (pb_detail_on(d, st + 1) && on && (st + 1) % d->period == 0) s->bad_changes++;
        }
    }
    return added / plain;
}

static void fixed_periods(void)
{
    pb_detail d;
    CHECK(pb_detail_init(&d, "1", 8, 0.5) == 0 && !d.automatic && d.period == 1 && d.window == 1,
          "PROBING_DETAIL_EVERY=1: every step is a detail step (window cut to the period)");
    int all = 1;
    for (int64_t s = 0; s < 1000; s++) {
        all &= pb_detail_on(&d, s);
        pb_detail_step_done(&d, s, 1000, 1, 1);
    }
    CHECK(all && d.period == 1, "with period 1 all 1000 steps are detail steps and the period stays");

    CHECK(pb_detail_init(&d, "100", 8, 0.5) == 0 && d.period == 100 && d.window == 8, "fixed period 100, window 8");
    CHECK(pb_detail_on(&d, 0) && pb_detail_on(&d, 7) && !pb_detail_on(&d, 8) && !pb_detail_on(&d, 99) &&
              pb_detail_on(&d, 100) && pb_detail_on(&d, 107) && !pb_detail_on(&d, 108),
          "fixed period: steps 0-7 and 100-107 are detail steps, 8-99 and 108 are not");
    sim s = {.cost = 0.5, .noise = 0, .rng = 1};
    run(&d, &s, 0, 5000);
    CHECK(d.period == 100 && s.period_changes == 0, "a fixed period never changes, whatever detail costs");
    CHECK(d.cost >= 0.49 && d.cost <= 0.51, "the cost is still measured and shown (%.3f, true 0.5)", d.cost);

    CHECK(pb_detail_init(&d, "4", 8, 0.5) == 0 && d.window == 4, "a window longer than the period is cut to it");
    CHECK(pb_detail_init(&d, "0", 8, 0.5) == -1 && d.automatic, "PROBING_DETAIL_EVERY=0 is refused (automatic instead)");
    CHECK(pb_detail_init(&d, "ten", 8, 0.5) == -1 && d.automatic, "a word other than auto is refused");
    CHECK(pb_detail_init(&d, "12x", 8, 0.5) == -1 && d.automatic, "trailing garbage is refused");
    CHECK(pb_detail_init(&d, "-5", 8, 0.5) == -1 && d.automatic, "a negative period is refused");
    CHECK(pb_detail_init(&d, NULL, 8, 0.5) == 0 && d.automatic && pb_detail_init(&d, "auto", 8, 0.5) == 0 &&
              d.automatic,
          "unset and 'auto' mean automatic");
    CHECK(pb_detail_init(&d, "auto", 500, 0.5) == 0 && d.window == PB_DETAIL_MAX_WINDOW,
          "the window is clamped to %d", PB_DETAIL_MAX_WINDOW);
    CHECK(pb_detail_init(&d, "auto", 0, 0.5) == 0 && d.window == 1, "a window of 0 becomes 1");
    CHECK(pb_detail_init(&d, "auto", 8, NAN) == 0 && d.budget > 0, "a NaN budget becomes the smallest one");
}

static void automatic(void)
{
    pb_detail d;
    pb_detail_init(&d, "auto", 8, 0.5);
    CHECK(d.period == PB_DETAIL_INITIAL_PERIOD && pb_detail_on(&d, 0) && pb_detail_on(&d, 7) && !pb_detail_on(&d, 8),
          "automatic: detail from the first step (steps 0-7), initial period %d", PB_DETAIL_INITIAL_PERIOD);

    /* 272 tiny modules: detail costs about a third of the step */
    sim s = {.cost = 0.35, .noise = 0, .rng = 7};
    run(&d, &s, 0, 8);
    CHECK(d.cost < 0 && d.period == PB_DETAIL_INITIAL_PERIOD, "the first window (warm-up) is not a measurement");
    double added = run(&d, &s, 8, 64);
    CHECK(d.cost > 0.34 && d.cost < 0.36 && d.period == 1024,
          "after the second window: cost %.3f measured, period %lld (8 x 0.35 / 0.5 %% = 560 -> 1024)", d.cost,
          (long long)d.period);
    added = run(&d, &s, 72, 100000);
    CHECK(added <= 0.005, "steady state: detail adds %.3f %% on average, within the 0.5 %% budget", added * 100);
    CHECK(added >= 0.0025, "and more than half of it (%.3f %%): the power-of-two period wastes at most half", added * 100);
    CHECK(s.bad_changes == 0, "no period change started a window on the next step");

    /* a big GPU model: detail costs 1 %: windows every 16 steps */
    pb_detail_init(&d, "auto", 8, 0.5);
    sim g = {.cost = 0.01, .noise = 0, .rng = 3};
    run(&d, &g, 0, 200);
    CHECK(d.period == 16, "cost 1 %%: period %lld (the shortest, 2 x window)", (long long)d.period);
    added = run(&d, &g, 200, 10000);
    CHECK(added <= 0.0050001, "cost 1 %%: average %.3f %%, within budget", added * 100);

    /* cost 0 (or measured below 0): the shortest period, never all steps */
    pb_detail_init(&d, "auto", 8, 0.5);
    sim z = {.cost = 0, .noise = 0, .rng = 3};
    run(&d, &z, 0, 500);
    CHECK(d.period == 16 && d.cost == 0, "no measurable cost: period 16, so summary steps remain to compare with");
}

static void noisy(void)
{
    /* step times that vary +-8 % from step to step (this 2-core VM does): the cost estimate is
     * noisy, the largest of three is used, and the budget holds */
    const double costs[] = {0.02, 0.05, 0.1, 0.35, 1.0};
    for (size_t i = 0; i < sizeof costs / sizeof costs[0]; i++) {
        pb_detail d;
        pb_detail_init(&d, "auto", 8, 0.5);
        sim s = {.cost = costs[i], .noise = 0.08, .rng = 11 + i};
        run(&d, &s, 0, 2000);
        double added = run(&d, &s, 2000, 200000);
        CHECK(added <= 0.0055, "noise +-8 %%, cost %.0f %%: average %.3f %% (period %lld)", costs[i] * 100,
              added * 100, (long long)d.period);
        CHECK(s.bad_changes == 0, "noise, cost %.0f %%: no period change started a window at once", costs[i] * 100);
    }
}

static void adapts(void)
{
    pb_detail d;
    pb_detail_init(&d, "auto", 8, 0.5);
    sim s = {.cost = 0.35, .noise = 0, .rng = 5};
    run(&d, &s, 0, 3000);
    CHECK(d.period == 1024, "expensive phase: period 1024");
    s.cost = 0.01; /* the job moved to long steps: detail is now cheap */
    int64_t st = 3000, windows_before = d.windows;
    while (d.period != 16 && st < 3000 + 10 * 1024) {
        run(&d, &s, st, 1);
        st++;
    }
    CHECK(d.period == 16 && d.windows - windows_before <= PB_DETAIL_ESTIMATES + 1,
          "when detail gets cheap the period comes down within %d windows (took %lld)", PB_DETAIL_ESTIMATES + 1,
          (long long)(d.windows - windows_before));
}

static void ranks_align(void)
{
    /* two ranks that measured different costs record nested sets of steps */
    pb_detail a, b;
    pb_detail_init(&a, "auto", 8, 0.5);
    pb_detail_init(&b, "auto", 8, 0.5);
    sim sa = {.cost = 0.3, .noise = 0, .rng = 1}, sb = {.cost = 0.08, .noise = 0, .rng = 2};
    run(&a, &sa, 0, 3000);
    run(&b, &sb, 0, 3000);
    int subset = 1;
    for (int64_t st = 3000; st < 20000; st++)
        if (pb_detail_on(&a, st) && !pb_detail_on(&b, st)) subset = 0;
    CHECK(a.period > b.period && subset,
          "ranks with periods %lld and %lld: every detail step of the first is one of the second", (long long)a.period,
          (long long)b.period);
}

static void unmeasured(void)
{
    pb_detail d;
    pb_detail_init(&d, "auto", 8, 0.5);
    for (int64_t st = 0; st < 64 * 3; st++) {
        int on = pb_detail_on(&d, st);
        /* a capture (profiler on) makes these steps 5x slower; they must not be measured */
        pb_detail_step_done(&d, st, on ? 50000000 : 10000000, on, !on);
    }
    CHECK(d.cost < 0 && d.period == PB_DETAIL_INITIAL_PERIOD,
          "windows of unmeasured steps (a capture ran) give no estimate");
}

int main(void)
{
    fixed_periods();
    automatic();
    noisy();
    adapts();
    ranks_align();
    unmeasured();
    return check_summary();
}
