"""`probing <pid> record -o FILE` sent while the agent is still starting (its socket is there,
its recorder not yet open) waits for the recorder, at most 10 s, instead of being refused.

The start-up window is microseconds long; an LD_PRELOAD shim makes it long: the agent's start
reads TORCHELASTIC_RUN_ID (for its info, between listening and opening the recorder) through
getenv, and the shim holds that first call from the agent until a condition is met. No
test-only knob in the product."""
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("PROBING_SANITIZED")),
    reason="under ASan its own interceptors come first in LD_PRELOAD and the shim is not called")

# PB_SHIM_HOLD=after-connection: release 2 s after the agent's server accepted a connection;
# PB_SHIM_HOLD=file: release when the file $PB_SHIM_GO exists. At most 60 s either way.
# $PB_SHIM_LOG gets one line saying how the hold ended.
HOLD_START_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static _Atomic long long accepted_ns; /* when the agent's server first accepted a connection */

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static char *lookup(const char *name)
{
    size_t n = strlen(name);
    for (char **e = environ; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static void hold(void)
{
    const char *mode = lookup("PB_SHIM_HOLD"), *go = lookup("PB_SHIM_GO");
    const char *how = "timeout";
    long long start = now_ns();
    while (now_ns() - start < 60000000000LL) {
        long long a = atomic_load(&accepted_ns);
        if (mode && strcmp(mode, "after-connection") == 0 && a && now_ns() - a > 2000000000LL) {
            how = "released 2 s after a connection";
            break;
        }
        if (go && access(go, F_OK) == 0) {
            how = "released by the go file";
            break;
        }
        usleep(10000);
    }
    const char *log = lookup("PB_SHIM_LOG");
    FILE *f = log ? fopen(log, "a") : NULL;
    if (f) {
        fprintf(f, "%s\n", how);
        fclose(f);
    }
}

char *getenv(const char *name)
{
    static atomic_int held;
    Dl_info info;
    if (strcmp(name, "TORCHELASTIC_RUN_ID") == 0 && !atomic_load(&held) &&
        dladdr(__builtin_return_address(0), &info) && info.dli_fname &&
        strstr(info.dli_fname, "probing/_agent") && !atomic_exchange(&held, 1))
        hold();
    return lookup(name);
}

static void seen(void *caller)
{
    Dl_info info;
    if (dladdr(caller, &info) && info.dli_fname && strstr(info.dli_fname, "libmicrohttpd")) {
        long long zero = 0;
        atomic_compare_exchange_strong(&accepted_ns, &zero, now_ns());
    }
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    static int (*real)(int, struct sockaddr *, socklen_t *);
    if (!real) real = (int (*)(int, struct sockaddr *, socklen_t *))dlsym(RTLD_NEXT, "accept");
    int r = real(fd, addr, len);
    if (r >= 0) seen(__builtin_return_address(0));
    return r;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    static int (*real)(int, struct sockaddr *, socklen_t *, int);
    if (!real) real = (int (*)(int, struct sockaddr *, socklen_t *, int))dlsym(RTLD_NEXT, "accept4");
    int r = real(fd, addr, len, flags);
    if (r >= 0) seen(__builtin_return_address(0));
    return r;
}
"""


@pytest.fixture(scope="module")
def shim(session_dir):
    src = session_dir / "holdstart.c"
    src.write_text(HOLD_START_C)
    out = session_dir / "holdstart.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", str(src), "-o", str(out), "-ldl"],
                   check=True)
    return out


def started_line(pid, path):
    return (f"recording {pid} to {path} (rows still in the rings are included); flushed "
            f"every 1 s, at exit and on SIGTERM. Stop: probing {pid} record --stop\n")


def test_record_during_start_waits_for_the_recorder(cli, launcher, env, shim, tmp_path):
    log = tmp_path / "shim.log"
    t = launcher.traced("inference.py", "--steps", 5, "--print-every", 1, env=dict(
        env, LD_PRELOAD=str(shim), PB_SHIM_HOLD="after-connection", PB_SHIM_LOG=str(log)))
    # The socket is there, the agent's start is held before its recorder opened.
    assert not log.exists() and t.steps_done() == 0
    path = tmp_path / "early.db"
    r = cli(t.target(), "record", "-o", path, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, started_line(t.pid, path), "")
    # the request came while the start was held, and the start went on after it
    assert log.read_text() == "released 2 s after a connection\n"
    t.wait_holding()
    t.finish()
    steps = cli.query(path, "SELECT step FROM python.steps ORDER BY step")
    assert [s["step"] for s in steps] == list(range(4))  # 5 forwards: 4 ended steps


def test_record_during_a_start_that_does_not_end_is_refused_after_10_s(cli, launcher, env, shim,
                                                                       tmp_path):
    log, go = tmp_path / "shim.log", tmp_path / "go"
    t = launcher.traced("inference.py", "--steps", 5, env=dict(
        env, LD_PRELOAD=str(shim), PB_SHIM_HOLD="file", PB_SHIM_GO=str(go), PB_SHIM_LOG=str(log)))
    path = tmp_path / "late.db"
    r = cli(t.target(), "record", "-o", path, check=False)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert r.stderr == (f"probing: the agent is still starting: its recorder was not ready after "
                        f"10 s; try again: probing {t.pid} record -o {path}\n")
    assert not path.exists() and not log.exists()
    # once the start goes on, the same command works
    go.touch()
    t.wait_holding()
    assert log.read_text() == "released by the go file\n"
    r = cli(t.target(), "record", "-o", path, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, started_line(t.pid, path), "")
    t.finish()
    assert cli.scalar(path, "SELECT COUNT(*) FROM python.steps") == 4
