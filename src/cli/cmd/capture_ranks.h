/*
 * capture_ranks.h - `capture --ranks`: one capture on every selected rank of a job, one trace
 * per rank (capture_ranks.c).
 */
#ifndef PB_CLI_CAPTURE_RANKS_H
#define PB_CLI_CAPTURE_RANKS_H

#include "cmd/command.h"

/* What `capture` takes when --steps and --timeout are not given (one capture or many). */
#define PB_CAPTURE_DEFAULT_STEPS 3
#define PB_CAPTURE_DEFAULT_TIMEOUT_S 120.0

/* Runs the capture a describes (a->ranks set) on ranks a->ranks of a->resolved's job; with
 * a->output writes a->output/rank<R>.json per rank. Prints per-rank results on stdout and the
 * ranks without a capture, with why, on stderr. Returns PB_EXIT_OK, PB_EXIT_PARTIAL (some
 * ranks have no capture), PB_EXIT_ERROR (none has), PB_EXIT_USAGE or PB_EXIT_INTERRUPTED.
 * [main thread] */
int pb_capture_ranks(const pb_cli_args *a);

#endif
