/*
 * test_phases.c - the table of a step's phases (src/common/phases.h): the column lists the
 * rules' SQL is written from, and the subsets the flags pick, as their users print them.
 */
#include "check.h"
#include "phases.h"

#include <errno.h>
#include <string.h>

int main(void)
{
    char out[256];
    int n = pb_phase_columns(out, sizeof out, 0, ", ");
    CHECK(n == (int)strlen(out) &&
              !strcmp(out, "data_wait, forward, backward, optimizer, collectives, grad_sync, other"),
          "every phase, in python.steps' order: \"%s\"", out);
    pb_phase_columns(out, sizeof out, PB_PHASE_NEWER, ", ");
    CHECK(!strcmp(out, "data_wait, forward, backward, optimizer, collectives, other"),
          "what every agent has (no grad_sync): \"%s\"", out);
    pb_phase_columns(out, sizeof out, PB_PHASE_RANK_WAIT, ", ");
    CHECK(!strcmp(out, "data_wait, forward, backward, optimizer, other"),
          "the work, no wait for the other ranks (stragglers' phases): \"%s\"", out);
    pb_phase_columns(out, sizeof out, PB_PHASE_RANK_WAIT | PB_PHASE_HOLDS_WAIT, " + ");
    CHECK(!strcmp(out, "data_wait + forward + optimizer + other"),
          "the time no rank waits in (the web view's and ranks.c's): \"%s\"", out);

    CHECK(pb_phase_columns(out, 10, 0, ", ") == -ENOSPC && out[0] == '\0',
          "a list that does not fit: -ENOSPC and an empty string");
    CHECK(pb_phase_columns(out, 0, 0, ", ") == -ENOSPC, "no room at all: -ENOSPC");
    n = pb_phase_columns(out, strlen("data_wait, forward, backward, optimizer, other") + 1,
                         PB_PHASE_RANK_WAIT, ", ");
    CHECK(n == (int)strlen("data_wait, forward, backward, optimizer, other"),
          "a list that just fits (%d)", n);

    CHECK(pb_phase_selected(PB_PHASE_OTHER, 0) && !pb_phase_selected(PB_PHASE_COUNT, 0) &&
              !pb_phase_selected(-1, 0),
          "pb_phase_selected: only phases of the table");
    int named = 1;
    for (int p = 0; p < PB_PHASE_COUNT; p++)
        named &= pb_phases[p].column && pb_phases[p].label && pb_phases[p].name &&
                 pb_phases[p].name_long && pb_phases[p].short_name && pb_phases[p].short_text;
    CHECK(named, "every phase has every name");
    CHECK(!strcmp(pb_phases[PB_PHASE_OTHER].short_text, "other host time") &&
              !strcmp(pb_phases[PB_PHASE_DATA_WAIT].name, "data loading wait") &&
              !strcmp(pb_phase_wall.column, "wall") && !strcmp(pb_phase_wall.name, "step time"),
          "the names printed by the report and stragglers");
    return check_summary();
}
