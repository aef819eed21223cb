/*
 * phases.c - the table of a training step's phases (see phases.h) and the column lists the
 * rules' SQL is written from.
 */
#include "phases.h"

#include <errno.h>
#include <string.h>

const pb_phase pb_phases[PB_PHASE_COUNT] = {
    [PB_PHASE_DATA_WAIT] = {"data_wait", "data wait", "data loading wait", "data loading wait",
                            "data", "data", 0},
    [PB_PHASE_FORWARD] = {"forward", "forward", "forward", "forward", "forward", "forward", 0},
    [PB_PHASE_BACKWARD] = {"backward", "backward", "backward", "backward", "backward",
                           "backward", PB_PHASE_HOLDS_WAIT},
    [PB_PHASE_OPTIMIZER] = {"optimizer", "optimizer", "optimizer step", "optimizer step",
                            "optimizer", "optimizer", 0},
    [PB_PHASE_COLLECTIVES] = {"collectives", "collectives", "collectives", "collectives",
                              "collectives", "collectives", PB_PHASE_RANK_WAIT},
    [PB_PHASE_GRAD_SYNC] = {"grad_sync", "grad sync", "gradient sync wait", "gradient sync wait",
                            "grad_sync", "gradient sync wait",
                            PB_PHASE_RANK_WAIT | PB_PHASE_NEWER},
    [PB_PHASE_OTHER] = {"other", "other", "other host time",
                        "other host time (Python outside modules: the loop, logging)", "other",
                        "other host time", 0},
};

const pb_phase pb_phase_wall = {"wall", "step time", "step time",
                                "step time", "wall", "step time", 0};

int pb_phase_selected(int p, unsigned without)
{
    return p >= 0 && p < PB_PHASE_COUNT && !(pb_phases[p].flags & without);
}

int pb_phase_columns(char *out, size_t len, unsigned without, const char *sep)
{
    size_t used = 0, sep_len = strlen(sep);
    if (!len) return -ENOSPC;
    out[0] = '\0';
    for (int p = 0; p < PB_PHASE_COUNT; p++) {
        if (!pb_phase_selected(p, without)) continue;
        const char *col = pb_phases[p].column;
        size_t need = (used ? sep_len : 0) + strlen(col);
        if (used + need >= len) {
            out[0] = '\0';
            return -ENOSPC;
        }
        if (used) memcpy(out + used, sep, sep_len), used += sep_len;
        memcpy(out + used, col, strlen(col));
        used += strlen(col);
        out[used] = '\0';
    }
    return (int)used;
}
