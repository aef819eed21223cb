/*
 * fuzz_sql.c - libFuzzer target for the SQL entry point: pb_db_query_json() over a small table,
 * with the read-only authorizer, exactly as /api/query runs it.
 *
 * Input: one SQL string (a NUL ends it early, as in the JSON request the server decodes).
 * Checks, for every input: no sanitizer report; the return code is one of those db.h lists;
 * the body is valid JSON with "columns"/"rows" on success and "error" on failure; and no file
 * appeared in the working directory, which is a fresh empty temporary directory (relative
 * paths such as VACUUM INTO 'x' or ATTACH 'x' land there if the authorizer ever lets one
 * through). Queries are limited to 1 s and 1 MB of result, as the server limits them.
 * Built and run by scripts/fuzz.sh.
 */
#include "config.h"
#include "db.h"
#include "error.h"
#include "fuzz_table.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pb_db *db;
static char cwd[64];

static void remove_cwd(void)
{
    if (chdir("/") == 0) rmdir(cwd); /* empty, or the run already failed and kept it */
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    snprintf(cwd, sizeof cwd, "/tmp/probing-fuzz-sql-XXXXXX");
    if (!mkdtemp(cwd) || chdir(cwd) != 0) {
        perror("fuzz_sql: temporary working directory");
        abort();
    }
    atexit(remove_cwd);
    pb_config_load();
    if (fuzz_table_setup() || pb_db_open(&db)) {
        fprintf(stderr, "fuzz_sql: set-up failed\n");
        abort();
    }
    return 0;
}

/* Aborts (a finding) when the working directory holds anything. */
static void check_cwd_empty(const char *sql)
{
    DIR *d = opendir(".");
    if (!d) abort();
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        fprintf(stderr, "fuzz_sql: the query wrote a file %s/%s\nSQL: %s\n", cwd, e->d_name, sql);
        abort();
    }
    closedir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *sql = malloc(size + 1);
    if (!sql) return 0;
    memcpy(sql, data, size);
    sql[size] = '\0';

    pb_query_limits lim = {.max_result_bytes = 1 << 20, .timeout_s = 1.0};
    pb_buf out = PB_BUF_INIT;
    int rc = pb_db_query_json(db, sql, &lim, &out);
    if (rc != 0 && rc != PB_ESQL && rc != PB_ETIMEOUT && rc != -ENOMEM) {
        fprintf(stderr, "fuzz_sql: unexpected return %d (%s)\nSQL: %s\n", rc, pb_strerror(rc), sql);
        abort();
    }
    if (rc != -ENOMEM) {
        json_error_t jerr;
        json_t *j = json_loadb(out.data ? out.data : "", out.len, 0, &jerr);
        int ok = j && (rc == 0 ? json_is_array(json_object_get(j, "columns")) &&
                                     json_is_array(json_object_get(j, "rows"))
                               : json_is_string(json_object_get(j, "error")));
        if (!ok) {
            fprintf(stderr, "fuzz_sql: rc %d with a bad body (%s): %.*s\nSQL: %s\n", rc,
                    j ? "fields" : jerr.text, (int)(out.len > 2000 ? 2000 : out.len),
                    out.data ? out.data : "", sql);
            abort();
        }
        json_decref(j);
    }
    pb_buf_free(&out);
    check_cwd_empty(sql);
    free(sql);
    return 0;
}
