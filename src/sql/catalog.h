/*
 * catalog.h - the catalogue of registered tables: row counts, and the JSON of /api/tables.
 * [any thread, once the registry is complete]
 */
#ifndef PB_CATALOG_H
#define PB_CATALOG_H

#include "buf.h"
#include "jsonw.h"
#include "registry.h"

#include <sqlite3.h>

/* One table's ring: rows held now, ring capacity, rows overwritten since start. */
typedef struct pb_catalog_counts {
    sqlite3_int64 rows, capacity, rows_dropped;
} pb_catalog_counts;

/* Fills *out for t (all zero for a table without a ring). [any thread] */
void pb_catalog_table_counts(const pb_table *t, pb_catalog_counts *out);

/* Appends the /api/tables response body for every registered table:
 *   {"tables":[{"schema","name","doc","columns":[{"name","type","doc"}],"rows","capacity",
 *               "rows_dropped","empty_reason"}]}
 * Returns 0 or the pb_buf error. [any thread, registry complete] */
int pb_catalog_tables_json(pb_buf *out);

/* Writes t's columns as [{"name","type","doc"},...] (the "columns" of pb_catalog_tables_json;
 * a recording's `tables` catalogue keeps the same). Returns 0 or the pb_buf error. */
int pb_catalog_columns_json(pb_jsonw *w, const pb_table *t);

#endif
