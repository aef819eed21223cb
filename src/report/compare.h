/*
 * compare.h - `probing compare BEFORE AFTER`: did the change make training faster, by how much,
 * where, and is the difference more than noise. The analysis is a JSON document (schema in
 * docs/cli.md, "compare") built from two report sources; compare_render.c writes it as text or
 * as rows for a table or CSV.
 *
 * Each side is read as `report` reads a target (pb_report_build_window: the same window of
 * steps, warm-up and outliers left out the same way, the same rules run), so the two sides'
 * findings can be set side by side. The step-time verdict is the Hodges-Lehmann shift of the
 * logarithms of the steady steps' times (shift.h): a ratio of the medians with a distribution-
 * free interval; phases (phases.h) and modules (self time of python.torch_trace on the steady
 * detail steps) get absolute shifts the same way. With different batch sizes every figure is
 * per sample. [any thread: one document per call, nothing shared]
 */
#ifndef PB_REPORT_COMPARE_H
#define PB_REPORT_COMPARE_H

#include "report.h"

#include <jansson.h>
#include <stdio.h>

/* Fewer steady steps than this on a side: no verdict (pb_compare_build says how many). */
#define PB_COMPARE_MIN_STEPS 10

typedef struct pb_compare_side {
    const pb_report_source *src; /* required; its info and conditions feed the conditions */
    pb_report_window window;
    const char *name;            /* as typed (with its window), borrowed */
    const char *note;            /* what to say about it first (a recording still being
                                    written), borrowed; NULL: nothing */
} pb_compare_side;

typedef struct pb_compare_options {
    double min_effect_pct; /* below this change of the step time: no significant change */
    double confidence;     /* of the intervals, 0.5 to 0.999 */
} pb_compare_options;

/* Compares after against before (both borrowed). On success returns 0 and sets *doc (caller
 * owns). Returns PB_ECOMPARE_STEPS when a side has fewer than PB_COMPARE_MIN_STEPS steady steps,
 * else -1 when a side cannot be read at all; *error (malloc'ed) says which side and why. */
#define PB_ECOMPARE_STEPS 2
int pb_compare_build(const pb_compare_side *before, const pb_compare_side *after,
                     const pb_compare_options *options, json_t **doc, char **error);

/* Writes the document (borrowed) as text: the verdict first, then the conditions that differ,
 * phases, modules, throughput, memory and findings. Returns 0 or -EIO. */
int pb_compare_render(FILE *out, json_t *doc);

/* The document's figures as rows (section, name, before, after, change, low, high, unit, note)
 * for a table or CSV: *columns and *rows new arrays (caller owns). Returns 0 or -ENOMEM. */
int pb_compare_rows(json_t *doc, json_t **columns, json_t **rows);

#endif
