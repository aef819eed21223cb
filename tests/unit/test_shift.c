/*
 * test_shift.c - the Hodges-Lehmann shift and its Mann-Whitney interval (src/report/shift.c):
 * a textbook sample worked by hand, two samples from one distribution (the interval holds no
 * change about 95 % of the time), a planted shift found, a few wild values that do not move it,
 * and the errors.
 */
#include "check.h"
#include "shift.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t rng = 88172645463325252ull;
static double uniform(void) /* xorshift64: deterministic, in (0, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}

/* A step time: 5 ms, log-normal noise (sigma 0.1), a slow step (3x) one time in 50. */
static double step_time(void)
{
    double z = sqrt(-2 * log(uniform())) * cos(2 * M_PI * uniform());
    double t = 5e-3 * exp(0.1 * z);
    return uniform() < 0.02 ? 3 * t : t;
}

int main(void)
{
    pb_shift s;
    CHECK(fabs(pb_shift_normal_quantile(0.95) - 1.959964) < 1e-5, "z at 95 %% is 1.959964");

    /* b = a + 2: the 25 differences are 2 + (a[j] - a[i]), -2 to 6; the estimate is 2 and the
     * interval, k = floor(12.5 - 1.96 sqrt(25 * 11 / 12)) = 3, is the 3rd smallest and 3rd
     * largest: -1 and 5 (the exact rank-sum table gives the same k for 5 and 5). */
    double a[] = {1, 2, 3, 4, 5}, b[] = {3, 4, 5, 6, 7};
    CHECK(pb_shift_estimate(a, 5, b, 5, 0.95, &s) == 0, "five values a side are enough");
    CHECK(s.estimate == 2 && s.low == -1 && s.high == 5, "a + 2: shift 2, interval -1 to 5 (got %g, %g to %g)",
          s.estimate, s.low, s.high);
    CHECK(s.median_a == 3 && s.median_b == 5 && s.n_a == 5 && s.n_b == 5, "medians and counts");

    /* Two samples of one distribution: the interval holds 0 in about 95 % of 200 draws. */
    enum { N = 120, DRAWS = 200 };
    double *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    int covered = 0;
    for (int d = 0; d < DRAWS; d++) {
        for (int i = 0; i < N; i++) x[i] = log(step_time()), y[i] = log(step_time());
        if (pb_shift_estimate(x, N, y, N, 0.95, &s) == 0 && s.low <= 0 && s.high >= 0) covered++;
    }
    CHECK(covered >= 180 && covered <= 199, "same distribution: no change in %d of %d draws (about 95 %%)",
          covered, DRAWS);

    /* A planted shift: every step 50 % slower; found within 10 % of it (45 to 55 %), the
     * interval above 0; and +10 %, whose interval is above 0 too. */
    int found = 0;
    for (int d = 0; d < 50; d++) {
        for (int i = 0; i < N; i++) x[i] = log(step_time()), y[i] = log(1.50 * step_time());
        pb_shift_estimate(x, N, y, N, 0.95, &s);
        double pct = 100 * (exp(s.estimate) - 1);
        int ok = s.low > 0 && fabs(pct - 50) <= 5.0;
        for (int i = 0; i < N; i++) y[i] = log(1.10 * step_time());
        pb_shift_estimate(x, N, y, N, 0.95, &s);
        found += ok && s.low > 0;
    }
    CHECK(found >= 48, "planted +50 %%: found within 10 %% of it, and +10 %% above 0, in %d of 50 draws",
          found);

    /* Wild values on one side do not move the estimate much: the median of the differences. */
    for (int i = 0; i < N; i++) x[i] = 5e-3 + 1e-5 * i, y[i] = 5e-3 + 1e-5 * i;
    for (int i = 0; i < 5; i++) y[i * 20] = 1.0; /* five steps of one second */
    pb_shift_estimate(x, N, y, N, 0.95, &s);
    CHECK(fabs(s.estimate) < 1e-4 && s.low <= 0 && s.high >= 0,
          "five 1 s outliers in 120 steps: shift %g s, interval holds 0", s.estimate);

    /* Errors: too few values, a value that is not finite, a confidence out of range. */
    CHECK(pb_shift_estimate(a, 4, b, 5, 0.95, &s) == -EDOM && s.n_a == 4 && s.median_a == 2.5,
          "four values: -EDOM, the counts and medians still there");
    double bad[] = {1, 2, NAN, 4, 5};
    CHECK(pb_shift_estimate(a, 5, bad, 5, 0.95, &s) == -EDOM, "NaN: -EDOM");
    CHECK(pb_shift_estimate(a, 5, b, 5, 1.5, &s) == -EINVAL, "confidence 1.5: -EINVAL");

    /* Large samples are thinned, not refused. */
    double *big = malloc(4000 * sizeof *big);
    for (int i = 0; i < 4000; i++) big[i] = (double)(i % 100);
    CHECK(pb_shift_estimate(big, 4000, big, 4000, 0.95, &s) == 0 && s.n_a == PB_SHIFT_MAX_SAMPLE &&
              fabs(s.estimate) <= 1,
          "4000 values a side: thinned to %d, shift %g", PB_SHIFT_MAX_SAMPLE, s.estimate);
    free(big);
    free(x);
    free(y);
    return check_summary();
}
