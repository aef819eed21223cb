/*
 * record.c - the recorder: copies every table's new ring rows into a SQLite file.
 *
 * File layout: one SQLite database; each registered table <schema>.<name> is a plain table
 * <name> with the same columns (table names are unique across schemas), plus `tables` (the
 * probe.tables catalogue as of the last flush) and `info` (the /api/info body as of the last
 * flush: the job's last state, pb_record_refresh_info). The
 * CLI attaches the file under the names python, system and probe, so the same SQL runs on a
 * recording and on a live process (docs/recordings.md). The tables, the catalogue and the binding
 * of a ring row are written by record_file.c, through the connection this file owns; this file
 * is the recorder: its thread, start and stop, the transactions, the `run` row's end, the status.
 *
 * Two ways in, one recorder: PROBING_RECORD at agent start (`probing run -o`), or POST
 * /api/record from a server thread (`probing <pid> record -o`). Either way the recording begins
 * at the oldest row each ring still holds, so a recording started on a live agent reaches back
 * as far as the rings do; rows overwritten before that count in tables.rows_dropped.
 *
 * A background thread wakes every TICK_MS and flushes at once, then when
 * PROBING_RECORD_FLUSH_MS has passed or when a ring has filled a quarter of its capacity since
 * the last flush, so rows are copied before the ring overwrites them. A flush reads rows [last
 * flushed, head) with pb_ring_read (lock-free, never blocks a writer, no GIL) and inserts them
 * in one transaction. Rows that were overwritten before a flush reached them are counted in
 * tables.rows_dropped.
 *
 * Journal: the default rollback journal (DELETE) with synchronous=OFF. Each flush is one
 * transaction; after the process dies (SIGKILL, crash) at worst the transaction in progress is
 * rolled back by the next reader (the CLI opens the file read-write so SQLite can do that, and
 * its authorizer keeps queries read-only). synchronous=OFF survives any death of the process
 * (the OS still holds the written pages), not an OS crash; it keeps the flush thread off fsync.
 * WAL was not chosen: a reader of a WAL file needs write access to its -shm file, and a copy
 * of the .db alone would miss what is still in the -wal.
 *
 * State and locking: all of the recorder's state is one struct, R, with one reset for a new
 * agent and a forked child (pb_record_reset). control_lock orders start, stop and status (server
 * threads, agent start and stop, atexit); flush_lock orders flushes (the recorder thread, the
 * last flush). The recorder thread never takes control_lock, so a stop joins it while holding
 * control_lock. The counters a status reports are atomics, so a status never waits for a flush.
 * Nothing here takes the GIL.
 *
 * Errors (disk full, unwritable path): one warning on stderr, the recorder stops writing (the
 * status says why); training goes on untouched.
 */
#include "record.h"
#include "record_file.h"

#include "api.h"
#include "clock.h"
#include "config.h"
#include "error.h"
#include "jsonw.h"
#include "log.h"
#include "recpath.h"
#include "registry.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS 50
#define BUSY_TIMEOUT_MS 10000 /* a CLI reading the file holds a shared lock for a query */

/* The recorder's whole state: one struct, so that a new agent in this process (after a detach)
 * and a forked child start from one reset, pb_record_reset(). Grouped by what guards each
 * field; the last group belongs to the process, not to one agent, and the reset keeps it. */
static struct recorder {
    pthread_mutex_t control_lock, flush_lock, error_lock;

    /* control_lock; the recorder thread reads path and flush_every_ns, set before it starts */
    int running;           /* a recorder thread exists (it may have failed since) */
    int closed;            /* the agent is stopping: no new recording */
    int starting;          /* between pb_record_expect and pb_record_start: requests wait */
    pthread_t thread;
    char path[4096];       /* of the current or last recording; "" when none */
    double started_unix;
    int64_t flush_every_ns;
    int on_sigterm_installed;
    int lock_fd;           /* holds a flock on the recording while it is written; -1: none */
    int closed_at_exit;    /* the last recording ran until the exit path closed it */

    /* flush_lock (and control_lock while no recorder thread runs) */
    sqlite3 *conn;
    sqlite3_stmt *insert[PB_REGISTRY_MAX];
    uint64_t flushed_to[PB_REGISTRY_MAX]; /* next ring index to copy, per table */

    /* what a status reports, read without a lock */
    _Atomic uint64_t written[PB_REGISTRY_MAX];
    _Atomic uint64_t lost[PB_REGISTRY_MAX]; /* rows overwritten before a flush */
    _Atomic uint64_t flushes;
    atomic_int failed;
    char error_text[512]; /* error_lock */

    atomic_int stop_requested;
    atomic_int sigterm_seen;

    /* Kept by the reset: the process's, set once or by the agent's lifecycle. */
    pthread_cond_t started_cond;      /* control_lock; broadcast when starting drops to 0
                                       * (CLOCK_MONOTONIC) */
    pthread_once_t started_cond_once;
    pid_t agent_pid;                  /* control_lock: the process the agent started in (not a
                                       * fork()ed child) */
    int atexit_registered;            /* control_lock: on_exit() cannot be undone */
    int exiting;                      /* control_lock: the interpreter (or the C exit) stops
                                       * the agent */
    int have_exit_status, exit_status; /* control_lock: from on_exit() */
    char recorded_at_start[4128];     /* control_lock: the PROBING_RECORD file an agent of this
                                       * process recorded into; an agent loaded again after a
                                       * detach neither replaces it nor says it exists */
    char *exception_type, *exception_message, *exception_stack; /* control_lock:
                                                                 * pb_record_note_exception */
    pb_record_info_fn _Atomic info_fn;   /* pb_record_refresh_info */
    void (*_Atomic sigterm_via_agent)(int); /* the agent's handler that hands SIGTERM to us */
} R = {
    .control_lock = PTHREAD_MUTEX_INITIALIZER,
    .flush_lock = PTHREAD_MUTEX_INITIALIZER,
    .error_lock = PTHREAD_MUTEX_INITIALIZER,
    .lock_fd = -1,
    .started_cond_once = PTHREAD_ONCE_INIT,
};

/* Whether the agent's handler is still SIGTERM's (the program may have set its own since). */
static int agent_sigterm_in_place(void)
{
    void (*h)(int) = atomic_load(&R.sigterm_via_agent);
    struct sigaction now;
    return h && sigaction(SIGTERM, NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) &&
           now.sa_handler == h;
}

static void fail_once(const char *what)
{
    if (atomic_exchange(&R.failed, 1)) return;
    pthread_mutex_lock(&R.error_lock);
    snprintf(R.error_text, sizeof R.error_text, "%s: %s", what,
             R.conn ? sqlite3_errmsg(R.conn) : "cannot open");
    pthread_mutex_unlock(&R.error_lock);
    pb_log_warn("recording to %s stopped: %s; training goes on", R.path, R.error_text);
}

static int exec(const char *sql)
{
    return sqlite3_exec(R.conn, sql, NULL, NULL, NULL);
}

/* The step of the newest python.steps row, or -1 when there is none. [any thread] */
static int64_t last_step(void)
{
    const pb_table *steps = pb_registry_find("python", "steps");
    unsigned char row[1024];
    if (!steps || steps->row_size > sizeof row || steps->ncolumns < 1 ||
        steps->columns[0].kind != PB_COL_I64)
        return -1;
    uint64_t head = pb_ring_head(steps->ring);
    if (head == 0 || head <= pb_ring_first(steps->ring) || !pb_ring_read(steps->ring, head - 1, row))
        return -1;
    int64_t step;
    memcpy(&step, row + steps->columns[0].offset, sizeof step);
    return step;
}

/* Writes how the recording (and, at exit, the job) ended into the file's `run` row on c:
 * state, exit status, an uncaught exception, the last step, a note. [flush_lock or
 * control_lock held, nothing else using c] */
static int write_end(sqlite3 *c, const char *state, const char *note)
{
    sqlite3_stmt *st = NULL;
    int64_t step = last_step();
    int rc = sqlite3_prepare_v2(c, "UPDATE run SET state=?, status=?, exception_type=?, "
                                "message=?, stack=?, last_step=coalesce(?, last_step), ended_unix=?, "
                                "note=coalesce(?, note)", -1, &st, NULL);
    if (rc != SQLITE_OK) return rc;
    sqlite3_bind_text(st, 1, state, -1, SQLITE_STATIC);
    if (R.have_exit_status) sqlite3_bind_int(st, 2, R.exit_status);
    sqlite3_bind_text(st, 3, R.exception_type, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, R.exception_message, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, R.exception_stack, -1, SQLITE_STATIC);
    if (step >= 0) sqlite3_bind_int64(st, 6, step);
    sqlite3_bind_double(st, 7, (double)pb_wall_ns() / 1e9);
    sqlite3_bind_text(st, 8, note, -1, SQLITE_STATIC);
    rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(c);
    sqlite3_finalize(st);
    return rc;
}

/* The state a recording closed now ends in. */
static const char *end_state(void)
{
    if (!R.exiting) return "recording stopped";
    return R.exception_type ? "exception" : "exited";
}

/* A write failed on a full disk: the recording stops with a marker a reader finds offline.
 * Pages the file already has are rewritten in place without a journal (a journal would need
 * the space that is missing). [flush_lock held, after the ROLLBACK] */
static void mark_disk_full(void)
{
    char note[128];
    int64_t step = last_step();
    if (step >= 0) snprintf(note, sizeof note, "stopped: disk full at step %lld", (long long)step);
    else snprintf(note, sizeof note, "stopped: disk full before the first step");
    pthread_mutex_lock(&R.error_lock);
    snprintf(R.error_text, sizeof R.error_text, "%s", note + strlen("stopped: "));
    pthread_mutex_unlock(&R.error_lock);
    exec("PRAGMA journal_mode=OFF");
    if (write_end(R.conn, "recording failed", note) != SQLITE_OK)
        pb_log_warn("recording to %s: cannot write the disk-full marker either", R.path);
    exec("PRAGMA journal_mode=DELETE");
}

/* Replaces the info row with the /api/info body now (pb_record_refresh_info); nothing when no
 * function is set or it fails (the row keeps the last body). [flush_lock held, in the flush's
 * transaction] */
static int write_info(void)
{
    pb_record_info_fn fn = atomic_load(&R.info_fn);
    pb_buf body = PB_BUF_INIT;
    sqlite3_stmt *st = NULL;
    int rc = SQLITE_OK;
    if (!fn || fn(NULL, &body) != 0 || !body.data) goto done;
    rc = sqlite3_prepare_v2(R.conn, "UPDATE info SET json = ?", -1, &st, NULL);
    if (rc != SQLITE_OK) goto done;
    sqlite3_bind_text(st, 1, body.data, (int)body.len, SQLITE_STATIC);
    rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(R.conn);
done:
    sqlite3_finalize(st);
    pb_buf_free(&body);
    return rc;
}

/* Copies the rows added since the last flush. Returns an SQLite code. [recorder thread, or
 * the stopping thread once the recorder thread is joined] */
static int flush(void)
{
    unsigned char rowbuf[1024];
    uint64_t rows[PB_REGISTRY_MAX], dropped[PB_REGISTRY_MAX];
    int rc = SQLITE_OK;
    pthread_mutex_lock(&R.flush_lock);
    if (atomic_load(&R.failed) || !R.conn) goto done;
    /* Heads are read newest table first: collectors register per-step summaries (python.steps)
     * after the tables their rows sum up, so a step row in this flush finds all its module rows
     * in it too. */
    uint64_t heads[PB_REGISTRY_MAX];
    for (int t = pb_registry_count() - 1; t >= 0; t--) heads[t] = pb_ring_head(pb_registry_get(t)->ring);
    for (int t = 0; t < pb_registry_count(); t++) {
        rows[t] = atomic_load(&R.written[t]);
        dropped[t] = atomic_load(&R.lost[t]);
    }
    rc = exec("BEGIN");
    for (int t = 0; rc == SQLITE_OK && t < pb_registry_count(); t++) {
        const pb_table *tab = pb_registry_get(t);
        uint64_t head = heads[t], first = pb_ring_first(tab->ring);
        if (tab->row_size > sizeof rowbuf) continue;
        if (R.flushed_to[t] < first) {
            dropped[t] += first - R.flushed_to[t];
            R.flushed_to[t] = first;
        }
        for (uint64_t i = R.flushed_to[t]; rc == SQLITE_OK && i < head; i++) {
            if (!pb_ring_read(tab->ring, i, rowbuf)) {
                /* not yet published: stop here and take it next time, unless it is gone */
                if (i < pb_ring_first(tab->ring)) {
                    dropped[t]++;
                    R.flushed_to[t] = i + 1;
                    continue;
                }
                break;
            }
            rc = pb_record_file_bind(R.insert[t], tab, rowbuf);
            if (rc == SQLITE_OK) rc = sqlite3_step(R.insert[t]);
            rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
            sqlite3_reset(R.insert[t]);
            if (rc == SQLITE_OK) {
                R.flushed_to[t] = i + 1;
                rows[t]++;
            }
        }
    }
    if (rc == SQLITE_OK) rc = pb_record_file_catalogue(R.conn, rows, dropped);
    if (rc == SQLITE_OK) rc = write_info();
    if (rc == SQLITE_OK) rc = exec("COMMIT");
    if (rc != SQLITE_OK) {
        int full = (rc & 0xff) == SQLITE_FULL || sqlite3_errcode(R.conn) == SQLITE_FULL;
        int first_failure = !atomic_load(&R.failed);
        fail_once(full ? "disk full" : "cannot write");
        exec("ROLLBACK");
        if (full && first_failure) mark_disk_full();
        goto done;
    }
    for (int t = 0; t < pb_registry_count(); t++) {
        atomic_store(&R.written[t], rows[t]);
        atomic_store(&R.lost[t], dropped[t]);
    }
    atomic_fetch_add(&R.flushes, 1);
done:
    pthread_mutex_unlock(&R.flush_lock);
    return rc;
}

void pb_record_refresh_info(pb_record_info_fn fn)
{
    if (!fn) {
        /* The last body, written now while what it reads (the hooks' detail policy) is there. */
        pthread_mutex_lock(&R.control_lock);
        pthread_mutex_lock(&R.flush_lock);
        if (R.conn && !atomic_load(&R.failed) && exec("BEGIN") == SQLITE_OK)
            exec(write_info() == SQLITE_OK ? "COMMIT" : "ROLLBACK");
        pthread_mutex_unlock(&R.flush_lock);
        pthread_mutex_unlock(&R.control_lock);
    }
    atomic_store(&R.info_fn, fn);
}

static int rows_pending_high(void)
{
    for (int t = 0; t < pb_registry_count(); t++) {
        const pb_table *tab = pb_registry_get(t);
        if (pb_ring_head(tab->ring) - R.flushed_to[t] > pb_ring_capacity(tab->ring) / 4) return 1;
    }
    return 0;
}

static void *recorder_main(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals go to the program's threads */
    int64_t last = pb_now_ns() - R.flush_every_ns; /* the first tick flushes what the rings hold */
    while (!atomic_load(&R.stop_requested)) {
        struct timespec tick = {0, TICK_MS * 1000000L};
        nanosleep(&tick, NULL);
        if (atomic_load(&R.sigterm_seen)) {
            flush();
            pthread_mutex_lock(&R.flush_lock);
            if (R.conn && !atomic_load(&R.failed)) write_end(R.conn, "terminated", "SIGTERM");
            pthread_mutex_unlock(&R.flush_lock);
            signal(SIGTERM, SIG_DFL);
            kill(getpid(), SIGTERM);
            break;
        }
        if (pb_now_ns() - last >= R.flush_every_ns || rows_pending_high()) {
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
    atomic_store(&R.sigterm_seen, 1);
}

/* Installs on_sigterm when SIGTERM has the default action; a program's own handler is left
 * alone. */
static void install_on_sigterm(void)
{
    struct sigaction old;
    if (sigaction(SIGTERM, NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
        (old.sa_flags & SA_SIGINFO))
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    R.on_sigterm_installed = sigaction(SIGTERM, &sa, NULL) == 0;
}

/* Puts the default action back if on_sigterm is still the handler: with no recorder thread to
 * act on it, it would swallow SIGTERM. */
static void remove_on_sigterm(void)
{
    struct sigaction now;
    if (R.on_sigterm_installed && sigaction(SIGTERM, NULL, &now) == 0 &&
        now.sa_handler == on_sigterm && !(now.sa_flags & SA_SIGINFO))
        signal(SIGTERM, SIG_DFL);
    R.on_sigterm_installed = 0;
}

/* Creates the file's tables and rows, with the catalogue and the info row as of now, in one
 * transaction. [control_lock held, no recorder thread running] */
static int create_schema(const pb_buf *info, const uint64_t *rows, const uint64_t *dropped)
{
    int rc = pb_record_file_create(R.conn, info);
    if (rc == SQLITE_OK) rc = pb_record_file_catalogue(R.conn, rows, dropped);
    if (rc == SQLITE_OK) rc = write_info();
    if (rc == SQLITE_OK) rc = exec("COMMIT");
    return rc;
}

static void close_file(void)
{
    for (int t = 0; t < PB_REGISTRY_MAX; t++) {
        sqlite3_finalize(R.insert[t]);
        R.insert[t] = NULL;
    }
    sqlite3_close(R.conn);
    R.conn = NULL;
}

void pb_record_reset(int forked)
{
    if (forked) {
        /* The child has one thread, and one of the parent's may have held any of these. */
        pthread_mutex_init(&R.control_lock, NULL);
        pthread_mutex_init(&R.flush_lock, NULL);
        pthread_mutex_init(&R.error_lock, NULL);
    } else {
        close_file(); /* nothing is open after a stop; a forked child's handles are the parent's */
    }
    /* The child's copy of the descriptor would keep the recording's flock held after the
     * parent let go of it (flock locks belong to the open file, which fork() shares). */
    if (R.lock_fd >= 0) close(R.lock_fd);
    remove_on_sigterm(); /* with no recorder thread to act on it, it would swallow SIGTERM */
    R.running = 0;
    R.closed = forked; /* a forked child records nothing */
    R.starting = 0;
    R.path[0] = '\0';
    R.started_unix = 0;
    R.flush_every_ns = 0;
    R.lock_fd = -1;
    R.closed_at_exit = 0;
    R.conn = NULL;
    for (int t = 0; t < PB_REGISTRY_MAX; t++) {
        R.insert[t] = NULL; /* finalized by close_file, or the parent's */
        R.flushed_to[t] = 0;
        atomic_store(&R.written[t], 0);
        atomic_store(&R.lost[t], 0);
    }
    atomic_store(&R.flushes, 0);
    atomic_store(&R.failed, 0);
    R.error_text[0] = '\0';
    atomic_store(&R.stop_requested, 0);
    atomic_store(&R.sigterm_seen, 0);
}

static void stop_locked(void);

/* exit(): the status goes into the `run` row of the recording the exit path closed, or of the
 * one still running (the Python atexit did not run: exit() from C), which is stopped here.
 * Waits at most a second for control_lock: the exit is never held up longer. [the exiting
 * thread] */
static void on_process_exit(int status, void *unused)
{
    (void)unused;
    if (getpid() != R.agent_pid) return; /* a fork()ed child */
    struct timespec deadline = pb_deadline_ns(CLOCK_REALTIME, 1000000000);
    if (pthread_mutex_timedlock(&R.control_lock, &deadline) != 0) return;
    R.have_exit_status = 1;
    R.exit_status = status;
    R.exiting = 1;
    if (R.running) {
        R.closed = 1;
        stop_locked();
    } else if (R.closed_at_exit && R.path[0]) {
        sqlite3 *c = NULL;
        if (sqlite3_open_v2(R.path, &c, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) ==
                SQLITE_OK) {
            sqlite3_busy_timeout(c, 1000);
            /* after a full disk: no journal, the row's page is rewritten in place */
            sqlite3_exec(c, atomic_load(&R.failed) ? "PRAGMA journal_mode=OFF" :
                         "PRAGMA synchronous=OFF", NULL, NULL, NULL);
            write_end(c, atomic_load(&R.failed) ? "recording failed" : end_state(), NULL);
        }
        sqlite3_close(c);
    }
    pthread_mutex_unlock(&R.control_lock);
}

void pb_record_exiting(void)
{
    pthread_mutex_lock(&R.control_lock);
    R.exiting = 1;
    pthread_mutex_unlock(&R.control_lock);
}

/* Copies text into *slot (NULL: cleared). */
static void keep_text(char **slot, const char *text)
{
    free(*slot);
    *slot = text ? strdup(text) : NULL;
}

void pb_record_note_exception(const char *type, const char *message, const char *stack)
{
    pthread_mutex_lock(&R.control_lock);
    keep_text(&R.exception_type, type);
    keep_text(&R.exception_message, message);
    keep_text(&R.exception_stack, stack);
    pthread_mutex_unlock(&R.control_lock);
}

/* Creates file under the rules of recpath.h (replace: an existing recording may be replaced):
 * the new recording is written beside it (<dir>/.<name>.<pid>.tmp), locked (flock, held while
 * it records) and renamed over the path, so a failure leaves what was there intact. Then starts
 * the recorder thread from the oldest row each ring holds. Returns 0; a negative errno when the
 * path cannot be used (-EEXIST: a recording exists and replace is 0; -EISDIR, -ELOOP, -ENODEV,
 * -ENOTSUP, -EBUSY: see pb_recpath_check), with nothing changed; PB_ESQL or PB_EINTERNAL (no
 * thread). why gets the reason in words. [control_lock held, no recorder thread running] */
static int start_locked(const char *file, int replace, const pb_buf *info, char *why,
                        size_t whylen)
{
    uint64_t zeros[PB_REGISTRY_MAX] = {0}, firsts[PB_REGISTRY_MAX];
    char journal[sizeof R.path + 16], temp[sizeof R.path + 64];
    int rc, renamed = 0, old_fd = -1;
    if (strlen(file) >= sizeof R.path) {
        snprintf(why, whylen, "%s", strerror(ENAMETOOLONG));
        return -ENAMETOOLONG;
    }
    rc = pb_recpath_check(file, replace, why, whylen);
    if (rc) return rc;
    const char *slash = strrchr(file, '/');
    snprintf(temp, sizeof temp, "%.*s.%s.%ld.tmp", slash ? (int)(slash - file + 1) : 0, file,
             slash ? slash + 1 : file, (long)getpid());
    snprintf(journal, sizeof journal, "%s-journal", file);
    R.lock_fd = open(temp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (R.lock_fd < 0) {
        rc = -errno;
        snprintf(why, whylen, "%s", strerror(-rc));
        return rc;
    }
    flock(R.lock_fd, LOCK_EX | LOCK_NB); /* a new inode: nobody else can hold it */
    for (int t = 0; t < pb_registry_count(); t++)
        firsts[t] = pb_ring_first(pb_registry_get(t)->ring);
    if (sqlite3_open_v2(temp, &R.conn, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
            SQLITE_OK ||
        sqlite3_busy_timeout(R.conn, BUSY_TIMEOUT_MS) != SQLITE_OK ||
        create_schema(info, zeros, firsts) != SQLITE_OK) {
        snprintf(why, whylen, "%s", R.conn ? sqlite3_errmsg(R.conn) : "cannot open");
        rc = PB_ESQL;
        goto fail;
    }
    close_file(); /* reopened under its final name, which names its journal */
    /* The file being replaced is locked while the new one takes its name, so a recorder that
     * started since the check is not replaced under its feet. */
    old_fd = open(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (old_fd >= 0 && flock(old_fd, LOCK_EX | LOCK_NB) != 0) {
        pid_t holder = pb_recpath_lock_holder(old_fd);
        snprintf(why, whylen, "process %ld is recording into it; stop that recording first "
                 "(probing %ld record --stop) or choose another path", (long)holder, (long)holder);
        rc = -EBUSY;
        goto fail;
    }
    unlink(journal); /* a journal left beside an older file would be rolled into the new one */
    if ((replace ? rename(temp, file) : renameat2(AT_FDCWD, temp, AT_FDCWD, file,
                                                  RENAME_NOREPLACE)) != 0) {
        rc = -errno;
        snprintf(why, whylen, rc == -EEXIST ? "it exists; pass --force to replace it" : "%s",
                 strerror(-rc));
        goto fail;
    }
    renamed = 1;
    if (old_fd >= 0) close(old_fd);
    old_fd = -1;
    if (sqlite3_open_v2(file, &R.conn, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
            SQLITE_OK ||
        sqlite3_busy_timeout(R.conn, BUSY_TIMEOUT_MS) != SQLITE_OK ||
        pb_record_file_prepare_inserts(R.conn, R.insert) != SQLITE_OK) {
        snprintf(why, whylen, "%s", R.conn ? sqlite3_errmsg(R.conn) : "cannot open");
        rc = PB_ESQL;
        goto fail;
    }
    snprintf(R.path, sizeof R.path, "%s", file);
    int64_t ms = pb_config_int("PROBING_RECORD_FLUSH_MS", 1000);
    R.flush_every_ns = (ms < 10 ? 10 : ms) * 1000000LL;
    for (int t = 0; t < PB_REGISTRY_MAX; t++) {
        R.flushed_to[t] = t < pb_registry_count() ? firsts[t] : 0;
        atomic_store(&R.written[t], 0);
        atomic_store(&R.lost[t], R.flushed_to[t]);
    }
    atomic_store(&R.flushes, 0);
    atomic_store(&R.failed, 0);
    pthread_mutex_lock(&R.error_lock);
    R.error_text[0] = '\0';
    pthread_mutex_unlock(&R.error_lock);
    atomic_store(&R.stop_requested, 0);
    atomic_store(&R.sigterm_seen, 0);
    if (pthread_create(&R.thread, NULL, recorder_main, NULL) != 0) {
        snprintf(why, whylen, "cannot start its thread");
        R.path[0] = '\0';
        rc = PB_EINTERNAL;
        goto fail;
    }
    R.running = 1;
    R.started_unix = (double)pb_wall_ns() / 1e9;
    if (!R.atexit_registered) /* the exit status, and the C fallback of the Python atexit */
        R.atexit_registered = on_exit(on_process_exit, NULL) == 0;
    install_on_sigterm();
    return 0;
fail:
    close_file();
    if (old_fd >= 0) close(old_fd);
    unlink(renamed ? file : temp);
    if (renamed) unlink(journal);
    close(R.lock_fd);
    R.lock_fd = -1;
    return rc;
}

/* Stops the recorder thread, makes the last flush and closes the file. A SIGTERM that arrived
 * meanwhile, which on_sigterm held back for the flush, is sent again. [control_lock held] */
static void stop_locked(void)
{
    if (!R.running) return;
    R.running = 0;
    atomic_store(&R.stop_requested, 1);
    if (!pthread_equal(pthread_self(), R.thread)) pthread_join(R.thread, NULL);
    flush();
    remove_on_sigterm();
    pthread_mutex_lock(&R.flush_lock);
    if (R.conn && !atomic_load(&R.failed)) {
        const char *state = atomic_load(&R.sigterm_seen) ? "terminated" : end_state();
        if (write_end(R.conn, state, NULL) != SQLITE_OK)
            pb_log_warn("recording to %s: cannot write how it ended: %s", R.path,
                        sqlite3_errmsg(R.conn));
    }
    R.closed_at_exit = R.exiting;
    close_file();
    pthread_mutex_unlock(&R.flush_lock);
    if (R.lock_fd >= 0) close(R.lock_fd); /* another recorder may take the path now */
    R.lock_fd = -1;
    if (atomic_load(&R.sigterm_seen)) {
        signal(SIGTERM, SIG_DFL);
        kill(getpid(), SIGTERM);
    }
}

static void started_cond_init(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&R.started_cond, &attr);
    pthread_condattr_destroy(&attr);
}

/* Ends the start-up wait of record requests. [control_lock held] */
static void started_locked(void)
{
    R.starting = 0;
    pthread_once(&R.started_cond_once, started_cond_init);
    pthread_cond_broadcast(&R.started_cond);
}

void pb_record_expect(void)
{
    pthread_once(&R.started_cond_once, started_cond_init);
    pthread_mutex_lock(&R.control_lock);
    R.agent_pid = getpid();
    R.closed = 0;
    R.starting = 1;
    pthread_mutex_unlock(&R.control_lock);
}

/* Waits until the agent's start has opened the recorder, at most PB_RECORD_START_WAIT_MS.
 * Returns 0 when it has. [control_lock held, server thread] */
static int wait_started_locked(void)
{
    struct timespec until = pb_deadline_ns(CLOCK_MONOTONIC, (int64_t)PB_RECORD_START_WAIT_MS * 1000000);
    while (R.starting)
        if (pthread_cond_timedwait(&R.started_cond, &R.control_lock, &until) == ETIMEDOUT) break;
    return R.starting ? -ETIMEDOUT : 0;
}

/* The file this process records into for PROBING_RECORD=template (docs/recordings.md, "One
 * file per process"): %r, %h, %p expanded; without them, a rank of a multi-process job
 * (RANK set, and WORLD_SIZE above 1 or not the process `run -o` started) gets
 * <name>.rank<R>.<ext>, another process that is not the one `run -o` started (a subprocess)
 * <name>.pid<P>.<ext>. Returns 0, or -EINVAL with why set. */
static int recording_file(const char *template_path, char *out, size_t outlen, char *why,
                          size_t whylen)
{
    int e = pb_recpath_expand(template_path, getpid(), out, outlen);
    if (e < 0) {
        snprintf(why, whylen, e == -EINVAL ? "PROBING_RECORD=%s has an unknown %%-sequence "
                 "(use %%r rank, %%h host, %%p pid, %%%% a percent sign)"
                 : "PROBING_RECORD=%s is too long", template_path);
        return -EINVAL;
    }
    if (e == 1) return 0;
    const char *owner = pb_config_str("PROBING_RECORD_PID");
    int child = owner && *owner && atol(owner) != (long)getpid();
    const char *rank = getenv("RANK"), *world = getenv("WORLD_SIZE");
    char tag[64], *end = NULL;
    long r = rank && *rank ? strtol(rank, &end, 10) : -1;
    int ranked = end && !*end && r >= 0 && (child || (world && atol(world) > 1));
    if (ranked) snprintf(tag, sizeof tag, "rank%ld", r);
    else if (child) snprintf(tag, sizeof tag, "pid%ld", (long)getpid());
    else return 0;
    if (pb_recpath_tag(template_path, tag, out, outlen)) {
        snprintf(why, whylen, "PROBING_RECORD=%s is too long", template_path);
        return -EINVAL;
    }
    return 0;
}

void pb_record_start(const pb_buf *info)
{
    pthread_mutex_lock(&R.control_lock);
    R.agent_pid = getpid();
    R.closed = 0;
    started_locked();
    const char *p = pb_config_str("PROBING_RECORD");
    if (p && *p && !R.running) {
        char file[sizeof R.path + 32], why[512];
        if (recording_file(p, file, sizeof file, why, sizeof why) != 0)
            pb_log_warn("recording is off: %s; training goes on", why);
        else if (strcmp(file, R.recorded_at_start) == 0 && access(file, F_OK) == 0)
            pb_log_warn("recording to %s stays off: that file holds this process's recording up "
                        "to its detach, which this agent does not replace; to record again: "
                        "probing %ld record -o NEW.db", file, (long)getpid());
        else if (start_locked(file, pb_config_int("PROBING_RECORD_FORCE", 0) != 0, info, why,
                              sizeof why))
            pb_log_warn("recording to %s is off: %s; training goes on", file, why);
        else
            snprintf(R.recorded_at_start, sizeof R.recorded_at_start, "%s", file);
    }
    pthread_mutex_unlock(&R.control_lock);
}

void pb_record_stop(void)
{
    if (getpid() != R.agent_pid) return; /* a fork()ed child (DataLoader worker) */
    pthread_mutex_lock(&R.control_lock);
    R.closed = 1;
    started_locked(); /* a request still waiting for the start is refused as leaving */
    stop_locked();
    pthread_mutex_unlock(&R.control_lock);
}

/* ---- the /api/record routes ---- */

/* The status object. [control_lock held] */
static int write_status(pb_buf *out)
{
    pb_jsonw w;
    int recording = R.running && !atomic_load(&R.failed);
    pb_buf_reset(out);
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "recording");
    pb_jsonw_bool(&w, recording);
    pb_jsonw_key(&w, "path");
    pb_jsonw_str_or_null(&w, R.path);
    pb_jsonw_key(&w, "started_unix");
    pb_jsonw_double_or_null(&w, R.path[0], R.started_unix);
    pb_jsonw_key(&w, "flush_every_ms");
    pb_jsonw_int_or_null(&w, R.path[0], R.flush_every_ns / 1000000);
    pb_jsonw_key(&w, "on_sigterm");
    pb_jsonw_bool(&w, recording && (R.on_sigterm_installed || agent_sigterm_in_place()));
    pb_jsonw_key(&w, "flushes");
    pb_jsonw_int(&w, R.path[0] ? (int64_t)atomic_load(&R.flushes) : 0);
    for (int which = 0; which < 2; which++) {
        pb_jsonw_key(&w, which ? "rows_dropped" : "rows");
        pb_jsonw_obj_begin(&w);
        for (int t = 0; R.path[0] && t < pb_registry_count(); t++) {
            const pb_table *tab = pb_registry_get(t);
            char name[256];
            snprintf(name, sizeof name, "%s.%s", tab->schema, tab->name);
            pb_jsonw_key(&w, name);
            pb_jsonw_int(&w, (int64_t)atomic_load(which ? &R.lost[t] : &R.written[t]));
        }
        pb_jsonw_obj_end(&w);
    }
    pb_jsonw_key(&w, "error");
    pthread_mutex_lock(&R.error_lock);
    if (R.path[0] && R.error_text[0]) pb_jsonw_str(&w, R.error_text);
    else pb_jsonw_null(&w);
    pthread_mutex_unlock(&R.error_lock);
    return pb_jsonw_obj_end(&w);
}

static int status_answer(pb_buf *out)
{
    if (write_status(out)) return pb_api_error(out, 500, "out of memory");
    return 200;
}

int pb_record_request_start(const char *file, int force, int leaving, const pb_buf *info,
                            pb_buf *out)
{
    char why[512];
    int status;
    pthread_mutex_lock(&R.control_lock);
    if (R.starting && !leaving && wait_started_locked()) {
        status = pb_api_error(out, 503, "the agent is still starting: its recorder was not "
                              "ready after %d s; try again: probing %ld record -o %s",
                              PB_RECORD_START_WAIT_MS / 1000, (long)getpid(), file);
    } else if (leaving || R.closed || getpid() != R.agent_pid) {
        status = pb_api_error(out, 503, "the agent is leaving this process (detach or exit); "
                              "nothing can be recorded now");
    } else if (pb_registry_count() == 0) {
        status = pb_api_error(out, 503, "nothing to record: the agent has no tables");
    } else if (R.running && !atomic_load(&R.failed)) {
        status = pb_api_error(out, 409, "already recording to %s; stop it first: probing %ld "
                              "record --stop", R.path, (long)getpid());
    } else {
        stop_locked(); /* a recorder that failed to write: its file is closed first */
        int rc = start_locked(file, force, info, why, sizeof why);
        if (rc == 0)
            status = status_answer(out);
        else if (rc == -EEXIST)
            status = pb_api_error(out, 409, "%s exists; pass --force to replace it", file);
        else if (rc == -EISDIR)
            status = pb_api_error(out, 400, "cannot record to %s: it is a directory; name a "
                                  "file in it: probing %ld record -o %s/run.db", file,
                                  (long)getpid(), file);
        else if (rc == -EBUSY || rc == -ELOOP || rc == -ENODEV || rc == -ENOTSUP)
            status = pb_api_error(out, rc == -EBUSY ? 409 : 400, "cannot record to %s: %s",
                                  file, why);
        else if (rc == -ENOENT)
            status = pb_api_error(out, 400, "cannot record to %s: %s (its directory must "
                                  "exist: create it or choose another path)", file, why);
        else if (rc < 0 && rc > -4096)
            status = pb_api_error(out, 400, "cannot record to %s: %s (choose a path that "
                                  "process %ld can write)", file, why, (long)getpid());
        else
            status = pb_api_error(out, 500, "cannot record to %s: %s", file, why);
    }
    pthread_mutex_unlock(&R.control_lock);
    return status;
}

int pb_record_request_stop(pb_buf *out)
{
    int status;
    pthread_mutex_lock(&R.control_lock);
    if (!R.running) {
        status = pb_api_error(out, 409, "not recording%s%s; start a recording with: probing "
                              "%ld record -o FILE.db", R.path[0] ? ": the last recording "
                              "went to " : "", R.path, (long)getpid());
    } else {
        stop_locked();
        status = status_answer(out);
    }
    pthread_mutex_unlock(&R.control_lock);
    return status;
}

int pb_record_status(pb_buf *out)
{
    pthread_mutex_lock(&R.control_lock);
    int status = status_answer(out);
    pthread_mutex_unlock(&R.control_lock);
    return status;
}

void pb_record_sigterm_via_agent(void (*handler)(int))
{
    atomic_store(&R.sigterm_via_agent, handler);
}

int pb_record_take_sigterm(void)
{
    if (!R.running) return 0;
    atomic_store(&R.sigterm_seen, 1); /* as on_sigterm: the recorder thread flushes, re-sends */
    return 1;
}
