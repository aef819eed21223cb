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

typedef struct pb__auth {
    char reason[192]; /* why the last denial happened, e.g. "ATTACH is not allowed" */
    int schema_write; /* the denial was a write to SQLite's own tables (sqlite_master...), which
                         DDL does before its own check: the statement's verb says more */
} pb__auth;

/* The sqlite3_set_authorizer() callback; ctx is a pb__auth. [thread running the connection] */
int pb__authorize(void *ctx, int action, const char *arg1, const char *arg2, const char *dbname,
                  const char *trigger);

#endif
