/*
 * torch_state.c - the torch hooks' state (torch_state.h): the one struct their three files share,
 * and its one reset. Written under the GIL only.
 */
#include "torch_state.h"

#include <stdlib.h>

pb_torch_state pb_torch = {.record_backward = 1};

void pb_torch_state_reset(void)
{
    for (size_t j = 0; j < pb_torch.map_cap; j++)
        if (pb_torch.map[j].key != NULL && pb_torch.map[j].key != PB_MOD_TOMB) Py_XDECREF(pb_torch.map[j].weakref);
    free(pb_torch.map);
    pb_torch.map = NULL;
    pb_torch.map_cap = pb_torch.map_used = 0;
    pb_torch.ntrees = pb_torch.noptimizers = 0;
    pb_torch.primary_root = NULL;
    pb_torch.primary_ran = 0;
    pb_torch.training_latched = 0;
    pb_torch.evaluating = 0;
    pb_torch.nograd_forwards = pb_torch.nograd_per_optimizer = 0;
    pb_torch.nograd_learned = 0;
}
