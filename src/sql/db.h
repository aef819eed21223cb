/*
 * db.h - probing's SQL engine: one SQLite connection that sees every recorded table.
 *
 * pb_db_open() builds an in-memory connection in which every pb_table of the registry is a
 * read-only virtual table named <schema>.<name> (python.torch_trace), next to probe.tables (the
 * catalogue) and probe.config (the settings). An authorizer then makes the connection
 * read-only for good: SELECT (with CTEs, window and JSON functions) and a few introspection
 * PRAGMAs pass, everything that could write, attach files or load code is refused.
 *
 * The HTTP server keeps a small pool of these, one per concurrently running query. A pb_db is
 * used by one thread at a time; different pb_db may run on different threads concurrently (the
 * rings they read are lock-free). Queries never need the GIL.
 *
 * SQLite is the system library. Nothing here changes SQLite's process-wide settings
 * (sqlite3_config, soft heap limits): the traced Python process may use SQLite itself.
 */
#ifndef PB_SQL_DB_H
#define PB_SQL_DB_H

#include "buf.h"
#include "jsonw.h"
#include "registry.h"

#include <stddef.h>

typedef struct pb_db pb_db;

/* Asked every few thousand VM instructions while a query runs: non-zero stops it with
 * PB_ECANCELLED, the value naming why (PB_DB_CANCEL_*). [the query's thread] */
typedef int (*pb_db_cancel_fn)(void *ctx);

#define PB_DB_CANCEL_CLIENT_GONE 1 /* the client closed its connection */
#define PB_DB_CANCEL_EXITING 2     /* the agent is stopping (the process exits or detaches) */

typedef struct pb_query_limits {
    size_t max_result_bytes; /* rows beyond this many bytes of JSON are cut (0 = no limit) */
    double timeout_s;        /* a query running longer is interrupted (<= 0 = no limit) */
    pb_db_cancel_fn cancelled; /* NULL: never cancelled */
    void *cancel_ctx;
    int recording; /* the db is a recording: messages point at the CLI's environment */
} pb_query_limits;

/* Opens a connection over the tables registered now (tables added later are not seen by it).
 * *out is owned by the caller (pb_db_close). Returns 0, -ENOMEM or PB_ESQL (SQLite refused
 * part of the set-up; the reason was logged). [any thread, registry complete] */
int pb_db_open(pb_db **out);

/* Opens a recording (the SQLite file written by the agent's recorder, PROBING_RECORD) for
 * queries under the same names as live: the file is attached as python, system and probe, so
 * python.torch_trace, probe.tables and probe.info resolve to its tables. Opened read-write when
 * the file allows it (so SQLite can roll back a flush a killed process left half done); the
 * authorizer keeps every query read-only. The file may be hostile (views that never end, huge
 * values): the authorizer, the size limits and the progress handler are installed before its
 * first statement, and the check that it is a recording (a read of probe.tables and
 * probe.info) stops after timeout_s (<= 0: no limit). On failure writes the reason into why and
 * returns -ENOMEM or PB_ESQL (not a SQLite file, not a recording, the check ran too long).
 * Needs no registry. [one thread] */
int pb_db_open_file(const char *path, double timeout_s, pb_db **out, char *why, size_t whylen);

/* Closes the connection. NULL-safe. [thread that last used it] */
void pb_db_close(pb_db *db);

/* Runs one read-only statement and appends the /api/query response body to out:
 *   {"columns":[...],"rows":[[...],...],"row_count":n,"truncated":false}
 * with "truncated":true and a "message" when the rows hit lim->max_result_bytes.
 * Values: INTEGER -> integer, REAL -> number (non-finite -> null), TEXT -> string,
 * BLOB -> "<blob N bytes>", NULL -> null.
 *
 * Returns 0, or on failure replaces what it appended with {"error":"...","offset":n} (offset:
 * byte offset of the error in sql, or -1) and returns
 *   PB_ESQL     the statement is invalid, not allowed (not read-only, more than one statement)
 *               or failed while running;
 *   PB_ETIMEOUT it ran longer than lim->timeout_s and was interrupted;
 *   PB_ECANCELLED lim->cancelled asked it to stop (the message says why);
 *   -ENOMEM     (out may then hold nothing).
 * sql is borrowed; lim may be NULL (no limits). [one thread at a time per db] */
int pb_db_query_json(pb_db *db, const char *sql, const pb_query_limits *lim, pb_buf *out);

/* Stops the query running on db as soon as SQLite looks (sqlite3_interrupt); it then returns
 * PB_ECANCELLED "the process is exiting". [any thread, while db is open] */
void pb_db_interrupt(pb_db *db);

#endif
