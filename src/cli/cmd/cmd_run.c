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
 * program keeps our pid, terminal, signals and exit status. Where the package is looked for:
 * pb_package_find (client/package.c).
 */
#include "client/package.h"
#include "cmd/command.h"

#include "recpath.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The options of run (option.h): the parser and 'run --help' read them. */
const pb_option pb_options_run[] = {
    PB_OPTION_OUTPUT("FILE.db",
                     "keep the whole record in the SQLite file FILE.db, flushed every second, at "
                     "exit and on SIGTERM; read it later with 'probing FILE.db query ...' "
                     "(docs/recordings.md). The ranks of a torchrun job record into "
                     "FILE.rank<R>.db (the launcher records nothing); %r, %h, %p in FILE are "
                     "replaced by the rank, host name and pid. FILE must not exist, or be a "
                     "recording and --force given; anything else is refused",
                     PB_USAGE("[-o FILE.db [--force]]")),
    PB_OPTION_FORCE("replace FILE.db when it is a recording (never another kind of file)",
                    PB_USAGE_SHOWN_ABOVE),
    PB_OPTION_ARGUMENTS("-- COMMAND [ARGS...]"),
    PB_OPTION_TABLE_END,
};

int cmd_run(const pb_cli_args *a)
{
    if (a->exec_argc == 0)
        return pb_cli_usage_error("run needs a command: probing run -- python train.py");
    if (setenv("PROBING", "1", 1)) return pb_cli_error("cannot set PROBING=1: %s", strerror(errno));
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
        if (!*base || n < 0 || (size_t)n >= sizeof dir || !realpath(dir, resolved))
            return pb_cli_usage_error("cannot record to %s: %s", a->output,
                                      *base ? strerror(errno) : "it names a directory, not a file");
        snprintf(absolute, sizeof absolute, "%s/%s", resolved, base);
        /* A path with %r/%h/%p is checked by each agent once expanded; a plain one here, so
         * that /dev/null, a FIFO or another job's recording is refused before the job starts. */
        int rc = strchr(absolute, '%') ? 0 : pb_recpath_check(absolute, a->force, why, sizeof why);
        if (rc) return pb_cli_usage_error("cannot record to %s: %s", a->output, why);
        snprintf(pid, sizeof pid, "%ld", (long)getpid());
        if (setenv("PROBING_RECORD", absolute, 1) || setenv("PROBING_RECORD_PID", pid, 1) ||
            setenv("PROBING_RECORD_FORCE", a->force ? "1" : "0", 1))
            return pb_cli_error("cannot set PROBING_RECORD: %s", strerror(errno));
    } else if (a->force) {
        return pb_cli_usage_error("--force goes with -o FILE.db: probing run -o run.db --force -- "
                                  "python train.py");
    }
    char parent[PATH_MAX];
    if (pb_package_find(parent, sizeof parent) == 0) {
        /* Only probing/_boot (a sitecustomize.py) goes on PYTHONPATH, never the site-packages
         * that holds probing: the program must keep its own torch. */
        const char *old = getenv("PYTHONPATH");
        size_t len = strlen(parent) + (old ? strlen(old) : 0) + 32;
        char *value = malloc(len);
        if (!value) return pb_cli_error("out of memory");
        snprintf(value, len, "%s/probing/_boot%s%s", parent, old && *old ? ":" : "",
                 old && *old ? old : "");
        int rc = setenv("PYTHONPATH", value, 1) || setenv("PROBING_PACKAGE_DIR", parent, 1);
        free(value);
        if (rc) return pb_cli_error("cannot set PYTHONPATH: %s", strerror(errno));
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
