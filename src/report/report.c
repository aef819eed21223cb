/*
 * report.c - the rules of `probing <target> report`: seed 002's four phases and the checks of
 * seeds 000/002/004, each computed from SQL the report prints beside its numbers.
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
 * Thresholds are the seeds' where they give one (GPU utilisation <70% / >90%, collectives
 * 20-30% normal and >50% flagged, load imbalance >10%, data loading time > compute time) and
 * otherwise named constants below.
 */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP_FACTOR 1.5        /* a leading step this much above the later median is warm-up */
#define OUTLIER_FACTOR 3.0       /* a steady step this much above the median is an outlier */
#define UNACCOUNTED_SHARE 0.30   /* time outside modules/optimizer worth a warning */
#define UNACCOUNTED_BOUND 0.40   /* ... that makes it the likely bottleneck */
#define OPTIMIZER_SHARE 0.30     /* optimizer share of the step worth a warning */
#define HOST_CALLS_PER_STEP 100  /* module executions per step for the host-overhead rule */
#define HOST_MEDIAN_SELF_S 30e-6 /* ... with a median self time below this */
#define LEAK_MIN_STEPS 5
#define LEAK_MIN_GROWTH_MB 32.0
#define LEAK_MIN_SLOPE_MB 0.5
#define LEAK_MIN_R2 0.8
#define SYNCS_PER_STEP 3.0

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

static const char STEPS_TABLE_SQL[] =
    "SELECT step, wall, data_wait, forward, backward, optimizer, collectives, samples, syncs\n"
    "FROM python.steps ORDER BY step";

/* The same with python.steps.detail (agents since detail windows; older ones and their
 * recordings lack the column). */
static const char STEPS_DETAIL_SQL[] =
    "SELECT step, wall, data_wait, forward, backward, optimizer, collectives, samples, syncs, detail\n"
    "FROM python.steps ORDER BY step";

/* The SQL the per-step figures come from. */
static const char *steps_sql(const pb__report *r)
{
    if (!r->from_steps_table) return TRACE_STEPS_SQL;
    return r->have_detail ? STEPS_DETAIL_SQL : STEPS_TABLE_SQL;
}

/* Loads every complete step, keeps the last `last` (0: all). Returns 0, or -1 when
 * python.torch_trace cannot be read (*error set). */
static int load_steps(pb__report *r, int last, char **error)
{
    json_t *rows = NULL;
    char *err = NULL;
    if (r->from_steps_table) {
        char *why = NULL;
        json_t *probe = pb__report_try(r, "SELECT detail FROM python.steps LIMIT 1", &why);
        r->have_detail = probe != NULL;
        json_decref(probe);
        free(why);
    }
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
    else
        r->have_optimizer = 1;
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
            s.data = pb__report_num(row, "data_wait", &s.has_data);
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

static double batch_size(pb__report *r, const char **source)
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
            *source = "python.dataloader_trace";
            return b;
        }
    }
    double samples = 0;
    for (size_t i = r->warmup; i < r->count; i++) samples += r->steps[i].samples;
    if (samples > 0) {
        *source = r->from_steps_table ? "python.steps" : "python.dataloader_trace";
        return samples / (double)(r->count - r->warmup);
    }
    json_t *b = json_object_get(r->src->conditions, "batch_size");
    if (json_is_number(b) && json_number_value(b) > 0) {
        *source = "the DataLoader's batch_size (eval)";
        return json_number_value(b);
    }
    return 0;
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
        double batch = batch_size(r, &source);
        if (batch > 0) {
            json_object_set_new(b, "batch_size", pb__report_real(batch));
            json_object_set_new(b, "batch_size_source", json_string(source));
            json_object_set_new(b, "samples_per_s", pb__report_real(batch / mean));
        } else {
            json_object_set_new(b, "samples_per_s", json_null());
            json_object_set_new(b, "throughput_note",
                                json_string("batch size unknown: no python.dataloader_trace, "
                                            "python.steps samples or DataLoader found by eval"));
        }
        /* First-iteration overhead (seed 002: first iterations have 10-100x overhead). */
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
                "(seed 002: minimum 3 iterations, recommend 5-10).");
        }
        double median = pb__report_percentile(v, n, 50);
        if (n >= 3 && v[n - 1] > OUTLIER_FACTOR * median) {
            size_t slow = 0, worst = r->count;
            for (size_t i = r->warmup; i < r->count; i++) {
                if (!pb__report_timing_step(r, i)) continue;
                if (r->steps[i].wall > OUTLIER_FACTOR * median) slow++;
                if (worst == r->count || r->steps[i].wall > r->steps[worst].wall) worst = i;
            }
            json_t *nums = json_object();
            json_object_set_new(nums, "slow_steps", json_integer((json_int_t)slow));
            json_object_set_new(nums, "worst_step", json_integer(r->steps[worst].step));
            json_object_set_new(nums, "worst_s", pb__report_real(r->steps[worst].wall));
            json_object_set_new(nums, "median_s", pb__report_real(median));
            char sql[SQL_MAX];
            if (r->steps[worst].detail || !r->have_detail)
                pb__report_sqlf(
                    sql,
                    "SELECT module, stage, duration, total_duration FROM python.torch_trace "
                    "WHERE step = %lld ORDER BY duration DESC LIMIT 10",
                    r->steps[worst].step);
            else /* a summary step: no module rows, but its parts */
                pb__report_sqlf(sql, "SELECT * FROM python.steps WHERE step = %lld", r->steps[worst].step);
            pb__report_finding(
                r, "outlier_steps", "baseline", "info",
                pb__report_textf(
                    "%zu steady step%s took over %.0fx the median; the worst, step %lld, "
                    "took %.1fx",
                    slow, slow == 1 ? "" : "s", OUTLIER_FACTOR, r->steps[worst].step,
                    r->steps[worst].wall / median),
                nums, sql,
                "Look at what that step did differently (checkpointing, evaluation, "
                "garbage collection, a slow batch); the median and p95 above are the "
                "figures to compare runs by.");
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
    double wall, forward, backward, optimizer, data, collectives, other;
    int has_data, has_collectives;
} shares;

/* Mean per-step times over the steady steps, outlier steps (over OUTLIER_FACTOR x the median,
 * reported on their own) left out so that one slow step cannot decide the bottleneck. */
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
        if (s->has_data) m.data += s->data, data_n++;
        if (s->has_collectives) m.collectives += s->collectives, coll_n++;
    }
    if (!n) return m;
    m.wall /= (double)n;
    m.forward /= (double)n;
    m.backward /= (double)n;
    m.optimizer /= (double)n;
    m.data /= (double)n;
    m.collectives /= (double)n;
    m.has_data = data_n > 0;
    m.has_collectives = coll_n > 0;
    m.other = m.wall - m.forward - m.backward - m.optimizer - m.data - m.collectives;
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

static void phases_bottleneck_component(pb__report *r)
{
    shares m = mean_shares(r);
    json_t *comp = json_object(), *bn = json_object();
    char sql[SQL_MAX], filter[128];
    const char *step_sql = steps_sql(r);
    double wall = m.wall > 0 ? m.wall : 1;
    json_t *sh = json_object();
    json_object_set_new(sh, "forward", pb__report_real(m.forward / wall));
    json_object_set_new(sh, "backward", pb__report_real(m.backward / wall));
    json_object_set_new(sh, "optimizer", pb__report_real(m.optimizer / wall));
    json_object_set_new(sh, "data", m.has_data ? pb__report_real(m.data / wall) : json_null());
    json_object_set_new(sh, "collectives",
                        m.has_collectives ? pb__report_real(m.collectives / wall) : json_null());
    json_object_set_new(sh, m.has_data ? "other" : "unaccounted", pb__report_real(m.other / wall));
    json_object_set_new(comp, "shares", sh);
    json_object_set_new(comp, "mean_step_s", pb__report_real(m.wall));
    json_object_set_new(comp, "sql", json_string(step_sql));
    if (!m.has_data)
        json_object_set_new(comp, "unaccounted_means",
                            json_string("time outside modules and the optimizer: data loading, "
                                        "Python between steps (no python.dataloader_trace to "
                                        "tell them apart)"));
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
    const char *type = "compute", *label = NULL;
    char *decided = NULL;
    json_t *util = NULL;
    if (r->n_gpu > 0) {
        json_t *rows = pb__report_run(r, "SELECT AVG(utilization) AS utilization FROM system.gpu");
        int ok;
        double u = rows ? pb__report_num(json_array_get(rows, 0), "utilization", &ok) : 0;
        if (rows && ok) util = pb__report_real(u);
        json_decref(rows);
    }
    json_object_set_new(bn, "gpu_utilization", util ? util : json_null());

    if (m.has_data && m.data > compute) {
        type = "data";
        label = "data loading (CPU-bound)";
        decided =
            pb__report_textf("data-loader wait %.3g ms > compute (forward+backward+optimizer) "
                             "%.3g ms per step (seed 002: data loading time > computation time)",
                             m.data * 1e3, compute * 1e3);
    } else if (m.has_collectives && m.collectives > 0.5 * m.wall) {
        type = "collectives";
        label = "communication (collectives over 50% of the step)";
        decided = pb__report_textf("collectives %.0f%% of the step", 100 * m.collectives / wall);
    } else if (m.optimizer >= OPTIMIZER_SHARE * m.wall && m.optimizer >= m.forward + m.backward) {
        type = "optimizer";
        label = "optimizer step";
        decided =
            pb__report_textf("optimizer %.0f%% of the step, more than forward+backward (%.0f%%)",
                             100 * m.optimizer / wall, 100 * (m.forward + m.backward) / wall);
    } else if (!m.has_data && m.other >= UNACCOUNTED_BOUND * m.wall) {
        type = "data_likely";
        label = "likely data loading or Python outside the model (CPU-bound)";
        decided = pb__report_textf("%.0f%% of the step is outside modules and the optimizer; "
                                   "python.dataloader_trace would confirm data loading",
                                   100 * m.other / wall);
    } else if (host) {
        type = "host_overhead";
        label = "host overhead (many tiny module calls)";
        decided = pb__report_textf("%.0f module calls per step with a median self time of %.1f us",
                                   calls, median_self * 1e6);
    } else if (util && json_real_value(util) < 70) {
        type = "cpu";
        label = "CPU-bound (GPU utilisation under 70%)";
        decided =
            pb__report_textf("GPU utilisation %.0f%% < 70%% (seed 002)", json_real_value(util));
    } else {
        type = "compute";
        const char *device = json_string_value(json_object_get(r->src->conditions, "device"));
        int gpu = util && json_real_value(util) > 90;
        label = gpu ? "GPU-bound (computation)"
                : device && strncmp(device, "cuda", 4) == 0
                    ? "compute (forward/backward)"
                    : "compute on the CPU (forward/backward)";
        decided =
            pb__report_textf("forward+backward %.0f%% of the step, unaccounted/other %.0f%%%s",
                             100 * (m.forward + m.backward) / wall, 100 * m.other / wall,
                             gpu ? ", GPU utilisation over 90%" : "");
    }
    json_object_set_new(bn, "type", json_string(type));
    json_object_set_new(bn, "label", json_string(label));
    json_object_set_new(bn, "decided_by", json_string(decided ? decided : ""));
    json_object_set_new(bn, "sql", json_string(step_sql));
    free(decided);
    json_object_set_new(r->doc, "bottleneck", bn);

    /* Findings for the bottleneck, with the seeds' recommendations. */
    json_t *nums = json_object();
    json_object_set_new(nums, "mean_step_s", pb__report_real(m.wall));
    json_object_set_new(nums, "forward_s", pb__report_real(m.forward));
    json_object_set_new(nums, "backward_s", pb__report_real(m.backward));
    json_object_set_new(nums, "optimizer_s", pb__report_real(m.optimizer));
    if (m.has_data) json_object_set_new(nums, "data_wait_s", pb__report_real(m.data));
    json_object_set_new(nums, m.has_data ? "other_s" : "unaccounted_s", pb__report_real(m.other));
    json_t *top = json_array_get(json_object_get(comp, "top_by_self"), 0);
    const char *top_name = json_string_value(json_object_get(top, "module"));
    const char *top_stage = json_string_value(json_object_get(top, "stage"));
    double top_share = pb__report_num(top, "self_share", NULL);
    json_t *cond = r->src->conditions;
    json_t *workers = json_object_get(cond, "num_workers");

    if (!strcmp(type, "data")) {
        pb__report_finding(
            r, "data_bound", "bottleneck", "critical",
            pb__report_textf(
                "data loading bound: the loop waits %.3g ms per step for data, compute "
                "takes %.3g ms",
                m.data * 1e3, compute * 1e3),
            nums, step_sql,
            "Increase num_workers in DataLoader, enable pin_memory=True, move data "
            "augmentation to GPU, cache preprocessed data if the dataset is small, use "
            "faster storage (seed 002).");
        nums = NULL; /* the finding owns it */
    } else if (!strcmp(type, "data_likely") ||
               (!strcmp(type, "compute") && !m.has_data && m.other >= UNACCOUNTED_SHARE * m.wall)) {
        char *claim =
            pb__report_textf("%.0f%% of each step (%.3g ms) is outside modules and the "
                             "optimizer: unaccounted (data loading, Python between steps)%s",
                             100 * m.other / wall, m.other * 1e3,
                             json_is_integer(workers)
                                 ? (json_integer_value(workers) == 0 ? "; num_workers is 0" : "")
                                 : "");
        json_t *f = pb__report_finding(
            r, "unaccounted_time", "bottleneck",
            !strcmp(type, "data_likely") ? "critical" : "warning", claim, nums, step_sql,
            "Likely data loading (CPU-bound): increase num_workers in "
            "DataLoader, enable pin_memory=True, cache preprocessed data "
            "(seed 002). To confirm, measure the data-loader wait: "
            "python.dataloader_trace is empty, so the loop's data loading "
            "was not seen (a loader other than torch's DataLoader?).");
        if (json_is_integer(workers))
            json_object_set(json_object_get(f, "numbers"), "num_workers", workers);
        pb__report_suggest(
            r,
            "see where the time between steps goes: compare each step's module time "
            "with its wall time",
            "probing %s query \"SELECT step, SUM(duration) AS in_modules, MAX(CASE WHEN "
            "stage = 'step' THEN time_offset + total_duration END) AS wall FROM "
            "python.torch_trace GROUP BY step ORDER BY step DESC LIMIT 20\"",
            pb__report_target(r));
        if (json_is_integer(workers))
            pb__report_suggest(r, "check the DataLoader settings (seed 002 measurement conditions)",
                               "probing %s eval \"print(train_loader.num_workers, "
                               "train_loader.pin_memory)\"",
                               pb__report_target(r));
        nums = NULL;
    } else if (!strcmp(type, "optimizer")) {
        pb__report_finding(
            r, "optimizer_heavy", "bottleneck", "warning",
            pb__report_textf("the optimizer step takes %.0f%% of each step (%.3g ms), more than "
                             "forward and backward together (%.3g ms)",
                             100 * m.optimizer / wall, m.optimizer * 1e3,
                             (m.forward + m.backward) * 1e3),
            nums, step_sql,
            "Profile the optimizer step before the model: check which parameters it "
            "updates (tensors the model never uses still cost a full update) and the "
            "size of its state; use the foreach/fused implementations; reduce the update "
            "frequency with gradient accumulation (seed 000).");
        pb__report_suggest(
            r, "count what the optimizer updates",
            "probing %s eval \"print(sum(p.numel() for g in optimizer.param_groups for p "
            "in g['params']), sum(p.numel() for p in model.parameters()))\"",
            pb__report_target(r));
        nums = NULL;
    } else if (!strcmp(type, "host_overhead")) {
        json_object_set_new(nums, "module_calls_per_step", pb__report_real(calls));
        json_object_set_new(nums, "median_forward_self_s", pb__report_real(median_self));
        char both[2 * SQL_MAX + 8];
        snprintf(both, sizeof both, "%s\n;\n%s", host_sql, step_sql);
        pb__report_finding(
            r, "host_overhead", "bottleneck", "warning",
            pb__report_textf("host overhead: %.0f module calls per step, median self time %.1f us "
                             "each: per-call overhead, not the math, dominates",
                             calls, median_self * 1e6),
            nums, both,
            "Many small operations (kernel launch overhead): fuse them - use "
            "torch.compile or fuse manually; make layers wider and fewer (seed 002).");
        nums = NULL;
    } else if (!strcmp(type, "collectives")) {
        /* reported by the collectives check */
    } else {
        char *claim =
            top_name ? pb__report_textf(
                           "compute-bound: forward+backward take %.0f%% of the step; the largest "
                           "self time is %s (%s, %.0f%% of module time)",
                           100 * (m.forward + m.backward) / wall, top_name,
                           top_stage ? top_stage : "", 100 * top_share)
                     : pb__report_textf("compute-bound: forward+backward take %.0f%% of the step",
                                        100 * (m.forward + m.backward) / wall);
        char both[2 * SQL_MAX + 8];
        snprintf(both, sizeof both, "%s\n;\n%s", step_sql, sql_self);
        pb__report_finding(
            r, "compute_bound", "bottleneck", "info", claim, nums, both,
            "Profile model operations in the top modules (seed 002: GPU-bound -> profile "
            "model operations); on a GPU check utilisation, use mixed precision and "
            "torch.compile.");
        nums = NULL;
    }
    json_decref(nums);
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
    size_t n = 0;
    double sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0, first = 0, last = 0;
    for (size_t i = r->warmup; i < r->count; i++) {
        const pb__step_row *s = &r->steps[i];
        if (!s->has_memory) continue;
        double x = (double)s->step, y = s->memory_mb;
        if (!n) first = y;
        last = y;
        n++;
        sx += x, sy += y, sxx += x * x, sxy += x * y, syy += y * y;
    }
    if (n < LEAK_MIN_STEPS) {
        pb__report_finding(
            r, "memory_growth", "memory", "skipped",
            pb__report_textf("memory growth not checked: %zu steady step%s with memory figures, %d "
                             "needed",
                             n, n == 1 ? "" : "s", LEAK_MIN_STEPS),
            NULL, sql, NULL);
        return;
    }
    double dn = (double)n, vx = sxx - sx * sx / dn, vy = syy - sy * sy / dn;
    double cov = sxy - sx * sy / dn;
    double slope = vx > 0 ? cov / vx : 0;
    double r2 = vx > 0 && vy > 0 ? cov * cov / (vx * vy) : 0;
    double growth = last - first;
    json_t *nums = json_object();
    json_object_set_new(nums, "steps", json_integer((json_int_t)n));
    json_object_set_new(nums, "first_mb", pb__report_real(first));
    json_object_set_new(nums, "last_mb", pb__report_real(last));
    json_object_set_new(nums, "growth_mb", pb__report_real(growth));
    json_object_set_new(nums, "slope_mb_per_step", pb__report_real(slope));
    json_object_set_new(nums, "r2", pb__report_real(r2));
    json_object_set_new(nums, "source", json_string(source));
    if (growth >= LEAK_MIN_GROWTH_MB && slope >= LEAK_MIN_SLOPE_MB && r2 >= LEAK_MIN_R2) {
        pb__report_finding(
            r, "memory_growth", "memory", "critical",
            pb__report_textf("memory grows steadily across steps: +%.1f MB over %zu steps (%.2f MB "
                             "per step) - a leak",
                             growth, n, slope),
            nums, sql,
            "Something keeps a reference each step: look for tensors appended to lists "
            "or dicts (losses kept without .detach() or .item(), caches, metrics); memory "
            "leaks are allocations never freed (seed 002).");
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
    if (r->n_nccl <= 0) {
        pb__report_finding(
            r, "collectives", "check", "skipped",
            pb__report_textf("collectives share not checked: python.nccl_trace is %s (a single "
                             "process, or collectives are not recorded by this agent)",
                             r->n_nccl < 0 ? "absent" : "empty"),
            NULL, NULL, NULL);
        return;
    }
    shares m = mean_shares(r);
    if (!m.has_collectives || m.wall <= 0) {
        pb__report_finding(
            r, "collectives", "check", "skipped",
            pb__report_textf("collectives recorded, but none in the steady steps of the window"),
            NULL, NULL, NULL);
        return;
    }
    double share = m.collectives / m.wall;
    if (r->from_steps_table) /* the host time blocked in the program's collective calls */
        pb__report_sqlf(sql,
                        "SELECT step, collectives AS value FROM python.steps WHERE step "
                        "BETWEEN %lld AND %lld ORDER BY step",
                        r->lo, r->hi);
    else
        pb__report_sqlf(
            sql,
            "SELECT step, SUM(duration_ms) / 1000.0 AS value FROM python.nccl_trace WHERE step "
            "BETWEEN %lld AND %lld GROUP BY step ORDER BY step",
            r->lo, r->hi);
    json_t *nums = json_object();
    json_object_set_new(nums, "collectives_s", pb__report_real(m.collectives));
    json_object_set_new(nums, "mean_step_s", pb__report_real(m.wall));
    json_object_set_new(nums, "share", pb__report_real(share));
    if (share > 0.5)
        pb__report_finding(
            r, "collectives", "check", "warning",
            pb__report_textf("collectives take %.0f%% of the step (over 50%%)", 100 * share), nums,
            sql,
            "If AllReduce >50%, optimize overlap or reduce frequency (gradient "
            "accumulation); check the interconnect (seed 000).");
    else
        pb__report_finding(
            r, "collectives", "check", share >= 0.2 ? "info" : "ok",
            pb__report_textf("collectives take %.0f%% of the step (20-30%% is normal for large "
                             "models, over 50%% is flagged)",
                             100 * share),
            nums, sql, NULL);
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
            "consider bf16 on Ampere or newer (seed 004).");
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
            "synchronize for timing/profiling (seed 002).");
    else
        pb__report_finding(
            r, "host_syncs", "check", "ok",
            pb__report_textf("%.0f host-device synchronisations per step (median)", median), nums,
            sql, NULL);
}

/* ------------------------------------------------------------------ the report */

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
    r.n_layers = probe_table(&r, "python.layers",
                             "Linear/convolution shapes and dtypes (tensor-core alignment)");
    r.from_steps_table = r.n_steps > 0;
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
        phases_bottleneck_component(&r);
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
    check_amp(&r);
    if (r.count) {
        pb__report_amp_hardware(&r);
        check_syncs(&r);
    }
    pb__report_suggest(
        &r, "the seed's slowest-modules view over everything recorded",
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
