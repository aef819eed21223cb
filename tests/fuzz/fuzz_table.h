/*
 * fuzz_table.h - the small table every fuzz target queries: python.torch_trace with one column
 * of each kind the agent records (integer, real, interned text, enum), 64 rows in a ring of 32
 * so it has wrapped. Included by one file per fuzz program (the definitions are static).
 */
#ifndef PB_FUZZ_TABLE_H
#define PB_FUZZ_TABLE_H

#include "intern.h"
#include "registry.h"
#include "ring.h"

#include <stddef.h>
#include <stdint.h>

typedef struct fuzz_row {
    int64_t step;
    int64_t t_ns;
    double loss;
    uint32_t module;
    uint8_t kind;
} fuzz_row;

static const char *const fuzz_kind_names[] = {"forward", "backward", NULL};

static const pb_column fuzz_columns[] = {
    {"step", PB_COL_I64, offsetof(fuzz_row, step), NULL, "training step"},
    {"t", PB_COL_NS_SEC, offsetof(fuzz_row, t_ns), NULL, "time in seconds"},
    {"loss", PB_COL_F64, offsetof(fuzz_row, loss), NULL, "loss"},
    {"module", PB_COL_STR_ID, offsetof(fuzz_row, module), NULL, "module name"},
    {"kind", PB_COL_ENUM_U8, offsetof(fuzz_row, kind), fuzz_kind_names, "forward or backward"},
};

static pb_table fuzz_trace = {
    .schema = "python", .name = "torch_trace", .doc = "fuzz trace", .columns = fuzz_columns,
    .ncolumns = (int)(sizeof fuzz_columns / sizeof fuzz_columns[0]), .row_size = sizeof(fuzz_row),
    .step_column = 0,
};

/* Creates, fills and registers the table. Returns 0 or the ring error. */
static int fuzz_table_setup(void)
{
    int rc = pb_ring_create(&fuzz_trace.ring, sizeof(fuzz_row), 32);
    if (rc) return rc;
    static const char *const modules[] = {"encoder.layer.0", "h\xc3\xa9\"llo\n", "", "x"};
    for (int i = 0; i < 64; i++) {
        fuzz_row row = {.step = i / 2, .t_ns = 1000000000LL * i, .loss = 1.0 / (i + 1),
                        .module = pb_intern_cstr(modules[i % 4]), .kind = (uint8_t)(i % 2)};
        pb_ring_push(fuzz_trace.ring, &row);
    }
    return pb_registry_add(&fuzz_trace);
}

#endif
