/* step.c - the step state every recorder reads; see step.h. */
#include "step.h"

_Atomic int pb_step_enabled;
_Atomic int64_t pb_step_number;
int64_t pb_step_start_ns;
uint32_t pb_step_seq;
uint16_t pb_step_rank_id;
int64_t pb_step_collectives_total_ns;
pb_timeline pb_step_timeline;
int pb_step_installed;

static pb_step_boundary_fn boundary;

void pb_step_set_boundary(pb_step_boundary_fn fn) { boundary = fn; }

void pb_step_end_now(void)
{
    if (boundary) boundary();
}
