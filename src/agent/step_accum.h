/*
 * step_accum.h - per-step accumulators that collectors in other files add to.
 *
 * python.steps is written at each step boundary from running sums kept in C (never by querying
 * a ring). A collector that measures part of a step adds its nanoseconds here; the step
 * boundary reads and zeroes them. Only touched with the GIL held, so plain int64_t.
 */
#ifndef PB_AGENT_STEP_ACCUM_H
#define PB_AGENT_STEP_ACCUM_H

#include <stdint.h>

/* Nanoseconds spent in collectives issued during the current step (python.steps.collectives).
 * The distributed collector adds to it; the step boundary reads and zeroes it. [GIL held] */
extern int64_t pb_step_collectives_ns;

#endif
