/*
 * vt_probe.c - probe.tables (the catalogue of recorded tables) and probe.config (settings).
 *
 * Both are tiny read-only virtual tables over data that is fixed after start-up (the registry,
 * the settings table); only the row counts of the rings move, so xFilter snapshots them once per
 * scan. pb_db_tables_json() writes the same catalogue for GET /api/tables.
 */
#include "db.h"

#include "config.h"
#include "vt.h"

#include <stdlib.h>
#include <string.h>

enum probe_kind { PROBE_TABLES, PROBE_CONFIG };

enum { TC_SCHEMA, TC_NAME, TC_DOC, TC_COLUMNS, TC_ROWS, TC_CAPACITY, TC_ROWS_DROPPED, TC_EMPTY_REASON };
enum { CC_NAME, CC_VALUE, CC_DEFAULT, CC_DOC };

typedef struct probe_counts {
    sqlite3_int64 rows, capacity, rows_dropped;
} probe_counts;

typedef struct probe_vtab {
    sqlite3_vtab base;
    enum probe_kind kind;
} probe_vtab;

typedef struct probe_cursor {
    sqlite3_vtab_cursor base;
    enum probe_kind kind;
    int index, count;
    probe_counts *counts; /* PROBE_TABLES: one per table, taken at xFilter */
} probe_cursor;

static void table_counts(const pb_table *t, probe_counts *out)
{
    memset(out, 0, sizeof *out);
    if (!t->ring) return;
    uint64_t head = pb_ring_head(t->ring), cap = pb_ring_capacity(t->ring);
    out->capacity = (sqlite3_int64)cap;
    out->rows = (sqlite3_int64)(head < cap ? head : cap);
    out->rows_dropped = (sqlite3_int64)(head > cap ? head - cap : 0);
}

int pb_db_table_columns_json(pb_jsonw *w, const pb_table *t)
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

int pb_db_tables_json(pb_buf *out)
{
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    int rc = pb_jsonw_obj_begin(&w);
    if (!rc) rc = pb_jsonw_key(&w, "tables");
    if (!rc) rc = pb_jsonw_arr_begin(&w);
    for (int i = 0; !rc && i < pb_registry_count(); i++) {
        const pb_table *t = pb_registry_get(i);
        probe_counts n;
        table_counts(t, &n);
        rc = pb_jsonw_obj_begin(&w);
        if (!rc) rc = pb_jsonw_key(&w, "schema");
        if (!rc) rc = pb_jsonw_str(&w, t->schema);
        if (!rc) rc = pb_jsonw_key(&w, "name");
        if (!rc) rc = pb_jsonw_str(&w, t->name);
        if (!rc) rc = pb_jsonw_key(&w, "doc");
        if (!rc) rc = pb_jsonw_str(&w, t->doc ? t->doc : "");
        if (!rc) rc = pb_jsonw_key(&w, "columns");
        if (!rc) rc = pb_db_table_columns_json(&w, t);
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

static int probe_connect(sqlite3 *conn, void *aux, int argc, const char *const *argv,
                         sqlite3_vtab **out, char **errmsg)
{
    enum probe_kind kind = (enum probe_kind)(intptr_t)aux;
    int rc = sqlite3_declare_vtab(conn, kind == PROBE_TABLES
        ? "CREATE TABLE x(schema TEXT, name TEXT, doc TEXT, columns TEXT, rows INTEGER, "
          "capacity INTEGER, rows_dropped INTEGER, empty_reason TEXT)"
        : "CREATE TABLE x(name TEXT, value TEXT, \"default\" TEXT, doc TEXT)");
    if (rc != SQLITE_OK) return rc;
    sqlite3_vtab_config(conn, SQLITE_VTAB_INNOCUOUS);
    probe_vtab *vt = sqlite3_malloc(sizeof *vt);
    if (!vt) return SQLITE_NOMEM;
    memset(vt, 0, sizeof *vt);
    vt->kind = kind;
    *out = &vt->base;
    return SQLITE_OK;
}

static int probe_disconnect(sqlite3_vtab *base)
{
    sqlite3_free(base);
    return SQLITE_OK;
}

static int probe_best_index(sqlite3_vtab *base, sqlite3_index_info *info)
{
    info->estimatedCost = 10;
    info->estimatedRows = 10;
    return SQLITE_OK;
}

static int probe_open(sqlite3_vtab *base, sqlite3_vtab_cursor **out)
{
    probe_cursor *c = sqlite3_malloc(sizeof *c);
    if (!c) return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    c->kind = ((probe_vtab *)base)->kind;
    *out = &c->base;
    return SQLITE_OK;
}

static int probe_close(sqlite3_vtab_cursor *base)
{
    probe_cursor *c = (probe_cursor *)base;
    sqlite3_free(c->counts);
    sqlite3_free(c);
    return SQLITE_OK;
}

static int probe_filter(sqlite3_vtab_cursor *base, int idx_num, const char *idx_str, int argc,
                        sqlite3_value **argv)
{
    probe_cursor *c = (probe_cursor *)base;
    c->index = 0;
    if (c->kind == PROBE_CONFIG) {
        c->count = pb_config_count();
        return SQLITE_OK;
    }
    c->count = pb_registry_count();
    sqlite3_free(c->counts);
    c->counts = sqlite3_malloc64(sizeof *c->counts * (size_t)(c->count + 1));
    if (!c->counts) return SQLITE_NOMEM;
    for (int i = 0; i < c->count; i++) table_counts(pb_registry_get(i), &c->counts[i]);
    return SQLITE_OK;
}

static int probe_next(sqlite3_vtab_cursor *base)
{
    ((probe_cursor *)base)->index++;
    return SQLITE_OK;
}

static int probe_eof(sqlite3_vtab_cursor *base)
{
    const probe_cursor *c = (const probe_cursor *)base;
    return c->index >= c->count;
}

static void result_text(sqlite3_context *ctx, const char *s)
{
    if (s) sqlite3_result_text(ctx, s, -1, SQLITE_STATIC); /* static tables, never freed */
    else sqlite3_result_null(ctx);
}

static int table_column(const probe_cursor *c, sqlite3_context *ctx, int i)
{
    const pb_table *t = pb_registry_get(c->index);
    const probe_counts *n = &c->counts[c->index];
    switch (i) {
    case TC_SCHEMA: result_text(ctx, t->schema); break;
    case TC_NAME: result_text(ctx, t->name); break;
    case TC_DOC: result_text(ctx, t->doc); break;
    case TC_COLUMNS: {
        pb_buf json = PB_BUF_INIT;
        pb_jsonw w;
        pb_jsonw_init(&w, &json);
        if (pb_db_table_columns_json(&w, t)) {
            pb_buf_free(&json);
            return SQLITE_NOMEM;
        }
        sqlite3_result_text(ctx, json.data, (int)json.len, SQLITE_TRANSIENT);
        pb_buf_free(&json);
        break;
    }
    case TC_ROWS: sqlite3_result_int64(ctx, n->rows); break;
    case TC_CAPACITY: sqlite3_result_int64(ctx, n->capacity); break;
    case TC_ROWS_DROPPED: sqlite3_result_int64(ctx, n->rows_dropped); break;
    case TC_EMPTY_REASON: result_text(ctx, t->empty_reason); break;
    }
    return SQLITE_OK;
}

static int probe_column(sqlite3_vtab_cursor *base, sqlite3_context *ctx, int i)
{
    const probe_cursor *c = (const probe_cursor *)base;
    if (c->kind == PROBE_TABLES) return table_column(c, ctx, i);
    const pb_config_entry *e = pb_config_at(c->index);
    switch (i) {
    case CC_NAME: result_text(ctx, e->name); break;
    case CC_VALUE: {
        const char *v = e->value ? e->value : e->deflt;
        /* a secret stays out of query results: say only whether it is set */
        if (strcmp(e->name, "PROBING_TOKEN") == 0 && v && *v) v = "(set)";
        result_text(ctx, v);
        break;
    }
    case CC_DEFAULT: result_text(ctx, e->deflt); break;
    case CC_DOC: result_text(ctx, e->doc); break;
    }
    return SQLITE_OK;
}

static int probe_rowid(sqlite3_vtab_cursor *base, sqlite3_int64 *rowid)
{
    *rowid = ((const probe_cursor *)base)->index;
    return SQLITE_OK;
}

static const sqlite3_module probe_module = {
    .iVersion = 1,
    .xCreate = probe_connect,
    .xConnect = probe_connect,
    .xBestIndex = probe_best_index,
    .xDisconnect = probe_disconnect,
    .xDestroy = probe_disconnect,
    .xOpen = probe_open,
    .xClose = probe_close,
    .xFilter = probe_filter,
    .xNext = probe_next,
    .xEof = probe_eof,
    .xColumn = probe_column,
    .xRowid = probe_rowid,
};

int pb__vt_probe_create(sqlite3 *conn, char **errmsg)
{
    int rc = sqlite3_create_module_v2(conn, "pb_probe_tables", &probe_module,
                                      (void *)(intptr_t)PROBE_TABLES, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_create_module_v2(conn, "pb_probe_config", &probe_module,
                                      (void *)(intptr_t)PROBE_CONFIG, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(conn,
                          "CREATE VIRTUAL TABLE probe.tables USING pb_probe_tables;"
                          "CREATE VIRTUAL TABLE probe.config USING pb_probe_config;",
                          NULL, NULL, errmsg);
    return rc;
}
