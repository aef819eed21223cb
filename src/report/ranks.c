/*
 * ranks.c - load imbalance across the ranks of a distributed job (docs/report.md, "Distributed"):
 * different times across ranks are normal, an imbalance over 10% is not, with imbalance =
 * (max - mean) / mean of the ranks' iteration times.
 *
 * The report reads one target; the caller (the CLI) finds the other ranks of the same job that
 * it can reach (same job and world size in their /api/info: ranks on this machine) and passes
 * them as peers. Each rank's python.steps gives the wall time and its parts for the same steps:
 * the target's steady window, cut to the steps every rank has recorded. Medians per rank keep a
 * descheduled step on a busy machine from deciding.
 *
 * In synchronous data-parallel training every rank waits for the slowest one in the gradient
 * all-reduce, so step times come out equal even when the work is not: the waiting lands in
 * python.steps.grad_sync (DDP's wait for its all-reduces after the backward pass), in backward
 * (all-reduces that block during it) or in recorded collectives. So besides that step-time
 * figure, the rule compares the time each rank spends outside those (data wait, forward,
 * optimizer, other), where no rank waits for another, and names the part that differs most.
 * An agent without grad_sync (older) leaves DDP's wait in `other`: then the comparison is
 * blurred, and the claim says so.
 */
#include "phases.h"
#include "rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMBALANCE 0.10        /* over 10% is imbalance (docs/report.md, "Distributed") */
#define IMBALANCE_MIN_S 0.002 /* ... and at least this much per step: below it, scheduling noise */
#define IMBALANCE_MIN_STEPS 3 /* common steps needed */

/* The parts compared: the step time, each phase of python.steps (phases.h) at FIRST_PHASE + its
 * pb_phase_id, then three sums of phases: OUTSIDE (the time no rank waits in: neither a wait for
 * the other ranks nor work that can hold one), COMPUTE (the work: all but the waits) and WAIT
 * (the waits for the other ranks). */
enum { WALL, FIRST_PHASE, OUTSIDE = FIRST_PHASE + PB_PHASE_COUNT, COMPUTE, WAIT, NPARTS };
#define DATA (FIRST_PHASE + PB_PHASE_DATA_WAIT)

typedef struct rank_data {
    int rank;
    const char *target;
    json_t *rows;        /* python.steps rows of the window, owned */
    double part[NPARTS]; /* medians over the common steps */
} rank_data;

/* The row of `step` in rows (ordered by step), or NULL. */
static json_t *row_of(json_t *rows, long long step)
{
    size_t lo = 0, hi = json_array_size(rows);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        long long s = (long long)pb__report_num(json_array_get(rows, mid), "step", NULL);
        if (s == step) return json_array_get(rows, mid);
        if (s < step)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The sum of the phases whose flags include all of `with` and none of `without`, in table
 * order, from -0.0 (the identity of IEEE addition: the first term's value exactly). */
static double phase_sum(json_t *row, unsigned with, unsigned without)
{
    double sum = -0.0;
    for (int p = 0; p < PB_PHASE_COUNT; p++)
        if ((pb_phases[p].flags & with) == with && pb_phase_selected(p, without))
            sum += pb__report_num(row, pb_phases[p].column, NULL);
    return sum;
}

static double part_value(json_t *row, int part)
{
    if (part == OUTSIDE) return phase_sum(row, 0, PB_PHASE_RANK_WAIT | PB_PHASE_HOLDS_WAIT);
    if (part == COMPUTE)
        return part_value(row, OUTSIDE) + phase_sum(row, PB_PHASE_HOLDS_WAIT, PB_PHASE_RANK_WAIT);
    if (part == WAIT) return phase_sum(row, PB_PHASE_RANK_WAIT, 0);
    if (part == WALL) return pb__report_num(row, pb_phase_wall.column, NULL);
    /* a phase an agent lacks (grad_sync of an older one) reads 0 */
    return pb__report_num(row, pb_phases[part - FIRST_PHASE].column, NULL);
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, pb__report_cmp_double);
    return pb__report_percentile(v, n, 50);
}

static void skipped(pb__report *r, json_t *nums, const char *sql, char *claim)
{
    pb__report_finding(r, "load_imbalance", "check", "skipped", claim, nums, sql, NULL);
}

void pb__report_ranks(pb__report *r)
{
    const pb_report_source *src = r->src;
    json_t *world_v = json_object_get(src->info, "world_size");
    json_t *rank_v = json_object_get(src->info, "rank");
    long long world = json_is_integer(world_v) ? json_integer_value(world_v) : 0;
    int my_rank = json_is_integer(rank_v) ? (int)json_integer_value(rank_v) : 0;
    char sql[SQL_MAX], plain_sql[SQL_MAX], columns[256], plain_columns[256];
    long long first = pb__report_steady_first(r);
    /* every phase; plain_sql: without the columns an older agent lacks */
    if (pb_phase_columns(columns, sizeof columns, 0, ", ") < 0 ||
        pb_phase_columns(plain_columns, sizeof plain_columns, PB_PHASE_NEWER, ", ") < 0)
        return;
    pb__report_sqlf(sql,
                    "SELECT step, %s, %s\n"
                    "FROM python.steps WHERE step BETWEEN %lld AND %lld ORDER BY step",
                    pb_phase_wall.column, columns, first, r->hi);
    pb__report_sqlf(plain_sql,
                    "SELECT step, %s, %s\n"
                    "FROM python.steps WHERE step BETWEEN %lld AND %lld ORDER BY step",
                    pb_phase_wall.column, plain_columns, first, r->hi);
    json_t *nums = json_object();
    json_object_set_new(nums, "rank", json_integer(my_rank));
    json_object_set_new(nums, "world_size", world > 0 ? json_integer(world) : json_null());
    json_object_set_new(nums, "ranks_reached", json_integer((json_int_t)src->npeers + 1));
    if (world <= 0 && !src->npeers) {
        skipped(r, nums, NULL,
                pb__report_textf("load imbalance not checked: the agent does not say the job's "
                                 "world size (an agent or recording from before it did)"));
        return;
    }
    if (world == 1 && !src->npeers) {
        skipped(r, nums, NULL,
                pb__report_textf("load imbalance: does not apply (a single process, world "
                                 "size 1)"));
        return;
    }
    if (!src->npeers) {
        skipped(r, nums, NULL,
                pb__report_textf("load imbalance not checked: this is rank %d of %lld and no "
                                 "other rank could be reached (%s); the check (>10%% between "
                                 "ranks, docs/report.md \"Distributed\") needs every rank's agent",
                                 my_rank, world,
                                 src->peers_note ? src->peers_note : "none was looked for"));
        return;
    }
    if (!r->from_steps_table || r->count <= r->warmup) {
        skipped(r, nums, NULL,
                pb__report_textf("load imbalance not checked: it needs python.steps rows of "
                                 "steady steps on every rank"));
        return;
    }

    size_t n = src->npeers + 1, used = 0;
    int no_grad_sync = 0;
    rank_data *ranks = calloc(n, sizeof *ranks);
    json_t *unread = json_array();
    if (!ranks) {
        json_decref(nums);
        json_decref(unread);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        rank_data *d = &ranks[used];
        char *error = NULL;
        json_t *rows = NULL;
        pb_report_query_fn query = i ? src->peers[i - 1].query : src->query;
        void *ctx = i ? src->peers[i - 1].ctx : src->ctx;
        d->rank = i ? src->peers[i - 1].rank : my_rank;
        d->target = i ? src->peers[i - 1].target : pb__report_target(r);
        if (query(ctx, sql, &rows, &error) || !json_is_array(rows)) {
            /* an agent from before python.steps.grad_sync */
            free(error);
            error = NULL;
            json_decref(rows);
            rows = NULL;
            no_grad_sync = 1;
            if (query(ctx, plain_sql, &rows, &error) || !json_is_array(rows)) {
                json_array_append_new(unread, json_pack("{s:i,s:s,s:s}", "rank", d->rank, "target",
                                                        d->target ? d->target : "?", "error",
                                                        error ? error : "no rows"));
                free(error);
                json_decref(rows);
                continue;
            }
        }
        free(error);
        d->rows = rows;
        used++;
    }
    /* The steps every rank has, in the target's steady window. */
    size_t common = 0;
    double *values = calloc(r->count + 1, sizeof *values);
    long long *steps = calloc(r->count + 1, sizeof *steps);
    for (size_t i = r->warmup; steps && i < r->count; i++) {
        long long s = r->steps[i].step;
        int everywhere = used > 1;
        for (size_t k = 0; k < used && everywhere; k++)
            everywhere = row_of(ranks[k].rows, s) != NULL;
        if (everywhere) steps[common++] = s;
    }
    json_object_set_new(nums, "ranks_reached", json_integer((json_int_t)used));
    if (json_array_size(unread)) json_object_set(nums, "unreadable", unread);
    if (used < 2 || common < IMBALANCE_MIN_STEPS || !values) {
        skipped(r, nums, sql,
                pb__report_textf("load imbalance not checked: %zu rank%s readable, %zu steady "
                                 "step%s recorded on all of them (%d needed)",
                                 used, used == 1 ? "" : "s", common, common == 1 ? "" : "s",
                                 IMBALANCE_MIN_STEPS));
        nums = NULL; /* the finding owns it */
        goto done;
    }
    for (size_t k = 0; k < used; k++)
        for (int part = 0; part < NPARTS; part++) {
            for (size_t i = 0; i < common; i++)
                values[i] = part_value(row_of(ranks[k].rows, steps[i]), part);
            ranks[k].part[part] = median(values, common);
        }
    double mean[NPARTS] = {0}, maxv[NPARTS], minv[NPARTS];
    size_t argmax[NPARTS] = {0}, argmin[NPARTS] = {0};
    for (int part = 0; part < NPARTS; part++) {
        maxv[part] = -INFINITY;
        minv[part] = INFINITY;
        for (size_t k = 0; k < used; k++) {
            double v = ranks[k].part[part];
            mean[part] += v / (double)used;
            if (v > maxv[part]) maxv[part] = v, argmax[part] = k;
            if (v < minv[part]) minv[part] = v, argmin[part] = k;
        }
    }
    double wall = mean[WALL] > 0 ? mean[WALL] : 1;
    double step_imbalance = (maxv[WALL] - mean[WALL]) / wall;
    double work_imbalance = (maxv[OUTSIDE] - mean[OUTSIDE]) / wall;
    /* Synchronous data parallelism turns a slow rank's extra work into the others' wait: the
     * work and the wait are mirror images, and the slow rank is the one that waits least.
     * Spreads (max - min) of per-rank medians, as shares of the median step. */
    double compute_spread = (maxv[COMPUTE] - minv[COMPUTE]) / wall;
    double wait_spread = (maxv[WAIT] - minv[WAIT]) / wall;
    /* the phase of the work (no wait for the other ranks) whose spread is the largest */
    int differs = DATA;
    for (int p = 0; p < PB_PHASE_COUNT; p++) {
        int part = FIRST_PHASE + p;
        if (!pb_phase_selected(p, PB_PHASE_RANK_WAIT)) continue;
        if (maxv[part] - minv[part] > maxv[differs] - minv[differs]) differs = part;
    }
    json_t *per_rank = json_array();
    for (size_t k = 0; k < used; k++) {
        json_t *o = json_object();
        json_object_set_new(o, "rank", json_integer(ranks[k].rank));
        json_object_set_new(o, "target", json_string(ranks[k].target ? ranks[k].target : "?"));
        json_object_set_new(o, "median_step_s", pb__report_real(ranks[k].part[WALL]));
        for (int p = 0; p < PB_PHASE_COUNT; p++) {
            char key[32];
            snprintf(key, sizeof key, "%s_s", pb_phases[p].column);
            json_object_set_new(o, key, pb__report_real(ranks[k].part[FIRST_PHASE + p]));
        }
        json_object_set_new(o, "outside_waits_s", pb__report_real(ranks[k].part[OUTSIDE]));
        json_object_set_new(o, "work_s", pb__report_real(ranks[k].part[COMPUTE]));
        json_object_set_new(o, "wait_s", pb__report_real(ranks[k].part[WAIT]));
        json_array_append_new(per_rank, o);
    }
    json_object_set_new(nums, "steps", json_integer((json_int_t)common));
    json_object_set_new(nums, "first_step", json_integer(steps[0]));
    json_object_set_new(nums, "last_step", json_integer(steps[common - 1]));
    json_object_set_new(nums, "step_imbalance", pb__report_real(step_imbalance));
    json_object_set_new(nums, "outside_waits_imbalance", pb__report_real(work_imbalance));
    const pb_phase *differs_phase = &pb_phases[differs - FIRST_PHASE];
    json_object_set_new(nums, "differs_most", json_string(differs_phase->column));
    json_object_set_new(nums, "compute_spread", pb__report_real(compute_spread));
    json_object_set_new(nums, "wait_spread", pb__report_real(wait_spread));
    json_object_set_new(nums, "slow_rank", json_integer(ranks[argmax[COMPUTE]].rank));
    json_object_set_new(nums, "least_waiting_rank", json_integer(ranks[argmin[WAIT]].rank));
    if (no_grad_sync)
        json_object_set_new(nums, "note",
                            json_string("a rank without python.steps.grad_sync (an older agent): "
                                        "DDP's wait for its gradient all-reduces is in its "
                                        "`other`"));
    json_object_set_new(nums, "per_rank", per_rank);

    int step_flag = step_imbalance > IMBALANCE && maxv[WALL] - mean[WALL] >= IMBALANCE_MIN_S;
    int work_flag = work_imbalance > IMBALANCE && maxv[OUTSIDE] - mean[OUTSIDE] >= IMBALANCE_MIN_S;
    int mirror_flag = compute_spread > IMBALANCE && maxv[COMPUTE] - minv[COMPUTE] >= IMBALANCE_MIN_S;
    json_object_set_new(nums, "sql_runs_on",
                        json_string("every rank: probing <pid> query, "
                                    "pids in per_rank"));
    if (step_flag || work_flag || mirror_flag) {
        const rank_data *slow = &ranks[mirror_flag ? argmax[COMPUTE]
                                       : work_flag ? argmax[OUTSIDE]
                                                   : argmax[WALL]];
        const rank_data *most = &ranks[argmax[differs]], *least = &ranks[argmin[differs]];
        char *claim;
        if (mirror_flag)
            claim = pb__report_textf(
                "load imbalance: rank %d is the slow rank: it works %.1f ms more per step than "
                "rank %d (%.0f%% of the %.1f ms step; over 10%% is flagged) and waits %.1f ms "
                "less for the others; %s differs most: rank %d %.1f ms vs rank %d %.1f ms",
                slow->rank, 1e3 * (maxv[COMPUTE] - minv[COMPUTE]), ranks[argmin[COMPUTE]].rank,
                100 * compute_spread, 1e3 * mean[WALL], 1e3 * (maxv[WAIT] - minv[WAIT]),
                differs_phase->name_long, most->rank, 1e3 * maxv[differs], least->rank,
                1e3 * minv[differs]);
        else if (work_flag)
            claim = pb__report_textf(
                "load imbalance: rank %d spends %.1f ms more per step than the ranks' mean "
                "outside backward, collectives and gradient sync (%.0f%% of the %.1f ms step; "
                "over 10%% is flagged); %s differs most: rank %d %.1f ms vs rank %d %.1f ms; "
                "the other ranks wait for it",
                slow->rank, 1e3 * (maxv[OUTSIDE] - mean[OUTSIDE]), 100 * work_imbalance,
                1e3 * mean[WALL], differs_phase->name_long, most->rank, 1e3 * maxv[differs],
                least->rank, 1e3 * minv[differs]);
        else
            claim = pb__report_textf("load imbalance: rank %d's step takes %.0f%% longer than "
                                     "the ranks' mean (%.1f ms vs %.1f ms; over "
                                     "10%% is flagged)",
                                     slow->rank, 100 * step_imbalance, 1e3 * maxv[WALL],
                                     1e3 * mean[WALL]);
        pb__report_finding(
            r, "load_imbalance", "check", "warning", claim, nums, sql,
            differs == DATA
                ? "Load imbalance in data loading: some ranks wait for others (docs/report.md, \"Distributed\"). "
                  "Give the slow rank's DataLoader more num_workers and pin_memory=True, and "
                  "shard the data so every rank loads the same amount (docs/report.md, \"Bottleneck type\")."
                : "Some ranks wait for others (docs/report.md, \"Distributed\"): give every rank the same work "
                  "(the same batch size and sequence lengths per rank), and keep logging, "
                  "evaluation and checkpointing off the training path of one rank (GPU 0 may "
                  "have extra logging overhead).");
        if (slow->target)
            pb__report_suggest(r, "the slow rank's own report", "probing %s report --last %zu",
                               slow->target, common);
    } else {
        pb__report_finding(r, "load_imbalance", "check", "ok",
                           pb__report_textf("%zu ranks balanced over %zu steps: step times "
                                            "within %.1f%% of their mean, work (everything but "
                                            "the wait for other ranks) within %.1f%% of the step "
                                            "between the fastest and the slowest rank (over 10%% "
                                            "is flagged)",
                                            used, common, 100 * step_imbalance,
                                            100 * compute_spread),
                           nums, sql, NULL);
    }
    nums = NULL;
done:
    json_decref(nums);
    json_decref(unread);
    for (size_t k = 0; k < used; k++) json_decref(ranks[k].rows);
    free(ranks);
    free(values);
    free(steps);
}
