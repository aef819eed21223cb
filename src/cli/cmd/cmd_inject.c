/*
 * cmd_inject.c - `probing <pid> inject [--timeout S]`: load the agent into a running Python
 * process that never imported probing, without restarting it.
 *
 * 1. Checks: the process exists; it is not already traced (its socket answers); it runs a
 *    CPython (remote/inject.h finds Py_AddPendingCall); the probing package found next to this
 *    program (as for `probing run`) has an extension built for that Python's version.
 * 2. A short Python bootstrap (below) is queued in the process: on CPython 3.14+ with the
 *    interpreter's own sys.remote_exec (PEP 768), run by the process's own executable; before
 *    3.14 through ptrace and Py_AddPendingCall (remote/inject.c). The interpreter runs it at
 *    its next safe point, in the main thread with the GIL.
 * 3. The bootstrap imports probing from that package directory (taken off sys.path again
 *    afterwards), starts the agent (which hooks torch at once when torch is already imported:
 *    modules, optimizers and data loaders that already exist are recorded from their next
 *    call) and writes its outcome to <socket dir>/<pid>.inject: "ok\n<socket>", "already\n
 *    <socket>" or "error\n<traceback>". This command waits for that file.
 * The bootstrap never raises (a pending call that fails would surface as an error in the
 * user's code) and adds no name to __main__.
 */
#include "child.h"
#include "client/client.h"
#include "client/package.h"
#include "clock.h"
#include "cmd/command.h"
#include "inject.h"
#include "paths.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_S 30.0
#define PB_CLI_PYTHON_MIN_MINOR 9 /* pyproject.toml: requires-python >= 3.9 */

/* Runs in the target with _path, _result, _page, _size bound (see bootstrap()). */
static const char bootstrap_body[] =
    "import os, sys\n"
    "def _done(text):\n"
    "    try:\n"
    "        tmp = _result + '.tmp'\n"
    "        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)\n"
    "        with os.fdopen(fd, 'w') as f:\n"
    "            f.write(text)\n"
    "        os.replace(tmp, _result)\n"
    "    except Exception:\n"
    "        pass\n"
    "try:\n"
    "    _mod = sys.modules.get('probing')\n"
    "    _ag = getattr(_mod, '_agent', None)\n"
    "    _ep = _ag.endpoint() if _ag is not None and hasattr(_ag, 'endpoint') else None\n"
    "    if _ep:\n"
    "        _done('already\\n' + _ep)\n"
    "    else:\n"
    "        sys.path.insert(0, _path)\n"
    "        try:\n"
    "            import probing\n"
    "        finally:\n"
    "            try:\n"
    "                sys.path.remove(_path)\n"
    "            except ValueError:\n"
    "                pass\n"
    "        if not hasattr(probing, 'init') or not hasattr(probing, '_agent'):\n"
    "            raise ImportError('the module named probing in this process is not probing ('\n"
    "                              + str(getattr(probing, '__file__', '?')) + ')')\n"
    "        _ep = probing.init()\n"
    "        if _ep:\n"
    "            _done('ok\\n' + _ep)\n"
    "        else:\n"
    "            _done('error\\nthe agent did not start in this process (PROBING_* settings? '\n"
    "                  'its stderr says why)')\n"
    "except BaseException:\n"
    "    import traceback\n"
    "    _done('error\\n' + traceback.format_exc())\n"
    "finally:\n"
    "    try:\n"
    "        if _page:\n"
    "            sys.modules['probing']._agent._release_inject_page(_page, _size)\n"
    "    except BaseException:\n"
    "        pass\n";

static int append_hex(pb_buf *b, const char *s)
{
    static const char digits[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char pair[2] = {digits[*p >> 4], digits[*p & 15]};
        if (pb_buf_append(b, pair, 2)) return -1;
    }
    return 0;
}

/* The source to queue: one statement that binds the inputs in a fresh namespace and runs the
 * body there. Strings travel as hex, so no path can break the quoting. NULL on no memory. */
static char *bootstrap(const char *package_dir, const char *result_path, int with_page)
{
    pb_buf b = PB_BUF_INIT;
    int rc = pb_buf_puts(&b, "try:\n    exec(bytes.fromhex('");
    rc = rc || append_hex(&b, bootstrap_body);
    rc = rc || pb_buf_puts(&b, "').decode(), {'__name__': '__probing_inject__', "
                               "'_path': bytes.fromhex('");
    rc = rc || append_hex(&b, package_dir);
    rc = rc || pb_buf_puts(&b, "').decode('utf-8', 'surrogateescape'), '_result': "
                               "bytes.fromhex('");
    rc = rc || append_hex(&b, result_path);
    rc = rc || pb_buf_puts(&b, "').decode('utf-8', 'surrogateescape'), ");
    rc = rc || pb_buf_puts(&b, with_page ? "'_page': int('" PB_INJECT_PAGE_ADDR "', 16), "
                                           "'_size': int('" PB_INJECT_PAGE_SIZE "', 16)})\n"
                                         : "'_page': 0, '_size': 0})\n");
    rc = rc || pb_buf_puts(&b, "except BaseException:\n    pass\n");
    if (rc) {
        pb_buf_free(&b);
        return NULL;
    }
    return pb_buf_steal(&b, NULL);
}

/* The CPython minor version the package's extension is built for (from its file name,
 * _agent.cpython-311-x86_64-linux-gnu.so), or -1 when it cannot be told. */
static int package_minor(const char *package_dir, char *ext_name, size_t ext_len)
{
    char pattern[PATH_MAX + 64];
    glob_t g;
    int minor = -1;
    snprintf(pattern, sizeof pattern, "%s/probing/_agent*.so", package_dir);
    if (glob(pattern, 0, NULL, &g) != 0) return -1;
    for (size_t i = 0; i < g.gl_pathc && minor < 0; i++) {
        const char *base = strrchr(g.gl_pathv[i], '/');
        base = base ? base + 1 : g.gl_pathv[i];
        snprintf(ext_name, ext_len, "%s", base);
        const char *tag = strstr(base, ".cpython-3");
        if (tag) minor = atoi(tag + 10);
    }
    globfree(&g);
    return minor;
}

/* Reads the whole small file at path into a malloc'ed string; NULL when it is not there. */
static char *read_small_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    pb_buf b = PB_BUF_INIT;
    char chunk[4096];
    size_t n;
    b.max_len = 1 << 20;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (pb_buf_append(&b, chunk, n)) break;
    fclose(f);
    char *s = pb_buf_steal(&b, NULL);
    pb_buf_free(&b);
    return s ? s : strdup("");
}

/* Is an agent answering on pid's socket? */
static int agent_answers(pid_t pid, char *socket_path, size_t len)
{
    struct stat st;
    if (pb_paths_socket(pid, socket_path, len) || stat(socket_path, &st) != 0) return 0;
    pb_target t;
    pb_response resp;
    char err[512];
    if (pb_target_for_socket(pid, socket_path, &t)) return 0;
    if (pb_client_request(&t, "GET", "/api/info", NULL, 2000, &resp, err, sizeof err) != 0)
        return 0; /* a stale socket, or an agent that cannot answer: not traced for us */
    int ok = resp.status == 200;
    pb_buf_free(&resp.body);
    return ok;
}

/* Python 3.14+: the interpreter's own remote execution, run by the target's own executable so
 * that the versions match. Returns 0 when the script was handed over. */
static int remote_exec(pid_t pid, const char *script_path)
{
    char exe[64], code[PATH_MAX + 128];
    snprintf(exe, sizeof exe, "/proc/%d/exe", (int)pid);
    snprintf(code, sizeof code, "import sys; sys.remote_exec(%d, sys.argv[1])", (int)pid);
    char *argv[] = {"python", "-I", "-c", code, (char *)script_path, NULL};
    pb_child_opts opts = {.file = exe, .argv = argv};
    pid_t child;
    int rc = pb_child_start(&opts, &child, NULL, NULL);
    if (rc == -ENOENT || rc == -EACCES) return -1; /* as an exec that failed in the child */
    if (rc) return rc;
    return pb_child_wait(child) == 0 ? 0 : -1;
}

/* The options of inject (option.h): the parser and 'inject --help' read them. */
const pb_option pb_options_inject[] = {
    PB_OPTION_TIMEOUT("wait at most S seconds for the agent to start (default 30); exit status "
                      "2 when it has not (it is still queued and starts when the main thread "
                      "runs Python code again)"),
    PB_OPTION_TABLE_END,
};

int cmd_inject(const pb_cli_args *a)
{
    if (!pb_target_is_pid(a->target))
        return pb_cli_usage_error("inject loads the agent into a process and needs its pid, not "
                                  "'%s': probing <pid> inject", a->target);
    long v = strtol(a->target, NULL, 10);
    pid_t pid = (pid_t)v;
    if (v <= 0 || v > 0x7fffffffL || !pb_target_pid_alive(pid))
        return pb_cli_error("no process %s", a->target);
    if (pid == getpid()) return pb_cli_usage_error("cannot inject into probing itself");
    double timeout_s = a->timeout_s > 0 ? a->timeout_s : DEFAULT_TIMEOUT_S;

    char socket_path[PATH_MAX];
    if (agent_answers(pid, socket_path, sizeof socket_path)) {
        printf("process %d is already traced by probing (%s); nothing changed\n", (int)pid,
               socket_path);
        return PB_EXIT_OK;
    }

    /* root may ptrace anyone, but the agent would serve from that user's socket directory and
     * could not write its answer into root's: the injection would look like a hang. */
    char proc_dir[64];
    struct stat owner;
    snprintf(proc_dir, sizeof proc_dir, "/proc/%d", (int)pid);
    if (geteuid() == 0 && stat(proc_dir, &owner) == 0 && owner.st_uid != 0) {
        struct passwd *pw = getpwuid(owner.st_uid);
        char name[64];
        if (pw && pw->pw_name) snprintf(name, sizeof name, "%s", pw->pw_name);
        else snprintf(name, sizeof name, "#%u", (unsigned)owner.st_uid);
        return pb_cli_error("process %d belongs to user %s (uid %u), not to root: its agent would "
                            "serve from that user's socket directory, which probing run as root "
                            "does not use, and could not answer into root's; run inject as that "
                            "user: sudo -u %s probing %d inject; nothing was changed", (int)pid,
                            name, (unsigned)owner.st_uid, name, (int)pid);
    }

    pb_inject_python py;
    int rc = pb_inject_find_python(pid, &py);
    if (rc == -EPERM || rc == -EACCES)
        return pb_cli_error("not allowed to read process %d (it belongs to another user?): run "
                            "probing as its user or as root", (int)pid);
    if (rc == -ESRCH) return pb_cli_error("process %d exited; nothing was changed", (int)pid);
    if (rc)
        return pb_cli_error("process %d is not a Python process (no libpython or python executable "
                            "defining Py_AddPendingCall is mapped); nothing was changed", (int)pid);

    if (py.major && (py.major != 3 || py.minor < PB_CLI_PYTHON_MIN_MINOR))
        return pb_cli_error("process %d runs Python %d.%d, which probing does not support (it "
                            "needs CPython 3.%d or newer); nothing was changed", (int)pid, py.major,
                            py.minor, PB_CLI_PYTHON_MIN_MINOR);

    char package_dir[PATH_MAX], ext_name[256] = "";
    if (pb_package_find(package_dir, sizeof package_dir) != 0)
        return pb_cli_error("cannot find the probing Python package next to this executable; set "
                            "PROBING_PYTHONPATH to the directory that contains probing/");
    int built_minor = package_minor(package_dir, ext_name, sizeof ext_name);
    if (py.major == 3 && built_minor >= 0 && py.minor != built_minor)
        return pb_cli_error("process %d runs Python 3.%d, but the probing agent in %s is built "
                            "for Python 3.%d (%s); install probing into the process's Python (its "
                            "pip install probing) and run that installation's probing; nothing "
                            "was changed", (int)pid, py.minor, package_dir, built_minor, ext_name);

    char dir[PATH_MAX], result_path[PATH_MAX + 32], script_path[PATH_MAX + 32];
    if (pb_paths_ensure_dir() != 0 || pb_paths_dir(dir, sizeof dir) != 0)
        return pb_cli_error("cannot use the socket directory (PROBING_DIR or /tmp/probing-<uid>)");
    snprintf(result_path, sizeof result_path, "%s/%d.inject", dir, (int)pid);
    unlink(result_path);
    int modern = py.major == 3 && py.minor >= 14;
    char *source = bootstrap(package_dir, result_path, !modern);
    if (!source) return pb_cli_error("out of memory");
    int64_t started = pb_now_ns();
    char why[1024] = "";
    script_path[0] = '\0';
    if (modern) {
        snprintf(script_path, sizeof script_path, "%s/%d.inject.py", dir, (int)pid);
        int fd = open(script_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        size_t len = strlen(source);
        rc = fd < 0 || write(fd, source, len) != (ssize_t)len ? -1 : 0;
        if (fd >= 0) close(fd);
        if (rc == 0) rc = remote_exec(pid, script_path);
        if (rc) snprintf(why, sizeof why, "sys.remote_exec into process %d failed (see the "
                         "message above); nothing was changed", (int)pid);
    } else {
        rc = pb_inject_source(pid, source, why, sizeof why);
    }
    free(source);
    if (rc) {
        if (*script_path) unlink(script_path);
        return pb_cli_error("%s", why);
    }

    /* Queued: wait for the bootstrap's answer. */
    char *answer = NULL;
    struct timespec pause = {0, 20 * 1000 * 1000};
    while (!(answer = read_small_file(result_path))) {
        if (!pb_target_pid_alive(pid)) {
            pb_cli_error("process %d exited before the agent started", (int)pid);
            if (*script_path) unlink(script_path);
            return PB_EXIT_ERROR;
        }
        if (pb_now_ns() - started > (int64_t)(timeout_s * 1e9)) {
            pb_cli_error("the agent is queued in process %d, but its main thread has not run "
                         "Python code for %g s (blocked in C code, sleeping or waiting?); the "
                         "agent starts when it does: check later with 'probing list'",
                         (int)pid, timeout_s);
            return PB_EXIT_TIMEOUT;
        }
        nanosleep(&pause, NULL);
    }
    unlink(result_path);
    if (*script_path) unlink(script_path);
    double took = (double)(pb_now_ns() - started) / 1e9;
    char *nl = strchr(answer, '\n');
    const char *detail = nl ? nl + 1 : "";
    if (nl) *nl = '\0';
    rc = PB_EXIT_OK;
    if (strcmp(answer, "ok") == 0) {
        char version[32] = "";
        if (py.major && py.micro >= 0)
            snprintf(version, sizeof version, " (Python %d.%d.%d)", py.major, py.minor, py.micro);
        else if (py.major)
            snprintf(version, sizeof version, " (Python %d.%d)", py.major, py.minor);
        printf("probing agent loaded into process %d%s in %.2f s; socket %s\n"
               "next: probing %d query \"SELECT * FROM python.torch_trace LIMIT 10\"\n",
               (int)pid, version, took, detail, (int)pid);
    } else if (strcmp(answer, "already") == 0) {
        printf("process %d is already traced by probing (%s); nothing changed\n", (int)pid,
               detail);
    } else {
        pb_cli_error("the agent could not start in process %d (the process runs on, "
                     "unchanged):\n%s", (int)pid, detail);
        rc = PB_EXIT_ERROR;
    }
    free(answer);
    return rc;
}
