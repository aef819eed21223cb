/*
 * compare_fetch.h - did the change help: two sides (recordings, live targets, windows of their
 * steps) reached and compared, as `probing compare` prints it and the MCP server's compare tool
 * returns it (mcp/tools.c).
 */
#ifndef PB_CLI_COMPARE_FETCH_H
#define PB_CLI_COMPARE_FETCH_H

#include <jansson.h>

#define PB_COMPARE_MIN_EFFECT_PCT 2.0 /* the smallest change of the step time called a change */

/* Compares after with before (each a target with an optional window: run.db:100-200,
 * run.db:500-, run.db:-500, 12345:last200; borrowed), a change below min_effect_pct (<= 0: the
 * default) being no change. On success returns 0 and *doc (caller owns; docs/cli.md's schema of
 * `compare --json`). On failure prints why and returns PB_EXIT_USAGE (a bad window or target) or
 * PB_EXIT_ERROR. [main thread] */
int pb_compare_fetch(const char *before, const char *after, double min_effect_pct,
                     json_t **doc);

#endif
