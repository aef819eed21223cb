/*
 * shift.h - how much one sample of timings moved against another, with a confidence interval
 * that holds without assuming a distribution: the Hodges-Lehmann estimate of the shift and the
 * Mann-Whitney (Wilcoxon rank-sum) interval around it. Used by `probing compare`
 * (src/report/compare.c) for step time, phases and modules.
 *
 * How it works: the estimate is the median of the n*m differences b[j] - a[i]; the interval is
 * the pair of order statistics of those differences that the rank-sum test, at the confidence
 * asked, cannot tell from the estimate (Hollander & Wolfe, "Nonparametric Statistical Methods",
 * section 4.3; normal approximation of the rank-sum statistic, which is close from ten steps a
 * side). A few slow steps (a descheduled step on a busy machine) move neither: each is one of
 * n*m differences. Deterministic: the same samples give the same figures, no resampling.
 *
 * The caller takes logarithms first to estimate a ratio (exp(shift) - 1 is the relative change
 * of the medians); on raw seconds the shift is an absolute one. [any thread]
 */
#ifndef PB_REPORT_SHIFT_H
#define PB_REPORT_SHIFT_H

#include <stddef.h>

/* Samples larger than this are thinned, evenly in the order given, before the n*m differences
 * are formed (PB_SHIFT_MAX_SAMPLE^2 doubles at most). */
#define PB_SHIFT_MAX_SAMPLE 1500

/* Fewer values than this on a side: no interval (pb_shift_estimate returns -EDOM). */
#define PB_SHIFT_MIN_SAMPLE 5

typedef struct pb_shift {
    double estimate;   /* Hodges-Lehmann: median of b[j] - a[i] */
    double low, high;  /* the interval at the confidence asked; low <= estimate <= high */
    double median_a, median_b;
    size_t n_a, n_b;   /* values the figures stand on (after thinning) */
} pb_shift;

/* Estimates the shift of b (nb values) against a (na values), both borrowed, with an interval
 * at `confidence` (0.5 to 0.999; 0.95 is usual). Returns 0 with *out filled, -EDOM when a side
 * has fewer than PB_SHIFT_MIN_SAMPLE values or a value is not finite (*out then has the counts
 * and medians only), -EINVAL for a confidence out of range, -ENOMEM. */
int pb_shift_estimate(const double *a, size_t na, const double *b, size_t nb, double confidence,
                      pb_shift *out);

/* The two-sided standard normal quantile for `confidence` (1.959964 for 0.95). */
double pb_shift_normal_quantile(double confidence);

#endif
