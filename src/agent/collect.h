/*
 * collect.h - the per-step collectors of the training process: data loading, the step
 * breakdown, memory and mixed precision.
 *
 * Tables (docs/tables.md): python.dataloader_trace (one row per batch the training loop took
 * from a DataLoader), python.steps (one row per step: wall time split into data wait, forward,
 * backward, optimizer, collectives and the rest), python.memory (one row per step, plus rows at
 * each observable phase of every PROBING_MEMORY_PHASE_EVERY-th step) and python.amp_trace (one
 * row per optimizer step: GradScaler and autocast state).
 *
 * How they see the training loop, without a change to user code:
 *   - C wrappers (pb_wrap_attr in torch_hooks.h) of DataLoader's iterator __next__,
 *     torch.amp.GradScaler.step, torch.optim.Optimizer.zero_grad and torch.cuda.synchronize;
 *   - calls from torch_hooks.c at the points it already observes: every torch_trace row
 *     (stage time), a root forward starting and ending, the backward pass ending, an optimizer
 *     step ending and the step boundary.
 * Everything runs with the GIL held; per-step state is plain C accumulators.
 */
#ifndef PB_AGENT_COLLECT_H
#define PB_AGENT_COLLECT_H

#include <Python.h>
#include <stdint.h>

#include "registry.h"
#include "step_accum.h"

/* python.memory phases, in the order a training step passes them. */
enum {
    PB_PHASE_STEP = 0,
    PB_PHASE_AFTER_DATA,
    PB_PHASE_AFTER_FORWARD,
    PB_PHASE_AFTER_LOSS,
    PB_PHASE_AFTER_BACKWARD,
    PB_PHASE_AFTER_OPTIMIZER,
    PB_PHASE_AFTER_ZERO_GRAD,
};

typedef struct pb_dataloader_row {
    int64_t step;
    int64_t batch_index;     /* batches this iterator had yielded before this one */
    int64_t wait_ns;         /* time the training loop spent inside next() */
    int64_t time_offset_ns;  /* start of next() minus start of the step */
    int32_t num_workers;
    int32_t prefetch_factor; /* 0 when num_workers is 0 */
    int64_t batch_size;      /* first dimension of the first tensor in the batch, 0 unknown */
    uint16_t rank;
    uint8_t pin_memory;
    uint8_t persistent_workers;
} pb_dataloader_row;

typedef struct pb_steps_row {
    int64_t step;
    int64_t wall_ns, data_wait_ns, forward_ns, backward_ns, optimizer_ns, collectives_ns, other_ns;
    int64_t samples;
    int32_t syncs;
    uint16_t rank;
} pb_steps_row;

typedef struct pb_memory_row {
    int64_t step;
    double allocated_mb, max_allocated_mb, reserved_mb, rss_mb; /* NaN reads as NULL */
    uint32_t device; /* intern id: "cpu", "cuda:0", ... */
    uint16_t rank;
    uint8_t phase;   /* PB_PHASE_* */
} pb_memory_row;

typedef struct pb_amp_row {
    int64_t step;
    double scale;             /* NaN (NULL) without an enabled GradScaler */
    uint32_t autocast_dtype;  /* intern id; 0 ("") when autocast was off */
    uint16_t rank;
    uint8_t found_inf, skipped, autocast_enabled;
} pb_amp_row;

extern pb_table pb_table_dataloader_trace, pb_table_steps, pb_table_memory, pb_table_amp_trace;

/* Creates the four rings and registers the tables. Returns 0 or a negative errno (then nothing
 * is registered and the collectors record nothing). [start-up, GIL held] */
int pb_collect_tables_init(void);

/* Frees the rings. After pb_tables_free() (which forgets the registry). */
void pb_collect_tables_free(void);

/* Installs the wrappers. Each one that torch lacks is left out and said once at debug level.
 * Returns 0. [GIL held] */
int pb_collect_install(void);

/* Puts every wrapped function back and forgets per-step state. [GIL held] */
void pb_collect_remove(void);

/* ---- called by torch_hooks.c, recording on, [GIL held] ---- */

/* A python.torch_trace row of stage (PB_STAGE_*) with self time self_ns was recorded. */
void pb_collect_stage_time(int stage, int64_t self_ns);

/* The primary root module's forward begins: samples the autocast state. */
void pb_collect_forward_begin(void);

/* A phase boundary was passed; records a python.memory row on sampled steps. */
void pb_collect_phase(int phase);

/* optimizer.step() returned (before the step boundary). */
void pb_collect_optimizer_done(void);

/* Step `step` ends after wall_ns: writes its python.steps and python.memory rows and resets
 * the accumulators. Called before the step number advances. */
void pb_collect_step_end(int64_t step, int64_t wall_ns);

#endif
