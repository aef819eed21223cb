/*
 * tables.h - the row layouts and table descriptors the agent records into.
 *
 * python.torch_trace: one row per module execution per stage (forward, backward) and one per
 * optimizer step. Columns and meanings are the seed's (shared/seeds/003_...), so its queries run
 * unchanged. python.nccl_trace: collectives (filled by the distributed collector; empty until
 * a process group is used).
 */
#ifndef PB_AGENT_TABLES_H
#define PB_AGENT_TABLES_H

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

typedef struct pb_nccl_row {
    int64_t step;
    int64_t duration_ns;
    int64_t time_offset_ns;
    int64_t bytes;
    uint32_t operation_type; /* intern id: all_reduce, all_gather, ... */
    uint32_t backend;        /* intern id: nccl, gloo, ... */
    uint32_t dtype;          /* intern id */
    uint32_t group_size;
    uint32_t origin;         /* intern id: "call" (the program's call) or "ddp" (DDP's bucket) */
    uint16_t rank;
    uint8_t async_op;
} pb_nccl_row;

extern pb_table pb_table_torch_trace;
extern pb_table pb_table_nccl_trace;

/* Creates the rings (capacities from config) and registers every table. Returns 0 or a
 * negative errno. [start-up, GIL held] */
int pb_tables_init(void);

/* Unregisters and frees every ring. Only after the server and all hooks are stopped. */
void pb_tables_free(void);

#endif
