/*
 * authorizer.h - the rule that keeps probing's SQL read-only (internal to src/sql).
 *
 * pb__authorize is installed with sqlite3_set_authorizer() once the virtual tables exist. It
 * allows SELECT, reading columns, recursive CTEs, functions other than the few that touch
 * files or load code, and introspection PRAGMAs; it denies the rest and leaves the reason in
 * the pb__auth it was given, so that the error a user sees says what was refused.
 */
#ifndef PB_SQL_AUTHORIZER_H
#define PB_SQL_AUTHORIZER_H

#include <stddef.h>

/* The SQL a recording file brings with it (its views, and its virtual tables, whose module
 * code runs on its data) is never run: a recording that probing writes has neither, and a
 * hostile one would cost its readers whatever its SQL costs. */
typedef struct pb__file_object {
    char *name;
    int is_view; /* else a virtual table */
} pb__file_object;

typedef struct pb__auth {
    char reason[192]; /* why the last denial happened, e.g. "ATTACH is not allowed" */
    int schema_write; /* the denial was a write to SQLite's own tables (sqlite_master...), which
                         DDL does before its own check: the statement's verb says more */
    pb__file_object *file_objects; /* a recording's views and virtual tables (owned by the
                                    * connection), refused wherever a statement reaches them */
    size_t n_file_objects;
} pb__auth;

/* The sqlite3_set_authorizer() callback; ctx is a pb__auth. [thread running the connection] */
int pb__authorize(void *ctx, int action, const char *arg1, const char *arg2, const char *dbname,
                  const char *trigger);

#endif
