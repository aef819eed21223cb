/* torch_trace.c - the python.torch_trace descriptor and ring; see torch_trace.h and docs/tables.md. */
#include "torch_trace.h"

#include "config.h"
#include "intern.h"

#include <stddef.h>

static const char *const stage_names[] = {"forward", "backward", "step", NULL};

#define COL PB_COL

static const pb_column torch_cols[] = {
    COL("step", PB_COL_I64, pb_torch_row, step, "training step (ends at optimizer.step(); without one, as in inference or an evaluation loop under no_grad, one root forward)"),
    COL("seq", PB_COL_U32, pb_torch_row, seq, "order in which executions started within the step"),
    COL("module", PB_COL_STR_ID, pb_torch_row, module, "qualified name as named_modules() gives it; the root by its class name; optimizer class for stage 'step'"),
    COL("type", PB_COL_STR_ID, pb_torch_row, type, "class name"),
    {"stage", PB_COL_ENUM_U8, offsetof(pb_torch_row, stage), stage_names, "'forward', 'backward' or 'step'"},
    COL("duration", PB_COL_NS_SEC, pb_torch_row, duration_ns, "seconds of self time: wall time minus nested module executions of the same stage, so sums over rows never count time twice"),
    COL("total_duration", PB_COL_NS_SEC, pb_torch_row, total_ns, "seconds from start to end, including nested modules"),
    COL("time_offset", PB_COL_NS_SEC, pb_torch_row, time_offset_ns, "seconds from the start of the step to the start of this execution"),
    COL("allocated", PB_COL_F32, pb_torch_row, allocated_mb, "MB allocated on the module's device when it finished (CPU: process RSS)"),
    COL("max_allocated", PB_COL_F32, pb_torch_row, max_allocated_mb, "peak MB since the step began (CPU: peak sampled RSS)"),
    COL("depth", PB_COL_U16, pb_torch_row, depth, "nesting depth, root = 0"),
    COL("thread", PB_COL_U32, pb_torch_row, thread, "OS thread id that ran it"),
    COL("rank", PB_COL_U16, pb_torch_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

pb_table pb_table_torch_trace = {
    .schema = "python",
    .name = "torch_trace",
    .doc = "one row per module execution per stage, and one per optimizer step",
    .columns = torch_cols,
    .ncolumns = (int)(sizeof torch_cols / sizeof torch_cols[0]),
    .row_size = sizeof(pb_torch_row),
    .step_column = 0,
    .empty_reason = "empty until torch runs a module under the agent",
};

int pb_torch_trace_init(void)
{
    int64_t rows = pb_config_int("PROBING_RING_ROWS", 1 << 20);
    if (rows < 1) rows = 1;
    int rc = pb_ring_create(&pb_table_torch_trace.ring, sizeof(pb_torch_row), (uint64_t)rows);
    if (rc) return rc;
    return pb_registry_add(&pb_table_torch_trace);
}

void pb_torch_trace_free(void)
{
    pb_ring_destroy(pb_table_torch_trace.ring);
    pb_table_torch_trace.ring = NULL;
}
