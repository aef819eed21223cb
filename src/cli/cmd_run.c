/*
 * cmd_run.c - `probing run [-o FILE.db [--force]] -- COMMAND ARGS...`: start a program with the
 * agent loaded.
 *
 * Sets PROBING=1, PROBING_PACKAGE_DIR=<the directory holding the `probing` package> and puts
 * one directory in front of PYTHONPATH: probing/_boot, which holds nothing but a
 * sitecustomize.py. That file runs when the program's Python starts, loads the `probing`
 * package from PROBING_PACKAGE_DIR by its path (the agent starts) and hands over to the
 * program's own sitecustomize. The rest of probing's site-packages (its torch, numpy...) never
 * becomes importable: the program keeps its own environment's packages. When that Python
 * cannot load the agent (another version or ABI), the boot file says so and how to install
 * probing there, and the program runs without it.
 *
 * With -o FILE it also sets PROBING_RECORD=<absolute FILE> (each agent records into it, or into
 * a per-rank name: docs/recordings.md), after checking the path under the rules of recpath.h,
 * so a bad path is refused before the job starts. Then execvp() replaces this process, so the
 * program keeps our pid, terminal, signals and exit status. The package is looked for, in order,
 * in
 *   $PROBING_PYTHONPATH
 *   <dir of this executable>/python                     (a layout with python/ beside the binary)
 *   <exe dir>/../lib/python3.* /site-packages, .../dist-packages   (pip, venv, --user)
 *   <exe dir>/../../python                              (meson build tree: build/src/cli/probing)
 * A directory counts only if the package there has its built extension (_agent*.so).
 */
#include "cli.h"

#include "recpath.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A usable package: probing/__init__.py and the built extension probing/_agent*.so beside it
 * (the source tree has the first without the second). */
static int has_package(const char *dir)
{
    char path[PATH_MAX];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/probing/__init__.py", dir);
    if (n <= 0 || (size_t)n >= sizeof path || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    n = snprintf(path, sizeof path, "%s/probing/_agent*.so", dir);
    if (n <= 0 || (size_t)n >= sizeof path) return 0;
    glob_t g;
    int found = glob(path, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    if (found) globfree(&g);
    return found;
}

/* Writes dir/name into out; returns 0, or -1 when it does not fit. */
static int join(char *out, size_t outlen, const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    if (a + 1 + b >= outlen) return -1;
    memcpy(out, dir, a);
    out[a] = '/';
    memcpy(out + a + 1, name, b + 1);
    return 0;
}

int pb_cli_find_package(char *out, size_t outlen)
{
    const char *env = getenv("PROBING_PYTHONPATH");
    if (env && *env && has_package(env)) {
        snprintf(out, outlen, "%s", env);
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = '\0';

    char candidate[PATH_MAX];
    static const char *const site_patterns[] = {"../lib/python3.*/site-packages",
                                                "../lib/python3.*/dist-packages",
                                                "../lib/python3/dist-packages"};
    for (size_t i = 0; i < sizeof site_patterns / sizeof site_patterns[0]; i++) {
        glob_t g;
        if (join(candidate, sizeof candidate, exe, site_patterns[i])) continue;
        if (glob(candidate, 0, NULL, &g) != 0) continue;
        int found = 0;
        for (size_t k = g.gl_pathc; k-- > 0 && !found;) /* newest Python first */
            found = has_package(g.gl_pathv[k]) && realpath(g.gl_pathv[k], out) != NULL;
        globfree(&g);
        if (found) return 0;
    }
    static const char *const relative[] = {"python", "../../python"};
    for (size_t i = 0; i < sizeof relative / sizeof relative[0]; i++) {
        if (join(candidate, sizeof candidate, exe, relative[i])) continue;
        if (has_package(candidate) && realpath(candidate, out)) return 0;
    }
    (void)outlen;
    return -1;
}

int cmd_run(const pb_cli_args *a)
{
    if (a->exec_argc == 0) {
        pb_cli_error("run needs a command: probing run -- python train.py");
        return PB_EXIT_USAGE;
    }
    if (setenv("PROBING", "1", 1)) {
        pb_cli_error("cannot set PROBING=1: %s", strerror(errno));
        return PB_EXIT_ERROR;
    }
    if (a->output) {
        /* Absolute, so a program that changes directory still writes where the user meant;
         * PROBING_RECORD_PID tells the agent of this process (exec keeps the pid) from its
         * children, which record into per-rank or per-pid names (docs/recordings.md). */
        char dir[PATH_MAX], absolute[PATH_MAX + 256], pid[32], why[512];
        const char *slash = strrchr(a->output, '/');
        const char *base = slash ? slash + 1 : a->output;
        int n = slash ? snprintf(dir, sizeof dir, "%.*s", (int)(slash - a->output + 1), a->output)
                      : snprintf(dir, sizeof dir, ".");
        char resolved[PATH_MAX];
        if (!*base || n < 0 || (size_t)n >= sizeof dir || !realpath(dir, resolved)) {
            pb_cli_error("cannot record to %s: %s", a->output,
                         *base ? strerror(errno) : "it names a directory, not a file");
            return PB_EXIT_USAGE;
        }
        snprintf(absolute, sizeof absolute, "%s/%s", resolved, base);
        /* A path with %r/%h/%p is checked by each agent once expanded; a plain one here, so
         * that /dev/null, a FIFO or another job's recording is refused before the job starts. */
        int rc = strchr(absolute, '%') ? 0 : pb_recpath_check(absolute, a->force, why, sizeof why);
        if (rc) {
            pb_cli_error("cannot record to %s: %s", a->output, why);
            return PB_EXIT_USAGE;
        }
        snprintf(pid, sizeof pid, "%ld", (long)getpid());
        if (setenv("PROBING_RECORD", absolute, 1) || setenv("PROBING_RECORD_PID", pid, 1) ||
            setenv("PROBING_RECORD_FORCE", a->force ? "1" : "0", 1)) {
            pb_cli_error("cannot set PROBING_RECORD: %s", strerror(errno));
            return PB_EXIT_ERROR;
        }
    } else if (a->force) {
        pb_cli_error("--force goes with -o FILE.db: probing run -o run.db --force -- python "
                     "train.py");
        return PB_EXIT_USAGE;
    }
    char parent[PATH_MAX];
    if (pb_cli_find_package(parent, sizeof parent) == 0) {
        /* Only probing/_boot (a sitecustomize.py) goes on PYTHONPATH, never the site-packages
         * that holds probing: the program must keep its own torch. */
        const char *old = getenv("PYTHONPATH");
        size_t len = strlen(parent) + (old ? strlen(old) : 0) + 32;
        char *value = malloc(len);
        if (!value) {
            pb_cli_error("out of memory");
            return PB_EXIT_ERROR;
        }
        snprintf(value, len, "%s/probing/_boot%s%s", parent, old && *old ? ":" : "",
                 old && *old ? old : "");
        int rc = setenv("PYTHONPATH", value, 1) || setenv("PROBING_PACKAGE_DIR", parent, 1);
        free(value);
        if (rc) {
            pb_cli_error("cannot set PYTHONPATH: %s", strerror(errno));
            return PB_EXIT_ERROR;
        }
    } else {
        pb_cli_error("warning: cannot find the probing Python package next to this executable; "
                     "running with PROBING=1 only (the agent starts if 'import probing' works "
                     "in the program). Set PROBING_PYTHONPATH to the directory that contains "
                     "probing/ to fix this.");
    }
    fflush(stdout);
    fflush(stderr);
    execvp(a->exec_argv[0], a->exec_argv);
    int err = errno;
    pb_cli_error("cannot run '%s': %s", a->exec_argv[0], strerror(err));
    return err == ENOENT ? 127 : 126;
}
