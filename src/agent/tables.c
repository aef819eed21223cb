/* tables.c - descriptors of the agent's tables; see tables.h and docs/tables.md. */
#include "tables.h"

#include "config.h"
#include "intern.h"

#include <stddef.h>

static const char *const stage_names[] = {"forward", "backward", "step", NULL};

#define COL(name, kind, type, field, doc) {name, kind, offsetof(type, field), NULL, doc}

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

static const pb_column nccl_cols[] = {
    COL("step", PB_COL_I64, pb_nccl_row, step, "training step the collective was issued in"),
    COL("operation_type", PB_COL_STR_ID, pb_nccl_row, operation_type, "all_reduce, all_gather, reduce_scatter, broadcast, barrier, ..."),
    COL("backend", PB_COL_STR_ID, pb_nccl_row, backend, "nccl, gloo, ..."),
    COL("bytes", PB_COL_I64, pb_nccl_row, bytes, "payload size in bytes"),
    COL("dtype", PB_COL_STR_ID, pb_nccl_row, dtype, "element type"),
    COL("group_size", PB_COL_U32, pb_nccl_row, group_size, "ranks in the process group"),
    COL("async_op", PB_COL_U8, pb_nccl_row, async_op, "1 when issued with async_op=True"),
    COL("duration_ms", PB_COL_NS_MS, pb_nccl_row, duration_ns, "milliseconds (see docs/tables.md)"),
    COL("time_offset", PB_COL_NS_SEC, pb_nccl_row, time_offset_ns, "seconds from the start of the step"),
    COL("rank", PB_COL_U16, pb_nccl_row, rank, "distributed rank"),
    COL("origin", PB_COL_STR_ID, pb_nccl_row, origin, "call: the program called torch.distributed; ddp: a DistributedDataParallel gradient bucket"),
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

pb_table pb_table_nccl_trace = {
    .schema = "python",
    .name = "nccl_trace",
    .doc = "collective communication operations (every torch.distributed backend)",
    .columns = nccl_cols,
    .ncolumns = (int)(sizeof nccl_cols / sizeof nccl_cols[0]),
    .row_size = sizeof(pb_nccl_row),
    .step_column = -1, /* async collectives complete (and are pushed) after later steps' rows */
    .empty_reason = "empty until the program calls a torch.distributed collective or a DistributedDataParallel model all-reduces its gradients (docs/tables.md)",
};

int pb_tables_init(void)
{
    int rc;
    int64_t rows = pb_config_int("PROBING_RING_ROWS", 1 << 20);
    if (rows < 1) rows = 1;
    rc = pb_ring_create(&pb_table_torch_trace.ring, sizeof(pb_torch_row), (uint64_t)rows);
    if (rc) goto fail;
    rc = pb_ring_create(&pb_table_nccl_trace.ring, sizeof(pb_nccl_row), 1 << 16);
    if (rc) goto fail;
    if ((rc = pb_registry_add(&pb_table_torch_trace))) goto fail;
    if ((rc = pb_registry_add(&pb_table_nccl_trace))) goto fail;
    return 0;
fail:
    pb_tables_free();
    return rc;
}

void pb_tables_free(void)
{
    pb_registry_reset();
    pb_ring_destroy(pb_table_torch_trace.ring);
    pb_table_torch_trace.ring = NULL;
    pb_ring_destroy(pb_table_nccl_trace.ring);
    pb_table_nccl_trace.ring = NULL;
}
