/*
 * frames.h - what the forward hooks (torch_hooks.c) and the backward probes (autograd.c) share:
 * each thread's stack of running module executions, the address hash of their maps, and the push
 * of one python.torch_trace row.
 *
 * Everything here is inline or a thread-local read: a module call pays for it exactly what it
 * paid when these lived as statics of one file. [GIL held, unless said]
 */
#ifndef PB_AGENT_FRAMES_H
#define PB_AGENT_FRAMES_H

#include <Python.h>
#include <stdatomic.h>
#include <stdint.h>

#include "memsample.h"
#include "step.h"
#include "torch_trace.h"

#define PB_FRAMES_MAX_DEPTH 256

struct pb_bspan;

/* One running module execution. */
typedef struct pb_frame {
    PyObject *module;        /* borrowed: only compared */
    struct pb_bspan *span;   /* owned or NULL: this execution's backward span (autograd.h), made at
                              * enter so that the spans of nested executions can point to it */
    PyObject *in_grad_fn;    /* owned or NULL: the input's grad_fn before forward ran (with the
                              * extension: the node's address, held by in_handle) */
    uint64_t in_handle;      /* the extension's handle of in_grad_fn (autograd_api.h) */
    PyObject *range;         /* owned or NULL: the profiler range of a capture (capture.h) */
    int64_t start_ns;
    int64_t child_ns;        /* time of nested executions less the collectives inside them,
                              * subtracted for self time */
    int64_t collectives_at_start; /* pb_step_collectives_total_ns at the start: the collectives
                              * inside are not the module's own time (FSDP's all-gathers) */
    uint32_t name, type, seq;
    uint8_t layer_capture;   /* first execution of a Linear/convolution: python.layers row at the end */
    uint8_t detail;          /* recorded in detail (the root's mode, inherited by nested calls) */
} pb_frame;

typedef struct pb_tstate {
    int depth;
    int overflow; /* pre-hooks not pushed because the stack was full */
    uint32_t tid;
    pb_frame stack[PB_FRAMES_MAX_DEPTH];
} pb_tstate;

extern __thread pb_tstate *pb_frames_tls __attribute__((tls_model("initial-exec"), visibility("hidden")));

/* Makes this thread's stack (once per thread). NULL when out of memory. */
pb_tstate *pb_frames_new(void);

/* This thread's frame stack, or NULL when out of memory. */
static inline pb_tstate *pb_frames_get(void)
{
    pb_tstate *ts = pb_frames_tls;
    return ts ? ts : pb_frames_new();
}

/* Hash of an object address, for open-addressing maps keyed by pointer. [any thread] */
static inline size_t pb_hash_ptr(const void *p)
{
    uintptr_t x = (uintptr_t)p >> 4;
    return (size_t)(x * 0x9E3779B97F4A7C15ull);
}

/* Pushes one python.torch_trace row of the current step. */
static inline void pb_frames_push_row(int64_t start_ns, int64_t end_ns, int64_t self_ns, uint32_t row_seq,
                                      uint32_t name, uint32_t type, uint16_t depth, uint8_t stage, uint32_t tid)
{
    pb_torch_row r;
    /* A hook that was already running when the agent detached (it ran Python code and so let
     * go of the GIL) ends here after the rings are freed: drop its row. Pushes and the free
     * both hold the GIL, so this check cannot race with the free. */
    if (!atomic_load_explicit(&pb_step_enabled, memory_order_relaxed) || !pb_table_torch_trace.ring) return;
    r.step = atomic_load_explicit(&pb_step_number, memory_order_relaxed);
    r.duration_ns = self_ns;
    r.total_ns = end_ns - start_ns;
    r.time_offset_ns = start_ns - pb_step_start_ns;
    r.allocated_mb = pb_memsample_current_mb();
    /* the sampler thread and the step boundary move the two figures apart for an instant: the
     * peak since the step began is never below what is allocated now */
    r.max_allocated_mb = pb_memsample_peak_mb();
    if (r.max_allocated_mb < r.allocated_mb) r.max_allocated_mb = r.allocated_mb;
    r.seq = row_seq;
    r.module = name;
    r.type = type;
    r.thread = tid;
    r.depth = depth;
    r.rank = pb_step_rank_id;
    r.stage = stage;
    pb_ring_push(pb_table_torch_trace.ring, &r);
}

#endif
