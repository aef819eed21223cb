/*
 * cmd_record.c - `probing <target> record -o FILE [--force]`, `record --stop` and `record`: a
 * recording (docs/recordings.md) of a process that is already running.
 *
 * The agent records, not this command: POST /api/record hands it the file's absolute path and
 * its own recorder (src/agent/service/record.c) copies the rows its rings still hold, then every new
 * row, flushing before the rings overwrite them, at exit and on SIGTERM, as under `probing run
 * -o`. So this command returns at once and the recording outlives it (the use: a job that may
 * crash overnight). `--stop` (POST /api/record/stop) makes the last flush and closes the file;
 * without options GET /api/record says how it goes.
 */
#include "client/client.h"
#include "cmd/command.h"
#include "out/format.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* given, absolute against the current directory, with ".", ".." and repeated slashes removed
 * as text (as Python's os.path.abspath does). Nothing is looked up: the agent creates the file
 * and says why it cannot (a missing directory, no permission) in the process's own view of the
 * file system. Returns 0, or -1 when the result does not fit or the directory is unknown. */
static int absolute_path(const char *given, char *out, size_t outlen)
{
    char joined[2 * PATH_MAX];
    if (given[0] == '/') {
        snprintf(joined, sizeof joined, "%s", given);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) return -1;
        if ((size_t)snprintf(joined, sizeof joined, "%s/%s", cwd, given) >= sizeof joined) return -1;
    }
    size_t len = 0;
    for (const char *p = joined; *p;) {
        while (*p == '/') p++;
        const char *end = strchrnul(p, '/');
        size_t segment = (size_t)(end - p);
        if (segment == 2 && p[0] == '.' && p[1] == '.') {
            while (len > 0 && out[--len] != '/') {}
        } else if (segment > 0 && !(segment == 1 && p[0] == '.')) {
            if (len + 1 + segment >= outlen) return -1;
            out[len++] = '/';
            memcpy(out + len, p, segment);
            len += segment;
        }
        p = end;
    }
    if (len == 0) out[len++] = '/';
    out[len] = '\0';
    return 0;
}

/* Whether the last component of path is "", "." or "..": it names a directory. */
static int names_directory(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    return !*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0;
}

static long long int_of(json_t *o, const char *key)
{
    return (long long)json_integer_value(json_object_get(o, key));
}

/* "every 1 s, at exit and on SIGTERM", from the status. */
static void describe_flushes(json_t *st, char *out, size_t outlen)
{
    long long ms = int_of(st, "flush_every_ms");
    char every[64];
    if (ms % 1000 == 0) snprintf(every, sizeof every, "%lld s", ms / 1000);
    else snprintf(every, sizeof every, "%lld ms", ms);
    if (json_is_true(json_object_get(st, "on_sigterm")))
        snprintf(out, outlen, "every %s, at exit and on SIGTERM", every);
    else
        snprintf(out, outlen, "every %s and at exit", every);
}

/* Prints the tables with rows written or dropped: table, rows, rows_dropped. */
static int print_rows(json_t *st)
{
    json_t *written = json_object_get(st, "rows"), *dropped = json_object_get(st, "rows_dropped");
    json_t *columns = json_pack("[sss]", "table", "rows", "rows_dropped"), *rows = json_array();
    const char *table;
    json_t *n;
    int rc = columns && rows ? 0 : -1;
    json_object_foreach(written, table, n) {
        json_t *lost = json_object_get(dropped, table);
        if (rc || (json_integer_value(n) == 0 && json_integer_value(lost) == 0)) continue;
        rc = json_array_append_new(rows, json_pack("[sOO]", table, n, lost ? lost : json_null()));
    }
    if (!rc && json_array_size(rows))
        rc = pb_format_rows(stdout, PB_FORMAT_TABLE, PB_TABLE_PLAIN, columns, rows);
    json_decref(columns);
    json_decref(rows);
    return rc;
}

/* The sum of the integers in the object key of st. */
static long long total_of(json_t *st, const char *key)
{
    long long sum = 0;
    const char *table;
    json_t *n;
    json_object_foreach(json_object_get(st, key), table, n) sum += json_integer_value(n);
    return sum;
}

static int start(const pb_cli_args *a)
{
    char path[PATH_MAX], flushes[128];
    if (!*a->output || strcmp(a->output, "-") == 0 || names_directory(a->output))
        return pb_cli_usage_error("record -o wants the path of a file for the process to write, "
                                  "not '%s': probing %s record -o run.db", a->output, a->target);
    if (absolute_path(a->output, path, sizeof path))
        return pb_cli_usage_error("cannot make %s an absolute path (too long, or the current "
                                  "directory is gone); give an absolute path", a->output);
    json_t *request = json_pack("{s:s,s:b}", "path", path, "force", a->force);
    if (!request) return pb_cli_error("out of memory");
    json_t *st =
        pb_client_call_ok(&a->resolved, "POST", "/api/record", request, PB_CLI_INFO_TIMEOUT_MS);
    json_decref(request);
    if (!st) return PB_EXIT_ERROR;
    describe_flushes(st, flushes, sizeof flushes);
    printf("recording %s to %s (rows still in the rings are included); flushed %s. Stop: "
           "probing %s record --stop\n", a->target, json_string_value(json_object_get(st, "path")),
           flushes, a->target);
    long long dropped = total_of(st, "rows_dropped");
    if (dropped)
        printf("%lld older rows had been overwritten in the rings before now and are not in the "
               "file (counted in its tables.rows_dropped)\n", dropped);
    json_decref(st);
    return PB_EXIT_OK;
}

/* Prints the error of a recording that stopped writing; returns the exit status. */
static int error_status(json_t *st)
{
    const char *error = json_string_value(json_object_get(st, "error"));
    if (!error) return PB_EXIT_OK;
    return pb_cli_error("the recording to %s stopped writing: %s; the file holds what was flushed "
                        "before", json_string_value(json_object_get(st, "path")), error);
}

static int stop(const pb_cli_args *a)
{
    json_t *st = pb_client_call_ok(&a->resolved, "POST", "/api/record/stop", NULL,
                                    PB_CLI_QUERY_TIMEOUT_MS);
    if (!st) return PB_EXIT_ERROR;
    const char *path = json_string_value(json_object_get(st, "path"));
    printf("stopped recording %s to %s: %lld rows in %lld flushes\n", a->target, path,
           total_of(st, "rows"), int_of(st, "flushes"));
    int rc = print_rows(st) ? PB_EXIT_ERROR : error_status(st);
    if (rc == PB_EXIT_OK) printf("Read it: probing %s report\n", path);
    json_decref(st);
    return rc;
}

static int status(const pb_cli_args *a)
{
    json_t *st =
        pb_client_call_ok(&a->resolved, "GET", "/api/record", NULL, PB_CLI_INFO_TIMEOUT_MS);
    if (!st) return PB_EXIT_ERROR;
    const char *path = json_string_value(json_object_get(st, "path"));
    int recording = json_is_true(json_object_get(st, "recording")), rc = PB_EXIT_OK;
    if (recording) {
        char flushes[128], age[32];
        describe_flushes(st, flushes, sizeof flushes);
        double since = (double)time(NULL) - json_number_value(json_object_get(st, "started_unix"));
        pb_format_duration(since > 0 ? since : 0, age, sizeof age);
        printf("recording %s to %s for %s: %lld rows in %lld flushes; flushed %s\n", a->target,
               path, age, total_of(st, "rows"), int_of(st, "flushes"), flushes);
        rc = print_rows(st) ? PB_EXIT_ERROR : PB_EXIT_OK;
        printf("Stop: probing %s record --stop\n", a->target);
    } else if (!path) {
        printf("%s is not recording. Start: probing %s record -o FILE.db\n", a->target, a->target);
    } else {
        printf("%s is not recording; its last recording went to %s: %lld rows in %lld flushes\n",
               a->target, path, total_of(st, "rows"), int_of(st, "flushes"));
        rc = print_rows(st) ? PB_EXIT_ERROR : PB_EXIT_OK;
    }
    if (rc == PB_EXIT_OK) rc = error_status(st);
    if (rc == PB_EXIT_OK && path && !recording) printf("Read it: probing %s report\n", path);
    json_decref(st);
    return rc;
}

/* The options of record (option.h): the parser and 'record --help' read them. */
const pb_option pb_options_record[] = {
    PB_OPTION_OUTPUT("FILE.db", "start recording into FILE.db (relative to this directory); it "
                                "must not exist",
                     PB_USAGE("[-o FILE.db [--force] | --stop]")),
    PB_OPTION_FORCE("replace FILE.db when it exists", PB_USAGE_SHOWN_ABOVE),
    PB_OPTION_FLAG_("stop", stop,
                    "make the last flush, close the file and print the rows written per table",
                    PB_USAGE_SHOWN_ABOVE),
    PB_OPTION_TABLE_END,
};

int cmd_record(const pb_cli_args *a)
{
    if (a->resolved.kind == PB_TARGET_FILE)
        return pb_cli_usage_error("%s is a recording already; record needs a live process (a "
                                  "pid): probing <pid> record -o FILE.db. Read this one with "
                                  "'probing %s query|report|timeline'", a->target, a->target);
    if (a->stop && a->output)
        return pb_cli_usage_error("record takes -o FILE to start or --stop to stop, not both");
    if (a->force && !a->output)
        return pb_cli_usage_error("--force goes with -o FILE: probing %s record -o FILE.db --force",
                                  a->target);
    if (a->output) return start(a);
    return a->stop ? stop(a) : status(a);
}
