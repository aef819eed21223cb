/* test_timeline.c - a step's wall time attributed to the innermost activity
 * (src/agent/base/timeline.c): nesting as frameworks do it (a closure inside optimizer.step(),
 * collectives inside forward, a forward inside backward), intervals that arrive out of order or
 * overlap, clipping to the step, and that the shares always add up to the wall time. */
#include "check.h"
#include "phases.h"
#include "timeline.h"

#include <stdint.h>

static pb_timeline tl;
static int64_t out[PB_ACT_COUNT];

static int64_t total(void)
{
    int64_t s = 0;
    for (int a = 0; a < PB_ACT_COUNT; a++) s += out[a];
    return s;
}

int main(void)
{
    /* Lightning: optimizer.step(closure) 0-100; the closure (host) 5-90 runs forward 10-30 and
     * backward 40-80; AdamW's own work is 0-5 and 90-100. */
    pb_timeline_reset(&tl);
    pb_timeline_add(&tl, PB_ACT_FORWARD, 10, 30);
    pb_timeline_add(&tl, PB_ACT_BACKWARD, 40, 80);
    pb_timeline_add(&tl, PB_ACT_HOST, 5, 90);
    pb_timeline_add(&tl, PB_ACT_OPTIMIZER, 0, 100);
    pb_timeline_attribute(&tl, 0, 110, out);
    CHECK(out[PB_ACT_OPTIMIZER] == 15, "closure: optimizer keeps its own 15 ns (got %lld)", (long long)out[PB_ACT_OPTIMIZER]);
    CHECK(out[PB_ACT_FORWARD] == 20 && out[PB_ACT_BACKWARD] == 40, "closure: forward 20, backward 40");
    CHECK(out[PB_ACT_HOST] == 35, "closure: host 25 in the closure + 10 after the step (got %lld)", (long long)out[PB_ACT_HOST]);
    CHECK(total() == 110, "closure: shares add up to the wall");

    /* FSDP2: all-gathers inside forward, reduce-scatter inside backward; backward added last */
    pb_timeline_reset(&tl);
    pb_timeline_add(&tl, PB_ACT_COLLECTIVE, 0, 10);
    pb_timeline_add(&tl, PB_ACT_FORWARD, 0, 50);
    pb_timeline_add(&tl, PB_ACT_COLLECTIVE, 20, 25);
    pb_timeline_add(&tl, PB_ACT_COLLECTIVE, 60, 70);
    pb_timeline_add(&tl, PB_ACT_BACKWARD, 55, 100);
    pb_timeline_attribute(&tl, 0, 100, out);
    CHECK(out[PB_ACT_COLLECTIVE] == 25, "fsdp: collectives 25 (got %lld)", (long long)out[PB_ACT_COLLECTIVE]);
    CHECK(out[PB_ACT_FORWARD] == 35, "fsdp: forward 35 exclusive of its collectives (got %lld)", (long long)out[PB_ACT_FORWARD]);
    CHECK(out[PB_ACT_BACKWARD] == 35 && out[PB_ACT_HOST] == 5, "fsdp: backward 35, host 5");
    CHECK(total() == 100, "fsdp: shares add up to the wall");

    /* activation checkpointing: a forward recomputed inside backward is forward time */
    pb_timeline_reset(&tl);
    pb_timeline_add(&tl, PB_ACT_FORWARD, 0, 30);
    pb_timeline_add(&tl, PB_ACT_FORWARD, 50, 60);
    pb_timeline_add(&tl, PB_ACT_BACKWARD, 40, 90);
    pb_timeline_attribute(&tl, 0, 100, out);
    CHECK(out[PB_ACT_FORWARD] == 40 && out[PB_ACT_BACKWARD] == 40 && out[PB_ACT_HOST] == 20,
          "checkpoint: forward 40, backward 40, host 20");

    /* overlap that is not nesting: the later start owns the overlap */
    pb_timeline_reset(&tl);
    pb_timeline_add(&tl, PB_ACT_DATA_WAIT, 0, 30);
    pb_timeline_add(&tl, PB_ACT_COLLECTIVE, 20, 50);
    pb_timeline_attribute(&tl, 0, 50, out);
    CHECK(out[PB_ACT_DATA_WAIT] == 20 && out[PB_ACT_COLLECTIVE] == 30, "overlap: later start owns it");

    /* intervals that start together: the shorter is inside */
    pb_timeline_reset(&tl);
    pb_timeline_add(&tl, PB_ACT_OPTIMIZER, 0, 40);
    pb_timeline_add(&tl, PB_ACT_HOST, 0, 30);
    pb_timeline_attribute(&tl, 0, 40, out);
    CHECK(out[PB_ACT_HOST] == 30 && out[PB_ACT_OPTIMIZER] == 10, "same start: shorter is inner");

    /* clipping: parts before the step's start or after its end are not this step's */
    pb_timeline_reset(&tl);
    pb_timeline_add(&tl, PB_ACT_FORWARD, -50, 20);
    pb_timeline_add(&tl, PB_ACT_BACKWARD, 90, 150);
    pb_timeline_add(&tl, PB_ACT_COLLECTIVE, 200, 300);
    pb_timeline_attribute(&tl, 0, 100, out);
    CHECK(out[PB_ACT_FORWARD] == 20 && out[PB_ACT_BACKWARD] == 10 && out[PB_ACT_COLLECTIVE] == 0 &&
              out[PB_ACT_HOST] == 70, "clipped to the step");

    /* empty and degenerate */
    pb_timeline_reset(&tl);
    CHECK(pb_timeline_add(&tl, PB_ACT_FORWARD, 10, 10) == 0 && tl.count == 0, "empty interval ignored");
    pb_timeline_attribute(&tl, 0, 100, out);
    CHECK(out[PB_ACT_HOST] == 100 && total() == 100, "no intervals: all host");

    /* full: later intervals counted as dropped, the sum still holds */
    pb_timeline_reset(&tl);
    for (int i = 0; i < PB_TIMELINE_MAX + 10; i++) pb_timeline_add(&tl, PB_ACT_COLLECTIVE, 2 * i, 2 * i + 1);
    CHECK(tl.dropped == 10, "dropped counted (got %lld)", (long long)tl.dropped);
    pb_timeline_attribute(&tl, 0, 2 * (PB_TIMELINE_MAX + 10), out);
    CHECK(out[PB_ACT_COLLECTIVE] == PB_TIMELINE_MAX && total() == 2 * (PB_TIMELINE_MAX + 10), "full: sum holds");

    /* random nests and overlaps: the sum is always the wall, no share negative */
    uint64_t rng = 12345;
    int sums_ok = 1;
    for (int round = 0; round < 200; round++) {
        pb_timeline_reset(&tl);
        int n = 1 + round % 40;
        for (int i = 0; i < n; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int64_t s = (int64_t)(rng >> 40) % 1000 - 100, len = (int64_t)(rng >> 20) % 300;
            pb_timeline_add(&tl, (pb_activity)((rng >> 8) % PB_ACT_COUNT), s, s + len);
        }
        pb_timeline_attribute(&tl, 0, 1000, out);
        for (int a = 0; a < PB_ACT_COUNT; a++) sums_ok &= out[a] >= 0;
        sums_ok &= total() == 1000;
    }
    CHECK(sums_ok, "random timelines: shares add up to the wall, none negative");
    CHECK(pb_activity_name(PB_ACT_COLLECTIVE)[0] == 'c', "activity names");
    /* each activity is counted in its own phase of python.steps, the host's in other */
    int seen[PB_PHASE_COUNT] = {0}, mapped = 1;
    for (int a = 0; a < PB_ACT_COUNT; a++) {
        int p = pb_activity_phase((pb_activity)a);
        mapped &= p >= 0 && p < PB_PHASE_COUNT && !seen[p]++;
        if (a != PB_ACT_HOST && p >= 0)
            mapped &= !strcmp(pb_activity_name((pb_activity)a), pb_phases[p].column);
    }
    CHECK(mapped && pb_activity_phase(PB_ACT_HOST) == PB_PHASE_OTHER &&
              !strcmp(pb_activity_name(PB_ACT_HOST), "host") &&
              !strcmp(pb_activity_name(PB_ACT_GRAD_SYNC), "grad_sync") &&
              pb_activity_phase(PB_ACT_COUNT) == -1 && !strcmp(pb_activity_name(PB_ACT_COUNT), "?"),
          "activities map one to one onto phases, named by their columns (the host: \"host\")");
    uint64_t before = tl.resets;
    pb_timeline_reset(&tl);
    CHECK(tl.resets == before + 1 && tl.count == 0, "reset counted, intervals forgotten");
    return check_summary();
}
