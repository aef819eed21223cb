/*
 * detail.h - which steps record every module execution ("detail steps") and which only their
 * summary, so that probing's cost on the training job stays under a budget.
 *
 * Recording every module's forward and backward costs under a microsecond per module call with
 * the C++ extension probing._autograd (+2.9 % of the step on a model of 272 tiny modules, +0.3 %
 * on a small transformer; bench/RESULTS.md), several times more with Python-level autograd
 * probes. Every step still gets its python.steps row (wall, data wait, forward, backward,
 * optimizer, ...) whether or not it is a detail step; python.steps.detail says which are.
 *
 * Automatic mode (PROBING_DETAIL_EVERY=auto, the default) records every step in detail as long
 * as detail is measured to cost at most the budget (PROBING_DETAIL_BUDGET, 3 % of step time):
 *   - "every step": each period of P steps (P a power of two, 64 at first, doubling after each
 *     estimate within budget up to PB_DETAIL_EVERY_MAX_PERIOD) ends with `gap` summary steps
 *     (PROBING_DETAIL_STEPS, 8): the steps P-gap..P-1 of the period. They are the measurement:
 *     without them the cost of detail could not be known. 8 of 1,024 steps once settled.
 *   - "windows", when detail costs more than the budget: `gap` detail steps at the start of each
 *     period, P the smallest power of two with gap * cost / P <= budget, at least 2 * gap (so
 *     there are summary steps to compare with) and at most PB_DETAIL_MAX_PERIOD.
 * At the end of each period, cost = median wall of its detail steps / median wall of its summary
 * steps - 1 (at most the last PB_DETAIL_KEPT of each kind). Of the last three estimates, every
 * step stays while their median (of two, the larger) is within budget, and comes back from
 * windows only when the largest is; windows take their period from the largest. So one noisy
 * estimate neither drops every step nor makes windows dense: on this 2-core VM step times vary
 * by +-8 % and one estimate from 8 summary steps is off by about 2 points. `cost` shows the
 * estimate the mode followed. The first period (warm-up) is not used as a measurement.
 *
 * Periods are powers of two and changed only at the end of a period, so the ranks of a job agree
 * on which steps are detail steps: whatever periods and modes two ranks settle on, the detail
 * steps of the one recording less are detail steps of the other.
 *
 * PROBING_DETAIL_EVERY=windows keeps the windows whatever detail costs (the default before every
 * step was affordable; with PROBING_DETAIL_BUDGET=0.5 it is that default exactly).
 * PROBING_DETAIL_EVERY=N fixes a window of PROBING_DETAIL_STEPS detail steps every N steps
 * (1: every step in detail, no summary steps at all).
 * This file is plain C with no Python, driven by torch_hooks.c at each step boundary and
 * directly by tests/unit/test_detail.c.
 */
#ifndef PB_AGENT_DETAIL_H
#define PB_AGENT_DETAIL_H

#include <stdint.h>

#define PB_DETAIL_MAX_WINDOW 64
#define PB_DETAIL_MAX_PERIOD 4096
#define PB_DETAIL_INITIAL_PERIOD 64        /* automatic modes, until the first estimate */
#define PB_DETAIL_EVERY_MAX_PERIOD 1024    /* every-step mode: gap summary steps per this many */
#define PB_DETAIL_ESTIMATES 3              /* estimates kept; their median is used */
#define PB_DETAIL_KEPT 64                  /* step walls of each kind kept for the comparison */
#define PB_DETAIL_DEFAULT_BUDGET_PCT 3.0

typedef enum pb_detail_mode {
    PB_DETAIL_EVERY_STEP = 0, /* automatic: every step but the last `gap` of each period */
    PB_DETAIL_WINDOWS = 1,    /* automatic: `gap` steps at the start of each period */
    PB_DETAIL_FIXED = 2,      /* PROBING_DETAIL_EVERY=N: `window` steps every N */
} pb_detail_mode;

typedef struct pb_detail {
    int automatic;      /* period from the measured cost */
    int windows_only;   /* PROBING_DETAIL_EVERY=windows: never every step */
    pb_detail_mode mode;
    int64_t gap;        /* PROBING_DETAIL_STEPS: summary steps per period in every-step mode,
                         * detail steps per period in the others */
    int64_t period;     /* a power of two in the automatic modes */
    int64_t window;     /* detail steps at the start of each period: step % period < window */
    double budget;      /* fraction of step time detail may cost on average (automatic mode) */

    /* measurements since the last period ended (rings of the newest) */
    int64_t detail_walls[PB_DETAIL_KEPT];
    int ndetail, detail_next, detail_seen;
    int64_t summary_walls[PB_DETAIL_KEPT];
    int nsummary, summary_next, summary_seen;

    double estimates[PB_DETAIL_ESTIMATES]; /* newest last */
    int nestimates;
    double cost;      /* the estimate the mode and period were set from; < 0 when none yet */
    int64_t periods;  /* periods finished */
    int64_t switches; /* changes between every-step and windows */
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
    return step >= 0 && step % d->period < d->window;
}

/* Step `step` ended after wall_ns; was_detail: it was recorded in detail; measured: 0 when the
 * step must not count as a measurement (a capture ran in it). May change the mode and period,
 * only at the end of a period. */
void pb_detail_step_done(pb_detail *d, int64_t step, int64_t wall_ns, int was_detail, int measured);

/* The average share of step time detail costs under the current mode and period, from the
 * current estimate: cost * window / period; < 0 when there is no estimate. */
double pb_detail_average_cost(const pb_detail *d);

#endif
