/*
 * shift.c - the Hodges-Lehmann shift and its rank-sum interval (see shift.h).
 *
 * The interval: with U the Mann-Whitney statistic, its mean nm/2 and variance nm(n+m+1)/12
 * under "no shift", the k-th smallest and the k-th largest of the nm differences bound the
 * shift, k = floor(nm/2 - z sqrt(nm(n+m+1)/12)) (at least 1), z the normal quantile of the
 * confidence. The differences are sorted once (n, m at most PB_SHIFT_MAX_SAMPLE).
 */
#include "shift.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The median of v[0..n) (sorted in place), NaN when n is 0. */
static double median_of(double *v, size_t n)
{
    if (!n) return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Acklam's rational approximation of the inverse normal CDF (relative error below 1.2e-9). */
static double inverse_normal(double p)
{
    static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                               -2.759285104469687e+02, 1.383577518672690e+02,
                               -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                               -1.556989798598866e+02, 6.680131188771972e+01,
                               -1.328068155288572e+01};
    static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                               -2.400758277161838e+00, -2.549732539343734e+00,
                               4.374664141464968e+00, 2.938163982698783e+00};
    static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                               2.445134137142996e+00, 3.754408661907416e+00};
    double q, r;
    if (p < 0.02425) {
        q = sqrt(-2 * log(p));
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    if (p > 1 - 0.02425) return -inverse_normal(1 - p);
    q = p - 0.5;
    r = q * q;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

double pb_shift_normal_quantile(double confidence)
{
    return inverse_normal(0.5 + confidence / 2);
}

/* Copies v[0..n) into out, thinned evenly to at most PB_SHIFT_MAX_SAMPLE values; returns the
 * count copied, or 0 when a value is not finite. */
static size_t thin(const double *v, size_t n, double *out)
{
    size_t k = n > PB_SHIFT_MAX_SAMPLE ? PB_SHIFT_MAX_SAMPLE : n;
    for (size_t i = 0; i < k; i++) {
        out[i] = v[n == k ? i : (size_t)((double)i * (double)n / (double)k)];
        if (!isfinite(out[i])) return 0;
    }
    return k;
}

int pb_shift_estimate(const double *a, size_t na, const double *b, size_t nb, double confidence,
                      pb_shift *out)
{
    double *sa = NULL, *sb = NULL, *diff = NULL;
    int rc = -ENOMEM;
    memset(out, 0, sizeof *out);
    out->estimate = out->low = out->high = out->median_a = out->median_b = NAN;
    if (!(confidence >= 0.5 && confidence <= 0.999)) return -EINVAL;
    sa = malloc((na ? na : 1) * sizeof *sa);
    sb = malloc((nb ? nb : 1) * sizeof *sb);
    if (!sa || !sb) goto done;
    size_t n = thin(a, na, sa), m = thin(b, nb, sb);
    out->n_a = n;
    out->n_b = m;
    out->median_a = median_of(sa, n);
    out->median_b = median_of(sb, m);
    rc = -EDOM;
    if (n < PB_SHIFT_MIN_SAMPLE || m < PB_SHIFT_MIN_SAMPLE) goto done;
    rc = -ENOMEM;
    size_t total = n * m;
    if (!(diff = malloc(total * sizeof *diff))) goto done;
    for (size_t i = 0, k = 0; i < n; i++)
        for (size_t j = 0; j < m; j++) diff[k++] = sb[j] - sa[i];
    qsort(diff, total, sizeof *diff, cmp_double);
    out->estimate = total % 2 ? diff[total / 2] : 0.5 * (diff[total / 2 - 1] + diff[total / 2]);
    double z = pb_shift_normal_quantile(confidence), nn = (double)n, mm = (double)m;
    double kf = floor(nn * mm / 2 - z * sqrt(nn * mm * (nn + mm + 1) / 12));
    size_t k = kf < 1 ? 1 : (size_t)kf; /* 1-based: the k-th smallest and k-th largest */
    out->low = diff[k - 1];
    out->high = diff[total - k];
    rc = 0;
done:
    free(sa);
    free(sb);
    free(diff);
    return rc;
}
