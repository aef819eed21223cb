/*
 * compare_render.c - the document of compare.c as text for a terminal, and as rows for a table
 * or CSV (`probing compare -f table|csv`). Reads only the finished document.
 *
 * The text: the verdict on the first line; then what each side is (its window, its steady,
 * warm-up and outlier steps), the notes and the conditions that differ, before any figure; then
 * phases, modules (largest changes first, at most MODULES_SHOWN, and every module that appeared
 * or vanished), throughput, memory and the findings that changed.
 */
#include "compare.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define MODULES_SHOWN 10

static double num(json_t *v)
{
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *str(json_t *v)
{
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A condition's value as text into buf. */
static const char *value_text(json_t *v, char *buf, size_t len)
{
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_integer(v)) snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_number(v)) snprintf(buf, len, "%.6g", json_number_value(v));
    else if (json_is_boolean(v)) snprintf(buf, len, "%s", json_is_true(v) ? "yes" : "no");
    else snprintf(buf, len, "unknown");
    return buf;
}

static void render_side(FILE *out, const char *label, json_t *s)
{
    fprintf(out, "  %s %s: steps %lld-%lld, %lld steady (%lld warm-up, %lld outliers left out), "
                 "%lld detail steps",
            label, str(json_object_get(s, "name")),
            (long long)num(json_object_get(s, "first_step")),
            (long long)num(json_object_get(s, "last_step")),
            (long long)num(json_object_get(s, "steady_steps")),
            (long long)num(json_object_get(s, "warmup_steps")),
            (long long)num(json_object_get(s, "outlier_steps")),
            (long long)num(json_object_get(s, "detail_steps")));
    double batch = num(json_object_get(s, "batch_size"));
    if (isfinite(batch)) fprintf(out, ", batch %.6g", batch);
    fputc('\n', out);
    const char *me = str(json_object_get(s, "modules_error"));
    if (me) fprintf(out, "    modules not read: %s\n", me);
}

static void interval(FILE *out, json_t *o, double unit)
{
    double lo = num(json_object_get(o, "low")), hi = num(json_object_get(o, "high"));
    if (isfinite(lo) && isfinite(hi)) fprintf(out, " (%+.3g to %+.3g)", unit * lo, unit * hi);
    if (json_is_true(json_object_get(o, "significant"))) fputs(" *", out);
}

int pb_compare_render(FILE *out, json_t *doc)
{
    json_t *v = json_object_get(doc, "verdict"), *o;
    size_t i;
    int per_sample = json_is_true(json_object_get(doc, "per_sample"));
    double unit = per_sample ? 1e6 : 1e3;
    const char *unit_name = per_sample ? "us a sample" : "ms a step";
    char b1[64], b2[64];
    fprintf(out, "%s\n", str(json_object_get(v, "text")));
    json_t *sides = json_object_get(doc, "sides");
    render_side(out, "before", json_array_get(sides, 0));
    render_side(out, "after ", json_array_get(sides, 1));
    json_array_foreach(json_object_get(doc, "notes"), i, o) fprintf(out, "note: %s\n", str(o));
    int any = 0;
    json_array_foreach(json_object_get(doc, "conditions"), i, o) {
        if (!json_is_true(json_object_get(o, "differs"))) continue;
        if (!any++) fputs("\nconditions that differ:\n", out);
        fprintf(out, "  %-16s %s -> %s\n", str(json_object_get(o, "name")),
                value_text(json_object_get(o, "before"), b1, sizeof b1),
                value_text(json_object_get(o, "after"), b2, sizeof b2));
    }
    fprintf(out, "\nphases (%s: median before -> after, shift and %.0f %% CI; * significant):\n",
            unit_name, 100 * num(json_object_get(v, "confidence")));
    json_array_foreach(json_object_get(doc, "phases"), i, o) {
        fprintf(out, "  %-22s %9.3f -> %9.3f  %+8.3f", str(json_object_get(o, "name")),
                unit * num(json_object_get(o, "median_before")),
                unit * num(json_object_get(o, "median_after")),
                unit * num(json_object_get(o, "shift")));
        interval(out, o, unit);
        fputc('\n', out);
    }
    json_t *mods = json_object_get(doc, "modules");
    if (json_array_size(mods)) {
        fprintf(out, "\nmodules (self time, %s, on the detail steps; largest changes first):\n",
                unit_name);
        size_t shown = 0, hidden = 0;
        json_array_foreach(mods, i, o) {
            const char *state = str(json_object_get(o, "state"));
            int moved = state && strcmp(state, "both");
            if (shown >= MODULES_SHOWN && !moved) {
                hidden++;
                continue;
            }
            shown++;
            char name[300];
            snprintf(name, sizeof name, "%s %s", str(json_object_get(o, "module")),
                     str(json_object_get(o, "stage")));
            fprintf(out, "  %-30s %9.3f -> %9.3f  %+8.3f", name,
                    unit * num(json_object_get(o, "before")),
                    unit * num(json_object_get(o, "after")),
                    unit * num(json_object_get(o, "change")));
            interval(out, o, unit);
            if (moved) fprintf(out, "  %s", state);
            fputc('\n', out);
        }
        if (hidden) fprintf(out, "  ... %zu more (--json lists them all)\n", hidden);
    }
    json_t *tp = json_object_get(doc, "throughput");
    double t0 = num(json_object_get(tp, "before")), t1 = num(json_object_get(tp, "after"));
    if (isfinite(t0) && isfinite(t1))
        fprintf(out, "\nthroughput: %.4g -> %.4g samples/s (%+.1f %%)\n", t0, t1,
                num(json_object_get(tp, "change_pct")));
    json_t *mem = json_object_get(doc, "memory");
    json_t *peak = json_object_get(mem, "peak_mb"), *growth = json_object_get(mem, "growth_mb_per_step");
    double p0 = num(json_object_get(peak, "before")), p1 = num(json_object_get(peak, "after"));
    double g0 = num(json_object_get(growth, "before")), g1 = num(json_object_get(growth, "after"));
    if (isfinite(p0) || isfinite(p1))
        fprintf(out, "peak memory: %.4g -> %.4g MB\n", p0, p1);
    if (isfinite(g0) || isfinite(g1))
        fprintf(out, "memory growth: %.3g -> %.3g MB a step\n", g0, g1);
    json_t *fl = json_object_get(doc, "findings");
    fprintf(out, "\nfindings of the report: %s\n", json_array_size(fl) ? "" : "no problem appeared, went away or changed severity");
    json_array_foreach(fl, i, o) {
        fprintf(out, "  %-16s %s (%s -> %s): %s\n", str(json_object_get(o, "change")),
                str(json_object_get(o, "id")),
                str(json_object_get(o, "severity_before")) ? str(json_object_get(o, "severity_before")) : "none",
                str(json_object_get(o, "severity_after")) ? str(json_object_get(o, "severity_after")) : "none",
                str(json_object_get(o, "claim")) ? str(json_object_get(o, "claim")) : "");
    }
    return ferror(out) ? -EIO : 0;
}

/* ------------------------------------------------------------------ rows */

static json_t *cell(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

static void add_row(json_t *rows, const char *section, const char *name, double before,
                    double after, double change, double low, double high, const char *unit,
                    const char *note)
{
    json_t *r = json_array();
    json_array_append_new(r, json_string(section));
    json_array_append_new(r, json_string(name));
    json_array_append_new(r, cell(before));
    json_array_append_new(r, cell(after));
    json_array_append_new(r, cell(change));
    json_array_append_new(r, cell(low));
    json_array_append_new(r, cell(high));
    json_array_append_new(r, json_string(unit));
    json_array_append_new(r, note ? json_string(note) : json_null());
    json_array_append_new(rows, r);
}

int pb_compare_rows(json_t *doc, json_t **columns, json_t **rows)
{
    static const char *const names[] = {"section", "name", "before", "after", "change",
                                        "low", "high", "unit", "note"};
    json_t *v = json_object_get(doc, "verdict"), *o;
    size_t i;
    const char *unit = json_is_true(json_object_get(doc, "per_sample")) ? "s/sample" : "s/step";
    *columns = json_array();
    *rows = json_array();
    if (!*columns || !*rows) return -ENOMEM;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        json_array_append_new(*columns, json_string(names[k]));
    add_row(*rows, "verdict", str(json_object_get(v, "metric")),
            num(json_object_get(v, "median_before_s")), num(json_object_get(v, "median_after_s")),
            num(json_object_get(v, "change_pct")), num(json_object_get(v, "low_pct")),
            num(json_object_get(v, "high_pct")), "%", str(json_object_get(v, "change")));
    json_array_foreach(json_object_get(doc, "conditions"), i, o) {
        if (!json_is_true(json_object_get(o, "differs"))) continue;
        char b1[64], b2[64], note[200];
        snprintf(note, sizeof note, "%s -> %s", value_text(json_object_get(o, "before"), b1, sizeof b1),
                 value_text(json_object_get(o, "after"), b2, sizeof b2));
        add_row(*rows, "condition", str(json_object_get(o, "name")), NAN, NAN, NAN, NAN, NAN, "",
                note);
    }
    json_array_foreach(json_object_get(doc, "phases"), i, o)
        add_row(*rows, "phase", str(json_object_get(o, "phase")),
                num(json_object_get(o, "median_before")), num(json_object_get(o, "median_after")),
                num(json_object_get(o, "shift")), num(json_object_get(o, "low")),
                num(json_object_get(o, "high")), unit,
                json_is_true(json_object_get(o, "significant")) ? "significant" : NULL);
    json_array_foreach(json_object_get(doc, "modules"), i, o) {
        char name[300];
        snprintf(name, sizeof name, "%s %s", str(json_object_get(o, "module")),
                 str(json_object_get(o, "stage")));
        const char *state = str(json_object_get(o, "state"));
        add_row(*rows, "module", name, num(json_object_get(o, "before")),
                num(json_object_get(o, "after")), num(json_object_get(o, "change")),
                num(json_object_get(o, "low")), num(json_object_get(o, "high")), unit,
                state && strcmp(state, "both") ? state
                : json_is_true(json_object_get(o, "significant")) ? "significant" : NULL);
    }
    json_t *tp = json_object_get(doc, "throughput");
    add_row(*rows, "throughput", "samples_per_s", num(json_object_get(tp, "before")),
            num(json_object_get(tp, "after")), num(json_object_get(tp, "change_pct")), NAN, NAN,
            "samples/s", NULL);
    json_t *mem = json_object_get(doc, "memory");
    static const char *const mk[] = {"peak_mb", "growth_mb_per_step"};
    for (int k = 0; k < 2; k++) {
        json_t *m = json_object_get(mem, mk[k]);
        add_row(*rows, "memory", mk[k], num(json_object_get(m, "before")),
                num(json_object_get(m, "after")), num(json_object_get(m, "change_pct")), NAN, NAN,
                k ? "MB/step" : "MB", NULL);
    }
    json_array_foreach(json_object_get(doc, "findings"), i, o)
        add_row(*rows, "finding", str(json_object_get(o, "id")), NAN, NAN, NAN, NAN, NAN, "",
                str(json_object_get(o, "change")));
    return 0;
}
