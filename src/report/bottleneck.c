/*
 * bottleneck.c - phases 2 and 3 of the report (docs/report.md, "Bottleneck type", "Host time",
 * "Communication"): where the time of a step goes, which cause of lost time costs the most, and
 * which modules to look at.
 *
 * The shares come from the mean step of the steady window (pb__report_mean_shares: outlier steps
 * left out). Every cause above its threshold (GPU utilisation <70% / >90%, collectives 20-30%
 * normal, data loading time > compute time, and the named constants below, all listed in
 * docs/report.md) becomes one finding, costliest first; they are not exclusive. Only when none
 * holds is the step compute-bound, and the module with the largest self time is named. The
 * "component" section lists the top modules by self and by total time over the module steps
 * (r->mod_lo..mod_hi: detail steps when the agent records modules only in those).
 */
#include "rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNACCOUNTED_SHARE 0.30   /* time outside modules/optimizer worth a warning */
#define UNACCOUNTED_BOUND 0.40   /* ... that makes it the likely bottleneck */
#define OPTIMIZER_SHARE 0.30     /* optimizer share of the step worth a warning */
#define HOST_CALLS_PER_STEP 100  /* module executions per step for the host-overhead rule */
#define HOST_MEDIAN_SELF_S 30e-6 /* ... with a median self time below this */

/* The steps whose python.torch_trace rows the module rules read (r->mod_lo..mod_hi). */
static const char *module_filter(pb__report *r, char *buf)
{
    snprintf(buf, 128, "step BETWEEN %lld AND %lld", r->mod_lo, r->mod_hi);
    return buf;
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

/* What the steps of phases 2 and 3 share: the mean step and what was measured about it. */
typedef struct verdict {
    pb__shares m;
    double wall;           /* m.wall, or 1 when there is none (shares stay finite) */
    double comm;           /* collectives + grad_sync per step */
    double compute;        /* forward + backward + optimizer per step */
    const char *step_sql;  /* where the per-step figures come from */
    int host;              /* many tiny module calls (host_overhead) */
    double calls, median_self;
    char host_sql[SQL_MAX];
    char sql_self[SQL_MAX]; /* the top modules by self time */
    json_t *util;          /* mean GPU utilisation, borrowed from the bottleneck section */
    cause causes[8];       /* every cause above its threshold, costliest first */
    size_t nc;
    json_t *top;           /* the module with the largest self time, borrowed from the
                              component section; NULL when there is none */
} verdict;

/* The "component" section: the shares of the mean step and the top modules. */
static void component_section(pb__report *r, verdict *v)
{
    const pb__shares m = v->m;
    const char *step_sql = v->step_sql;
    double wall = v->wall;
    json_t *comp = json_object();
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
    char *sql_self = v->sql_self, sql_total[SQL_MAX];
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
    v->top = json_array_get(json_object_get(comp, "top_by_self"), 0);
}

/* Mean GPU utilisation from system.gpu (a new reference), or NULL without one. */
static json_t *gpu_utilization(pb__report *r)
{
    json_t *util = NULL;
    if (r->n_gpu > 0) {
        json_t *rows = pb__report_run(r, "SELECT AVG(utilization) AS utilization FROM system.gpu");
        int ok;
        double u = rows ? pb__report_num(json_array_get(rows, 0), "utilization", &ok) : 0;
        if (rows && ok) util = pb__report_real(u);
        json_decref(rows);
    }
    return util;
}

/* Every cause above its threshold, costliest first; they are not exclusive. */
static void find_causes(verdict *v)
{
    const pb__shares m = v->m;
    double comm = v->comm, compute = v->compute;
    cause *causes = v->causes;
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
    if (v->host)
        causes[nc++] = (cause){"host_overhead", "host overhead (many tiny module calls)",
                               m.forward + m.backward};
    qsort(causes, nc, sizeof *causes, cmp_cause);
    v->nc = nc;
}

/* The "bottleneck" section: the costliest cause, else CPU-bound (a GPU under 70%), else
 * compute; what decided it; every cause found. */
static void bottleneck_section(pb__report *r, verdict *v)
{
    const pb__shares m = v->m;
    double wall = v->wall, compute = v->compute;
    const cause *causes = v->causes;
    size_t nc = v->nc;
    json_t *bn = json_object();
    json_t *util = v->util;
    json_object_set_new(bn, "gpu_utilization", util ? util : json_null());
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
    json_object_set_new(bn, "sql", json_string(v->step_sql));
    json_t *list = json_array();
    for (size_t i = 0; i < nc; i++)
        json_array_append_new(list, json_pack("{s:s,s:s,s:o,s:o}", "type", causes[i].type,
                                              "label", causes[i].label, "seconds",
                                              pb__report_real(causes[i].cost_s), "share",
                                              pb__report_real(causes[i].cost_s / wall)));
    json_object_set_new(bn, "causes", list);
    free(decided);
    json_object_set_new(r->doc, "bottleneck", bn);
}

/* The numbers every bottleneck finding carries: the mean step and its parts. */
static json_t *mean_step_numbers(const pb__report *r, const pb__shares *s)
{
    const pb__shares m = *s;
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
    return nums;
}

/* One finding per cause; each takes nums (stolen) from mean_step_numbers() and first copies out
 * of the verdict the figures its claim and advice use. */

static void data_bound(pb__report *r, const verdict *v, json_t *nums)
{
    const pb__shares m = v->m;
    double compute = v->compute;
    const char *step_sql = v->step_sql;
    int cpu = r->device != 2;
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
}

static void communication(pb__report *r, const verdict *v, json_t *nums)
{
    const pb__shares m = v->m;
    double wall = v->wall, comm = v->comm;
    const char *step_sql = v->step_sql;
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
    const char *framework =
        json_string_value(json_object_get(r->src->conditions, "framework"));
    json_t *stage = json_object_get(r->src->conditions, "zero_stage");
    char *deepspeed = NULL;
    if (framework && !strcmp(framework, "deepspeed"))
        deepspeed = pb__report_textf(
            "A wait for communication is also a wait for the slowest rank: check load "
            "imbalance below first. If the ranks are balanced, overlap communication with "
            "the backward pass (DeepSpeed's \"overlap_comm\": true, larger "
            "\"reduce_bucket_size\" and \"allgather_bucket_size\"), send less "
            "(\"communication_data_type\": \"bf16\"%s) or check the interconnect "
            "(docs/report.md, \"Communication\").",
            json_integer_value(stage) >= 2
                ? "; ZeRO stage 2 and 3 move more per step than stage 1: the lowest stage "
                  "whose memory fits"
                : "");
    pb__report_finding(
        r, "communication", "bottleneck", comm > 0.5 * m.wall ? "critical" : "warning",
        claim, nums, step_sql,
        deepspeed ? deepspeed
                  : "A wait for communication is also a wait for the slowest rank: check load "
                    "imbalance below first. If the ranks are balanced, overlap communication "
                    "with the backward pass (DDP's bucket_cap_mb, no_sync() with gradient "
                    "accumulation), send less (bf16 gradients with a DDP communication hook) "
                    "or check the interconnect (docs/report.md, \"Communication\").");
    free(deepspeed);
}

static void optimizer_heavy(pb__report *r, const verdict *v, json_t *nums)
{
    const pb__shares m = v->m;
    double wall = v->wall;
    const char *step_sql = v->step_sql;
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
}

/* Host time outside the model; `costliest`: it is the first cause. */
static void unaccounted_time(pb__report *r, const verdict *v, json_t *nums, int costliest)
{
    const pb__shares m = v->m;
    double wall = v->wall;
    const char *step_sql = v->step_sql;
    json_t *workers = json_object_get(r->src->conditions, "num_workers");
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
        m.other >= UNACCOUNTED_BOUND * m.wall && costliest ? "critical" : "warning", claim,
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
}

static void host_overhead_finding(pb__report *r, const verdict *v, json_t *nums)
{
    double calls = v->calls, median_self = v->median_self;
    const char *host_sql = v->host_sql, *step_sql = v->step_sql;
    int cpu = r->device != 2;
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
}

/* Nothing else holds: compute-bound, and the module with the largest self time. */
static void compute_bound(pb__report *r, const verdict *v, json_t *nums)
{
    const char *sql_self = v->sql_self;
    const pb__shares m = v->m;
    double wall = v->wall;
    const char *step_sql = v->step_sql;
    const char *top_name = json_string_value(json_object_get(v->top, "module"));
    const char *top_stage = json_string_value(json_object_get(v->top, "stage"));
    double top_share = pb__report_num(v->top, "self_share", NULL);
    int cpu = r->device != 2;
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

/* Follow the module with the largest self time step by step. */
static void suggest_top_module(pb__report *r, const verdict *v)
{
    char sql[SQL_MAX], filter[128];
    const char *top_name = json_string_value(json_object_get(v->top, "module"));
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

/* Phases 2 and 3 in their order: the component section (whose queries come first), the causes,
 * the bottleneck section, one finding per cause, the module to follow. */
void pb__report_bottleneck(pb__report *r)
{
    verdict v;
    memset(&v, 0, sizeof v);
    v.m = pb__report_mean_shares(r);
    v.step_sql = pb__report_steps_sql(r);
    v.wall = v.m.wall > 0 ? v.m.wall : 1;
    v.comm = v.m.collectives + v.m.grad_sync;
    v.compute = v.m.forward + v.m.backward + v.m.optimizer;
    component_section(r, &v);
    v.host = r->count > r->warmup && host_overhead(r, &v.calls, &v.median_self, v.host_sql);
    v.util = gpu_utilization(r);
    find_causes(&v);
    bottleneck_section(r, &v);
    /* Findings for each cause, costliest first; the compute finding only when none holds. */
    for (size_t c = 0; c < v.nc; c++) {
        const char *t = v.causes[c].type;
        json_t *nums = mean_step_numbers(r, &v.m);
        if (!strcmp(t, "data"))
            data_bound(r, &v, nums);
        else if (!strcmp(t, "collectives"))
            communication(r, &v, nums);
        else if (!strcmp(t, "optimizer"))
            optimizer_heavy(r, &v, nums);
        else if (!strcmp(t, "host") || !strcmp(t, "data_likely"))
            unaccounted_time(r, &v, nums, c == 0);
        else if (!strcmp(t, "host_overhead"))
            host_overhead_finding(r, &v, nums);
        else
            json_decref(nums);
    }
    if (v.nc == 0) compute_bound(r, &v, mean_step_numbers(r, &v.m));
    suggest_top_module(r, &v);
}
