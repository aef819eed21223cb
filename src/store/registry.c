/* registry.c - table descriptors; see registry.h. */
#include "registry.h"

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

void pb_registry_reset(void) { ntables = 0; }
