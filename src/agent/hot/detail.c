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

/* Every-step mode: the shortest period, long enough that the gap is at most an eighth of it. */
static int64_t every_min_period(const pb_detail *d)
{
    int64_t p = pow2_at_least(8 * d->gap);
    return p < PB_DETAIL_INITIAL_PERIOD ? PB_DETAIL_INITIAL_PERIOD : p;
}

static int64_t every_max_period(const pb_detail *d)
{
    int64_t p = every_min_period(d);
    return p < PB_DETAIL_EVERY_MAX_PERIOD ? PB_DETAIL_EVERY_MAX_PERIOD : p;
}

static void set_mode(pb_detail *d, pb_detail_mode mode, int64_t period)
{
    d->mode = mode;
    d->period = period;
    d->window = mode == PB_DETAIL_EVERY_STEP ? period - d->gap : d->gap;
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
    d->gap = steps;
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
    if (d->windows_only)
        set_mode(d, PB_DETAIL_WINDOWS, pow2_at_least(2 * steps > PB_DETAIL_INITIAL_PERIOD ? 2 * steps : PB_DETAIL_INITIAL_PERIOD));
    else
        set_mode(d, PB_DETAIL_EVERY_STEP, every_min_period(d));
    return rc;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double median(const int64_t *v, int n)
{
    int64_t tmp[PB_DETAIL_KEPT];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_i64);
    return n % 2 ? (double)tmp[n / 2] : ((double)tmp[n / 2 - 1] + (double)tmp[n / 2]) / 2;
}

/* Windows mode: the smallest power of two p with gap * cost / p <= budget, between 2 * gap and
 * PB_DETAIL_MAX_PERIOD. */
static int64_t windows_period(const pb_detail *d, double cost)
{
    int64_t p = pow2_at_least(2 * d->gap);
    double need = cost > 0 ? (double)d->gap * cost / d->budget * (1 - 1e-9) : 0; /* 8 x 0.01 / 0.005 is 16 */
    while ((double)p < need && p < PB_DETAIL_MAX_PERIOD) p *= 2;
    return p;
}

static void keep(int64_t *ring, int *n, int *next, int64_t wall)
{
    ring[*next] = wall;
    *next = (*next + 1) % PB_DETAIL_KEPT;
    if (*n < PB_DETAIL_KEPT) (*n)++;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static void period_ended(pb_detail *d)
{
    /* usable: not the first period (warm-up), and at least half of each kind of step measured */
    int64_t want_detail = min64(d->window, PB_DETAIL_KEPT), want_summary = min64(d->period - d->window, PB_DETAIL_KEPT);
    int usable = d->periods > 0 && d->ndetail > 0 && d->nsummary > 0 && d->detail_seen * 2 >= want_detail &&
                 d->summary_seen * 2 >= want_summary;
    d->periods++;
    double base = usable ? median(d->summary_walls, d->nsummary) : 0;
    if (base > 0) {
        double c = median(d->detail_walls, d->ndetail) / base - 1;
        if (d->nestimates == PB_DETAIL_ESTIMATES) {
            memmove(d->estimates, d->estimates + 1, (PB_DETAIL_ESTIMATES - 1) * sizeof d->estimates[0]);
            d->nestimates--;
        }
        d->estimates[d->nestimates++] = c;
        /* the upper median (of one estimate that one, of two the larger, of three the middle),
         * and the largest */
        double sorted[PB_DETAIL_ESTIMATES];
        memcpy(sorted, d->estimates, (size_t)d->nestimates * sizeof sorted[0]);
        for (int i = 1; i < d->nestimates; i++)
            for (int j = i; j > 0 && sorted[j] < sorted[j - 1]; j--) {
                double t = sorted[j];
                sorted[j] = sorted[j - 1];
                sorted[j - 1] = t;
            }
        double mid = sorted[d->nestimates / 2], top = sorted[d->nestimates - 1];
        if (mid < 0) mid = 0;
        if (top < 0) top = 0;
        if (d->automatic) {
            pb_detail_mode was = d->mode;
            /* every step stays while the median is within budget, and comes back from windows
             * only when all three are */
            double follow = was == PB_DETAIL_EVERY_STEP ? mid : top;
            if (!d->windows_only && follow <= d->budget) {
                int64_t p = was == PB_DETAIL_EVERY_STEP ? d->period * 2 : every_min_period(d);
                set_mode(d, PB_DETAIL_EVERY_STEP, p > every_max_period(d) ? every_max_period(d) : p);
            } else {
                set_mode(d, PB_DETAIL_WINDOWS, windows_period(d, top));
            }
            d->cost = d->mode == PB_DETAIL_EVERY_STEP ? mid : top;
            if (d->mode != was) d->switches++;
        } else {
            d->cost = mid;
        }
    }
    d->ndetail = d->detail_next = d->detail_seen = 0;
    d->nsummary = d->summary_next = d->summary_seen = 0;
}

void pb_detail_step_done(pb_detail *d, int64_t step, int64_t wall_ns, int was_detail, int measured)
{
    if (d->period <= d->window || step < 0) return; /* every step in detail: nothing to compare */
    if (measured) {
        if (was_detail) {
            keep(d->detail_walls, &d->ndetail, &d->detail_next, wall_ns);
            d->detail_seen++;
        } else {
            keep(d->summary_walls, &d->nsummary, &d->summary_next, wall_ns);
            d->summary_seen++;
        }
    }
    if (step % d->period == d->period - 1) period_ended(d);
}

double pb_detail_average_cost(const pb_detail *d)
{
    return d->cost < 0 ? -1 : d->cost * (double)d->window / (double)d->period;
}
