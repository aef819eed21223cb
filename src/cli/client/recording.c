/*
 * recording.c - the agent's API over a recording file; see recording.h.
 *
 * The file is opened once per run of the CLI and kept open (a report makes dozens of queries).
 * /api/info is the file's info row plus "ended": how the job and the recording ended (its `run`
 * table, probe.run), which a live agent does not have.
 * Several files can be open at once (`report` over the recordings of a job's ranks, export and
 * query --ranks over several): each request selects the one of its target; past OPEN_MAX the
 * file opened first is closed.
 */
#include "client/recording.h"

#include "db.h"
#include "error.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPEN_MAX 64

static pb_db *db; /* the file of the request being answered */
static pb_query_limits limits; /* the request's: its time limit, the CLI's answer cap */
static struct {
    char path[4096];
    pb_db *db;
} open_files[OPEN_MAX];
static int nopen;

/* Makes db the open database of path, opening it the first time. Returns 0, or pb_db_open_file's
 * negative code (why set). */
static int select_file(const char *path, double timeout_s, char *why, size_t len)
{
    for (int i = 0; i < nopen; i++)
        if (strcmp(open_files[i].path, path) == 0) {
            db = open_files[i].db;
            return 0;
        }
    if (nopen == OPEN_MAX) { /* close the file opened first */
        pb_db_close(open_files[0].db);
        memmove(&open_files[0], &open_files[1], sizeof open_files[0] * (OPEN_MAX - 1));
        nopen--;
    }
    pb_db *opened = NULL;
    int rc = pb_db_open_file(path, timeout_s, &opened, why, len);
    if (rc) return rc;
    snprintf(open_files[nopen].path, sizeof open_files[nopen].path, "%s", path);
    open_files[nopen++].db = opened;
    db = opened;
    return 0;
}

/* PROBING_QUERY_TIMEOUT of the CLI's environment (the agent's setting, read here because the
 * CLI has no config table loaded), 30 s when unset or not a positive number. */
static double query_timeout_s(void)
{
    const char *v = getenv("PROBING_QUERY_TIMEOUT");
    char *end = NULL;
    double s = v ? strtod(v, &end) : 0;
    return v && end != v && !*end && s > 0 && s <= 86400 ? s : 30;
}

static int respond_error(pb_response *resp, long status, const char *message)
{
    json_t *o = json_pack("{s:s}", "error", message);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    resp->status = status;
    int rc = text ? pb_buf_puts(&resp->body, text) : -ENOMEM;
    free(text);
    return rc;
}

/* Runs sql and returns its rows (array of arrays, caller owns) or NULL. */
static json_t *rows_of(const char *sql)
{
    pb_buf out = PB_BUF_INIT;
    json_error_t jerr;
    json_t *root = NULL, *rows = NULL;
    if (pb_db_query_json(db, sql, &limits, &out) == 0)
        root = json_loadb(out.data, out.len, JSON_ALLOW_NUL, &jerr);
    pb_buf_free(&out);
    rows = json_incref(json_object_get(root, "rows"));
    json_decref(root);
    return rows;
}

static int tables_json(pb_response *resp)
{
    json_t *rows = rows_of("SELECT schema, name, doc, columns, rows, capacity, rows_dropped, "
                           "empty_reason FROM probe.tables");
    json_t *tables = json_array(), *row;
    json_error_t jerr;
    size_t i;
    if (!rows || !tables) {
        json_decref(rows);
        json_decref(tables);
        return respond_error(resp, 500, "cannot read the recording's catalogue (probe.tables)");
    }
    json_array_foreach(rows, i, row) {
        const char *cols = json_string_value(json_array_get(row, 3));
        json_t *columns = cols ? json_loads(cols, 0, &jerr) : NULL;
        json_array_append_new(tables, json_pack(
            "{s:O,s:O,s:O,s:o,s:O,s:O,s:O,s:O}", "schema", json_array_get(row, 0), "name",
            json_array_get(row, 1), "doc", json_array_get(row, 2), "columns",
            columns ? columns : json_array(), "rows", json_array_get(row, 4), "capacity",
            json_array_get(row, 5), "rows_dropped", json_array_get(row, 6), "empty_reason",
            json_array_get(row, 7)));
    }
    json_decref(rows);
    json_t *root = json_pack("{s:o}", "tables", tables);
    char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    resp->status = 200;
    int rc = text ? pb_buf_puts(&resp->body, text) : -ENOMEM;
    free(text);
    return rc;
}

/* How the job and its recording ended (the file's `run` row, docs/recordings.md), as an
 * object, or NULL for a recording made before the row existed. */
static json_t *ended_json(void)
{
    static const char *const names[] = {"state", "status", "exception_type", "message",
                                        "stack", "last_step", "ended_unix", "note"};
    json_t *rows = rows_of("SELECT state, status, exception_type, message, stack, last_step, "
                           "ended_unix, note FROM probe.run LIMIT 1");
    json_t *row = json_array_get(rows, 0), *out = row ? json_object() : NULL;
    for (size_t i = 0; out && i < sizeof names / sizeof names[0]; i++)
        json_object_set(out, names[i], json_array_get(row, i) ? json_array_get(row, i)
                                                              : json_null());
    json_decref(rows);
    return out;
}

int pb_recording_request(const pb_target *t, const char *method, const char *path,
                         const char *body, long timeout_ms, pb_response *resp, char *err,
                         size_t errlen)
{
    char why[768];
    int rc = 0;
    resp->status = 0;
    memset(&resp->body, 0, sizeof resp->body);
    /* A recording gets the live agent's time limit, in the CLI's environment; a request with
     * a shorter deadline (query --ranks --deadline) is bounded by that instead. */
    memset(&limits, 0, sizeof limits);
    limits.recording = 1;
    limits.timeout_s = query_timeout_s();
    if (timeout_ms > 0 && (double)timeout_ms / 1000 < limits.timeout_s)
        limits.timeout_s = (double)timeout_ms / 1000;
    rc = select_file(t->file_path, limits.timeout_s, why, sizeof why);
    if (rc) {
        snprintf(err, errlen, "cannot read the recording %s: %s", t->file_path, why);
        return rc;
    }
    if (strcmp(path, "/api/query") == 0 && strcmp(method, "POST") == 0) {
        json_error_t jerr;
        json_t *req = body ? json_loads(body, 0, &jerr) : NULL;
        const char *sql = json_string_value(json_object_get(req, "sql"));
        json_t *asked = json_object_get(req, "max_result_bytes"); /* as the agent's route */
        if (json_is_integer(asked) && json_integer_value(asked) > 0)
            limits.max_result_bytes = (size_t)json_integer_value(asked);
        if (!sql) {
            rc = respond_error(resp, 400, "the request needs {\"sql\": \"...\"}");
        } else {
            int q = pb_db_query_json(db, sql, &limits, &resp->body);
            resp->status = q == 0 ? 200 : q == -ENOMEM ? 500 : 400;
            if (q == -ENOMEM) rc = q;
        }
        json_decref(req);
    } else if (strcmp(path, "/api/tables") == 0) {
        rc = tables_json(resp);
    } else if (strcmp(path, "/api/info") == 0) {
        json_t *rows = rows_of("SELECT json FROM probe.info");
        const char *info = json_string_value(json_array_get(json_array_get(rows, 0), 0));
        json_error_t jerr;
        json_t *obj = info ? json_loads(info, 0, &jerr) : NULL;
        json_t *ended = json_is_object(obj) ? ended_json() : NULL;
        char *text = NULL;
        if (ended) {
            json_object_set_new(obj, "ended", ended);
            text = json_dumps(obj, JSON_COMPACT);
        }
        resp->status = info ? 200 : 500;
        rc = text ? pb_buf_puts(&resp->body, text)
                  : info ? pb_buf_puts(&resp->body, info)
                  : respond_error(resp, 500, "the recording has no info row");
        free(text);
        json_decref(obj);
        json_decref(rows);
    } else if (strcmp(path, "/api/eval") == 0) {
        rc = respond_error(resp, 400, "a recording cannot run code: eval needs a live process");
    } else {
        rc = respond_error(resp, 404, "not available on a recording");
    }
    if (rc) {
        pb_buf_free(&resp->body);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    return 0;
}

void pb_recording_interrupt_all(void)
{
    for (int i = 0; i < nopen; i++) pb_db_interrupt(open_files[i].db);
}
