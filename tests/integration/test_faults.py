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
            f"probing: not starting: cannot use socket directory {d}: Operation not permitted"]
        assert list(d.iterdir()) == []
    finally:
        d.rmdir()


def test_socket_dir_writable_by_others(launcher, env):
    d = Path(tempfile.mkdtemp(prefix="pbw", dir="/tmp"))
    try:
        os.chmod(d, 0o777)
        t = start_without_socket(launcher, env, d)
        assert agent_warnings(t) == [
            f"probing: not starting: cannot use socket directory {d}: Operation not permitted"]
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
