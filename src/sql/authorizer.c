/*
 * authorizer.c - probing's SQL is read-only; see authorizer.h.
 *
 * An allow-list, not a deny-list: an action SQLite adds in a later version is refused until
 * someone decides it is safe. sqlite3_stmt_readonly() in db.c is a second line for statements
 * that write without asking the authorizer (VACUUM).
 */
#include "authorizer.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Functions that read or write files, load code or change global state. SQLite's own library
 * has only load_extension and fts3_tokenizer; the rest come from the sqlite3 shell and
 * extensions and are listed in case the system library was built with them. */
static const char *const denied_functions[] = {
    "load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "lsmode", "sqlar_compress",
    "sqlar_uncompress", "zipfile", "fsdir", NULL,
};

static const char *const allowed_pragmas[] = {
    "table_info", "table_xinfo", "table_list", "function_list", "module_list", "database_list", NULL,
};

static int in_list(const char *const *list, const char *name)
{
    if (!name) return 0;
    for (int i = 0; list[i]; i++)
        if (strcasecmp(list[i], name) == 0) return 1;
    return 0;
}

static const char *action_name(int action)
{
    switch (action) {
    case SQLITE_CREATE_INDEX:
    case SQLITE_CREATE_TEMP_INDEX: return "CREATE INDEX";
    case SQLITE_CREATE_TABLE:
    case SQLITE_CREATE_TEMP_TABLE: return "CREATE TABLE";
    case SQLITE_CREATE_TRIGGER:
    case SQLITE_CREATE_TEMP_TRIGGER: return "CREATE TRIGGER";
    case SQLITE_CREATE_VIEW:
    case SQLITE_CREATE_TEMP_VIEW: return "CREATE VIEW";
    case SQLITE_CREATE_VTABLE: return "CREATE VIRTUAL TABLE";
    case SQLITE_DELETE: return "DELETE";
    case SQLITE_DROP_INDEX:
    case SQLITE_DROP_TEMP_INDEX: return "DROP INDEX";
    case SQLITE_DROP_TABLE:
    case SQLITE_DROP_TEMP_TABLE: return "DROP TABLE";
    case SQLITE_DROP_TRIGGER:
    case SQLITE_DROP_TEMP_TRIGGER: return "DROP TRIGGER";
    case SQLITE_DROP_VIEW:
    case SQLITE_DROP_TEMP_VIEW: return "DROP VIEW";
    case SQLITE_DROP_VTABLE: return "DROP VIRTUAL TABLE";
    case SQLITE_INSERT: return "INSERT";
    case SQLITE_UPDATE: return "UPDATE";
    case SQLITE_TRANSACTION: return "BEGIN/COMMIT/ROLLBACK";
    case SQLITE_SAVEPOINT: return "SAVEPOINT";
    case SQLITE_ATTACH: return "ATTACH";
    case SQLITE_DETACH: return "DETACH";
    case SQLITE_ALTER_TABLE: return "ALTER TABLE";
    case SQLITE_REINDEX: return "REINDEX";
    case SQLITE_ANALYZE: return "ANALYZE";
    default: return "this statement";
    }
}

static int is_schema_table(const char *name)
{
    return name && (strcmp(name, "sqlite_master") == 0 || strcmp(name, "sqlite_temp_master") == 0);
}

/* The file object named name, or NULL. */
static const pb__file_object *file_object(const pb__auth *auth, const char *name)
{
    for (size_t i = 0; name && i < auth->n_file_objects; i++)
        if (strcasecmp(auth->file_objects[i].name, name) == 0) return &auth->file_objects[i];
    return NULL;
}

int pb__authorize(void *ctx, int action, const char *arg1, const char *arg2, const char *dbname,
                  const char *trigger)
{
    pb__auth *auth = ctx;
    (void)dbname;
    /* A view is expanded where it is used: what it runs is asked for with its name as the
     * innermost view (trigger); a virtual table is read by name (arg1). */
    const pb__file_object *o = auth->n_file_objects ? file_object(auth, trigger) : NULL;
    if (!o && auth->n_file_objects && action == SQLITE_READ) o = file_object(auth, arg1);
    if (o) {
        snprintf(auth->reason, sizeof auth->reason, "%.60s is a %s defined by the recording "
                 "file: probing runs no SQL that a file brings", o->name,
                 o->is_view ? "view" : "virtual table");
        return SQLITE_DENY;
    }
    switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ:
    case SQLITE_RECURSIVE: return SQLITE_OK;
    case SQLITE_FUNCTION:
        /* arg2 is the function name (arg1 is unused for this action) */
        if (!in_list(denied_functions, arg2)) return SQLITE_OK;
        snprintf(auth->reason, sizeof auth->reason, "function %s() is not allowed", arg2);
        return SQLITE_DENY;
    case SQLITE_PRAGMA:
        if (in_list(allowed_pragmas, arg1)) return SQLITE_OK;
        snprintf(auth->reason, sizeof auth->reason,
                 "PRAGMA %s is not allowed; allowed: table_info, table_xinfo, table_list, "
                 "function_list, module_list, database_list",
                 arg1 ? arg1 : "?");
        return SQLITE_DENY;
    case SQLITE_UPDATE:
        /* Constructing an eponymous virtual table (json_each, pragma_table_info) asks for this
         * from inside sqlite3_declare_vtab(). User statements do not get here: direct writes to
         * the schema table are refused by defensive mode before the authorizer is asked, DDL is
         * denied at its own check first, and db.c refuses any statement that is not read-only. */
        if (is_schema_table(arg1)) return SQLITE_OK;
        break;
    default: break;
    }
    /* DDL asks to write sqlite_master before its own CREATE/DROP check: db.c then names the
     * statement instead of this INSERT/DELETE. */
    if ((action == SQLITE_INSERT || action == SQLITE_DELETE) && arg1 && strncmp(arg1, "sqlite_", 7) == 0)
        auth->schema_write = 1;
    snprintf(auth->reason, sizeof auth->reason, "%s is not allowed", action_name(action));
    return SQLITE_DENY;
}
