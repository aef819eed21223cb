/*
 * report.c - the driver of `probing <target> report`: loads the window of steps, runs the rules
 * in the order of the method (docs/report.md, "Method"), and assembles the JSON document
 * (docs/report.md, "`--json` schema").
 *
 * How it works: one query gives a row per step (python.steps when the agent records it, else
 * derived from python.torch_trace: the optimizer's `step` row ends at time_offset +
 * total_duration from the end of the previous optimizer step, so that is the step's wall time;
 * without an optimizer, the span of the step's rows). The steps are cut to the window (--last N),
 * leading warm-up steps are detected and left out of the statistics, and every other query is
 * restricted to the window with literal step numbers, so the SQL printed can be re-run as is.
 * Optional tables (data loader, memory, AMP, collectives, GPU) are probed with a count first; a
 * missing or empty one is listed in "missing" and the rules that need them say so.
 *
 * This is the only file that names the rules (rules.h): phase 1 in baseline.c, phases 2 and 3 in
 * bottleneck.c, the checks in checks.c, the memory section in memory_section.c, the mixed-
 * precision hardware checks in amp.c, the ranks of the job in ranks.c, cluster.c and
 * arrival_order.c. Each rule
 * and this driver use the toolkit (toolkit.h); no rule calls another or calls back here. The
 * order of the calls below is the order of the findings in the report. Causes of lost time are
 * not exclusive: each rule adds a finding for every one above its threshold.
 */
#include "report.h"
#include "rules.h"
#include "toolkit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP_FACTOR 1.5 /* a leading step this much above the later median is warm-up */

/* The conditions of the run, read in the target by eval. The model and the DataLoader are looked
 * for in the main thread's running frames, innermost first (training code mostly keeps them
 * inside main() or a Trainer method), then in __main__'s globals: the model is the module with
 * the most parameters among those found (a frame inside forward() holds a submodule as `self`),
 * the loader the first one found; a DeepSpeed engine among them gives the framework and its ZeRO
 * stage (the communication finding names DeepSpeed's knobs, not DDP's). */
const char pb_report_conditions_code[] =
    "import json as _j, sys as _s\n"
    "def _pb_conditions():\n"
    "    import threading, torch\n"
    "    r = {'python': _s.version.split()[0], 'torch': torch.__version__,\n"
    "         'cudnn_benchmark': bool(torch.backends.cudnn.benchmark),\n"
    "         'cuda_available': bool(torch.cuda.is_available()),\n"
    "         'threads': torch.get_num_threads()}\n"
    "    spaces = []\n"
    "    f = _s._current_frames().get(threading.main_thread().ident)\n"
    "    while f is not None:\n"
    "        spaces.append(f.f_locals)\n"
    "        f = f.f_back\n"
    "    spaces.append(vars(_s.modules['__main__']))\n"
    "    model, size, seen = None, -1, set()\n"
    "    for v in [v for ns in spaces for v in list(ns.values())]:\n"
    "        if isinstance(v, torch.nn.Module) and id(v) not in seen:\n"
    "            seen.add(id(v))\n"
    "            if 'zero_stage' not in r and hasattr(type(v), 'zero_optimization_stage'):\n"
    "                try:\n"
    "                    r['zero_stage'] = int(v.zero_optimization_stage())\n"
    "                    r['framework'] = 'deepspeed'\n"
    "                except Exception:\n"
    "                    pass\n"
    "            n = sum(p.numel() for p in v.parameters())\n"
    "            if n > size:\n"
    "                model, size = v, n\n"
    "        elif isinstance(v, torch.utils.data.DataLoader) and 'num_workers' not in r:\n"
    "            r['num_workers'] = v.num_workers\n"
    "            r['pin_memory'] = bool(v.pin_memory)\n"
    "            r['batch_size'] = v.batch_size\n"
    "    ps = list(model.parameters()) if model is not None else []\n"
    "    if ps:\n"
    "        r['device'] = str(ps[0].device)\n"
    "        r['param_dtype'] = str(ps[0].dtype).replace('torch.', '')\n"
    "        r['parameters'] = size\n"
    "    print(_j.dumps(r))\n"
    "_pb_conditions()\n"
    "del _pb_conditions\n";

/* ------------------------------------------------------------------ the window */

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

/* Loads every complete step of the window w (first..last, then its last last_n; NULL: all).
 * *cut_before says whether steps before the window's first were left out. Returns 0, or -1 when
 * python.torch_trace cannot be read (*error set). */
static int load_steps(pb__report *r, const pb_report_window *w, int *cut_before, char **error)
{
    int last = w ? w->last_n : 0;
    *cut_before = 0;
    json_t *rows = NULL;
    char *err = NULL;
    const char *sql = pb__report_steps_sql(r);
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
            int has_switches;
            s.cpu = pb__report_num(row, "cpu", &s.has_cpu);
            s.switches = pb__report_num(row, "involuntary_switches", &has_switches);
            s.has_cpu = s.has_cpu && has_switches;
            s.compile_time = pb__report_num(row, "compile_time", NULL);
        } else if (r->have_optimizer) {
            s.wall = pb__report_num(row, "optimizer_end", &ok); /* no step row: not complete */
            s.memory_mb = pb__report_num(row, "memory_mb", &s.has_memory);
        } else {
            s.wall = pb__report_num(row, "span", &ok);
            s.memory_mb = pb__report_num(row, "memory_mb", &s.has_memory);
        }
        if (!ok || !(s.wall > 0)) continue;
        if (w && w->last >= 0 && s.step > w->last) continue;
        if (w && w->first >= 0 && s.step < w->first) {
            *cut_before = 1;
            continue;
        }
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

/* Leading steps much slower than the later ones. A detail step is compared with the later
 * detail steps (probing's recording makes them slower than summary steps, which is not
 * warm-up), or with all later steps when fewer than three are detail steps. */
static void detect_warmup(pb__report *r)
{
    size_t k = 0;
    while (r->count >= 3 && k < r->count / 2) {
        size_t same = 0;
        for (size_t i = k + 1; i < r->count; i++) same += r->steps[i].detail == r->steps[k].detail;
        double ref = same >= 3 ? pb__report_median_wall(r->steps, k + 1, r->count, r->steps[k].detail)
                               : pb__report_median_wall(r->steps, k + 1, r->count, -1);
        if (!(r->steps[k].wall > WARMUP_FACTOR * ref)) break;
        k++;
    }
    r->warmup = k;
}

/* After the warm-up is known: whether to time the job on summary steps only (when they are
 * at least as many as the detail steps), and which steps the module rules read. */
static void detail_window(pb__report *r)
{
    size_t summary = 0, detail = 0;
    for (size_t i = r->warmup; i < r->count; i++) {
        if (r->steps[i].detail) detail++;
        else summary++;
    }
    r->detail_steady = detail;
    /* detail windows (a minority of detail steps): the job is timed on the summary steps; with
     * every step in detail (the default when detail is cheap), on all of them */
    r->skip_detail = r->have_detail && detail > 0 && summary >= 3 && summary >= detail;
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

/* Slow steps whose extra time lies in the part the bottleneck already names (the optimizer step
 * of an optimizer-heavy job, the data wait of a data-bound one) are that bottleneck, slower
 * still in some steps: one fix is the same for both, so the bottleneck finding goes first and
 * the slow steps' claim points to it. Seen on a loaded machine, where a memory-bound optimizer
 * step of a planted big_optimizer case varies 2x every few steps. */
static void slow_steps_in_bottleneck(pb__report *r)
{
    static const char *const same[][2] = {{"optimizer", "optimizer_heavy"},
                                          {"data", "data_bound"},
                                          {"communication", "communication"},
                                          {"other", "unaccounted_time"}};
    json_t *slow = find(r->findings, "outlier_steps");
    if (!slow) return;
    json_t *nums = json_object_get(slow, "numbers");
    const char *grew = json_string_value(json_object_get(nums, "grew"));
    if (!grew || json_is_true(json_object_get(nums, "machine"))) return;
    json_t *cause = NULL;
    for (size_t k = 0; k < sizeof same / sizeof same[0] && !cause; k++)
        if (!strcmp(grew, same[k][0])) cause = find(r->findings, same[k][1]);
    if (!cause) return;
    const char *sev = json_string_value(json_object_get(cause, "severity"));
    const char *slow_sev = json_string_value(json_object_get(slow, "severity"));
    /* only when the bottleneck is at least as severe: critical slow steps stay first */
    if ((strcmp(sev, "warning") && strcmp(sev, "critical")) ||
        (!strcmp(slow_sev, "critical") && strcmp(sev, "critical")))
        return;
    char *claim = pb__report_textf("%s (the part the bottleneck names: see %s)",
                                   json_string_value(json_object_get(slow, "claim")),
                                   json_string_value(json_object_get(cause, "id")));
    if (claim) json_object_set_new(slow, "claim", json_string(claim));
    free(claim);
    size_t at = 0, from = 0, i;
    json_t *f;
    json_array_foreach(r->findings, i, f) {
        if (f == slow) at = i;
        if (f == cause) from = i;
    }
    if (from < at) return; /* already first */
    json_incref(cause);
    json_array_remove(r->findings, from);
    json_array_insert_new(r->findings, at, cause);
}

/* Findings that explain others go before them (issue 50: on a job whose background thread
 * held the GIL 89% of the time, and on one of many tiny module calls, "the optimizer step takes
 * 46-59% of each step" was primary, with the cause beside it as a second warning): a thread
 * holding the GIL slows every part of the step the training thread runs; per-call overhead
 * slows the optimizer's per-parameter loop and the host time as it slows the modules; a rank
 * the others wait for (load imbalance, a rank or node that enters the collectives last) is the
 * cause on every rank's report, its own included, of their waits and slow steps (issue 50: on
 * an 8-rank FSDP2 job rank 6 was named but another finding was primary). A cause that is a
 * warning or critical moves to just before the first finding it explains. */
static void causes_first(pb__report *r)
{
    static const char *const explains[][2] = {
        {"gil_contention", "optimizer_heavy"},  {"gil_contention", "unaccounted_time"},
        {"gil_contention", "host_overhead"},    {"gil_contention", "outlier_steps"},
        {"host_overhead", "optimizer_heavy"},   {"host_overhead", "unaccounted_time"},
        {"load_imbalance", "communication"},    {"load_imbalance", "data_bound"},
        {"load_imbalance", "optimizer_heavy"},  {"load_imbalance", "unaccounted_time"},
        {"load_imbalance", "host_overhead"},    {"load_imbalance", "outlier_steps"},
        {"arrival_order", "communication"},     {"arrival_order", "data_bound"},
        {"arrival_order", "optimizer_heavy"},   {"arrival_order", "unaccounted_time"},
        {"arrival_order", "host_overhead"},     {"arrival_order", "outlier_steps"}};
    for (size_t k = 0; k < sizeof explains / sizeof explains[0]; k++) {
        json_t *cause = find(r->findings, explains[k][0]);
        json_t *effect = find(r->findings, explains[k][1]);
        if (!cause || !effect) continue;
        const char *sev = json_string_value(json_object_get(cause, "severity"));
        if (strcmp(sev, "warning") && strcmp(sev, "critical")) continue;
        json_t *on = json_object_get(cause, "numbers");
        if (!strcmp(explains[k][0], "arrival_order") &&
            !json_is_integer(json_object_get(on, "culprit")) &&
            !json_is_string(json_object_get(on, "late_host")))
            continue; /* nobody late: the collectives themselves slowed, no rank to blame */
        size_t at = 0, from = 0, i;
        json_t *f;
        json_array_foreach(r->findings, i, f) {
            if (f == effect) at = i;
            if (f == cause) from = i;
        }
        if (from < at) continue;
        json_incref(cause);
        json_array_remove(r->findings, from);
        json_array_insert_new(r->findings, at, cause);
    }
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

/* The others' communication time is their wait for the rank, or node, that enters the
 * collectives last (arrival_order.c): when the target is one of the waiting ranks and that wait
 * is at least half its communication share, `communication` says so and steps back to info, and
 * `arrival_order` takes its place among the findings (costliest first) and its severity when
 * higher: the late rank is the problem to fix, and the primary finding when communication would
 * have been. */
static void waiting_for_late_rank(pb__report *r)
{
    json_t *order = find(r->findings, "arrival_order"), *comm = find(r->findings, "communication");
    if (!order || !comm) return;
    const char *order_sev = json_string_value(json_object_get(order, "severity"));
    const char *comm_sev = json_string_value(json_object_get(comm, "severity"));
    if ((strcmp(order_sev, "warning") && strcmp(order_sev, "critical")) ||
        (strcmp(comm_sev, "warning") && strcmp(comm_sev, "critical")))
        return;
    json_t *on = json_object_get(order, "numbers"), *me = json_object_get(r->src->info, "rank");
    json_t *culprit = json_object_get(on, "culprit");
    const char *late_host = json_string_value(json_object_get(on, "late_host"));
    const char *my_host = json_string_value(json_object_get(r->src->info, "host"));
    double wait = json_number_value(json_object_get(on, "wait_share"));
    double share = json_number_value(json_object_get(json_object_get(comm, "numbers"), "share"));
    if (!json_is_integer(culprit) && json_is_true(json_object_get(
                                         json_object_get(on, "communication"), "slow"))) {
        /* Nobody is late, the collectives themselves slowed: communication stays the finding,
         * and says it is a slowdown of the network, not a wait for a rank. */
        char *claim = pb__report_textf("%s: the ranks arrive together and the collectives "
                                       "themselves slowed (see arrival order)",
                                       json_string_value(json_object_get(comm, "claim")));
        if (claim) json_object_set_new(comm, "claim", json_string(claim));
        free(claim);
        return;
    }
    if (!json_is_integer(culprit) || !(wait >= 0.5 * share)) return;
    if (late_host ? my_host && !strcmp(my_host, late_host)
                  : json_is_integer(me) && json_integer_value(me) == json_integer_value(culprit))
        return; /* the target is the late one: its communication is not a wait for itself */
    char *claim;
    if (late_host)
        claim = pb__report_textf("%s: mostly the wait for node %s, whose ranks enter the "
                                 "collectives last (see arrival order)",
                                 json_string_value(json_object_get(comm, "claim")), late_host);
    else
        claim = pb__report_textf("%s: mostly the wait for rank %lld, which enters the "
                                 "collectives last (see arrival order)",
                                 json_string_value(json_object_get(comm, "claim")),
                                 (long long)json_integer_value(culprit));
    if (claim) json_object_set_new(comm, "claim", json_string(claim));
    free(claim);
    if (!strcmp(comm_sev, "critical")) json_object_set_new(order, "severity", json_string("critical"));
    json_object_set_new(comm, "severity", json_string("info"));
    /* Move arrival_order to where communication stands (it is later: the checks follow the
     * bottleneck causes). */
    size_t at = 0, from = 0, i;
    json_t *f;
    json_array_foreach(r->findings, i, f) {
        if (f == comm) at = i;
        if (f == order) from = i;
    }
    json_incref(order);
    json_array_remove(r->findings, from);
    json_array_insert_new(r->findings, at, order);
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

/* Probes every table the rules read (row counts; a missing or empty one is listed in "missing").
 * Returns python.torch_trace's row count, or -1 when it cannot be read (*error set). */
static long long probe_tables(pb__report *r, char **error)
{
    long long n_trace = probe_table(r, "python.torch_trace", "everything");
    if (n_trace < 0) {
        json_t *m = json_array_get(r->missing, 0);
        const char *why = json_string_value(json_object_get(m, "error"));
        *error =
            pb__report_textf("cannot read python.torch_trace: %s", why ? why : "unknown error");
        return -1;
    }
    r->n_steps = probe_table(r, "python.steps", "per-step wall, data wait, syncs");
    r->n_loader = probe_table(r, "python.dataloader_trace",
                              "data-loader wait (data-bound or not), batch size");
    r->n_memory = probe_table(r, "python.memory",
                              "device memory per step (leaks), phases (activation estimate)");
    r->n_breakdown = probe_table(r, "python.memory_breakdown",
                                 "parameters, gradients and optimizer state in bytes");
    r->n_amp = probe_table(r, "python.amp_trace", "GradScaler scale and skipped steps");
    r->n_nccl = probe_table(r, "python.nccl_trace", "collectives share");
    r->n_gpu = probe_table(r, "system.gpu", "GPU utilisation (bottleneck type on a GPU)");
    r->n_gil = probe_table(r, "python.gil", "which threads hold the GIL (GIL contention)");
    r->n_layers = probe_table(r, "python.layers",
                              "Linear/convolution shapes and dtypes (tensor-core alignment)");
    r->from_steps_table = r->n_steps > 0;
    return n_trace;
}

/* The document's head: version, target, and the window the report covers. */
static void describe_window(pb__report *r, int last_steps)
{
    json_object_set_new(r->doc, "version", json_integer(1));
    if (r->src->info)
        json_object_set(r->doc, "target", r->src->info);
    else
        json_object_set_new(r->doc, "target", json_null());
    json_t *window = json_object();
    json_object_set_new(window, "last", last_steps > 0 ? json_integer(last_steps) : json_null());
    json_object_set_new(window, "first_step", r->count ? json_integer(r->lo) : json_null());
    json_object_set_new(window, "last_step", r->count ? json_integer(r->hi) : json_null());
    json_object_set_new(window, "steps", json_integer((json_int_t)r->count));
    json_object_set_new(r->doc, "window", window);
}

/* No complete step in the window: the phases have nothing to read; the report says why. */
static void no_steps(pb__report *r, long long n_trace)
{
    json_object_set_new(r->doc, "baseline", json_null());
    json_object_set_new(r->doc, "bottleneck", json_null());
    json_object_set_new(r->doc, "component", json_null());
    pb__report_finding(
        r, "no_steps", "baseline", "skipped",
        pb__report_textf(n_trace == 0 ? "no complete step recorded yet: python.torch_trace is "
                                        "empty (has the model run a forward pass?)"
                                      : "no complete step recorded yet (no optimizer step has "
                                        "ended and no forward has finished)"),
        NULL, pb__report_steps_sql(r), "Run the report again once the job has done a few steps.");
}

/* Without python.steps, the data-loader wait, the samples and the collectives of each step come
 * from their own tables. */
static void merge_optional_tables(pb__report *r)
{
    char sql[SQL_MAX];
    if (!r->from_steps_table && r->n_loader > 0) {
        pb__report_sqlf(sql,
                        "SELECT step, SUM(wait) AS value FROM python.dataloader_trace WHERE step "
                        "BETWEEN %lld AND %lld GROUP BY step",
                        r->lo, r->hi);
        pb__report_merge_per_step(r, sql, PB__STEP_DATA);
        pb__report_sqlf(sql,
                        "SELECT step, SUM(batch_size) AS value FROM python.dataloader_trace WHERE "
                        "step BETWEEN %lld AND %lld GROUP BY step",
                        r->lo, r->hi);
        pb__report_merge_per_step(r, sql, PB__STEP_SAMPLES);
    }
    if (!r->from_steps_table && r->n_nccl > 0) {
        pb__report_sqlf(sql,
                        "SELECT step, SUM(duration_ms) / 1000.0 AS value FROM python.nccl_trace "
                        "WHERE step BETWEEN %lld AND %lld GROUP BY step",
                        r->lo, r->hi);
        pb__report_merge_per_step(r, sql, PB__STEP_COLLECTIVES);
    }
}

/* The document's tail: the primary finding and the lists the rules filled. */
static void finish_document(pb__report *r)
{
    const char *primary = first_problem(r->findings);
    json_object_set_new(r->doc, "primary", primary ? json_string(primary) : json_null());
    json_object_set(r->doc, "findings", r->findings);
    json_object_set(r->doc, "next", r->next);
    json_object_set(r->doc, "missing", r->missing);
    json_object_set(r->doc, "query_errors", r->errors);
}

/* The rules of a training job (docs/report.md, "Method"), in the method's order. */
static void training_rules(pb__report *r, int last_steps, long long n_trace, int cut_before)
{
    /* Phases 1 to 3 (docs/report.md, "Method"), then the GIL. */
    if (r->count == 0) {
        no_steps(r, n_trace);
    } else {
        merge_optional_tables(r);
        /* Warm-up happens at the start of a run: a --last window that starts later has none,
         * and a slow step in it is an outlier, not warm-up. */
        if ((last_steps > 0 && r->lo > 0) || cut_before)
            r->warmup = 0;
        else
            detect_warmup(r);
        detail_window(r);
        pb__report_compiles(r); /* first: a recompile in steady state is the primary finding */
        pb__report_baseline(r);
        pb__report_slow_steps(r);
        pb__report_bottleneck(r);
        pb__report_device_time(r);
        pb__report_check_gil(r);
        pb__report_sample_size(r);
    }
    /* Memory, the ranks of the job, then the checks. */
    if (r->count) {
        pb__report_memory_growth(r);
        pb__report_memory(r);
        pb__report_check_collectives(r);
    } else {
        json_object_set_new(r->doc, "memory", json_null());
    }
    pb__report_ranks(r);
    pb__report_cluster(r);
    pb__report_arrival_order(r);
    waiting_for_slow_rank(r);
    waiting_for_late_rank(r);
    slow_steps_in_bottleneck(r);
    causes_first(r);
    pb__report_check_amp(r);
    if (r->count) {
        pb__report_amp_hardware(r);
        pb__report_check_syncs(r);
    }
    pb__report_suggest(
        r, "the slowest modules over everything recorded",
        "probing %s query \"SELECT module, stage, COUNT(*) AS calls, AVG(duration) AS "
        "avg_self_s FROM python.torch_trace GROUP BY module, stage ORDER BY SUM(duration) "
        "DESC LIMIT 10\"",
        pb__report_target(r));
}

/* The report of a process that generates or serves and does not train (docs/report.md,
 * "Inference"): the requests, then the generations; the training rules and their missing tables
 * (data loader, optimizer state) do not apply. */
static void inference_rules(pb__report *r)
{
    json_object_set_new(r->doc, "workload", json_string("inference"));
    json_array_clear(r->missing);
    json_object_set_new(r->doc, "baseline", json_null());
    json_object_set_new(r->doc, "bottleneck", json_null());
    json_object_set_new(r->doc, "component", json_null());
    json_object_set_new(r->doc, "memory", json_null());
    pb__report_requests(r);
    pb__report_inference(r);
}

/* The steady steps of the built report r into *out (see report.h). Returns 0 or -ENOMEM. */
static int export_steady(const pb__report *r, pb_report_steps *out)
{
    memset(out, 0, sizeof *out);
    out->in_window = r->count;
    out->warmup = r->warmup;
    out->first = r->count ? r->lo : -1;
    out->last = r->count ? r->hi : -1;
    out->steps = calloc(r->count + 1, sizeof *out->steps);
    if (!out->steps) return -ENOMEM;
    /* an outlier is judged against the steps of its kind: detail steps are slower by probing's
     * own recording when the report times the job on summary steps */
    double median_all = pb__report_median_wall(r->steps, r->warmup, r->count, -1);
    double median_kind[2] = {pb__report_median_wall(r->steps, r->warmup, r->count, 0),
                             pb__report_median_wall(r->steps, r->warmup, r->count, 1)};
    for (size_t i = r->warmup; i < r->count; i++) {
        const pb__step_row *s = &r->steps[i];
        double median = r->skip_detail ? median_kind[s->detail ? 1 : 0] : median_all;
        if (s->wall > OUTLIER_FACTOR * median) {
            out->outliers++;
            continue;
        }
        pb_report_step *o = &out->steps[out->count++];
        o->step = s->step;
        o->wall = s->wall;
        o->samples = s->samples;
        o->phase[PB_PHASE_DATA_WAIT] = s->data;
        o->phase[PB_PHASE_FORWARD] = s->forward;
        o->phase[PB_PHASE_BACKWARD] = s->backward;
        o->phase[PB_PHASE_OPTIMIZER] = s->optimizer;
        o->phase[PB_PHASE_COLLECTIVES] = s->collectives;
        o->phase[PB_PHASE_GRAD_SYNC] = s->grad_sync;
        double other = s->wall;
        for (int p = 0; p < PB_PHASE_OTHER; p++) other -= o->phase[p];
        o->phase[PB_PHASE_OTHER] = other > 0 ? other : 0;
        o->timing = pb__report_timing_step(r, i);
        o->detail = r->have_detail ? s->detail : 1;
    }
    return 0;
}

void pb_report_steps_free(pb_report_steps *s)
{
    if (!s) return;
    free(s->steps);
    memset(s, 0, sizeof *s);
}

int pb_report_build(const pb_report_source *src, int last_steps, json_t **out, char **error)
{
    pb_report_window w = {-1, -1, last_steps};
    return pb_report_build_window(src, &w, out, NULL, error);
}

int pb_report_build_window(const pb_report_source *src, const pb_report_window *w, json_t **out,
                           pb_report_steps *steady, char **error)
{
    pb__report r;
    int last_steps = w ? w->last_n : 0, cut_before = 0;
    if (steady) memset(steady, 0, sizeof *steady);
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
    long long n_trace = probe_tables(&r, error);
    if (n_trace < 0) goto fail;
    detect_device(&r);
    if (load_steps(&r, w, &cut_before, error)) goto fail;
    describe_window(&r, last_steps);
    if (pb__report_is_inference(&r))
        inference_rules(&r);
    else
        training_rules(&r, last_steps, n_trace, cut_before);
    finish_document(&r);
    if (steady && export_steady(&r, steady)) {
        *error = pb__report_textf("out of memory");
        goto fail;
    }
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
