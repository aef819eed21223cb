/*
 * vt_probe.c - probe.tables (the catalogue of recorded tables) and probe.config (settings).
 *
 * Both are tiny read-only virtual tables over data that is fixed after start-up (the registry,
 * the settings table); only the row counts of the rings move, so xFilter snapshots them once per
 * scan. The rows and columns come from catalog.c, which also writes them as JSON for
 * GET /api/tables.
 */
#include "vt.h"

#include "catalog.h"
#include "config.h"

#include <stdlib.h>
#include <string.h>

enum probe_kind { PROBE_TABLES, PROBE_CONFIG };

enum { TC_SCHEMA, TC_NAME, TC_DOC, TC_COLUMNS, TC_ROWS, TC_CAPACITY, TC_ROWS_DROPPED, TC_EMPTY_REASON };
enum { CC_NAME, CC_VALUE, CC_DEFAULT, CC_DOC };


typedef struct probe_vtab {
    sqlite3_vtab base;
    enum probe_kind kind;
} probe_vtab;

typedef struct probe_cursor {
    sqlite3_vtab_cursor base;
    enum probe_kind kind;
    int index, count;
    pb_catalog_counts *counts; /* PROBE_TABLES: one per table, taken at xFilter */
} probe_cursor;

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
    for (int i = 0; i < c->count; i++) pb_catalog_table_counts(pb_registry_get(i), &c->counts[i]);
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
    const pb_catalog_counts *n = &c->counts[c->index];
    switch (i) {
    case TC_SCHEMA: result_text(ctx, t->schema); break;
    case TC_NAME: result_text(ctx, t->name); break;
    case TC_DOC: result_text(ctx, t->doc); break;
    case TC_COLUMNS: {
        pb_buf json = PB_BUF_INIT;
        pb_jsonw w;
        pb_jsonw_init(&w, &json);
        if (pb_catalog_columns_json(&w, t)) {
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
