/*
 * vt.h - the virtual table modules of src/sql (internal).
 *
 * vt_ring.c turns any pb_table into a read-only virtual table; vt_probe.c provides
 * probe.tables and probe.config. pb_db_open() calls these before installing the authorizer.
 */
#ifndef PB_SQL_VT_H
#define PB_SQL_VT_H

#include "registry.h"

#include <sqlite3.h>

/* Registers a module for t (borrowed, must outlive conn) and creates <schema>.<name>, whose
 * schema must already be attached. Returns an SQLite result code; *errmsg (sqlite3_free) may
 * say why. */
int pb__vt_ring_create(sqlite3 *conn, pb_table *t, char **errmsg);

/* Creates probe.tables and probe.config ("probe" must be attached). Same returns. */
int pb__vt_probe_create(sqlite3 *conn, char **errmsg);

#endif
