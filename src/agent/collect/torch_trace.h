/*
 * torch_trace.h - python.torch_trace: its row, its columns and its ring.
 *
 * One row per module execution per stage (forward, backward) and one per optimizer step,
 * pushed by the hot path (hot/torch_hooks.c, hot/autograd.c). Columns and meanings are those of
 * docs/tables.md, so the queries written against them run unchanged.
 */
#ifndef PB_AGENT_TORCH_TRACE_H
#define PB_AGENT_TORCH_TRACE_H

#include "registry.h"

#include <stdint.h>

enum { PB_STAGE_FORWARD = 0, PB_STAGE_BACKWARD = 1, PB_STAGE_STEP = 2 };

typedef struct pb_torch_row {
    int64_t step;
    int64_t duration_ns;    /* self time: excludes nested module executions of the same stage */
    int64_t total_ns;       /* inclusive time, start to end */
    int64_t time_offset_ns; /* start of this execution minus start of its step */
    float allocated_mb;     /* see docs/tables.md: CUDA caching allocator, or RSS on CPU */
    float max_allocated_mb;
    uint32_t seq;           /* order of start within the step */
    uint32_t module;        /* intern id of the qualified name */
    uint32_t type;          /* intern id of the class name */
    uint32_t thread;        /* OS thread id */
    uint16_t depth;
    uint16_t rank;
    uint8_t stage;          /* PB_STAGE_* */
} pb_torch_row;

extern pb_table pb_table_torch_trace;

/* Creates the ring (PROBING_RING_ROWS rows) and registers the table. Returns 0 or a negative
 * errno. [start-up, GIL held] */
int pb_torch_trace_init(void);

/* Frees the ring. Only after the server and all hooks are stopped and the registry is reset. */
void pb_torch_trace_free(void);

#endif
