/*
 * compiles.h - python.compiles: one row per torch.compile (Dynamo) compilation of a frame, its
 * row, its columns and its ring, and the per-step sum of compile time python.steps reports.
 *
 * Rows come from torch's own compilation metrics: probing/_compiles.py hands each
 * CompilationMetrics record that torch._dynamo.utils.record_compilation_metrics appends (once
 * per compile, never per call or per step) to probing._agent._compiled() (pb_compiles_push_py),
 * which pushes the row here from C. Columns and meanings: docs/tables.md, python.compiles.
 */
#ifndef PB_AGENT_COMPILES_H
#define PB_AGENT_COMPILES_H

#include <Python.h>
#include <stdint.h>

#include "registry.h"

/* kind: what the compile was */
enum {
    PB_COMPILE_FIRST = 0,    /* the frame's first compile */
    PB_COMPILE_RECOMPILE = 1, /* a guard of every earlier compile failed (recompile_reason) */
    PB_COMPILE_LIMIT = 2,    /* recompile_limit reached: the frame runs eager from now on */
    PB_COMPILE_FAILED = 3,   /* the compile raised (fail_type/fail_reason) */
    PB_COMPILE_BACKWARD = 4, /* AOT autograd's backward graph, compiled lazily in backward */
};

typedef struct pb_compile_row {
    int64_t step;
    int64_t duration_ns;  /* whole compile, Dynamo's metrics context start to end */
    int64_t dynamo_ns;    /* tracing and guards: duration less the backend's compile */
    int64_t aot_ns;       /* AOT autograd (its share of the backend compile); 0 unknown */
    int64_t inductor_ns;  /* Inductor; 0 unknown (not the inductor backend) */
    uint32_t compile_id;  /* intern id: Dynamo's "frame/attempt" id, "0/3" */
    uint32_t function, file; /* intern ids of the compiled frame */
    uint32_t reason;      /* intern id: recompile guard failure, or the limit's / failure's text */
    uint32_t break_reason; /* intern id: the first graph break's reason; 0 none */
    int32_t line;         /* first line of the compiled frame's code; 0 unknown */
    int32_t graph_breaks; /* graph breaks Dynamo restarted the frame's tracing for */
    uint16_t rank;
    uint8_t kind;         /* PB_COMPILE_* */
} pb_compile_row;

extern pb_table pb_table_compiles;

/* Seconds (ns) of compiles recorded since the last call, and resets the sum: the step's
 * compile time, read by the step's end (collect.c). [GIL held] */
int64_t pb_compiles_take_step_ns(void);

/* probing._agent._compiled(compile_id, function, file, line, kind, reason, graph_breaks,
 * break_reason, duration_us, dynamo_us, aot_us, inductor_us): pushes one row in the current
 * step. Strings may be None; negative times are unknown. Returns None; a TypeError for bad
 * arguments (the caller, probing/_compiles.py, swallows it). [GIL held] */
PyObject *pb_compiles_push_py(PyObject *self, PyObject *args);

/* Forgets the step's sum (the agent stopped). */
void pb_compiles_reset(void);

#endif
