/*
 * collect.h - the per-step collectors of the training process: data loading, the step
 * breakdown, memory and mixed precision.
 *
 * Tables (docs/tables.md): python.dataloader_trace (one row per batch the training loop took
 * from a DataLoader), python.steps (one row per step: wall time split into data wait, forward,
 * backward, optimizer, collectives and the rest), python.memory (one row per step, plus rows at
 * each observable phase of every PROBING_MEMORY_PHASE_EVERY-th step), python.memory_breakdown
 * (on the first optimizer step and on those sampled steps: bytes of each optimizer's parameters,
 * their gradients and its state), python.amp_trace (one row per optimizer step: GradScaler and
 * autocast state) and python.layers (one row per nn.Linear / convolution module, at its first
 * forward: the GEMM dimensions, dtypes and device the tensor-core check needs).
 *
 * The two memory tables are defined and filled by memtables.c; this file registers them
 * with the others and tells memtables.c of the phases, optimizer steps and step ends it sees.
 *
 * How they see the training loop, without a change to user code:
 *   - C wrappers (pb_wrap_attr in wrap.h) of DataLoader's iterator __next__,
 *     torch.amp.GradScaler.step, torch.optim.Optimizer.zero_grad and torch.cuda.synchronize;
 *   - calls from the hot path (hot/torch_hooks.c, hot/autograd.c) at the points it already
 *     observes (the step's time comes from the intervals they add to the step's timeline,
 *     base/timeline.h):
 *     a root forward starting and ending, the backward pass ending, an optimizer step ending
 *     and the step boundary.
 * Everything runs with the GIL held; per-step state is plain C accumulators.
 */
#ifndef PB_AGENT_COLLECT_H
#define PB_AGENT_COLLECT_H

#include <Python.h>
#include <stdint.h>

#include "memtables.h"
#include "registry.h"
#include "step.h"

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
    int64_t grad_sync_ns;
    int64_t samples;
    int32_t syncs;
    int32_t batches; /* DataLoader batches fetched in the step: 0 = no DataLoader, not "no wait" */
    uint16_t rank;
    uint8_t detail; /* the step's module executions are in torch_trace */
    double cpu_s;   /* the training thread's CPU time in the step; NaN (NULL) when unknown */
    int64_t involuntary_switches; /* times the kernel took the CPU from that thread in the step;
                                     INT64_MIN (NULL) when unknown */
    int64_t compile_ns; /* torch.compile compiles that ended in the step (compiles.h): part of
                           the columns above, not added to them */
} pb_steps_row;

typedef struct pb_amp_row {
    int64_t step;
    double scale;             /* NaN (NULL) without an enabled GradScaler */
    double cuda_capability;   /* major + minor / 10 of the current CUDA device; NaN before the
                                 program initialised CUDA */
    uint32_t autocast_dtype;  /* intern id; 0 ("") when autocast was off */
    uint32_t autocast_device; /* intern id: "cuda" or "cpu"; 0 ("") when autocast was off */
    uint16_t rank;
    uint8_t found_inf, skipped, autocast_enabled;
} pb_amp_row;

typedef struct pb_layer_row {
    int64_t step;
    int64_t in_features, out_features; /* Linear features, or a convolution's channels */
    int64_t rows;             /* output elements / out_features: the GEMM's M (batch x sequence
                                 for Linear; batch x output positions for a convolution) */
    uint32_t module, type;    /* intern ids, as in python.torch_trace */
    uint32_t output_shape;    /* intern id: "64x128x512" */
    uint32_t weight_dtype, compute_dtype, device; /* intern ids; compute = the output's dtype */
    uint16_t rank;
} pb_layer_row;

extern pb_table pb_table_gil;
extern pb_table pb_table_dataloader_trace, pb_table_steps, pb_table_amp_trace, pb_table_layers;

/* Creates the rings and registers the tables. Returns 0 or a negative errno (then nothing
 * is registered and the collectors record nothing). [start-up, GIL held] */
int pb_collect_tables_init(void);

/* Frees the rings. After the registry is reset (lifecycle.c tables_free()). */
void pb_collect_tables_free(void);

/* Installs the wrappers. Each one that torch lacks is left out and said once at debug level.
 * Returns 0. [GIL held] */
int pb_collect_install(void);

/* Puts every wrapped function back and forgets per-step state. [GIL held] */
void pb_collect_remove(void);

/* ---- called by the hot path (hot/torch_hooks.c, hot/autograd.c), recording on, [GIL held] ---- */

/* The primary root module's forward begins: the before_forward memory phase (on sampled steps)
 * and the autocast state. */
void pb_collect_forward_begin(void);

/* Whether mod is an nn.Linear or a convolution (torch.nn.modules.conv._ConvNd): a module whose
 * shapes python.layers records once. Called when a module is first named, never per call. */
int pb_collect_is_layer(PyObject *mod);

/* A layer (pb_collect_is_layer) finished its first forward with `output` (borrowed): writes
 * its python.layers row. name and type are intern ids. */
void pb_collect_layer(PyObject *mod, uint32_t name, uint32_t type, PyObject *output);

/* A phase boundary was passed; records a python.memory row on sampled steps. */
void pb_collect_phase(int phase);

/* optimizer.step() of `optimizer` (borrowed) returned (before the step boundary). On the
 * first optimizer step and on sampled steps (PROBING_MEMORY_PHASE_EVERY) also writes its
 * python.memory_breakdown row: a walk over its parameters, their gradients and its state. */
void pb_collect_optimizer_done(PyObject *optimizer);

/* Step `step` ends after wall_ns: writes its python.steps row (its wall time attributed from
 * the step's timeline, pb_step_timeline) and python.memory rows and resets the accumulators.
 * cpu_ns: the training thread's CPU time in the step (pb_thread_cpu_ns), -1 where unknown (the
 * first step, another thread, a fork); detail: the step was a detail step (detail.h). Called
 * before the step number advances. [GIL held] */
void pb_collect_step_end(int64_t step, int64_t wall_ns, int64_t cpu_ns, int detail);

#endif
