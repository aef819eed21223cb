/*
 * baseline.c - phase 1 of the report (docs/report.md, "Baseline" and "Slow steps"): what one step
 * costs, measured well, and the steady steps that do not fit.
 *
 * The baseline section gives the step-time statistics of the window's timing steps (steady steps;
 * not probing's detail steps when enough summary steps remain), the throughput (samples per
 * second from python.steps.samples, the DataLoader's batches, or the batch size eval found) and
 * the measurement conditions. The slow-steps rule finds the steady steps over SLOW_FACTOR x the
 * median, whether they come back with a period (a checkpoint or an evaluation every N steps),
 * their share of the wall time, and which part of the step grew in them.
 */
#include "rules.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOW_FACTOR 1.8          /* a steady step this much above the median counts as slow */
#define PERIOD_MIN 3             /* slow steps on the period's lattice needed */
#define PERIOD_COVER 0.6         /* share of the period's steps in the window that are slow */
#define PERIOD_SUB_COVER 0.4     /* ... for a divisor of the period found */
#define SLOW_WARNING_SHARE 0.25  /* slow steps' share of the wall time worth a warning */
#define SLOW_CRITICAL_SHARE 0.50 /* ... that makes them the headline */

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

/* Samples per step: python.steps.samples (what the loop consumed each step, gradient
 * accumulation and several loaders included), else the DataLoader's batches in the window, else
 * the batch size eval found. Throughput is training samples over the time of the same steps.
 *
 * A step that also ran an evaluation (Lightning's validation every N batches, a loop's own) took
 * the evaluation's batches too: its samples are far above the median step's. The batch size is
 * the median of the steps' samples, and such a step counts as that many training samples
 * (*extra_steps says how many steps were counted so), so the evaluation's samples neither
 * inflate the batch size nor the throughput, while its time stays in the wall time. */
#define EXTRA_SAMPLES_FACTOR 1.5 /* a step with over 1.5x the median samples took extra batches */

static double batch_size_fallback(pb__report *r, const char **source);

static double batch_size(pb__report *r, const char **source, double *per_s, size_t *extra_steps)
{
    double samples = 0, wall = 0;
    size_t n = 0;
    *per_s = 0;
    *extra_steps = 0;
    double *v = malloc((r->count + 1) * sizeof *v);
    for (size_t i = r->warmup; v && i < r->count; i++)
        if (pb__report_timing_step(r, i) && r->steps[i].samples > 0) v[n++] = r->steps[i].samples;
    double median = 0;
    if (n) {
        qsort(v, n, sizeof *v, pb__report_cmp_double);
        median = pb__report_percentile(v, n, 50);
    }
    free(v);
    n = 0;
    for (size_t i = r->warmup; i < r->count; i++) {
        if (!pb__report_timing_step(r, i)) continue;
        double s = r->steps[i].samples;
        if (median > 0 && s > EXTRA_SAMPLES_FACTOR * median) {
            s = median;
            (*extra_steps)++;
        }
        samples += s;
        wall += r->steps[i].wall;
        n++;
    }
    if (samples > 0 && wall > 0) {
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

/* The "baseline" section: where the per-step figures come from, the window, warm-up and detail
 * steps, the step-time statistics of the timing steps, throughput, the measurement conditions;
 * and the first_iteration finding when warm-up steps were left out. */
void pb__report_baseline(pb__report *r)
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
        double d = pb__report_median_wall(r->steps, r->warmup, r->count, 1),
               m = pb__report_median_wall(r->steps, r->warmup, r->count, 0);
        json_object_set_new(b, "detail_median_s", pb__report_real(d));
        json_object_set_new(b, "summary_median_s", pb__report_real(m));
    }
    json_object_set_new(b, "sql",
                        json_string(pb__report_steps_sql(r)));
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
        size_t extra_steps;
        double batch = batch_size(r, &source, &per_s, &extra_steps);
        if (batch > 0) {
            json_object_set_new(b, "batch_size", pb__report_real(batch));
            json_object_set_new(b, "batch_size_source", json_string(source));
            /* steps that took extra batches (an evaluation's), counted at the training batch */
            json_object_set_new(b, "steps_with_extra_samples",
                                json_integer((json_int_t)extra_steps));
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
            /* torch.compile's first compiles are most of a compiled model's warm-up: say so */
            double compiling = 0;
            for (size_t i = 0; i < r->warmup; i++) compiling += r->steps[i].compile_time;
            char compiled[160] = "";
            if (compiling > 0) {
                json_object_set_new(nums, "warmup_compile_s", pb__report_real(compiling));
                snprintf(compiled, sizeof compiled,
                         "; torch.compile compiled for %.3g s in %s (python.steps.compile_time)",
                         compiling, r->warmup == 1 ? "it" : "them");
            }
            pb__report_finding(
                r, "first_iteration", "baseline", "info",
                pb__report_textf(
                    "first step took %.1fx the steady median; %zu warm-up step%s left out "
                    "of the statistics%s",
                    r->steps[0].wall / median, r->warmup, r->warmup == 1 ? "" : "s", compiled),
                nums, pb__report_steps_sql(r),
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

/* The period of the slow steps (window indexes slow[0..nslow), in step order): *period 0 when
 * they do not repeat, else the period and *phase, the step number modulo it. */
static void find_period(const pb__report *r, const size_t *slow, size_t nslow, long long *period_out,
                        long long *phase_out)
{
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
    *period_out = period;
    *phase_out = phase;
}

/* delta[part] for the parts of the step (forward, backward, optimizer, data, communication,
 * other): how much longer each took in the slow steps (window indexes slow[0..nslow), in step
 * order) than in the other timing steps of the same kind. Returns 0, or -1 out of memory. */
static int what_grew(const pb__report *r, int kind, const size_t *slow, size_t nslow,
                     double delta[6])
{
    /* Which part of the step grew: the median of each part over those steps minus its median
     * over the other steps (medians: a descheduled step on a busy machine must not decide). */
    size_t cap = r->count + 1;
    double *sv = malloc(cap * sizeof *sv), *rv = malloc(cap * sizeof *rv);
    if (!sv || !rv) {
        free(sv);
        free(rv);
        return -1;
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
    return 0;
}

/* How many samples more the slow steps (window indexes slow[0..nslow)) took than the other
 * timing steps of the same kind, medians of python.steps.samples; 0 unless over
 * EXTRA_SAMPLES_FACTOR x the others' median (extra batches: an evaluation's loader). */
static double extra_samples_of(const pb__report *r, int kind, const size_t *slow, size_t nslow)
{
    size_t cap = r->count + 1, ns = 0, nr = 0, at = 0;
    double *sv = malloc(cap * sizeof *sv), *rv = malloc(cap * sizeof *rv), extra = 0;
    for (size_t i = r->warmup; sv && rv && i < r->count; i++) {
        const pb__step_row *s = &r->steps[i];
        if (!pb__report_timing_step(r, i) || (kind >= 0 && s->detail != kind)) continue;
        while (at < nslow && slow[at] < i) at++;
        if (at < nslow && slow[at] == i) sv[ns++] = s->samples;
        else rv[nr++] = s->samples;
    }
    if (ns && nr) {
        qsort(sv, ns, sizeof *sv, pb__report_cmp_double);
        qsort(rv, nr, sizeof *rv, pb__report_cmp_double);
        double slow_median = pb__report_percentile(sv, ns, 50), rest = pb__report_percentile(rv, nr, 50);
        if (rest > 0 && slow_median > EXTRA_SAMPLES_FACTOR * rest) extra = slow_median - rest;
    }
    free(sv);
    free(rv);
    return extra;
}

/* The machine's, not the job's: in the slow steps (window indexes slow[0..nslow)) the training
 * thread got under MACHINE_CPU_SHARE of the CPU time per second of wall time it got in the
 * other timing steps of the same kind, and the kernel descheduled it for other threads more
 * often (python.steps.cpu and involuntary_switches, medians). A step blocked in its own waits
 * (data, I/O, a sleep, a lock) also runs less, but gives up the CPU itself: its involuntary
 * switches do not grow. m receives {slow share, other share, slow switches, other switches}.
 * Returns 1 when the evidence is there. */
#define MACHINE_CPU_SHARE 0.5

static int descheduled(const pb__report *r, int kind, const size_t *slow, size_t nslow,
                       double m[4])
{
    size_t cap = r->count + 1, ns = 0, nr = 0, at = 0;
    double *v[4];
    int found = 0;
    for (int k = 0; k < 4; k++) v[k] = malloc(cap * sizeof *v[k]);
    memset(m, 0, 4 * sizeof *m);
    for (size_t i = r->warmup; v[0] && v[1] && v[2] && v[3] && i < r->count; i++) {
        const pb__step_row *s = &r->steps[i];
        if (!pb__report_timing_step(r, i) || (kind >= 0 && s->detail != kind)) continue;
        while (at < nslow && slow[at] < i) at++;
        if (!s->has_cpu || !(s->wall > 0)) continue;
        if (at < nslow && slow[at] == i) {
            v[0][ns] = s->cpu / s->wall;
            v[2][ns++] = s->switches;
        } else {
            v[1][nr] = s->cpu / s->wall;
            v[3][nr++] = s->switches;
        }
    }
    if (ns && nr >= 3) {
        for (int k = 0; k < 4; k++) {
            size_t c = k % 2 ? nr : ns;
            qsort(v[k], c, sizeof *v[k], pb__report_cmp_double);
            m[k] = pb__report_percentile(v[k], c, 50);
        }
        found = m[1] > 0 && m[0] < MACHINE_CPU_SHARE * m[1] && m[2] > m[3];
    }
    for (int k = 0; k < 4; k++) free(v[k]);
    return found;
}

/* An evaluation in many of the steps (every 2nd, every 3rd) raises the median with it, so its
 * steps are not slow against the median and the slow-step rule is silent (issue 50: evaluation
 * every 2 steps, "primary finding: none"). The steps that took over EXTRA_SAMPLES_FACTOR x the
 * lower quartile of the steps' samples (the training batch, however many steps evaluate) are
 * compared with the others: when they take over EVAL_WALL_FACTOR x as long and the forward holds
 * at least half of the difference (an evaluation is forwards), it is a finding, with its share
 * of the wall time as the slow steps' severity. */
#define EVAL_WALL_FACTOR 1.3
#define EVAL_MIN_STEPS 3

static void frequent_evaluation(pb__report *r, int kind)
{
    size_t cap = r->count + 1, n = 0, ne = 0, no = 0;
    double *smp = malloc(cap * sizeof *smp), *we = malloc(cap * sizeof *we),
           *wo = malloc(cap * sizeof *wo), *fe = malloc(cap * sizeof *fe),
           *fo = malloc(cap * sizeof *fo);
    if (!smp || !we || !wo || !fe || !fo) goto done;
    for (size_t i = r->warmup; i < r->count; i++)
        if (pb__report_timing_step(r, i) && (kind < 0 || r->steps[i].detail == kind) &&
            r->steps[i].samples > 0)
            smp[n++] = r->steps[i].samples;
    if (n < 2 * EVAL_MIN_STEPS) goto done;
    qsort(smp, n, sizeof *smp, pb__report_cmp_double);
    double batch = pb__report_percentile(smp, n, 25), total = 0, extra_samples = 0;
    long long first = -1, gap = 0, prev = -1;
    int regular = 1;
    for (size_t i = r->warmup; i < r->count; i++) {
        const pb__step_row *s = &r->steps[i];
        if (!pb__report_timing_step(r, i) || (kind >= 0 && s->detail != kind)) continue;
        total += s->wall;
        if (s->samples > EXTRA_SAMPLES_FACTOR * batch) {
            we[ne] = s->wall;
            fe[ne++] = s->forward;
            extra_samples += s->samples - batch;
            if (first < 0) first = s->step;
            if (prev >= 0) {
                if (!gap) gap = s->step - prev;
                else if (s->step - prev != gap) regular = 0;
            }
            prev = s->step;
        } else {
            wo[no] = s->wall;
            fo[no++] = s->forward;
        }
    }
    if (ne < EVAL_MIN_STEPS || no < EVAL_MIN_STEPS || !(total > 0)) goto done;
    qsort(we, ne, sizeof *we, pb__report_cmp_double);
    qsort(wo, no, sizeof *wo, pb__report_cmp_double);
    qsort(fe, ne, sizeof *fe, pb__report_cmp_double);
    qsort(fo, no, sizeof *fo, pb__report_cmp_double);
    double w_eval = pb__report_percentile(we, ne, 50), w_other = pb__report_percentile(wo, no, 50);
    double more = w_eval - w_other;
    double fwd_more = pb__report_percentile(fe, ne, 50) - pb__report_percentile(fo, no, 50);
    if (!(w_other > 0) || !(w_eval > EVAL_WALL_FACTOR * w_other) || !(fwd_more >= 0.5 * more))
        goto done;
    double share = (double)ne * more / total;
    const char *severity = share >= SLOW_CRITICAL_SHARE && regular ? "critical"
                           : share >= SLOW_WARNING_SHARE           ? "warning"
                                                                   : "info";
    char every[48] = "";
    if (regular && gap > 0) snprintf(every, sizeof every, ", every %lld steps", gap);
    json_t *nums = json_object();
    json_object_set_new(nums, "eval_steps", json_integer((json_int_t)ne));
    json_object_set_new(nums, "other_steps", json_integer((json_int_t)no));
    json_object_set_new(nums, "period_steps", regular && gap > 0 ? json_integer(gap) : json_null());
    json_object_set_new(nums, "extra_samples", pb__report_real(extra_samples / (double)ne));
    json_object_set_new(nums, "eval_step_median_s", pb__report_real(w_eval));
    json_object_set_new(nums, "other_step_median_s", pb__report_real(w_other));
    json_object_set_new(nums, "share_of_wall", pb__report_real(share));
    char sql[SQL_MAX];
    pb__report_sqlf(sql,
                    "SELECT step, wall, forward, backward, samples FROM python.steps WHERE step "
                    "BETWEEN %lld AND %lld AND samples > %.6g ORDER BY step",
                    pb__report_steady_first(r), r->hi, EXTRA_SAMPLES_FACTOR * batch);
    pb__report_finding(
        r, "frequent_evaluation", "baseline", severity,
        pb__report_textf("an evaluation runs in %zu of %zu steps%s (%.0f more samples than a "
                         "training step's, forwards): those steps take %.3g ms more (%.1fx the "
                         "others), %.0f%% of the wall time",
                         ne, ne + no, every, extra_samples / (double)ne, 1e3 * more,
                         w_eval / w_other, 100 * share),
        nums, r->from_steps_table ? sql : NULL,
        "Evaluate less often or on fewer batches, or run evaluation in its own process; the "
        "step-time figures above mix both kinds of step (docs/report.md, \"Slow steps\").");
done:
    free(smp);
    free(we);
    free(wo);
    free(fe);
    free(fo);
}

/* Slow steady steps: every timing step over SLOW_FACTOR x their median, whether their step
 * numbers repeat with a period, their share of the wall time, and which part of the step grew
 * in them. Over OUTLIER_FACTOR x the median they are also left out of the bottleneck's means.
 * When they hold a large share of the wall time they are the headline, not a footnote. */
void pb__report_slow_steps(pb__report *r)
{
    /* the timing steps: summary steps only when detail steps are left out (windows), else all */
    int kind = r->skip_detail ? 0 : -1, reported = 0;
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
    long long period, phase;
    find_period(r, slow, nslow, &period, &phase);
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
    double delta[6];
    if (what_grew(r, kind, slow, nslow, delta)) goto done;
    static const char *const part_text[6] = {
        "the forward, without a backward to match (no extra batches: not shown to be an "
        "evaluation)",
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
    /* An evaluation only with its evidence: the slow steps took batches beyond the training
     * step's (python.steps.samples, which every step has), e.g. Lightning's validation loader. */
    double extra_samples = extra_samples_of(r, kind, slow, nslow);
    int evaluation = grew == 0 && extra_samples > 0;
    double mach[4];
    int machine = !evaluation && descheduled(r, kind, slow, nslow, mach);
    double share = total > 0 ? slow_wall / total : 0;
    /* Steps that compiled (python.steps.compile_time): when the compiles are most of what the
     * slow steps took over the median, they are the compile rule's (compile.c), not outliers of
     * unknown cause. */
    size_t compiled = 0;
    double compile_s = 0, excess_s = 0;
    for (size_t a = 0; a < nslow; a++) {
        const pb__step_row *s = &r->steps[slow[a]];
        compiled += s->compile_time > 0;
        compile_s += s->compile_time;
        excess_s += s->wall - median;
    }
    int compiling = compiled > 0 && compile_s >= 0.5 * excess_s;
    /* one or two slow steps without a period are a one-off (a GC pause, the machine), not a
     * pattern of the program; without a period they can be the machine's (other processes on
     * the cores), so never more than a warning */
    const char *severity = machine || compiling ? "info"
                           : !periodic && nslow < PERIOD_MIN ? "info"
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
    json_object_set_new(nums, "extra_samples", pb__report_real(extra_samples));
    json_object_set_new(nums, "machine", json_boolean(machine));
    json_object_set_new(nums, "compiled_steps", json_integer((json_int_t)compiled));
    json_object_set_new(nums, "compile_s", pb__report_real(compile_s));
    if (machine) {
        json_object_set_new(nums, "cpu_share_slow", pb__report_real(mach[0]));
        json_object_set_new(nums, "cpu_share_other", pb__report_real(mach[1]));
        json_object_set_new(nums, "involuntary_switches_slow", pb__report_real(mach[2]));
        json_object_set_new(nums, "involuntary_switches_other", pb__report_real(mach[3]));
    }
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
    char *claim, evaluation_text[160];
    snprintf(evaluation_text, sizeof evaluation_text,
             "the forward, without a backward to match, over %.0f more samples than a training "
             "step: an evaluation pass", extra_samples);
    const char *grew_text = evaluation ? evaluation_text : part_text[grew];
    if (periodic)
        claim = pb__report_textf(
            "every %lld steps a slow step: %zu steps at %.1f-%.1fx the median hold %.0f%% of "
            "the wall time; in them %s takes %.3g ms more",
            period, nslow, least / median, r->steps[worst].wall / median,
            100 * share, grew_text, 1e3 * delta[grew]);
    else
        claim = pb__report_textf(
            "%zu steady step%s took over %.1fx the median (%.0f%% of the wall time); the worst, "
            "step %lld, took %.1fx; in them %s takes %.3g ms more",
            nslow, nslow == 1 ? "" : "s", OUTLIER_FACTOR, 100 * share, r->steps[worst].step,
            r->steps[worst].wall / median, grew_text, 1e3 * delta[grew]);
    if (compiling) {
        /* what grew is the compile's part (the forward, or backward for a lazy backward graph) */
        free(claim);
        claim = pb__report_textf(
            "%zu steady step%s took over %.1fx the median (%.0f%% of the wall time); the worst, "
            "step %lld, took %.1fx: torch.compile compiled in %zu of them (%.3g s of compiling, "
            "python.steps.compile_time; the compile findings above say why)",
            nslow, nslow == 1 ? "" : "s", periodic ? SLOW_FACTOR : OUTLIER_FACTOR, 100 * share,
            r->steps[worst].step, r->steps[worst].wall / median, compiled, compile_s);
    } else if (machine) {
        /* The part that grew is where the thread was when the kernel took its core: not a
         * cause. */
        free(claim);
        claim = pb__report_textf(
            "%zu steady step%s took over %.1fx the median (%.0f%% of the wall time): the "
            "machine's, not the job's: in them the training thread ran %.0f%% of the wall time "
            "(%.0f%% in the other steps) and the kernel descheduled it %.0f times a step (%.0f "
            "in the others): other processes had its core",
            nslow, nslow == 1 ? "" : "s", periodic ? SLOW_FACTOR : OUTLIER_FACTOR, 100 * share,
            100 * mach[0], 100 * mach[1], mach[2], mach[3]);
    }
    reported = 1;
    pb__report_finding(
        r, "outlier_steps", "baseline", severity, claim, nums, sql,
        compiling ? "These steps compiled: the compile findings say why and what to change "
                    "(docs/report.md, \"Compilation\")."
        : machine ? "Nothing to change in the job for these steps: the median and p95 above "
                  "describe it; compare runs on a quiet machine, or give the job its own cores "
                  "(taskset, cgroup cpusets) (docs/report.md, \"Slow steps\")."
        : evaluation ? "Evaluate less often or on fewer batches, or run evaluation in its own "
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
    if (!reported) frequent_evaluation(r, kind);
}

void pb__report_sample_size(pb__report *r)
{
    size_t steady = r->count - r->warmup;
    if (r->count > 1 && steady < PB_REPORT_MIN_STEADY)
        pb__report_finding(
            r, "small_sample", "baseline", "info",
            pb__report_textf("only %zu steady step%s: too few to conclude that nothing is "
                             "wrong (%d or more wanted)",
                             steady, steady == 1 ? "" : "s", PB_REPORT_MIN_STEADY),
            NULL, pb__report_steps_sql(r), "Run the report again after more steps.");
    if (r->count == 1)
        pb__report_finding(
            r, "one_step", "baseline", "info",
            pb__report_textf("only one complete step: no warm-up detection, no spread; the "
                             "figures are that step's"),
            NULL, NULL, "Run the report again after more steps.");
}
