/*
 * catalog.c - what the registry holds, as rows and as JSON: each table's row count, capacity
 * and rows dropped (probe.tables, vt_probe.c) and the /api/tables body (routes.c) and a
 * recording's column catalogue (the agent's recorder).
 *
 * Only the ring heads move after start-up, so the counts are read once per call.
 */
#include "catalog.h"

#include <string.h>

void pb_catalog_table_counts(const pb_table *t, pb_catalog_counts *out)
{
    memset(out, 0, sizeof *out);
    if (!t->ring) return;
    uint64_t head = pb_ring_head(t->ring), cap = pb_ring_capacity(t->ring);
    out->capacity = (sqlite3_int64)cap;
    out->rows = (sqlite3_int64)(head < cap ? head : cap);
    out->rows_dropped = (sqlite3_int64)(head > cap ? head - cap : 0);
}

int pb_catalog_columns_json(pb_jsonw *w, const pb_table *t)
{
    int rc = pb_jsonw_arr_begin(w);
    for (int i = 0; !rc && i < t->ncolumns; i++) {
        const pb_column *c = &t->columns[i];
        rc = pb_jsonw_obj_begin(w);
        if (!rc) rc = pb_jsonw_key(w, "name");
        if (!rc) rc = pb_jsonw_str(w, c->name);
        if (!rc) rc = pb_jsonw_key(w, "type");
        if (!rc) rc = pb_jsonw_str(w, pb_col_sql_type(c->kind));
        if (!rc) rc = pb_jsonw_key(w, "doc");
        if (!rc) rc = pb_jsonw_str(w, c->doc ? c->doc : "");
        if (!rc) rc = pb_jsonw_obj_end(w);
    }
    if (!rc) rc = pb_jsonw_arr_end(w);
    return rc;
}

int pb_catalog_tables_json(pb_buf *out)
{
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    int rc = pb_jsonw_obj_begin(&w);
    if (!rc) rc = pb_jsonw_key(&w, "tables");
    if (!rc) rc = pb_jsonw_arr_begin(&w);
    for (int i = 0; !rc && i < pb_registry_count(); i++) {
        const pb_table *t = pb_registry_get(i);
        pb_catalog_counts n;
        pb_catalog_table_counts(t, &n);
        rc = pb_jsonw_obj_begin(&w);
        if (!rc) rc = pb_jsonw_key(&w, "schema");
        if (!rc) rc = pb_jsonw_str(&w, t->schema);
        if (!rc) rc = pb_jsonw_key(&w, "name");
        if (!rc) rc = pb_jsonw_str(&w, t->name);
        if (!rc) rc = pb_jsonw_key(&w, "doc");
        if (!rc) rc = pb_jsonw_str(&w, t->doc ? t->doc : "");
        if (!rc) rc = pb_jsonw_key(&w, "columns");
        if (!rc) rc = pb_catalog_columns_json(&w, t);
        if (!rc) rc = pb_jsonw_key(&w, "rows");
        if (!rc) rc = pb_jsonw_int(&w, n.rows);
        if (!rc) rc = pb_jsonw_key(&w, "capacity");
        if (!rc) rc = pb_jsonw_int(&w, n.capacity);
        if (!rc) rc = pb_jsonw_key(&w, "rows_dropped");
        if (!rc) rc = pb_jsonw_int(&w, n.rows_dropped);
        if (!rc) rc = pb_jsonw_key(&w, "empty_reason");
        if (!rc) rc = pb_jsonw_str(&w, t->empty_reason); /* NULL -> null */
        if (!rc) rc = pb_jsonw_obj_end(&w);
    }
    if (!rc) rc = pb_jsonw_arr_end(&w);
    if (!rc) rc = pb_jsonw_obj_end(&w);
    return rc;
}
