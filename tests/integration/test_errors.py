"""Every error a user can run into, with the exact message they read.

Errors go to stderr as "probing: <message>", exit 1 (2 for a bad command line), and leave the
target running."""
import json
import os
import signal
import socket
import subprocess
import time

import pytest

from conftest import PYTHON, dead_pid, free_tcp_port


@pytest.fixture(scope="module")
def small(session_launcher, env):
    """An inference run that holds, with a 1 MB result limit and a TCP listener."""
    port = free_tcp_port()
    e = dict(env, PROBING_MAX_RESULT_MB="1", PROBING_LISTEN=f"127.0.0.1:{port}")
    t = session_launcher.traced("inference.py", "--steps", 5, env=e)
    t.wait_holding()
    t.port = port
    yield t
    t.kill()


def assert_error(r, *fragments, code=1):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("probing: "), r.stderr
    for f in fragments:
        assert f in r.stderr, f"{f!r} not in stderr:\n{r.stderr}"
    assert r.stdout == "", r.stdout


def assert_serving(cli, t):
    assert t.alive(), t.describe()
    assert cli.scalar(t.target(), "SELECT 1") == 1


# ----------------------------------------------------------------------------- targets


def test_no_such_pid(cli):
    pid = dead_pid()
    assert_error(cli(pid, "query", "SELECT 1", check=False), f"no such process: {pid}")


def test_pid_without_probing(cli, launcher):
    plain = launcher.plain("inference.py", "--steps", 1, hold=True)
    plain.wait_holding()
    r = cli(plain.pid, "query", "SELECT 1", check=False)
    assert_error(r, f"process {plain.pid}", "is not traced by probing")
    # and it tells what to do: load the agent now
    assert f"Load the agent into it now, without restarting it: probing {plain.pid} inject" \
        in r.stderr


def test_process_has_exited(cli, traced):
    """The process died without cleaning up (SIGKILL): its socket file is left behind."""
    t = traced("inference.py", "--steps", 1)
    t.wait_holding()
    sock = t.socket_path
    os.killpg(t.pid, signal.SIGKILL)
    t.proc.wait(timeout=30)
    assert sock.exists()
    assert_error(cli(sock, "query", "SELECT 1", check=False), f"process {t.pid} has exited")
    # by pid: the socket it left says it was traced
    assert_error(cli(t.pid, "query", "SELECT 1", check=False), f"process {t.pid} has exited")
    assert "start it with 'probing run -o run.db -- <command>' next time" in \
        cli(t.pid, "query", "SELECT 1", check=False).stderr


def test_connection_refused_tcp(cli):
    port = free_tcp_port()
    assert_error(cli(f"127.0.0.1:{port}", "query", "SELECT 1", check=False),
                 f"connection refused by 127.0.0.1:{port}")


def test_stale_socket_nobody_listens(cli, session_dir):
    path = session_dir / "stale.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()  # the file stays, nobody listens
    r = cli(path, "query", "SELECT 1", check=False)
    assert_error(r, "nothing is listening on", str(path))


def test_socket_path_that_does_not_exist(cli, session_dir):
    path = session_dir / "missing.sock"
    assert_error(cli(path, "query", "SELECT 1", check=False), f"no socket at {path}")


def test_recording_that_does_not_exist(cli, session_dir):
    """A missing run.db is a missing file, not a malformed target (issue 28)."""
    path = session_dir / "missing-run.db"
    assert_error(cli(path, "info", check=False), f"no such file: {path}",
                 f"'probing run -o {path} -- <command>'")
    r = cli("missing-run.db", "report", check=False)
    assert_error(r, "no such file: missing-run.db")
    assert "not a target" not in r.stderr and "socket" not in r.stderr, r.stderr
    text = session_dir / "notes.db"
    text.write_text("not sqlite\n")
    assert_error(cli(text, "info", check=False), f"{text} is not a recording")


def test_tcp_target_works_when_listening(cli, small):
    """The other side of the coin: host:port, with PROBING_LISTEN set, answers."""
    rows = cli.query(f"127.0.0.1:{small.port}", "SELECT COUNT(*) AS n FROM python.torch_trace")
    assert rows[0]["n"] > 0


# ----------------------------------------------------------------------------- SQL


def test_sql_syntax_error(cli, small):
    r = cli(small.target(), "query", "SELEC step FROM python.torch_trace", check=False)
    assert r.returncode == 1
    assert r.stderr.startswith("probing: SQL error")
    assert 'near "SELEC": syntax error' in r.stderr
    assert_serving(cli, small)


def test_sql_error_position(cli, small):
    sql = "SELECT step,\n  FROM python.torch_trace"
    r = cli(small.target(), "query", sql, check=False)
    assert r.returncode == 1
    assert 'near "FROM": syntax error' in r.stderr
    # the offending line is shown with a caret under the error
    assert "  FROM python.torch_trace" in r.stderr and "^" in r.stderr


def test_unknown_table(cli, small):
    r = cli(small.target(), "query", "SELECT * FROM python.nope", check=False)
    assert_error(r, "no such table: python.nope")
    assert_serving(cli, small)


def test_unknown_column(cli, small):
    r = cli(small.target(), "query", "SELECT nope FROM python.torch_trace", check=False)
    assert_error(r, "no such column: nope")


@pytest.mark.parametrize("sql", [
    "INSERT INTO python.torch_trace(step) VALUES (1)",
    "DELETE FROM python.torch_trace",
    "UPDATE python.torch_trace SET step = 0",
    "CREATE TABLE t(x)",
    "CREATE TEMP TABLE t(x)",
    "DROP TABLE python.torch_trace",
    "ATTACH DATABASE '{dir}/attached.db' AS other",
    "PRAGMA writable_schema = 1",
])
def test_writes_are_refused(cli, small, session_dir, sql):
    sql = sql.format(dir=session_dir)
    rows_before = cli.scalar(small.target(), "SELECT COUNT(*) FROM python.torch_trace")
    r = cli(small.target(), "query", sql, check=False)
    assert r.returncode == 1, (sql, r.stdout, r.stderr)
    assert r.stderr.startswith("probing: SQL error: "), r.stderr
    assert "read-only" in r.stderr or "not authorized" in r.stderr, r.stderr
    assert not (session_dir / "attached.db").exists()
    assert cli.scalar(small.target(), "SELECT COUNT(*) FROM python.torch_trace") == rows_before
    assert_serving(cli, small)


def test_huge_result_is_cut_with_a_message(cli, small):
    # about 20 MB of rows against PROBING_MAX_RESULT_MB=1
    sql = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 200000) "
           "SELECT x, printf('%0100d', x) AS pad FROM c")
    r = cli(small.target(), "query", sql, "-f", "json", check=False)
    assert r.returncode == 0  # the rows that fit are printed; the message says what is missing
    assert "PROBING_MAX_RESULT_MB" in r.stderr, r.stderr
    assert "1 MB" in r.stderr, r.stderr
    assert r.stderr.startswith("probing: ")
    rows = json.loads(r.stdout) if r.stdout.strip() else []
    assert len(rows) < 200000
    assert len(r.stdout) < 4 * 1024 * 1024
    assert_serving(cli, small)


def test_query_answers_while_python_holds_the_gil(cli, traced, session_dir):
    """Queries never need the GIL: they answer while Python code spins in the target."""
    t = traced("inference.py", "--steps", 2)
    t.wait_holding()
    started = session_dir / f"spin-{t.pid}"
    stop = session_dir / f"spin-stop-{t.pid}"
    # a busy loop in the eval thread holds the GIL most of the time until told to stop (or 60 s)
    spin = subprocess.Popen(
        [cli.binary, t.target(), "eval", "--timeout", "90",
         f"import time, os\nopen({str(started)!r}, 'w').close()\n"
         f"end = time.time() + 60\nlook = 0\n"
         f"while time.time() < end:\n"
         f"    if time.time() > look:\n"
         f"        look = time.time() + 0.25\n"
         f"        if os.path.exists({str(stop)!r}): break\n"],
        env=cli.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline and spin.poll() is None, "the spin never started"
            time.sleep(0.01)
        for _ in range(5):
            assert cli.scalar(t.target(), "SELECT COUNT(*) > 0 FROM python.torch_trace") == 1
        # the loop only ends when told to (or after 60 s): the queries were answered while it
        # held the GIL
        assert spin.poll() is None, "the loop ended before the queries did: nothing was shown"
    finally:
        stop.touch()
        spin.wait(timeout=60)


# ----------------------------------------------------------------------------- eval


def test_eval_exception(cli, small):
    r = cli(small.target(), "eval", "import json\njson.loads('{')", check=False)
    assert r.returncode == 1
    assert "Traceback (most recent call last)" in r.stderr
    assert "json.decoder.JSONDecodeError" in r.stderr or "JSONDecodeError" in r.stderr
    assert_serving(cli, small)


def test_eval_timeout_message(cli, small):
    r = cli(small.target(), "eval", "--timeout", "1", "while True: pass", check=False,
            timeout=60)
    assert r.returncode == 124, (r.returncode, r.stderr)  # a timeout, not a usage error (2)
    assert r.stderr.startswith("probing: ")
    assert "timeout" in r.stderr.lower() or "timed out" in r.stderr.lower(), r.stderr
    assert_serving(cli, small)


# ----------------------------------------------------------------------------- command line


def test_no_arguments_is_usage_error(cli):
    r = cli(check=False)
    assert r.returncode == 2
    assert "usage" in (r.stderr + r.stdout).lower()


def test_unknown_command(cli, small):
    r = cli(small.target(), "frobnicate", check=False)
    assert r.returncode == 2
    assert r.stderr.startswith("probing: ") and "frobnicate" in r.stderr


def test_unknown_output_format(cli, small):
    r = cli(small.target(), "query", "SELECT 1", "-f", "xml", check=False)
    assert r.returncode == 2
    assert "unknown output format 'xml'" in r.stderr


def test_query_without_sql(cli, small):
    r = cli(small.target(), "query", check=False)
    assert r.returncode == 2
    assert r.stderr.startswith("probing: ")


def test_dash_t_form(cli, small):
    rows = json.loads(cli("-t", small.target(), "query", "SELECT 7 AS x", "-f", "json").stdout)
    assert rows == [{"x": 7}]


def test_run_passes_exit_status(cli, session_dir):
    r = subprocess.run([cli.binary, "run", "--", PYTHON, "-c", "import sys; sys.exit(3)"],
                       env=cli.env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr


def test_run_missing_command(cli):
    r = subprocess.run([cli.binary, "run", "--", "/nonexistent/program"], env=cli.env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 127
    assert r.stderr.startswith("probing: cannot run '/nonexistent/program'")
