/*
 * registry.h - the tables probing records, described as data.
 *
 * A pb_table says where a table's rows live (a pb_ring), how its fixed-size row struct maps to
 * SQL columns (pb_column: name, kind, byte offset), and what to tell a user about it. The SQL
 * layer builds one read-only virtual table per registered pb_table; `probing tables` and the
 * probe.tables view read the same descriptors. Collectors register their tables once at agent
 * start (before the server starts); after that the registry is read-only and needs no lock.
 */
#ifndef PB_STORE_REGISTRY_H
#define PB_STORE_REGISTRY_H

#include "ring.h"

#include <stddef.h>
#include <stdint.h>

typedef enum pb_col_kind {
    PB_COL_I64,      /* int64_t  -> INTEGER */
    PB_COL_I32,      /* int32_t  -> INTEGER */
    PB_COL_U32,      /* uint32_t -> INTEGER */
    PB_COL_U16,      /* uint16_t -> INTEGER */
    PB_COL_U8,       /* uint8_t  -> INTEGER */
    PB_COL_F64,      /* double   -> REAL */
    PB_COL_F32,      /* float    -> REAL */
    PB_COL_NS_SEC,   /* int64_t nanoseconds -> REAL seconds */
    PB_COL_NS_MS,    /* int64_t nanoseconds -> REAL milliseconds */
    PB_COL_STR_ID,   /* uint32_t intern id  -> TEXT */
    PB_COL_ENUM_U8,  /* uint8_t index into pb_column.enum_names -> TEXT */
    PB_COL_STR_ID_NULL, /* uint32_t intern id -> TEXT, id 0 -> NULL */
    PB_COL_I64_NULL, /* int64_t -> INTEGER, INT64_MIN -> NULL */
} pb_col_kind;

typedef struct pb_column {
    const char *name;
    pb_col_kind kind;
    uint16_t offset;               /* offsetof(row struct, field) */
    const char *const *enum_names; /* PB_COL_ENUM_U8 only; NULL-terminated */
    const char *doc;               /* one line for `probing tables` and docs */
} pb_column;

typedef struct pb_table {
    const char *schema;  /* "python", "system", ... */
    const char *name;    /* "torch_trace" */
    const char *doc;
    const pb_column *columns;
    int ncolumns;
    size_t row_size;
    pb_ring *ring;       /* owned by whoever registered the table */
    int step_column;     /* index of a column whose value never decreases in push order, or -1;
                            lets the SQL layer answer step ranges by binary search */
    const char *empty_reason; /* why the table may be empty (no GPU, ...), or NULL */
} pb_table;

/* One pb_column of a row struct's field: PB_COL("step", PB_COL_I64, my_row, step, "doc").
 * Needs <stddef.h> (included above). */
#define PB_COL(name, kind, type, field, doc) {name, kind, offsetof(type, field), NULL, doc}

#define PB_REGISTRY_MAX 64

/* Adds a table (borrowed: must outlive the registry). Returns 0, -EEXIST or -ENOSPC.
 * [start-up only] */
int pb_registry_add(pb_table *t);

int pb_registry_count(void);
pb_table *pb_registry_get(int i);
pb_table *pb_registry_find(const char *schema, const char *name);

/* Returns the SQL type name for a column kind: "INTEGER", "REAL" or "TEXT". */
const char *pb_col_sql_type(pb_col_kind kind);

/* One column of one row, decoded: the value SQL shows (sql/vt_ring.c) and a recording stores
 * (agent/service/record_file.c), from the one decoder below. */
typedef enum pb_cell_type { PB_CELL_NULL, PB_CELL_INT, PB_CELL_REAL, PB_CELL_TEXT } pb_cell_type;
typedef struct pb_cell {
    pb_cell_type type;
    int64_t i;     /* PB_CELL_INT */
    double d;      /* PB_CELL_REAL */
    const char *s; /* PB_CELL_TEXT: an interned string or an enum name, alive as long as the agent */
} pb_cell;

/* Decodes column col of row (a copy of one row of col's table) into *out. enum_count is the
 * number of col->enum_names (PB_COL_ENUM_U8; pass -1 to have them counted); an enum value past
 * them comes out as its number. PB_COL_STR_ID_NULL id 0 and PB_COL_I64_NULL INT64_MIN come out
 * NULL. [any thread] */
void pb_column_decode(const pb_column *col, const unsigned char *row, int enum_count,
                      pb_cell *out);

/* Forgets all tables (tests, detach). */
void pb_registry_reset(void);

#endif
