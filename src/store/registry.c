/* registry.c - table descriptors; see registry.h. */
#include "registry.h"

#include "intern.h"

#include <errno.h>
#include <string.h>

static pb_table *tables[PB_REGISTRY_MAX];
static int ntables;

int pb_registry_add(pb_table *t)
{
    if (pb_registry_find(t->schema, t->name)) return -EEXIST;
    if (ntables >= PB_REGISTRY_MAX) return -ENOSPC;
    tables[ntables++] = t;
    return 0;
}

int pb_registry_count(void) { return ntables; }

pb_table *pb_registry_get(int i) { return (i >= 0 && i < ntables) ? tables[i] : NULL; }

pb_table *pb_registry_find(const char *schema, const char *name)
{
    for (int i = 0; i < ntables; i++)
        if (strcmp(tables[i]->schema, schema) == 0 && strcmp(tables[i]->name, name) == 0) return tables[i];
    return NULL;
}

const char *pb_col_sql_type(pb_col_kind kind)
{
    switch (kind) {
    case PB_COL_F64:
    case PB_COL_F32:
    case PB_COL_NS_SEC:
    case PB_COL_NS_MS: return "REAL";
    case PB_COL_STR_ID:
    case PB_COL_STR_ID_NULL:
    case PB_COL_ENUM_U8: return "TEXT";
    default: return "INTEGER";
    }
}

void pb_column_decode(const pb_column *col, const unsigned char *row, int enum_count,
                      pb_cell *out)
{
    const unsigned char *p = row + col->offset;
    out->type = PB_CELL_INT;
    switch (col->kind) {
    case PB_COL_I64: memcpy(&out->i, p, sizeof out->i); return;
    case PB_COL_I32: { int32_t v; memcpy(&v, p, sizeof v); out->i = v; return; }
    case PB_COL_U32: { uint32_t v; memcpy(&v, p, sizeof v); out->i = v; return; }
    case PB_COL_U16: { uint16_t v; memcpy(&v, p, sizeof v); out->i = v; return; }
    case PB_COL_U8: out->i = *p; return;
    case PB_COL_I64_NULL:
        memcpy(&out->i, p, sizeof out->i);
        if (out->i == INT64_MIN) out->type = PB_CELL_NULL;
        return;
    case PB_COL_F64: out->type = PB_CELL_REAL; memcpy(&out->d, p, sizeof out->d); return;
    case PB_COL_F32: { float v; memcpy(&v, p, sizeof v); out->type = PB_CELL_REAL; out->d = v; return; }
    case PB_COL_NS_SEC:
    case PB_COL_NS_MS: {
        int64_t v;
        memcpy(&v, p, sizeof v);
        out->type = PB_CELL_REAL;
        out->d = (double)v / (col->kind == PB_COL_NS_SEC ? 1e9 : 1e6);
        return;
    }
    case PB_COL_STR_ID:
    case PB_COL_STR_ID_NULL: {
        uint32_t id;
        memcpy(&id, p, sizeof id);
        if (!id && col->kind == PB_COL_STR_ID_NULL) {
            out->type = PB_CELL_NULL;
            return;
        }
        out->type = PB_CELL_TEXT;
        out->s = pb_intern_get(id); /* interned strings never move or die (intern.h) */
        return;
    }
    case PB_COL_ENUM_U8:
        if (enum_count < 0)
            for (enum_count = 0; col->enum_names && col->enum_names[enum_count]; enum_count++) {}
        out->i = *p;
        if (*p < enum_count) {
            out->type = PB_CELL_TEXT;
            out->s = col->enum_names[*p];
        }
        return; /* a value the table's enum does not name: its number */
    }
    out->type = PB_CELL_NULL; /* a kind this decoder does not know: a bug, shown as NULL */
}

void pb_registry_reset(void) { ntables = 0; }
