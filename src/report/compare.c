/*
 * compare.c - the analysis of `probing compare` (see compare.h): two sides read as the report
 * reads them, set against each other as one document.
 *
 * How it works, side by side: pb_report_build_window gives each side's report document and its
 * steady steps; the verdict is the shift of log step time (or log time per sample when the batch
 * sizes differ) with its interval (shift.h), called slower or faster only when the interval
 * excludes no change and the estimate is at least the smallest effect; the phases of python.steps
 * and the modules' self time per steady detail step get absolute shifts; the conditions of the
 * runs (program, torch, Python, world size, batch size, and what eval found in a live target)
 * are listed with whether they differ; the findings of the two reports are matched by id.
 */
#include "compare.h"
#include "shift.h"
#include "toolkit.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH_DIFFERS 0.01 /* batch sizes further apart than this: compare per sample */
#define MODULES_SQL_MAX 512

typedef struct side {
    const pb_compare_side *in;
    json_t *report;
    pb_report_steps steps;
    double batch;      /* samples per step (the report's), 0 unknown */
    double scale;      /* 1, or 1 / batch when the comparison is per sample */
    json_t *modules;   /* "module\tstage" -> array of per-step self seconds (detail steps) */
    size_t detail_steps;
    char *modules_error;
} side;


static json_t *real(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

static double num(json_t *v)
{
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static double pct(double log_shift)
{
    return 100.0 * (exp(log_shift) - 1.0);
}

/* ------------------------------------------------------------------ reading a side */

static int read_side(side *s, const pb_compare_side *in, char **error)
{
    char *err = NULL;
    s->in = in;
    if (pb_report_build_window(in->src, &in->window, &s->report, &s->steps, &err)) {
        *error = pb__report_textf("cannot read %s: %s", in->name, err ? err : "unknown error");
        free(err);
        return -1;
    }
    json_t *b = json_object_get(s->report, "baseline");
    s->batch = num(json_object_get(b, "batch_size"));
    if (!(s->batch > 0)) s->batch = 0;
    s->scale = 1;
    return 0;
}

static int has_step(const pb_report_steps *st, long long step, int detail)
{
    size_t lo = 0, hi = st->count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (st->steps[mid].step < step) lo = mid + 1;
        else hi = mid;
    }
    return lo < st->count && st->steps[lo].step == step && (!detail || st->steps[lo].detail);
}

/* Self time per (module, stage) on each steady detail step of the side: one query, rows summed
 * into arrays that hold a value for every detail step (0 where the module did not run). */
static void read_modules(side *s)
{
    char sql[MODULES_SQL_MAX];
    json_t *rows = NULL;
    s->modules = json_object();
    for (size_t i = 0; i < s->steps.count; i++) s->detail_steps += s->steps.steps[i].detail != 0;
    if (!s->detail_steps || !s->modules) return;
    snprintf(sql, sizeof sql,
             "SELECT step, module, stage, SUM(duration) AS self FROM python.torch_trace WHERE "
             "step BETWEEN %lld AND %lld GROUP BY step, module, stage ORDER BY step",
             s->steps.steps[0].step, s->steps.steps[s->steps.count - 1].step);
    if (s->in->src->query(s->in->src->ctx, sql, &rows, &s->modules_error)) return;
    /* index of each detail step among the detail steps */
    long long *index = calloc(s->steps.count, sizeof *index);
    size_t n = 0, i;
    for (size_t k = 0; index && k < s->steps.count; k++)
        if (s->steps.steps[k].detail) index[n++] = s->steps.steps[k].step;
    json_t *row;
    json_array_foreach(rows, i, row) {
        long long step = (long long)num(json_object_get(row, "step"));
        const char *module = json_string_value(json_object_get(row, "module"));
        const char *stage = json_string_value(json_object_get(row, "stage"));
        double self = num(json_object_get(row, "self"));
        if (!index || !module || !stage || !isfinite(self) || !has_step(&s->steps, step, 1))
            continue;
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (index[mid] < step) lo = mid + 1;
            else hi = mid;
        }
        char key[600];
        snprintf(key, sizeof key, "%s\t%s", module, stage);
        json_t *arr = json_object_get(s->modules, key);
        if (!arr) {
            arr = json_array();
            for (size_t k = 0; k < n; k++) json_array_append_new(arr, json_real(0));
            json_object_set_new(s->modules, key, arr);
        }
        json_t *cell = json_array_get(arr, lo);
        json_real_set(cell, json_real_value(cell) + self * s->scale);
    }
    free(index);
    json_decref(rows);
}

/* ------------------------------------------------------------------ conditions */

/* The program a command line runs: its first word ending in .py, else its first word. */
static void program_of(const char *cmdline, char *out, size_t len)
{
    const char *p = cmdline ? cmdline : "";
    snprintf(out, len, "%s", "");
    const char *first = NULL;
    size_t first_len = 0;
    while (*p) {
        while (*p == ' ') p++;
        const char *w = p;
        while (*p && *p != ' ') p++;
        size_t wl = (size_t)(p - w);
        if (!wl) break;
        if (!first) first = w, first_len = wl;
        if (wl > 3 && !strncmp(p - 3, ".py", 3)) {
            snprintf(out, len, "%.*s", (int)wl, w);
            return;
        }
    }
    if (first) snprintf(out, len, "%.*s", (int)first_len, first);
}

static void add_condition(json_t *list, const char *name, json_t *before, json_t *after)
{
    json_t *c = json_object();
    int differs = !json_equal(before, after);
    if (json_is_number(before) && json_is_number(after)) {
        double x = json_number_value(before), y = json_number_value(after);
        differs = fabs(x - y) > BATCH_DIFFERS * fmax(fabs(x), fabs(y));
    }
    json_object_set_new(c, "name", json_string(name));
    json_object_set_new(c, "before", before ? before : json_null());
    json_object_set_new(c, "after", after ? after : json_null());
    json_object_set_new(c, "differs", json_boolean(differs));
    json_array_append_new(list, c);
}

static json_t *info_field(const side *s, const char *key)
{
    json_t *v = json_object_get(s->in->src->info, key);
    return v ? json_incref(v) : NULL;
}

static json_t *eval_field(const side *s, const char *key)
{
    json_t *v = json_object_get(s->in->src->conditions, key);
    return v ? json_incref(v) : NULL;
}

static json_t *conditions(const side *a, const side *b, int *same_program)
{
    json_t *list = json_array();
    char pa[512], pb[512];
    program_of(json_string_value(json_object_get(a->in->src->info, "cmdline")), pa, sizeof pa);
    program_of(json_string_value(json_object_get(b->in->src->info, "cmdline")), pb, sizeof pb);
    *same_program = !pa[0] || !pb[0] || !strcmp(pa, pb);
    add_condition(list, "program", pa[0] ? json_string(pa) : NULL, pb[0] ? json_string(pb) : NULL);
    add_condition(list, "command line", info_field(a, "cmdline"), info_field(b, "cmdline"));
    add_condition(list, "torch", info_field(a, "torch"), info_field(b, "torch"));
    add_condition(list, "python", info_field(a, "python"), info_field(b, "python"));
    add_condition(list, "world size", info_field(a, "world_size"), info_field(b, "world_size"));
    add_condition(list, "batch size", a->batch > 0 ? json_real(a->batch) : NULL,
                  b->batch > 0 ? json_real(b->batch) : NULL);
    static const char *const eval_keys[][2] = {
        {"device", "device"},           {"param_dtype", "parameter dtype"},
        {"parameters", "parameters"},   {"threads", "threads"},
        {"autocast", "autocast dtype"}, {"compiled", "compiled"},
        {"num_workers", "loader workers"}};
    for (size_t k = 0; k < sizeof eval_keys / sizeof eval_keys[0]; k++) {
        json_t *x = eval_field(a, eval_keys[k][0]), *y = eval_field(b, eval_keys[k][0]);
        if (x || y) add_condition(list, eval_keys[k][1], x, y);
    }
    return list;
}

/* ------------------------------------------------------------------ figures */

/* The values of field f of the side's timing steps into v (scaled); f < 0: wall. Returns n. */
static size_t values(const side *s, int f, int logs, double *v)
{
    size_t n = 0;
    for (size_t i = 0; i < s->steps.count; i++) {
        const pb_report_step *st = &s->steps.steps[i];
        if (!st->timing) continue;
        double scale = s->scale;
        if (s->scale != 1 && st->samples > 0) scale = 1.0 / st->samples;
        double x = (f < 0 ? st->wall : st->phase[f]) * scale;
        if (logs) {
            if (!(x > 0)) continue;
            x = log(x);
        }
        v[n++] = x;
    }
    return n;
}

static size_t timing_count(const side *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->steps.count; i++) n += s->steps.steps[i].timing != 0;
    return n;
}

/* A shift as an object: medians, shift and interval, counts, whether it is significant. */
static json_t *shift_object(const pb_shift *sh, int rc)
{
    json_t *o = json_object();
    json_object_set_new(o, "median_before", real(sh->median_a));
    json_object_set_new(o, "median_after", real(sh->median_b));
    json_object_set_new(o, "shift", rc ? json_null() : real(sh->estimate));
    json_object_set_new(o, "low", rc ? json_null() : real(sh->low));
    json_object_set_new(o, "high", rc ? json_null() : real(sh->high));
    json_object_set_new(o, "steps_before", json_integer((json_int_t)sh->n_a));
    json_object_set_new(o, "steps_after", json_integer((json_int_t)sh->n_b));
    json_object_set_new(o, "significant", json_boolean(!rc && (sh->low > 0 || sh->high < 0)));
    return o;
}

static json_t *phases(const side *a, const side *b, double confidence, double *va, double *vb)
{
    json_t *list = json_array();
    for (int p = 0; p < PB_PHASE_COUNT; p++) {
        size_t na = values(a, p, 0, va), nb = values(b, p, 0, vb);
        double sum = 0;
        for (size_t i = 0; i < na; i++) sum += fabs(va[i]);
        for (size_t i = 0; i < nb; i++) sum += fabs(vb[i]);
        if (!(sum > 0)) continue; /* a phase neither side has */
        pb_shift sh;
        int rc = pb_shift_estimate(va, na, vb, nb, confidence, &sh);
        json_t *o = shift_object(&sh, rc);
        json_object_set_new(o, "phase", json_string(pb_phases[p].column));
        json_object_set_new(o, "name", json_string(pb_phases[p].name));
        json_array_append_new(list, o);
    }
    return list;
}

static int cmp_change(const void *x, const void *y)
{
    json_t *a = *(json_t *const *)x, *b = *(json_t *const *)y;
    double da = fabs(num(json_object_get(a, "change"))), db = fabs(num(json_object_get(b, "change")));
    if (da != db) return da < db ? 1 : -1;
    return strcmp(json_string_value(json_object_get(a, "module")),
                  json_string_value(json_object_get(b, "module")));
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The values of arr into tmp, thinned evenly to MODULE_SAMPLE (a module's shift is one of many
 * figures: hundreds of modules times n*m differences must stay quick); returns the count. */
#define MODULE_SAMPLE 200
static size_t module_values(json_t *arr, double *tmp)
{
    size_t n = json_array_size(arr), k = n > MODULE_SAMPLE ? MODULE_SAMPLE : n;
    for (size_t i = 0; i < k; i++)
        tmp[i] = json_real_value(json_array_get(arr, n == k ? i : (size_t)((double)i * (double)n / (double)k)));
    return k;
}

static double median_array(json_t *arr, double *tmp)
{
    size_t n = module_values(arr, tmp);
    if (!n) return NAN;
    qsort(tmp, n, sizeof *tmp, cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

/* One row per (module, stage) of either side, largest change first. */
static json_t *modules(const side *a, const side *b, double confidence, double *va, double *vb)
{
    json_t *all = json_object(), *list = json_array();
    const char *key;
    json_t *v;
    json_object_foreach(a->modules, key, v) json_object_set(all, key, json_true());
    json_object_foreach(b->modules, key, v) json_object_set(all, key, json_true());
    size_t n = json_object_size(all), k = 0;
    json_t **rows = calloc(n + 1, sizeof *rows);
    json_object_foreach(all, key, v) {
        if (!rows) break;
        json_t *xa = json_object_get(a->modules, key), *xb = json_object_get(b->modules, key);
        json_t *o = json_object();
        const char *tab = strchr(key, '\t');
        json_object_set_new(o, "module", json_stringn(key, (size_t)(tab - key)));
        json_object_set_new(o, "stage", json_string(tab + 1));
        const char *state = !xa ? "appeared" : !xb ? "vanished" : "both";
        json_object_set_new(o, "state", json_string(state));
        double ma = xa ? median_array(xa, va) : 0, mb = xb ? median_array(xb, vb) : 0;
        json_object_set_new(o, "before", real(ma));
        json_object_set_new(o, "after", real(mb));
        if (xa && xb) {
            size_t na = module_values(xa, va), nb = module_values(xb, vb);
            pb_shift sh;
            int rc = pb_shift_estimate(va, na, vb, nb, confidence, &sh);
            json_object_set_new(o, "change", real(rc ? mb - ma : sh.estimate));
            json_object_set_new(o, "low", rc ? json_null() : real(sh.low));
            json_object_set_new(o, "high", rc ? json_null() : real(sh.high));
            json_object_set_new(o, "significant", json_boolean(!rc && (sh.low > 0 || sh.high < 0)));
        } else {
            json_object_set_new(o, "change", real(mb - ma));
            json_object_set_new(o, "low", json_null());
            json_object_set_new(o, "high", json_null());
            json_object_set_new(o, "significant", json_boolean(0));
        }
        rows[k++] = o;
    }
    if (rows) qsort(rows, k, sizeof *rows, cmp_change);
    for (size_t i = 0; rows && i < k; i++) json_array_append_new(list, rows[i]);
    free(rows);
    json_decref(all);
    return list;
}

/* ------------------------------------------------------------------ findings and the rest */

static const char *finding_severity(json_t *report, const char *id, json_t **claim)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(report, "findings"), i, f) {
        if (strcmp(json_string_value(json_object_get(f, "id")), id)) continue;
        if (claim) *claim = json_object_get(f, "claim");
        return json_string_value(json_object_get(f, "severity"));
    }
    return NULL;
}

static int problem(const char *severity)
{
    return severity && (!strcmp(severity, "warning") || !strcmp(severity, "critical"));
}

/* The findings that appeared, went away or changed severity (skipped ones left out: they say
 * what a side could not read, which the missing lists hold). */
static json_t *findings(const side *a, const side *b)
{
    json_t *list = json_array(), *seen = json_object();
    const side *sides[2] = {a, b};
    for (int s = 0; s < 2; s++) {
        size_t i;
        json_t *f;
        json_array_foreach(json_object_get(sides[s]->report, "findings"), i, f) {
            const char *id = json_string_value(json_object_get(f, "id"));
            if (!id || json_object_get(seen, id)) continue;
            json_object_set_new(seen, id, json_true());
            json_t *ca = NULL, *cb = NULL;
            const char *sa = finding_severity(a->report, id, &ca),
                       *sb = finding_severity(b->report, id, &cb);
            if ((sa && !strcmp(sa, "skipped")) || (sb && !strcmp(sb, "skipped"))) continue;
            const char *change = !sa ? "appeared" : !sb ? "went away"
                                 : strcmp(sa, sb)   ? "changed severity" : NULL;
            if (!change || (!problem(sa) && !problem(sb))) continue;
            json_t *o = json_object();
            json_object_set_new(o, "id", json_string(id));
            json_object_set_new(o, "change", json_string(change));
            json_object_set_new(o, "severity_before", sa ? json_string(sa) : json_null());
            json_object_set_new(o, "severity_after", sb ? json_string(sb) : json_null());
            json_object_set(o, "claim", cb ? cb : ca ? ca : json_null());
            json_array_append_new(list, o);
        }
    }
    json_decref(seen);
    return list;
}

static double growth_of(json_t *report)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(report, "findings"), i, f) {
        if (strcmp(json_string_value(json_object_get(f, "id")), "memory_growth")) continue;
        return num(json_object_get(json_object_get(f, "numbers"), "slope_mb_per_step"));
    }
    return NAN;
}

static json_t *pair(double before, double after)
{
    json_t *o = json_object();
    json_object_set_new(o, "before", real(before));
    json_object_set_new(o, "after", real(after));
    json_object_set_new(o, "change_pct", real(before > 0 ? 100 * (after / before - 1) : NAN));
    return o;
}

static json_t *side_object(const side *s)
{
    json_t *o = json_object();
    const pb_report_window *w = &s->in->window;
    json_object_set_new(o, "name", json_string(s->in->name));
    json_object_set_new(o, "first_step", s->steps.first >= 0 ? json_integer(s->steps.first) : json_null());
    json_object_set_new(o, "last_step", s->steps.last >= 0 ? json_integer(s->steps.last) : json_null());
    json_object_set_new(o, "window_first", w->first >= 0 ? json_integer(w->first) : json_null());
    json_object_set_new(o, "window_last", w->last >= 0 ? json_integer(w->last) : json_null());
    json_object_set_new(o, "window_last_n", w->last_n > 0 ? json_integer(w->last_n) : json_null());
    json_object_set_new(o, "steps_in_window", json_integer((json_int_t)s->steps.in_window));
    json_object_set_new(o, "warmup_steps", json_integer((json_int_t)s->steps.warmup));
    json_object_set_new(o, "outlier_steps", json_integer((json_int_t)s->steps.outliers));
    json_object_set_new(o, "steady_steps", json_integer((json_int_t)timing_count(s)));
    json_object_set_new(o, "detail_steps", json_integer((json_int_t)s->detail_steps));
    json_object_set_new(o, "batch_size", s->batch > 0 ? json_real(s->batch) : json_null());
    json_object_set_new(o, "note", s->in->note ? json_string(s->in->note) : json_null());
    if (s->modules_error) json_object_set_new(o, "modules_error", json_string(s->modules_error));
    return o;
}

/* ------------------------------------------------------------------ the verdict */

/* The phase (index into the phases list) that moved most in the verdict's direction. */
static json_t *largest(json_t *list, double direction, const char *stage_of_phase)
{
    json_t *best = NULL, *o;
    size_t i;
    double most = 0;
    json_array_foreach(list, i, o) {
        const char *stage = json_string_value(json_object_get(o, "stage"));
        if (stage_of_phase && (!stage || strcmp(stage, stage_of_phase))) continue;
        double d = num(json_object_get(o, json_object_get(o, "shift") ? "shift" : "change"));
        if (isfinite(d) && d * direction > most) most = d * direction, best = o;
    }
    return best;
}

static const char *stage_of(const char *phase)
{
    return !strcmp(phase, "forward") ? "forward" : !strcmp(phase, "backward") ? "backward"
           : !strcmp(phase, "optimizer") ? "step" : NULL;
}

static json_t *verdict(const side *a, const side *b, const pb_compare_options *o, int per_sample,
                       json_t *phase_list, json_t *module_list, double *va, double *vb)
{
    size_t na = values(a, -1, 1, va), nb = values(b, -1, 1, vb);
    pb_shift sh;
    int rc = pb_shift_estimate(va, na, vb, nb, o->confidence, &sh);
    json_t *v = json_object();
    double est = pct(sh.estimate), low = pct(sh.low), high = pct(sh.high);
    const char *change = rc ? "unknown"
                         : sh.low > 0 && est >= o->min_effect_pct ? "slower"
                         : sh.high < 0 && -est >= o->min_effect_pct ? "faster" : "none";
    const char *metric = per_sample ? "time per sample" : "step time";
    json_object_set_new(v, "change", json_string(change));
    json_object_set_new(v, "metric", json_string(metric));
    json_object_set_new(v, "change_pct", rc ? json_null() : real(est));
    json_object_set_new(v, "low_pct", rc ? json_null() : real(low));
    json_object_set_new(v, "high_pct", rc ? json_null() : real(high));
    json_object_set_new(v, "median_before_s", real(exp(sh.median_a)));
    json_object_set_new(v, "median_after_s", real(exp(sh.median_b)));
    json_object_set_new(v, "steps_before", json_integer((json_int_t)sh.n_a));
    json_object_set_new(v, "steps_after", json_integer((json_int_t)sh.n_b));
    json_object_set_new(v, "confidence", json_real(o->confidence));
    json_object_set_new(v, "min_effect_pct", json_real(o->min_effect_pct));
    json_object_set_new(v, "method", json_string("Hodges-Lehmann shift of log step time, "
                                                 "Mann-Whitney interval"));
    double unit = per_sample ? 1e6 : 1e3;
    const char *unit_name = per_sample ? "us" : "ms", *per = per_sample ? "a sample" : "a step";
    char head[512], where[512] = "";
    int ci = (int)lround(100 * o->confidence);
    if (rc) {
        snprintf(head, sizeof head, "no verdict: too few steady steps (%zu and %zu)", sh.n_a, sh.n_b);
    } else if (!strcmp(change, "none")) {
        int below = sh.low > 0 || sh.high < 0;
        snprintf(head, sizeof head,
                 "no significant change: %+.1f %% (%d %% CI %+.1f to %+.1f %%%s; median %.3g -> "
                 "%.3g %s, %zu and %zu steps)",
                 est, ci, low, high, below ? ", below the smallest effect" : "",
                 unit * exp(sh.median_a), unit * exp(sh.median_b), unit_name, sh.n_a, sh.n_b);
    } else {
        snprintf(head, sizeof head,
                 "%s: %s %+.0f %% (median %.3g -> %.3g %s, %d %% CI %+.0f to %+.0f %%, %zu and "
                 "%zu steps)",
                 change, metric, est, unit * exp(sh.median_a), unit * exp(sh.median_b),
                 unit_name, ci, low, high, sh.n_a, sh.n_b);
        double dir = !strcmp(change, "slower") ? 1 : -1;
        json_t *ph = largest(phase_list, dir, NULL);
        if (ph) {
            const char *col = json_string_value(json_object_get(ph, "phase"));
            json_t *mod = largest(module_list, dir, stage_of(col));
            if (!mod) mod = largest(module_list, dir, NULL);
            json_object_set(v, "phase", json_object_get(ph, "phase"));
            if (mod) {
                json_object_set(v, "module", json_object_get(mod, "module"));
                snprintf(where, sizeof where, ", mostly %s: %s %+.3g %s %s", col,
                         json_string_value(json_object_get(mod, "module")),
                         unit * num(json_object_get(mod, "change")), unit_name, per);
            } else {
                snprintf(where, sizeof where, ", mostly %s %+.3g %s %s", col,
                         unit * num(json_object_get(ph, "shift")), unit_name, per);
            }
        }
    }
    char *text = pb__report_textf("%s%s", head, where);
    json_object_set_new(v, "text", json_string(text ? text : head));
    free(text);
    return v;
}

int pb_compare_build(const pb_compare_side *before, const pb_compare_side *after,
                     const pb_compare_options *options, json_t **doc, char **error)
{
    side a, b;
    double *va = NULL, *vb = NULL;
    int rc = -1, same_program = 1;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    *doc = NULL;
    *error = NULL;
    if (read_side(&a, before, error) || read_side(&b, after, error)) goto done;
    size_t ta = timing_count(&a), tb = timing_count(&b);
    if (ta < PB_COMPARE_MIN_STEPS || tb < PB_COMPARE_MIN_STEPS) {
        const side *s = ta < PB_COMPARE_MIN_STEPS ? &a : &b;
        size_t t = s == &a ? ta : tb;
        *error = pb__report_textf("%s has %zu steady step%s (of %zu complete steps in its window, %zu "
                       "warm-up, %zu outliers): compare needs %d on each side; record more "
                       "steps or widen the window",
                       s->in->name, t, t == 1 ? "" : "s", s->steps.in_window, s->steps.warmup,
                       s->steps.outliers, PB_COMPARE_MIN_STEPS);
        rc = PB_ECOMPARE_STEPS;
        goto done;
    }
    int per_sample = a.batch > 0 && b.batch > 0 &&
                     fabs(a.batch - b.batch) > BATCH_DIFFERS * fmax(a.batch, b.batch);
    if (per_sample) {
        a.scale = 1 / a.batch;
        b.scale = 1 / b.batch;
    }
    read_modules(&a);
    read_modules(&b);
    size_t cap = (a.steps.count > b.steps.count ? a.steps.count : b.steps.count) + 1;
    va = malloc(cap * sizeof *va);
    vb = malloc(cap * sizeof *vb);
    json_t *d = json_object();
    if (!va || !vb || !d) {
        json_decref(d);
        *error = pb__report_textf("out of memory");
        goto done;
    }
    json_t *cond = conditions(&a, &b, &same_program);
    json_t *notes = json_array();
    if (before->note) json_array_append_new(notes, json_string(before->note));
    if (after->note) json_array_append_new(notes, json_string(after->note));
    if (!same_program) {
        char *t = pb__report_textf("different programs (%s, %s): the step time and phases compare the "
                        "runs as wholes; modules compare where both have them",
                        json_string_value(json_object_get(json_array_get(cond, 0), "before")),
                        json_string_value(json_object_get(json_array_get(cond, 0), "after")));
        json_array_append_new(notes, json_string(t ? t : "different programs"));
        free(t);
    }
    if (per_sample) {
        char *t = pb__report_textf("batch sizes differ (%.6g, %.6g): every figure is per sample", a.batch,
                        b.batch);
        json_array_append_new(notes, json_string(t ? t : "batch sizes differ: per sample"));
        free(t);
    }
    json_t *ph = phases(&a, &b, options->confidence, va, vb);
    size_t mcap = (a.detail_steps > b.detail_steps ? a.detail_steps : b.detail_steps) + 1;
    double *ma = malloc(mcap * sizeof *ma), *mb = malloc(mcap * sizeof *mb);
    json_t *mods = ma && mb ? modules(&a, &b, options->confidence, ma, mb) : json_array();
    free(ma);
    free(mb);
    json_object_set_new(d, "version", json_integer(1));
    json_object_set_new(d, "verdict", verdict(&a, &b, options, per_sample, ph, mods, va, vb));
    json_t *sides = json_array();
    json_array_append_new(sides, side_object(&a));
    json_array_append_new(sides, side_object(&b));
    json_object_set_new(d, "sides", sides);
    json_object_set_new(d, "per_sample", json_boolean(per_sample));
    json_object_set_new(d, "same_program", json_boolean(same_program));
    json_object_set_new(d, "conditions", cond);
    json_object_set_new(d, "notes", notes);
    json_object_set_new(d, "unit", json_string(per_sample ? "seconds per sample" : "seconds per step"));
    json_object_set_new(d, "phases", ph);
    json_object_set_new(d, "modules", mods);
    json_t *ba = json_object_get(a.report, "baseline"), *bb = json_object_get(b.report, "baseline");
    json_object_set_new(d, "throughput", pair(num(json_object_get(ba, "samples_per_s")),
                                              num(json_object_get(bb, "samples_per_s"))));
    json_t *mem = json_object();
    json_object_set_new(mem, "peak_mb",
                        pair(num(json_object_get(json_object_get(a.report, "memory"), "peak_mb")),
                             num(json_object_get(json_object_get(b.report, "memory"), "peak_mb"))));
    json_object_set_new(mem, "growth_mb_per_step", pair(growth_of(a.report), growth_of(b.report)));
    json_object_set_new(d, "memory", mem);
    json_object_set_new(d, "findings", findings(&a, &b));
    *doc = d;
    rc = 0;
done:
    free(va);
    free(vb);
    side *both[2] = {&a, &b};
    for (int s = 0; s < 2; s++) {
        json_decref(both[s]->report);
        json_decref(both[s]->modules);
        pb_report_steps_free(&both[s]->steps);
        free(both[s]->modules_error);
    }
    return rc;
}
