/* detail.c - the detail-window policy; see detail.h. */
#include "detail.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int pb_detail_init(pb_detail *d, const char *every, int64_t window, double budget_pct)
{
    int rc = 0;
    memset(d, 0, sizeof *d);
    d->cost = -1;
    if (window < 1) window = 1;
    if (window > PB_DETAIL_MAX_WINDOW) window = PB_DETAIL_MAX_WINDOW;
    if (!(budget_pct >= 0.01)) budget_pct = 0.01; /* also NaN */
    if (budget_pct > 100) budget_pct = 100;
    d->window = window;
    d->budget = budget_pct / 100.0;
    d->automatic = 1;
    d->period = PB_DETAIL_INITIAL_PERIOD;
    if (every && *every && strcmp(every, "auto") != 0) {
        char *end;
        errno = 0;
        long long n = strtoll(every, &end, 10);
        if (errno || end == every || *end || n < 1 || n > (1ll << 40)) {
            rc = -1;
        } else {
            d->automatic = 0;
            d->period = n;
            if (d->window > n) d->window = n;
        }
    }
    if (d->automatic && d->period < 2 * d->window) d->period = 2 * d->window;
    return rc;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double median(const int64_t *v, int n)
{
    int64_t tmp[PB_DETAIL_SUMMARY_KEPT > PB_DETAIL_MAX_WINDOW ? PB_DETAIL_SUMMARY_KEPT : PB_DETAIL_MAX_WINDOW];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_i64);
    return n % 2 ? (double)tmp[n / 2] : ((double)tmp[n / 2 - 1] + (double)tmp[n / 2]) / 2;
}

/* The period for an estimated cost: the smallest power of two p with window * cost / p <=
 * budget, between 2 * window and PB_DETAIL_MAX_PERIOD. */
static int64_t period_for(const pb_detail *d, double cost)
{
    int64_t p = 1;
    while (p < 2 * d->window) p *= 2;
    double need = cost > 0 ? (double)d->window * cost / d->budget * (1 - 1e-9) : 0; /* 8 x 0.01 / 0.005 is 16 */
    while ((double)p < need && p < PB_DETAIL_MAX_PERIOD) p *= 2;
    return p;
}

static void window_ended(pb_detail *d)
{
    d->windows++;
    int usable = d->windows > 1 && d->nwindow * 2 >= d->window && d->nsummary >= d->window;
    if (usable) {
        double base = median(d->summary_walls, d->nsummary);
        if (base > 0) {
            double c = median(d->window_walls, d->nwindow) / base - 1;
            if (d->nestimates == PB_DETAIL_ESTIMATES) {
                memmove(d->estimates, d->estimates + 1, (PB_DETAIL_ESTIMATES - 1) * sizeof d->estimates[0]);
                d->nestimates--;
            }
            d->estimates[d->nestimates++] = c;
            double worst = d->estimates[0];
            for (int i = 1; i < d->nestimates; i++)
                if (d->estimates[i] > worst) worst = d->estimates[i];
            d->cost = worst > 0 ? worst : 0;
            if (d->automatic) d->period = period_for(d, d->cost);
        }
    }
    d->nwindow = 0;
    d->nsummary = d->summary_next = 0;
}

void pb_detail_step_done(pb_detail *d, int64_t step, int64_t wall_ns, int was_detail, int measured)
{
    if (d->period <= d->window) return; /* every step in detail: nothing to compare */
    if (was_detail) {
        if (measured && d->nwindow < PB_DETAIL_MAX_WINDOW) d->window_walls[d->nwindow++] = wall_ns;
        if (step % d->period == d->window - 1) window_ended(d);
    } else if (measured) {
        d->summary_walls[d->summary_next] = wall_ns;
        d->summary_next = (d->summary_next + 1) % PB_DETAIL_SUMMARY_KEPT;
        if (d->nsummary < PB_DETAIL_SUMMARY_KEPT) d->nsummary++;
    }
}
