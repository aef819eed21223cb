/*
 * distributed.h - records python.nccl_trace: every torch.distributed collective and point-to-point
 * call made through the Python API, for every backend (nccl, gloo, ...).
 *
 * The collective functions of torch.distributed.distributed_c10d (all_reduce, all_gather, ...)
 * are replaced, in that module and in torch.distributed, by C callables that call the original
 * unchanged and then push one row: operation, backend, bytes, dtype, group size, async_op,
 * duration, step and offset in the step. See docs/tables.md for what duration_ms means and for
 * what is not seen.
 */
#ifndef PB_AGENT_DISTRIBUTED_H
#define PB_AGENT_DISTRIBUTED_H

#include <Python.h>

#include <stdint.h>

/* Creates python.nccl_trace's ring and registers the table. Returns 0 or a negative errno.
 * [start-up, GIL held] */
int pb_distributed_tables_init(void);

/* Frees the ring. Only after the server and all hooks are stopped and the registry is reset. */
void pb_distributed_tables_free(void);

/* Wraps the collectives of torch.distributed.distributed_c10d (and the same objects in
 * torch.distributed). Idempotent; a function missing in this torch is skipped. Returns 0, or -1
 * with a Python exception set. [GIL held] */
int pb_distributed_install(void);

/* Records DistributedDataParallel's gradient-bucket all-reduces through a communication hook
 * (see distributed.c for when it stands in and why that is bit-identical). Called once
 * torch.nn.parallel.distributed is imported. Returns 0, or -1 with an exception set. [GIL held] */
int pb_distributed_install_ddp(void);

/* Puts the original functions back where they are still our wrappers. [GIL held] */
void pb_distributed_remove(void);

/* Stops recording without touching Python (fork child). [any thread] */
void pb_distributed_disable(void);

/* The wrapper types; made by the module init. Returns 0 or -1 with an exception set. */
int pb_distributed_ready_types(void);

#endif
