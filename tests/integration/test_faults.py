"""Faults: the target dies mid-query, the agent cannot make its socket. (A stale socket file
from a dead process: test_errors.py::test_process_has_exited for the CLI, and
tests/unit/test_http.c for the agent replacing it.)"""
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

SLOW_SQL = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
            "SELECT count(*) FROM c")


def test_target_exits_mid_query(cli, traced, session_dir):
    """A query is running in the agent when the process is killed."""
    t = traced("inference.py", "--steps", 1)
    t.wait_holding()
    q = subprocess.Popen([cli.binary, t.target(), "query", SLOW_SQL], env=cli.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # the query runs on a server thread, which burns CPU: wait until the process uses some
    def cpu_ticks():
        fields = open(f"/proc/{t.pid}/stat").read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    base = cpu_ticks()
    deadline = time.monotonic() + 60
    while cpu_ticks() < base + 20:   # 0.2 s of CPU: the query is under way
        assert time.monotonic() < deadline and q.poll() is None, q.communicate()
        time.sleep(0.01)
    os.killpg(t.pid, signal.SIGKILL)
    out, err = q.communicate(timeout=60)
    assert (q.returncode, out, err) == (1, "", f"probing: process {t.pid} exited before answering\n")


def test_target_exits_mid_eval(cli, traced, session_dir):
    t = traced("inference.py", "--steps", 1)
    t.wait_holding()
    marker = session_dir / f"eval-started-{t.pid}"
    q = subprocess.Popen([cli.binary, t.target(), "eval",
                          f"import time\nopen({str(marker)!r}, 'w').close()\ntime.sleep(60)"],
                         env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline and q.poll() is None, q.communicate()
        time.sleep(0.01)
    os.killpg(t.pid, signal.SIGKILL)
    out, err = q.communicate(timeout=60)
    assert (q.returncode, out, err) == (1, "", f"probing: process {t.pid} exited before answering\n")


def agent_warnings(t):
    return [line for line in t.stderr().splitlines() if line.startswith("probing:")]


def start_without_socket(launcher, env, probing_dir):
    t = launcher.traced("inference.py", "--steps", 2, hold=False, expect_socket=False,
                        env=dict(env, PROBING_DIR=str(probing_dir)))
    assert t.proc.wait(timeout=240) == 0, t.describe()
    assert "final output:" in t.stdout()
    return t


def test_socket_dir_of_another_user(launcher, env):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another uid")
    d = Path(tempfile.mkdtemp(prefix="pbo", dir="/tmp"))
    try:
        os.chown(d, 65534, 65534)
        t = start_without_socket(launcher, env, d)
        assert agent_warnings(t) == [
            f"probing: not starting: the socket directory {d} belongs to uid 65534, not to you "
            f"(uid 0): another user may have made it to pose as your processes; remove it "
            f"(rm -r {d}) or set PROBING_DIR to a directory of your own"]
        assert list(d.iterdir()) == []
    finally:
        d.rmdir()


def test_socket_dir_writable_by_others(launcher, env):
    d = Path(tempfile.mkdtemp(prefix="pbw", dir="/tmp"))
    try:
        os.chmod(d, 0o777)
        t = start_without_socket(launcher, env, d)
        assert agent_warnings(t) == [
            f"probing: not starting: the socket directory {d} is writable by everyone (mode "
            f"0777): others could plant sockets in it; run chmod 700 {d}"]
        assert list(d.iterdir()) == []
    finally:
        d.rmdir()


def test_socket_dir_cannot_be_created(launcher, env, session_dir):
    f = session_dir / "a-file"
    f.write_text("")
    d = f / "sockets"
    t = start_without_socket(launcher, env, d)
    assert agent_warnings(t) == [
        f"probing: not starting: cannot use socket directory {d}: Not a directory"]


# An LD_PRELOAD shim whose pthread_create fails with EAGAIN (what RLIMIT_NPROC gives) when the
# caller is the agent or libmicrohttpd (the server's threads), and works for everyone else
# (PyTorch's own pools, the interpreter). No test-only knob in the product.
FAIL_THREADS_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
    static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!real) real = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))
                          dlsym(RTLD_NEXT, "pthread_create");
    Dl_info info;
    if (dladdr(__builtin_return_address(0), &info) && info.dli_fname &&
        (strstr(info.dli_fname, "probing/_agent") || strstr(info.dli_fname, "libmicrohttpd")))
        return EAGAIN;
    return real(t, a, fn, arg);
}
"""


@pytest.mark.skipif(bool(os.environ.get("PROBING_SANITIZED")),
                    reason="under ASan its own pthread_create interceptor comes first in LD_PRELOAD "
                           "and the shim is never called")
def test_agent_cannot_create_threads(launcher, env, session_dir):
    src = session_dir / "failthreads.c"
    src.write_text(FAIL_THREADS_C)
    shim = session_dir / "failthreads.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", str(src), "-o", str(shim), "-ldl"], check=True)
    d = session_dir / "nothreads"
    d.mkdir(mode=0o700)
    t = start_without_socket(launcher, dict(env, LD_PRELOAD=str(shim)), d)
    # The job finishes (start_without_socket checks it). The parts that need a thread fail,
    # then the server (its request reaper's thread, started before libmicrohttpd's, cannot
    # start) stops the agent with the system's reason: one line says all of it.
    again = "Resource temporarily unavailable"
    assert agent_warnings(t) == [
        f"probing: not starting: cannot listen on {d}/{t.pid}.sock: {again}; also failed: "
        f"system sampling ({again}), memory sampling ({again}), eval ({again})"]
    assert list(d.iterdir()) == []


def test_full_disk_for_the_token_file(launcher, env):
    """The only file probing writes is the TCP token file beside the socket."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    m = Path(tempfile.mkdtemp(prefix="pbfull", dir="/tmp"))
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(m)], check=True)
        d = m / "s"
        d.mkdir(mode=0o700)
        fd = os.open(m / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:   # fill it: writes stop with ENOSPC
            while os.write(fd, b"x" * 4096):
                pass
        except OSError:
            pass
        os.close(fd)
        t = start_without_socket(launcher, dict(env, PROBING_LISTEN="127.0.0.1:0"), d)
        assert agent_warnings(t) == [
            f"probing: not starting: cannot listen on {d}/{t.pid}.sock / 127.0.0.1:0: "
            "No space left on device"]
        assert list(d.iterdir()) == []   # no socket, no half-written token file
    finally:
        subprocess.run(["umount", str(m)])
        m.rmdir()
