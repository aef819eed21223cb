/*
 * checks.c - the checks of the report that stand beside the phases: which threads hold the GIL
 * (docs/report.md, "Host time"), the share of communication (docs/report.md, "Communication"),
 * the GradScaler of mixed precision (docs/report.md, "Mixed precision") and host-device
 * synchronisations (docs/report.md, "Host time").
 *
 * Each reads one table (python.gil, python.nccl_trace or python.steps, python.amp_trace,
 * python.steps) over the window and adds one finding: ok, a warning over its threshold, or
 * skipped with the reason (the table is absent or empty, or the check does not apply on CPU).
 */
#include "rules.h"

#include <stdlib.h>
#include <string.h>

#define SYNCS_PER_STEP 3.0 /* host-device synchronisations per step (median) worth a warning */
#define GIL_SHARE 0.20     /* another thread's share of the GIL samples worth a warning */

void pb__report_check_collectives(pb__report *r)
{
    char sql[SQL_MAX];
    if (r->n_nccl <= 0 && !(r->have_grad_sync && pb__report_mean_shares(r).grad_sync > 0)) {
        pb__report_finding(
            r, "collectives", "check", "skipped",
            pb__report_textf("collectives share not checked: python.nccl_trace is %s (a single "
                             "process, or collectives are not recorded by this agent)",
                             r->n_nccl < 0 ? "absent" : "empty"),
            NULL, NULL, NULL);
        return;
    }
    pb__shares m = pb__report_mean_shares(r);
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
void pb__report_check_gil(pb__report *r)
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
    double total = 0, training = 0, own = 0;
    json_array_foreach(rows, i, row) {
        total = pb__report_num(row, "samples", NULL);
        const char *tn = json_string_value(json_object_get(row, "thread_name"));
        if (pb__report_num(row, "training", NULL) != 0)
            training += pb__report_num(row, "held", NULL);
        else if (tn && !strncmp(tn, "probing-", 8))
            /* probing's own threads (capture's writer, the job's) are never a finding about
             * the job: their share is given beside it (issue 50: after a capture, "thread
             * 'probing-capture' holds the GIL 39%" was the primary finding) */
            own += pb__report_num(row, "held", NULL);
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
    json_object_set_new(nums, "probing_share", pb__report_real(own / total));
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
                : own > 0 ? pb__report_textf("only the training thread held the GIL when "
                                             "sampled, and probing's own threads (%.0f%%, not "
                                             "counted)",
                                             100 * own / total)
                          : pb__report_textf("only the training thread held the GIL when sampled"),
            nums, sql, NULL);
    }
    json_decref(rows);
}

void pb__report_check_amp(pb__report *r)
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

void pb__report_check_syncs(pb__report *r)
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
