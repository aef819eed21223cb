/*
 * detail.h - which steps record every module execution ("detail steps") and which only their
 * summary, so that probing's cost on the training job stays under a budget.
 *
 * Recording every module's forward and backward costs a few microseconds per module per step
 * with Python-level autograd node hooks (torch's C++ engine calls Python for each), about a
 * third of the step on a model of hundreds of tiny modules, and less with the C++ extension
 * probing._autograd (bench/RESULTS.md). So by default the per-module record is made in
 * windows: `window` consecutive steps (default 8) starting at every step that is a multiple of
 * `period`. Every other step still gets its python.steps row (wall, data wait, forward,
 * backward, optimizer, ...) from two clock reads per root module call and one probe per backward
 * pass. python.steps.detail says which steps are which.
 *
 * The period (automatic, the default) is a power of two chosen from what detail is measured to
 * cost this job: after each window, cost = median wall of its steps / median wall of the
 * summary steps since the previous window - 1; the period is the smallest power of two with
 * window * cost / period <= budget (default 0.5 % of step time), at least 2 * window (so there
 * are always summary steps to compare with) and at most PB_DETAIL_MAX_PERIOD. The largest of the
 * last three estimates is used, so one noisy low estimate cannot make detail dense. Windows are
 * set by the step number alone, and periods are powers of two, so the ranks of a job record the
 * same steps in detail (a rank with a shorter period records a superset) and never wait for
 * each other's windows at different steps. The first window (steps 0..window-1, so there is
 * detail as soon as the agent starts) is not used as a measurement: it holds warm-up.
 *
 * PROBING_DETAIL_EVERY=N fixes the period instead (1: every step in detail, the full record).
 * This file is plain C with no Python, driven by torch_hooks.c at each step boundary and
 * directly by tests/unit/test_detail.c.
 */
#ifndef PB_AGENT_DETAIL_H
#define PB_AGENT_DETAIL_H

#include <stdint.h>

#define PB_DETAIL_MAX_WINDOW 64
#define PB_DETAIL_MAX_PERIOD 4096
#define PB_DETAIL_INITIAL_PERIOD 64 /* automatic mode, until the first estimate */
#define PB_DETAIL_ESTIMATES 3       /* estimates kept; the largest is used */
#define PB_DETAIL_SUMMARY_KEPT 64   /* summary step walls kept for the comparison */

typedef struct pb_detail {
    int automatic;   /* period from the measured cost */
    int64_t window;  /* consecutive detail steps per window (1..PB_DETAIL_MAX_WINDOW) */
    int64_t period;  /* a window starts at every multiple of period; period >= window */
    double budget;   /* fraction of step time detail may cost on average (automatic mode) */

    /* measurements since the last window ended */
    int64_t window_walls[PB_DETAIL_MAX_WINDOW];
    int nwindow;
    int64_t summary_walls[PB_DETAIL_SUMMARY_KEPT];
    int nsummary, summary_next;

    double estimates[PB_DETAIL_ESTIMATES]; /* newest last */
    int nestimates;
    double cost;     /* the estimate the period was set from; < 0 when none yet */
    int64_t windows; /* windows finished */
} pb_detail;

/* Sets d up. every: NULL, "" or "auto" for the automatic period, else a period in steps (>= 1;
 * the window is then cut to it). window: steps per window (clamped to 1..PB_DETAIL_MAX_WINDOW).
 * budget_pct: percent of step time (automatic mode; clamped to 0.01..100). Returns 0, or -1
 * when `every` is not a positive integer or "auto" (d is then set up automatic). */
int pb_detail_init(pb_detail *d, const char *every, int64_t window, double budget_pct);

/* Whether step `step` is a detail step. */
static inline int pb_detail_on(const pb_detail *d, int64_t step)
{
    return step >= 0 && step % d->period < d->window;
}

/* Step `step` ended after wall_ns; was_detail: it was recorded in detail; measured: 0 when the
 * step must not count as a measurement (a capture ran in it). May change d->period, only at the
 * end of a window, and never so that the next step starts a window. */
void pb_detail_step_done(pb_detail *d, int64_t step, int64_t wall_ns, int was_detail, int measured);

#endif
