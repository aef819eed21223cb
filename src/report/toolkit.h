/*
 * toolkit.h - the rule toolkit of src/report: the state of one report being built (pb__report,
 * its window of steps) and the helpers every rule calls. Private to src/report; the public
 * interface is report.h (and source.h, the types of what a report reads, which this includes).
 *
 * The folder is layered like SQLite's btree.h / btreeInt.h: report.c is the driver (it loads the
 * window of steps and runs the rules in the order of docs/report.md), the rules stand below it
 * in files of their own (rules.h lists them), and this toolkit stands below the rules, in
 * toolkit.c. Calls go down only: the driver calls the rules and the toolkit, a rule calls the
 * toolkit, the toolkit calls neither. render.c stands apart: it reads the finished document.
 *
 * A rule adds findings with pb__report_finding() and reads data only with pb__report_run() /
 * pb__report_try(), which go through the caller's query function (report.h), so the unit tests
 * can feed the rules synthetic tables. Every helper is [any thread]: one report is built by one
 * thread, and two reports share nothing.
 */
#ifndef PB_REPORT_TOOLKIT_H
#define PB_REPORT_TOOLKIT_H

#include "source.h"

#include <stddef.h>

#define SQL_MAX 4096

typedef struct pb__step_row {
    long long step;
    double wall, forward, backward, optimizer, data, collectives, memory_mb;
    double grad_sync; /* python.steps.grad_sync: DDP's wait for its all-reduces; 0 when absent */
    double samples, syncs;
    /* has_data: a DataLoader fed the step (python.steps.batches > 0; older agents: a wait or
     * python.dataloader_trace rows), so data_wait is a measured wait, not a default 0 */
    int has_data, has_collectives, has_memory;
    int detail; /* python.steps.detail: the step's module executions are in torch_trace */
    /* python.steps.cpu and involuntary_switches: the training thread's CPU time in the step and
     * how often the kernel descheduled it (has_cpu: both known) */
    double cpu, switches;
    int has_cpu;
    /* python.steps.compile_time: seconds of torch.compile compiles that ended in the step (0
     * without torch.compile or the column) */
    double compile_time;
} pb__step_row;

typedef struct pb__report {
    const pb_report_source *src;
    json_t *doc, *findings, *missing, *next, *errors;
    pb__step_row *steps; /* the window, in step order */
    size_t count, warmup;
    long long lo, hi; /* window bounds */
    int have_optimizer, from_steps_table;
    /* rows of each optional table: -1 missing, else the count */
    long long n_steps, n_loader, n_memory, n_amp, n_nccl, n_gpu, n_breakdown, n_layers, n_gil;
    double mean_wall;
    int device;             /* where the model runs: 0 unknown, 1 CPU, 2 GPU */
    int have_grad_sync;     /* python.steps has grad_sync */
    /* Detail windows (python.steps.detail, src/agent/hot/detail.h): per-module rows exist only for
     * detail steps, which probing's own recording slows down. */
    int have_detail;        /* python.steps has the detail column */
    int skip_detail;        /* time the job on summary steps only (enough of them in the window) */
    size_t detail_steady;   /* steady detail steps in the window */
    long long mod_lo, mod_hi; /* the steps whose torch_trace rows the module rules read */
    long long last_detail_lo, last_detail_hi; /* the last run of detail steps loaded; -1 none */
} pb__report;

/* First step after the warm-up (the steady window is [that, r->hi]); r->lo when none. */
static inline long long pb__report_steady_first(const pb__report *r)
{
    return r->count > r->warmup ? r->steps[r->warmup].step : r->lo;
}

/* Whether window step i times the job: a steady step, and not one of probing's detail steps
 * when the window has enough summary steps to go by. */
static inline int pb__report_timing_step(const pb__report *r, size_t i)
{
    return i >= r->warmup && i < r->count && !(r->skip_detail && r->steps[i].detail);
}

/* snprintf into a SQL_MAX buffer. */
void pb__report_sqlf(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A malloc'ed string built with fmt, or NULL when out of memory. */
char *pb__report_textf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* row[key] as a number; *ok (when not NULL) says whether it was one (NULL and text are not). */
double pb__report_num(json_t *row, const char *key, int *ok);

/* x rounded to 6 significant digits as a new JSON real; null when not finite. */
json_t *pb__report_real(double x);

/* Runs sql; returns the rows (caller owns) or NULL after recording the error in query_errors. */
json_t *pb__report_run(pb__report *r, const char *sql);

/* Runs sql like pb__report_run, but a failure is not a query error of the report: returns NULL
 * and sets *error (malloc'ed, caller frees) so the rule can say what it could not read (a column
 * an older agent or recording does not have). */
json_t *pb__report_try(pb__report *r, const char *sql, char **error);

/* Adds a finding and returns it (borrowed) so the caller can add fields. claim (malloc'ed) and
 * numbers are stolen; sql may be NULL or several statements separated by "\n;\n"; advice is
 * copied (NULL: no recommendation). */
json_t *pb__report_finding(pb__report *r, const char *id, const char *phase, const char *severity,
                           char *claim, json_t *numbers, const char *sql, const char *advice);

/* Adds a suggested next command (section 4) built with command_fmt. */
void pb__report_suggest(pb__report *r, const char *why, const char *command_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* How the user named the target, for suggested commands ("<target>" when unknown). */
const char *pb__report_target(pb__report *r);

/* qsort comparator for doubles, and the percentile (linear interpolation, numpy's default) of
 * n sorted values; NaN when n is 0. */
int pb__report_cmp_double(const void *a, const void *b);
double pb__report_percentile(const double *v, size_t n, double p);

/* A sorted copy (malloc'ed) of column `key` of rows, its numbers only (NULL and text left out);
 * *n set to how many. NULL when out of memory. */
double *pb__report_sorted_column(json_t *rows, const char *key, size_t *n);

/* Theil-Sen line through (x[i], y[i]): slope = median of the pairwise slopes (over at most
 * 256 evenly spaced points), intercept = median of y - slope x; *r2 = 1 - residual / total sum
 * of squares of that line (0 when y is constant). A few spikes (a checkpoint, an eval pass)
 * cannot tilt it, unlike least squares. */
void pb__report_theil_sen(const double *x, const double *y, size_t n, double *slope,
                          double *intercept, double *r2);

/* A steady step this much above the median is an outlier: reported by the slow-steps rule and
 * left out of the means that decide the bottleneck (docs/report.md, "Slow steps"). */
#define OUTLIER_FACTOR 3.0

/* Collectives and DDP's gradient sync from this share of the step on: the bottleneck names
 * communication, and the collectives check defers to it (docs/report.md, "Communication"). */
#define COMM_SHARE 0.30

/* The per-step query over python.torch_trace, for agents and recordings without python.steps:
 * forward, backward and optimizer time per step, the optimizer's end (the step's wall time) and
 * the span of its rows (without an optimizer). */
extern const char pb__report_trace_steps_sql[];

/* The SQL the per-step figures of the window come from (python.steps, or the query above). */
const char *pb__report_steps_sql(const pb__report *r);

/* Median of the walls of steps[from, to); kind: -1 every step, 0 summary steps, 1 detail
 * steps. NaN when there is none. */
double pb__report_median_wall(const pb__step_row *steps, size_t from, size_t to, int kind);

/* Which field of pb__step_row pb__report_merge_per_step() fills. */
enum pb__step_field {
    PB__STEP_DATA,        /* data (and has_data) */
    PB__STEP_COLLECTIVES, /* collectives (and has_collectives) */
    PB__STEP_MEMORY,      /* memory_mb (and has_memory) */
    PB__STEP_SAMPLES      /* samples */
};

/* Runs sql (rows of `step` and `value`) and stores each value into that step of the window;
 * steps outside the window are ignored. A failed query is a query error of the report. */
void pb__report_merge_per_step(pb__report *r, const char *sql, enum pb__step_field field);

/* Mean per-step times over the window's timing steps. */
typedef struct pb__shares {
    double wall, forward, backward, optimizer, data, collectives, grad_sync, other;
    int has_data, has_collectives;
} pb__shares;

/* Mean per-step times over the steady steps, outlier steps (over OUTLIER_FACTOR x the median,
 * reported on their own) left out so that one slow step cannot decide the bottleneck. The data
 * wait is averaged over every step but known (has_data) only when a DataLoader fed some step.
 * All zero when the window has no steady step. */
pb__shares pb__report_mean_shares(const pb__report *r);

#endif
