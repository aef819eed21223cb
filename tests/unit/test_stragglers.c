/*
 * test_stragglers.c - the arrival-order analysis (src/report/stragglers.c) on generated
 * summaries: a healthy job names nobody, a slow rank is named with its phase, a slow node is
 * named as the node, a systematic lag below the floor is noise, incomplete collectives are not
 * compared, and the same holds at 1,024 ranks (timed, not asserted on speed).
 */
#include "check.h"
#include "stragglers.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { RING = 512 };

static uint64_t rng = 88172645463325252ull;
/* SG_SEED=N runs the same cases on other draws (to see how close to a threshold a case is). */
static void seed_from_env(void) {
    const char *s = getenv("SG_SEED");
    if (s) rng = strtoull(s, NULL, 10);
}
static double jitter_ms(double max) { /* xorshift64: deterministic, uniform in [0, max) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng % 1000000) / 1e6 * max;
}

typedef struct job {
    size_t n;
    pb_arrival_rank *ranks;
    pb_arrival *arr;
    char (*host)[32];
} job;

/* The machine: step length and scheduling jitter (uniform, up to JITTER ms). */
static double STEP_MS = 100, JITTER = 1.0;

/* n ranks, per_host ranks a host, `colls` all-reduces each step of STEP_MS. Each rank enters
 * collective s at s*STEP_MS + jitter (up to JITTER) + delay(rank); its forward phase is 30 ms
 * + delay (the slow rank spends its extra time in forward). */
static job make_job(size_t n, size_t per_host, size_t colls, const double *delay_ms) {
    job j = {n, calloc(n, sizeof(pb_arrival_rank)), calloc(n * colls, sizeof(pb_arrival)),
             calloc(n, 32)};
    for (size_t r = 0; r < n; r++) {
        snprintf(j.host[r], 32, "node%zu", r / per_host);
        pb_arrival_rank *pr = &j.ranks[r];
        pr->rank = (int)r;
        pr->host = j.host[r];
        pr->step_ms = STEP_MS;
        pr->phase_ms[PB_PHASE_DATA_WAIT] = 5 + jitter_ms(0.5);
        pr->phase_ms[PB_PHASE_FORWARD] = 30 + delay_ms[r] + jitter_ms(0.5);
        pr->phase_ms[PB_PHASE_BACKWARD] = 50 + jitter_ms(0.5);
        pr->phase_ms[PB_PHASE_OPTIMIZER] = 10;
        pr->arrivals = &j.arr[r * colls];
        pr->n_arrivals = colls;
        for (size_t s = 0; s < colls; s++) {
            int64_t enter =
                (int64_t)((double)s * STEP_MS * 1e6 + (jitter_ms(JITTER) + delay_ms[r]) * 1e6);
            j.arr[r * colls + s] = (pb_arrival){1, 1000 + s, "all_reduce", 1 << 20, enter,
                                                enter + 2000000};
        }
    }
    return j;
}

static void free_job(job *j) {
    free(j->ranks), free(j->arr), free(j->host);
}

static void healthy_and_slow(size_t n, size_t per_host, int slow, size_t ring) {
    double *d = calloc(n, sizeof *d);
    job j = make_job(n, per_host, ring, d);
    pb_sg_result r;
    clock_t t0 = clock();
    CHECK(pb_stragglers_analyze(j.ranks, n, &r) == 0, "%zu ranks healthy: analysed", n);
    double sec = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("       %zu ranks x %zu arrivals: %.1f ms of CPU\n", n, ring, sec * 1e3);
    CHECK(r.collectives == ring && r.incomplete == 0, "%zu ranks healthy: %zu collectives (got %zu)",
          n, ring, r.collectives);
    CHECK(r.culprit == -1 && r.late_host == NULL, "%zu ranks healthy: nobody named (culprit %d)", n,
          r.culprit);
    CHECK(r.floor_ms == 5.0, "floor is 5 %% of the 100 ms step (got %.2f)", r.floor_ms);
    CHECK(r.wait_share == 0, "%zu ranks healthy: nobody waits for a culprit", n);
    pb_stragglers_free(&r);
    free_job(&j);

    d[slow] = 30;
    j = make_job(n, per_host, ring, d);
    CHECK(pb_stragglers_analyze(j.ranks, n, &r) == 0, "%zu ranks, rank %d slow: analysed", n, slow);
    CHECK(r.culprit >= 0 && r.ranks[r.culprit].rank == slow, "%zu ranks: rank %d is the culprit (got %d)",
          n, slow, r.culprit >= 0 ? r.ranks[r.culprit].rank : -1);
    CHECK(r.ranks[slow].times_last == ring, "rank %d last in every collective (%zu)", slow,
          r.ranks[slow].times_last);
    CHECK(r.ranks[slow].median_lag_ms > 29 && r.ranks[slow].median_lag_ms < 31,
          "its median lag is about 30 ms (%.2f)", r.ranks[slow].median_lag_ms);
    CHECK(r.culprit_phase == PB_PHASE_FORWARD, "its time goes to forward (phase %d, +%.1f ms)", r.culprit_phase,
          r.culprit_phase_excess_ms);
    CHECK(r.late_host == NULL, "%zu ranks, one slow rank: no late node", n);
    CHECK(r.wait_share > 0.28 && r.wait_share < 0.32,
          "%zu ranks: the others wait for it 30 ms of each 100 ms step (%.3f)", n, r.wait_share);
    json_t *doc = pb_stragglers_json(&r, 4, NULL, 0);
    CHECK(doc && json_integer_value(json_object_get(doc, "culprit")) == slow &&
              json_array_size(json_object_get(doc, "ranks")) == 4 &&
              json_integer_value(json_object_get(doc, "ranks_left_out")) == (json_int_t)n - 4,
          "%zu ranks as JSON, 4 ranks kept: culprit %d, %zu listed", n, slow,
          json_array_size(json_object_get(doc, "ranks")));
    int slow_listed = 0;
    for (size_t k = 0; k < 4; k++)
        slow_listed |= json_integer_value(json_object_get(
                           json_array_get(json_object_get(doc, "ranks"), k), "rank")) == slow;
    CHECK(slow_listed, "the ranks kept include the slow one");
    json_decref(doc);
    pb_sg_member *m = NULL;
    pb_sg_last *l = NULL;
    size_t nm = 0, nl = 0;
    clock_t t1 = clock();
    int members_rc = pb_stragglers_members(j.ranks, n, &m, &nm, &l, &nl);
    printf("       members (the exporter's series) of %zu ranks x %zu arrivals: %.1f ms of CPU\n", n,
           ring, (double)(clock() - t1) / CLOCKS_PER_SEC * 1e3);
    CHECK(members_rc == 0 && nm == n && nl == ring,
          "%zu ranks: one member each, %zu collectives with their last rank (%zu, %zu)", n, ring,
          nm, nl);
    size_t behind = 0, slow_last = 0;
    for (size_t k = 0; k < nm; k++)
        if (m[k].rank != (size_t)slow && m[k].median_behind_ms < 1.0) behind++;
    for (size_t k = 0; k < nl; k++) slow_last += l[k].rank == (size_t)slow;
    CHECK(m && m[slow].median_behind_ms > 29 && m[slow].median_behind_ms < 31 && behind == n - 1,
          "%zu ranks: rank %d enters ~30 ms after the first (%.2f), the others within 1 ms", n,
          slow, m ? m[slow].median_behind_ms : -1);
    CHECK(slow_last == ring && l && l[0].seq == 1000 && l[nl - 1].seq == 1000 + ring - 1,
          "%zu ranks: rank %d last in each, in seq order", n, slow);
    free(m), free(l);
    pb_stragglers_free(&r);
    free_job(&j);
    free(d);
}

/* A loaded machine (4 ranks on 2 cores, the CI box): entries jitter by up to 5 ms on a 32.5 ms
 * step, and rank 0 runs 1.5 ms behind, so it is last in most collectives by a median lag about
 * the 2 ms floor, and within the job's own noise (the punctual ranks' spread): not a straggler.
 * (CI saw rank 0 last in 30 of 44 by 2.1 ms, the others by 1.4-2.3 ms, in the first collectives
 * of the job, which are now left out as warm-up.) A real 15 ms straggler on the same machine is
 * still named. */
static void loaded_machine(void) {
    STEP_MS = 32.5, JITTER = 5.0;
    double d[4] = {1.5, 0, 0, 0};
    job j = make_job(4, 4, 64, d);
    pb_sg_result r;
    CHECK(pb_stragglers_analyze(j.ranks, 4, &r) == 0, "loaded machine: analysed");
    printf("       loaded: rank 0 last in %zu of %zu, median lag %.2f ms; noise %.2f ms, bar %.2f ms\n",
           r.ranks[0].times_last, r.collectives, r.ranks[0].median_lag_ms, r.noise_ms, r.bar_ms);
    CHECK(r.ranks[0].times_last >= 32, "rank 0 is last in most of 64 (%zu, %.2f ms)",
          r.ranks[0].times_last, r.ranks[0].median_lag_ms);
    CHECK(r.noise_ms > 0 && r.ranks[0].median_lag_ms < 3 * r.noise_ms,
          "its lag is within 3 x the job's noise (%.2f ms)", r.noise_ms);
    CHECK(r.culprit == -1 && r.late_host == NULL, "so nobody is named (culprit %d)", r.culprit);
    json_t *doc = pb_stragglers_json(&r, 0, NULL, 0);
    CHECK(doc && json_real_value(json_object_get(doc, "noise_ms")) == r.noise_ms &&
              json_real_value(json_object_get(doc, "bar_ms")) == r.bar_ms,
          "as JSON: noise_ms and bar_ms");
    json_decref(doc);
    pb_stragglers_free(&r);
    free_job(&j);

    d[0] = 15;
    j = make_job(4, 4, 64, d);
    CHECK(pb_stragglers_analyze(j.ranks, 4, &r) == 0, "loaded machine, 15 ms straggler: analysed");
    CHECK(r.culprit == 0 && r.culprit_phase == PB_PHASE_FORWARD,
          "a 15 ms straggler is named with its forward (culprit %d, phase %d, noise %.2f ms)",
          r.culprit, r.culprit_phase, r.noise_ms);
    pb_stragglers_free(&r);
    free_job(&j);
    STEP_MS = 100, JITTER = 1.0;
}

/* FSDP: 8 all-gathers / reduce-scatters a step of 60 ms; rank `slow` spends `delay` ms on its
 * batch before the step (its data phase), so the others wait for it in the step's first
 * all-gather only, and enter the other seven together with it (all jitter up to 2 ms). It is
 * last in about 1/8 + 7/8 x 1/4 of the collectives, by far in the first: the count rule cannot
 * name it, the wait rule must. The healthy twin (delay 0) names nobody. */
static void fsdp_like(double delay, int slow, int spike_every) {
    enum { N = 4, STEPS = 64, PER = 8 };
    pb_arrival_rank rk[N];
    static pb_arrival arr[N][STEPS * PER];
    char host[] = "node0";
    for (int r = 0; r < N; r++) {
        double d = r == slow ? delay : 0;
        rk[r] = (pb_arrival_rank){r, host, 60, {5 + d + jitter_ms(0.5), 20 + jitter_ms(0.5),
                                                30 + jitter_ms(0.5), 5}, arr[r], STEPS * PER};
        for (int s = 0; s < STEPS; s++)
            for (int k = 0; k < PER; k++) {
                /* The first collective waits for the slow rank; after it all start together. */
                double t = s * 60.0 + k * 4.0 + (k == 0 ? d : delay) + jitter_ms(2.0);
                /* a rank the machine descheduled now and then: rank 3 20 ms late in the first
                 * collective of every spike_every-th step */
                if (spike_every && r == 3 && k == 0 && s % spike_every == 0) t += 20;
                int64_t enter = (int64_t)(t * 1e6);
                arr[r][s * PER + k] = (pb_arrival){1, (uint64_t)(s * PER + k), "all_gather_into_tensor",
                                                   1 << 20, enter, enter + 1000000};
            }
    }
    pb_sg_result res;
    CHECK(pb_stragglers_analyze(rk, N, &res) == 0, "fsdp-like, delay %.0f ms: analysed", delay);
    printf("       fsdp-like delay %.0f: rank %d last in %zu of %zu (median lag %.2f ms, wait %.1f ms); "
           "noise %.2f ms, culprit %d, %.2f ms a step\n", delay, slow >= 0 ? slow : 0,
           res.ranks[slow >= 0 ? slow : 0].times_last, res.collectives,
           res.ranks[slow >= 0 ? slow : 0].median_lag_ms, res.ranks[slow >= 0 ? slow : 0].wait_ms,
           res.noise_ms, res.culprit, res.culprit_wait_step_ms);
    if (slow < 0 && spike_every) {
        double all = 0;
        for (int r = 0; r < N; r++) all += res.ranks[r].wait_ms;
        CHECK(res.ranks[3].wait_ms >= 0.6 * all && res.ranks[3].wait_ms * 60 / res.span_ms >= res.floor_ms,
              "rank 3's spikes hold the wait, over the floor a step (%.1f ms, %.2f ms a step)",
              res.ranks[3].wait_ms, res.ranks[3].wait_ms * 60 / res.span_ms);
        CHECK(res.culprit == -1 && res.ranks[3].times_far < 20,
              "but they come in 1 step of %d: nobody named (culprit %d, far in %zu)", spike_every,
              res.culprit, res.ranks[3].times_far);
    } else if (slow < 0) {
        CHECK(res.culprit == -1, "fsdp-like healthy: nobody named (culprit %d)", res.culprit);
    } else {
        CHECK(res.ranks[slow].times_last < res.collectives / 2,
              "the slow rank is last in a minority (%zu of %zu): the count rule alone misses it",
              res.ranks[slow].times_last, res.collectives);
        CHECK(res.culprit == slow && res.culprit_phase == PB_PHASE_DATA_WAIT,
              "the wait rule names rank %d and its data phase (culprit %d, phase %d)", slow,
              res.culprit, res.culprit_phase);
        CHECK(res.culprit_wait_step_ms > 0.5 * delay && res.culprit_wait_step_ms < 1.2 * delay,
              "its wait a step is about its %.0f ms delay (%.2f ms)", delay,
              res.culprit_wait_step_ms);
    }
    pb_stragglers_free(&res);
}

/* DDP with buffers on gloo (what tests/integration/test_stragglers.py's BatchNorm job
 * records): rank 3 prepares its batch 30 ms longer, and each step is a buffer broadcast then a
 * gradient all-reduce. Rank 3 enters the broadcast last by 30 ms; rank 1, which receives the
 * broadcast through it, waits there and enters the all-reduce beside rank 3, 30 ms after ranks
 * 0 and 2, so the last in each all-reduce is rank 1 or 3 by chance, ~15 ms behind the median.
 * Rank 1's lags are rank 3's delay spread, not noise: rank 3 is still named, with its phase. */
static void spread_delay(void) {
    enum { N = 4, STEPS = 64 };
    pb_arrival_rank rk[N];
    static pb_arrival arr[N][STEPS * 2];
    char host[] = "node0";
    for (int r = 0; r < N; r++) {
        /* rank 3's collectives are made longer still than its other host time: time waiting
         * for the other ranks (phases.h), never the phase a culprit's own time is put in */
        rk[r] = (pb_arrival_rank){r, host, 60,
                                  {[PB_PHASE_DATA_WAIT] = 0, [PB_PHASE_FORWARD] = 1.3,
                                   [PB_PHASE_BACKWARD] = 0.8, [PB_PHASE_OPTIMIZER] = 0.3,
                                   [PB_PHASE_COLLECTIVES] = 3 + (r == 3 ? 90 : 0),
                                   [PB_PHASE_GRAD_SYNC] = 0,
                                   [PB_PHASE_OTHER] = 21.5 + (r == 3 ? 30 : 0)},
                                  arr[r], STEPS * 2};
        for (int s = 0; s < STEPS; s++) {
            double b = s * 60.0 + 21 + (r == 3 ? 30 : 0) + jitter_ms(1.0);
            double a = s * 60.0 + 23.5 + (r == 1 || r == 3 ? 30 : 0) + jitter_ms(1.0);
            arr[r][2 * s] = (pb_arrival){1, (uint64_t)(2 * s), "broadcast_coalesced", 4096,
                                         (int64_t)(b * 1e6), (int64_t)((b + 0.5) * 1e6)};
            arr[r][2 * s + 1] = (pb_arrival){1, (uint64_t)(2 * s + 1), "all_reduce", 1 << 16,
                                             (int64_t)(a * 1e6), (int64_t)((a + 3) * 1e6)};
        }
    }
    pb_sg_result res;
    CHECK(pb_stragglers_analyze(rk, N, &res) == 0, "spread delay: analysed");
    printf("       spread: rank 3 last in %zu, rank 1 in %zu of %zu; noise %.2f ms, culprit %d\n",
           res.ranks[3].times_last, res.ranks[1].times_last, res.collectives, res.noise_ms,
           res.culprit);
    CHECK(res.ranks[1].times_last >= 16 && res.ranks[1].median_lag_ms > 10,
          "rank 1 is last in some all-reduces by > 10 ms (%zu, %.1f ms)", res.ranks[1].times_last,
          res.ranks[1].median_lag_ms);
    CHECK(res.culprit == 3 && res.culprit_phase == PB_PHASE_OTHER,
          "rank 3 is named, with its other host time (culprit %d, phase %d, noise %.2f ms)",
          res.culprit, res.culprit_phase, res.noise_ms);
    pb_stragglers_free(&res);
}

/* Start-up: rank 1 still warming up (20 ms late) in its group's first 20 collectives, then in
 * step with the others. Those 20 are left out: 20 compared, nobody named. */
static void warm_up(void) {
    enum { N = 4, C = 40 };
    pb_arrival_rank rk[N];
    static pb_arrival arr[N][C];
    char host[] = "node0";
    for (int r = 0; r < N; r++) {
        rk[r] = (pb_arrival_rank){r, host, 40, {1, 5, 5, 1, [PB_PHASE_OTHER] = 20}, arr[r], C};
        for (int c = 0; c < C; c++) {
            double t = c * 40.0 + (r == 1 && c < 20 ? 20 : 0) + jitter_ms(0.5);
            arr[r][c] = (pb_arrival){1, (uint64_t)c + 1, "all_reduce", 1 << 16, (int64_t)(t * 1e6),
                                     (int64_t)((t + 1) * 1e6)};
        }
    }
    pb_sg_result res;
    CHECK(pb_stragglers_analyze(rk, N, &res) == 0 && res.collectives == 20 && res.culprit == -1,
          "warm-up: the first 20 collectives are left out, nobody named (%zu compared, culprit %d)",
          res.collectives, res.culprit);
    pb_stragglers_free(&res);
}

/* Communication (the after time: the members' median completion minus the last entry). N
 * ranks on 2 hosts, one 1 MB all-reduce a step of 100 ms, entries within `jit` ms. The
 * collective takes after(c) ms once the last rank is in, each rank completing within 0.2 ms
 * of that. */
typedef double (*after_fn)(int c);
static void comm_job(pb_arrival_rank *rk, pb_arrival *arr, char (*host)[32], int n, int colls,
                     double jit, after_fn after, int late_rank, double late_ms) {
    for (int r = 0; r < n; r++) {
        snprintf(host[r], 32, "node%d", r / (n / 2));
        rk[r] = (pb_arrival_rank){r, host[r], 100, {2, 30, 50, 10, [PB_PHASE_OTHER] = 5},
                                  &arr[r * colls], (size_t)colls};
    }
    for (int c = 0; c < colls; c++) {
        double enter[64], last = 0;
        for (int r = 0; r < n; r++) {
            enter[r] = c * 100.0 + jitter_ms(jit) + (r == late_rank ? late_ms : 0);
            if (enter[r] > last) last = enter[r];
        }
        double done = last + after(c);
        for (int r = 0; r < n; r++)
            arr[r * colls + c] = (pb_arrival){7, (uint64_t)c + 1, "all_reduce", 1 << 20,
                                              (int64_t)(enter[r] * 1e6),
                                              (int64_t)((done + jitter_ms(0.2)) * 1e6)};
    }
}

static double after_link_slows(int c) { return c < 170 ? 0.5 + jitter_ms(0.3) : 40 + jitter_ms(4); }
static double after_loaded(int c) { /* healthy, and the newest third on a busier machine */
    return c < 220 ? 0.3 + jitter_ms(1.0) : 0.6 + jitter_ms(2.5);
}
static double after_steady(int c) { (void)c; return 0.5 + jitter_ms(0.3); }
/* A busy spell over part of the newest third: 60 % of its collectives take 2-4 ms more. */
static double after_busy_spell(int c) {
    return 0.3 + jitter_ms(0.4) + (c >= 220 && c % 5 < 3 ? 2 + jitter_ms(2) : 0);
}

static void communication(void) {
    enum { N = 8, C = 320 };
    static pb_arrival_rank rk[N];
    static pb_arrival arr[N * C];
    static char host[N][32];
    pb_sg_result res;
    char text[640];

    /* A link that slows in the window: the ranks arrive together, the all-reduce takes 40 ms
     * instead of 0.5 after the last one enters. */
    comm_job(rk, arr, host, N, C, 1.0, after_link_slows, -1, 0);
    CHECK(pb_stragglers_analyze(rk, N, &res) == 0, "link slows: analysed");
    CHECK(res.culprit == -1 && !res.late_host, "link slows: no rank or node is named (culprit %d)",
          res.culprit);
    CHECK(res.n_comm == 1 && res.comm[0].n == C - 20 && res.comm[0].bytes == 1 << 20 &&
              !strcmp(res.comm[0].op, "all_reduce"),
          "link slows: one kind, %d collectives (%zu kinds, n %zu)", C - 20, res.n_comm,
          res.n_comm ? res.comm[0].n : 0);
    CHECK(res.comm_slow && res.comm[0].early_ms < 1 && res.comm[0].recent_ms > 35 &&
              res.comm_added_step_ms > 30,
          "link slows: the collectives slowed (early %.2f, recent %.2f, added %.1f ms a step)",
          res.comm[0].early_ms, res.comm[0].recent_ms, res.comm_added_step_ms);
    CHECK(res.arrival_spread_ms < 1.0, "link slows: the ranks arrive within %.2f ms",
          res.arrival_spread_ms);
    const char *names[8] = {[7] = "default_pg"};
    CHECK(pb_stragglers_comm_text(&res, names, 8, text, sizeof text) == 0 &&
              strstr(text, "all_reduce of 1 MB on group default_pg takes") &&
              strstr(text, "a communication slowdown"),
          "link slows: the sentence names the kind: %s", text);
    json_t *doc = pb_stragglers_json(&res, 0, names, 8);
    json_t *cm = json_object_get(doc, "communication"), *k0 = json_array_get(json_object_get(cm, "kinds"), 0);
    CHECK(json_is_true(json_object_get(cm, "slow")) &&
              !strcmp(json_string_value(json_object_get(k0, "group")) ? json_string_value(json_object_get(k0, "group")) : "", "default_pg") &&
              json_real_value(json_object_get(k0, "added_step_ms")) > 30,
          "link slows: the JSON says so, with the group's name");
    json_decref(doc);
    pb_stragglers_free(&res);
    /* The exporter's after times (probing_collective_after_seconds_total): per collective, as
     * the analysis's: about 0.5 ms before the link slows (seq <= 170), about 40 after. */
    pb_sg_member *m = NULL;
    pb_sg_last *l = NULL;
    size_t nm = 0, nl = 0, before = 0, after = 0;
    CHECK(pb_stragglers_members(rk, N, &m, &nm, &l, &nl) == 0 && nl == C - 20,
          "link slows: members, %d complete collectives (%zu)", C - 20, nl);
    for (size_t k = 0; k < nl; k++) {
        if (l[k].seq <= 170) before += l[k].after_ms >= 0 && l[k].after_ms < 1.5;
        else after += l[k].after_ms > 35 && l[k].after_ms < 46;
    }
    CHECK(before == 150 && after == 150,
          "link slows: after times ~0.5 ms in the 150 collectives before, ~40 ms in the 150 "
          "after (%zu, %zu)", before, after);
    free(m), free(l);
    /* A member that has not completed a collective: no after time for it. */
    int64_t exit_was = arr[3 * C + 200].exit_ns;
    arr[3 * C + 200].exit_ns = 0;
    CHECK(pb_stragglers_members(rk, N, &m, &nm, &l, &nl) == 0 && nl == C - 20 &&
              l[200 - 20].seq == 201 && l[200 - 20].after_ms == -1 && l[201 - 20].after_ms > 35,
          "a collective a member has not completed: after time -1 (%.2f)",
          l ? l[200 - 20].after_ms : 0);
    arr[3 * C + 200].exit_ns = exit_was;
    free(m), free(l);

    /* A healthy job whose newest third ran on a busier machine: the after time doubles, by
     * about a millisecond: not a slowdown worth naming. */
    comm_job(rk, arr, host, N, C, 1.0, after_loaded, -1, 0);
    CHECK(pb_stragglers_analyze(rk, N, &res) == 0 && res.culprit == -1 && !res.comm_slow,
          "loaded: nothing named (culprit %d, comm_slow %d, early %.2f, recent %.2f, added %.2f)",
          res.culprit, res.comm_slow, res.n_comm ? res.comm[0].early_ms : 0,
          res.n_comm ? res.comm[0].recent_ms : 0, res.comm_added_step_ms);
    CHECK(pb_stragglers_comm_text(&res, NULL, 0, text, sizeof text) == -1 && !text[0],
          "loaded: no sentence");
    pb_stragglers_free(&res);

    /* A busy spell that pushes the newest third's median up 2-4 ms but leaves 40 % of it as
     * fast as before: not a slowdown of the collectives (their lower quartile did not move). */
    comm_job(rk, arr, host, N, C, 1.0, after_busy_spell, -1, 0);
    CHECK(pb_stragglers_analyze(rk, N, &res) == 0 && !res.comm_slow && res.comm[0].added_step_ms == 0 &&
              res.comm[0].recent_ms > 2 * res.comm[0].early_ms + 1,
          "busy spell: the median rose (early %.2f, recent %.2f ms) but nothing slowed",
          res.n_comm ? res.comm[0].early_ms : 0, res.n_comm ? res.comm[0].recent_ms : 0);
    pb_stragglers_free(&res);

    /* A straggler: rank 5 enters 30 ms late, the collective itself is steady. The rank is
     * named, not the communication. */
    comm_job(rk, arr, host, N, C, 1.0, after_steady, 5, 30);
    CHECK(pb_stragglers_analyze(rk, N, &res) == 0 && res.culprit == 5 && !res.comm_slow &&
              res.comm[0].after_ms < 1,
          "straggler: rank 5 named, the collectives not slowed (culprit %d, after %.2f ms)",
          res.culprit, res.n_comm ? res.comm[0].after_ms : -1);
    pb_stragglers_free(&res);

    /* A straggler and a slow link at once: the rank is what is named. */
    comm_job(rk, arr, host, N, C, 1.0, after_link_slows, 5, 30);
    CHECK(pb_stragglers_analyze(rk, N, &res) == 0 && res.culprit == 5 && !res.comm_slow &&
              res.comm[0].added_step_ms > 30,
          "both: rank 5 named; the kind still shows it slowed (added %.1f ms)",
          res.n_comm ? res.comm[0].added_step_ms : -1);
    pb_stragglers_free(&res);

    /* Collectives still running (no completion): no after time is made up. */
    comm_job(rk, arr, host, N, C, 1.0, after_link_slows, -1, 0);
    for (int c = 0; c < C; c++) arr[3 * C + c].exit_ns = 0;
    CHECK(pb_stragglers_analyze(rk, N, &res) == 0 && res.n_comm == 0 && !res.comm_slow,
          "not completed: no kinds (%zu)", res.n_comm);
    pb_stragglers_free(&res);
}

/* A throttled node: each step, a short all-reduce after the compute, which node1's two ranks
 * (throttled) enter 60-100 ms late in either order, then two long ones issued back to back,
 * which every rank enters within the jitter, in any order. node1 is exactly last in the first
 * kind and by chance (1 in 6) in the others: in about 44 % of all collectives, under the
 * count rule's majority; the wait rule for a node names it. The same job without the throttle
 * names nobody. */
static void throttled_node(void) {
    enum { N = 4, K = 3, STEPS = 128, COLLS = K * STEPS };
    for (int throttled = 1; throttled >= 0; throttled--) {
        pb_arrival_rank rk[N];
        static pb_arrival arr[N][COLLS];
        char host[N][32];
        for (int r = 0; r < N; r++) {
            snprintf(host[r], sizeof host[r], "node%d", r / 2);
            rk[r] = (pb_arrival_rank){.rank = r, .host = host[r], .step_ms = 200,
                                      .arrivals = arr[r], .n_arrivals = COLLS};
            for (int p = 0; p < PB_PHASE_COUNT; p++) rk[r].phase_ms[p] = 10;
        }
        for (int s = 0; s < STEPS; s++) {
            double t = s * 200.0, done = 0;
            for (int k = 0; k < K; k++) {
                for (int r = 0; r < N; r++) {
                    double late = k == 0 && throttled && r >= 2 ? 60 + jitter_ms(40) : 0;
                    double en = t + late + jitter_ms(JITTER);
                    if (en > done) done = en;
                    arr[r][K * s + k] = (pb_arrival){1, 1000 + (uint64_t)(K * s + k),
                                                     "all_reduce", k ? 1 << 20 : 4,
                                                     (int64_t)(en * 1e6), 0};
                }
                done += k ? 20 : 1; /* the last one in, then the reduction */
                for (int r = 0; r < N; r++) arr[r][K * s + k].exit_ns = (int64_t)(done * 1e6);
                t = done + 0.5;
            }
        }
        pb_sg_result res;
        CHECK(pb_stragglers_analyze(rk, N, &res) == 0, "throttled node (%d): analysed", throttled);
        if (throttled) {
            CHECK(res.late_host && !strcmp(res.late_host, "node1"),
                  "a throttled node, late only in the collective after its compute, is named "
                  "(%s, late in %zu of %zu)", res.late_host ? res.late_host : "(none)",
                  res.late_host_count, res.collectives);
            CHECK(res.culprit >= 2, "the culprit is one of node1's ranks, for the phase and the "
                  "text (%d)", res.culprit);
            CHECK(res.late_host_count < (size_t)(0.6 * (double)res.collectives),
                  "under the count rule's majority (%zu of %zu)", res.late_host_count,
                  res.collectives);
        } else {
            CHECK(res.culprit == -1 && !res.late_host,
                  "its healthy twin: nobody named (culprit %d)", res.culprit);
        }
        pb_stragglers_free(&res);
    }
}

/* A throttled node on a saturated machine (measured: 8 gloo ranks on 2 cores, two namespace
 * nodes, node B's four ranks at 40 % of a CPU): in the all-reduce after the compute every rank
 * arrives with a wide jitter (the punctual half spread 61-79 ms there), node1 later on top; in
 * the one issued right after it, the ranks arrive closer together (1.5 ms there, 30 ms of
 * jitter here). Pooled, the noise lies between the two kinds and the bar with it, above most of
 * node1's gaps (median 35 ms against a 56 ms bar here), and node1 is exactly last in about half
 * of all collectives: neither the count rule nor the wait rule holds (checked: nobody is named
 * without the kind rule). In the first kind node1 is exactly last nearly always, by more than
 * the floor: the kind rule names it. Its healthy twin names nobody. */
static void noisy_kind_node(void) {
    const double NK_D = 100, NK_J1 = 30, NK_STEP = 300; /* node1's delay, kind 1's jitter */
    enum { N = 8, K = 2, STEPS = 200, COLLS = K * STEPS };
    for (int throttled = 1; throttled >= 0; throttled--) {
        static pb_arrival_rank rk[N];
        static pb_arrival arr[N][COLLS];
        static char host[N][32];
        for (int r = 0; r < N; r++) {
            snprintf(host[r], sizeof host[r], "node%d", r / 4);
            rk[r] = (pb_arrival_rank){.rank = r, .host = host[r], .step_ms = NK_STEP,
                                      .arrivals = arr[r], .n_arrivals = COLLS};
            for (int p = 0; p < PB_PHASE_COUNT; p++) rk[r].phase_ms[p] = 50;
        }
        for (int s = 0; s < STEPS; s++) {
            double t = s * NK_STEP, done = 0;
            for (int k = 0; k < K; k++) {
                for (int r = 0; r < N; r++) {
                    double late = k == 0 ? jitter_ms(100) + (throttled && r >= 4 ? NK_D : 0) : 0;
                    double en = t + late + jitter_ms(k ? NK_J1 : 0);
                    if (en > done) done = en;
                    arr[r][K * s + k] = (pb_arrival){1, 1000 + (uint64_t)(K * s + k),
                                                     "all_reduce", k ? 1 << 19 : 4,
                                                     (int64_t)(en * 1e6), 0};
                }
                done += k ? 2 : 1;
                for (int r = 0; r < N; r++) arr[r][K * s + k].exit_ns = (int64_t)(done * 1e6);
                t = done + 0.5;
            }
        }
        pb_sg_result res;
        CHECK(pb_stragglers_analyze(rk, N, &res) == 0, "noisy kind (%d): analysed", throttled);
        if (throttled) {
            CHECK(res.late_host && !strcmp(res.late_host, "node1") && res.culprit >= 4,
                  "a late node within a noisy kind is named (%s, culprit %d; bar %.1f ms, "
                  "late in %zu of %zu)", res.late_host ? res.late_host : "(none)", res.culprit,
                  res.bar_ms, res.late_host_count, res.collectives);
            CHECK(res.late_host_count < (size_t)(0.6 * (double)res.collectives),
                  "under the count rule's majority (%zu of %zu)", res.late_host_count,
                  res.collectives);
            CHECK(res.late_kind_n >= STEPS - 30 && res.late_kind_bytes == 4 &&
                      res.late_kind_late >= (size_t)(0.9 * (double)res.late_kind_n) &&
                      res.late_kind_gap_ms >= res.floor_ms && res.late_kind_gap_ms < res.bar_ms,
                  "by the kind rule: late in %zu of %zu all_reduce of %llu B, %.1f ms behind "
                  "(floor %.1f, bar %.1f)", res.late_kind_late, res.late_kind_n,
                  (unsigned long long)res.late_kind_bytes, res.late_kind_gap_ms, res.floor_ms,
                  res.bar_ms);
            json_t *doc = pb_stragglers_json(&res, 0, NULL, 0);
            json_t *k = json_object_get(doc, "late_host_kind");
            const char *op = json_string_value(json_object_get(k, "op"));
            CHECK(k && json_integer_value(json_object_get(k, "late")) == (json_int_t)res.late_kind_late &&
                      op && !strcmp(op, "all_reduce"),
                  "as JSON: late_host_kind");
            json_decref(doc);
        } else {
            CHECK(res.culprit == -1 && !res.late_host && res.late_kind_n == 0,
                  "its healthy twin: nobody named (culprit %d)", res.culprit);
        }
        pb_stragglers_free(&res);
    }
}

/* The collectives slow, but the ranks do not arrive together (each within 40 ms, none late
 * by rule): not a communication slowdown, which needs the ranks in together. */
static void comm_needs_arrival_together(void) {
    enum { N = 8, C = 320 };
    static pb_arrival_rank rk[N];
    static pb_arrival arr[N * C];
    static char host[N][32];
    pb_sg_result res;
    comm_job(rk, arr, host, N, C, 40.0, after_link_slows, -1, 0);
    CHECK(pb_stragglers_analyze(rk, N, &res) == 0 && res.culprit == -1 && !res.late_host &&
              res.n_comm == 1 && res.comm[0].added_step_ms > 0,
          "spread arrivals: nobody named, the kind slowed (added %.1f)",
          res.n_comm ? res.comm[0].added_step_ms : 0);
    CHECK(!res.comm_slow, "spread arrivals: not a communication slowdown (spread %.1f ms, "
          "recent after %.1f ms)", res.arrival_spread_ms, res.n_comm ? res.comm[0].recent_ms : 0);
    pb_stragglers_free(&res);
}

int main(void) {
    seed_from_env();
    communication();
    warm_up();
    loaded_machine();
    spread_delay();
    fsdp_like(15, 2, 0);
    fsdp_like(0, -1, 0);
    fsdp_like(0, -1, 5);
    healthy_and_slow(8, 4, 5, RING);
    healthy_and_slow(1024, 8, 777, RING);
    healthy_and_slow(10000, 8, 9321, 64); /* 640,000 arrivals: the CLI's work at 10,000 ranks */

    /* A slow node: ranks 4..7 (node1) all 20 ms late. */
    double d[8] = {0, 0, 0, 0, 20, 20, 20, 20};
    job j = make_job(8, 4, 64, d);
    pb_sg_result r;
    CHECK(pb_stragglers_analyze(j.ranks, 8, &r) == 0, "slow node: analysed");
    CHECK(r.late_host && strcmp(r.late_host, "node1") == 0, "node1 is the late node (%s, %zu)",
          r.late_host ? r.late_host : "(none)", r.late_host_count);
    CHECK(r.late_host_count == 64, "late in all 64 collectives (%zu)", r.late_host_count);
    json_t *node_doc = pb_stragglers_json(&r, 0, NULL, 0);
    CHECK(node_doc && !strcmp(json_string_value(json_object_get(node_doc, "late_host")), "node1") &&
              json_integer_value(json_object_get(node_doc, "late_host_count")) == 64,
          "as JSON: late_host node1, late_host_count 64");
    json_decref(node_doc);
    CHECK(r.wait_share > 0.08 && r.wait_share < 0.12,
          "the others wait for node1 about 10 ms (behind the median) of each 100 ms (%.3f)",
          r.wait_share);
    pb_stragglers_free(&r);
    free_job(&j);

    /* Systematic but small: rank 3 always 1.5 ms late on a 100 ms step is noise. */
    double small[8] = {0, 0, 0, 1.5, 0, 0, 0, 0};
    j = make_job(8, 4, 64, small);
    CHECK(pb_stragglers_analyze(j.ranks, 8, &r) == 0, "small lag: analysed");
    CHECK(r.ranks[3].times_last > 32, "rank 3 is last most often (%zu of 64)", r.ranks[3].times_last);
    CHECK(r.culprit == -1, "but below the 5 ms floor nobody is named (culprit %d)", r.culprit);
    pb_stragglers_free(&r);

    /* A rank whose ring holds only the later half: the first half is not compared. */
    j.ranks[2].arrivals += 32;
    j.ranks[2].n_arrivals = 32;
    CHECK(pb_stragglers_analyze(j.ranks, 8, &r) == 0 && r.collectives == 32 && r.incomplete == 32,
          "a member missing: 32 compared, 32 incomplete (%zu, %zu)", r.collectives, r.incomplete);
    pb_stragglers_free(&r);
    pb_sg_member *m = NULL;
    pb_sg_last *l = NULL;
    size_t nm = 0, nl = 0;
    CHECK(pb_stragglers_members(j.ranks, 8, &m, &nm, &l, &nl) == 0 && nl == 32 &&
              l[0].seq == 1032 && m[2].collectives == 32,
          "members: only the 32 complete collectives count (%zu, first seq %llu)", nl,
          l ? (unsigned long long)l[0].seq : 0ull);
    free(m), free(l);
    free_job(&j);

    /* Too few collectives to claim a majority. */
    double slow1[4] = {0, 25, 0, 0};
    j = make_job(4, 4, 3, slow1);
    CHECK(pb_stragglers_analyze(j.ranks, 4, &r) == 0 && r.culprit == -1,
          "3 collectives: too few to name anyone (culprit %d)", r.culprit);
    pb_stragglers_free(&r);
    free_job(&j);

    errno = 0;
    CHECK(pb_stragglers_analyze(NULL, 0, &r) == -1 && errno == EINVAL, "no ranks: EINVAL");
    throttled_node(); /* last: the cases above keep their draws of the generator */
    comm_needs_arrival_together();
    noisy_kind_node();
    return check_summary();
}
