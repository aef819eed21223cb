/*
 * stragglers.c - which rank makes everyone wait, from arrival order (see stragglers.h).
 *
 * Per collective (group, seq) that every member of the group reported, the rank that entered
 * last and its lag behind the median entry: the others sit in the collective for about that
 * long waiting for it (the rule of trace analyzers such as TraceLens and Greyhound: the rank
 * that arrives last waits least). Cost: one sort of all arrivals, O(A log A) for A arrivals
 * (ranks x ring size), so it grows with ranks, not steps.
 *
 * The culprit rules, and why: on a healthy job which rank arrives last is chance, each rank is
 * last in about 1/N of the collectives, and the lag is scheduling noise. The count rule names a
 * rank only when all hold:
 *   - it is last in a clear majority, >= 60 %, of at least SG_MIN_COLLECTIVES complete
 *     collectives (with 2 ranks chance gives 50 %; with more it is far below);
 *   - its median lag when last is >= FLOOR = max(2 ms, 5 % of the median step), the floor
 *     cluster.c uses for phases: below it the wait does not cost the job a real share;
 *   - and that lag is at least SG_NOISE_X (3) times the job's own noise: the median, over the
 *     complete collectives, of the punctual half's spread (the lower median entry behind the
 *     first). Under jitter alone the last rank's lag behind the median is about that spread
 *     (1.5 x it for uniform jitter at 4 ranks, about 1 x at many; 1.6 x on a healthy 4-rank
 *     gloo job on a quiet 2-core machine); a straggler's is its delay on top. The punctual
 *     half does not hold the late ranks, so a delay that spreads (a rank that waited for the
 *     straggler in one collective enters the next one late beside it) does not raise it, and a
 *     rank that is systematically a little late on a loaded machine (more ranks than cores)
 *     stays within it. With 2 ranks it is 0 and the floor alone holds.
 * The wait rule covers the straggler whose delay lands in one of many collectives a step (FSDP
 * all-gathers every layer: the others wait in the first one of the forward, then all enter the
 * rest together, so the late rank is last in few collectives, by far): per rank, its lags beyond
 * the bar (max(FLOOR, 3 x the noise)), summed; the rank with the most is named when it holds
 * >= 60 % of all such wait, that wait is >= FLOOR a step (span of the collectives over the
 * median step), and it is last by more than the bar in at least every other step.
 * A host is late when, in that same majority of collectives, its ranks (two or more, not all
 * of the group) are exactly the last ones to enter: a slow node, not a slow rank. Or, as the
 * wait rule for a rank, when it is so, with its first rank in behind all the others' by the
 * bar, in a clear majority of the collectives where someone is that late, at least every
 * other step: a node whose CPU is throttled falls behind in the collective that follows its
 * compute, while one issued back to back after it finds every rank on time and its order is
 * noise (seen on a two-namespace gloo job with node B held to 20 % of a CPU: late in 59 % of
 * all collectives, too few for the count rule). Or by the kind rule: in one kind of collective
 * (group, op, bytes) that recurs at least every other step, of at least SG_KIND_MIN, its ranks
 * are exactly the last ones in a clear majority, by a median gap of at least FLOOR. This needs
 * no bar: the noise is pooled over every collective, and a job's kinds can differ in jitter by
 * two orders of magnitude (8 gloo ranks on 2 cores: the punctual half spread 61-79 ms in the
 * all-reduce after the compute, 1-1.5 ms in the one right after it), so the pooled median lies
 * between them, moves with their proportions, and can sit above a throttled node's gaps (in
 * one run node B's ranks were exactly the last ones in 237 of 255 of the first kind, 135 ms
 * behind, under a 48-69 ms bar; in another the noise reached 29.7 ms, the bar 89 ms, and
 * nothing was named). Under chance a given host of m ranks out of n is exactly last
 * with probability 1 / C(n, m) (1/6 at 4 ranks, 2 a host; 1/70 at 8, 4 a host), so a clear
 * majority of one recurring kind is not chance; the floor keeps a node that is systematically
 * a little behind, at no real cost to the step, unnamed.
 * The phase: the culprit's own python.steps phase medians against the other ranks' median, in
 * the phases that are not a wait for the other ranks (PB_SG_PHASES_WITHOUT, phases.h); the
 * phase with the largest excess is named when it explains at least half the median lag.
 *
 * Communication: a slow link or network makes no rank late; the ranks arrive together and the
 * collective itself takes longer once all are in. Per complete collective whose members all
 * completed it, its after time is the median completion minus the last entry; per kind (group,
 * op, bytes) its median over the oldest and the newest third of the window (by sequence
 * number). A kind slowed when the whole newest third moved: its lower quartile is >= SG_COMM_X
 * (2) x the oldest third's upper quartile and >= SG_COMM_MIN_MS (1 ms) more, each third
 * holding >= SG_COMM_THIRD (10) collectives; what it adds a step is the difference of the
 * medians times how many of it the newest third ran per step (its span over the median step). The collectives slowed (comm_slow) when nobody was named and the
 * slowed kinds add >= max(FLOOR, 10 % of the step) a step, with the ranks' median arrival
 * spread under half the costliest slowed kind's newest after time: on a healthy loaded machine the
 * after time of a small gloo collective moves by a fraction of a millisecond. Its own history
 * is all it is compared with: a link slow since before the window began (the ring holds the
 * last 512 collectives of each group) is not seen as slowed, and one kind on two groups is not
 * compared across them.
 */
#include "stragglers.h"

#include "buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SG_MIN_COLLECTIVES = 5 };
#define SG_MAJORITY 0.60
#define SG_FLOOR_MS 2.0
#define SG_FLOOR_SHARE 0.05
#define SG_NOISE_X 3.0
/* A group's first collectives are its start-up (DDP's construction broadcasts, the first steps
 * while the ranks still import, compile and warm their caches at different speeds): left out
 * of both analyses. */
enum { SG_WARMUP_SEQ = 20 };
enum { SG_COMM_THIRD = 10, SG_COMM_SHOWN = 8 };
/* The kind rule of a late node: a kind of collective needs this many complete ones. */
enum { SG_KIND_MIN = 10 };
#define SG_COMM_X 2.0
#define SG_COMM_MIN_MS 1.0
#define SG_COMM_STEP_SHARE 0.10

typedef struct sg_entry {
    uint32_t group;
    uint32_t j; /* index into the rank's arrivals */
    uint64_t seq;
    int64_t enter_ns;
    size_t r; /* index into the input */
} sg_entry;

/* One complete, completed collective, for the communication analysis. */
typedef struct sg_comm_sample {
    uint32_t group;
    uint64_t seq;
    const char *op;
    uint64_t bytes;
    int64_t last_enter_ns;
    double after_ms;
} sg_comm_sample;

/* Kinds of collective (group, op, bytes) in one order, for every table sorted by kind. */
static int kind_cmp(uint32_t ga, const char *oa, uint64_t ba, uint32_t gb, const char *ob,
                    uint64_t bb) {
    if (ga != gb) return ga < gb ? -1 : 1;
    int c = strcmp(oa, ob);
    if (c) return c;
    return ba < bb ? -1 : ba > bb;
}

static int comm_sample_cmp(const void *a, const void *b) { /* by kind, then seq */
    const sg_comm_sample *x = a, *y = b;
    int c = kind_cmp(x->group, x->op, x->bytes, y->group, y->op, y->bytes);
    return c ? c : (x->seq < y->seq ? -1 : x->seq > y->seq);
}

static int i64_cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The after time of one complete collective, its run entries c[0..run-1] sorted by entry: the
 * median completion minus the last entry (ms, >= 0), or -1 when a member has not completed it.
 * xs: room for run values. */
static double after_time_ms(const pb_arrival_rank *ranks, const sg_entry *c, size_t run,
                            int64_t *xs) {
    size_t nx = 0;
    for (size_t q = 0; q < run; q++) {
        int64_t x = ranks[c[q].r].arrivals[c[q].j].exit_ns;
        if (!x) return -1;
        xs[nx++] = x;
    }
    qsort(xs, nx, sizeof *xs, i64_cmp);
    int64_t mx = nx % 2 ? xs[nx / 2] : xs[nx / 2 - 1] / 2 + xs[nx / 2] / 2;
    double after = (double)(mx - c[run - 1].enter_ns) / 1e6;
    return after > 0 ? after : 0;
}

typedef struct sg_lag {
    size_t r;
    double ms;
    int host_late;     /* the last entries were exactly the ranks of r's host (late host) */
    double host_gap_ms; /* then: its first entry behind the last of the other ranks */
} sg_lag;

/* One complete collective for the kind rule of a late node: its kind, the host whose ranks
 * were exactly the last ones (SIZE_MAX: none) and that host's gap. */
typedef struct sg_hkind {
    uint32_t group;
    const char *op;
    uint64_t bytes;
    size_t host;
    double gap_ms;
} sg_hkind;

static int hkind_cmp(const void *a, const void *b) { /* by kind, then host */
    const sg_hkind *x = a, *y = b;
    int c = kind_cmp(x->group, x->op, x->bytes, y->group, y->op, y->bytes);
    return c ? c : (x->host < y->host ? -1 : x->host > y->host);
}

static int same_kind(const sg_hkind *x, const sg_hkind *y) {
    return !kind_cmp(x->group, x->op, x->bytes, y->group, y->op, y->bytes);
}

static int entry_cmp(const void *a, const void *b) {
    const sg_entry *x = a, *y = b;
    if (x->group != y->group) return x->group < y->group ? -1 : 1;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    if (x->enter_ns != y->enter_ns) return x->enter_ns < y->enter_ns ? -1 : 1;
    return x->r < y->r ? -1 : x->r > y->r;
}

static int gr_cmp(const void *a, const void *b) { /* (group, rank) pairs, by group then rank */
    const sg_entry *x = a, *y = b;
    if (x->group != y->group) return x->group < y->group ? -1 : 1;
    return x->r < y->r ? -1 : x->r > y->r;
}

static int lag_cmp(const void *a, const void *b) {
    const sg_lag *x = a, *y = b;
    if (x->r != y->r) return x->r < y->r ? -1 : 1;
    return x->ms < y->ms ? -1 : x->ms > y->ms;
}

static int dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_sorted(const double *v, size_t n) {
    if (n == 0) return 0;
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct sg_host_ix {
    const char *host;
    size_t r;
} sg_host_ix;

static int host_cmp(const void *a, const void *b) {
    const sg_host_ix *x = a, *y = b;
    int c = strcmp(x->host, y->host);
    return c ? c : (x->r < y->r ? -1 : x->r > y->r);
}

/* Members of `group`: binary search in the sorted (group, count) table. */
typedef struct sg_group {
    uint32_t group;
    size_t members;
} sg_group;

static size_t group_members(const sg_group *g, size_t n, uint32_t group) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g[mid].group == group) return g[mid].members;
        if (g[mid].group < group) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

static int comm_kind_cmp(const void *a, const void *b) { /* most time first */
    const pb_sg_comm *x = a, *y = b;
    if ((x->added_step_ms > 0) != (y->added_step_ms > 0)) return x->added_step_ms > 0 ? -1 : 1;
    if (x->added_step_ms != y->added_step_ms) return x->added_step_ms > y->added_step_ms ? -1 : 1;
    double tx = (double)x->n * x->after_ms, ty = (double)y->n * y->after_ms;
    if (tx != ty) return tx > ty ? -1 : 1;
    if (x->group != y->group) return x->group < y->group ? -1 : 1;
    int c = strcmp(x->op, y->op);
    return c ? c : (x->bytes < y->bytes ? -1 : x->bytes > y->bytes);
}

/* The median of v[0..n) (a scratch copy is sorted into tmp, n > 0), and its quartiles. */
static double median_of(const double *v, size_t n, double *tmp, double *q1, double *q3) {
    memcpy(tmp, v, n * sizeof *tmp);
    qsort(tmp, n, sizeof *tmp, dbl_cmp);
    if (q1) *q1 = tmp[n / 4];
    if (q3) *q3 = tmp[(3 * n) / 4 < n ? (3 * n) / 4 : n - 1];
    return median_sorted(tmp, n);
}

/* Fills out->comm, n_comm, comm_slow and comm_added_step_ms from the samples (sorted here).
 * Needs out's step_ms, floor_ms, culprit, late_host and collectives. 0, or -1 out of memory
 * (errno ENOMEM). */
static int comm_analyze(sg_comm_sample *cs, size_t ncs, pb_sg_result *out) {
    if (!ncs) return 0;
    qsort(cs, ncs, sizeof *cs, comm_sample_cmp);
    pb_sg_comm *k = malloc(ncs * sizeof *k);
    double *v = malloc(ncs * sizeof *v), *tmp = malloc(ncs * sizeof *tmp);
    if (!k || !v || !tmp) {
        free(k), free(v), free(tmp);
        errno = ENOMEM;
        return -1;
    }
    size_t nk = 0;
    double added = 0;
    for (size_t i = 0; i < ncs;) {
        size_t j = i;
        while (j < ncs &&
               !kind_cmp(cs[j].group, cs[j].op, cs[j].bytes, cs[i].group, cs[i].op, cs[i].bytes))
            v[j - i] = cs[j].after_ms, j++;
        size_t n = j - i, third = n / 3;
        pb_sg_comm *c = &k[nk++];
        *c = (pb_sg_comm){cs[i].group, cs[i].op, cs[i].bytes, n,
                          median_of(v, n, tmp, NULL, NULL), 0, 0, 0};
        c->early_ms = c->recent_ms = c->after_ms;
        double early_q3 = 0, recent_q1 = 0;
        if (third) {
            c->early_ms = median_of(v, third, tmp, NULL, &early_q3);
            c->recent_ms = median_of(v + n - third, third, tmp, &recent_q1, NULL);
        }
        /* The whole newest third moved: its lower quartile clears the oldest third's upper
         * quartile by the factor and the margin (a median that a busy spell pushed up over
         * part of the third does not). */
        if (third >= SG_COMM_THIRD && recent_q1 >= SG_COMM_X * early_q3 &&
            recent_q1 - early_q3 >= SG_COMM_MIN_MS) {
            /* How many of it a step: the newest third's count over its span in steps (once a
             * step when the step time is unknown). */
            double span_ms = (double)(cs[j - 1].last_enter_ns - cs[j - third].last_enter_ns) / 1e6;
            double per_step = out->step_ms > 0 && span_ms > 0
                                  ? (double)(third - 1) * out->step_ms / span_ms
                                  : 1;
            c->added_step_ms = (c->recent_ms - c->early_ms) * per_step;
            added += c->added_step_ms;
        }
        i = j;
    }
    free(v), free(tmp);
    qsort(k, nk, sizeof *k, comm_kind_cmp);
    out->comm = k, out->n_comm = nk;
    double bar = SG_COMM_STEP_SHARE * out->step_ms > out->floor_ms
                     ? SG_COMM_STEP_SHARE * out->step_ms
                     : out->floor_ms;
    /* And the ranks arrived together: their spread under half the time the costliest slowed
     * kind now takes once all are in. A throttled node also slows its part of a collective,
     * but its ranks arrive late too (8 ranks, node B at 40 % of a CPU: spread 87.8 ms against
     * 106.7 ms after; a slow link: 7.2 against 138.8). */
    if (out->culprit < 0 && !out->late_host && out->collectives >= SG_MIN_COLLECTIVES &&
        added >= bar && out->arrival_spread_ms < 0.5 * k[0].recent_ms) {
        out->comm_slow = 1;
        out->comm_added_step_ms = added;
    }
    return 0;
}

int pb_stragglers_analyze(const pb_arrival_rank *ranks, size_t n_ranks, pb_sg_result *out) {
    if (!ranks || !n_ranks || !out) {
        errno = EINVAL;
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->culprit = -1;
    out->culprit_phase = -1;
    size_t total = 0;
    for (size_t i = 0; i < n_ranks; i++) total += ranks[i].n_arrivals;

    sg_entry *e = total ? malloc(total * sizeof *e) : NULL;
    sg_lag *lags = total ? malloc(total * sizeof *lags) : NULL;
    sg_group *groups = total ? malloc(total * sizeof *groups) : NULL;
    size_t *host_of = malloc(n_ranks * sizeof *host_of);     /* rank index -> host id */
    size_t *host_size = calloc(n_ranks, sizeof *host_size);  /* host id -> ranks */
    /* host id -> late collectives, then (host_far) -> those of them behind the bar */
    size_t *host_late = calloc(2 * n_ranks, sizeof *host_late), *host_far;
    sg_host_ix *hx = malloc(n_ranks * sizeof *hx);
    double *tmp = malloc((n_ranks > total ? n_ranks : total) * sizeof *tmp + sizeof *tmp);
    double *sum_lag = calloc(n_ranks, sizeof *sum_lag); /* rank index -> its lags when last */
    double *spread = malloc((total ? total : 1) * sizeof *spread); /* per complete collective */
    double *aspread = malloc((total ? total : 1) * sizeof *aspread); /* last - first entry */
    sg_comm_sample *cs = malloc((total ? total : 1) * sizeof *cs);
    sg_hkind *hk = malloc((total ? total : 1) * sizeof *hk);
    int64_t *xs = malloc(n_ranks * sizeof *xs); /* one collective's completions */
    out->ranks = calloc(n_ranks, sizeof *out->ranks);
    if ((total && (!e || !lags || !groups)) || !host_of || !host_size || !host_late || !hx ||
        !tmp || !sum_lag || !spread || !aspread || !cs || !hk || !xs || !out->ranks) {
        free(e), free(lags), free(groups), free(host_of), free(host_size), free(host_late);
        free(hx), free(tmp), free(sum_lag), free(spread), free(aspread), free(cs), free(xs);
        free(hk);
        free(out->ranks);
        out->ranks = NULL;
        errno = ENOMEM;
        return -1;
    }
    host_far = host_late + n_ranks;
    out->n_ranks = n_ranks;
    for (size_t i = 0; i < n_ranks; i++) {
        out->ranks[i].rank = ranks[i].rank;
        out->ranks[i].host = ranks[i].host;
        hx[i].host = ranks[i].host ? ranks[i].host : "";
        hx[i].r = i;
    }
    /* Host ids by sorting: O(N log N) even at 10,000 ranks. An unknown host ("") never counts
     * as a node. */
    qsort(hx, n_ranks, sizeof *hx, host_cmp);
    size_t hid = 0;
    for (size_t i = 0; i < n_ranks; i++) {
        if (i && strcmp(hx[i].host, hx[i - 1].host)) hid++;
        host_of[hx[i].r] = hid;
        host_size[hid]++;
    }
    size_t n_hosts = hid + 1;

    /* Median step over ranks, and the noise floor. */
    size_t ns = 0;
    for (size_t i = 0; i < n_ranks; i++)
        if (ranks[i].step_ms > 0) tmp[ns++] = ranks[i].step_ms;
    qsort(tmp, ns, sizeof *tmp, dbl_cmp);
    out->step_ms = median_sorted(tmp, ns);
    out->floor_ms = SG_FLOOR_SHARE * out->step_ms > SG_FLOOR_MS ? SG_FLOOR_SHARE * out->step_ms
                                                                : SG_FLOOR_MS;

    size_t k = 0;
    for (size_t i = 0; i < n_ranks; i++)
        for (size_t j = 0; j < ranks[i].n_arrivals; j++) {
            const pb_arrival *a = &ranks[i].arrivals[j];
            if (a->seq > SG_WARMUP_SEQ) e[k++] = (sg_entry){a->group, (uint32_t)j, a->seq, a->enter_ns, i};
        }
    total = k; /* the warm-up left out */

    /* Members per group: distinct ranks that reported the group at all. */
    size_t ng = 0;
    if (total) {
        sg_entry *pairs = malloc(total * sizeof *pairs);
        if (!pairs) {
            pb_stragglers_free(out);
            free(e), free(lags), free(groups), free(host_of), free(host_size), free(host_late);
            free(hx), free(tmp), free(sum_lag), free(spread), free(aspread), free(cs), free(xs);
            free(hk);
            errno = ENOMEM;
            return -1;
        }
        memcpy(pairs, e, total * sizeof *pairs);
        qsort(pairs, total, sizeof *pairs, gr_cmp);
        for (size_t i = 0; i < total; i++) {
            if (!i || pairs[i].group != pairs[i - 1].group) groups[ng++] = (sg_group){pairs[i].group, 0};
            if (!i || pairs[i].group != pairs[i - 1].group || pairs[i].r != pairs[i - 1].r)
                groups[ng - 1].members++;
        }
        free(pairs);
    }

    qsort(e, total, sizeof *e, entry_cmp);
    size_t nl = 0, ncs = 0;
    int64_t first_med = 0, last_med = 0;
    for (size_t i = 0; i < total;) {
        size_t j = i;
        while (j < total && e[j].group == e[i].group && e[j].seq == e[i].seq) j++;
        size_t run = j - i, members = group_members(groups, ng, e[i].group);
        if (run < 2 || run != members) { /* a member missing (or duplicate): not comparable */
            out->incomplete++;
            i = j;
            continue;
        }
        out->collectives++;
        int64_t med = run % 2 ? e[i + run / 2].enter_ns
                              : e[i + run / 2 - 1].enter_ns / 2 + e[i + run / 2].enter_ns / 2;
        if (out->collectives == 1 || med < first_med) first_med = med;
        if (out->collectives == 1 || med > last_med) last_med = med;
        const sg_entry *last = &e[j - 1];
        lags[nl++] = (sg_lag){last->r, (double)(last->enter_ns - med) / 1e6, 0, 0};
        /* The punctual half's own spread: the lower median entry behind the first. */
        spread[nl - 1] = (double)(e[i + (run - 1) / 2].enter_ns - e[i].enter_ns) / 1e6;
        aspread[nl - 1] = (double)(last->enter_ns - e[i].enter_ns) / 1e6;
        /* Its after time, when every member completed it. */
        double after = after_time_ms(ranks, &e[i], run, xs);
        if (after >= 0) {
            const pb_arrival *la = &ranks[last->r].arrivals[last->j];
            cs[ncs++] = (sg_comm_sample){last->group, last->seq, la->op ? la->op : "?",
                                         la->bytes, last->enter_ns, after};
        }
        out->ranks[last->r].times_last++;
        sum_lag[last->r] += lags[nl - 1].ms;
        /* Late host: the last m entries are exactly the m ranks of one known host, 2 <= m < run. */
        size_t h = host_of[last->r], m = host_size[h];
        const pb_arrival *lk = &ranks[last->r].arrivals[last->j];
        hk[nl - 1] = (sg_hkind){last->group, lk->op ? lk->op : "?", lk->bytes, SIZE_MAX, 0};
        if (m >= 2 && m < run && ranks[last->r].host && ranks[last->r].host[0]) {
            size_t s = 0;
            while (s < m && host_of[e[j - 1 - s].r] == h) s++;
            if (s == m) {
                host_late[h]++, lags[nl - 1].host_late = 1;
                lags[nl - 1].host_gap_ms = (double)(e[j - m].enter_ns - e[j - m - 1].enter_ns) / 1e6;
                hk[nl - 1].host = h, hk[nl - 1].gap_ms = lags[nl - 1].host_gap_ms;
            }
        }
        i = j;
    }

    /* Median lag per rank (over the collectives it was last in). */
    qsort(lags, nl, sizeof *lags, lag_cmp);
    for (size_t i = 0; i < nl;) {
        size_t j = i;
        while (j < nl && lags[j].r == lags[i].r) tmp[j - i] = lags[j].ms, j++;
        out->ranks[lags[i].r].median_lag_ms = median_sorted(tmp, j - i);
        i = j;
    }

    out->span_ms = (double)(last_med - first_med) / 1e6;
    size_t need = (size_t)(SG_MAJORITY * (double)out->collectives + 0.999999);
    /* The job's noise: the median over the complete collectives of the punctual half's spread. */
    if (nl) {
        memcpy(tmp, spread, nl * sizeof *tmp);
        qsort(tmp, nl, sizeof *tmp, dbl_cmp);
        out->noise_ms = median_sorted(tmp, nl);
    }
    if (nl) {
        memcpy(tmp, aspread, nl * sizeof *tmp);
        qsort(tmp, nl, sizeof *tmp, dbl_cmp);
        out->arrival_spread_ms = median_sorted(tmp, nl);
    }
    double bar = SG_NOISE_X * out->noise_ms > out->floor_ms ? SG_NOISE_X * out->noise_ms
                                                            : out->floor_ms;
    if (out->collectives >= SG_MIN_COLLECTIVES) {
        /* The count rule: the rank most often last (ties: input order), in a clear majority,
         * its median lag at the bar. */
        size_t cand = 0;
        for (size_t i = 1; i < n_ranks; i++)
            if (out->ranks[i].times_last > out->ranks[cand].times_last) cand = i;
        if (out->ranks[cand].times_last >= need && out->ranks[cand].median_lag_ms >= bar)
            out->culprit = (int)cand;
        /* The wait rule: each rank's lags beyond the bar, summed: the wait it imposes beyond
         * the job's jitter and the floor. The rank with the most is named when it holds a clear
         * majority of all such wait, that wait costs the others at least the floor a step, and
         * it comes in at least every other step (a straggler's delay recurs; a rank the machine
         * descheduled now and then is not one). This names a rank whose delay lands in one of
         * many collectives a step (FSDP's first all-gather of the forward): last in few, by
         * far. */
        double excess = 0;
        /* Collectives whose last rank is behind the bar, or whose late host is: its first
         * rank in behind all the others' by the bar (with half the ranks on that host, the
         * last one's lag behind the median entry is only half the host's delay). */
        size_t far = 0;
        for (size_t i = 0; i < nl; i++) {
            double ex = lags[i].ms - bar;
            int host_far_c = lags[i].host_late && lags[i].host_gap_ms > bar;
            if (ex > 0) {
                out->ranks[lags[i].r].wait_ms += ex, excess += ex;
                out->ranks[lags[i].r].times_far++;
            }
            if (ex > 0 || host_far_c) far++;
            if (host_far_c) host_far[host_of[lags[i].r]]++;
        }
        size_t cand_w = 0;
        for (size_t i = 1; i < n_ranks; i++)
            if (out->ranks[i].wait_ms > out->ranks[cand_w].wait_ms) cand_w = i;
        double steps = out->span_ms > 0 && out->step_ms > 0 ? out->span_ms / out->step_ms : 0;
        double per_step = steps > 0 ? out->ranks[cand_w].wait_ms / steps : 0;
        if (out->culprit < 0 && excess > 0 &&
            out->ranks[cand_w].wait_ms >= SG_MAJORITY * excess && per_step >= out->floor_ms &&
            (double)out->ranks[cand_w].times_far >= 0.5 * steps) {
            out->culprit = (int)cand_w;
            out->culprit_wait_step_ms = per_step;
        }
        /* The kind rule: per kind of collective (group, op, bytes) recurring at least every
         * other step, the host whose ranks are exactly the last ones in a clear majority of it,
         * by a median gap of at least the floor. The best such (kind, host), by share then
         * count, names its host; its numbers are kept as the evidence. */
        sg_hkind best_k = {0, "?", 0, SIZE_MAX, 0};
        size_t best_h = SIZE_MAX, best_n = 0, best_c = 0;
        double best_gap = 0;
        qsort(hk, nl, sizeof *hk, hkind_cmp);
        for (size_t i = 0; i < nl;) {
            size_t j = i;
            while (j < nl && same_kind(&hk[j], &hk[i])) j++;
            size_t nk = j - i;
            for (size_t a = i; a < j;) {
                size_t b = a;
                while (b < j && hk[b].host == hk[a].host) tmp[b - a] = hk[b].gap_ms, b++;
                size_t c = b - a;
                if (hk[a].host != SIZE_MAX && nk >= SG_KIND_MIN && (double)nk >= 0.5 * steps &&
                    (double)c >= SG_MAJORITY * (double)nk) {
                    qsort(tmp, c, sizeof *tmp, dbl_cmp);
                    double gap = median_sorted(tmp, c);
                    if (gap >= out->floor_ms &&
                        (best_h == SIZE_MAX || c * best_n > best_c * nk ||
                         (c * best_n == best_c * nk && c > best_c))) {
                        best_h = hk[a].host, best_n = nk, best_c = c, best_gap = gap;
                        best_k = hk[a];
                    }
                }
                a = b;
            }
            i = j;
        }
        size_t late_id = n_hosts;
        for (size_t h = 0; h < n_hosts; h++) {
            /* The wait rule: its gaps are behind the bar by construction. */
            int by_wait = far && (double)host_far[h] >= SG_MAJORITY * (double)far &&
                          (double)host_far[h] >= 0.5 * steps;
            int by_kind = best_h == h;
            if (host_late[h] < need && !by_wait && !by_kind) continue;
            /* The count rule names it only if the lag of its last rank clears the bar too. */
            for (size_t i = 0; i < n_ranks; i++)
                if (host_of[i] == h && out->ranks[i].times_last &&
                    (by_wait || by_kind || out->ranks[i].median_lag_ms >= bar)) {
                    out->late_host = ranks[i].host;
                    out->late_host_count = host_late[h];
                    late_id = h;
                    break;
                }
        }
        if (late_id < n_hosts && best_h == late_id) {
            out->late_kind_group = best_k.group, out->late_kind_op = best_k.op;
            out->late_kind_bytes = best_k.bytes, out->late_kind_n = best_n;
            out->late_kind_late = best_c, out->late_kind_gap_ms = best_gap;
        }
        /* A late host spreads "last" over its ranks: the one of them most often last stands
         * as the culprit (the node's evidence named it), so the phase below is still said. */
        if (out->culprit < 0 && out->late_host) {
            size_t best = n_ranks;
            for (size_t i = 0; i < n_ranks; i++)
                if (host_of[i] == late_id &&
                    (best == n_ranks || out->ranks[i].times_last > out->ranks[best].times_last))
                    best = i;
            if (best < n_ranks) out->culprit = (int)best;
        }
    }
    out->bar_ms = bar;

    if (out->culprit >= 0 && out->span_ms > 0) {
        /* The lags it (or its late host) imposed, over the time they were imposed in. */
        size_t late_h = out->late_host ? host_of[out->culprit] : (size_t)-1;
        double waited = 0;
        for (size_t i = 0; i < nl; i++)
            if ((int)lags[i].r == out->culprit || host_of[lags[i].r] == late_h) waited += lags[i].ms;
        out->wait_share = waited / out->span_ms > 1 ? 1 : waited / out->span_ms;
    }

    if (out->culprit >= 0) {
        const pb_arrival_rank *c = &ranks[out->culprit];
        double lag = out->culprit_wait_step_ms > 0 ? out->culprit_wait_step_ms
                                                   : out->ranks[out->culprit].median_lag_ms,
               best = 0;
        for (int p = 0; p < PB_PHASE_COUNT; p++) {
            if (!pb_phase_selected(p, PB_SG_PHASES_WITHOUT) || c->phase_ms[p] < 0) continue;
            size_t n = 0;
            for (size_t i = 0; i < n_ranks; i++)
                if ((int)i != out->culprit && ranks[i].phase_ms[p] >= 0) tmp[n++] = ranks[i].phase_ms[p];
            if (!n) continue;
            qsort(tmp, n, sizeof *tmp, dbl_cmp);
            double excess = c->phase_ms[p] - median_sorted(tmp, n);
            if (excess > best && excess >= 0.5 * lag) best = excess, out->culprit_phase = p;
        }
        out->culprit_phase_excess_ms = best;
    }
    int rc = comm_analyze(cs, ncs, out);
    free(e), free(lags), free(groups), free(host_of), free(host_size), free(host_late);
    free(hx), free(tmp), free(sum_lag), free(spread), free(aspread), free(cs), free(xs);
    free(hk);
    if (rc) pb_stragglers_free(out);
    return rc;
}

void pb_stragglers_free(pb_sg_result *r) {
    if (!r) return;
    free(r->ranks);
    free(r->comm);
    r->ranks = NULL;
    r->comm = NULL;
    r->n_ranks = r->n_comm = 0;
}

typedef struct sg_pick {
    size_t times_last, i;
} sg_pick;

static int pick_cmp(const void *a, const void *b) { /* most often last first, then input order */
    const sg_pick *x = a, *y = b;
    if (x->times_last != y->times_last) return x->times_last > y->times_last ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int index_cmp(const void *a, const void *b) {
    const sg_pick *x = a, *y = b;
    return x->i < y->i ? -1 : x->i > y->i;
}

static json_t *group_json(uint32_t id, const char *const *names, size_t n) {
    return names && id < n && names[id] ? json_string(names[id]) : json_integer(id);
}

static json_t *comm_json(const pb_sg_result *r, const char *const *names, size_t n_groups) {
    json_t *o = json_pack("{s:b,s:f,s:f,s:[]}", "slow", r->comm_slow, "added_step_ms",
                          r->comm_added_step_ms, "arrival_spread_ms", r->arrival_spread_ms,
                          "kinds");
    json_t *kinds = json_object_get(o, "kinds");
    if (!kinds) goto fail;
    size_t shown = r->n_comm < SG_COMM_SHOWN ? r->n_comm : SG_COMM_SHOWN;
    for (size_t i = 0; i < shown; i++) {
        const pb_sg_comm *c = &r->comm[i];
        if (json_array_append_new(kinds, json_pack("{s:o,s:s,s:I,s:I,s:f,s:f,s:f,s:f}", "group",
                                                   group_json(c->group, names, n_groups), "op",
                                                   c->op, "bytes", (json_int_t)c->bytes, "n",
                                                   (json_int_t)c->n, "after_ms", c->after_ms,
                                                   "early_ms", c->early_ms, "recent_ms",
                                                   c->recent_ms, "added_step_ms",
                                                   c->added_step_ms)))
            goto fail;
    }
    if (shown < r->n_comm &&
        json_object_set_new(o, "kinds_left_out", json_integer((json_int_t)(r->n_comm - shown))))
        goto fail;
    return o;
fail:
    json_decref(o);
    return NULL;
}

int pb_stragglers_late_kind_text(const pb_sg_result *r, const char *const *group_names,
                                 size_t n_groups, char *buf, size_t len) {
    if (!len) return -1;
    buf[0] = 0;
    if (!r->late_kind_n) return -1;
    char b[32], g[32];
    pb_buf_format_bytes(b, sizeof b, r->late_kind_bytes);
    const char *gn = group_names && r->late_kind_group < n_groups ? group_names[r->late_kind_group]
                                                                 : NULL;
    if (!gn) snprintf(g, sizeof g, "%u", r->late_kind_group), gn = g;
    snprintf(buf, len, "; in %zu of %zu %s of %s on group %s its ranks are the last ones, %.1f ms "
             "(median) behind the others' last", r->late_kind_late, r->late_kind_n,
             r->late_kind_op ? r->late_kind_op : "?", b, gn, r->late_kind_gap_ms);
    return 0;
}

int pb_stragglers_comm_text(const pb_sg_result *r, const char *const *group_names,
                            size_t n_groups, char *buf, size_t len) {
    if (!len) return -1;
    buf[0] = 0;
    if (!r->comm_slow || !r->n_comm) return -1;
    const pb_sg_comm *c = &r->comm[0]; /* the slowed kind that adds the most */
    char b[32], g[32];
    pb_buf_format_bytes(b, sizeof b, c->bytes);
    const char *gn = group_names && c->group < n_groups ? group_names[c->group] : NULL;
    if (!gn) snprintf(g, sizeof g, "%u", c->group), gn = g;
    snprintf(buf, len,
             "the collectives slowed, not a rank: %s of %s on group %s takes %.1f ms after the "
             "last rank enters, %.1f ms in the oldest third of the window, while the ranks "
             "arrive within %.1f ms of each other; the slowed collectives add %.1f ms a step "
             "(step %.1f ms): a communication slowdown (a link or the network)",
             c->op, b, gn, c->recent_ms, c->early_ms, r->arrival_spread_ms,
             r->comm_added_step_ms, r->step_ms);
    return 0;
}

json_t *pb_stragglers_json(const pb_sg_result *r, size_t max_ranks,
                           const char *const *group_names, size_t n_groups) {
    const pb_sg_rank_result *c = r->culprit >= 0 ? &r->ranks[r->culprit] : NULL;
    const char *phase = c && r->culprit_phase >= 0 ? pb_phases[r->culprit_phase].short_name : NULL;
    size_t keep = max_ranks && max_ranks < r->n_ranks ? max_ranks : r->n_ranks;
    sg_pick *pick = malloc((r->n_ranks ? r->n_ranks : 1) * sizeof *pick);
    json_t *out = json_pack("{s:I,s:I,s:f,s:f,s:f,s:f,s:o,s:f,s:o,s:f,s:o,s:f,s:[]}",
                            "collectives", (json_int_t)r->collectives, "incomplete",
                            (json_int_t)r->incomplete, "step_ms", r->step_ms, "floor_ms",
                            r->floor_ms, "noise_ms", r->noise_ms, "bar_ms", r->bar_ms, "culprit",
                            c ? json_integer(c->rank) : json_null(), "wait_step_ms",
                            r->culprit_wait_step_ms, "phase",
                            phase ? json_string(phase) : json_null(), "phase_excess_ms",
                            r->culprit_phase_excess_ms, "late_host",
                            r->late_host ? json_string(r->late_host) : json_null(), "wait_share",
                            r->wait_share, "ranks");
    json_t *ranks = json_object_get(out, "ranks");
    if (!pick || !ranks ||
        json_object_set_new(out, "late_host_count", json_integer((json_int_t)r->late_host_count)) ||
        json_object_set_new(out, "late_host_kind",
                            r->late_kind_n
                                ? json_pack("{s:o,s:s,s:I,s:I,s:I,s:f}", "group",
                                            group_json(r->late_kind_group, group_names, n_groups),
                                            "op", r->late_kind_op, "bytes",
                                            (json_int_t)r->late_kind_bytes, "n",
                                            (json_int_t)r->late_kind_n, "late",
                                            (json_int_t)r->late_kind_late, "gap_ms",
                                            r->late_kind_gap_ms)
                                : json_null()) ||
        json_object_set_new(out, "communication", comm_json(r, group_names, n_groups)))
        goto fail;
    for (size_t i = 0; i < r->n_ranks; i++) pick[i] = (sg_pick){r->ranks[i].times_last, i};
    if (keep < r->n_ranks) {
        qsort(pick, r->n_ranks, sizeof *pick, pick_cmp);
        qsort(pick, keep, sizeof *pick, index_cmp);
        if (json_object_set_new(out, "ranks_left_out", json_integer((json_int_t)(r->n_ranks - keep))))
            goto fail;
    }
    for (size_t k = 0; k < keep; k++) {
        const pb_sg_rank_result *x = &r->ranks[pick[k].i];
        if (json_array_append_new(ranks, json_pack("{s:i,s:s?,s:I,s:f,s:f,s:I}", "rank", x->rank,
                                                   "host", x->host, "times_last",
                                                   (json_int_t)x->times_last, "median_lag_ms",
                                                   x->median_lag_ms, "wait_ms", x->wait_ms,
                                                   "times_far", (json_int_t)x->times_far)))
            goto fail;
    }
    free(pick);
    return out;
fail:
    free(pick);
    json_decref(out);
    return NULL;
}

typedef struct sg_behind {
    uint32_t group;
    size_t r;
    double ms;
} sg_behind;

static int behind_cmp(const void *a, const void *b) {
    const sg_behind *x = a, *y = b;
    if (x->group != y->group) return x->group < y->group ? -1 : 1;
    if (x->r != y->r) return x->r < y->r ? -1 : 1;
    return x->ms < y->ms ? -1 : x->ms > y->ms;
}

int pb_stragglers_members(const pb_arrival_rank *ranks, size_t n_ranks, pb_sg_member **members,
                          size_t *n_members, pb_sg_last **lasts, size_t *n_lasts) {
    if (!ranks || !n_ranks || !members || !n_members || !lasts || !n_lasts) {
        errno = EINVAL;
        return -1;
    }
    *members = NULL, *lasts = NULL, *n_members = 0, *n_lasts = 0;
    size_t total = 0;
    for (size_t i = 0; i < n_ranks; i++) total += ranks[i].n_arrivals;
    if (!total) return 0;
    sg_entry *e = malloc(total * sizeof *e), *pairs = malloc(total * sizeof *pairs);
    sg_group *groups = malloc(total * sizeof *groups);
    sg_behind *b = malloc(total * sizeof *b);
    double *tmp = malloc(total * sizeof *tmp);
    int64_t *xs = malloc(total * sizeof *xs);
    pb_sg_member *m = malloc(total * sizeof *m);
    pb_sg_last *l = malloc(total * sizeof *l);
    if (!e || !pairs || !groups || !b || !tmp || !xs || !m || !l) goto oom;
    size_t k = 0;
    for (size_t i = 0; i < n_ranks; i++)
        for (size_t j = 0; j < ranks[i].n_arrivals; j++) {
            const pb_arrival *a = &ranks[i].arrivals[j];
            if (a->seq > SG_WARMUP_SEQ) e[k++] = (sg_entry){a->group, (uint32_t)j, a->seq, a->enter_ns, i};
        }
    total = k; /* the warm-up left out */
    /* Members per group, as pb_stragglers_analyze counts them. */
    memcpy(pairs, e, total * sizeof *pairs);
    qsort(pairs, total, sizeof *pairs, gr_cmp);
    size_t ng = 0;
    for (size_t i = 0; i < total; i++) {
        if (!i || pairs[i].group != pairs[i - 1].group) groups[ng++] = (sg_group){pairs[i].group, 0};
        if (!i || pairs[i].group != pairs[i - 1].group || pairs[i].r != pairs[i - 1].r)
            groups[ng - 1].members++;
    }
    qsort(e, total, sizeof *e, entry_cmp);
    size_t nb = 0, nl = 0;
    for (size_t i = 0; i < total;) {
        size_t j = i;
        while (j < total && e[j].group == e[i].group && e[j].seq == e[i].seq) j++;
        if (j - i >= 2 && j - i == group_members(groups, ng, e[i].group)) {
            for (size_t q = i; q < j; q++)
                b[nb++] = (sg_behind){e[q].group, e[q].r, (double)(e[q].enter_ns - e[i].enter_ns) / 1e6};
            l[nl++] = (pb_sg_last){e[i].group, e[i].seq, e[j - 1].r, after_time_ms(ranks, &e[i], j - i, xs)};
        }
        i = j;
    }
    qsort(b, nb, sizeof *b, behind_cmp);
    size_t nm = 0;
    for (size_t i = 0; i < nb;) {
        size_t j = i;
        while (j < nb && b[j].group == b[i].group && b[j].r == b[i].r) tmp[j - i] = b[j].ms, j++;
        m[nm++] = (pb_sg_member){b[i].group, b[i].r, j - i, median_sorted(tmp, j - i)};
        i = j;
    }
    free(e), free(pairs), free(groups), free(b), free(tmp), free(xs);
    if (!nm) free(m), m = NULL;
    if (!nl) free(l), l = NULL;
    *members = m, *n_members = nm, *lasts = l, *n_lasts = nl;
    return 0;
oom:
    free(e), free(pairs), free(groups), free(b), free(tmp), free(xs), free(m), free(l);
    errno = ENOMEM;
    return -1;
}
