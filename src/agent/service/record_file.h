/*
 * record_file.h - what a recording file holds, written through an open SQLite connection: the
 * tables (one per registered table, plus `tables`, `info` and `run`), the `tables` catalogue,
 * and a ring row bound to a prepared INSERT (docs/recordings.md). The recorder (record.c) owns
 * the connection, the thread, the transactions and the locks; this unit only writes what it is
 * given and keeps nothing. [the recorder thread, or the thread that starts or stops a
 * recording, under record.c's locks; never takes the GIL]
 */
#ifndef PB_AGENT_RECORD_FILE_H
#define PB_AGENT_RECORD_FILE_H

#include <sqlite3.h>
#include <stdint.h>

#include "buf.h"
#include "registry.h"

/* Sets the journal (DELETE, synchronous=OFF), begins a transaction and in it creates the
 * tables, the `run` row (state 'running', started now, this pid, the current step) and the
 * `info` row (info: the /api/info body, "{}" when empty). The transaction is left open for
 * the caller to add the catalogue and commit. Returns an SQLite code. */
int pb_record_file_create(sqlite3 *conn, const pb_buf *info);

/* Rewrites the `tables` catalogue with rows[t] rows in the file and dropped[t] rows lost.
 * Inside a transaction. Returns an SQLite code. */
int pb_record_file_catalogue(sqlite3 *conn, const uint64_t *rows, const uint64_t *dropped);

/* Prepares one INSERT per registered table into insert[t] (persistent statements). Returns an
 * SQLite code. */
int pb_record_file_prepare_inserts(sqlite3 *conn, sqlite3_stmt **insert);

/* Binds every column of row (a ring row of tab) to st, in column order. Returns an SQLite code:
 * the first that is not SQLITE_OK. */
int pb_record_file_bind(sqlite3_stmt *st, const pb_table *tab, const unsigned char *row);

#endif
