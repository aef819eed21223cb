/*
 * cmd_export.c - `probing <target-or-recording...> export --parquet DIR`: every table of live
 * processes or recordings as Parquet files, for DuckDB, Spark or Trino.
 *
 * Parquet is written by Arrow's own implementation (pyarrow), not by probing: this file fetches
 * each target's /api/info, its catalogue (/api/tables: names and declared column types) and the
 * rows of every table (pb_client_query_rows: paged, so a large ring stays under the agent's
 * answer limit), in C and without taking the target's GIL, and stages them as one JSON document
 * per target in a private temporary directory. Then it runs python/probing/_export.py (a script
 * file, not `import probing`, which would start an agent) with the Python that has pyarrow:
 * $PROBING_PYTHON, else the python3 next to this executable (a virtual environment's bin/), else
 * python3 on PATH. That script maps the declared types to Arrow types, adds the job, rank, host
 * and pid columns, turns `time` columns (unix seconds) into UTC timestamps, and writes
 * DIR/rank<R>-pid<P>/<table>.parquet. Arrow's C GLib library would avoid Python but is not
 * packaged with a Parquet writer everywhere Debian's python3-pyarrow or a pip wheel is.
 *
 * The probe schema (probing's own catalogue and settings) is not exported.
 */
#include "cli.h"
#include "client.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Fetches everything of one target into a JSON document (caller owns), or NULL after printing
 * why. [main thread] */
static json_t *fetch_target(const char *spec, const pb_target *t)
{
    json_t *info = pb_client_call_ok(t, "GET", "/api/info", NULL, PB_CLI_INFO_TIMEOUT_MS);
    if (!info) return NULL;
    json_t *catalogue = pb_client_call_ok(t, "GET", "/api/tables", NULL, PB_CLI_INFO_TIMEOUT_MS);
    if (!catalogue) {
        json_decref(info);
        return NULL;
    }
    char host[256] = "";
    const char *info_host = json_string_value(json_object_get(info, "host"));
    if (info_host) snprintf(host, sizeof host, "%s", info_host);
    else if (t->kind != PB_TARGET_FILE && gethostname(host, sizeof host)) host[0] = '\0';
    host[sizeof host - 1] = '\0';
    json_t *doc = json_pack("{s:s,s:O,s:s,s:[]}", "target", spec, "info", info, "host", host,
                            "tables");
    json_t *tables = json_object_get(doc, "tables"), *entry;
    size_t i;
    json_array_foreach(json_object_get(catalogue, "tables"), i, entry) {
        const char *schema = json_string_value(json_object_get(entry, "schema"));
        const char *name = json_string_value(json_object_get(entry, "name"));
        if (!schema || !name || strcmp(schema, "probe") == 0) continue;
        char sql[512];
        json_t *rows = NULL;
        snprintf(sql, sizeof sql, "SELECT * FROM %s.%s", schema, name);
        if (pb_client_query_rows(t, sql, &rows)) {
            pb_cli_error("export of %s stopped at table %s.%s (above)", spec, schema, name);
            json_decref(doc);
            doc = NULL;
            break;
        }
        json_array_append_new(tables, json_pack("{s:s,s:s,s:O,s:o}", "schema", schema, "name",
                                                name, "columns",
                                                json_object_get(entry, "columns"), "rows", rows));
    }
    json_decref(info);
    json_decref(catalogue);
    return doc;
}

/* The Python that runs _export.py (see the header). */
static void find_python(char *out, size_t outlen)
{
    const char *env = getenv("PROBING_PYTHON");
    char exe[PATH_MAX - 16];
    if (env && *env) {
        snprintf(out, outlen, "%s", env);
        return;
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(out, outlen, "%s/python3", exe);
            if (access(out, X_OK) == 0) return;
        }
    }
    snprintf(out, outlen, "python3");
}

static void remove_staging(const char *dir, int count)
{
    char path[PATH_MAX + 32];
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof path, "%s/%d.json", dir, i);
        unlink(path);
    }
    rmdir(dir);
}

int cmd_export(const pb_cli_args *a)
{
    char package[PATH_MAX], script[PATH_MAX + 32], python[PATH_MAX], staging[PATH_MAX];
    int count = 1 + a->more_target_count, rc = PB_EXIT_ERROR, staged = 0;
    if (!a->parquet_dir || !*a->parquet_dir) {
        pb_cli_error("export needs --parquet DIR: probing %s export --parquet DIR", a->target);
        return PB_EXIT_USAGE;
    }
    if (pb_cli_find_package(package, sizeof package)) {
        pb_cli_error("cannot find the probing Python package (its _export.py writes the Parquet "
                     "files); set PROBING_PYTHONPATH to the directory that contains probing/");
        return PB_EXIT_ERROR;
    }
    snprintf(script, sizeof script, "%s/probing/_export.py", package);
    find_python(python, sizeof python);
    const char *tmp = getenv("TMPDIR");
    snprintf(staging, sizeof staging, "%s/probing-export-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(staging)) {
        pb_cli_error("cannot create a temporary directory in %s: %s; set TMPDIR to a writable "
                     "directory", tmp && *tmp ? tmp : "/tmp", strerror(errno));
        return PB_EXIT_ERROR;
    }
    char **argv = calloc((size_t)count + 5, sizeof *argv);
    char (*paths)[PATH_MAX + 16] = calloc((size_t)count, sizeof *paths);
    if (!argv || !paths) {
        pb_cli_error("out of memory");
        goto fail;
    }
    for (int i = 0; i < count; i++) {
        const char *spec = i == 0 ? a->target : a->more_targets[i - 1];
        pb_target t;
        if (i == 0) {
            t = a->resolved;
        } else {
            int resolve_rc = pb_target_resolve(spec, &t);
            if (resolve_rc) {
                rc = resolve_rc;
                goto fail;
            }
        }
        json_t *doc = fetch_target(spec, &t);
        if (!doc) goto fail;
        snprintf(paths[i], sizeof paths[i], "%s/%d.json", staging, i);
        int dumped = json_dump_file(doc, paths[i], JSON_COMPACT);
        json_decref(doc);
        staged = i + 1;
        if (dumped) {
            pb_cli_error("cannot write %s (disk full?); set TMPDIR to a directory with room",
                         paths[i]);
            goto fail;
        }
    }
    argv[0] = python;
    argv[1] = script;
    argv[2] = (char *)a->parquet_dir;
    for (int i = 0; i < count; i++) argv[3 + i] = paths[i];
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        pb_cli_error("cannot start %s: %s", python, strerror(errno));
        goto fail;
    }
    if (child == 0) {
        execvp(python, argv);
        fprintf(stderr, "probing: cannot run %s: %s; export --parquet needs a Python with "
                        "pyarrow: set PROBING_PYTHON\n", python, strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {}
    rc = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? PB_EXIT_OK : PB_EXIT_ERROR;
fail:
    remove_staging(staging, staged);
    free(argv);
    free(paths);
    return rc;
}
