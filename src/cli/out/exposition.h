/*
 * exposition.h - the metrics of `probing exporter`, written in Prometheus's text exposition
 * format (version 0.0.4: "# HELP", "# TYPE", one sample per line).
 *
 * The format wants every sample of one metric family together, after that family's HELP and
 * TYPE lines, while the exporter learns its numbers agent by agent. So each agent fills one
 * pb_exposition (a buffer of sample lines per family, in the order of the family table below),
 * and pb_exposition_write() walks the families once and, for each one that has samples, writes
 * its header and then the lines of every agent. Names, units and types follow Prometheus's
 * naming conventions: base units (seconds, bytes, ratios), `_total` on counters only.
 */
#ifndef PB_CLI_EXPOSITION_H
#define PB_CLI_EXPOSITION_H

#include "buf.h"

#include <stddef.h>

/* The metric families, in the order they are written (docs/exporter.md lists them). */
typedef enum pb_metric {
    PB_METRIC_UP,
    PB_METRIC_INFO,
    PB_METRIC_STEP,
    PB_METRIC_STEPS_TOTAL,
    PB_METRIC_STEP_DURATION,          /* histogram */
    PB_METRIC_STEP_PHASE_SECONDS,
    PB_METRIC_SAMPLES_TOTAL,
    PB_METRIC_COLLECTIVE_SECONDS,
    PB_METRIC_COLLECTIVES_TOTAL,
    PB_METRIC_COLLECTIVE_BYTES,
    PB_METRIC_ARRIVAL_LAG,
    PB_METRIC_ARRIVED_LAST,
    PB_METRIC_COLLECTIVE_AFTER,
    PB_METRIC_MEMORY_BYTES,
    PB_METRIC_GPU_INFO,
    PB_METRIC_AMP_SCALE,
    PB_METRIC_AMP_SKIPPED,
    PB_METRIC_FINDING,
    PB_METRIC_AGENT_OVERHEAD,
    PB_METRIC_AGENT_ROWS_DROPPED,
    PB_METRIC_SCRAPE_SECONDS,
    PB_METRIC_EXPORTER_AGENTS,
    PB_METRIC_COUNT
} pb_metric;

/* Upper bounds (seconds) of the step-duration histogram's buckets; +Inf follows. */
#define PB_EXPOSITION_BUCKETS 14
extern const double pb_exposition_bucket_bounds[PB_EXPOSITION_BUCKETS];

typedef struct pb_exposition {
    pb_buf lines[PB_METRIC_COUNT]; /* sample lines of each family; owned */
} pb_exposition;

/* The most bytes pb_exposition_label_value() writes for one value. */
#define PB_EXPOSITION_LABEL_MAX 256

/* Appends `value` (a C string from anywhere: a process's environment, a job's names) to b as a
 * label value that every scraper accepts: backslash, double quote and newline escaped as the
 * format requires, each byte that is not part of valid UTF-8 replaced by U+FFFD, and a value
 * longer than PB_EXPOSITION_LABEL_MAX bytes cut before the character (or escape) that does
 * not fit, "..." marking the cut. Writes at most PB_EXPOSITION_LABEL_MAX bytes. Returns 0 or
 * -ENOMEM. */
int pb_exposition_label_value(pb_buf *b, const char *value);

/* Adds one sample line "<name><suffix>{<labels><extra>} <value>" to family m of e. labels is a
 * pre-rendered, comma-separated list without braces (borrowed; may be ""), extra another one
 * appended after it (borrowed; NULL or "" for none; it starts without a comma). suffix is for
 * histograms ("_bucket", "_sum", "_count"; NULL otherwise). NaN and infinities are written as
 * the format spells them. Returns 0 or -ENOMEM. */
int pb_exposition_add(pb_exposition *e, pb_metric m, const char *suffix, const char *labels,
                      const char *extra, double value);

/* Writes every family that has samples in any of the n expositions to out. Returns 0 or
 * -ENOMEM. */
int pb_exposition_write(pb_buf *out, pb_exposition *const *all, size_t n);

/* Frees the lines of e (e itself is the caller's). NULL-safe. */
void pb_exposition_free(pb_exposition *e);

#endif
