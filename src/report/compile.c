/*
 * compile.c - the torch.compile rule (docs/report.md, "Compilation"): from python.compiles,
 * recompiles that go on in steady state (the primary finding: every one stalls its step for the
 * whole compile), the recompile limit reached (the frame runs eagerly from then on), graph
 * breaks (each splits every call of the frame into graphs with Python between them), the compile
 * time at the start named as such, and a word on what the module rows of a compiled model show.
 * Silent without the table (older agents and recordings) or without compiles.
 */
#include "rules.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char compiles_sql[] =
    "SELECT step, kind, function, file, line, reason, graph_breaks, break_reason, duration\n"
    "FROM python.compiles ORDER BY step, rowid";

static const char *text(json_t *row, const char *key)
{
    const char *s = json_string_value(json_object_get(row, key));
    return s ? s : "";
}

/* "forward (model.py:26)": the file's last path component. */
static char *frame_text(json_t *row)
{
    const char *file = text(row, "file"), *slash = strrchr(file, '/');
    return pb__report_textf("%s (%s:%lld)", text(row, "function"), slash ? slash + 1 : file,
                            (long long)pb__report_num(row, "line", NULL));
}

static const char remedy[] =
    "Each recompile stalls its step for a whole compile. If the input shapes really vary, compile "
    "for dynamic shapes: torch.compile(model, dynamic=True), or torch._dynamo.mark_dynamic(x, dim) "
    "on the varying dimension before the call; otherwise pad the inputs to a few fixed sizes "
    "(buckets) or make fewer distinct shapes (drop_last=True for a short last batch). "
    "TORCH_LOGS=recompiles prints every guard failure (docs/report.md, \"Compilation\").";

void pb__report_compiles(pb__report *r)
{
    char *error = NULL;
    json_t *rows = pb__report_try(r, compiles_sql, &error);
    free(error);
    size_t n = json_array_size(rows);
    if (!rows || n == 0 || r->count == 0) {
        json_decref(rows);
        return;
    }
    long long half = r->lo + (r->hi - r->lo + 1) / 2, last_step = -1;
    size_t recompiles = 0, late = 0, breaks = 0, late_steps = 0;
    double compile_s = 0, late_s = 0;
    long long first_step = -1, end_step = -1;
    json_t *late_row = NULL, *limit_row = NULL, *break_row = NULL;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *kind = text(row, "kind");
        long long step = (long long)pb__report_num(row, "step", NULL);
        double d = pb__report_num(row, "duration", NULL);
        if (step < r->lo || step > r->hi) continue;
        compile_s += d;
        if (first_step < 0) first_step = step;
        if (!strcmp(kind, "recompile")) {
            recompiles++;
            if (step >= half) {
                late++;
                late_s += d;
                if (step != last_step) late_steps++;
                last_step = step;
                late_row = row;
            }
        }
        if (!strcmp(kind, "limit") && !limit_row) limit_row = row;
        /* a frame's breaks once: each recompile of it traces (and breaks) the same code again */
        if (!strcmp(kind, "compile") && pb__report_num(row, "graph_breaks", NULL) > 0) {
            breaks += (size_t)pb__report_num(row, "graph_breaks", NULL);
            if (!break_row) break_row = row;
        }
        if (step < half || !strcmp(kind, "compile")) end_step = step;
    }
    if (late_row) {
        char *frame = frame_text(late_row);
        pb__report_finding(
            r, "recompiles", "compile", "critical",
            pb__report_textf("torch.compile recompiles in steady state: %zu recompile(s) in %zu "
                             "of the last %lld steps (%.3g s of compiling), of %s; the last "
                             "because %s",
                             late, late_steps, r->hi - half + 1, late_s, frame,
                             text(late_row, "reason")),
            json_pack("{s:I,s:I,s:I,s:f,s:s}", "recompiles", (json_int_t)recompiles,
                      "steady_recompiles", (json_int_t)late, "steady_steps_with_recompiles",
                      (json_int_t)late_steps, "steady_compile_s", late_s, "reason",
                      text(late_row, "reason")),
            compiles_sql, remedy);
        free(frame);
    }
    if (limit_row) {
        char *frame = frame_text(limit_row);
        pb__report_finding(
            r, "recompile_limit", "compile", "critical",
            pb__report_textf("torch.compile gave up on %s at step %lld: %s; from then on the frame "
                             "runs eagerly, uncompiled",
                             frame, (long long)pb__report_num(limit_row, "step", NULL),
                             text(limit_row, "reason")),
            json_pack("{s:I,s:I}", "step", (json_int_t)pb__report_num(limit_row, "step", NULL),
                      "recompiles", (json_int_t)recompiles),
            compiles_sql,
            "The frame recompiled for every new shape until torch._dynamo.config.recompile_limit; "
            "raising the limit only compiles more. Compile for dynamic shapes (dynamic=True, "
            "torch._dynamo.mark_dynamic), pad to a few sizes, or make fewer distinct shapes.");
        free(frame);
    }
    if (break_row) {
        char *frame = frame_text(break_row);
        pb__report_finding(
            r, "graph_breaks", "compile", "warning",
            pb__report_textf("torch.compile breaks the graph %zu time(s) in the compiled code, "
                             "first in %s: %s; every call then runs several graphs with Python between "
                             "them",
                             breaks, frame, text(break_row, "break_reason")),
            json_pack("{s:I,s:s}", "graph_breaks", (json_int_t)breaks, "reason",
                      text(break_row, "break_reason")),
            compiles_sql,
            "Remove the break from the hot path: no .item(), print() or data-dependent Python "
            "control flow inside the compiled forward (torch._dynamo.config.capture_scalar_outputs "
            "= True keeps .item() in the graph); torch._dynamo.explain(model)(x) lists every break.");
        free(frame);
    }
    if (!late_row && end_step >= 0) {
        pb__report_finding(
            r, "compile_time", "compile", "info",
            pb__report_textf("compile time at the start: steps %lld..%lld ran %zu compile(s) "
                             "(%zu recompile(s)) in %.3g s; those steps are compilation, not slow "
                             "steps, and no recompile follows in steady state",
                             first_step, end_step, n, recompiles, compile_s),
            json_pack("{s:I,s:I,s:I,s:f}", "first_step", (json_int_t)first_step, "last_step",
                      (json_int_t)end_step, "recompiles", (json_int_t)recompiles, "compile_s",
                      compile_s),
            compiles_sql, NULL);
    }
    pb__report_finding(
        r, "compiled_model", "compile", "info",
        pb__report_textf("a compiled model: its module rows stop at the compiled region "
                         "(OptimizedModule, _orig_mod and the modules Dynamo leaves out of its "
                         "graphs): inside a graph no Python module call runs for probing to see"),
        NULL, NULL,
        "`probing <target> capture` records the torch operators that run inside the compiled "
        "region, each under its module.");
    json_decref(rows);
}
