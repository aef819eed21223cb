/*
 * detail.h - which steps record every module execution ("detail steps") and which only their
 * summary, so that probing's cost on the training job stays under a budget.
 *
 * Recording every module's forward and backward costs about 3,000 instructions per module call
 * with the C++ extension probing._autograd (+2.9 % of the instructions, +6 % of the wall time of a
 * step of 272 tiny modules; +0.3 % / +1.6 % on a small transformer; bench/RESULTS.md), several
 * times more with Python-level
 * autograd probes. Every step gets its python.steps row (wall, data wait, forward, backward,
 * optimizer, ...) whether or not it is a detail step; python.steps.detail says which are.
 *
 * Automatic mode (PROBING_DETAIL_EVERY=auto, the default) records every step in detail as long
 * as detail is measured to cost at most the budget (PROBING_DETAIL_BUDGET, 3 % of step time):
 *   - "every step": one step in every `spacing` (16, doubling after each estimate within budget
 *     up to 128) is a summary step, the last of each `spacing`; it is the measurement: its wall
 *     time against the median of the (up to) 4 detail steps just before it gives one sample of
 *     the cost. A period is PB_DETAIL_SAMPLES samples (8 x spacing steps: 128 to 1,024); the
 *     median of its samples is the period's estimate. 8 of every 1,024 steps once settled.
 *   - "windows", when detail costs more than the budget: `window` (PROBING_DETAIL_STEPS, 8)
 *     detail steps at the start of each period, P the smallest power of two with window * cost
 *     / P <= budget, at least 2 * window and at most PB_DETAIL_MAX_PERIOD. At a window's end its
 *     median wall against the median of the summary steps just before it is the estimate.
 * Each comparison is between neighbouring steps, so the machine's speed drifting over tens of
 * steps (this 2-core VM's does, by up to 2x) moves detail and summary steps alike; one slow
 * step (a pause, a GC) is one sample of several and the median drops it. Of the last three
 * estimates, every step stays while their median (of two, the larger) is within budget and
 * comes back from windows only when the largest is; windows take their period from the
 * largest. `cost` shows the estimate the mode followed. Samples from the first 32 steps are
 * warm-up and not taken.
 *
 * A busy machine must not fool the estimate: a step in which the training thread was descheduled
 * (other processes ran on its core) is longer for reasons of its own. So each step also comes with
 * the training thread's CPU time (CLOCK_THREAD_CPUTIME_ID), and its off-CPU time (wall - CPU:
 * waiting for the GPU, data, locks, or the run queue) is compared with the median off-CPU time
 * of the steps of its kind it is compared with (detail steps with the other detail steps,
 * summary steps with the last summary steps): a step with more than PB_DETAIL_DESCHEDULED_SHARE
 * of the budget (of its wall time) off-CPU beyond that median is descheduled and takes no part in
 * the comparison. A cost of detail is in every detail step, whether CPU time or off-CPU time (the
 * GIL hand-offs of Python-level probes), so it is not rejected this way; descheduling hits some
 * steps and not others. A machine so busy that every step waits differently gives fewer
 * samples, not wrong ones. `rejected` counts
 * such steps; `spread_lo` and `spread_hi` are the quartiles of the per-step samples behind the
 * latest estimate.
 *
 * Spacings and periods are powers of two, a spacing is never under 2 * window and changes take
 * effect at a period's end, so the ranks of a job agree on which steps are detail steps: whatever
 * modes and periods two ranks settle on, the detail steps of the one recording less are detail
 * steps of the other.
 *
 * PROBING_DETAIL_EVERY=windows keeps the windows whatever detail costs (with
 * PROBING_DETAIL_BUDGET=0.5 it is the default before every step was affordable).
 * PROBING_DETAIL_EVERY=N fixes a window of PROBING_DETAIL_STEPS detail steps every N steps
 * (1: every step in detail, no summary steps at all, nothing measured).
 * This file is plain C with no Python, driven by torch_hooks.c at each step boundary and
 * directly by tests/unit/test_detail.c.
 */
#ifndef PB_AGENT_DETAIL_H
#define PB_AGENT_DETAIL_H

#include <stdint.h>

#define PB_DETAIL_MAX_WINDOW 64
#define PB_DETAIL_MAX_PERIOD 4096
#define PB_DETAIL_INITIAL_PERIOD 64   /* windows: until the first estimate */
#define PB_DETAIL_MIN_SPACING 16      /* every step: one summary step per this many, at first */
#define PB_DETAIL_MAX_SPACING 128     /* ... and at most (8 of every 1,024 steps) */
#define PB_DETAIL_SAMPLES 8           /* every step: samples per period */
#define PB_DETAIL_MIN_SAMPLES 3       /* every step: the fewest a period's estimate is made from */
#define PB_DETAIL_NEIGHBOURS 4        /* every step: detail steps a summary step is compared with */
#define PB_DETAIL_WARMUP 32           /* no sample from steps before this */
#define PB_DETAIL_ESTIMATES 3         /* estimates kept */
#define PB_DETAIL_DEFAULT_BUDGET_PCT 3.0
#define PB_DETAIL_DESCHEDULED_SHARE 0.5 /* off-CPU beyond the group's least, as a share of the budget */

typedef enum pb_detail_mode {
    PB_DETAIL_EVERY_STEP = 0, /* automatic: every step but one per `spacing` */
    PB_DETAIL_WINDOWS = 1,    /* automatic: `window` steps at the start of each period */
    PB_DETAIL_FIXED = 2,      /* PROBING_DETAIL_EVERY=N: `window` steps every N */
} pb_detail_mode;

typedef struct pb_detail {
    int automatic;      /* mode and period from the measured cost */
    int windows_only;   /* PROBING_DETAIL_EVERY=windows: never every step */
    pb_detail_mode mode;
    int64_t steps;      /* PROBING_DETAIL_STEPS: detail steps per window */
    int64_t spacing;    /* every step: the last step of each `spacing` is a summary step */
    int64_t period;     /* every step: PB_DETAIL_SAMPLES * spacing; else windows start at its multiples */
    int64_t window;     /* detail steps per period (every step: period - PB_DETAIL_SAMPLES) */
    double budget;      /* fraction of step time detail may cost on average (automatic mode) */

    /* every step: the last detail walls (and their off-CPU times), and the samples of this period */
    int64_t neighbours[PB_DETAIL_NEIGHBOURS], neighbours_off[PB_DETAIL_NEIGHBOURS];
    int nneighbours, neighbour_next;
    int64_t summary_recent_off[PB_DETAIL_NEIGHBOURS]; /* off-CPU times of the last summary steps */
    int nsummary_recent, summary_recent_next;
    double samples[PB_DETAIL_MAX_WINDOW];
    int nsamples;
    /* windows: the walls of the summary steps before the window, and of the window */
    int64_t summary_walls[PB_DETAIL_MAX_WINDOW], summary_off[PB_DETAIL_MAX_WINDOW];
    int nsummary, summary_next;
    int64_t window_walls[PB_DETAIL_MAX_WINDOW], window_off[PB_DETAIL_MAX_WINDOW];
    int nwindow;

    double estimates[PB_DETAIL_ESTIMATES]; /* newest last */
    int nestimates;
    double cost;      /* the estimate the mode and period were set from; < 0 when none yet */
    int64_t estimated; /* estimates made */
    int64_t switches;  /* changes between every step and windows */
    int64_t rejected;  /* steps left out of comparisons as descheduled */
    double spread_lo, spread_hi; /* quartiles of the samples of the latest estimate */
} pb_detail;

/* Sets d up. every: NULL, "" or "auto" for the automatic mode, "windows" for automatic windows
 * only, else a period in steps (>= 1; the window is then cut to it). steps: PROBING_DETAIL_STEPS
 * (clamped to 1..PB_DETAIL_MAX_WINDOW). budget_pct: percent of step time (automatic modes;
 * clamped to 0.01..100). Returns 0, or -1 when `every` is none of these (d is then set up
 * automatic). */
int pb_detail_init(pb_detail *d, const char *every, int64_t steps, double budget_pct);

/* Whether step `step` is a detail step. */
static inline int pb_detail_on(const pb_detail *d, int64_t step)
{
    if (step < 0) return 0;
    if (d->mode == PB_DETAIL_EVERY_STEP) return step % d->spacing != d->spacing - 1;
    return step % d->period < d->window;
}

/* Step `step` ended after wall_ns, of which the training thread ran cpu_ns on a CPU (< 0: not
 * known, no step is then found descheduled); was_detail: it was recorded in detail; measured: 0
 * when the step must not count as a measurement (a capture ran in it). May change the mode and
 * period. */
void pb_detail_step_done(pb_detail *d, int64_t step, int64_t wall_ns, int64_t cpu_ns, int was_detail, int measured);

/* The average share of step time detail costs under the current mode and period, from the
 * current estimate: cost * window / period; < 0 when there is no estimate. */
double pb_detail_average_cost(const pb_detail *d);

#endif
