/*
 * memory_section.c - the memory rules of the report (docs/report.md, "Memory"): steady growth
 * (a leak, and when it would end the job), and the "memory" section of the document over what
 * the agent recorded: parameters, gradients, optimizer state, activations, fragmentation.
 *
 * Growth: memory per steady step (python.memory's allocated on the step boundary, else the
 * allocated figure of python.torch_trace's rows) and a Theil-Sen line through it, the warm-up
 * and the first LEAK_SETTLE of the steady steps left out (allocators and caches fill at the start
 * of every run without leaking); the time to the limit (python.memory.limit_mb, else the GPU's
 * total) at that pace decides the severity.
 *
 * Parameters, gradients and optimizer state come from python.memory_breakdown: the bytes of each
 * optimizer's distinct storages, taken at the first optimizer step and every
 * PROBING_MEMORY_PHASE_EVERY-th step. The activation estimate is allocated after the model's
 * forward minus allocated before it, from the phase rows of python.memory on the latest sampled
 * step: on a GPU the caching allocator's figure (what the forward left allocated for backward);
 * on CPU the process RSS, which the C allocator's reuse of freed pages makes coarse (it can read
 * 0, or less). Whether memory limits the run is judged on a GPU only: the peak reserved against
 * the device's total memory (MEMORY_PRESSURE). Fragmentation (CUDA only) compares reserved with
 * the peak allocated: memory held above anything the run ever had allocated at once.
 *
 * The report suggests memory remedies only when memory is shown to be the limit; otherwise it
 * states the breakdown and says why nothing needs to change.
 */
#include "rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MB (1024.0 * 1024.0)
#define LEAK_MIN_STEPS 5
#define LEAK_MIN_GROWTH_MB 16.0 /* growth over the fitted steps below this is allocator noise */
#define LEAK_SHORT_GROWTH_MB 4.0 /* a steady climb under LEAK_MIN_GROWTH_MB warns from here */
#define LEAK_SHORT_MIN_STEPS 10  /* ... and over at least this many fitted steps */
#define LEAK_MIN_R2 0.9         /* a steady climb: the robust line explains it */
#define LEAK_SETTLE 0.1         /* share of the steady steps left out of the fit (caches fill) */
#define LEAK_TAIL_MIN_POINTS 5  /* the last third's own line needs this many points */
#define LEAK_TAIL_FRACTION 0.5  /* ... and a slope under this share of the whole's: slowing */
#define LEAK_CRITICAL_H 6.0     /* out of memory sooner than this: critical */
#define LEAK_WARNING_H 72.0     /* ... sooner than this: warning; later: info */
#define MEMORY_PRESSURE 0.90    /* peak reserved / device memory from which memory is the limit */
#define DOMINANT_SHARE 0.50     /* a part above this share of the tracked memory dominates */
#define FRAGMENTATION_RATIO 1.5 /* reserved > 1.5x allocated (docs/report.md, "Findings") */
#define FRAGMENTATION_MIN_MB 256.0 /* ... and at least this much held above the peak */

typedef struct memory {
    int have_breakdown;
    long long breakdown_step;
    double param_mb, grad_mb, state_mb, device_total_mb; /* device_total_mb NAN on CPU */
    char device[64];
    char optimizers[160]; /* class names, ", " between them */
    json_t *per_optimizer;
    char breakdown_sql[SQL_MAX];

    int have_activations;
    long long phase_step; /* -1: no phase rows */
    double activations_mb;
    json_t *phases;
    char phases_sql[SQL_MAX];

    int cuda; /* the allocator figures are CUDA's */
    int have_allocator;
    double peak_mb, reserved_mb, pressure; /* NAN when unknown */
    char allocator_device[64];
    char allocator_sql[SQL_MAX];
} memory;

static int is_cuda(const char *device)
{
    return device && strncmp(device, "cuda", 4) == 0;
}

/* The latest step <= r->hi of `table` rows matching `where`, else the latest at all (a window
 * that ends before the first sampled step); -1 when there is none. */
static long long latest_step(pb__report *r, const char *table, const char *where)
{
    char sql[SQL_MAX];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0)
            pb__report_sqlf(sql, "SELECT MAX(step) AS s FROM %s WHERE %s AND step <= %lld", table,
                            where, r->hi);
        else
            pb__report_sqlf(sql, "SELECT MAX(step) AS s FROM %s WHERE %s", table, where);
        json_t *rows = pb__report_run(r, sql);
        int ok = 0;
        double s = rows ? pb__report_num(json_array_get(rows, 0), "s", &ok) : 0;
        json_decref(rows);
        if (ok) return (long long)s;
    }
    return -1;
}

static void load_breakdown(pb__report *r, memory *m)
{
    if (r->n_breakdown <= 0) return;
    long long step = latest_step(r, "python.memory_breakdown", "1");
    if (step < 0) return;
    pb__report_sqlf(m->breakdown_sql,
                    "SELECT optimizer, device, params, param_bytes, grad_bytes, state_bytes,\n"
                    "       state_tensors, device_total_mb\n"
                    "FROM python.memory_breakdown WHERE step = %lld ORDER BY optimizer",
                    step);
    json_t *rows = pb__report_run(r, m->breakdown_sql), *row;
    size_t i;
    if (!rows || !json_array_size(rows)) {
        json_decref(rows);
        return;
    }
    m->have_breakdown = 1;
    m->breakdown_step = step;
    json_array_foreach(rows, i, row) {
        const char *opt = json_string_value(json_object_get(row, "optimizer"));
        const char *dev = json_string_value(json_object_get(row, "device"));
        double p = pb__report_num(row, "param_bytes", NULL) / MB;
        double g = pb__report_num(row, "grad_bytes", NULL) / MB;
        double s = pb__report_num(row, "state_bytes", NULL) / MB;
        int ok;
        double total = pb__report_num(row, "device_total_mb", &ok);
        m->param_mb += p;
        m->grad_mb += g;
        m->state_mb += s;
        if (ok && (isnan(m->device_total_mb) || total > m->device_total_mb))
            m->device_total_mb = total;
        if (i == 0)
            snprintf(m->device, sizeof m->device, "%s", dev ? dev : "");
        else if (!dev || strcmp(dev, m->device))
            snprintf(m->device, sizeof m->device, "mixed");
        size_t used = strlen(m->optimizers);
        if (opt && !strstr(m->optimizers, opt) && used + strlen(opt) + 3 < sizeof m->optimizers)
            snprintf(m->optimizers + used, sizeof m->optimizers - used, "%s%s", used ? ", " : "",
                     opt);
        json_t *o = json_object();
        json_object_set(o, "optimizer", json_object_get(row, "optimizer"));
        json_object_set(o, "device", json_object_get(row, "device"));
        json_object_set(o, "params", json_object_get(row, "params"));
        json_object_set_new(o, "param_mb", pb__report_real(p));
        json_object_set_new(o, "grad_mb", pb__report_real(g));
        json_object_set_new(o, "state_mb", pb__report_real(s));
        json_object_set(o, "state_tensors", json_object_get(row, "state_tensors"));
        json_array_append_new(m->per_optimizer, o);
    }
    json_decref(rows);
}

static void load_activations(pb__report *r, memory *m)
{
    if (r->n_memory <= 0) return;
    m->phase_step = latest_step(r, "python.memory", "phase = 'after_forward'");
    if (m->phase_step < 0) return;
    pb__report_sqlf(m->phases_sql,
                    "SELECT phase, device, allocated_mb, max_allocated_mb, reserved_mb\n"
                    "FROM python.memory WHERE step = %lld AND phase != 'step' ORDER BY rowid",
                    m->phase_step);
    json_t *rows = pb__report_run(r, m->phases_sql), *row;
    size_t i;
    int have_before = 0, have_after = 0;
    double before = 0, after = 0;
    json_array_foreach(rows, i, row) {
        const char *phase = json_string_value(json_object_get(row, "phase"));
        int ok;
        double v = pb__report_num(row, "allocated_mb", &ok);
        if (!phase) continue;
        json_t *p = json_object();
        json_object_set_new(p, "phase", json_string(phase));
        json_object_set_new(p, "allocated_mb", pb__report_real(v));
        json_object_set_new(p, "max_allocated_mb",
                            pb__report_real(pb__report_num(row, "max_allocated_mb", NULL)));
        json_t *reserved = json_object_get(row, "reserved_mb");
        json_object_set_new(p, "reserved_mb",
                            json_is_number(reserved) ? pb__report_real(json_number_value(reserved))
                                                     : json_null());
        json_array_append_new(m->phases, p);
        if (!ok) continue;
        if (!strcmp(phase, "before_forward")) before = v, have_before = 1;
        if (!strcmp(phase, "after_forward")) {
            after = v, have_after = 1;
            m->cuda = is_cuda(json_string_value(json_object_get(row, "device")));
        }
    }
    json_decref(rows);
    if (have_before && have_after) {
        m->have_activations = 1;
        m->activations_mb = after - before;
    }
}

static void load_allocator(pb__report *r, memory *m)
{
    if (r->n_memory <= 0) return;
    pb__report_sqlf(m->allocator_sql,
                    "SELECT device, MAX(max_allocated_mb) AS peak_mb, MAX(reserved_mb) AS "
                    "reserved_mb\n"
                    "FROM python.memory WHERE phase = 'step' AND step BETWEEN %lld AND %lld\n"
                    "GROUP BY device ORDER BY peak_mb DESC LIMIT 1",
                    r->lo, r->hi);
    json_t *rows = pb__report_run(r, m->allocator_sql), *row = json_array_get(rows, 0);
    if (row) {
        int ok;
        const char *dev = json_string_value(json_object_get(row, "device"));
        m->have_allocator = 1;
        snprintf(m->allocator_device, sizeof m->allocator_device, "%s", dev ? dev : "");
        if (is_cuda(dev)) m->cuda = 1;
        double v = pb__report_num(row, "peak_mb", &ok);
        if (ok) m->peak_mb = v;
        v = pb__report_num(row, "reserved_mb", &ok);
        if (ok) m->reserved_mb = v;
    }
    json_decref(rows);
    if (m->cuda && !isnan(m->reserved_mb) && m->device_total_mb > 0)
        m->pressure = m->reserved_mb / m->device_total_mb;
}

/* Why memory is or is not shown to be the limit, for claims. */
static char *pressure_text(const memory *m)
{
    if (!isnan(m->pressure))
        return pb__report_textf("the GPU's peak reserved memory is %.0f%% of its %.0f MB",
                                100 * m->pressure, m->device_total_mb);
    if (m->cuda) return pb__report_textf("the GPU's total memory is not recorded");
    return pb__report_textf("a CPU run: there is no device memory limit to compare with");
}

static json_t *section(const memory *m, double tracked)
{
    json_t *s = json_object(), *sh = json_object(), *sql = json_array();
    const char *device = m->have_breakdown   ? m->device
                         : m->have_allocator ? m->allocator_device
                                             : NULL;
    json_object_set_new(s, "device", device ? json_string(device) : json_null());
    json_object_set_new(s, "breakdown_step",
                        m->have_breakdown ? json_integer(m->breakdown_step) : json_null());
    json_object_set_new(s, "parameters_mb",
                        m->have_breakdown ? pb__report_real(m->param_mb) : json_null());
    json_object_set_new(s, "gradients_mb",
                        m->have_breakdown ? pb__report_real(m->grad_mb) : json_null());
    json_object_set_new(s, "optimizer_state_mb",
                        m->have_breakdown ? pb__report_real(m->state_mb) : json_null());
    json_object_set_new(s, "state_to_parameters",
                        m->have_breakdown && m->param_mb > 0
                            ? pb__report_real(m->state_mb / m->param_mb)
                            : json_null());
    json_object_set(s, "optimizers", m->per_optimizer);
    json_object_set_new(s, "activations_mb",
                        m->have_activations ? pb__report_real(m->activations_mb) : json_null());
    json_object_set_new(s, "activations_step",
                        m->have_activations ? json_integer(m->phase_step) : json_null());
    json_object_set_new(
        s, "activations_source",
        json_string(!m->have_activations
                        ? "unknown: no before_forward and after_forward phase rows in "
                          "python.memory (a sampled step has not run yet, "
                          "PROBING_MEMORY_PHASE_EVERY=0, or an agent without before_forward)"
                    : m->cuda ? "allocated after the forward minus before it (CUDA caching "
                                "allocator): the tensors the forward left for backward"
                              : "process RSS after the forward minus before it: coarse, the C "
                                "allocator reuses freed pages, so it can read 0 or less"));
    json_object_set_new(s, "tracked_mb", tracked > 0 ? pb__report_real(tracked) : json_null());
    if (tracked > 0) {
        double act = m->have_activations && m->activations_mb > 0 ? m->activations_mb : 0;
        json_object_set_new(sh, "parameters", pb__report_real(m->param_mb / tracked));
        json_object_set_new(sh, "gradients", pb__report_real(m->grad_mb / tracked));
        json_object_set_new(sh, "optimizer_state", pb__report_real(m->state_mb / tracked));
        json_object_set_new(sh, "activations",
                            m->have_activations ? pb__report_real(act / tracked) : json_null());
    }
    json_object_set_new(s, "shares", sh);
    json_object_set_new(s, "peak_mb",
                        m->have_allocator ? pb__report_real(m->peak_mb) : json_null());
    json_object_set_new(s, "peak_source",
                        json_string(!m->have_allocator ? "unknown: python.memory has no rows"
                                    : m->cuda          ? "torch.cuda.max_memory_allocated()"
                                              : "the highest process RSS sampled, the interpreter "
                                                "and torch's libraries included"));
    json_object_set_new(s, "reserved_mb", m->cuda ? pb__report_real(m->reserved_mb) : json_null());
    json_object_set_new(s, "device_total_mb", pb__report_real(m->device_total_mb));
    json_object_set_new(s, "pressure", pb__report_real(m->pressure));
    json_object_set(s, "phases", m->phases);
    json_object_set_new(s, "phases_step",
                        m->phase_step >= 0 ? json_integer(m->phase_step) : json_null());
    if (m->have_breakdown) json_array_append_new(sql, json_string(m->breakdown_sql));
    if (m->phase_step >= 0) json_array_append_new(sql, json_string(m->phases_sql));
    if (m->have_allocator) json_array_append_new(sql, json_string(m->allocator_sql));
    json_object_set_new(s, "sql", sql);
    return s;
}

/* SQL of the findings: the statements that gave their numbers, "\n;\n" between them. */
static void join_sql(char *out, size_t len, const char *a, const char *b)
{
    snprintf(out, len, "%s%s%s", a ? a : "", a && *a && b && *b ? "\n;\n" : "", b ? b : "");
}

static void finding_breakdown(pb__report *r, const memory *m, double tracked)
{
    if (!m->have_breakdown) {
        char *claim;
        if (r->n_breakdown < 0)
            claim = pb__report_textf("memory breakdown not available: python.memory_breakdown is "
                                     "absent (an agent or recording from before it existed)");
        else
            claim = pb__report_textf(
                "memory breakdown not available: no optimizer step has been recorded with it "
                "(it is taken at optimizer.step(): the first one and every "
                "PROBING_MEMORY_PHASE_EVERY-th; a run without an optimizer, or with "
                "PROBING_MEMORY_PHASE_EVERY=0, has none)");
        pb__report_finding(r, "memory_breakdown", "memory", "skipped", claim, NULL, NULL, NULL);
        return;
    }
    double act = m->have_activations && m->activations_mb > 0 ? m->activations_mb : 0;
    const char *largest = "parameters";
    double largest_mb = m->param_mb;
    if (m->grad_mb > largest_mb) largest = "gradients", largest_mb = m->grad_mb;
    if (m->state_mb > largest_mb) largest = "optimizer state", largest_mb = m->state_mb;
    if (act > largest_mb) largest = "activations", largest_mb = act;
    double share = tracked > 0 ? largest_mb / tracked : 0;
    char activations[96];
    if (m->have_activations)
        snprintf(activations, sizeof activations, "activations ~%.1f MB%s", m->activations_mb,
                 m->cuda ? "" : " (RSS delta, coarse)");
    else
        snprintf(activations, sizeof activations, "activations unknown");
    json_t *nums = json_object();
    json_object_set_new(nums, "step", json_integer(m->breakdown_step));
    json_object_set_new(nums, "device", json_string(m->device));
    json_object_set_new(nums, "parameters_mb", pb__report_real(m->param_mb));
    json_object_set_new(nums, "gradients_mb", pb__report_real(m->grad_mb));
    json_object_set_new(nums, "optimizer_state_mb", pb__report_real(m->state_mb));
    json_object_set_new(nums, "activations_mb",
                        m->have_activations ? pb__report_real(m->activations_mb) : json_null());
    json_object_set_new(nums, "tracked_mb", pb__report_real(tracked));
    json_object_set_new(nums, "largest", json_string(largest));
    json_object_set_new(nums, "largest_share", pb__report_real(share));
    json_object_set_new(nums, "pressure", pb__report_real(m->pressure));
    char sql[2 * SQL_MAX + 8];
    join_sql(sql, sizeof sql, m->breakdown_sql, m->have_activations ? m->phases_sql : NULL);
    int limit = !isnan(m->pressure) && m->pressure >= MEMORY_PRESSURE;
    const char *advice = NULL;
    if (limit && share > DOMINANT_SHARE && !strcmp(largest, "activations"))
        advice = "Activations dominate memory usage: use gradient checkpointing, reduce the "
                 "batch size, use mixed precision (FP16/BF16) (docs/report.md, \"Memory\").";
    else if (limit && share > DOMINANT_SHARE && !strcmp(largest, "gradients"))
        advice = "Gradients dominate memory usage: consider gradient accumulation, mixed "
                 "precision (docs/report.md, \"Memory\").";
    char *why = pressure_text(m), *claim;
    if (advice)
        claim = pb__report_textf("%s dominate a GPU that is %.0f%% full: %.1f of %.1f MB tracked "
                                 "(%.0f%%); parameters %.1f MB, gradients %.1f MB, optimizer "
                                 "state %.1f MB, %s at step %lld",
                                 strcmp(largest, "activations") ? "Gradients" : "Activations",
                                 100 * m->pressure, largest_mb, tracked, 100 * share, m->param_mb,
                                 m->grad_mb, m->state_mb, activations, m->breakdown_step);
    else
        claim = pb__report_textf("parameters %.1f MB, gradients %.1f MB, optimizer state %.1f MB, "
                                 "%s at step %lld: the largest part is %s (%.0f%% of %.1f MB "
                                 "tracked); %s",
                                 m->param_mb, m->grad_mb, m->state_mb, activations,
                                 m->breakdown_step, largest, 100 * share, tracked, why ? why : "");
    free(why);
    pb__report_finding(r, "memory_breakdown", "memory", advice ? "warning" : "info", claim, nums,
                       sql, advice);
}

static void finding_optimizer_state(pb__report *r, const memory *m, double tracked)
{
    if (!m->have_breakdown) return;
    json_t *nums = json_object();
    double share = tracked > 0 ? m->state_mb / tracked : 0;
    double ratio = m->param_mb > 0 ? m->state_mb / m->param_mb : 0;
    json_object_set_new(nums, "optimizer", json_string(m->optimizers));
    json_object_set_new(nums, "optimizer_state_mb", pb__report_real(m->state_mb));
    json_object_set_new(nums, "parameters_mb", pb__report_real(m->param_mb));
    json_object_set_new(nums, "state_to_parameters", pb__report_real(ratio));
    json_object_set_new(nums, "share_of_tracked", pb__report_real(share));
    json_object_set_new(nums, "pressure", pb__report_real(m->pressure));
    if (m->state_mb <= 0) {
        pb__report_finding(r, "optimizer_state", "memory", "ok",
                           pb__report_textf("the optimizer (%s) keeps no state tensors (plain "
                                            "SGD needs none): its memory is all elsewhere",
                                            m->optimizers),
                           nums, m->breakdown_sql, NULL);
        return;
    }
    int adam_like = strstr(m->optimizers, "Adam") && fabs(ratio - 2.0) <= 0.1;
    char basis[160];
    snprintf(basis, sizeof basis, "%.1fx the parameters%s", ratio,
             adam_like ? ": Adam keeps two tensors per parameter, so that is expected" : "");
    int limit = !isnan(m->pressure) && m->pressure >= MEMORY_PRESSURE;
    if (share > DOMINANT_SHARE && limit) {
        pb__report_finding(
            r, "optimizer_state", "memory", "warning",
            pb__report_textf("optimizer state dominates a GPU that is %.0f%% full: %.1f MB, "
                             "%.0f%% of the tracked memory (%s, %s)",
                             100 * m->pressure, m->state_mb, 100 * share, m->optimizers, basis),
            nums, m->breakdown_sql,
            "Optimizer states (Adam): 2x parameters (docs/report.md, \"Memory\"). Check that the optimizer updates "
            "only the model's parameters (tensors the model never uses still get state); the "
            "usual memory remedies are gradient checkpointing, a smaller batch and mixed "
            "precision (FP16/BF16) (docs/report.md, \"Memory\").");
        pb__report_suggest(r, "what the optimizer keeps state for, largest first",
                           "probing %s eval \"import torch; print(sorted(((sum(t.numel() * "
                           "t.element_size() for t in s.values() if torch.is_tensor(t)), "
                           "tuple(p.shape)) for p, s in optimizer.state.items()), "
                           "reverse=True)[:5])\"",
                           pb__report_target(r));
    } else if (share > DOMINANT_SHARE) {
        char *why = pressure_text(m);
        pb__report_finding(r, "optimizer_state", "memory", "info",
                           pb__report_textf("optimizer state is %.0f%% of the tracked memory "
                                            "(%.1f MB; %s, %s), but memory is not shown to be "
                                            "the limit (%s): nothing to change for memory's sake",
                                            100 * share, m->state_mb, m->optimizers, basis,
                                            why ? why : ""),
                           nums, m->breakdown_sql, NULL);
        free(why);
    } else {
        pb__report_finding(r, "optimizer_state", "memory", "ok",
                           pb__report_textf("optimizer state is %.0f%% of the tracked memory "
                                            "(%.1f MB; %s, %s)",
                                            100 * share, m->state_mb, m->optimizers, basis),
                           nums, m->breakdown_sql, NULL);
    }
}

static void finding_fragmentation(pb__report *r, const memory *m)
{
    char sql[SQL_MAX];
    if (r->n_memory <= 0) {
        pb__report_finding(r, "fragmentation", "memory", "skipped",
                           pb__report_textf("fragmentation not checked: python.memory is %s",
                                            r->n_memory < 0 ? "absent" : "empty"),
                           NULL, NULL, NULL);
        return;
    }
    pb__report_sqlf(sql,
                    "SELECT step, device, allocated_mb, max_allocated_mb, reserved_mb\n"
                    "FROM python.memory WHERE phase = 'step' AND device LIKE 'cuda%%' AND step "
                    "BETWEEN %lld AND %lld\n"
                    "ORDER BY step DESC LIMIT 1",
                    r->lo, r->hi);
    json_t *rows = m->cuda ? pb__report_run(r, sql) : NULL, *row = json_array_get(rows, 0);
    int ok_a, ok_p, ok_r;
    double allocated = row ? pb__report_num(row, "allocated_mb", &ok_a) : 0;
    double peak = row ? pb__report_num(row, "max_allocated_mb", &ok_p) : 0;
    double reserved = row ? pb__report_num(row, "reserved_mb", &ok_r) : 0;
    if (!row || !ok_a || !ok_p || !ok_r || allocated <= 0 || peak <= 0) {
        pb__report_finding(
            r, "fragmentation", "memory", "skipped",
            m->cuda ? pb__report_textf("fragmentation not checked: no CUDA allocator figures "
                                       "in the window")
            : m->have_allocator
                ? pb__report_textf("fragmentation: not applicable on CPU (python.memory device "
                                   "'%s'): reserved vs allocated is the CUDA caching allocator's",
                                   m->allocator_device)
                : pb__report_textf("fragmentation not checked: no python.memory step rows in "
                                   "the window"),
            NULL, m->cuda ? sql : m->allocator_sql, NULL);
        json_decref(rows);
        return;
    }
    double reserved_ratio = reserved / allocated, peak_ratio = reserved / peak;
    json_t *nums = json_object();
    json_object_set(nums, "step", json_object_get(row, "step"));
    json_object_set(nums, "device", json_object_get(row, "device"));
    json_object_set_new(nums, "allocated_mb", pb__report_real(allocated));
    json_object_set_new(nums, "peak_allocated_mb", pb__report_real(peak));
    json_object_set_new(nums, "reserved_mb", pb__report_real(reserved));
    json_object_set_new(nums, "reserved_to_allocated", pb__report_real(reserved_ratio));
    json_object_set_new(nums, "reserved_to_peak", pb__report_real(peak_ratio));
    json_object_set_new(nums, "pressure", pb__report_real(m->pressure));
    if (peak_ratio > FRAGMENTATION_RATIO && reserved - peak >= FRAGMENTATION_MIN_MB)
        pb__report_finding(
            r, "fragmentation", "memory", "warning",
            pb__report_textf("the caching allocator holds %.0f MB more than the run ever had "
                             "allocated at once: reserved %.0f MB, peak allocated %.0f MB "
                             "(%.1fx) - fragmentation",
                             reserved - peak, reserved, peak, peak_ratio),
            nums, sql,
            "Reserved stays high = memory fragmentation or caching; periodic "
            "torch.cuda.empty_cache() may help (docs/report.md, \"Memory\"). It costs time, so only when memory is "
            "the limit; allocating tensors of steady sizes (padding variable lengths) avoids "
            "the split blocks.");
    else if (reserved_ratio > FRAGMENTATION_RATIO)
        pb__report_finding(r, "fragmentation", "memory", "info",
                           pb__report_textf("reserved is %.1fx the memory allocated at the step's "
                                            "end but within the peak (%.0f MB reserved, %.0f MB "
                                            "peak): the caching allocator keeps the freed "
                                            "activation blocks for the next step - expected, not "
                                            "fragmentation",
                                            reserved_ratio, reserved, peak),
                           nums, sql, NULL);
    else
        pb__report_finding(r, "fragmentation", "memory", "ok",
                           pb__report_textf("no fragmentation: reserved %.0f MB for %.0f MB "
                                            "allocated (%.1fx; flagged over %.1fx)",
                                            reserved, allocated, reserved_ratio, FRAGMENTATION_RATIO),
                           nums, sql, NULL);
    json_decref(rows);
}

/* ------------------------------------------------------------------ the memory section */

void pb__report_memory(pb__report *r)
{
    memory m;
    memset(&m, 0, sizeof m);
    m.device_total_mb = m.peak_mb = m.reserved_mb = m.pressure = NAN;
    m.phase_step = -1;
    m.per_optimizer = json_array();
    m.phases = json_array();
    load_breakdown(r, &m);
    load_activations(r, &m);
    load_allocator(r, &m);
    double tracked = 0;
    if (m.have_breakdown) {
        tracked = m.param_mb + m.grad_mb + m.state_mb;
        if (m.have_activations && m.activations_mb > 0) tracked += m.activations_mb;
    }
    if (m.have_breakdown || m.have_allocator || m.phase_step >= 0)
        json_object_set_new(r->doc, "memory", section(&m, tracked));
    else
        json_object_set_new(r->doc, "memory", json_null());
    finding_breakdown(r, &m, tracked);
    finding_optimizer_state(r, &m, tracked);
    finding_fragmentation(r, &m);
    json_decref(m.per_optimizer);
    json_decref(m.phases);
}

/* ------------------------------------------------------------------ growth */

/* Memory per step over the steady window (python.memory, else torch_trace's allocated), a
 * Theil-Sen line through it, and how long until the limit at that pace. */
void pb__report_memory_growth(pb__report *r)
{
    char sql[SQL_MAX];
    const char *source = "python.torch_trace allocated (process RSS on CPU)";
    if (r->n_memory > 0) {
        pb__report_sqlf(
            sql,
            "SELECT step, MAX(allocated_mb) AS value FROM python.memory WHERE phase = 'step' "
            "AND step BETWEEN %lld AND %lld GROUP BY step ORDER BY step",
            r->lo, r->hi);
        pb__report_merge_per_step(r, sql, PB__STEP_MEMORY);
        source = "python.memory allocated_mb (largest device)";
    } else if (!r->from_steps_table) {
        strcpy(sql, pb__report_trace_steps_sql);
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
     * caches grow at the start of every run without leaking. torch.compile allocates while it
     * compiles (its caches, the new graph's code and buffers): a steady step that compiled
     * (python.steps.compile_time) is left out too, and what memory grew in it is taken off the
     * steps after it, so recompiles are never read as a leak. */
    size_t from = r->warmup, avail = 0, compiled = 0;
    for (size_t i = r->warmup; i < r->count; i++) {
        avail += r->steps[i].has_memory && !(r->steps[i].compile_time > 0);
        compiled += r->steps[i].has_memory && r->steps[i].compile_time > 0;
    }
    size_t settle = (size_t)(LEAK_SETTLE * (double)avail), seen = 0;
    double *xs = malloc((r->count + 1) * sizeof *xs), *ys = malloc((r->count + 1) * sizeof *ys);
    size_t n = 0;
    double first = 0, last = 0, compile_growth = 0, prev = NAN;
    for (size_t i = 0; xs && ys && i < r->count; i++) {
        const pb__step_row *s = &r->steps[i];
        if (!s->has_memory) continue;
        double before = prev;
        prev = s->memory_mb;
        if (i < from) continue;
        if (s->compile_time > 0) {
            if (!isnan(before) && s->memory_mb > before) compile_growth += s->memory_mb - before;
            continue;
        }
        if (seen++ < settle) continue;
        double y = s->memory_mb - compile_growth;
        if (!n) first = y;
        last = y;
        xs[n] = (double)s->step;
        ys[n++] = y;
    }
    char compiled_note[200] = "";
    if (compiled)
        snprintf(compiled_note, sizeof compiled_note,
                 " (the %zu steady step%s that torch.compile compiled in left out, with the "
                 "%+.1f MB memory grew in them)",
                 compiled, compiled == 1 ? "" : "s", compile_growth);
    if (n < LEAK_MIN_STEPS) {
        pb__report_finding(
            r, "memory_growth", "memory", "skipped",
            compiled ? pb__report_textf("memory growth not checked: torch.compile compiled in %zu "
                                        "of the steady steps (it allocates while it compiles), "
                                        "%zu without a compile have memory figures, %d needed",
                                        compiled, n, LEAK_MIN_STEPS)
                     : pb__report_textf("memory growth not checked: %zu steady step%s with "
                                        "memory figures, %d needed",
                                        n, n == 1 ? "" : "s", LEAK_MIN_STEPS),
            NULL, sql, NULL);
        free(xs);
        free(ys);
        return;
    }
    double slope, intercept, r2;
    pb__report_theil_sen(xs, ys, n, &slope, &intercept, &r2);
    /* The same line through the last third of the points: a climb that slows there (caches
     * and allocator pools filling, which flatten out) is not steady yet, however well one
     * line fits the whole (issue 50: a healthy Trainer run read at step 200 as "out of memory
     * in ~4 h", later reports of the same process nothing). */
    double tail_slope = NAN, tail_icept, tail_r2;
    size_t tail = n / 3;
    if (tail >= LEAK_TAIL_MIN_POINTS)
        pb__report_theil_sen(xs + (n - tail), ys + (n - tail), tail, &tail_slope, &tail_icept,
                             &tail_r2);
    int slowing = !isnan(tail_slope) && slope > 0 && tail_slope < LEAK_TAIL_FRACTION * slope;
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
    double step_s = pb__report_median_wall(r->steps, r->warmup, r->count, -1);
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
    json_object_set_new(nums, "tail_slope_mb_per_step", pb__report_real(tail_slope));
    json_object_set_new(nums, "slowing", json_boolean(slowing));
    json_object_set_new(nums, "compile_steps_left_out", json_integer((json_int_t)compiled));
    json_object_set_new(nums, "compile_growth_mb", pb__report_real(compile_growth));
    int steady = slope > 0 && r2 >= LEAK_MIN_R2;
    if (steady && slowing && growth > 0) {
        pb__report_finding(
            r, "memory_growth", "memory", "info",
            pb__report_textf("memory climbed %+.1f MB over %zu steps%s (%+.3g MB/step), but "
                             "the climb is slowing: %+.3g MB/step over the last third; not "
                             "steady yet, as caches and allocator pools filling up look: no "
                             "projection",
                             growth, n, compiled_note, slope, tail_slope),
            nums, sql,
            "Report again later (probing <target> report): a climb that keeps its pace is "
            "worth a look, a cache filling up flattens (docs/report.md, \"Memory\").");
    } else if (growth >= LEAK_MIN_GROWTH_MB && steady) {
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
            pb__report_textf("memory grows steadily: %+.3g MB/step (r² %.2f over %zu steps%s): "
                             "%+.1f GB per hour at this pace; %s",
                             slope, r2, n, compiled_note, per_hour / 1024.0, when),
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
    } else if (steady && growth > 0) {
        /* A steady climb still below LEAK_MIN_GROWTH_MB: a short run's leak looks like this
         * (36 steps at 0.35 MB each), and so do caches still filling. Never "no growth" beside
         * a line that fits: a warning when the limit is near at this pace and the climb is over
         * LEAK_SHORT_GROWTH_MB, else too early to tell. */
        /* A warning needs a climb that is more than an allocator's first megabytes: a healthy
         * 20-step run's RSS climbs +1 MB as steadily (r² 1.00) as a leak does. */
        /* ... and a line through a handful of points: a healthy run's RSS still filling fits
         * one as well (report --last 5: +3.6 MB a step, r² 0.91) */
        /* ... and a pace that ends the job soon (under LEAK_CRITICAL_H): a climb its own numbers
         * put under the leak threshold is no warning beside a cause of days away (a DDP rank's
         * +0.0055 MB/step, +13.5 MB, ~50 h from the limit, outranked the straggler; issue 50) */
        int near = !isnan(hours) && hours < LEAK_CRITICAL_H && growth >= LEAK_SHORT_GROWTH_MB &&
                   n >= LEAK_SHORT_MIN_STEPS;
        char when[160];
        if (isnan(hours))
            snprintf(when, sizeof when, "the memory available is unknown");
        else if (hours < 1)
            snprintf(when, sizeof when, "if it goes on, out of memory in ~%.0f min (%.0f MB "
                     "available)", hours * 60, limit);
        else
            snprintf(when, sizeof when, "if it goes on, out of memory in ~%.0f h (%.0f MB "
                     "available)", hours, limit);
        pb__report_finding(
            r, "memory_growth", "memory", near ? "warning" : "info",
            pb__report_textf("%smemory climbs steadily: %+.3g MB/step (r² %.2f over %zu steps%s), "
                             "%+.1f MB so far, under the %.0f MB that tells a leak from caches "
                             "filling; %s",
                             near ? "" : "too few steps to tell: ", slope, r2, n, compiled_note,
                             growth, LEAK_MIN_GROWTH_MB, when),
            nums, sql,
            near ? "Watch it over more steps (probing <target> report again later); if the climb "
                   "goes on, something keeps a reference each step: tensors appended to lists or "
                   "dicts (losses kept without .detach() or .item(), caches, metrics) "
                   "(docs/report.md, \"Memory\")."
                 : NULL);
    } else if (growth >= LEAK_MIN_GROWTH_MB) {
        /* Grown by more than allocator noise, but not along a line: a jump (a cache or buffer
         * that grew once, an evaluation's activations kept) or a leak every few steps. Not a
         * projection (the line does not fit), and never "no growth" beside +GBs. */
        pb__report_finding(
            r, "memory_growth", "memory", "info",
            pb__report_textf("memory grew %+.1f MB over %zu steps%s, but not steadily (r² %.2f): "
                             "in jumps, as a cache or buffer growing once or a leak every few "
                             "steps does; no projection",
                             growth, n, compiled_note, r2),
            nums, sql,
            "See where it jumped: the finding's SQL lists the memory of every step. If the "
            "jumps go on (probing <target> report again later), look for what a step keeps "
            "now and then: an evaluation's outputs, a cache, a list appended to every N steps "
            "(docs/report.md, \"Memory\").");
    } else {
        pb__report_finding(
            r, "memory_growth", "memory", "ok",
            pb__report_textf("no steady memory growth: %+.1f MB over %zu steps%s", growth, n,
                             compiled_note),
            nums,
            sql, NULL);
    }
}
