/*
 * record_file.c - what a recording file holds: its tables, the `tables` catalogue, and a ring
 * row bound to a prepared INSERT (record_file.h, docs/recordings.md).
 *
 * Every function writes through the connection it is given and keeps no state: the recorder
 * (record.c) owns the connection, the prepared statements, the transactions and the locks, and
 * calls these from the recorder thread or from the thread that starts a recording (under
 * control_lock). Nothing here takes the GIL.
 */
#include "record_file.h"

#include "catalog.h"
#include "clock.h"
#include "jsonw.h"
#include "step.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int exec(sqlite3 *conn, const char *sql)
{
    return sqlite3_exec(conn, sql, NULL, NULL, NULL);
}

int pb_record_file_create(sqlite3 *conn, const pb_buf *info)
{
    pb_buf sql = PB_BUF_INIT;
    int rc = exec(conn, "PRAGMA journal_mode=DELETE; PRAGMA synchronous=OFF; BEGIN;"
                        "CREATE TABLE tables(schema TEXT, name TEXT, doc TEXT, columns TEXT, "
                        "rows INTEGER, capacity INTEGER, rows_dropped INTEGER, empty_reason TEXT);"
                        "CREATE TABLE info(json TEXT);"
                        "CREATE TABLE run(state TEXT, status INTEGER, exception_type TEXT, "
                        "message TEXT, stack TEXT, last_step INTEGER, started_unix REAL, "
                        "ended_unix REAL, pid INTEGER, note TEXT, started_step INTEGER);");
    if (rc == SQLITE_OK) {
        char insert_run[256];
        snprintf(insert_run, sizeof insert_run, "INSERT INTO run(state, started_unix, pid, "
                 "started_step) VALUES ('running', %.6f, %ld, %lld)", (double)pb_wall_ns() / 1e9,
                 (long)getpid(), (long long)pb_step_current());
        rc = exec(conn, insert_run);
    }
    for (int t = 0; rc == SQLITE_OK && t < pb_registry_count(); t++) {
        const pb_table *tab = pb_registry_get(t);
        sql.len = 0;
        int e = pb_buf_printf(&sql, "CREATE TABLE \"%s\"(", tab->name);
        for (int c = 0; !e && c < tab->ncolumns; c++)
            e = pb_buf_printf(&sql, "%s\"%s\" %s", c ? ", " : "", tab->columns[c].name,
                              tab->columns[c].kind == PB_COL_ENUM_U8
                                  ? "TEXT" : pb_col_sql_type(tab->columns[c].kind));
        if (!e) e = pb_buf_puts(&sql, ")");
        if (!e) e = pb_buf_putc(&sql, '\0');
        rc = e ? SQLITE_NOMEM : exec(conn, sql.data);
    }
    pb_buf_free(&sql);
    if (rc == SQLITE_OK) {
        sqlite3_stmt *st = NULL;
        rc = sqlite3_prepare_v2(conn, "INSERT INTO info VALUES (?)", -1, &st, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_text(st, 1, info->data ? info->data : "{}", (int)info->len,
                              SQLITE_STATIC);
            rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(conn);
        }
        sqlite3_finalize(st);
    }
    return rc;
}

int pb_record_file_catalogue(sqlite3 *conn, const uint64_t *rows, const uint64_t *dropped)
{
    sqlite3_stmt *st = NULL;
    pb_buf cols = PB_BUF_INIT;
    int rc = sqlite3_exec(conn, "DELETE FROM tables", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(conn, "INSERT INTO tables VALUES (?,?,?,?,?,?,?,?)", -1, &st, NULL);
    for (int t = 0; rc == SQLITE_OK && t < pb_registry_count(); t++) {
        const pb_table *tab = pb_registry_get(t);
        pb_jsonw w;
        cols.len = 0;
        pb_jsonw_init(&w, &cols);
        if (pb_catalog_columns_json(&w, tab) || pb_buf_putc(&cols, '\0')) {
            rc = SQLITE_NOMEM;
            break;
        }
        sqlite3_bind_text(st, 1, tab->schema, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, tab->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, tab->doc, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, cols.data, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, (sqlite3_int64)rows[t]);
        sqlite3_bind_int64(st, 6, (sqlite3_int64)pb_ring_capacity(tab->ring));
        sqlite3_bind_int64(st, 7, (sqlite3_int64)dropped[t]);
        if (tab->empty_reason) sqlite3_bind_text(st, 8, tab->empty_reason, -1, SQLITE_STATIC);
        else sqlite3_bind_null(st, 8);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    pb_buf_free(&cols);
    return rc;
}

int pb_record_file_prepare_inserts(sqlite3 *conn, sqlite3_stmt **insert)
{
    pb_buf sql = PB_BUF_INIT;
    int rc = SQLITE_OK;
    for (int t = 0; rc == SQLITE_OK && t < pb_registry_count(); t++) {
        const pb_table *tab = pb_registry_get(t);
        sql.len = 0;
        int e = pb_buf_printf(&sql, "INSERT INTO \"%s\" VALUES (", tab->name);
        for (int c = 0; !e && c < tab->ncolumns; c++) e = pb_buf_puts(&sql, c ? ",?" : "?");
        if (!e) e = pb_buf_puts(&sql, ")");
        if (!e) e = pb_buf_putc(&sql, '\0');
        rc = e ? SQLITE_NOMEM
               : sqlite3_prepare_v3(conn, sql.data, -1, SQLITE_PREPARE_PERSISTENT, &insert[t],
                                    NULL);
    }
    pb_buf_free(&sql);
    return rc;
}

static int bind_column(sqlite3_stmt *st, int i, const pb_column *col, const unsigned char *row)
{
    pb_cell v;
    pb_column_decode(col, row, -1, &v);
    switch (v.type) {
    case PB_CELL_INT: return sqlite3_bind_int64(st, i, v.i);
    case PB_CELL_REAL: return sqlite3_bind_double(st, i, v.d);
    case PB_CELL_TEXT: return sqlite3_bind_text(st, i, v.s, -1, SQLITE_STATIC);
    case PB_CELL_NULL: return sqlite3_bind_null(st, i);
    }
    return SQLITE_MISUSE;
}

int pb_record_file_bind(sqlite3_stmt *st, const pb_table *tab, const unsigned char *row)
{
    int rc = SQLITE_OK;
    for (int c = 0; rc == SQLITE_OK && c < tab->ncolumns; c++) rc = bind_column(st, c + 1, &tab->columns[c], row);
    return rc;
}
