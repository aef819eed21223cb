/*
 * toolkit.c - the rule toolkit (toolkit.h): what every rule of the report calls to read data,
 * add findings and suggestions, and compute the statistics of the window of steps.
 *
 * It calls nothing else in src/report: only the caller's query function (report.h), jansson and
 * libm. A finding is a JSON object appended to the report's findings in the order the rules add
 * them (docs/report.md, "Findings"); the driver decides that order, not this file.
 */
#include "toolkit.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ text, numbers, queries */

void pb__report_sqlf(char *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, SQL_MAX, fmt, ap);
    va_end(ap);
}

char *pb__report_textf(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

double pb__report_num(json_t *row, const char *key, int *ok)
{
    json_t *v = json_object_get(row, key);
    if (ok) *ok = json_is_number(v);
    return json_is_number(v) ? json_number_value(v) : 0.0;
}

/* Rounds to 6 significant digits so the JSON stays readable. */
json_t *pb__report_real(double x)
{
    if (!isfinite(x)) return json_null();
    if (x == 0) return json_real(0.0);
    double scale = pow(10.0, 5 - (int)floor(log10(fabs(x))));
    return json_real(round(x * scale) / scale);
}

json_t *pb__report_run(pb__report *r, const char *sql)
{
    json_t *rows = NULL;
    char *error = NULL;
    if (r->src->query(r->src->ctx, sql, &rows, &error) || !json_is_array(rows)) {
        json_t *e = json_object();
        json_object_set_new(e, "sql", json_string(sql));
        json_object_set_new(e, "error", json_string(error ? error : "no rows array"));
        json_array_append_new(r->errors, e);
        free(error);
        json_decref(rows);
        return NULL;
    }
    free(error);
    return rows;
}

json_t *pb__report_try(pb__report *r, const char *sql, char **error)
{
    json_t *rows = NULL;
    *error = NULL;
    if (r->src->query(r->src->ctx, sql, &rows, error) || !json_is_array(rows)) {
        if (!*error) *error = pb__report_textf("no rows array");
        json_decref(rows);
        return NULL;
    }
    free(*error);
    *error = NULL;
    return rows;
}

json_t *pb__report_finding(pb__report *r, const char *id, const char *phase, const char *severity,
                           char *claim, json_t *numbers, const char *sql, const char *advice)
{
    json_t *f = json_object();
    json_object_set_new(f, "id", json_string(id));
    json_object_set_new(f, "phase", json_string(phase));
    json_object_set_new(f, "severity", json_string(severity));
    json_object_set_new(f, "claim", json_string(claim ? claim : "(out of memory)"));
    json_object_set_new(f, "numbers", numbers ? numbers : json_object());
    json_t *list = json_array();
    if (sql) {
        const char *p = sql;
        while (*p) {
            const char *end = strstr(p, "\n;\n");
            size_t len = end ? (size_t)(end - p) : strlen(p);
            json_array_append_new(list, json_stringn(p, len));
            p += len + (end ? 3 : 0);
        }
    }
    json_object_set_new(f, "sql", list);
    json_object_set_new(f, "recommendation", advice ? json_string(advice) : json_null());
    json_array_append_new(r->findings, f);
    free(claim);
    return f;
}

void pb__report_suggest(pb__report *r, const char *why, const char *command_fmt, ...)
{
    va_list ap;
    char *cmd = NULL;
    va_start(ap, command_fmt);
    if (vasprintf(&cmd, command_fmt, ap) < 0) cmd = NULL;
    va_end(ap);
    if (!cmd) return;
    json_t *s = json_object();
    json_object_set_new(s, "why", json_string(why));
    json_object_set_new(s, "command", json_string(cmd));
    json_array_append_new(r->next, s);
    free(cmd);
}

const char *pb__report_target(pb__report *r)
{
    return r->src->target && *r->src->target ? r->src->target : "<target>";
}

int pb__report_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double pb__report_percentile(const double *v, size_t n, double p)
{
    if (n == 0) return NAN;
    double pos = p / 100.0 * (double)(n - 1);
    size_t i = (size_t)floor(pos);
    if (i + 1 >= n) return v[n - 1];
    return v[i] + (pos - (double)i) * (v[i + 1] - v[i]);
}

void pb__report_theil_sen(const double *x, const double *y, size_t n, double *slope,
                          double *intercept, double *r2)
{
    enum { MAX_POINTS = 256 };
    size_t idx[MAX_POINTS], m = n < MAX_POINTS ? n : MAX_POINTS;
    *slope = *intercept = *r2 = 0;
    if (n < 2) return;
    for (size_t i = 0; i < m; i++) idx[i] = m == n ? i : (size_t)((double)i * (double)(n - 1) / (double)(m - 1));
    double *v = malloc((m * (m - 1) / 2 + n) * sizeof *v);
    if (!v) return;
    size_t k = 0;
    for (size_t i = 0; i < m; i++)
        for (size_t j = i + 1; j < m; j++)
            if (x[idx[j]] != x[idx[i]]) v[k++] = (y[idx[j]] - y[idx[i]]) / (x[idx[j]] - x[idx[i]]);
    qsort(v, k, sizeof *v, pb__report_cmp_double);
    *slope = k ? pb__report_percentile(v, k, 50) : 0;
    for (size_t i = 0; i < n; i++) v[i] = y[i] - *slope * x[i];
    qsort(v, n, sizeof *v, pb__report_cmp_double);
    *intercept = pb__report_percentile(v, n, 50);
    double mean = 0, tot = 0, res = 0;
    for (size_t i = 0; i < n; i++) mean += y[i] / (double)n;
    for (size_t i = 0; i < n; i++) {
        double e = y[i] - (*intercept + *slope * x[i]);
        res += e * e;
        tot += (y[i] - mean) * (y[i] - mean);
    }
    *r2 = tot > 0 ? 1 - res / tot : 0;
    if (*r2 < 0) *r2 = 0;
    free(v);
}

/* ------------------------------------------------------------------ the window of steps */

double pb__report_median_wall(const pb__step_row *s, size_t from, size_t to, int kind)
{
    if (to <= from) return NAN;
    double *v = malloc((to - from) * sizeof *v);
    if (!v) return NAN;
    size_t n = 0;
    for (size_t i = from; i < to; i++)
        if (kind < 0 || s[i].detail == kind) v[n++] = s[i].wall;
    qsort(v, n, sizeof *v, pb__report_cmp_double);
    double m = pb__report_percentile(v, n, 50);
    free(v);
    return m;
}

/* Finds the index of step in r->steps, or -1. */
static long find_step(const pb__report *r, long long step)
{
    size_t lo = 0, hi = r->count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r->steps[mid].step < step)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->count && r->steps[lo].step == step ? (long)lo : -1;
}

const char pb__report_trace_steps_sql[] =
    "SELECT step,\n"
    "       SUM(CASE WHEN stage = 'forward' THEN duration ELSE 0 END) AS forward,\n"
    "       SUM(CASE WHEN stage = 'backward' THEN duration ELSE 0 END) AS backward,\n"
    "       SUM(CASE WHEN stage = 'step' THEN duration ELSE 0 END) AS optimizer,\n"
    "       MAX(CASE WHEN stage = 'step' THEN time_offset + total_duration END) AS optimizer_end,\n"
    "       MAX(time_offset + total_duration) AS span,\n"
    "       COALESCE(MAX(CASE WHEN stage = 'step' THEN allocated END), MAX(allocated))"
    " AS memory_mb\n"
    "FROM python.torch_trace GROUP BY step ORDER BY step";

/* Every column: agents and recordings of different ages have different ones (detail,
 * grad_sync, batches); the rows say which are there. */
static const char STEPS_TABLE_SQL[] = "SELECT * FROM python.steps ORDER BY step";

const char *pb__report_steps_sql(const pb__report *r)
{
    return r->from_steps_table ? STEPS_TABLE_SQL : pb__report_trace_steps_sql;
}

void pb__report_merge_per_step(pb__report *r, const char *sql, enum pb__step_field field)
{
    json_t *rows = pb__report_run(r, sql), *row;
    size_t i;
    if (!rows) return;
    json_array_foreach(rows, i, row) {
        long at = find_step(r, (long long)pb__report_num(row, "step", NULL));
        int ok;
        double v = pb__report_num(row, "value", &ok);
        if (at < 0 || !ok) continue;
        pb__step_row *s = &r->steps[at];
        if (field == PB__STEP_DATA) s->data = v, s->has_data = 1;
        if (field == PB__STEP_COLLECTIVES) s->collectives = v, s->has_collectives = 1;
        if (field == PB__STEP_MEMORY) s->memory_mb = v, s->has_memory = 1;
        if (field == PB__STEP_SAMPLES) s->samples = v;
    }
    json_decref(rows);
}

pb__shares pb__report_mean_shares(const pb__report *r)
{
    pb__shares m;
    size_t n = 0, data_n = 0, coll_n = 0;
    memset(&m, 0, sizeof m);
    if (r->count == r->warmup) return m;
    double limit = OUTLIER_FACTOR * pb__report_median_wall(r->steps, r->warmup, r->count, -1);
    for (size_t i = r->warmup; i < r->count; i++) {
        const pb__step_row *s = &r->steps[i];
        if (!pb__report_timing_step(r, i) || s->wall > limit) continue;
        n++;
        m.wall += s->wall;
        m.forward += s->forward;
        m.backward += s->backward;
        m.optimizer += s->optimizer;
        m.grad_sync += s->grad_sync;
        if (s->has_data) data_n++;
        m.data += s->data;
        if (s->has_collectives) m.collectives += s->collectives, coll_n++;
    }
    if (!n) return m;
    m.wall /= (double)n;
    m.forward /= (double)n;
    m.backward /= (double)n;
    m.optimizer /= (double)n;
    m.grad_sync /= (double)n;
    m.data /= (double)n;
    m.collectives /= (double)n;
    m.has_data = data_n > 0;
    m.has_collectives = coll_n > 0;
    m.other = m.wall - m.forward - m.backward - m.optimizer - m.data - m.collectives - m.grad_sync;
    if (m.other < 0) m.other = 0;
    return m;
}

double *pb__report_sorted_column(json_t *rows, const char *key, size_t *n)
{
    size_t i, k = 0;
    json_t *row;
    double *v = malloc((json_array_size(rows) + 1) * sizeof *v);
    *n = 0;
    if (!v) return NULL;
    json_array_foreach(rows, i, row) {
        int ok;
        double x = pb__report_num(row, key, &ok);
        if (ok && isfinite(x)) v[k++] = x;
    }
    qsort(v, k, sizeof *v, pb__report_cmp_double);
    *n = k;
    return v;
}
