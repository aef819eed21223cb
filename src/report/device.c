/*
 * device.c - the device-time rule (docs/report.md, "Device time"): from python.device_steps (CUDA
 * events at the step's boundaries, src/agent/base/devtime.h), whether the step is GPU-bound (the
 * host runs ahead and waits for the device) or host-bound (the device waits for the host), and if
 * host-bound whether the host's time goes to launching kernels (launch-bound) or elsewhere.
 *
 * The measure is how far the device runs behind the host: lag, when the device finished the
 * step's work after the host ended the step, and sync_wait, how far behind it was when the
 * host's synchronisations asked. Either large against the step means the host queued work faster
 * than the device ran it. Both about 0 mean the device finished every piece of work as soon as
 * it was queued: it idles between launches. Silent on a CPU model; skipped with the reason on a
 * GPU model without device rows.
 */
#include "rules.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BEHIND_GPU_BOUND 0.25 /* device behind the host by >= this share of the step: GPU-bound */
#define BEHIND_HOST_BOUND 0.05 /* ... below this: the device waits on the host */
#define LAUNCH_SHARE 0.50      /* host-bound, with forward+backward+optimizer >= this: launch-bound */

enum { C_HOST_WALL, C_WALL, C_FWD, C_BWD, C_OPT, C_COLL, C_OTHER, C_LAG, C_SYNC, C_SYNCS, C_LAUNCH, C_HOST_DATA, NC };
static const char *const cols[NC] = {"host_wall", "wall", "forward", "backward", "optimizer", "collectives", "other",
                                     "lag", "sync_wait", "syncs", "host_launch", "host_data"};

void pb__report_device_time(pb__report *r)
{
    if (r->device == 1 || !r->count) return; /* a CPU model: nothing runs on a device */
    char sql[SQL_MAX], *error = NULL;
    pb__report_sqlf(sql,
                    "SELECT d.step, s.wall AS host_wall, d.wall, d.forward, d.backward, d.optimizer,\n"
                    "       d.collectives + d.grad_sync AS collectives, d.other, d.lag, d.sync_wait, d.syncs,\n"
                    "       s.forward + s.backward + s.optimizer AS host_launch, s.data_wait AS host_data\n"
                    "FROM python.device_steps d JOIN python.steps s ON s.step = d.step\n"
                    "WHERE d.step BETWEEN %lld AND %lld ORDER BY d.step",
                    pb__report_steady_first(r), r->hi);
    json_t *rows = pb__report_try(r, sql, &error);
    size_t n = rows ? json_array_size(rows) : 0;
    if (!n) {
        if (r->device == 2)
            pb__report_finding(r, "device_time", "bottleneck", "skipped",
                               pb__report_textf("device time not measured: %s",
                                                error ? error : "python.device_steps has no rows for the window (PROBING_DEVICE_TIME=0, or an agent without device timing)"),
                               NULL, sql, NULL);
        free(error);
        json_decref(rows);
        return;
    }
    free(error);
    double *v = malloc(n * sizeof *v), med[NC];
    if (!v) {
        json_decref(rows);
        return;
    }
    for (int c = 0; c < NC; c++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            int ok = 0;
            double x = pb__report_num(json_array_get(rows, i), cols[c], &ok);
            if (ok && isfinite(x)) v[k++] = x;
        }
        qsort(v, k, sizeof *v, pb__report_cmp_double);
        med[c] = k ? pb__report_percentile(v, k, 50) : NAN;
    }
    free(v);
    json_decref(rows);
    double step = med[C_HOST_WALL], behind = fmax(med[C_LAG], med[C_SYNC]);
    json_t *nums = json_object();
    json_object_set_new(nums, "steps", json_integer((json_int_t)n));
    json_object_set_new(nums, "host_step_s", pb__report_real(step));
    json_object_set_new(nums, "device_step_s", pb__report_real(med[C_WALL]));
    json_object_set_new(nums, "device_forward_s", pb__report_real(med[C_FWD]));
    json_object_set_new(nums, "device_backward_s", pb__report_real(med[C_BWD]));
    json_object_set_new(nums, "device_optimizer_s", pb__report_real(med[C_OPT]));
    json_object_set_new(nums, "device_collectives_s", pb__report_real(med[C_COLL]));
    json_object_set_new(nums, "device_other_s", pb__report_real(med[C_OTHER]));
    json_object_set_new(nums, "lag_s", pb__report_real(med[C_LAG]));
    json_object_set_new(nums, "sync_wait_s", pb__report_real(med[C_SYNC]));
    json_object_set_new(nums, "syncs_per_step", pb__report_real(med[C_SYNCS]));
    double launch = step > 0 ? med[C_LAUNCH] / step : NAN;
    json_object_set_new(nums, "host_launch_share", pb__report_real(launch));
    const char *type;
    char *claim;
    const char *severity = "info", *advice;
    if (!(step > 0)) {
        json_decref(nums);
        return;
    }
    char syncs[160] = "";
    if (med[C_SYNCS] >= 1)
        snprintf(syncs, sizeof syncs, "; its %.0f synchronisation%s per step wait%s %.3g ms for the device", med[C_SYNCS],
                 med[C_SYNCS] == 1 ? "" : "s", med[C_SYNCS] == 1 ? "s" : "", med[C_SYNC] * 1e3);
    if (behind >= BEHIND_GPU_BOUND * step) {
        type = "gpu_bound";
        claim = pb__report_textf(
            "GPU-bound: the device needs %.3g ms per step where the host takes %.3g ms, and runs %.3g ms behind it "
            "(medians)%s; device time per step: forward %.3g ms, backward %.3g, optimizer %.3g, collectives %.3g, "
            "outside them %.3g",
            med[C_WALL] * 1e3, step * 1e3, behind * 1e3, syncs, med[C_FWD] * 1e3, med[C_BWD] * 1e3, med[C_OPT] * 1e3,
            med[C_COLL] * 1e3, med[C_OTHER] * 1e3);
        advice = "The GPU is the constraint: make its work cheaper. Look at the modules with the most device time "
                 "(python.device_trace), use bf16 autocast on tensor cores, and check the collectives' device share "
                 "(docs/report.md, \"Device time\").";
    } else if (med[C_LAG] < BEHIND_HOST_BOUND * step && med[C_SYNC] < BEHIND_HOST_BOUND * step) {
        if (launch >= LAUNCH_SHARE) {
            type = "launch_bound";
            claim = pb__report_textf(
                "launch-bound: the device keeps up with the host (it finishes the step's work %.3g ms after the host's "
                "last launch) while the host spends %.0f%% of the %.3g ms step in forward, backward and optimizer "
                "queueing kernels: the GPU waits for launches",
                med[C_LAG] * 1e3, 100 * launch, step * 1e3);
            advice = "Queue fewer, larger kernels: CUDA graphs (torch.compile(mode=\"reduce-overhead\")), fused "
                     "optimizers (foreach/fused=True), larger batches, fewer tiny modules (docs/report.md, \"Device "
                     "time\").";
        } else {
            type = "host_bound";
            claim = pb__report_textf(
                "host-bound: the device keeps up with the host (%.3g ms behind at the step's end) and waits for it; the "
                "host spends %.0f%% of the %.3g ms step outside forward, backward and optimizer (data loading %.3g ms)",
                med[C_LAG] * 1e3, 100 * (1 - launch), step * 1e3, med[C_HOST_DATA] * 1e3);
            advice = "The GPU idles while the host does other work: see the data-loading and host-time findings "
                     "(docs/report.md, \"Device time\").";
        }
        severity = "warning";
    } else {
        type = "mixed";
        claim = pb__report_textf("the device runs %.3g ms behind the host at the step's end (median, %.0f%% of the "
                                 "%.3g ms step): neither clearly GPU-bound nor host-bound%s",
                                 behind * 1e3, 100 * behind / step, step * 1e3, syncs);
        advice = NULL;
    }
    json_t *f = pb__report_finding(r, "device_time", "bottleneck", severity, claim, nums, sql, advice);
    if (f) json_object_set_new(f, "type", json_string(type));
}
