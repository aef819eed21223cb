/*
 * report.c - the rules of `probing <target> report`: the four phases and the checks of the
 * method in docs/report.md, each computed from SQL the report prints beside its numbers.
 *
 * How it works: one query gives a row per step (python.steps when the agent records it, else
 * derived from python.torch_trace: the optimizer's `step` row ends at time_offset +
 * total_duration from the end of the previous optimizer step, so that is the step's wall time;
 * without an optimizer, the span of the step's rows). The steps are cut to the window (--last N),
 * leading warm-up steps are detected and left out of the statistics, and every other query is
 * restricted to the window with literal step numbers, so the SQL printed can be re-run as is.
 * Optional tables (data loader, memory, AMP, collectives, GPU) are probed with a count first; a
 * missing or empty one is listed in "missing" and the rules that need it say so.
 *
 * Thresholds are the method's (GPU utilisation <70% / >90%, collectives 20-30% normal, load
 * imbalance >10%, data loading time > compute time) and otherwise named constants below; every
 * one is listed in docs/report.md. Causes of lost time are not exclusive: each one above its
 * threshold becomes a finding, costliest first.
 */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP_FACTOR 1.5        /* a leading step this much above the later median is warm-up */
#define OUTLIER_FACTOR 3.0       /* a steady step this much above the median is an outlier */
#define SLOW_FACTOR 1.8          /* ... this much above it counts as slow (periods, shares) */
#define PERIOD_MIN 3             /* slow steps on the period's lattice needed */
#define PERIOD_COVER 0.6         /* share of the period's steps in the window that are slow */
#define PERIOD_SUB_COVER 0.4     /* ... for a divisor of the period found */
#define SLOW_WARNING_SHARE 0.25  /* slow steps' share of the wall time worth a warning */
#define SLOW_CRITICAL_SHARE 0.50 /* ... that makes them the headline */
#define UNACCOUNTED_SHARE 0.30   /* time outside modules/optimizer worth a warning */
#define UNACCOUNTED_BOUND 0.40   /* ... that makes it the likely bottleneck */
#define OPTIMIZER_SHARE 0.30     /* optimizer share of the step worth a warning */
#define COMM_SHARE 0.30          /* collectives + grad_sync share of the step worth a warning */
#define HOST_CALLS_PER_STEP 100  /* module executions per step for the host-overhead rule */
#define HOST_MEDIAN_SELF_S 30e-6 /* ... with a median self time below this */
#define LEAK_MIN_STEPS 5
#define LEAK_MIN_GROWTH_MB 16.0 /* growth over the fitted steps below this is allocator noise */
#define LEAK_MIN_R2 0.9         /* a steady climb: the robust line explains it */
#define LEAK_SETTLE 0.1         /* share of the steady steps left out of the fit (caches fill) */
#define LEAK_CRITICAL_H 6.0     /* out of memory sooner than this: critical */
#define LEAK_WARNING_H 72.0     /* ... sooner than this: warning; later: info */
#define SYNCS_PER_STEP 3.0
#define GIL_SHARE 0.20           /* another thread's share of the GIL samples worth a warning */

const char pb_report_conditions_code[] =
    "import json as _j, sys as _s\n"
    "def _pb_conditions():\n"
    "    import torch\n"
    "    r = {'python': _s.version.split()[0], 'torch': torch.__version__,\n"
    "         'cudnn_benchmark': bool(torch.backends.cudnn.benchmark),\n"
    "         'cuda_available': bool(torch.cuda.is_available())}\n"
    "    for v in list(vars(_s.modules['__main__']).values()):\n"
    "        if isinstance(v, torch.nn.Module) and 'device' not in r:\n"
    "            ps = list(v.parameters())\n"
    "            if ps:\n"
    "                r['device'] = str(ps[0].device)\n"
    "                r['param_dtype'] = str(ps[0].dtype).replace('torch.', '')\n"
    "                r['parameters'] = sum(p.numel() for p in ps)\n"
    "        elif isinstance(v, torch.utils.data.DataLoader) and 'num_workers' not in r:\n"
    "            r['num_workers'] = v.num_workers\n"
    "            r['pin_memory'] = bool(v.pin_memory)\n"
    "            r['batch_size'] = v.batch_size\n"
    "    print(_j.dumps(r))\n"
    "_pb_conditions()\n"
    "del _pb_conditions\n";

/* ------------------------------------------------------------------ small helpers */

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

/* Sets key to a string built with fmt (nothing when out of memory). */
static void set_text(json_t *obj, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_text(json_t *obj, const char *key, const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    if (s) json_object_set_new(obj, key, json_string(s));
    free(s);
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

/* Returns the row count of table, or -1 when it cannot be queried (then listed as missing with
 * `purpose`: what the report would use it for). An empty table is listed too. */
static long long probe_table(pb__report *r, const char *table, const char *purpose)
{
    char sql[SQL_MAX];
    json_t *rows = NULL;
    char *error = NULL;
    long long n = -1;
    pb__report_sqlf(sql, "SELECT count(*) AS n FROM %s", table);
    if (r->src->query(r->src->ctx, sql, &rows, &error) == 0 && json_array_size(rows) == 1)
        n = (long long)pb__report_num(json_array_get(rows, 0), "n", NULL);
    json_decref(rows);
    if (n <= 0) {
        json_t *m = json_object();
        json_object_set_new(m, "table", json_string(table));
        json_object_set_new(m, "state", json_string(n < 0 ? "absent" : "empty"));
        json_object_set_new(m, "needed_for", json_string(purpose));
        if (n < 0 && error) json_object_set_new(m, "error", json_string(error));
        json_array_append_new(r->missing, m);
    }
    free(error);
    return n;
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

/* Median of the walls of steps[from, to); kind: -1 every step, 0 summary steps, 1 detail
 * steps. NaN when there is none. */
static double median_wall_of(const pb__step_row *s, size_t from, size_t to, int kind)
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

static double median_wall(const pb__step_row *s, size_t from, size_t to)
{
    return median_wall_of(s, from, to, -1);
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

/* The steps whose python.torch_trace rows the module rules read (r->mod_lo..mod_hi). */
static const char *module_filter(pb__report *r, char *buf)
{
    snprintf(buf, 128, "step BETWEEN %lld AND %lld", r->mod_lo, r->mod_hi);
    return buf;
}

/* ------------------------------------------------------------------ the steps */

static const char TRACE_STEPS_SQL[] =
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

/* The SQL the per-step figures come from. */
static const char *steps_sql(const pb__report *r)
{
    return r->from_steps_table ? STEPS_TABLE_SQL : TRACE_STEPS_SQL;
}

/* Loads every complete step, keeps the last `last` (0: all). Returns 0, or -1 when
 * python.torch_trace cannot be read (*error set). */
static int load_steps(pb__report *r, int last, char **error)
{
    json_t *rows = NULL;
    char *err = NULL;
    const char *sql = steps_sql(r);
    if (r->src->query(r->src->ctx, sql, &rows, &err) || !json_is_array(rows)) {
        *error = pb__report_textf("cannot read %s: %s",
                                  r->from_steps_table ? "python.steps" : "python.torch_trace",
                                  err ? err : "no rows");
        free(err);
        json_decref(rows);
        return -1;
    }
    free(err);
    size_t n = json_array_size(rows), k = 0, i;
    json_t *row;
    r->steps = calloc(n ? n : 1, sizeof *r->steps);
    if (!r->steps) {
        json_decref(rows);
        *error = pb__report_textf("out of memory");
        return -1;
    }
    if (!r->from_steps_table)
        json_array_foreach(rows, i, row) {
            int ok;
            pb__report_num(row, "optimizer_end", &ok);
            if (ok) r->have_optimizer = 1;
        }
    else {
        json_t *first = json_array_get(rows, 0);
        r->have_optimizer = 1;
        r->have_detail = json_object_get(first, "detail") != NULL;
        r->have_grad_sync = json_object_get(first, "grad_sync") != NULL;
    }
    json_array_foreach(rows, i, row) {
        pb__step_row s;
        int ok;
        memset(&s, 0, sizeof s);
        s.step = (long long)pb__report_num(row, "step", NULL);
        s.forward = pb__report_num(row, "forward", NULL);
        s.backward = pb__report_num(row, "backward", NULL);
        s.optimizer = pb__report_num(row, "optimizer", NULL);
        if (r->from_steps_table) {
            s.wall = pb__report_num(row, "wall", &ok);
            int waited, fed;
            s.data = pb__report_num(row, "data_wait", &waited);
            double batches = pb__report_num(row, "batches", &fed);
            /* python.steps.batches says whether a DataLoader fed the step; without the column
             * (older agents) a wait or the loader's own table says it was there */
            s.has_data = fed ? batches > 0 : waited && (s.data > 0 || r->n_loader > 0);
            s.grad_sync = pb__report_num(row, "grad_sync", NULL);
            s.collectives = pb__report_num(row, "collectives", &s.has_collectives);
            s.samples = pb__report_num(row, "samples", NULL);
            s.syncs = pb__report_num(row, "syncs", NULL);
            s.detail = r->have_detail && pb__report_num(row, "detail", NULL) != 0;
        } else if (r->have_optimizer) {
            s.wall = pb__report_num(row, "optimizer_end", &ok); /* no step row: not complete */
            s.memory_mb = pb__report_num(row, "memory_mb", &s.has_memory);
        } else {
            s.wall = pb__report_num(row, "span", &ok);
            s.memory_mb = pb__report_num(row, "memory_mb", &s.has_memory);
        }
        if (!ok || !(s.wall > 0)) continue;
        r->steps[k++] = s;
    }
    json_decref(rows);
    /* The last run of detail steps, for the module rules when the window holds none. */
    r->last_detail_lo = r->last_detail_hi = -1;
    for (size_t j = k; j-- > 0;) {
        if (!r->steps[j].detail) continue;
        r->last_detail_hi = r->steps[j].step;
        while (j > 0 && r->steps[j - 1].detail && r->steps[j - 1].step == r->steps[j].step - 1) j--;
        r->last_detail_lo = r->steps[j].step;
        break;
    }
    if (last > 0 && k > (size_t)last) {
        memmove(r->steps, r->steps + (k - (size_t)last), (size_t)last * sizeof *r->steps);
        k = (size_t)last;
    }
    r->count = k;
    if (k) {
        r->lo = r->steps[0].step;
        r->hi = r->steps[k - 1].step;
    }
    return 0;
}

/* Merges per-step values of an optional table into the steps: field selects which. */
static void merge_per_step(pb__report *r, const char *sql, int field)
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
        if (field == 0) s->data = v, s->has_data = 1;
        if (field == 1) s->collectives = v, s->has_collectives = 1;
        if (field == 2) s->memory_mb = v, s->has_memory = 1;
        if (field == 3) s->samples = v;
    }
    json_decref(rows);
}

/* ------------------------------------------------------------------ phase 1: baseline */

/* Leading steps much slower than the later ones. A detail step is compared with the later
 * detail steps (probing's recording makes them slower than summary steps, which is not
 * warm-up), or with all later steps when fewer than three are detail steps. */
static void detect_warmup(pb__report *r)
{
    size_t k = 0;
    while (r->count >= 3 && k < r->count / 2) {
        size_t same = 0;
        for (size_t i = k + 1; i < r->count; i++) same += r->steps[i].detail == r->steps[k].detail;
        double ref = same >= 3 ? median_wall_of(r->steps, k + 1, r->count, r->steps[k].detail)
                               : median_wall(r->steps, k + 1, r->count);
        if (!(r->steps[k].wall > WARMUP_FACTOR * ref)) break;
        k++;
    }
    r->warmup = k;
}

/* After the warm-up is known: whether to time the job on summary steps only, and which steps
 * the module rules read. */
static void detail_window(pb__report *r)
{
    size_t summary = 0, detail = 0;
    for (size_t i = r->warmup; i < r->count; i++) {
        if (r->steps[i].detail) detail++;
        else summary++;
    }
    r->detail_steady = detail;
    r->skip_detail = r->have_detail && detail > 0 && summary >= 3;
    r->mod_lo = pb__report_steady_first(r);
    r->mod_hi = r->hi;
    if (r->have_detail && detail == 0 && r->last_detail_lo >= 0) {
        /* the window holds no detail step: the modules of the last detail window */
        r->mod_lo = r->last_detail_lo;
        r->mod_hi = r->last_detail_hi;
    }
}

/* Where the model runs: the device eval found, else python.memory's ('cuda:N' sorts after
 * 'cpu'), else unknown. */
static void detect_device(pb__report *r)
{
    const char *d = json_string_value(json_object_get(r->src->conditions, "device"));
    json_t *rows = NULL;
    if (!d && r->n_memory > 0) {
        rows = pb__report_run(r, "SELECT MAX(device) AS device FROM python.memory");
        d = json_string_value(json_object_get(json_array_get(rows, 0), "device"));
    }
    r->device = !d ? 0 : strncmp(d, "cuda", 4) == 0 ? 2 : strcmp(d, "cpu") == 0 ? 1 : 0;
    json_decref(rows);
}

/* Samples per step: python.steps.samples (what the loop consumed each step, gradient
 * accumulation and several loaders included), else the DataLoader's batches in the window, else
 * the batch size eval found. Throughput is samples over the time of the same steps. */
static double batch_size_fallback(pb__report *r, const char **source);

static double batch_size(pb__report *r, const char **source, double *per_s)
{
    double samples = 0, wall = 0;
    *per_s = 0;
    for (size_t i = r->warmup; i < r->count; i++) {
        if (!pb__report_timing_step(r, i)) continue;
        samples += r->steps[i].samples;
        wall += r->steps[i].wall;
    }
    if (samples > 0 && wall > 0) {
        size_t n = 0;
        for (size_t i = r->warmup; i < r->count; i++) n += pb__report_timing_step(r, i);
        *source = r->from_steps_table ? "python.steps samples" : "python.dataloader_trace";
        *per_s = samples / wall;
        return samples / (double)n;
    }
    return batch_size_fallback(r, source);
}

static double batch_size_fallback(pb__report *r, const char **source)
{
    char sql[SQL_MAX];
    *source = NULL;
    if (r->n_loader > 0) {
        pb__report_sqlf(
            sql,
            "SELECT MAX(batch_size) AS b FROM python.dataloader_trace WHERE step BETWEEN "
            "%lld AND %lld",
            r->lo, r->hi);
        json_t *rows = pb__report_run(r, sql);
        double b = rows ? pb__report_num(json_array_get(rows, 0), "b", NULL) : 0;
        json_decref(rows);
        if (b > 0) {
            *source = "python.dataloader_trace (largest batch)";
            return b;
        }
    }
    json_t *b = json_object_get(r->src->conditions, "batch_size");
    if (json_is_number(b) && json_number_value(b) > 0) {
        *source = "the DataLoader's batch_size (eval)";
        return json_number_value(b);
    }
    return 0;
}

/* Slow steady steps: every step over SLOW_FACTOR x the median of its kind (a detail step is
 * compared with detail steps only when the window has no summary step), whether their step
 * numbers repeat with a period, their share of the wall time, and which part of the step grew
 * in them. Over OUTLIER_FACTOR x the median they are also left out of the bottleneck's means.
 * When they hold a large share of the wall time they are the headline, not a footnote. */
static void slow_steps(pb__report *r)
{
    size_t summary = 0;
    for (size_t i = r->warmup; i < r->count; i++) summary += pb__report_timing_step(r, i) && !r->steps[i].detail;
    int kind = r->have_detail && summary ? 0 : -1; /* which steps to compare */
    size_t cap = r->count + 1, n = 0, nslow = 0;
    double *v = malloc(cap * sizeof *v);
    size_t *slow = malloc(cap * sizeof *slow);
    if (!v || !slow) goto done;
    for (size_t i = r->warmup; i < r->count; i++)
        if (pb__report_timing_step(r, i) && (kind < 0 || r->steps[i].detail == kind))
            v[n++] = r->steps[i].wall;
    if (n < 5) goto done;
    qsort(v, n, sizeof *v, pb__report_cmp_double);
    double median = pb__report_percentile(v, n, 50), total = 0, slow_wall = 0;
    size_t worst = r->count, over = 0;
    for (size_t i = r->warmup; i < r->count; i++) {
        const pb__step_row *s = &r->steps[i];
        if (!pb__report_timing_step(r, i) || (kind >= 0 && s->detail != kind)) continue;
        total += s->wall;
        if (s->wall <= SLOW_FACTOR * median) continue;
        slow[nslow++] = i;
        slow_wall += s->wall;
        over += s->wall > OUTLIER_FACTOR * median;
        if (worst == r->count || s->wall > r->steps[worst].wall) worst = i;
    }
    if (!nslow || (over == 0 && nslow < 3)) goto done;
    /* A period: for each gap g between consecutive slow steps, the slow steps on the lattice
     * phase + k g (the most common step % g) and the share of that lattice, over the window,
     * that is slow. The period connects the most slow steps (the smallest such g); a stray slow
     * step on a busy machine, or a cycle that missed the cut, does not break it. */
    long long period = 0, phase = 0, lo_step = r->steps[r->warmup].step,
              hi_step = r->steps[r->count - 1].step;
    size_t agree = 0;
    for (size_t a = 1; a < nslow; a++) {
        long long g = r->steps[slow[a]].step - r->steps[slow[a - 1]].step;
        if (g <= 1 || g == period) continue;
        size_t best = 0;
        long long best_ph = 0;
        for (size_t b = 0; b < nslow; b++) {
            long long ph = r->steps[slow[b]].step % g;
            size_t on = 0;
            for (size_t c = 0; c < nslow; c++) on += r->steps[slow[c]].step % g == ph;
            if (on > best) best = on, best_ph = ph;
        }
        long long first = lo_step + ((best_ph - lo_step % g) % g + g) % g;
        double points = first > hi_step ? 0 : (double)((hi_step - first) / g + 1);
        double cover = points > 0 ? (double)best / points : 0;
        if (best >= PERIOD_MIN && cover >= PERIOD_COVER &&
            (best > agree || (best == agree && g < period)))
            agree = best, period = g, phase = best_ph;
    }
    /* A multiple of the true period wins when some cycles missed the cut (a checkpoint at 1.7x
     * on a busy machine): take the smallest divisor whose steps off the multiple's lattice are
     * still slow in PERIOD_SUB_COVER of the cases (noise between true cycles is not). */
    for (long long d = period; d >= 2; d--) {
        if (period % d) continue;
        long long g = period / d, ph = phase % g, first = lo_step + ((ph - lo_step % g) % g + g) % g;
        size_t on = 0;
        for (size_t c = 0; c < nslow; c++) {
            long long st = r->steps[slow[c]].step;
            on += st % g == ph && st % period != phase;
        }
        double points = first > hi_step ? 0 : (double)((hi_step - first) / g + 1);
        long long ffirst = lo_step + ((phase - lo_step % period) % period + period) % period;
        double found = ffirst > hi_step ? 0 : (double)((hi_step - ffirst) / period + 1);
        double extra = points - found;
        if (g > 1 && extra >= 1 && (double)on / extra >= PERIOD_SUB_COVER) {
            period = g;
            phase = ph;
            break;
        }
    }
    int periodic = period > 0;
    if (!periodic && over == 0) goto done;
    /* The steps the finding is about: the period's slow steps, or the outliers (over
     * OUTLIER_FACTOR x the median) when there is no period; stray slow steps are neither. */
    size_t k2 = 0;
    slow_wall = 0;
    worst = r->count;
    for (size_t a = 0; a < nslow; a++) {
        const pb__step_row *s = &r->steps[slow[a]];
        if (periodic ? s->step % period != phase : !(s->wall > OUTLIER_FACTOR * median)) continue;
        slow[k2++] = slow[a];
        slow_wall += s->wall;
        if (worst == r->count || s->wall > r->steps[worst].wall) worst = slow[a];
    }
    nslow = k2;
    /* Which part of the step grew: the median of each part over those steps minus its median
     * over the other steps (medians: a descheduled step on a busy machine must not decide). */
    double delta[6];
    double *sv = malloc(cap * sizeof *sv), *rv = malloc(cap * sizeof *rv);
    if (!sv || !rv) {
        free(sv);
        free(rv);
        goto done;
    }
    for (int k = 0; k < 6; k++) {
        size_t ns = 0, nr = 0, at = 0;
        for (size_t i = r->warmup; i < r->count; i++) {
            const pb__step_row *s = &r->steps[i];
            if (!pb__report_timing_step(r, i) || (kind >= 0 && s->detail != kind)) continue;
            double p[6] = {s->forward, s->backward, s->optimizer, s->data,
                           s->collectives + s->grad_sync, 0};
            p[5] = s->wall - p[0] - p[1] - p[2] - p[3] - p[4];
            while (at < nslow && slow[at] < i) at++;
            if (at < nslow && slow[at] == i)
                sv[ns++] = p[k];
            else
                rv[nr++] = p[k];
        }
        qsort(sv, ns, sizeof *sv, pb__report_cmp_double);
        qsort(rv, nr, sizeof *rv, pb__report_cmp_double);
        delta[k] = pb__report_percentile(sv, ns, 50) - (nr ? pb__report_percentile(rv, nr, 50) : 0);
    }
    free(sv);
    free(rv);
    static const char *const part_text[6] = {
        "the forward, without a backward to match: an evaluation pass (forwards under no_grad)",
        "backward",
        "the optimizer step",
        "data loading",
        "communication",
        "host time outside the model (a checkpoint with torch.save, evaluation or logging "
        "outside modules)"};
    static const char *const part_key[6] = {"forward", "backward", "optimizer", "data",
                                            "communication", "other"};
    int grew = 0;
    for (int k = 0; k < 6; k++)
        if (delta[k] > delta[grew]) grew = k;
    if (grew == 0 && delta[1] > 0.5 * delta[0]) grew = 1; /* forward and backward: more work */
    double share = total > 0 ? slow_wall / total : 0;
    /* one or two slow steps without a period are a one-off (a GC pause, the machine), not a
     * pattern of the program; without a period they can be the machine's (other processes on
     * the cores), so never more than a warning */
    const char *severity = !periodic && nslow < PERIOD_MIN ? "info"
                           : share >= SLOW_CRITICAL_SHARE && periodic ? "critical"
                           : share >= SLOW_WARNING_SHARE              ? "warning"
                                                                      : "info";
    json_t *nums = json_object();
    json_object_set_new(nums, "slow_steps", json_integer((json_int_t)nslow));
    json_object_set_new(nums, "over_outlier_factor", json_integer((json_int_t)over));
    json_object_set_new(nums, "worst_step", json_integer(r->steps[worst].step));
    json_object_set_new(nums, "worst_s", pb__report_real(r->steps[worst].wall));
    json_object_set_new(nums, "median_s", pb__report_real(median));
    json_object_set_new(nums, "period_steps", periodic ? json_integer(period) : json_null());
    json_object_set_new(nums, "share_of_wall", pb__report_real(share));
    json_object_set_new(nums, "grew", json_string(part_key[grew]));
    json_object_set_new(nums, "grew_s", pb__report_real(delta[grew]));
    char sql[SQL_MAX];
    if (r->from_steps_table)
        pb__report_sqlf(sql,
                        "SELECT * FROM python.steps WHERE step BETWEEN %lld AND %lld AND wall > "
                        "%.6g ORDER BY step",
                        r->lo, r->hi, SLOW_FACTOR * median);
    else
        pb__report_sqlf(sql,
                        "SELECT module, stage, duration, total_duration FROM python.torch_trace "
                        "WHERE step = %lld ORDER BY duration DESC LIMIT 10",
                        r->steps[worst].step);
    double least = r->steps[slow[0]].wall;
    for (size_t a = 1; a < nslow; a++)
        if (r->steps[slow[a]].wall < least) least = r->steps[slow[a]].wall;
    char *claim;
    if (periodic)
        claim = pb__report_textf(
            "every %lld steps a slow step: %zu steps at %.1f-%.1fx the median hold %.0f%% of "
            "the wall time; in them %s takes %.3g ms more",
            period, nslow, least / median, r->steps[worst].wall / median,
            100 * share, part_text[grew], 1e3 * delta[grew]);
    else
        claim = pb__report_textf(
            "%zu steady step%s took over %.1fx the median (%.0f%% of the wall time); the worst, "
            "step %lld, took %.1fx; in them %s takes %.3g ms more",
            nslow, nslow == 1 ? "" : "s", OUTLIER_FACTOR, 100 * share, r->steps[worst].step,
            r->steps[worst].wall / median, part_text[grew], 1e3 * delta[grew]);
    pb__report_finding(
        r, "outlier_steps", "baseline", severity, claim, nums, sql,
        grew == 0 ? "Evaluate less often or on fewer batches, or run evaluation in its own "
                    "process; the median and p95 above describe the training steps only "
                    "(docs/report.md, \"Slow steps\")."
        : grew == 5 ? "Checkpoint less often, or save asynchronously (copy the state_dict, "
                      "write it from a thread, torch.distributed.checkpoint's async_save); "
                      "the median and p95 above describe the other steps (docs/report.md, "
                      "\"Slow steps\")."
                    : "Look at what those steps do differently (evaluation, checkpointing, "
                      "garbage collection, a slow batch); the median and p95 above are the "
                      "figures to compare runs by (docs/report.md, \"Slow steps\").");
done:
    free(v);
    free(slow);
}
static void phase_baseline(pb__report *r)
{
    json_t *b = json_object();
    size_t n = 0, timed = 0;
    for (size_t i = r->warmup; i < r->count; i++) timed += pb__report_timing_step(r, i);
    json_object_set_new(b, "step_source",
                        json_string(r->from_steps_table ? "python.steps"
                                    : r->have_optimizer
                                        ? "python.torch_trace (optimizer step rows)"
                                        : "python.torch_trace (span of each step's rows; no "
                                          "optimizer seen)"));
    json_object_set_new(b, "steps_in_window", json_integer((json_int_t)r->count));
    json_object_set_new(b, "first_step", json_integer(r->lo));
    json_object_set_new(b, "last_step", json_integer(r->hi));
    json_object_set_new(b, "warmup_steps", json_integer((json_int_t)r->warmup));
    json_object_set_new(b, "steady_steps", json_integer((json_int_t)(r->count - r->warmup)));
    json_object_set_new(b, "detail_steps", r->have_detail ? json_integer((json_int_t)r->detail_steady) : json_null());
    json_object_set_new(b, "detail_steps_left_out", json_boolean(r->skip_detail));
    if (r->skip_detail) {
        /* what probing's per-module recording cost on the steps it made in detail */
        double d = median_wall_of(r->steps, r->warmup, r->count, 1),
               m = median_wall_of(r->steps, r->warmup, r->count, 0);
        json_object_set_new(b, "detail_median_s", pb__report_real(d));
        json_object_set_new(b, "summary_median_s", pb__report_real(m));
    }
    json_object_set_new(b, "sql",
                        json_string(steps_sql(r)));
    double *v = malloc((timed ? timed : 1) * sizeof *v), sum = 0, sq = 0;
    if (v && timed) {
        for (size_t i = r->warmup; i < r->count; i++) {
            if (!pb__report_timing_step(r, i)) continue;
            v[n] = r->steps[i].wall;
            sum += v[n++];
        }
        qsort(v, n, sizeof *v, pb__report_cmp_double);
        double mean = sum / (double)n;
        for (size_t i = 0; i < n; i++) sq += (v[i] - mean) * (v[i] - mean);
        r->mean_wall = mean;
        json_t *st = json_object();
        json_object_set_new(st, "mean_s", pb__report_real(mean));
        json_object_set_new(st, "std_s", pb__report_real(n > 1 ? sqrt(sq / (double)(n - 1)) : 0));
        json_object_set_new(st, "median_s", pb__report_real(pb__report_percentile(v, n, 50)));
        json_object_set_new(st, "p95_s", pb__report_real(pb__report_percentile(v, n, 95)));
        json_object_set_new(st, "p99_s", pb__report_real(pb__report_percentile(v, n, 99)));
        json_object_set_new(st, "min_s", pb__report_real(v[0]));
        json_object_set_new(st, "max_s", pb__report_real(v[n - 1]));
        json_object_set_new(b, "step_time", st);
        const char *source;
        double per_s;
        double batch = batch_size(r, &source, &per_s);
        if (batch > 0) {
            json_object_set_new(b, "batch_size", pb__report_real(batch));
            json_object_set_new(b, "batch_size_source", json_string(source));
            json_object_set_new(b, "samples_per_s", pb__report_real(per_s > 0 ? per_s : batch / mean));
        } else {
            json_object_set_new(b, "samples_per_s", json_null());
            json_object_set_new(b, "throughput_note",
                                json_string("batch size unknown: no python.dataloader_trace, "
                                            "python.steps samples or DataLoader found by eval"));
        }
        /* First-iteration overhead (docs/report.md, "Baseline"). */
        if (r->warmup > 0) {
            double median = pb__report_percentile(v, n, 50);
            json_t *nums = json_object();
            json_object_set_new(nums, "first_step", json_integer(r->steps[0].step));
            json_object_set_new(nums, "first_step_s", pb__report_real(r->steps[0].wall));
            json_object_set_new(nums, "steady_median_s", pb__report_real(median));
            json_object_set_new(nums, "ratio", pb__report_real(r->steps[0].wall / median));
            json_object_set_new(nums, "warmup_steps", json_integer((json_int_t)r->warmup));
            pb__report_finding(
                r, "first_iteration", "baseline", "info",
                pb__report_textf(
                    "first step took %.1fx the steady median; %zu warm-up step%s left out "
                    "of the statistics",
                    r->steps[0].wall / median, r->warmup, r->warmup == 1 ? "" : "s"),
                nums, steps_sql(r),
                "Expected: the first iterations include one-time costs (lazy init, "
                "allocator warm-up, JIT/cudnn autotuning). Always warm up before timing "
                "(docs/report.md, \"Baseline\": at least 3 iterations, 5-10 recommended).");
        }
    } else if (n == 0) {
        json_object_set_new(b, "step_time", json_null());
    }
    free(v);
    json_t *c = r->src->conditions;
    if (c)
        json_object_set(b, "conditions", c);
    else {
        json_object_set_new(b, "conditions", json_null());
        set_text(b, "conditions_note", "measurement conditions unknown: %s",
                 r->src->conditions_error ? r->src->conditions_error : "eval was not tried");
    }
    json_object_set_new(r->doc, "baseline", b);
}

/* ------------------------------------------------------------------ phase 2 and 3 */

typedef struct shares {
    double wall, forward, backward, optimizer, data, collectives, grad_sync, other;
    int has_data, has_collectives;
} shares;

/* Mean per-step times over the steady steps, outlier steps (over OUTLIER_FACTOR x the median,
 * reported on their own) left out so that one slow step cannot decide the bottleneck. The data
 * wait is averaged over every step but known (has_data) only when a DataLoader fed some step. */
static shares mean_shares(pb__report *r)
{
    shares m;
    size_t n = 0, data_n = 0, coll_n = 0;
    memset(&m, 0, sizeof m);
    if (r->count == r->warmup) return m;
    double limit = OUTLIER_FACTOR * median_wall(r->steps, r->warmup, r->count);
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

static json_t *top_modules(pb__report *r, const char *order_by, char *sql_out)
{
    char filter[128];
    pb__report_sqlf(sql_out,
                    "SELECT module, stage, COUNT(*) AS calls, SUM(duration) AS self_s,\n"
                    "       SUM(total_duration) AS total_s,\n"
                    "       SUM(duration) / (SELECT SUM(duration) FROM python.torch_trace WHERE %s)"
                    " AS self_share\n"
                    "FROM python.torch_trace WHERE %s\n"
                    "GROUP BY module, stage ORDER BY %s DESC LIMIT 5",
                    module_filter(r, filter), module_filter(r, filter), order_by);
    return pb__report_run(r, sql_out);
}

/* Host overhead: many module executions per step, each with little work. */
static int host_overhead(pb__report *r, double *calls_per_step, double *median_self, char *sql)
{
    char filter[128];
    pb__report_sqlf(
        sql,
        "SELECT COUNT(*) * 1.0 / COUNT(DISTINCT step) AS calls_per_step,\n"
        "       (SELECT duration FROM python.torch_trace WHERE stage = 'forward' AND %s\n"
        "        ORDER BY duration LIMIT 1 OFFSET (SELECT COUNT(*) / 2 FROM python.torch_trace"
        " WHERE stage = 'forward' AND %s)) AS median_forward_self_s\n"
        "FROM python.torch_trace WHERE stage = 'forward' AND %s",
        module_filter(r, filter), module_filter(r, filter), module_filter(r, filter));
    json_t *rows = pb__report_run(r, sql);
    int ok1 = 0, ok2 = 0;
    if (rows && json_array_size(rows) == 1) {
        *calls_per_step = pb__report_num(json_array_get(rows, 0), "calls_per_step", &ok1);
        *median_self = pb__report_num(json_array_get(rows, 0), "median_forward_self_s", &ok2);
    }
    json_decref(rows);
    return ok1 && ok2 && *calls_per_step >= HOST_CALLS_PER_STEP &&
           *median_self < HOST_MEDIAN_SELF_S;
}

/* Median host-device synchronisations per steady step (python.steps.syncs); 0 without it. */
static double median_syncs(pb__report *r)
{
    if (!r->from_steps_table || r->count <= r->warmup) return 0;
    double *v = malloc((r->count - r->warmup) * sizeof *v);
    size_t n = 0;
    if (!v) return 0;
    for (size_t i = r->warmup; i < r->count; i++) v[n++] = r->steps[i].syncs;
    qsort(v, n, sizeof *v, pb__report_cmp_double);
    double m = pb__report_percentile(v, n, 50);
    free(v);
    return m;
}

/* What the job's collectives moved per step (python.nccl_trace): "62 MB per step, gloo", or an
 * empty string when the table has nothing for the window. */
static void comm_payload(pb__report *r, char *out, size_t size)
{
    char sql[SQL_MAX];
    out[0] = '\0';
    if (r->n_nccl <= 0) return;
    pb__report_sqlf(sql,
                    "SELECT COUNT(DISTINCT step) AS steps, SUM(bytes) AS bytes, "
                    "MAX(backend) AS backend FROM python.nccl_trace WHERE step BETWEEN %lld AND "
                    "%lld",
                    pb__report_steady_first(r), r->hi);
    json_t *rows = pb__report_run(r, sql), *row = json_array_get(rows, 0);
    double steps = pb__report_num(row, "steps", NULL), bytes = pb__report_num(row, "bytes", NULL);
    const char *backend = json_string_value(json_object_get(row, "backend"));
    if (steps > 0 && bytes > 0)
        snprintf(out, size, "%.3g MB per step%s%s", bytes / steps / 1e6, backend ? ", " : "",
                 backend ? backend : "");
    json_decref(rows);
}

/* One cause of lost time above its threshold; every one found is reported, costliest first. */
typedef struct cause {
    const char *type;  /* the bottleneck type it stands for */
    const char *label; /* for bottleneck.label when it costs the most */
    double cost_s;     /* seconds per mean step it accounts for */
} cause;

static int cmp_cause(const void *a, const void *b)
{
    double x = ((const cause *)a)->cost_s, y = ((const cause *)b)->cost_s;
    return (x < y) - (x > y);
}

static void phases_bottleneck_component(pb__report *r)
{
    shares m = mean_shares(r);
    json_t *comp = json_object(), *bn = json_object();
    char sql[SQL_MAX], filter[128];
    const char *step_sql = steps_sql(r);
    double wall = m.wall > 0 ? m.wall : 1;
    double comm = m.collectives + m.grad_sync;
    json_t *sh = json_object();
    json_object_set_new(sh, "forward", pb__report_real(m.forward / wall));
    json_object_set_new(sh, "backward", pb__report_real(m.backward / wall));
    json_object_set_new(sh, "optimizer", pb__report_real(m.optimizer / wall));
    json_object_set_new(sh, "data", m.has_data ? pb__report_real(m.data / wall) : json_null());
    json_object_set_new(sh, "collectives",
                        m.has_collectives ? pb__report_real(m.collectives / wall) : json_null());
    json_object_set_new(sh, "grad_sync",
                        r->have_grad_sync ? pb__report_real(m.grad_sync / wall) : json_null());
    json_object_set_new(sh, m.has_data ? "other" : "unaccounted", pb__report_real(m.other / wall));
    json_object_set_new(comp, "shares", sh);
    json_object_set_new(comp, "mean_step_s", pb__report_real(m.wall));
    json_object_set_new(comp, "sql", json_string(step_sql));
    json_object_set_new(comp, "dataloader_seen", json_boolean(m.has_data));
    if (!m.has_data)
        json_object_set_new(comp, "unaccounted_means",
                            json_string("host time outside modules, the optimizer and gradient "
                                        "sync; no DataLoader fed these steps, so it includes "
                                        "the program's own input pipeline and Python between "
                                        "steps"));
    char sql_self[SQL_MAX], sql_total[SQL_MAX];
    json_t *top_self = top_modules(r, "self_s", sql_self);
    json_t *top_total = top_modules(r, "total_s", sql_total);
    json_object_set_new(comp, "top_by_self", top_self ? top_self : json_array());
    json_object_set_new(comp, "top_by_self_sql", json_string(sql_self));
    json_object_set_new(comp, "top_by_total", top_total ? top_total : json_array());
    json_object_set_new(comp, "top_by_total_sql", json_string(sql_total));
    json_object_set_new(comp, "module_first_step", json_integer(r->mod_lo));
    json_object_set_new(comp, "module_last_step", json_integer(r->mod_hi));
    json_object_set_new(comp, "module_steps_note",
                        r->have_detail && r->detail_steady == 0 && r->last_detail_lo >= 0
                            ? json_string("the window holds no detail step: modules of the last detail window")
                        : r->have_detail ? json_string("module rows exist for detail steps only (python.steps.detail)")
                                         : json_null());
    json_object_set_new(r->doc, "component", comp);

    double compute = m.forward + m.backward + m.optimizer;
    double calls = 0, median_self = 0;
    char host_sql[SQL_MAX];
    int host = r->count > r->warmup && host_overhead(r, &calls, &median_self, host_sql);
    json_t *util = NULL;
    if (r->n_gpu > 0) {
        json_t *rows = pb__report_run(r, "SELECT AVG(utilization) AS utilization FROM system.gpu");
        int ok;
        double u = rows ? pb__report_num(json_array_get(rows, 0), "utilization", &ok) : 0;
        if (rows && ok) util = pb__report_real(u);
        json_decref(rows);
    }
    json_object_set_new(bn, "gpu_utilization", util ? util : json_null());

    /* Every cause above its threshold; they are not exclusive. */
    cause causes[8];
    size_t nc = 0;
    if (m.has_data && m.data > compute)
        causes[nc++] = (cause){"data", "data loading (CPU-bound)", m.data};
    if (comm >= COMM_SHARE * m.wall && comm > 0)
        causes[nc++] = (cause){"collectives",
                               m.grad_sync >= m.collectives
                                   ? "communication (waiting for the gradient all-reduce)"
                                   : "communication (collectives)",
                               comm};
    if (m.optimizer >= OPTIMIZER_SHARE * m.wall && m.optimizer >= m.forward + m.backward)
        causes[nc++] = (cause){"optimizer", "optimizer step", m.optimizer};
    if (m.other >= UNACCOUNTED_SHARE * m.wall)
        causes[nc++] = (cause){m.has_data ? "host" : "data_likely",
                               m.has_data ? "host time outside the model (Python in the loop)"
                                          : "host time outside the model: an input pipeline "
                                            "without a DataLoader, or Python between steps",
                               m.other};
    if (host)
        causes[nc++] = (cause){"host_overhead", "host overhead (many tiny module calls)",
                               m.forward + m.backward};
    qsort(causes, nc, sizeof *causes, cmp_cause);

    const char *type, *label;
    char *decided = NULL;
    if (nc) {
        type = causes[0].type;
        label = causes[0].label;
        if (!strcmp(type, "data"))
            decided = pb__report_textf("data-loader wait %.3g ms > compute (forward+backward+"
                                       "optimizer) %.3g ms per step (docs/report.md, \"Bottleneck "
                                       "type\": data loading time > computation time)",
                                       m.data * 1e3, compute * 1e3);
        else
            decided = pb__report_textf("%s: %.0f%% of the step (%.3g ms)", causes[0].label,
                                       100 * causes[0].cost_s / wall, causes[0].cost_s * 1e3);
    } else if (util && json_real_value(util) < 70) {
        type = "cpu";
        label = "CPU-bound (GPU utilisation under 70%)";
        decided = pb__report_textf("GPU utilisation %.0f%% < 70%% (docs/report.md, \"Bottleneck "
                                   "type\")",
                                   json_real_value(util));
    } else {
        type = "compute";
        int gpu = util && json_real_value(util) > 90;
        label = gpu ? "GPU-bound (computation)"
                : r->device == 2 ? "compute (forward/backward)"
                                 : "compute on the CPU (forward/backward)";
        decided =
            pb__report_textf("forward+backward %.0f%% of the step, %s %.0f%%%s",
                             100 * (m.forward + m.backward) / wall,
                             m.has_data ? "other host time" : "unaccounted", 100 * m.other / wall,
                             gpu ? ", GPU utilisation over 90%" : "");
    }
    json_object_set_new(bn, "type", json_string(type));
    json_object_set_new(bn, "label", json_string(label));
    json_object_set_new(bn, "decided_by", json_string(decided ? decided : ""));
    json_object_set_new(bn, "sql", json_string(step_sql));
    json_t *list = json_array();
    for (size_t i = 0; i < nc; i++)
        json_array_append_new(list, json_pack("{s:s,s:s,s:o,s:o}", "type", causes[i].type,
                                              "label", causes[i].label, "seconds",
                                              pb__report_real(causes[i].cost_s), "share",
                                              pb__report_real(causes[i].cost_s / wall)));
    json_object_set_new(bn, "causes", list);
    free(decided);
    json_object_set_new(r->doc, "bottleneck", bn);

    /* Findings for each cause, costliest first. */
    json_t *top = json_array_get(json_object_get(comp, "top_by_self"), 0);
    const char *top_name = json_string_value(json_object_get(top, "module"));
    const char *top_stage = json_string_value(json_object_get(top, "stage"));
    double top_share = pb__report_num(top, "self_share", NULL);
    json_t *cond = r->src->conditions;
    json_t *workers = json_object_get(cond, "num_workers");
    int cpu = r->device != 2;

    for (size_t c = 0; c <= nc; c++) {
        const char *t = c < nc ? causes[c].type : NULL;
        if (c == nc && nc) break; /* the compute finding only when nothing else holds */
        json_t *nums = json_object();
        json_object_set_new(nums, "mean_step_s", pb__report_real(m.wall));
        json_object_set_new(nums, "forward_s", pb__report_real(m.forward));
        json_object_set_new(nums, "backward_s", pb__report_real(m.backward));
        json_object_set_new(nums, "optimizer_s", pb__report_real(m.optimizer));
        if (m.has_data) json_object_set_new(nums, "data_wait_s", pb__report_real(m.data));
        if (r->have_grad_sync) json_object_set_new(nums, "grad_sync_s", pb__report_real(m.grad_sync));
        if (m.has_collectives)
            json_object_set_new(nums, "collectives_s", pb__report_real(m.collectives));
        json_object_set_new(nums, m.has_data ? "other_s" : "unaccounted_s",
                            pb__report_real(m.other));
        if (t && !strcmp(t, "data")) {
            pb__report_finding(
                r, "data_bound", "bottleneck", "critical",
                pb__report_textf(
                    "data loading bound: the loop waits %.3g ms per step for data, compute "
                    "takes %.3g ms",
                    m.data * 1e3, compute * 1e3),
                nums, step_sql,
                cpu ? "Increase num_workers in the DataLoader, cache preprocessed data if the "
                      "dataset is small, use faster storage (docs/report.md, \"Bottleneck "
                      "type\")."
                    : "Increase num_workers in the DataLoader, enable pin_memory=True, move "
                      "data augmentation to the GPU, cache preprocessed data if the dataset is "
                      "small, use faster storage (docs/report.md, \"Bottleneck type\").");
        } else if (t && !strcmp(t, "collectives")) {
            char payload[128];
            comm_payload(r, payload, sizeof payload);
            json_object_set_new(nums, "communication_s", pb__report_real(comm));
            json_object_set_new(nums, "share", pb__report_real(comm / wall));
            char *claim =
                m.grad_sync >= m.collectives
                    ? pb__report_textf("%.0f%% of the step (%.3g ms) waits for DDP's gradient "
                                       "all-reduce%s%s%s",
                                       100 * comm / wall, comm * 1e3, payload[0] ? " (" : "",
                                       payload, payload[0] ? ")" : "")
                    : pb__report_textf("%.0f%% of the step (%.3g ms) is spent in collectives%s%s%s",
                                       100 * comm / wall, comm * 1e3, payload[0] ? " (" : "",
                                       payload, payload[0] ? ")" : "");
            pb__report_finding(
                r, "communication", "bottleneck", comm > 0.5 * m.wall ? "critical" : "warning",
                claim, nums, step_sql,
                "A wait for communication is also a wait for the slowest rank: check load "
                "imbalance below first. If the ranks are balanced, overlap communication with "
                "the backward pass (DDP's bucket_cap_mb, no_sync() with gradient accumulation), "
                "send less (bf16 gradients with a DDP communication hook) or check the "
                "interconnect (docs/report.md, \"Communication\").");
        } else if (t && !strcmp(t, "optimizer")) {
            pb__report_finding(
                r, "optimizer_heavy", "bottleneck", "warning",
                pb__report_textf("the optimizer step takes %.0f%% of each step (%.3g ms), more "
                                 "than forward and backward together (%.3g ms)",
                                 100 * m.optimizer / wall, m.optimizer * 1e3,
                                 (m.forward + m.backward) * 1e3),
                nums, step_sql,
                "Profile the optimizer step before the model: check which parameters it "
                "updates (tensors the model never uses still cost a full update) and the "
                "size of its state; use the foreach/fused implementations; reduce the update "
                "frequency with gradient accumulation (docs/report.md, \"Bottleneck type\").");
            pb__report_suggest(
                r, "count what the optimizer updates",
                "probing %s eval \"print(sum(p.numel() for g in optimizer.param_groups for p "
                "in g['params']), sum(p.numel() for p in model.parameters()))\"",
                pb__report_target(r));
        } else if (t && (!strcmp(t, "host") || !strcmp(t, "data_likely"))) {
            double syncs = median_syncs(r);
            char extra[256] = "";
            if (r->device == 2 && syncs > 0)
                snprintf(extra, sizeof extra, "; %.0f host-device synchronisations per step",
                         syncs);
            if (json_is_integer(workers) && json_integer_value(workers) == 0 && m.has_data)
                strncat(extra, "; num_workers is 0", sizeof extra - strlen(extra) - 1);
            char *claim =
                m.has_data
                    ? pb__report_textf("host time: %.0f%% of each step (%.3g ms) is outside data "
                                       "wait, forward, backward, optimizer and gradient sync: "
                                       "Python in the training loop (logging, metrics, .item(), "
                                       "checkpoints)%s",
                                       100 * m.other / wall, m.other * 1e3, extra)
                    : pb__report_textf("host time: %.0f%% of each step (%.3g ms) is outside "
                                       "forward, backward, optimizer and gradient sync, and no "
                                       "DataLoader fed the loop: an input pipeline of its own "
                                       "(a Python generator, reading files) or Python between "
                                       "steps (logging, metrics, .item())%s",
                                       100 * m.other / wall, m.other * 1e3, extra);
            json_object_set_new(nums, "dataloader_seen", json_boolean(m.has_data));
            if (r->device == 2) json_object_set_new(nums, "median_syncs_per_step", pb__report_real(syncs));
            json_t *f = pb__report_finding(
                r, "unaccounted_time", "bottleneck",
                m.other >= UNACCOUNTED_BOUND * m.wall && c == 0 ? "critical" : "warning", claim,
                nums, step_sql,
                m.has_data
                    ? "See which lines run between the model calls: `probing <target> capture "
                      "--stack` samples the Python stacks of a few steps; move logging and "
                      "metrics off the per-step path (every N steps), avoid .item()/.tolist() "
                      "per step (docs/report.md, \"Host time\")."
                    : "See which lines run between the model calls: `probing <target> capture "
                      "--stack` samples the Python stacks of a few steps. If it is the input "
                      "pipeline, move it into a torch.utils.data.DataLoader with num_workers > "
                      "0 so it runs beside the training loop; if it is logging or metrics, do "
                      "them every N steps (docs/report.md, \"Host time\").");
            if (json_is_integer(workers))
                json_object_set(json_object_get(f, "numbers"), "num_workers", workers);
            pb__report_suggest(r, "sample the Python stacks of a few steps to see the lines",
                               "probing %s capture --stack --steps 3", pb__report_target(r));
        } else if (t && !strcmp(t, "host_overhead")) {
            json_object_set_new(nums, "module_calls_per_step", pb__report_real(calls));
            json_object_set_new(nums, "median_forward_self_s", pb__report_real(median_self));
            char both[2 * SQL_MAX + 8];
            snprintf(both, sizeof both, "%s\n;\n%s", host_sql, step_sql);
            pb__report_finding(
                r, "host_overhead", "bottleneck", "warning",
                pb__report_textf("host overhead: %.0f module calls per step, median self time "
                                 "%.1f us each: per-call overhead, not the math, dominates",
                                 calls, median_self * 1e6),
                nums, both,
                cpu ? "Many small operations: per-call Python and dispatch overhead dominates. "
                      "Batch more work per call (larger batches, wider and fewer layers) or use "
                      "torch.compile to fuse them (docs/report.md, \"Bottleneck type\")."
                    : "Many small operations (kernel launch overhead): fuse them - use "
                      "torch.compile or CUDA graphs; make layers wider and fewer (docs/report.md, "
                      "\"Bottleneck type\").");
        } else {
            char *claim =
                top_name ? pb__report_textf(
                               "compute-bound: forward+backward take %.0f%% of the step; the "
                               "largest self time is %s (%s, %.0f%% of module time)",
                               100 * (m.forward + m.backward) / wall, top_name,
                               top_stage ? top_stage : "", 100 * top_share)
                         : pb__report_textf("compute-bound: forward+backward take %.0f%% of the "
                                            "step",
                                            100 * (m.forward + m.backward) / wall);
            char both[2 * SQL_MAX + 8];
            snprintf(both, sizeof both, "%s\n;\n%s", step_sql, sql_self);
            pb__report_finding(
                r, "compute_bound", "bottleneck", "info", claim, nums, both,
                cpu ? "Profile the operations of the top modules (`probing <target> capture`); "
                      "on the CPU, check torch.get_num_threads() against the cores the job may "
                      "use (docs/report.md, \"Bottleneck type\")."
                    : "Profile the operations of the top modules (`probing <target> capture`); "
                      "check GPU utilisation, use mixed precision and torch.compile "
                      "(docs/report.md, \"Bottleneck type\").");
        }
    }
    if (top_name) {
        pb__report_sqlf(sql,
                        "SELECT step, stage, duration, total_duration FROM python.torch_trace "
                        "WHERE module = '%s' AND %s ORDER BY step",
                        top_name, module_filter(r, filter));
        /* Module names are Python identifiers and dots; never quote-breaking. */
        if (!strchr(top_name, '\''))
            pb__report_suggest(r, "follow the module with the largest self time step by step",
                               "probing %s query \"%s\"", pb__report_target(r), sql);
    }
}

/* ------------------------------------------------------------------ checks */

static void check_memory(pb__report *r)
{
    char sql[SQL_MAX];
    const char *source = "python.torch_trace allocated (process RSS on CPU)";
    if (r->n_memory > 0) {
        pb__report_sqlf(
            sql,
            "SELECT step, MAX(allocated_mb) AS value FROM python.memory WHERE phase = 'step' "
            "AND step BETWEEN %lld AND %lld GROUP BY step ORDER BY step",
            r->lo, r->hi);
        merge_per_step(r, sql, 2);
        source = "python.memory allocated_mb (largest device)";
    } else if (!r->from_steps_table) {
        strcpy(sql, TRACE_STEPS_SQL);
    } else {
        pb__report_finding(
            r, "memory_growth", "memory", "skipped",
            pb__report_textf(
                "memory growth not checked: no python.memory and no per-step memory in "
                "python.steps"),
            NULL, NULL, NULL);
        return;
    }
    /* The fit skips the warm-up and the first LEAK_SETTLE of the steady steps: allocators and
     * caches grow at the start of every run without leaking. */
    size_t from = r->warmup, avail = 0;
    for (size_t i = r->warmup; i < r->count; i++) avail += r->steps[i].has_memory;
    size_t settle = (size_t)(LEAK_SETTLE * (double)avail), seen = 0;
    double *xs = malloc((r->count + 1) * sizeof *xs), *ys = malloc((r->count + 1) * sizeof *ys);
    size_t n = 0;
    double first = 0, last = 0;
    for (size_t i = from; xs && ys && i < r->count; i++) {
        const pb__step_row *s = &r->steps[i];
        if (!s->has_memory || seen++ < settle) continue;
        if (!n) first = s->memory_mb;
        last = s->memory_mb;
        xs[n] = (double)s->step;
        ys[n++] = s->memory_mb;
    }
    if (n < LEAK_MIN_STEPS) {
        pb__report_finding(
            r, "memory_growth", "memory", "skipped",
            pb__report_textf("memory growth not checked: %zu steady step%s with memory figures, %d "
                             "needed",
                             n, n == 1 ? "" : "s", LEAK_MIN_STEPS),
            NULL, sql, NULL);
        free(xs);
        free(ys);
        return;
    }
    double slope, intercept, r2;
    pb__report_theil_sen(xs, ys, n, &slope, &intercept, &r2);
    free(xs);
    free(ys);
    double growth = last - first;
    /* What the process may use: python.memory.limit_mb (the GPU's total, or the cgroup limit /
     * RAM on CPU), else the GPU total of the breakdown. */
    double limit = NAN;
    char *why = NULL;
    json_t *lim = pb__report_try(r, "SELECT MAX(limit_mb) AS limit_mb FROM python.memory", &why);
    int ok = 0;
    double v = lim ? pb__report_num(json_array_get(lim, 0), "limit_mb", &ok) : 0;
    if (ok && v > 0) limit = v;
    json_decref(lim);
    free(why);
    if (isnan(limit) && r->n_breakdown > 0) {
        lim = pb__report_try(r, "SELECT MAX(device_total_mb) AS t FROM python.memory_breakdown",
                             &why);
        v = lim ? pb__report_num(json_array_get(lim, 0), "t", &ok) : 0;
        if (ok && v > 0) limit = v;
        json_decref(lim);
        free(why);
    }
    double step_s = median_wall(r->steps, r->warmup, r->count);
    double per_hour = step_s > 0 ? slope * 3600.0 / step_s : NAN;
    double hours = !isnan(limit) && per_hour > 0 ? (limit - last) / per_hour : NAN;
    if (hours < 0) hours = 0;
    json_t *nums = json_object();
    json_object_set_new(nums, "steps", json_integer((json_int_t)n));
    json_object_set_new(nums, "first_mb", pb__report_real(first));
    json_object_set_new(nums, "last_mb", pb__report_real(last));
    json_object_set_new(nums, "growth_mb", pb__report_real(growth));
    json_object_set_new(nums, "slope_mb_per_step", pb__report_real(slope));
    json_object_set_new(nums, "fit", json_string("Theil-Sen (median of pairwise slopes)"));
    json_object_set_new(nums, "r2", pb__report_real(r2));
    json_object_set_new(nums, "mb_per_hour", pb__report_real(per_hour));
    json_object_set_new(nums, "limit_mb", pb__report_real(limit));
    json_object_set_new(nums, "hours_to_limit", pb__report_real(hours));
    json_object_set_new(nums, "source", json_string(source));
    if (growth >= LEAK_MIN_GROWTH_MB && slope > 0 && r2 >= LEAK_MIN_R2) {
        /* Severity from the time to exhaustion: a leak that ends the job soon is critical, one
         * that would take days is worth knowing, not a bottleneck. */
        const char *severity = isnan(hours) ? "warning"
                               : hours < LEAK_CRITICAL_H ? "critical"
                               : hours < LEAK_WARNING_H ? "warning"
                                                         : "info";
        char when[160];
        if (isnan(hours))
            snprintf(when, sizeof when, "the memory available is unknown");
        else if (hours < 1)
            snprintf(when, sizeof when, "out of memory in ~%.0f min (%.0f MB available)",
                     hours * 60, limit);
        else
            snprintf(when, sizeof when, "out of memory in ~%.0f h (%.0f MB available)", hours,
                     limit);
        pb__report_finding(
            r, "memory_growth", "memory", severity,
            pb__report_textf("memory grows steadily: %+.3g MB/step (r² %.2f over %zu steps): "
                             "%+.1f GB per hour at this pace; %s",
                             slope, r2, n, per_hour / 1024.0, when),
            nums, sql,
            "Something keeps a reference each step: look for tensors appended to lists "
            "or dicts (losses kept without .detach() or .item(), caches, metrics) "
            "(docs/report.md, \"Memory\").");
        pb__report_suggest(
            r,
            "find what holds the memory: the largest objects referenced from "
            "__main__",
            "probing %s eval \"import sys, torch; print(sorted(((sum(t.numel()*t.element_"
            "size() for t in v if torch.is_tensor(t)) if isinstance(v, (list, tuple)) else "
            "0, k) for k, v in vars(sys.modules['__main__']).items()), reverse=True)[:5])\"",
            pb__report_target(r));
    } else {
        pb__report_finding(
            r, "memory_growth", "memory", "ok",
            pb__report_textf("no steady memory growth: %+.1f MB over %zu steps", growth, n), nums,
            sql, NULL);
    }
}

static void check_collectives(pb__report *r)
{
    char sql[SQL_MAX];
    if (r->n_nccl <= 0 && !(r->have_grad_sync && mean_shares(r).grad_sync > 0)) {
        pb__report_finding(
            r, "collectives", "check", "skipped",
            pb__report_textf("collectives share not checked: python.nccl_trace is %s (a single "
                             "process, or collectives are not recorded by this agent)",
                             r->n_nccl < 0 ? "absent" : "empty"),
            NULL, NULL, NULL);
        return;
    }
    shares m = mean_shares(r);
    if (!(m.has_collectives || m.grad_sync > 0) || m.wall <= 0) {
        pb__report_finding(
            r, "collectives", "check", "skipped",
            pb__report_textf("collectives recorded, but none in the steady steps of the window"),
            NULL, NULL, NULL);
        return;
    }
    double share = (m.collectives + m.grad_sync) / m.wall;
    if (r->from_steps_table) /* the host time blocked in collective calls and DDP's wait */
        pb__report_sqlf(sql,
                        "SELECT step, collectives%s AS value FROM python.steps WHERE step "
                        "BETWEEN %lld AND %lld ORDER BY step",
                        r->have_grad_sync ? " + grad_sync" : "", r->lo, r->hi);
    else
        pb__report_sqlf(
            sql,
            "SELECT step, SUM(duration_ms) / 1000.0 AS value FROM python.nccl_trace WHERE step "
            "BETWEEN %lld AND %lld GROUP BY step ORDER BY step",
            r->lo, r->hi);
    json_t *nums = json_object();
    json_object_set_new(nums, "collectives_s", pb__report_real(m.collectives));
    json_object_set_new(nums, "grad_sync_s", pb__report_real(m.grad_sync));
    json_object_set_new(nums, "mean_step_s", pb__report_real(m.wall));
    json_object_set_new(nums, "share", pb__report_real(share));
    if (share >= COMM_SHARE) /* the bottleneck finding "communication" says it, with advice */
        pb__report_finding(
            r, "collectives", "check", "info",
            pb__report_textf("communication (collectives and DDP's gradient sync) takes %.0f%% "
                             "of the step: see the bottleneck above",
                             100 * share),
            nums, sql, NULL);
    else
        pb__report_finding(
            r, "collectives", "check", share >= 0.2 ? "info" : "ok",
            pb__report_textf("communication (collectives and DDP's gradient sync) takes %.0f%% "
                             "of the step (20-30%% is normal for large models, %.0f%% or more "
                             "is flagged)",
                             100 * share, 100 * COMM_SHARE),
            nums, sql, NULL);
}

/* The GIL: a thread other than the training one holding it for a real share of the sampled
 * time ("Host time" in docs/report.md). python.gil (the agent's GIL sampler) per step and
 * holder. */
static void check_gil(pb__report *r)
{
    char sql[SQL_MAX];
    if (r->n_gil <= 0) {
        pb__report_finding(
            r, "gil_contention", "bottleneck", "skipped",
            pb__report_textf("GIL holders not checked: python.gil is %s",
                             r->n_gil < 0 ? "absent (an agent or recording without the GIL "
                                            "sampler)"
                                          : "empty (no step yet, a Python whose GIL state "
                                            "cannot be read, or PROBING_GIL_SAMPLE_MS=0)"),
            NULL, NULL, NULL);
        return;
    }
    long long first = pb__report_steady_first(r);
    pb__report_sqlf(sql,
                    "SELECT thread_id, thread_name, MAX(training) AS training, SUM(held) AS held,\n"
                    "       (SELECT SUM(s) FROM (SELECT MAX(samples) AS s FROM python.gil WHERE step "
                    "BETWEEN %lld AND %lld GROUP BY step)) AS samples\n"
                    "FROM python.gil WHERE step BETWEEN %lld AND %lld\n"
                    "GROUP BY thread_id, thread_name ORDER BY held DESC",
                    first, r->hi, first, r->hi);
    json_t *rows = pb__report_run(r, sql), *row, *top = NULL;
    size_t i;
    double total = 0, training = 0;
    json_array_foreach(rows, i, row) {
        total = pb__report_num(row, "samples", NULL);
        if (pb__report_num(row, "training", NULL) != 0)
            training += pb__report_num(row, "held", NULL);
        else if (!top)
            top = row;
    }
    if (!(total > 0)) {
        pb__report_finding(r, "gil_contention", "bottleneck", "skipped",
                           pb__report_textf("GIL holders not checked: no GIL sample in the "
                                            "steady steps of the window"),
                           NULL, sql, NULL);
        json_decref(rows);
        return;
    }
    double share = top ? pb__report_num(top, "held", NULL) / total : 0;
    const char *name = top ? json_string_value(json_object_get(top, "thread_name")) : NULL;
    json_t *nums = json_object();
    json_object_set_new(nums, "samples", pb__report_real(total));
    json_object_set_new(nums, "training_thread_share", pb__report_real(training / total));
    json_object_set_new(nums, "thread", name ? json_string(name) : json_null());
    json_object_set_new(nums, "thread_id", top ? json_integer((json_int_t)pb__report_num(top, "thread_id", NULL)) : json_null());
    json_object_set_new(nums, "share", pb__report_real(share));
    if (top && share >= GIL_SHARE) {
        pb__report_finding(
            r, "gil_contention", "bottleneck", "warning",
            pb__report_textf("thread '%s' holds the GIL %.0f%% of the sampled time (the training "
                             "thread %.0f%%): the training loop waits for it between its torch "
                             "calls",
                             name ? name : "?", 100 * share, 100 * training / total),
            nums, sql,
            "Python code on another thread competes with the training loop for the GIL: do that "
            "work less often, in batches, or in another process (multiprocessing, a DataLoader "
            "worker), or let it release the GIL (I/O, time.sleep) (docs/report.md, \"Host "
            "time\"). See what it runs: `probing <target> backtrace` shows every thread's stack "
            "and which one holds the GIL.");
        pb__report_suggest(r, "see the stack of the thread that holds the GIL",
                           "probing %s backtrace", pb__report_target(r));
    } else {
        pb__report_finding(
            r, "gil_contention", "bottleneck", "ok",
            top ? pb__report_textf("no other thread holds the GIL for long: the most, '%s', %.0f%% "
                                   "of the sampled time (%.0f%% is flagged)",
                                   name ? name : "?", 100 * share, 100 * GIL_SHARE)
                : pb__report_textf("only the training thread held the GIL when sampled"),
            nums, sql, NULL);
    }
    json_decref(rows);
}

static void check_amp(pb__report *r)
{
    char sql[SQL_MAX];
    if (r->n_amp <= 0) {
        pb__report_finding(
            r, "amp", "check", "skipped",
            pb__report_textf("mixed precision not checked: python.amp_trace is %s",
                             r->n_amp < 0 ? "absent (not recorded by this agent)" : "empty"),
            NULL, NULL, NULL);
        return;
    }
    pb__report_sqlf(sql,
                    "SELECT COUNT(*) AS steps, SUM(skipped) AS skipped, MIN(scale) AS min_scale,\n"
                    "       MAX(scale) AS max_scale, MAX(autocast_enabled) AS autocast,\n"
                    "       MAX(autocast_dtype) AS dtype\n"
                    "FROM python.amp_trace WHERE step BETWEEN %lld AND %lld",
                    r->lo, r->hi);
    json_t *rows = pb__report_run(r, sql), *row = json_array_get(rows, 0);
    if (!row) {
        json_decref(rows);
        return;
    }
    int has_scale;
    double steps = pb__report_num(row, "steps", NULL),
           skipped = pb__report_num(row, "skipped", NULL);
    double min_scale = pb__report_num(row, "min_scale", &has_scale);
    json_t *nums = json_object();
    json_object_set_new(nums, "steps", pb__report_real(steps));
    json_object_set_new(nums, "skipped", pb__report_real(skipped));
    json_object_set(nums, "min_scale", json_object_get(row, "min_scale"));
    json_object_set(nums, "max_scale", json_object_get(row, "max_scale"));
    json_object_set(nums, "autocast_dtype", json_object_get(row, "dtype"));
    if (skipped > 0 || (has_scale && min_scale < 65536))
        pb__report_finding(
            r, "amp", "check", "warning",
            pb__report_textf("GradScaler skipped %.0f of %.0f steps; scale went down to %g",
                             skipped, steps, min_scale),
            nums, sql,
            "If scale is decreasing (< 65536), GradScaler is detecting inf/nan: look for "
            "overflow in the loss or gradients, keep the loss computation in float32, "
            "consider bf16 on Ampere or newer (docs/report.md, \"Mixed precision\").");
    else
        pb__report_finding(r, "amp", "check", "ok",
                           pb__report_textf("mixed precision: no skipped steps%s",
                                            has_scale ? ", scale stable" : ""),
                           nums, sql, NULL);
    json_decref(rows);
}

static void check_syncs(pb__report *r)
{
    if (!r->from_steps_table) {
        pb__report_finding(
            r, "host_syncs", "check", "skipped",
            pb__report_textf("host-device synchronisations not checked: python.steps (syncs per "
                             "step) is absent; they exist on CUDA only"),
            NULL, NULL, NULL);
        return;
    }
    if (r->device == 1) {
        pb__report_finding(
            r, "host_syncs", "check", "skipped",
            pb__report_textf("host-device synchronisations: does not apply (the model runs on "
                             "the CPU; .item(), .cpu() and torch.cuda.synchronize() stall a "
                             "GPU only)"),
            NULL, NULL, NULL);
        return;
    }
    double *v = malloc((r->count + 1) * sizeof *v);
    size_t n = 0;
    if (!v) return;
    for (size_t i = r->warmup; i < r->count; i++) v[n++] = r->steps[i].syncs;
    qsort(v, n, sizeof *v, pb__report_cmp_double);
    double median = pb__report_percentile(v, n, 50), max = n ? v[n - 1] : 0;
    free(v);
    char sql[SQL_MAX];
    pb__report_sqlf(
        sql, "SELECT step, syncs FROM python.steps WHERE step BETWEEN %lld AND %lld ORDER BY step",
        r->lo, r->hi);
    json_t *nums = json_object();
    json_object_set_new(nums, "median_syncs_per_step", pb__report_real(median));
    json_object_set_new(nums, "max_syncs_per_step", pb__report_real(max));
    if (median >= SYNCS_PER_STEP)
        pb__report_finding(
            r, "host_syncs", "check", "warning",
            pb__report_textf("%.0f host-device synchronisations per step (median): each stalls the "
                             "GPU pipeline",
                             median),
            nums, sql,
            "Synchronizing in the training loop kills performance: remove .item(), "
            ".cpu(), print(tensor) and torch.cuda.synchronize() from the loop; only "
            "synchronize for timing/profiling (docs/report.md, \"Host time\").");
    else
        pb__report_finding(
            r, "host_syncs", "check", "ok",
            pb__report_textf("%.0f host-device synchronisations per step (median)", median), nums,
            sql, NULL);
}

/* ------------------------------------------------------------------ the report */

static json_t *find(json_t *findings, const char *id)
{
    size_t i;
    json_t *f;
    json_array_foreach(findings, i, f) {
        if (!strcmp(json_string_value(json_object_get(f, "id")), id)) return f;
    }
    return NULL;
}

/* A rank that waits for a slower one shows the wait as communication; when load imbalance
 * names another rank as the slow one, the wait is its consequence: the communication finding
 * says so and steps back to info, and the imbalance is the problem to fix. */
static void waiting_for_slow_rank(pb__report *r)
{
    json_t *li = find(r->findings, "load_imbalance"), *comm = find(r->findings, "communication");
    if (!li || !comm || strcmp(json_string_value(json_object_get(li, "severity")), "warning"))
        return;
    json_t *slow = json_object_get(json_object_get(li, "numbers"), "slow_rank");
    json_t *me = json_object_get(r->src->info, "rank");
    if (!json_is_integer(slow) || (json_is_integer(me) && json_integer_value(me) == json_integer_value(slow)))
        return;
    char *claim = pb__report_textf("%s: mostly the wait for rank %lld, the slow rank (see load "
                                   "imbalance)",
                                   json_string_value(json_object_get(comm, "claim")),
                                   (long long)json_integer_value(slow));
    if (claim) json_object_set_new(comm, "claim", json_string(claim));
    free(claim);
    json_object_set_new(comm, "severity", json_string("info"));
}

static const char *first_problem(json_t *findings)
{
    static const char *order[] = {"critical", "warning"};
    for (size_t o = 0; o < 2; o++) {
        size_t i;
        json_t *f;
        json_array_foreach(findings, i, f) {
            if (!strcmp(json_string_value(json_object_get(f, "severity")), order[o]))
                return json_string_value(json_object_get(f, "id"));
        }
    }
    return NULL;
}

int pb_report_build(const pb_report_source *src, int last_steps, json_t **out, char **error)
{
    pb__report r;
    int rc = -1;
    memset(&r, 0, sizeof r);
    r.src = src;
    *out = NULL;
    *error = NULL;
    r.doc = json_object();
    r.findings = json_array();
    r.missing = json_array();
    r.next = json_array();
    r.errors = json_array();
    if (!r.doc || !r.findings || !r.missing || !r.next || !r.errors) {
        *error = pb__report_textf("out of memory");
        goto fail;
    }
    long long n_trace = probe_table(&r, "python.torch_trace", "everything");
    if (n_trace < 0) {
        json_t *m = json_array_get(r.missing, 0);
        const char *why = json_string_value(json_object_get(m, "error"));
        *error =
            pb__report_textf("cannot read python.torch_trace: %s", why ? why : "unknown error");
        goto fail;
    }
    r.n_steps = probe_table(&r, "python.steps", "per-step wall, data wait, syncs");
    r.n_loader = probe_table(&r, "python.dataloader_trace",
                             "data-loader wait (data-bound or not), batch size");
    r.n_memory = probe_table(&r, "python.memory",
                             "device memory per step (leaks), phases (activation estimate)");
    r.n_breakdown = probe_table(&r, "python.memory_breakdown",
                                "parameters, gradients and optimizer state in bytes");
    r.n_amp = probe_table(&r, "python.amp_trace", "GradScaler scale and skipped steps");
    r.n_nccl = probe_table(&r, "python.nccl_trace", "collectives share");
    r.n_gpu = probe_table(&r, "system.gpu", "GPU utilisation (bottleneck type on a GPU)");
    r.n_gil = probe_table(&r, "python.gil", "which threads hold the GIL (GIL contention)");
    r.n_layers = probe_table(&r, "python.layers",
                             "Linear/convolution shapes and dtypes (tensor-core alignment)");
    r.from_steps_table = r.n_steps > 0;
    detect_device(&r);
    if (load_steps(&r, last_steps, error)) goto fail;

    json_object_set_new(r.doc, "version", json_integer(1));
    if (src->info)
        json_object_set(r.doc, "target", src->info);
    else
        json_object_set_new(r.doc, "target", json_null());
    json_t *window = json_object();
    json_object_set_new(window, "last", last_steps > 0 ? json_integer(last_steps) : json_null());
    json_object_set_new(window, "first_step", r.count ? json_integer(r.lo) : json_null());
    json_object_set_new(window, "last_step", r.count ? json_integer(r.hi) : json_null());
    json_object_set_new(window, "steps", json_integer((json_int_t)r.count));
    json_object_set_new(r.doc, "window", window);

    if (r.count == 0) {
        json_object_set_new(r.doc, "baseline", json_null());
        json_object_set_new(r.doc, "bottleneck", json_null());
        json_object_set_new(r.doc, "component", json_null());
        pb__report_finding(
            &r, "no_steps", "baseline", "skipped",
            pb__report_textf(n_trace == 0 ? "no complete step recorded yet: python.torch_trace is "
                                            "empty (has the model run a forward pass?)"
                                          : "no complete step recorded yet (no optimizer step has "
                                            "ended and no forward has finished)"),
            NULL, steps_sql(&r),
            "Run the report again once the job has done a few steps.");
    } else {
        char sql[SQL_MAX];
        if (!r.from_steps_table && r.n_loader > 0) {
            pb__report_sqlf(
                sql,
                "SELECT step, SUM(wait) AS value FROM python.dataloader_trace WHERE step "
                "BETWEEN %lld AND %lld GROUP BY step",
                r.lo, r.hi);
            merge_per_step(&r, sql, 0);
            pb__report_sqlf(
                sql,
                "SELECT step, SUM(batch_size) AS value FROM python.dataloader_trace WHERE "
                "step BETWEEN %lld AND %lld GROUP BY step",
                r.lo, r.hi);
            merge_per_step(&r, sql, 3);
        }
        if (!r.from_steps_table && r.n_nccl > 0) {
            pb__report_sqlf(
                sql,
                "SELECT step, SUM(duration_ms) / 1000.0 AS value FROM python.nccl_trace "
                "WHERE step BETWEEN %lld AND %lld GROUP BY step",
                r.lo, r.hi);
            merge_per_step(&r, sql, 1);
        }
        /* Warm-up happens at the start of a run: a --last window that starts later has none,
         * and a slow step in it is an outlier, not warm-up. */
        if (last_steps > 0 && r.lo > 0)
            r.warmup = 0;
        else
            detect_warmup(&r);
        detail_window(&r);
        phase_baseline(&r);
        slow_steps(&r);
        phases_bottleneck_component(&r);
        check_gil(&r);
        size_t steady = r.count - r.warmup;
        if (r.count > 1 && steady < PB_REPORT_MIN_STEADY)
            pb__report_finding(
                &r, "small_sample", "baseline", "info",
                pb__report_textf("only %zu steady step%s: too few to conclude that nothing is "
                                 "wrong (%d or more wanted)",
                                 steady, steady == 1 ? "" : "s", PB_REPORT_MIN_STEADY),
                NULL, steps_sql(&r), "Run the report again after more steps.");
        if (r.count == 1)
            pb__report_finding(
                &r, "one_step", "baseline", "info",
                pb__report_textf("only one complete step: no warm-up detection, no spread; the "
                                 "figures are that step's"),
                NULL, NULL, "Run the report again after more steps.");
    }
    if (r.count) {
        check_memory(&r);
        pb__report_memory(&r);
        check_collectives(&r);
    } else {
        json_object_set_new(r.doc, "memory", json_null());
    }
    pb__report_ranks(&r);
    pb__report_cluster(&r);
    waiting_for_slow_rank(&r);
    check_amp(&r);
    if (r.count) {
        pb__report_amp_hardware(&r);
        check_syncs(&r);
    }
    pb__report_suggest(
        &r, "the slowest modules over everything recorded",
        "probing %s query \"SELECT module, stage, COUNT(*) AS calls, AVG(duration) AS "
        "avg_self_s FROM python.torch_trace GROUP BY module, stage ORDER BY SUM(duration) "
        "DESC LIMIT 10\"",
        pb__report_target(&r));

    const char *primary = first_problem(r.findings);
    json_object_set_new(r.doc, "primary", primary ? json_string(primary) : json_null());
    json_object_set(r.doc, "findings", r.findings);
    json_object_set(r.doc, "next", r.next);
    json_object_set(r.doc, "missing", r.missing);
    json_object_set(r.doc, "query_errors", r.errors);
    *out = r.doc;
    r.doc = NULL;
    rc = 0;
fail:
    json_decref(r.doc);
    json_decref(r.findings);
    json_decref(r.missing);
    json_decref(r.next);
    json_decref(r.errors);
    free(r.steps);
    return rc;
}
