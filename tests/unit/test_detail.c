/* test_detail.c - the detail-step policy (src/agent/hot/detail.c) on simulated jobs: which steps
 * are detail steps, the mode and period it picks from measured step times, and the average cost
 * that results, with and without noise. */
#include "check.h"
#include "detail.h"

#include <math.h>
#include <stdint.h>

/* A job whose summary steps take base_ns (times 1 +- noise) and whose detail steps cost
 * `cost` more. */
typedef struct sim {
    double cost, noise;
    uint64_t rng;
    int64_t changes, partway; /* period or mode changes; those after which the next step joined
                               * a window partway */
    int64_t detail_steps, steps;
} sim;

static double noise_factor(sim *s)
{
    s->rng = s->rng * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(s->rng >> 11) / (double)(1ull << 53); /* [0, 1) */
    return 1 + s->noise * (2 * u - 1);
}

/* Runs `steps` steps from `from`; returns the average added time as a fraction of the plain
 * job's time. */
static double run(pb_detail *d, sim *s, int64_t from, int64_t steps)
{
    const double base = 10e6;
    double plain = 0, added = 0;
    for (int64_t st = from; st < from + steps; st++) {
        int on = pb_detail_on(d, st);
        double wall = base * noise_factor(s) * (on ? 1 + s->cost : 1);
        plain += base;
        if (on) added += base * s->cost;
        s->detail_steps += on;
        s->steps++;
        int64_t before = d->period;
        pb_detail_mode mode = d->mode;
        pb_detail_step_done(d, st, (int64_t)wall, (int64_t)wall, on, 1); /* never off-CPU */
        if (d->period != before || d->mode != mode) {
            s->changes++;
            int64_t o = (st + 1) % d->period;
            if (d->mode == PB_DETAIL_WINDOWS && o > 0 && o < d->window) s->partway++;
        }
    }
    return added / plain;
}

static void fixed_periods(void)
{
    pb_detail d;
    CHECK(pb_detail_init(&d, "1", 8, 3) == 0 && !d.automatic && d.mode == PB_DETAIL_FIXED && d.period == 1 &&
              d.window == 1,
          "PROBING_DETAIL_EVERY=1: every step is a detail step (window cut to the period)");
    int all = 1;
    for (int64_t s = 0; s < 1000; s++) {
        all &= pb_detail_on(&d, s);
        pb_detail_step_done(&d, s, 1000, 1000, 1, 1);
    }
    CHECK(all && d.period == 1 && d.cost < 0, "with period 1 all 1000 steps are detail steps, nothing is measured");

    CHECK(pb_detail_init(&d, "100", 8, 3) == 0 && d.period == 100 && d.window == 8, "fixed period 100, window 8");
    CHECK(pb_detail_on(&d, 0) && pb_detail_on(&d, 7) && !pb_detail_on(&d, 8) && !pb_detail_on(&d, 99) &&
              pb_detail_on(&d, 100) && pb_detail_on(&d, 107) && !pb_detail_on(&d, 108),
          "fixed period: steps 0-7 and 100-107 are detail steps, 8-99 and 108 are not");
    sim s = {.cost = 0.5, .noise = 0, .rng = 1};
    run(&d, &s, 0, 5000);
    CHECK(d.period == 100 && s.changes == 0, "a fixed period never changes, whatever detail costs");
    CHECK(d.cost >= 0.49 && d.cost <= 0.51, "the cost is still measured and shown (%.3f, true 0.5)", d.cost);
    CHECK(fabs(pb_detail_average_cost(&d) - 0.5 * 8 / 100) < 1e-3, "average cost: cost x 8 / 100 (%.4f)",
          pb_detail_average_cost(&d));

    CHECK(pb_detail_init(&d, "4", 8, 3) == 0 && d.window == 4, "a window longer than the period is cut to it");
    CHECK(pb_detail_init(&d, "0", 8, 3) == -1 && d.automatic, "PROBING_DETAIL_EVERY=0 is refused (automatic instead)");
    CHECK(pb_detail_init(&d, "ten", 8, 3) == -1 && d.automatic, "a word other than auto or windows is refused");
    CHECK(pb_detail_init(&d, "12x", 8, 3) == -1 && d.automatic, "trailing garbage is refused");
    CHECK(pb_detail_init(&d, "-5", 8, 3) == -1 && d.automatic && d.mode == PB_DETAIL_EVERY_STEP,
          "a negative period is refused (the default instead)");
    CHECK(pb_detail_init(&d, NULL, 8, 3) == 0 && d.automatic && !d.windows_only && pb_detail_init(&d, "auto", 8, 3) == 0 &&
              d.automatic && !d.windows_only,
          "unset and 'auto' mean automatic");
    CHECK(pb_detail_init(&d, "windows", 8, 3) == 0 && d.automatic && d.windows_only && d.mode == PB_DETAIL_WINDOWS,
          "'windows' means automatic windows only");
    CHECK(pb_detail_init(&d, "auto", 500, 3) == 0 && d.steps == PB_DETAIL_MAX_WINDOW,
          "PROBING_DETAIL_STEPS is clamped to %d", PB_DETAIL_MAX_WINDOW);
    CHECK(d.spacing == 128, "windows of 64: the spacing of summary steps starts at 128 (over the window)");
    CHECK(pb_detail_init(&d, "auto", 0, 3) == 0 && d.steps == 1, "PROBING_DETAIL_STEPS=0 becomes 1");
    CHECK(pb_detail_init(&d, "auto", 8, NAN) == 0 && d.budget > 0, "a NaN budget becomes the smallest one");
}

static void every_step(void)
{
    pb_detail d;
    pb_detail_init(&d, "auto", 8, PB_DETAIL_DEFAULT_BUDGET_PCT);
    CHECK(d.mode == PB_DETAIL_EVERY_STEP && d.spacing == 16 && d.period == 128 && d.window == 120 &&
              pb_detail_on(&d, 0) && pb_detail_on(&d, 14) && !pb_detail_on(&d, 15) && pb_detail_on(&d, 16) &&
              !pb_detail_on(&d, 31),
          "default: every step in detail from step 0 but one in 16 (15, 31, ...: the measurement)");

    /* a transformer: detail costs 0.3 % */
    sim s = {.cost = 0.003, .noise = 0, .rng = 7};
    run(&d, &s, 0, 127);
    CHECK(d.cost < 0, "no estimate before the first period ends");
    run(&d, &s, 127, 1);
    CHECK(d.cost > 0.0029 && d.cost < 0.0031 && d.mode == PB_DETAIL_EVERY_STEP && d.spacing == 32,
          "at step 127: cost %.4f measured (samples from step 32 on), within the 3 %% budget: every step, "
          "spacing doubled to %lld", d.cost, (long long)d.spacing);
    s.detail_steps = s.steps = 0;
    double added = run(&d, &s, 128, 100000);
    CHECK(d.spacing == PB_DETAIL_MAX_SPACING && d.period == 1024 && d.window == 1016,
          "settled: one summary step in %d, 8 per 1024", PB_DETAIL_MAX_SPACING);
    CHECK((double)s.detail_steps / (double)s.steps > 0.99, "%.2f %% of the steps are detail steps",
          100.0 * (double)s.detail_steps / (double)s.steps);
    CHECK(added <= 0.003 && added > 0.0029, "detail adds %.4f %%: the cost itself, nothing more", added * 100);
    CHECK(d.switches == 0, "never left every step");
    CHECK(fabs(pb_detail_average_cost(&d) - 0.003 * 1016 / 1024) < 1e-6, "average cost shown: %.5f",
          pb_detail_average_cost(&d));

    /* the stress model with the C++ extension, counted: +2.9 %, just within the budget */
    pb_detail_init(&d, "auto", 8, PB_DETAIL_DEFAULT_BUDGET_PCT);
    sim m = {.cost = 0.029, .noise = 0, .rng = 3};
    run(&d, &m, 0, 20000);
    CHECK(d.mode == PB_DETAIL_EVERY_STEP && d.period == 1024, "cost 2.9 %%: every step (period %lld)",
          (long long)d.period);

    /* cost 0 */
    pb_detail_init(&d, "auto", 8, PB_DETAIL_DEFAULT_BUDGET_PCT);
    sim z = {.cost = 0, .noise = 0, .rng = 3};
    run(&d, &z, 0, 5000);
    CHECK(d.mode == PB_DETAIL_EVERY_STEP && d.period == 1024 && d.cost == 0, "no measurable cost: every step");
}

static void drift(void)
{
    /* the machine's speed drifts: 40 steps at 1x, 40 at 1.8x, ... (this VM does that). Each
     * sample compares neighbouring steps, so the estimate holds. */
    pb_detail d;
    pb_detail_init(&d, "auto", 8, PB_DETAIL_DEFAULT_BUDGET_PCT);
    const double base = 10e6, cost = 0.01;
    for (int64_t st = 0; st < 20000; st++) {
        int on = pb_detail_on(&d, st);
        double speed = (st / 40) % 2 ? 1.8 : 1.0;
        int64_t wall = (int64_t)(base * speed * (on ? 1 + cost : 1));
        pb_detail_step_done(&d, st, wall, wall, on, 1);
    }
    CHECK(d.mode == PB_DETAIL_EVERY_STEP && d.switches == 0 && d.cost < 0.02,
          "speed drifting by 1.8x every 40 steps, cost 1 %%: every step throughout, estimate %.3f", d.cost);
    /* and one slow step in eight (a pause between turns of a benchmark, a GC) */
    pb_detail_init(&d, "auto", 8, PB_DETAIL_DEFAULT_BUDGET_PCT);
    for (int64_t st = 0; st < 20000; st++) {
        int on = pb_detail_on(&d, st);
        double pause = st % 8 == 2 ? 30 : 1;
        int64_t wall = (int64_t)(base * pause * (on ? 1 + cost : 1));
        pb_detail_step_done(&d, st, wall, wall, on, 1);
    }
    CHECK(d.mode == PB_DETAIL_EVERY_STEP && d.cost < 0.02, "one step in 8 thirty times as long: estimate %.3f",
          d.cost);
    pb_detail_init(&d, "windows", 8, PB_DETAIL_DEFAULT_BUDGET_PCT);
    for (int64_t st = 0; st < 20000; st++) {
        int on = pb_detail_on(&d, st);
        double speed = (st / 40) % 2 ? 1.8 : 1.0;
        int64_t wall = (int64_t)(base * speed * (on ? 1.35 : 1));
        pb_detail_step_done(&d, st, wall, wall, on, 1);
    }
    CHECK(d.cost > 0.3 && d.cost < 0.4 && d.period == 128,
          "windows, cost 35 %%, drifting speed: estimate %.3f, period %lld (8 x 0.35 / 3 %% -> 128)", d.cost,
          (long long)d.period);
}

static void over_budget(void)
{
    pb_detail d;
    pb_detail_init(&d, "auto", 8, PB_DETAIL_DEFAULT_BUDGET_PCT);
    /* 272 tiny modules with Python-level probes: detail costs about a third of the step */
    sim s = {.cost = 0.35, .noise = 0, .rng = 7};
    run(&d, &s, 0, 128);
    CHECK(d.mode == PB_DETAIL_WINDOWS && d.period == 128 && d.window == 8 && d.switches == 1,
          "at step 127: cost %.3f, over budget: windows of 8 every %lld (8 x 0.35 / 3 %% = 93 -> 128)",
          d.cost, (long long)d.period);
    double added = run(&d, &s, 128, 100000);
    CHECK(added <= 0.03 && added >= 0.015, "steady state: detail adds %.3f %% on average, within the 3 %% budget, "
          "and more than half of it", added * 100);
    CHECK(s.partway == 0, "no change joined a window partway");

    /* windows only, the budget of the earlier default: the earlier default */
    pb_detail_init(&d, "windows", 8, 0.5);
    CHECK(d.mode == PB_DETAIL_WINDOWS && d.period == 64 && pb_detail_on(&d, 7) && !pb_detail_on(&d, 8),
          "windows: steps 0-7, initial period 64");
    sim w = {.cost = 0.35, .noise = 0, .rng = 7};
    run(&d, &w, 0, 3000);
    CHECK(d.period == 1024, "windows, cost 0.35, budget 0.5 %%: period %lld (8 x 0.35 / 0.5 %% = 560 -> 1024)",
          (long long)d.period);
    pb_detail_init(&d, "windows", 8, 0.5);
    sim c = {.cost = 0.001, .noise = 0, .rng = 7};
    run(&d, &c, 0, 3000);
    CHECK(d.mode == PB_DETAIL_WINDOWS && d.period == 16, "windows only: cheap detail gives the shortest period, 16, "
          "never every step");
}

static void noisy(void)
{
    /* step times that vary +-8 % from step to step (this 2-core VM does): the estimates are noisy;
     * the average cost stays near the budget, and cheap detail stays (almost always) every step */
    const double costs[] = {0.0, 0.003, 0.01, 0.02, 0.05, 0.1, 0.35, 1.0};
    for (size_t i = 0; i < sizeof costs / sizeof costs[0]; i++) {
        pb_detail d;
        pb_detail_init(&d, "auto", 8, PB_DETAIL_DEFAULT_BUDGET_PCT);
        sim s = {.cost = costs[i], .noise = 0.08, .rng = 11 + i};
        run(&d, &s, 0, 2000);
        s.detail_steps = s.steps = 0;
        double added = run(&d, &s, 2000, 200000);
        double share = (double)s.detail_steps / (double)s.steps;
        CHECK(added <= 0.033, "noise +-8 %%, cost %.1f %%: average %.3f %% (%.1f %% of steps in detail)",
              costs[i] * 100, added * 100, share * 100);
        if (costs[i] <= 0.01)
            CHECK(share > 0.95, "noise, cost %.1f %%: %.1f %% of steps in detail", costs[i] * 100, share * 100);
        CHECK(s.partway == 0, "noise, cost %.1f %%: no change joined a window partway", costs[i] * 100);
    }
}

static void adapts(void)
{
    pb_detail d;
    pb_detail_init(&d, "auto", 8, PB_DETAIL_DEFAULT_BUDGET_PCT);
    sim s = {.cost = 0.35, .noise = 0, .rng = 5};
    run(&d, &s, 0, 3000);
    CHECK(d.mode == PB_DETAIL_WINDOWS, "expensive phase: windows (period %lld)", (long long)d.period);
    s.cost = 0.005; /* the job moved to long steps: detail is now cheap */
    int64_t st = 3000, before = d.estimated;
    while (d.mode != PB_DETAIL_EVERY_STEP && st < 3000 + 10 * 4096) run(&d, &s, st++, 1);
    CHECK(d.mode == PB_DETAIL_EVERY_STEP && d.estimated - before <= PB_DETAIL_ESTIMATES + 1,
          "when detail gets cheap every step comes back within %d estimates, the one it got cheap in and three "
          "more (took %lld)", PB_DETAIL_ESTIMATES + 1,
          (long long)(d.estimated - before));
    s.cost = 0.4; /* and expensive again */
    run(&d, &s, st, 10 * 1024);
    CHECK(d.mode == PB_DETAIL_WINDOWS, "when detail gets expensive again, windows again");
}

static void ranks_align(void)
{
    /* ranks that measured different costs (so different modes and periods) record nested sets */
    const double costs[] = {0.35, 0.08, 0.01, 0.001};
    pb_detail d[4];
    for (int i = 0; i < 4; i++) {
        pb_detail_init(&d[i], "auto", 8, PB_DETAIL_DEFAULT_BUDGET_PCT);
        sim s = {.cost = costs[i], .noise = 0, .rng = (uint64_t)i + 1};
        run(&d[i], &s, 0, 5000);
    }
    int nested = 1;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            /* the one with fewer detail steps per 4,096 is a subset of the other */
            int64_t ni = 0, nj = 0;
            for (int64_t st = 8192; st < 8192 + 4096; st++) {
                ni += pb_detail_on(&d[i], st);
                nj += pb_detail_on(&d[j], st);
            }
            if (ni > nj) continue;
            for (int64_t st = 8192; st < 8192 + 4 * 4096; st++)
                if (pb_detail_on(&d[i], st) && !pb_detail_on(&d[j], st)) nested = 0;
        }
    CHECK(d[0].mode == PB_DETAIL_WINDOWS && d[3].mode == PB_DETAIL_EVERY_STEP && nested,
          "ranks in windows (periods %lld, %lld) and every step (periods %lld, %lld): each one's detail steps are "
          "detail steps of every rank recording more",
          (long long)d[0].period, (long long)d[1].period, (long long)d[2].period, (long long)d[3].period);
}

static void unmeasured(void)
{
    pb_detail d;
    pb_detail_init(&d, "auto", 8, PB_DETAIL_DEFAULT_BUDGET_PCT);
    for (int64_t st = 0; st < 128 * 3; st++) {
        /* a capture (profiler on) records every step in detail and makes it 5x slower; no step
         * under it is a measurement */
        pb_detail_step_done(&d, st, 50000000, 50000000, 1, 0);
    }
    CHECK(d.cost < 0 && d.period == 128 && d.mode == PB_DETAIL_EVERY_STEP,
          "periods under a capture give no estimate");
}

/* A busy machine: in 30 % of the steps (at random) the training thread waits on the run queue
 * for up to 40 % of a step more, on top of 20 % of every step spent waiting for data. Detail costs
 * 1 % (CPU time, as probes do). know_cpu: the policy is given the thread's CPU time. Returns the
 * policy after `steps` steps in *d; *added: the average cost detail added. */
static int cost_off_cpu; /* busy_run: detail's cost is time waiting (GIL hand-offs), not CPU time */

static void busy_run(pb_detail *d, double cost, int know_cpu, int64_t steps, uint64_t seed, double *added)
{
    const double base = 10e6;
    sim s = {.noise = 1, .rng = seed};
    double plain = 0, extra = 0;
    pb_detail_init(d, "auto", 8, PB_DETAIL_DEFAULT_BUDGET_PCT);
    for (int64_t st = 0; st < steps; st++) {
        int on = pb_detail_on(d, st);
        double cpu = base * (on && !cost_off_cpu ? 1 + cost : 1), wait = base * (on && cost_off_cpu ? 0.2 + cost : 0.2);
        double u = noise_factor(&s) / 2, v = noise_factor(&s) / 2; /* noise 1: [0, 1) each */
        if (u < 0.3) wait += 0.4 * base * v;                     /* descheduled */
        plain += base;
        if (on) extra += base * cost;
        pb_detail_step_done(d, st, (int64_t)(cpu + wait), know_cpu ? (int64_t)cpu : -1, on, 1);
    }
    if (added) *added = extra / plain;
}

static void descheduled(void)
{
    pb_detail d;
    double added, truth = 0.01 / 1.2; /* 1 % of the CPU time is 0.83 % of the wall time */
    int fooled = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        busy_run(&d, 0.01, 0, 100000, seed, NULL);
        fooled += d.switches > 0 || d.cost > 0.03;
    }
    CHECK(fooled >= 4, "wall time alone: descheduled steps fool the estimate in %d of 8 runs (left every step or "
          "estimated over 3 %%)", fooled);
    int right = 0, rejected = 1;
    double worst = truth;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        busy_run(&d, 0.01, 1, 100000, seed, &added);
        right += d.mode == PB_DETAIL_EVERY_STEP && d.switches == 0 && fabs(d.cost - truth) < 0.005;
        rejected &= d.rejected > 100;
        if (fabs(d.cost - truth) > fabs(worst - truth)) worst = d.cost;
    }
    CHECK(right == 8 && rejected, "with the thread's CPU time: every step in all 8 runs of 100,000 steps, cost "
          "estimated within 0.5 %% of the true %.2f %% (worst %.2f %%), descheduled steps rejected (%lld in the "
          "last run)", truth * 100, worst * 100, (long long)d.rejected);
    CHECK(d.spread_lo <= truth + 1e-9 && d.spread_hi >= truth - 1e-9 && d.spread_hi - d.spread_lo < 0.02,
          "the spread of the last estimate's samples: %+.2f %% .. %+.2f %%", d.spread_lo * 100,
          d.spread_hi * 100);
    int short_right = 0, short_windows = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        busy_run(&d, 0.01, 1, 150, seed, NULL);
        short_right += d.estimated == 1 && d.mode == PB_DETAIL_EVERY_STEP && fabs(d.cost - truth) < 0.005;
        busy_run(&d, 0.35, 1, 150, seed, NULL);
        short_windows += d.estimated == 1 && d.mode == PB_DETAIL_WINDOWS;
    }
    CHECK(short_right == 8 && short_windows == 8, "150-step runs on the busy machine settle at their first "
          "estimate (step 127): every step for a 1 %% cost (%d of 8), windows for 35 %% (%d of 8)", short_right,
          short_windows);
    busy_run(&d, 0.35, 1, 20000, 3, &added);
    CHECK(d.mode == PB_DETAIL_WINDOWS && d.cost > 0.25 && d.cost < 0.33 && added <= 0.03,
          "a true cost of 35 %% of the CPU time (29 %% of the wall) is not rejected as descheduling: windows, "
          "estimate %.3f, average %.2f %%", d.cost, added * 100);
    /* Python-level probes: much of their cost is waiting for the GIL in backward (off-CPU), in
     * every detail step */
    cost_off_cpu = 1;
    busy_run(&d, 0.35, 1, 20000, 3, &added);
    int off_windows = d.mode == PB_DETAIL_WINDOWS && d.cost > 0.25 && d.cost < 0.33;
    busy_run(&d, 0.35, 1, 150, 5, NULL);
    off_windows &= d.mode == PB_DETAIL_WINDOWS;
    cost_off_cpu = 0;
    CHECK(off_windows, "a true cost of 35 %% spent off-CPU in every detail step (GIL hand-offs) is not "
          "rejected either: windows, after 150 steps too (estimate %.3f)", d.cost);
}

int main(void)
{
    fixed_periods();
    every_step();
    drift();
    over_budget();
    noisy();
    adapts();
    ranks_align();
    unmeasured();
    descheduled();
    return check_summary();
}
