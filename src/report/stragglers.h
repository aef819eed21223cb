/*
 * stragglers.h - which rank makes everyone wait: arrival order per collective (issue 31).
 *
 * Input: one pb_arrival_rank per rank, each with the bounded list of collectives it entered
 * (group, sequence number, op, bytes, entry and completion time on clocks already aligned
 * across nodes, in nanoseconds) and the medians of its own step phases (python.steps).
 * Output: for every (group, seq) that every member of the group reported, the last arriving
 * rank and its lag behind the median entry; per rank how often it was last and its median lag;
 * the culprit, if any, with the phase in which it spends the time; whether a whole node is late.
 *
 * Pure computation: no I/O, no globals, thread-safe for distinct outputs. The caller owns the
 * inputs; pb_stragglers_analyze fills a caller-owned result whose per-rank array it allocates
 * (free with pb_stragglers_free).
 */
#ifndef PB_REPORT_STRAGGLERS_H
#define PB_REPORT_STRAGGLERS_H

#include "phases.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* The phases a culprit's time is looked for in: python.steps' phases (phases.h) but the waits
 * for the other ranks (collectives, gradient sync), where a late rank's time is not. Named by
 * pb_phases[].short_name (the JSON and the table) and .short_text (a sentence: "other host
 * time", the step outside the others, e.g. the program's own batch preparation between steps). */
#define PB_SG_PHASES_WITHOUT PB_PHASE_RANK_WAIT

typedef struct pb_arrival {
    uint32_t group;    /* process group id, the same on every member */
    uint64_t seq;      /* the group's collective sequence number, the same on every member */
    const char *op;    /* e.g. "all_reduce"; borrowed */
    uint64_t bytes;
    int64_t enter_ns;  /* aligned clock */
    int64_t exit_ns;   /* aligned clock; 0 when not completed */
} pb_arrival;

typedef struct pb_arrival_rank {
    int rank;
    const char *host;          /* borrowed; NULL or "" = unknown */
    double step_ms;            /* median step time of this rank; <= 0 unknown */
    double phase_ms[PB_PHASE_COUNT]; /* median per phase (pb_phase_id); < 0 unknown */
    const pb_arrival *arrivals;
    size_t n_arrivals;
} pb_arrival_rank;

typedef struct pb_sg_rank_result {
    int rank;
    const char *host;
    size_t times_last;     /* complete collectives this rank entered last */
    double median_lag_ms;  /* median lag behind the median entry when it was last; 0 if never */
    double wait_ms;        /* its lags beyond bar_ms when last, summed (the wait rule) */
    size_t times_far;      /* the collectives it entered last by more than bar_ms */
} pb_sg_rank_result;

/* One kind of collective (the same group, op and bytes) and how long it takes once every
 * member is in: its "after" time, the median completion of the members minus the last entry,
 * on the aligned clock. A straggler makes the others wait before that point; a slow link or
 * network makes the collective itself longer after it. */
typedef struct pb_sg_comm {
    uint32_t group;
    const char *op;        /* borrowed from the input */
    uint64_t bytes;
    size_t n;              /* its complete, completed collectives */
    double after_ms;       /* median after time over them */
    double early_ms;       /* median over the oldest third (by sequence number) */
    double recent_ms;      /* median over the newest third */
    /* (recent - early) x how many of it the job runs a step, when this kind slowed (the
     * newest third's lower quartile >= 2 x the oldest third's upper quartile and >= 1 ms more,
     * each third >= 10 collectives: stragglers.c); else 0 */
    double added_step_ms;
} pb_sg_comm;

typedef struct pb_sg_result {
    size_t collectives;     /* complete (group, seq) pairs analysed */
    size_t incomplete;      /* pairs some member did not report (ring wrapped, still running) */
    pb_sg_rank_result *ranks; /* n_ranks entries, input order */
    size_t n_ranks;
    double step_ms;         /* median over ranks of their median step time; 0 unknown */
    double floor_ms;        /* max(2 ms, 5 % of step_ms): a lag below it is noise */
    double noise_ms;        /* the job's own jitter: median over the complete collectives of the
                             * lower median entry behind the first (0 with 2 ranks) */
    double bar_ms;          /* max(floor_ms, 3 x noise_ms): a culprit's median lag reaches it */
    /* A culprit named by the wait rule (stragglers.c): its wait_ms per step (span_ms over
     * step_ms steps); 0 when named by the count rule or nobody is. */
    double culprit_wait_step_ms;
    int culprit;            /* index into ranks, -1 = nobody */
    int culprit_phase;      /* pb_phase_id, -1 = none explains the lag */
    double culprit_phase_excess_ms; /* its phase median minus the other ranks' median */
    const char *late_host;  /* a host all of whose ranks arrive late, NULL if none; borrowed */
    size_t late_host_count; /* collectives in which that host was late */
    /* The kind of collective (group, op, bytes) in which late_host's ranks were exactly the
     * last ones in a clear majority (the kind rule, stragglers.c), when that rule holds for
     * it: late_kind_late of late_kind_n, by a median gap behind the others' last entry of
     * late_kind_gap_ms. late_kind_n is 0 otherwise. */
    uint32_t late_kind_group;
    const char *late_kind_op; /* borrowed from the input */
    uint64_t late_kind_bytes;
    size_t late_kind_n, late_kind_late;
    double late_kind_gap_ms;
    double span_ms;         /* from the first to the last median entry of the complete ones */
    /* What the culprit (with a late host: every rank of that host) costs the others: its lags
     * summed over the collectives it entered last, over span_ms; 0 without a culprit. */
    double wait_share;
    /* Communication (stragglers.c): per kind of collective, most time first (slowed kinds by
     * added_step_ms, then the others by n x after_ms); malloc'ed, freed by pb_stragglers_free. */
    pb_sg_comm *comm;
    size_t n_comm;
    double arrival_spread_ms; /* median over the complete collectives of last minus first entry */
    /* The collectives slowed, not a rank: nobody is named (no culprit, no late host), the
     * slowed kinds together add >= max(floor_ms, 10 % of the step) a step over the window's
     * oldest third, and the ranks arrived together (arrival_spread_ms under half the costliest
     * slowed kind's recent_ms). Their sum is comm_added_step_ms; 0 when not. */
    int comm_slow;
    double comm_added_step_ms;
} pb_sg_result;

/* Analyse. Returns 0, or -1 with errno ENOMEM/EINVAL (n_ranks 0 or NULL input). */
int pb_stragglers_analyze(const pb_arrival_rank *ranks, size_t n_ranks, pb_sg_result *out);
void pb_stragglers_free(pb_sg_result *r);

/* Per member of a group, over the complete collectives of the input: how long after the
 * group's first rank it enters (its median), and per collective which rank entered last: what
 * the exporter's series say (docs/exporter.md). */
typedef struct pb_sg_member {
    uint32_t group;
    size_t rank;             /* index into the input */
    size_t collectives;      /* complete collectives of the group */
    double median_behind_ms; /* median of (its entry - the first entry) over them */
} pb_sg_member;

typedef struct pb_sg_last {
    uint32_t group;
    uint64_t seq;
    size_t rank;             /* index into the input of the rank that entered last */
    double after_ms;         /* the median completion minus the last entry (>= 0), as
                              * pb_stragglers_analyze's after time; -1 when a member has not
                              * completed it */
} pb_sg_last;

/* Fills *members (sorted by group, then rank) and *lasts (sorted by group, then seq), both
 * malloc'ed (caller frees; NULL when empty). Returns 0, or -1 with errno ENOMEM/EINVAL.
 * O(A log A) for A arrivals. */
int pb_stragglers_members(const pb_arrival_rank *ranks, size_t n_ranks, pb_sg_member **members,
                          size_t *n_members, pb_sg_last **lasts, size_t *n_lasts);

/* The result as the JSON of `probing <target> stragglers --json` (docs/cli.md): collectives,
 * incomplete, step_ms, floor_ms, noise_ms, bar_ms, culprit (rank or null), wait_step_ms,
 * phase, phase_excess_ms, late_host, late_host_count, wait_share; per rank rank, host,
 * times_last, median_lag_ms, wait_ms, times_far; and "communication": slow, added_step_ms,
 * arrival_spread_ms and up to 8 kinds (group, op, bytes, n, after_ms, early_ms, recent_ms,
 * added_step_ms; "kinds_left_out" when there were more). Group ids are named through
 * group_names[id] (n_groups of them; NULL: "group" is the id). Ranks with more entries than
 * max_ranks (0: no limit) keep the max_ranks most often last (ties: input order), in input
 * order, and "ranks_left_out" says how many were left out. A new object (caller owns), or NULL
 * out of memory. [any thread] */
json_t *pb_stragglers_json(const pb_sg_result *r, size_t max_ranks,
                           const char *const *group_names, size_t n_groups);

/* The kind rule's evidence for a late node as a clause into buf (NUL-terminated, cut to size)
 * when r->late_kind_n: "; in 200 of 200 all_reduce of 4 B on group WORLD its ranks are the last
 * ones, 35.5 ms (median) behind the others' last"; returns 0, or -1 (buf empty) otherwise.
 * Names as pb_stragglers_json. */
int pb_stragglers_late_kind_text(const pb_sg_result *r, const char *const *group_names,
                                 size_t n_groups, char *buf, size_t len);

/* The communication verdict as one sentence into buf (NUL-terminated, cut to size) when
 * r->comm_slow, naming the kind that added the most ("all_reduce of 1 MB on group 0 takes
 * 41.2 ms after the last rank enters, 3.9 ms in the oldest third of the window ..."); returns
 * 0, or -1 (buf empty) when the collectives did not slow. Names as pb_stragglers_json. */
int pb_stragglers_comm_text(const pb_sg_result *r, const char *const *group_names,
                            size_t n_groups, char *buf, size_t len);

/* The analysis as text to out (stragglers_render.c): the verdict ("rank 3 (node-b) makes the
 * others wait: ..."), a line per rank, the collectives that take longest once every rank is in.
 * Names as pb_stragglers_json; host names and group names sanitised. [any thread] */
void pb_stragglers_render(FILE *out, const pb_sg_result *r, const char *const *group_names,
                          size_t n_groups);

#endif
