/* compiles.c - the python.compiles table and ring, and the step's compile time; see compiles.h
 * and docs/tables.md. */
#include "compiles.h"

#include "intern.h"
#include "step.h"

#include <stddef.h>
#include <string.h>

static const char *const kind_names[] = {"compile", "recompile", "limit", "failed", "backward", NULL};

static int64_t step_compile_ns; /* compiles recorded since the last step end */

#define COL PB_COL

static const pb_column compile_cols[] = {
    COL("step", PB_COL_I64, pb_compile_row, step, "training step in which the compile ended"),
    COL("compile_id", PB_COL_STR_ID, pb_compile_row, compile_id, "Dynamo's compile id 'frame/attempt' ('0/3': frame 0's fourth compile), as in TORCH_LOGS output"),
    {"kind", PB_COL_ENUM_U8, offsetof(pb_compile_row, kind), kind_names, "'compile' (the frame's first), 'recompile' (every earlier compile's guards failed), 'limit' (recompile_limit reached: the frame runs eagerly from then on), 'failed' (the compile raised), 'backward' (AOT autograd's backward graph)"},
    COL("function", PB_COL_STR_ID, pb_compile_row, function, "name of the compiled frame's function ('forward', 'torch_dynamo_resume_in_forward_at_21' after a graph break)"),
    COL("file", PB_COL_STR_ID, pb_compile_row, file, "file of the compiled frame"),
    COL("line", PB_COL_I32, pb_compile_row, line, "first line of the compiled frame's code; 0 when unknown"),
    COL("reason", PB_COL_STR_ID, pb_compile_row, reason, "for a recompile, the guard that failed (\"0/0: tensor 'args[0]' size mismatch at index 0. expected 4, actual 5\"); for 'limit' and 'failed', torch's message; '' for a first compile"),
    COL("graph_breaks", PB_COL_I32, pb_compile_row, graph_breaks, "graph breaks Dynamo hit while tracing the frame (each splits the frame into graphs with Python between them, on every call)"),
    COL("break_reason", PB_COL_STR_ID, pb_compile_row, break_reason, "the first graph break's reason (its first line); '' without one"),
    COL("duration", PB_COL_NS_SEC, pb_compile_row, duration_ns, "seconds the compile took, start to end"),
    COL("dynamo", PB_COL_NS_SEC, pb_compile_row, dynamo_ns, "seconds of Dynamo's own work (tracing the bytecode, guards): duration less the backend's compile"),
    COL("aot_autograd", PB_COL_NS_SEC, pb_compile_row, aot_ns, "seconds in AOT autograd (inside the backend's compile); 0 when torch does not say"),
    COL("inductor", PB_COL_NS_SEC, pb_compile_row, inductor_ns, "seconds in Inductor (inside AOT autograd's); 0 without the Inductor backend"),
    COL("rank", PB_COL_U16, pb_compile_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

pb_table pb_table_compiles = {
    .schema = "python",
    .name = "compiles",
    .doc = "one row per torch.compile (Dynamo) compile of a frame: first compiles, recompiles with the guard that failed, graph breaks, the recompile limit reached, and the time each took",
    .columns = compile_cols,
    .ncolumns = (int)(sizeof compile_cols / sizeof compile_cols[0]),
    .row_size = sizeof(pb_compile_row),
    .step_column = 0,
    .empty_reason = "empty until torch.compile compiles a frame (nothing is compiled without torch.compile)",
};

int64_t pb_compiles_take_step_ns(void)
{
    int64_t ns = step_compile_ns;
    step_compile_ns = 0;
    return ns;
}

void pb_compiles_reset(void) { step_compile_ns = 0; }

/* An intern id for s, cut at its first newline and at 400 bytes; 0 for NULL or "". */
static uint32_t first_line_id(const char *s)
{
    if (!s || !*s) return 0;
    char buf[401];
    size_t n = strcspn(s, "\n");
    if (n > sizeof buf - 1) n = sizeof buf - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return pb_intern_cstr(buf);
}

static int64_t us_to_ns(long long us) { return us < 0 ? 0 : (int64_t)us * 1000; }

PyObject *pb_compiles_push_py(PyObject *self, PyObject *args)
{
    (void)self;
    const char *compile_id, *function, *file, *reason, *break_reason;
    int line, kind, graph_breaks;
    long long duration_us, dynamo_us, aot_us, inductor_us;
    if (!PyArg_ParseTuple(args, "zzziizizLLLL", &compile_id, &function, &file, &line, &kind, &reason,
                          &graph_breaks, &break_reason, &duration_us, &dynamo_us, &aot_us, &inductor_us))
        return NULL;
    if (kind < PB_COMPILE_FIRST || kind > PB_COMPILE_BACKWARD) {
        PyErr_SetString(PyExc_ValueError, "kind must be 0..4");
        return NULL;
    }
    pb_compile_row r;
    memset(&r, 0, sizeof r);
    r.step = pb_step_current();
    r.rank = pb_step_rank();
    r.kind = (uint8_t)kind;
    r.compile_id = first_line_id(compile_id);
    r.function = first_line_id(function);
    r.file = first_line_id(file);
    r.line = line > 0 ? line : 0;
    r.reason = first_line_id(reason);
    r.graph_breaks = graph_breaks > 0 ? graph_breaks : 0;
    r.break_reason = first_line_id(break_reason);
    r.duration_ns = duration_us > 0 ? (int64_t)duration_us * 1000 : 0;
    r.dynamo_ns = dynamo_us >= 0 ? (int64_t)dynamo_us * 1000 : r.duration_ns;
    r.aot_ns = us_to_ns(aot_us);
    r.inductor_ns = us_to_ns(inductor_us);
    /* The backward graph's compile runs inside the forward's compile on an eager backward (its
     * time is already in the forward's row) or lazily in backward (its own time). */
    step_compile_ns += r.duration_ns;
    if (pb_table_compiles.ring) pb_ring_push(pb_table_compiles.ring, &r);
    Py_RETURN_NONE;
}
