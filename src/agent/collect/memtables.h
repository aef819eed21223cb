/*
 * memtables.h - the memory collectors: python.memory and python.memory_breakdown (docs/tables.md).
 *
 * python.memory: one row per step (its end), plus one row at each observable phase (after data,
 * before/after forward, after loss, after backward, after the optimizer, after zero_grad) of
 * every PROBING_MEMORY_PHASE_EVERY-th step: allocator figures on CUDA (torch.cuda.memory_*),
 * the process RSS and its sampled peak on CPU, and the memory the process may use (the GPU's
 * total; the cgroup's limit or the machine's RAM), read once.
 * python.memory_breakdown: on the first optimizer step and on those sampled steps, bytes of each
 * optimizer's parameters, their gradients and its state, each storage counted once.
 *
 * collect.c registers the two tables with the other per-step tables and calls in here at the
 * points it observes; this file calls only below it (memsample.c, step.h). Never initialises
 * CUDA: the CUDA figures are read only once the program has. Everything here runs with the GIL
 * held.
 */
#ifndef PB_AGENT_MEMTABLES_H
#define PB_AGENT_MEMTABLES_H

#include <Python.h>
#include <stdint.h>

#include "registry.h"

/* python.memory phases, in the order a training step passes them. */
enum {
    PB_PHASE_STEP = 0,
    PB_PHASE_AFTER_DATA,
    PB_PHASE_AFTER_FORWARD,
    PB_PHASE_AFTER_LOSS,
    PB_PHASE_AFTER_BACKWARD,
    PB_PHASE_AFTER_OPTIMIZER,
    PB_PHASE_AFTER_ZERO_GRAD,
    PB_PHASE_BEFORE_FORWARD, /* added last so the stored values of the others stay */
};

typedef struct pb_memory_row {
    int64_t step;
    double allocated_mb, max_allocated_mb, reserved_mb, rss_mb; /* NaN reads as NULL */
    double limit_mb; /* memory the process may use: GPU total on CUDA, cgroup/RAM on CPU */
    uint32_t device; /* intern id: "cpu", "cuda:0", ... */
    uint16_t rank;
    uint8_t phase;   /* PB_PHASE_* */
} pb_memory_row;

typedef struct pb_breakdown_row {
    int64_t step;
    int64_t param_bytes, grad_bytes, state_bytes; /* distinct storages, each counted once */
    double device_total_mb;   /* total memory of the parameters' GPU; NaN (NULL) on CPU */
    uint32_t optimizer;       /* intern id: class name */
    uint32_t device;          /* intern id: device of the first parameter, or "mixed" */
    uint32_t params;          /* parameter tensors in param_groups */
    uint32_t state_tensors;   /* tensors in optimizer.state */
    uint16_t rank;
} pb_breakdown_row;

extern pb_table pb_table_memory, pb_table_memory_breakdown;

/* Reads what the collectors need from torch (tensor_type and torch_cuda borrowed, either may be
 * NULL: then the breakdown / the CUDA figures are left out) and PROBING_MEMORY_PHASE_EVERY.
 * Returns 0, or -1 with a Python error set when a name cannot be interned. [GIL held] */
int pb_memory_install(PyTypeObject *tensor_type, PyObject *torch_cuda);

/* Drops what install took and forgets per-step state. [GIL held] */
void pb_memory_remove(void);

/* Whether the program has initialised torch.cuda (never initialises it). [GIL held] */
int pb_memory_cuda_in_use(void);

/* A phase boundary (PB_PHASE_*) was passed: a python.memory row, on sampled steps, once per
 * phase per step. [GIL held] */
void pb_memory_phase(int phase);

/* optimizer.step() of `optimizer` (borrowed) returned: its python.memory_breakdown row on the
 * first optimizer step and on sampled steps, once per optimizer per step. [GIL held] */
void pb_memory_optimizer_done(PyObject *optimizer);

/* Step `step` ends: its end-of-step python.memory row; per-step state is reset. [GIL held] */
void pb_memory_step_end(int64_t step);

#endif
