/*
 * phases.h - the phases of a training step: the one list of what python.steps splits a step's
 * wall time into (data wait, forward, backward, optimizer, collectives, gradient sync, other
 * host time), with each phase's column, the names it is printed under, and the flags that pick
 * the subsets the rules need.
 *
 * Every user derives its list from pb_phases[] in this order (the order of python.steps'
 * columns, which is also the web view's stack, bottom first): the report's load-imbalance rule
 * (src/report/ranks.c) and stragglers across nodes (src/report/cluster.c), the arrival-order
 * analysis (src/report/stragglers.c, its phase medians fetched by src/cli/client/arrivals.c), the
 * exporter's probing_step_phase_seconds (src/cli/serve/exporter_scrape.c), the web view (sent
 * to web/ui.js in /ui/targets, src/cli/serve/ui.c) and the agent's step timeline
 * (src/agent/base/timeline.c). The agent's tables declare the columns themselves
 * (src/agent/collect/collect.c, device.c): this list names them, in their order.
 *
 * Adding a phase: a column of python.steps (and python.device_steps) first, then a row here;
 * the users above pick it up, each by the flags it selects on. [any thread: constant data]
 */
#ifndef PB_COMMON_PHASES_H
#define PB_COMMON_PHASES_H

#include <stddef.h>

/* The phases, indexes into pb_phases[]. */
typedef enum pb_phase_id {
    PB_PHASE_DATA_WAIT,
    PB_PHASE_FORWARD,
    PB_PHASE_BACKWARD,
    PB_PHASE_OPTIMIZER,
    PB_PHASE_COLLECTIVES,
    PB_PHASE_GRAD_SYNC,
    PB_PHASE_OTHER,
    PB_PHASE_COUNT
} pb_phase_id;

/* Flags of a phase. */
enum {
    /* Time spent waiting for the other ranks by its nature (collectives, DDP's gradient sync):
     * a slow rank makes the others' grow, so it is no evidence against the rank it is
     * measured on, and a rank's work is everything else. */
    PB_PHASE_RANK_WAIT = 1 << 0,
    /* Work that can hold a wait for the other ranks too (backward: DDP's all-reduces block
     * during it): counted as work, but left out where only time no rank waits in compares. */
    PB_PHASE_HOLDS_WAIT = 1 << 1,
    /* A column added later (python.steps.grad_sync): agents and recordings from before it lack
     * it, so a query that must read them leaves it out. */
    PB_PHASE_NEWER = 1 << 2,
};

typedef struct pb_phase {
    const char *column;     /* python.steps and python.device_steps column; the exporter's
                               phase label; "<column>_s" in the report's per-rank numbers */
    const char *label;      /* the web view's legend: "data wait" */
    const char *name;       /* in the report's sentences: "data loading wait" */
    const char *name_long;  /* the same, with what it holds where that needs saying (the
                               load-imbalance claim: "other host time (Python outside ...)") */
    const char *short_name; /* `stragglers`: its JSON "phase" and its table's column: "data" */
    const char *short_text; /* `stragglers` in a sentence: "data", "other host time" */
    unsigned flags;         /* PB_PHASE_* */
} pb_phase;

/* The phases, in python.steps' column order. */
extern const pb_phase pb_phases[PB_PHASE_COUNT];

/* The whole step (python.steps.wall, "step time"): not a phase, the sum they split, named here
 * for the rules that list it beside them. */
extern const pb_phase pb_phase_wall;

/* Whether phase p has none of the flags in `without` (0: every phase qualifies). */
int pb_phase_selected(int p, unsigned without);

/* Writes into out (len bytes) the columns of the phases that have none of the flags in
 * `without`, in table order, each followed by `sep` but the last ("data_wait, forward, ..."
 * for sep ", "). Returns the number of bytes written without the terminating NUL, or -ENOSPC
 * when they do not fit (out then holds "" when len > 0). */
int pb_phase_columns(char *out, size_t len, unsigned without, const char *sep);

#endif
