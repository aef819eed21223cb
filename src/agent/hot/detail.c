/* detail.c - the detail-step policy; see detail.h. */
#include "detail.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int64_t pow2_at_least(int64_t n)
{
    int64_t p = 1;
    while (p < n) p *= 2;
    return p;
}

/* Every step: the smallest spacing; over the window, so that no window step of another rank is
 * one of this rank's summary steps. */
static int64_t min_spacing(const pb_detail *d)
{
    int64_t s = pow2_at_least(d->steps + 1);
    return s < PB_DETAIL_MIN_SPACING ? PB_DETAIL_MIN_SPACING : s;
}

static int64_t max_spacing(const pb_detail *d)
{
    int64_t s = min_spacing(d);
    return s < PB_DETAIL_MAX_SPACING ? PB_DETAIL_MAX_SPACING : s;
}

static void clear_measurements(pb_detail *d)
{
    d->nneighbours = d->neighbour_next = 0;
    d->nsamples = 0;
    d->nsummary = d->summary_next = 0;
    d->nwindow = 0;
}

static void set_every_step(pb_detail *d, int64_t spacing)
{
    d->mode = PB_DETAIL_EVERY_STEP;
    d->spacing = spacing;
    d->period = PB_DETAIL_SAMPLES * spacing;
    d->window = d->period - PB_DETAIL_SAMPLES;
}

static void set_windows(pb_detail *d, int64_t period)
{
    d->mode = PB_DETAIL_WINDOWS;
    d->spacing = 0;
    d->period = period;
    d->window = d->steps;
}

int pb_detail_init(pb_detail *d, const char *every, int64_t steps, double budget_pct)
{
    int rc = 0;
    memset(d, 0, sizeof *d);
    d->cost = -1;
    if (steps < 1) steps = 1;
    if (steps > PB_DETAIL_MAX_WINDOW) steps = PB_DETAIL_MAX_WINDOW;
    if (!(budget_pct >= 0.01)) budget_pct = 0.01; /* also NaN */
    if (budget_pct > 100) budget_pct = 100;
    d->steps = steps;
    d->budget = budget_pct / 100.0;
    d->automatic = 1;
    if (every && strcmp(every, "windows") == 0) {
        d->windows_only = 1;
    } else if (every && *every && strcmp(every, "auto") != 0) {
        char *end;
        errno = 0;
        long long n = strtoll(every, &end, 10);
        if (errno || end == every || *end || n < 1 || n > (1ll << 40)) {
            rc = -1;
        } else {
            d->automatic = 0;
            d->mode = PB_DETAIL_FIXED;
            d->period = n;
            d->window = steps > n ? n : steps;
            return 0;
        }
    }
    if (d->windows_only) {
        int64_t p = pow2_at_least(2 * steps);
        set_windows(d, p < PB_DETAIL_INITIAL_PERIOD ? PB_DETAIL_INITIAL_PERIOD : p);
    } else {
        set_every_step(d, min_spacing(d));
    }
    return rc;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_i64(const int64_t *v, int n)
{
    int64_t tmp[PB_DETAIL_MAX_WINDOW];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_i64);
    return n % 2 ? (double)tmp[n / 2] : ((double)tmp[n / 2 - 1] + (double)tmp[n / 2]) / 2;
}

/* The upper median: of one value that one, of two the larger, of three the middle. */
static double upper_median(const double *v, int n, double *largest)
{
    double tmp[PB_DETAIL_MAX_WINDOW];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    if (largest) *largest = tmp[n - 1];
    return tmp[n / 2];
}

/* Windows: the smallest power of two p with window * cost / p <= budget, between 2 * window and
 * PB_DETAIL_MAX_PERIOD. */
static int64_t windows_period(const pb_detail *d, double cost)
{
    int64_t p = pow2_at_least(2 * d->steps);
    double need = cost > 0 ? (double)d->steps * cost / d->budget * (1 - 1e-9) : 0; /* 8 x 0.01 / 0.005 is 16 */
    while ((double)p < need && p < PB_DETAIL_MAX_PERIOD) p *= 2;
    return p;
}

/* A new estimate: kept, and (automatic mode) the mode and period follow. */
static void estimate(pb_detail *d, double c)
{
    if (d->nestimates == PB_DETAIL_ESTIMATES) {
        memmove(d->estimates, d->estimates + 1, (PB_DETAIL_ESTIMATES - 1) * sizeof d->estimates[0]);
        d->nestimates--;
    }
    d->estimates[d->nestimates++] = c;
    d->estimated++;
    double top, mid = upper_median(d->estimates, d->nestimates, &top);
    if (mid < 0) mid = 0;
    if (top < 0) top = 0;
    if (!d->automatic) {
        d->cost = mid;
        return;
    }
    pb_detail_mode was = d->mode;
    /* every step stays while the median is within budget, and comes back from windows only
     * when all three are */
    double follow = was == PB_DETAIL_EVERY_STEP ? mid : top;
    if (!d->windows_only && follow <= d->budget) {
        int64_t s = was == PB_DETAIL_EVERY_STEP ? d->spacing * 2 : min_spacing(d);
        set_every_step(d, s > max_spacing(d) ? max_spacing(d) : s);
        d->cost = mid;
    } else {
        set_windows(d, windows_period(d, top));
        d->cost = top;
    }
    if (d->mode != was) {
        d->switches++;
        clear_measurements(d);
    }
}

/* The quartiles of n samples into spread_lo and spread_hi. */
static void set_spread(pb_detail *d, const double *v, int n)
{
    double tmp[PB_DETAIL_MAX_WINDOW];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    d->spread_lo = tmp[n / 4];
    d->spread_hi = tmp[(3 * n) / 4 < n ? (3 * n) / 4 : n - 1];
}

/* The median off-CPU time of a group of steps (two lists; < 0: none known). */
static int64_t median_off(const int64_t *a, int na, const int64_t *b, int nb)
{
    int64_t known[2 * PB_DETAIL_MAX_WINDOW];
    int n = 0;
    for (int i = 0; i < na; i++)
        if (a[i] >= 0) known[n++] = a[i];
    for (int i = 0; i < nb; i++)
        if (b[i] >= 0) known[n++] = b[i];
    return n ? (int64_t)median_i64(known, n) : -1;
}

/* A step that spent more than its share of the budget off-CPU beyond `least` (the median of its
 * kind: detail or summary steps) was descheduled: it is left out. Unknown CPU time (off < 0) is never descheduled. */
static int descheduled(const pb_detail *d, int64_t wall_ns, int64_t off_ns, int64_t least)
{
    return off_ns >= 0 && least >= 0 &&
           (double)(off_ns - least) > d->budget * PB_DETAIL_DESCHEDULED_SHARE * (double)wall_ns;
}

/* Of the walls of n steps, those not descheduled into kept; returns their number. */
static int keep_scheduled(pb_detail *d, const int64_t *walls, const int64_t *off, int n, int64_t least,
                          int64_t *kept)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (descheduled(d, walls[i], off[i], least)) d->rejected++;
        else kept[k++] = walls[i];
    }
    return k;
}

static void every_step_done(pb_detail *d, int64_t step, int64_t wall_ns, int64_t off_ns, int was_detail,
                            int measured)
{
    if (measured && was_detail) {
        d->neighbours[d->neighbour_next] = wall_ns;
        d->neighbours_off[d->neighbour_next] = off_ns;
        d->neighbour_next = (d->neighbour_next + 1) % PB_DETAIL_NEIGHBOURS;
        if (d->nneighbours < PB_DETAIL_NEIGHBOURS) d->nneighbours++;
    } else if (measured && step >= PB_DETAIL_WARMUP && d->nneighbours >= 2 && wall_ns > 0 &&
               d->nsamples < PB_DETAIL_MAX_WINDOW) {
        /* detail steps against detail steps, summary steps against summary steps: a cost of
         * detail that shows as off-CPU time (GIL hand-offs of Python-level probes) is in all of
         * them and stays; descheduling hits some steps and not the others */
        d->summary_recent_off[d->summary_recent_next] = off_ns;
        d->summary_recent_next = (d->summary_recent_next + 1) % PB_DETAIL_NEIGHBOURS;
        if (d->nsummary_recent < PB_DETAIL_NEIGHBOURS) d->nsummary_recent++;
        int64_t kept[PB_DETAIL_NEIGHBOURS];
        if (descheduled(d, wall_ns, off_ns, median_off(d->summary_recent_off, d->nsummary_recent, NULL, 0))) {
            d->rejected++;
        } else {
            int64_t usual = median_off(d->neighbours_off, d->nneighbours, NULL, 0);
            int n = keep_scheduled(d, d->neighbours, d->neighbours_off, d->nneighbours, usual, kept);
            if (n >= 2) d->samples[d->nsamples++] = median_i64(kept, n) / (double)wall_ns - 1;
        }
    }
    if (!was_detail) d->nneighbours = d->neighbour_next = 0; /* neighbours are the steps since */
    if (step % d->period == d->period - 1) {
        int n = d->nsamples;
        d->nsamples = 0;
        if (n >= PB_DETAIL_MIN_SAMPLES) {
            set_spread(d, d->samples, n);
            estimate(d, upper_median(d->samples, n, NULL));
        }
    }
}

static void windows_step_done(pb_detail *d, int64_t step, int64_t wall_ns, int64_t off_ns, int was_detail,
                              int measured)
{
    if (was_detail) {
        if (measured && d->nwindow < PB_DETAIL_MAX_WINDOW) {
            d->window_off[d->nwindow] = off_ns;
            d->window_walls[d->nwindow++] = wall_ns;
        }
    } else if (measured) {
        d->summary_walls[d->summary_next] = wall_ns;
        d->summary_off[d->summary_next] = off_ns;
        d->summary_next = (int)((d->summary_next + 1) % d->window);
        if (d->nsummary < d->window) d->nsummary++;
    }
    if (was_detail && step % d->period == d->window - 1) {
        int64_t summary[PB_DETAIL_MAX_WINDOW], window[PB_DETAIL_MAX_WINDOW];
        int nsummary = keep_scheduled(d, d->summary_walls, d->summary_off, d->nsummary,
                                      median_off(d->summary_off, d->nsummary, NULL, 0), summary);
        int nwindow = keep_scheduled(d, d->window_walls, d->window_off, d->nwindow,
                                     median_off(d->window_off, d->nwindow, NULL, 0), window);
        int usable = step >= PB_DETAIL_WARMUP && nwindow * 2 >= d->window && nsummary * 2 >= d->window;
        double base = usable ? median_i64(summary, nsummary) : 0;
        d->nwindow = 0;
        d->nsummary = d->summary_next = 0; /* the next window compares with the steps before it */
        if (base > 0) {
            double each[PB_DETAIL_MAX_WINDOW];
            for (int i = 0; i < nwindow; i++) each[i] = (double)window[i] / base - 1;
            set_spread(d, each, nwindow);
            estimate(d, median_i64(window, nwindow) / base - 1);
        }
    }
}

void pb_detail_step_done(pb_detail *d, int64_t step, int64_t wall_ns, int64_t cpu_ns, int was_detail, int measured)
{
    if (step < 0) return;
    int64_t off_ns = cpu_ns < 0 ? -1 : wall_ns > cpu_ns ? wall_ns - cpu_ns : 0;
    if (d->mode == PB_DETAIL_EVERY_STEP) every_step_done(d, step, wall_ns, off_ns, was_detail, measured);
    else if (d->period > d->window) windows_step_done(d, step, wall_ns, off_ns, was_detail, measured); /* else all detail */
}

double pb_detail_average_cost(const pb_detail *d)
{
    return d->cost < 0 ? -1 : d->cost * (double)d->window / (double)d->period;
}
