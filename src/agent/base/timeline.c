/* timeline.c - a step's wall time attributed to the innermost activity; see timeline.h.
 *
 * pb_timeline_attribute sorts the clipped intervals by start, then walks the sorted starts and
 * ends: between two consecutive cut points the owner is the active interval that started last.
 * The active set is as deep as the nesting (a handful), so the walk costs O(n log n + n d). */
#include "timeline.h"

#include "phases.h"

#include <stdlib.h>

void pb_timeline_reset(pb_timeline *tl)
{
    tl->count = 0;
    tl->added = 0;
    tl->dropped = 0;
    tl->resets++;
}

int pb_timeline_add(pb_timeline *tl, pb_activity activity, int64_t start_ns, int64_t end_ns)
{
    if (end_ns <= start_ns || (unsigned)activity >= PB_ACT_COUNT) return 0;
    if (tl->count >= PB_TIMELINE_MAX) {
        tl->dropped++;
        return -1;
    }
    pb_interval *iv = &tl->intervals[tl->count++];
    iv->start_ns = start_ns;
    iv->end_ns = end_ns;
    iv->order = tl->added++;
    iv->activity = (uint8_t)activity;
    return 0;
}

/* Whether a is inside b: started later, or together and ended sooner, or added later. */
static int inner(const pb_interval *a, const pb_interval *b)
{
    if (a->start_ns != b->start_ns) return a->start_ns > b->start_ns;
    if (a->end_ns != b->end_ns) return a->end_ns < b->end_ns;
    return a->order > b->order;
}

static int by_start(const void *pa, const void *pb)
{
    const pb_interval *a = pa, *b = pb;
    if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns ? -1 : 1;
    return inner(a, b) ? 1 : inner(b, a) ? -1 : 0;
}

void pb_timeline_attribute(pb_timeline *tl, int64_t from_ns, int64_t to_ns, int64_t out[PB_ACT_COUNT])
{
    for (int a = 0; a < PB_ACT_COUNT; a++) out[a] = 0;
    if (to_ns <= from_ns) return;
    /* clip to the range, dropping what falls outside */
    int n = 0;
    for (int i = 0; i < tl->count; i++) {
        pb_interval iv = tl->intervals[i];
        if (iv.start_ns < from_ns) iv.start_ns = from_ns;
        if (iv.end_ns > to_ns) iv.end_ns = to_ns;
        if (iv.end_ns > iv.start_ns) tl->intervals[n++] = iv;
    }
    tl->count = n;
    qsort(tl->intervals, (size_t)n, sizeof tl->intervals[0], by_start);

    /* active: indices of the intervals covering the current point (unordered, small) */
    int *active = tl->active; /* each timeline's own: the training thread and the device reader attribute theirs */
    int nactive = 0, next = 0;
    int64_t t = from_ns;
    while (t < to_ns) {
        while (next < n && tl->intervals[next].start_ns <= t) active[nactive++] = next++;
        /* the next cut: the soonest end among the active ones, or the next start */
        int64_t cut = next < n ? tl->intervals[next].start_ns : to_ns;
        int owner = -1;
        for (int k = 0; k < nactive; k++) {
            const pb_interval *iv = &tl->intervals[active[k]];
            if (iv->end_ns < cut) cut = iv->end_ns;
            if (owner < 0 || inner(iv, &tl->intervals[owner])) owner = active[k];
        }
        out[owner < 0 ? PB_ACT_HOST : tl->intervals[owner].activity] += cut - t;
        t = cut;
        for (int k = 0; k < nactive;) { /* retire the intervals that end here */
            if (tl->intervals[active[k]].end_ns <= t) active[k] = active[--nactive];
            else k++;
        }
    }
}

int pb_activity_phase(pb_activity activity)
{
    static const pb_phase_id phase[PB_ACT_COUNT] = {
        [PB_ACT_HOST] = PB_PHASE_OTHER,           [PB_ACT_DATA_WAIT] = PB_PHASE_DATA_WAIT,
        [PB_ACT_FORWARD] = PB_PHASE_FORWARD,      [PB_ACT_BACKWARD] = PB_PHASE_BACKWARD,
        [PB_ACT_OPTIMIZER] = PB_PHASE_OPTIMIZER,  [PB_ACT_COLLECTIVE] = PB_PHASE_COLLECTIVES,
        [PB_ACT_GRAD_SYNC] = PB_PHASE_GRAD_SYNC};
    return (unsigned)activity < PB_ACT_COUNT ? (int)phase[activity] : -1;
}

const char *pb_activity_name(pb_activity activity)
{
    int phase = pb_activity_phase(activity);
    if (phase < 0) return "?";
    return activity == PB_ACT_HOST ? "host" : pb_phases[phase].column;
}
