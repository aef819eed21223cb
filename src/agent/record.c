/*
 * record.c - the recorder: copies every table's new ring rows into a SQLite file.
 *
 * File layout: one SQLite database; each registered table <schema>.<name> is a plain table
 * <name> with the same columns (table names are unique across schemas), plus `tables` (the
 * probe.tables catalogue as of the last flush) and `info` (the /api/info body at start). The
 * CLI attaches the file under the names python, system and probe, so the same SQL runs on a
 * recording and on a live process (docs/recordings.md).
 *
 * A background thread wakes every TICK_MS and flushes when PROBING_RECORD_FLUSH_MS has passed
 * or when a ring has filled a quarter of its capacity since the last flush, so rows are copied
 * before the ring overwrites them. A flush reads rows [last flushed, head) with pb_ring_read
 * (lock-free, never blocks a writer, no GIL) and inserts them in one transaction. Rows that were
 * overwritten before a flush reached them are counted in tables.rows_dropped.
 *
 * Journal: the default rollback journal (DELETE) with synchronous=OFF. Each flush is one
 * transaction; after the process dies (SIGKILL, crash) at worst the transaction in progress is
 * rolled back by the next reader (the CLI opens the file read-write so SQLite can do that, and
 * its authorizer keeps queries read-only). synchronous=OFF survives any death of the process
 * (the OS still holds the written pages), not an OS crash; it keeps the flush thread off fsync.
 * WAL was not chosen: a reader of a WAL file needs write access to its -shm file, and a copy
 * of the .db alone would miss what is still in the -wal.
 *
 * Errors (disk full, unwritable path): one warning on stderr, the recorder stops; training
 * goes on untouched.
 */
#include "record.h"

#include "clock.h"
#include "config.h"
#include "intern.h"
#include "jsonw.h"
#include "log.h"
#include "registry.h"
#include "vt.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS 50
#define BUSY_TIMEOUT_MS 10000 /* a CLI reading the file holds a shared lock for a query */

static sqlite3 *conn;
static pthread_t thread;
static int running;
static pid_t owner_pid;
static atomic_int stop_requested;
static atomic_int sigterm_seen;
static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t flushed_to[PB_REGISTRY_MAX];   /* next ring index to copy, per table */
static uint64_t lost[PB_REGISTRY_MAX];         /* rows overwritten before a flush */
static uint64_t written[PB_REGISTRY_MAX];
static sqlite3_stmt *insert[PB_REGISTRY_MAX];
static char path[4096];
static int64_t flush_every_ns;
static int failed;

static void fail_once(const char *what)
{
    if (failed) return;
    failed = 1;
    pb_log_warn("recording to %s stopped: %s: %s; training goes on", path, what,
                conn ? sqlite3_errmsg(conn) : "cannot open");
}

static int exec(const char *sql)
{
    return sqlite3_exec(conn, sql, NULL, NULL, NULL);
}

static int bind_column(sqlite3_stmt *st, int i, const pb_column *col, const unsigned char *row)
{
    const unsigned char *p = row + col->offset;
    switch (col->kind) {
    case PB_COL_I64: { int64_t v; memcpy(&v, p, sizeof v); return sqlite3_bind_int64(st, i, v); }
    case PB_COL_I32: { int32_t v; memcpy(&v, p, sizeof v); return sqlite3_bind_int64(st, i, v); }
    case PB_COL_U32: { uint32_t v; memcpy(&v, p, sizeof v); return sqlite3_bind_int64(st, i, v); }
    case PB_COL_U16: { uint16_t v; memcpy(&v, p, sizeof v); return sqlite3_bind_int64(st, i, v); }
    case PB_COL_U8: return sqlite3_bind_int64(st, i, *p);
    case PB_COL_F64: { double v; memcpy(&v, p, sizeof v); return sqlite3_bind_double(st, i, v); }
    case PB_COL_F32: { float v; memcpy(&v, p, sizeof v); return sqlite3_bind_double(st, i, v); }
    case PB_COL_NS_SEC: { int64_t v; memcpy(&v, p, sizeof v); return sqlite3_bind_double(st, i, (double)v / 1e9); }
    case PB_COL_NS_MS: { int64_t v; memcpy(&v, p, sizeof v); return sqlite3_bind_double(st, i, (double)v / 1e6); }
    case PB_COL_STR_ID: {
        uint32_t id;
        memcpy(&id, p, sizeof id);
        return sqlite3_bind_text(st, i, pb_intern_get(id), -1, SQLITE_STATIC);
    }
    case PB_COL_STR_ID_NULL: {
        uint32_t id;
        memcpy(&id, p, sizeof id);
        if (!id) return sqlite3_bind_null(st, i);
        return sqlite3_bind_text(st, i, pb_intern_get(id), -1, SQLITE_STATIC);
    }
    case PB_COL_I64_NULL: {
        int64_t v;
        memcpy(&v, p, sizeof v);
        return v == INT64_MIN ? sqlite3_bind_null(st, i) : sqlite3_bind_int64(st, i, v);
    }
    case PB_COL_ENUM_U8: {
        int n = 0;
        while (col->enum_names[n]) n++;
        if (*p < n) return sqlite3_bind_text(st, i, col->enum_names[*p], -1, SQLITE_STATIC);
        return sqlite3_bind_int64(st, i, *p);
    }
    }
    return SQLITE_MISUSE;
}

/* Rewrites the `tables` catalogue. Inside the flush transaction. */
static int write_catalogue(void)
{
    sqlite3_stmt *st = NULL;
    pb_buf cols = PB_BUF_INIT;
    int rc = exec("DELETE FROM tables");
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(conn, "INSERT INTO tables VALUES (?,?,?,?,?,?,?,?)", -1, &st, NULL);
    for (int t = 0; rc == SQLITE_OK && t < pb_registry_count(); t++) {
        const pb_table *tab = pb_registry_get(t);
        pb_jsonw w;
        cols.len = 0;
        pb_jsonw_init(&w, &cols);
        if (pb__table_columns_json(&w, tab) || pb_buf_putc(&cols, '\0')) {
            rc = SQLITE_NOMEM;
            break;
        }
        sqlite3_bind_text(st, 1, tab->schema, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, tab->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, tab->doc, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, cols.data, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, (sqlite3_int64)written[t]);
        sqlite3_bind_int64(st, 6, (sqlite3_int64)pb_ring_capacity(tab->ring));
        sqlite3_bind_int64(st, 7, (sqlite3_int64)lost[t]);
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

/* Copies the rows added since the last flush. Returns an SQLite code. [recorder thread, or
 * the exiting thread once the recorder is stopped] */
static int flush(void)
{
    unsigned char rowbuf[1024];
    int rc = SQLITE_OK;
    pthread_mutex_lock(&flush_lock);
    if (failed || !conn) goto done;
    /* Heads are read newest table first: collectors register per-step summaries (python.steps)
     * after the tables their rows sum up, so a step row in this flush finds all its module rows
     * in it too. */
    uint64_t heads[PB_REGISTRY_MAX];
    for (int t = pb_registry_count() - 1; t >= 0; t--) heads[t] = pb_ring_head(pb_registry_get(t)->ring);
    rc = exec("BEGIN");
    for (int t = 0; rc == SQLITE_OK && t < pb_registry_count(); t++) {
        const pb_table *tab = pb_registry_get(t);
        uint64_t head = heads[t], first = pb_ring_first(tab->ring);
        if (tab->row_size > sizeof rowbuf) continue;
        if (flushed_to[t] < first) {
            lost[t] += first - flushed_to[t];
            flushed_to[t] = first;
        }
        for (uint64_t i = flushed_to[t]; rc == SQLITE_OK && i < head; i++) {
            if (!pb_ring_read(tab->ring, i, rowbuf)) {
                /* not yet published: stop here and take it next time, unless it is gone */
                if (i < pb_ring_first(tab->ring)) {
                    lost[t]++;
                    flushed_to[t] = i + 1;
                    continue;
                }
                break;
            }
            for (int c = 0; rc == SQLITE_OK && c < tab->ncolumns; c++)
                rc = bind_column(insert[t], c + 1, &tab->columns[c], rowbuf);
            if (rc == SQLITE_OK) rc = sqlite3_step(insert[t]);
            rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
            sqlite3_reset(insert[t]);
            if (rc == SQLITE_OK) {
                flushed_to[t] = i + 1;
                written[t]++;
            }
        }
    }
    if (rc == SQLITE_OK) rc = write_catalogue();
    if (rc == SQLITE_OK) rc = exec("COMMIT");
    if (rc != SQLITE_OK) {
        fail_once("cannot write");
        exec("ROLLBACK");
    }
done:
    pthread_mutex_unlock(&flush_lock);
    return rc;
}

static int rows_pending_high(void)
{
    for (int t = 0; t < pb_registry_count(); t++) {
        const pb_table *tab = pb_registry_get(t);
        if (pb_ring_head(tab->ring) - flushed_to[t] > pb_ring_capacity(tab->ring) / 4) return 1;
    }
    return 0;
}

static void *recorder_main(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals go to the program's threads */
    int64_t last = pb_now_ns();
    while (!atomic_load(&stop_requested)) {
        struct timespec tick = {0, TICK_MS * 1000000L};
        nanosleep(&tick, NULL);
        if (atomic_load(&sigterm_seen)) {
            flush();
            signal(SIGTERM, SIG_DFL);
            kill(getpid(), SIGTERM);
            break;
        }
        if (pb_now_ns() - last >= flush_every_ns || rows_pending_high()) {
            flush();
            last = pb_now_ns();
        }
    }
    return NULL;
}

/* [async-signal-safe] The recorder thread flushes, restores the default action and re-sends
 * SIGTERM, so the process ends as it would have without probing, a tick later. */
static void on_sigterm(int sig)
{
    (void)sig;
    atomic_store(&sigterm_seen, 1);
}

static void at_exit(void)
{
    if (getpid() != owner_pid) return; /* a fork()ed child (DataLoader worker) */
    pb_record_stop();
}

static int create_schema(const pb_buf *info)
{
    pb_buf sql = PB_BUF_INIT;
    int rc = exec("PRAGMA journal_mode=DELETE; PRAGMA synchronous=OFF; BEGIN;"
                  "CREATE TABLE tables(schema TEXT, name TEXT, doc TEXT, columns TEXT, "
                  "rows INTEGER, capacity INTEGER, rows_dropped INTEGER, empty_reason TEXT);"
                  "CREATE TABLE info(json TEXT);");
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
        rc = e ? SQLITE_NOMEM : exec(sql.data);
        sql.len = 0;
        e = pb_buf_printf(&sql, "INSERT INTO \"%s\" VALUES (", tab->name);
        for (int c = 0; !e && c < tab->ncolumns; c++) e = pb_buf_puts(&sql, c ? ",?" : "?");
        if (!e) e = pb_buf_puts(&sql, ")");
        if (!e) e = pb_buf_putc(&sql, '\0');
        if (rc == SQLITE_OK)
            rc = e ? SQLITE_NOMEM
                   : sqlite3_prepare_v3(conn, sql.data, -1, SQLITE_PREPARE_PERSISTENT, &insert[t],
                                        NULL);
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
    if (rc == SQLITE_OK) rc = write_catalogue();
    if (rc == SQLITE_OK) rc = exec("COMMIT");
    return rc;
}

void pb_record_start(const pb_buf *info)
{
    static int atexit_registered;
    const char *p = pb_config_str("PROBING_RECORD");
    if (!p || !*p || running) return;
    const char *owner = pb_config_str("PROBING_RECORD_PID");
    if (owner && *owner && atol(owner) != (long)getpid())
        snprintf(path, sizeof path, "%s.%ld", p, (long)getpid()); /* a child of `run -o` */
    else
        snprintf(path, sizeof path, "%s", p);
    failed = 0;
    int64_t ms = pb_config_int("PROBING_RECORD_FLUSH_MS", 1000);
    flush_every_ns = (ms < 10 ? 10 : ms) * 1000000LL;
    memset(flushed_to, 0, sizeof flushed_to);
    memset(lost, 0, sizeof lost);
    memset(written, 0, sizeof written);
    for (int t = 0; t < pb_registry_count(); t++) /* rows of an earlier start are not ours */
        flushed_to[t] = pb_ring_head(pb_registry_get(t)->ring);
    if (unlink(path) != 0 && errno != ENOENT) {
        pb_log_warn("recording to %s is off: cannot replace it: %s; training goes on", path,
                    strerror(errno));
        return;
    }
    char journal[4200];
    snprintf(journal, sizeof journal, "%s-journal", path);
    unlink(journal);
    if (sqlite3_open_v2(path, &conn, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                        SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
        sqlite3_busy_timeout(conn, BUSY_TIMEOUT_MS) != SQLITE_OK ||
        create_schema(info) != SQLITE_OK) {
        pb_log_warn("recording to %s is off: %s; training goes on", path,
                    conn ? sqlite3_errmsg(conn) : "cannot open");
        goto fail;
    }
    atomic_store(&stop_requested, 0);
    if (pthread_create(&thread, NULL, recorder_main, NULL) != 0) {
        pb_log_warn("recording to %s is off: cannot start its thread; training goes on", path);
        goto fail;
    }
    running = 1;
    owner_pid = getpid();
    if (!atexit_registered) {
        atexit(at_exit);
        atexit_registered = 1;
    }
    struct sigaction old;
    if (sigaction(SIGTERM, NULL, &old) == 0 && old.sa_handler == SIG_DFL &&
        !(old.sa_flags & SA_SIGINFO)) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigterm;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        sigaction(SIGTERM, &sa, NULL);
    }
    return;
fail:
    for (int t = 0; t < PB_REGISTRY_MAX; t++) {
        sqlite3_finalize(insert[t]);
        insert[t] = NULL;
    }
    sqlite3_close(conn);
    conn = NULL;
}

void pb_record_stop(void)
{
    if (!running || getpid() != owner_pid) return;
    running = 0;
    atomic_store(&stop_requested, 1);
    if (!pthread_equal(pthread_self(), thread)) pthread_join(thread, NULL);
    flush();
    pthread_mutex_lock(&flush_lock);
    for (int t = 0; t < PB_REGISTRY_MAX; t++) {
        sqlite3_finalize(insert[t]);
        insert[t] = NULL;
    }
    sqlite3_close(conn);
    conn = NULL;
    pthread_mutex_unlock(&flush_lock);
}
