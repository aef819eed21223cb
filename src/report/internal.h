/*
 * internal.h - what the files of src/report share: the state of one report being built and the
 * helpers every rule uses. Not part of the public interface (report.h).
 *
 * report.c builds the document (baseline, bottleneck, component, the step-based checks) and
 * calls the rules of the other files in turn: memory.c (the memory section: breakdown,
 * optimizer state, fragmentation), amp.c (bf16 support, tensor-core alignment) and ranks.c
 * (load imbalance across the ranks of a job). Every rule adds findings with
 * pb__report_finding() and reads data only with pb__report_run() / pb__report_try(), so the
 * unit tests can feed them synthetic tables.
 */
#ifndef PB_REPORT_INTERNAL_H
#define PB_REPORT_INTERNAL_H

#include "report.h"

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
    /* Detail windows (python.steps.detail, src/agent/detail.h): per-module rows exist only for
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

/* Theil-Sen line through (x[i], y[i]): slope = median of the pairwise slopes (over at most
 * 256 evenly spaced points), intercept = median of y - slope x; *r2 = 1 - residual / total sum
 * of squares of that line (0 when y is constant). A few spikes (a checkpoint, an eval pass)
 * cannot tilt it, unlike least squares. */
void pb__report_theil_sen(const double *x, const double *y, size_t n, double *slope,
                          double *intercept, double *r2);

/* The rules of the other files. Each adds its findings (and memory.c the "memory" section of
 * the document); none fails: missing data becomes a skipped finding that says what is missing. */
void pb__report_memory(pb__report *r);
void pb__report_amp_hardware(pb__report *r);
void pb__report_ranks(pb__report *r);
void pb__report_cluster(pb__report *r); /* cluster.c: stragglers by node */

#endif
