/*
 * cmd_export.c - `probing <target-or-recording...> export --parquet DIR`: every table of live
 * processes or recordings as Parquet files, for DuckDB, Spark or Trino.
 *
 * Parquet is written by Arrow's own implementation (pyarrow), not by probing: this file fetches
 * each target's /api/info, its catalogue (/api/tables: names and declared column types) and the
 * rows of every table (in pages, so a large ring stays under the agent's answer limit and is never
 * held whole here), in C and without taking the target's GIL, and stages them in a private
 * temporary directory: one newline-delimited JSON file per table, and per target one JSON
 * document that names them. Then it runs python/probing/_export.py (a script
 * file, not `import probing`, which would start an agent) with the Python that has pyarrow:
 * $PROBING_PYTHON, else the python3 next to this executable (a virtual environment's bin/), else
 * python3 on PATH. That script maps the declared types to Arrow types, adds the job, rank, host
 * and pid columns, turns `time` columns (unix seconds) into UTC timestamps, and writes
 * DIR/rank<R>-pid<P>/<table>.parquet. Arrow's C GLib library would avoid Python but is not
 * packaged with a Parquet writer everywhere Debian's python3-pyarrow or a pip wheel is.
 *
 * The probe schema (probing's own catalogue and settings) is not exported.
 */
#include "child.h"
#include "client/client.h"
#include "client/package.h"
#include "cmd/command.h"

#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Writes the rows of schema.name to path as newline-delimited JSON objects (one per row, keyed by
 * column name), a page of PB_CLIENT_PAGE_ROWS rows at a time, so that a table of millions of
 * rows is never held whole in memory here (nor in pyarrow's JSON reader, which streams it).
 * Sets *count to the rows written. Returns 0, or 1 after printing why. [main thread] */
static int stage_table(const pb_target *t, const char *schema, const char *name,
                       const char *path, long long *count)
{
    FILE *f = fopen(path, "w");
    int rc = 1;
    *count = 0;
    if (!f) {
        pb_cli_error("cannot write %s: %s; set TMPDIR to a writable directory", path,
                     strerror(errno));
        return 1;
    }
    for (long long offset = 0;; offset += PB_CLIENT_PAGE_ROWS) {
        char sql[512];
        json_t *root = NULL;
        long status = 0;
        snprintf(sql, sizeof sql, "SELECT * FROM \"%s\".\"%s\" LIMIT %d OFFSET %lld", schema,
                 name, PB_CLIENT_PAGE_ROWS, offset);
        json_t *request = json_pack("{s:s}", "sql", sql);
        int failed = request ? pb_client_call(t, "POST", "/api/query", request,
                                              PB_CLI_QUERY_TIMEOUT_MS, &root, &status)
                             : (pb_cli_error("out of memory"), 1);
        json_decref(request);
        if (failed) goto done;
        json_t *columns = json_object_get(root, "columns"), *page = json_object_get(root, "rows");
        if (status != 200 || !json_is_array(page) || !json_is_array(columns)) {
            pb_client_print_error(status, root);
            json_decref(root);
            goto done;
        }
        if (json_is_true(json_object_get(root, "truncated"))) {
            pb_cli_error("the target cut a page of %d rows at PROBING_MAX_RESULT_MB; raise it in "
                         "the target's environment", PB_CLIENT_PAGE_ROWS);
            json_decref(root);
            goto done;
        }
        size_t i, n = json_array_size(page);
        json_t *row;
        json_array_foreach(page, i, row) {
            json_t *obj = json_object();
            for (size_t c = 0; c < json_array_size(columns) && c < json_array_size(row); c++)
                json_object_set(obj, json_string_value(json_array_get(columns, c)),
                                json_array_get(row, c));
            int bad = !obj || json_dumpf(obj, f, JSON_COMPACT) || fputc('\n', f) == EOF;
            json_decref(obj);
            if (bad) {
                pb_cli_error("cannot write %s (disk full?); set TMPDIR to a directory with room",
                             path);
                json_decref(root);
                goto done;
            }
        }
        json_decref(root);
        *count += (long long)n;
        if (n < (size_t)PB_CLIENT_PAGE_ROWS) break;
    }
    rc = 0;
done:
    if (fclose(f) != 0 && rc == 0) {
        pb_cli_error("cannot write %s (disk full?); set TMPDIR to a directory with room", path);
        rc = 1;
    }
    return rc;
}

/* Whether schema.name may be exported: schema python or system, a name of 1-64 letters, digits
 * and '_' not starting with a digit. Anything else (a "/abs/path", "../x", "steps --") never
 * reaches a path or a query. */
static int table_name_ok(const char *schema, const char *name)
{
    size_t n = strlen(name);
    if (strcmp(schema, "python") != 0 && strcmp(schema, "system") != 0) return 0;
    if (n == 0 || n > 64 || isdigit((unsigned char)name[0])) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && name[i] != '_') return 0;
    return 1;
}

/* Fetches everything of target number `index` into files under staging and returns the
 * document that describes them (caller owns), or NULL after printing why. [main thread] */
static json_t *fetch_target(const char *spec, const pb_target *t, const char *staging, int index)
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
    json_t *tables = json_object_get(doc, "tables"), *entry, *seen = json_object();
    size_t i;
    json_array_foreach(json_object_get(catalogue, "tables"), i, entry) {
        const char *schema = json_string_value(json_object_get(entry, "schema"));
        const char *name = json_string_value(json_object_get(entry, "name"));
        if (!schema || !name || strcmp(schema, "probe") == 0) continue;
        /* The catalogue is the target's word (a recording's is a file anyone may have
         * written): a name becomes a file name and part of a query only when it is one. */
        if (json_object_get(seen, name)) {
            pb_cli_error("export of %s: skipped the catalogue's second table named %s (%s.%s): "
                         "it would replace the first one's file", spec, name, schema, name);
            continue;
        }
        if (!table_name_ok(schema, name)) {
            pb_cli_error("export of %s: skipped the catalogue's table %s.%s: not a table name "
                         "(schema python or system, a name of letters, digits and _)", spec,
                         schema, name);
            continue;
        }
        json_object_set_new(seen, name, json_true());
        char path[PATH_MAX + 64];
        long long count = 0;
        snprintf(path, sizeof path, "%s/%d-%zu.ndjson", staging, index, i);
        if (stage_table(t, schema, name, path, &count)) {
            pb_cli_error("export of %s stopped at table %s.%s (above)", spec, schema, name);
            json_decref(doc);
            doc = NULL;
            break;
        }
        json_array_append_new(tables, json_pack("{s:s,s:s,s:O,s:s,s:I}", "schema", schema, "name",
                                                name, "columns",
                                                json_object_get(entry, "columns"), "rows_file",
                                                path, "rows", (json_int_t)count));
    }
    json_decref(seen);
    json_decref(info);
    json_decref(catalogue);
    return doc;
}

/* Removes the staging directory and every file in it (only files this command wrote). */
static void remove_staging(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[PATH_MAX + 300];
    while (d && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* The options of export (option.h): the parser and 'export --help' read them. */
const pb_option pb_options_export[] = {
    PB_OPTION_STRING_(0, "parquet", "DIR", parquet_dir,
                      "the directory to write (created when missing); nothing is written outside "
                      "it, and a table whose name is not a table name is skipped",
                      PB_USAGE("--parquet DIR")),
    PB_OPTION_FORCE("replace Parquet files that exist (without it, export refuses and writes "
                    "nothing)"),
    PB_OPTION_TABLE_END,
};

int cmd_export(const pb_cli_args *a)
{
    char package[PATH_MAX], script[PATH_MAX + 32], python[PATH_MAX], staging[PATH_MAX];
    int count = 1 + a->more_target_count, rc = PB_EXIT_ERROR;
    if (!a->parquet_dir || !*a->parquet_dir)
        return pb_cli_usage_error("export needs --parquet DIR: probing %s export --parquet DIR",
                                  a->target);
    if (pb_package_find(package, sizeof package))
        return pb_cli_error("cannot find the probing Python package (its _export.py writes the "
                            "Parquet files); set PROBING_PYTHONPATH to the directory that "
                            "contains probing/");
    snprintf(script, sizeof script, "%s/probing/_export.py", package);
    pb_package_python(python, sizeof python);
    const char *tmp = getenv("TMPDIR");
    snprintf(staging, sizeof staging, "%s/probing-export-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(staging))
        return pb_cli_error("cannot create a temporary directory in %s: %s; set TMPDIR to a "
                            "writable directory", tmp && *tmp ? tmp : "/tmp", strerror(errno));
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
        json_t *doc = fetch_target(spec, &t, staging, i);
        if (!doc) goto fail;
        snprintf(paths[i], sizeof paths[i], "%s/%d.json", staging, i);
        int dumped = json_dump_file(doc, paths[i], JSON_COMPACT);
        json_decref(doc);
        if (dumped) {
            pb_cli_error("cannot write %s (disk full?); set TMPDIR to a directory with room",
                         paths[i]);
            goto fail;
        }
    }
    int k = 0;
    argv[k++] = python;
    argv[k++] = script;
    if (a->force) argv[k++] = "--force";
    argv[k++] = (char *)a->parquet_dir;
    for (int i = 0; i < count; i++) argv[k++] = paths[i];
    fflush(stdout);
    pb_child_opts opts = {.file = python, .argv = argv, .search = 1};
    pid_t child;
    int started = pb_child_start(&opts, &child, NULL, NULL);
    if (started) {
        pb_cli_error("cannot run %s: %s; export --parquet needs a Python with pyarrow: set "
                     "PROBING_PYTHON", python, strerror(-started));
        goto fail;
    }
    rc = pb_child_wait(child) == 0 ? PB_EXIT_OK : PB_EXIT_ERROR;
fail:
    remove_staging(staging);
    free(argv);
    free(paths);
    return rc;
}
