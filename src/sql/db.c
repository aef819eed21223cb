/*
 * db.c - the SQL connection and the query-to-JSON loop; see db.h.
 *
 * pb_db_open: open ":memory:", turn off extension loading, ATTACH an empty in-memory database
 * per schema named in the registry (plus "probe"), create the virtual tables in them, cap
 * statement sizes, then install the authorizer; from that point the connection can only read.
 *
 * pb_db_query_json prepares exactly one statement, streams its rows as JSON into the caller's
 * pb_buf (no intermediate tree), and stops at the byte limit or the deadline. The deadline is
 * checked by a progress handler every few thousand VM instructions, which also covers long
 * scans inside the virtual tables (each row costs several instructions).
 */
#include "db.h"

#include "authorizer.h"
#include "clock.h"
#include "error.h"
#include "jsonw.h"
#include "log.h"
#include "registry.h"
#include "vt.h"

#include <ctype.h>
#include <stdatomic.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_SQL_BYTES (1 << 20)        /* longest statement text accepted */
#define MAX_VALUE_BYTES (64 << 20)     /* longest string or blob a query may build */
#define PROGRESS_EVERY 4096            /* VM instructions between deadline checks */

struct pb_db {
    sqlite3 *conn;
    pb__auth auth;       /* the authorizer's last reason for a denial */
    int64_t deadline_ns; /* pb_now_ns() after which the running query stops; 0 = none */
    int timed_out;       /* set by the progress handler when it interrupted the query */
    pb_db_cancel_fn cancelled; /* the running query's, or NULL */
    void *cancel_ctx;
    unsigned progress_calls;
    _Atomic int cancel_reason; /* PB_DB_CANCEL_*: why the query was stopped; 0 = it was not */
};

static int progress_handler(void *ctx)
{
    pb_db *db = ctx;
    if (db->deadline_ns && pb_now_ns() > db->deadline_ns) {
        db->timed_out = 1;
        return 1;
    }
    if (atomic_load(&db->cancel_reason)) return 1;
    /* The cancel check may make a system call (poll on the client's socket): 1 in 8. */
    if (db->cancelled && (++db->progress_calls & 7) == 0) {
        int why = db->cancelled(db->cancel_ctx);
        if (why) {
            atomic_store(&db->cancel_reason, why);
            return 1;
        }
    }
    return 0;
}

void pb_db_interrupt(pb_db *db)
{
    if (!db) return;
    atomic_store(&db->cancel_reason, PB_DB_CANCEL_EXITING);
    sqlite3_interrupt(db->conn);
}

/* Runs set-up SQL before the authorizer exists. Returns an SQLite result code. */
static int exec_setup(pb_db *db, const char *sql)
{
    char *err = NULL;
    int rc = sqlite3_exec(db->conn, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) pb_log_warn("SQL set-up failed: %s: %s", sql, err ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    return rc;
}

static int attach_schema(pb_db *db, const char *schema)
{
    if (strcmp(schema, "main") == 0 || strcmp(schema, "temp") == 0) return SQLITE_OK;
    char *sql = sqlite3_mprintf("ATTACH ':memory:' AS \"%w\"", schema);
    if (!sql) return SQLITE_NOMEM;
    int rc = exec_setup(db, sql);
    sqlite3_free(sql);
    return rc;
}

/* Opens db->conn, an in-memory database that can neither load extensions nor run triggers,
 * in defensive mode (no writes to its own schema) and trusting no schema: what both the live
 * tables and a recording are queried through. Returns an SQLite result code. */
static int open_memory(pb_db *db)
{
    int rc = sqlite3_open_v2(":memory:", &db->conn,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) return rc;
    sqlite3_extended_result_codes(db->conn, 1);
    sqlite3_db_config(db->conn, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, (int *)NULL);
    sqlite3_db_config(db->conn, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);
    sqlite3_db_config(db->conn, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)NULL);
    sqlite3_db_config(db->conn, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, (int *)NULL);
    return SQLITE_OK;
}

int pb_db_open(pb_db **out)
{
    int rc = SQLITE_OK;
    char *err = NULL;
    *out = NULL;
    pb_db *db = calloc(1, sizeof *db);
    if (!db) return -ENOMEM;

    if ((rc = open_memory(db)) != SQLITE_OK) goto fail;

    int ntables = pb_registry_count();
    for (int i = 0; i < ntables; i++) {
        const pb_table *t = pb_registry_get(i);
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = strcmp(pb_registry_get(j)->schema, t->schema) == 0;
        if (!seen && (rc = attach_schema(db, t->schema)) != SQLITE_OK) goto fail;
    }
    if ((rc = attach_schema(db, "probe")) != SQLITE_OK) goto fail;
    for (int i = 0; i < ntables; i++) {
        pb_table *t = pb_registry_get(i);
        if ((rc = pb__vt_ring_create(db->conn, t, &err)) != SQLITE_OK) {
            pb_log_warn("cannot create SQL table %s.%s: %s", t->schema, t->name,
                        err ? err : sqlite3_errstr(rc));
            goto fail;
        }
    }
    if ((rc = pb__vt_probe_create(db->conn, &err)) != SQLITE_OK) {
        pb_log_warn("cannot create probe.tables/probe.config: %s", err ? err : sqlite3_errstr(rc));
        goto fail;
    }

    sqlite3_limit(db->conn, SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_BYTES);
    sqlite3_limit(db->conn, SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES);
    sqlite3_limit(db->conn, SQLITE_LIMIT_ATTACHED, 0 /* lowering it never detaches */);
    sqlite3_progress_handler(db->conn, PROGRESS_EVERY, progress_handler, db);
    rc = sqlite3_set_authorizer(db->conn, pb__authorize, &db->auth);
    if (rc != SQLITE_OK) goto fail;
    *out = db;
    return 0;

fail:
    sqlite3_free(err);
    if (db->conn && rc != SQLITE_NOMEM)
        pb_log_warn("cannot set up the SQL engine: %s", sqlite3_errmsg(db->conn));
    sqlite3_close(db->conn);
    free(db);
    return (rc & 0xff) == SQLITE_NOMEM ? -ENOMEM : PB_ESQL;
}

#define MAX_FILE_OBJECTS 10000

static void free_file_objects(pb__auth *auth)
{
    for (size_t i = 0; i < auth->n_file_objects; i++) free(auth->file_objects[i].name);
    free(auth->file_objects);
    auth->file_objects = NULL;
    auth->n_file_objects = 0;
}

/* Lists the views and virtual tables of the file attached as python into db->auth, for the
 * authorizer to refuse (authorizer.h). Returns an SQLite result code; SQLITE_TOOBIG past
 * MAX_FILE_OBJECTS. [before the authorizer is installed] */
static int list_file_objects(pb_db *db)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db->conn, "SELECT name, type = 'view' FROM python.sqlite_master "
                                "WHERE type = 'view' OR (type = 'table' AND sql LIKE "
                                "'CREATE VIRTUAL TABLE%')", -1, &st, NULL);
    size_t cap = 0;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        pb__auth *a = &db->auth;
        if (a->n_file_objects == MAX_FILE_OBJECTS) {
            rc = SQLITE_TOOBIG;
            break;
        }
        if (a->n_file_objects == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            pb__file_object *grown = realloc(a->file_objects, ncap * sizeof *grown);
            if (!grown) {
                rc = SQLITE_NOMEM;
                break;
            }
            a->file_objects = grown;
            cap = ncap;
        }
        char *copy = strdup(name ? name : "");
        if (!copy) {
            rc = SQLITE_NOMEM;
            break;
        }
        a->file_objects[a->n_file_objects++] =
            (pb__file_object){copy, sqlite3_column_int(st, 1)};
        rc = SQLITE_OK;
    }
    if (rc == SQLITE_DONE) rc = SQLITE_OK;
    sqlite3_finalize(st);
    return rc;
}

int pb_db_open_file(const char *path, double timeout_s, pb_db **out, char *why, size_t whylen)
{
    static const char *const schemas[] = {"python", "system", "probe"};
    int rc;
    sqlite3_stmt *st = NULL;
    *out = NULL;
    pb_db *db = calloc(1, sizeof *db);
    if (!db) return -ENOMEM;
    if ((rc = open_memory(db)) != SQLITE_OK) goto fail;
    /* The file is not ours: the guards a live query runs under are in place before SQLite
     * reads a byte of it (its schema, its views), the check below included. */
    sqlite3_limit(db->conn, SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_BYTES);
    sqlite3_limit(db->conn, SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES);
    sqlite3_progress_handler(db->conn, PROGRESS_EVERY, progress_handler, db);
    if (timeout_s > 0) db->deadline_ns = pb_now_ns() + (int64_t)(timeout_s * 1e9);
    sqlite3_busy_timeout(db->conn, timeout_s > 0 && timeout_s < 10 ? (int)(timeout_s * 1000)
                                                                   : 10000); /* a flush */
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++) {
        char *sql = sqlite3_mprintf("ATTACH %Q AS \"%w\"", path, schemas[i]);
        if (!sql) {
            rc = SQLITE_NOMEM;
            goto fail;
        }
        rc = sqlite3_exec(db->conn, sql, NULL, NULL, NULL);
        sqlite3_free(sql);
        if (rc != SQLITE_OK) goto fail;
    }
    sqlite3_limit(db->conn, SQLITE_LIMIT_ATTACHED, 0);
    rc = list_file_objects(db);
    if (rc != SQLITE_OK) goto fail;
    rc = sqlite3_set_authorizer(db->conn, pb__authorize, &db->auth);
    if (rc != SQLITE_OK) goto fail;
    /* Reading the catalogue also rolls back a flush that a killed process left half done. */
    rc = sqlite3_prepare_v2(db->conn, "SELECT COUNT(*) FROM probe.tables, probe.info", -1, &st,
                            NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(st) == SQLITE_ROW ? SQLITE_OK : sqlite3_errcode(db->conn);
    sqlite3_finalize(st);
    if (rc != SQLITE_OK) goto fail;
    db->deadline_ns = 0;
    *out = db;
    return 0;

fail:
    if (db->timed_out)
        snprintf(why, whylen, "reading its catalogue (probe.tables, probe.info) ran longer "
                 "than %g s (PROBING_QUERY_TIMEOUT): the file is damaged or was built to hang "
                 "its readers", timeout_s);
    else if (rc == SQLITE_TOOBIG)
        snprintf(why, whylen, "it defines over %d views and virtual tables: not a recording "
                 "probing wrote", MAX_FILE_OBJECTS);
    else if (db->auth.reason[0])
        snprintf(why, whylen, "its catalogue needs what probing's SQL does not allow (%s)",
                 db->auth.reason);
    else
        snprintf(why, whylen, "%s", db->conn ? sqlite3_errmsg(db->conn) : sqlite3_errstr(rc));
    sqlite3_close(db->conn);
    free_file_objects(&db->auth);
    free(db);
    return (rc & 0xff) == SQLITE_NOMEM ? -ENOMEM : PB_ESQL;
}

void pb_db_close(pb_db *db)
{
    if (!db) return;
    sqlite3_close(db->conn); /* every statement is finalized by pb_db_query_json */
    free_file_objects(&db->auth);
    free(db);
}

/* Skips whitespace, semicolons and comments; returns the first other character. */
static const char *skip_filler(const char *p)
{
    for (;;) {
        while (*p && (isspace((unsigned char)*p) || *p == ';')) p++;
        if (p[0] == '-' && p[1] == '-') {
            const char *nl = strchr(p, '\n');
            if (!nl) return p + strlen(p);
            p = nl + 1;
        } else if (p[0] == '/' && p[1] == '*') {
            const char *end = strstr(p + 2, "*/");
            if (!end) return p + strlen(p); /* SQLite treats an open comment as running to the end */
            p = end + 2;
        } else {
            return p;
        }
    }
}

/* Replaces everything appended since `start` with {"error":msg,"offset":offset}. */
static int write_error(pb_buf *out, size_t start, size_t saved_max, const char *msg, int offset)
{
    out->len = start;
    if (out->data) out->data[start] = '\0';
    out->max_len = saved_max;
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    int rc = pb_jsonw_obj_begin(&w);
    if (!rc) rc = pb_jsonw_key(&w, "error");
    if (!rc) rc = pb_jsonw_str(&w, msg);
    if (!rc) rc = pb_jsonw_key(&w, "offset");
    if (!rc) rc = pb_jsonw_int(&w, offset);
    if (!rc) rc = pb_jsonw_obj_end(&w);
    return rc;
}

/* Writes the statement's leading keywords ("VACUUM", "CREATE TEMP VIEW") into out. */
static void statement_verb(const char *sql, char *out, size_t outlen)
{
    static const char *const modifiers[] = {"TEMP", "TEMPORARY", "VIRTUAL", "UNIQUE", NULL};
    const char *p = skip_filler(sql);
    size_t n = 0;
    int words = 0, more = 1;
    while (more && n + 1 < outlen) {
        const char *w = p;
        while (isalpha((unsigned char)*p)) p++;
        size_t len = (size_t)(p - w);
        if (len == 0) break;
        if (words && n + 1 < outlen) out[n++] = ' ';
        for (size_t i = 0; i < len && n + 1 < outlen; i++) out[n++] = (char)toupper((unsigned char)w[i]);
        out[n] = '\0';
        words++;
        if (words == 1) {
            more = strcmp(out, "CREATE") == 0 || strcmp(out, "DROP") == 0 || strcmp(out, "ALTER") == 0;
        } else {
            more = 0;
            for (int i = 0; modifiers[i]; i++)
                if (len == strlen(modifiers[i]) && strncasecmp(w, modifiers[i], len) == 0) more = 1;
        }
        while (isspace((unsigned char)*p)) p++;
    }
    out[n] = '\0';
    if (n == 0) snprintf(out, outlen, "this statement");
}

/* Edit distance of a and b (insert, delete, replace, swap of neighbours), capped at 9. */
static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 60 || lb > 60) return 9;
    int d[62][62];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int best = d[i - 1][j - 1] + (tolower((unsigned char)a[i - 1]) !=
                                          tolower((unsigned char)b[j - 1]));
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb] > 9 ? 9 : d[la][lb];
}

/* The table of probe.tables (and probe.tables, probe.config themselves) closest to missing
 * ("schema.name" or "name"), within 2 edits: written into out as schema.name; 0 when none. The
 * catalogue is read on the same connection (the failed statement is gone). */
static int closest_table(pb_db *db, const char *missing, char *out, size_t outlen)
{
    sqlite3_stmt *st = NULL;
    int best = 3, qualified = strchr(missing, '.') != NULL;
    char auth_reason[sizeof db->auth.reason];
    memcpy(auth_reason, db->auth.reason, sizeof auth_reason);
    if (sqlite3_prepare_v2(db->conn, "SELECT schema, name FROM probe.tables UNION "
                           "SELECT 'probe', 'tables' UNION SELECT 'probe', 'config'", -1, &st,
                           NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *schema = (const char *)sqlite3_column_text(st, 0);
            const char *name = (const char *)sqlite3_column_text(st, 1);
            char full[160];
            if (!schema || !name) continue;
            snprintf(full, sizeof full, "%s.%s", schema, name);
            int d = edit_distance(missing, qualified ? full : name);
            if (d < best) {
                best = d;
                snprintf(out, outlen, "%s", full);
            }
        }
    }
    sqlite3_finalize(st);
    memcpy(db->auth.reason, auth_reason, sizeof auth_reason);
    return best < 3;
}

/* The message for an SQLite error on db, and its byte offset in the SQL (or -1). */
static void describe_sqlite_error(pb_db *db, const char *sql, char *msg, size_t msglen, int *offset)
{
    char text[512]; /* a copy: looking up a table name below runs another statement */
    snprintf(text, sizeof text, "%s", sqlite3_errmsg(db->conn));
    *offset = sqlite3_error_offset(db->conn);
    if (db->auth.reason[0]) {
        char verb[64];
        statement_verb(sql, verb, sizeof verb);
        if (db->auth.schema_write)
            snprintf(msg, msglen, "not authorized: probing's SQL is read-only (%s is not allowed)", verb);
        else
            snprintf(msg, msglen, "not authorized: probing's SQL is read-only (%s)", db->auth.reason);
        return;
    }
    if (strstr(text, "may not be modified")) { /* UPDATE/DELETE of a virtual table */
        snprintf(msg, msglen, "not authorized: probing's SQL is read-only (%s)", text);
        return;
    }
    int code = sqlite3_errcode(db->conn);
    if (code == SQLITE_TOOBIG) {
        snprintf(msg, msglen,
                 "%s: a statement may be at most %d MB and a string or blob value at most %d MB; "
                 "these are fixed limits of probing's SQL (no setting changes them): build "
                 "smaller values, e.g. with substr()",
                 text, MAX_SQL_BYTES >> 20, MAX_VALUE_BYTES >> 20);
        return;
    }
    char hint[320] = "";
    if (strncmp(text, "no such table: ", 15) == 0) {
        char missing[128], guess[160];
        snprintf(missing, sizeof missing, "%.127s", text + 15);
        if (closest_table(db, missing, guess, sizeof guess))
            snprintf(hint, sizeof hint, "; did you mean %s? (SELECT schema, name FROM "
                     "probe.tables lists the tables)", guess);
        else
            snprintf(hint, sizeof hint, "; SELECT schema, name FROM probe.tables lists the "
                     "tables");
    }
    if (*offset >= 0)
        snprintf(msg, msglen, "SQL error near offset %d: %s%s", *offset, text, hint);
    else
        snprintf(msg, msglen, "%s%s", text, hint);
}

static int write_value(pb_jsonw *w, sqlite3_stmt *stmt, int i)
{
    switch (sqlite3_column_type(stmt, i)) {
    case SQLITE_INTEGER: return pb_jsonw_int(w, sqlite3_column_int64(stmt, i));
    case SQLITE_FLOAT: return pb_jsonw_double(w, sqlite3_column_double(stmt, i));
    case SQLITE_TEXT: {
        const char *s = (const char *)sqlite3_column_text(stmt, i);
        if (!s) return -ENOMEM;
        return pb_jsonw_strn(w, s, (size_t)sqlite3_column_bytes(stmt, i));
    }
    case SQLITE_BLOB: {
        char text[48];
        snprintf(text, sizeof text, "<blob %d bytes>", sqlite3_column_bytes(stmt, i));
        return pb_jsonw_str(w, text);
    }
    default: return pb_jsonw_null(w);
    }
}

int pb_db_query_json(pb_db *db, const char *sql, const pb_query_limits *lim, pb_buf *out)
{
    sqlite3_stmt *stmt = NULL;
    const char *tail = NULL;
    const size_t start = out->len, saved_max = out->max_len;
    char msg[768];
    int offset = -1, rc, err = PB_ESQL;
    int64_t row_count = 0;
    int truncated = 0;

    db->auth.reason[0] = '\0';
    db->auth.schema_write = 0;
    db->timed_out = 0;
    db->deadline_ns = 0;
    db->cancelled = lim ? lim->cancelled : NULL;
    db->cancel_ctx = lim ? lim->cancel_ctx : NULL;
    db->progress_calls = 0;
    /* A client that left took its query with it; the agent stopping (pb_db_interrupt) stays. */
    int gone = PB_DB_CANCEL_CLIENT_GONE;
    atomic_compare_exchange_strong(&db->cancel_reason, &gone, 0);
    if (lim && lim->timeout_s > 0) db->deadline_ns = pb_now_ns() + (int64_t)(lim->timeout_s * 1e9);

    rc = sqlite3_prepare_v3(db->conn, sql, -1, 0, &stmt, &tail);
    if (rc != SQLITE_OK) {
        describe_sqlite_error(db, sql, msg, sizeof msg, &offset);
        goto fail;
    }
    if (!stmt) {
        snprintf(msg, sizeof msg, "empty query: there is no SQL statement to run");
        goto fail;
    }
    const char *rest = skip_filler(tail);
    if (*rest) {
        offset = (int)(rest - sql);
        snprintf(msg, sizeof msg,
                 "only one statement per query: a second statement starts at offset %d", offset);
        goto fail;
    }
    if (!sqlite3_stmt_readonly(stmt)) { /* VACUUM [INTO file] writes without asking the authorizer */
        char verb[64];
        statement_verb(sql, verb, sizeof verb);
        snprintf(msg, sizeof msg, "not authorized: probing's SQL is read-only (%s is not allowed)", verb);
        goto fail;
    }

    pb_jsonw w;
    pb_jsonw_init(&w, out);
    int ncols = sqlite3_column_count(stmt);
    rc = pb_jsonw_obj_begin(&w);
    if (!rc) rc = pb_jsonw_key(&w, "columns");
    if (!rc) rc = pb_jsonw_arr_begin(&w);
    for (int i = 0; !rc && i < ncols; i++) rc = pb_jsonw_str(&w, sqlite3_column_name(stmt, i));
    if (!rc) rc = pb_jsonw_arr_end(&w);
    if (!rc) rc = pb_jsonw_key(&w, "rows");
    if (!rc) rc = pb_jsonw_arr_begin(&w);
    if (rc) goto fail_nomem;

    /* Rows are written under a byte cap; the row that crosses it is taken back. */
    size_t rows_cap = 0;
    if (lim && lim->max_result_bytes) {
        rows_cap = out->len + lim->max_result_bytes;
        if (saved_max && saved_max < rows_cap) rows_cap = saved_max;
    } else {
        rows_cap = saved_max;
    }
    for (;;) {
        int step = sqlite3_step(stmt);
        if (step == SQLITE_DONE) break;
        if (step != SQLITE_ROW) {
            int why = atomic_load(&db->cancel_reason);
            if (db->timed_out) {
                err = PB_ETIMEOUT;
                snprintf(msg, sizeof msg,
                         "query interrupted: it ran longer than the %g s limit (PROBING_QUERY_TIMEOUT); "
                         "narrow it with WHERE or LIMIT, or set PROBING_QUERY_TIMEOUT=<seconds> in the "
                         "%s environment",
                         lim->timeout_s, lim->recording ? "probing command's" : "traced process's");
            } else if (why) {
                err = PB_ECANCELLED;
                snprintf(msg, sizeof msg, "%s",
                         why == PB_DB_CANCEL_CLIENT_GONE
                             ? "query cancelled: the client closed its connection"
                             : "query cancelled: the process is exiting or probing is detaching");
            } else {
                describe_sqlite_error(db, sql, msg, sizeof msg, &offset);
            }
            goto fail;
        }
        pb_jsonw_mark mark = pb_jsonw_save(&w);
        out->max_len = rows_cap;
        rc = pb_jsonw_arr_begin(&w);
        for (int i = 0; !rc && i < ncols; i++) rc = write_value(&w, stmt, i);
        if (!rc) rc = pb_jsonw_arr_end(&w);
        out->max_len = saved_max;
        if (rc == PB_ETOOBIG && rows_cap != saved_max) {
            pb_jsonw_restore(&w, mark); /* the row that crossed the cap, and its error */
            truncated = 1;
            break;
        }
        if (rc) goto fail_nomem;
        row_count++;
    }
    sqlite3_finalize(stmt);
    stmt = NULL;

    rc = pb_jsonw_arr_end(&w);
    if (!rc) rc = pb_jsonw_key(&w, "row_count");
    if (!rc) rc = pb_jsonw_int(&w, row_count);
    if (!rc) rc = pb_jsonw_key(&w, "truncated");
    if (!rc) rc = pb_jsonw_bool(&w, truncated);
    if (!rc && truncated) {
        char size[32];
        pb_buf_format_bytes(size, sizeof size, lim->max_result_bytes);
        snprintf(msg, sizeof msg,
                 "result truncated: %lld rows returned before it hit the %s limit "
                 "(PROBING_MAX_RESULT_MB); add LIMIT or a WHERE clause to fetch fewer rows, or "
                 "set PROBING_MAX_RESULT_MB=<megabytes> in the traced process's environment",
                 (long long)row_count, size);
        rc = pb_jsonw_key(&w, "message");
        if (!rc) rc = pb_jsonw_str(&w, msg);
    }
    if (!rc) rc = pb_jsonw_obj_end(&w);
    if (rc) goto fail_nomem;
    db->deadline_ns = 0;
    db->cancelled = NULL;
    return 0;

fail_nomem:
    snprintf(msg, sizeof msg, "out of memory while writing the result");
    offset = -1;
    err = rc == PB_ETOOBIG ? PB_ETOOBIG : -ENOMEM;
fail:
    sqlite3_finalize(stmt);
    db->deadline_ns = 0;
    db->cancelled = NULL;
    if (write_error(out, start, saved_max, msg, offset)) return -ENOMEM;
    return err;
}
