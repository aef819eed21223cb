"""Hardening (docs/security.md): whom the CLI trusts, the job's exit, memory of results in flight,
clients that leave or crawl, files left after SIGTERM.

Most tests use a small Python process without torch that starts the agent (PROBING=1) and
waits for a release file: each repetition costs a Python start-up, not a torch import. Nothing
here sleeps to synchronise: every wait polls for a condition with a generous timeout. The only
time bounds checked are the ones the issue states (exit within 2 s of the script's end).

The tests that need a second user (a directory or socket planted by someone else) create one
with useradd under a unique name, and remove it at teardown; they are skipped when not root.
"""
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import PYTHON, free_tcp_port

LANE = "harden"

# The traced script: the agent starts at interpreter start-up (PROBING=1); the script says
# READY, waits for the release file, then prints END and the monotonic clock and returns.
SCRIPT = r"""
import os, sys, time
release = sys.argv[1]
print("READY", flush=True)
while not os.path.exists(release):
    time.sleep(0.02)
print("END %.6f" % time.monotonic(), flush=True)
"""

LONG_QUERY = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
              "SELECT count(*) FROM c")


def poll(what, predicate, timeout=60, interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class Small:
    """A no-torch process with the agent, in its own work directory."""

    def __init__(self, env, workdir, extra_env=None):
        self.workdir = Path(tempfile.mkdtemp(prefix="h", dir=workdir))
        self.release_file = self.workdir / "release"
        self.out_path = self.workdir / "out"
        self.err_path = self.workdir / "err"
        e = dict(env, PROBING="1", **(extra_env or {}))
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([PYTHON, "-u", "-c", SCRIPT, str(self.release_file)],
                                         env=e, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        self.pid = self.proc.pid
        self.socket_dir = Path(e["PROBING_DIR"])
        self.socket_path = self.socket_dir / f"{self.pid}.sock"
        poll("the agent socket", lambda: self.socket_path.exists() or self.proc.poll() is not None)
        assert self.socket_path.exists(), self.describe()
        poll("READY", lambda: "READY" in self.out())

    def out(self):
        return self.out_path.read_text(errors="replace")

    def err(self):
        return self.err_path.read_text(errors="replace")

    def describe(self):
        return (f"pid {self.pid} returncode {self.proc.poll()}\n--- stdout\n{self.out()}\n"
                f"--- stderr\n{self.err()}")

    def cpu_s(self):
        """User + system CPU seconds of the process so far (all threads)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def status(self, key):
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])  # kB
        raise AssertionError(f"no {key} in /proc/{self.pid}/status")

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
        shutil.rmtree(self.workdir, ignore_errors=True)


@pytest.fixture
def small(env, session_dir):
    made = []

    def start(**extra_env):
        s = Small(env, session_dir, extra_env)
        made.append(s)
        return s

    yield start
    for s in made:
        s.kill()


def wait_busy(proc, baseline, amount=0.15, timeout=60):
    """Polls until proc used `amount` CPU seconds more than baseline (a query is running)."""
    poll(f"{amount} s of CPU in the agent", lambda: proc.cpu_s() - baseline >= amount, timeout)


def connection_threads(pid):
    """The agent's threads serving a connection (libmicrohttpd names them MHD-connection)."""
    n = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().startswith("MHD-connection"):
                n += 1
        except OSError:
            pass
    return n


def unix_http(path, request, timeout=60):
    """Sends raw request bytes on the Unix socket and returns (status, JSON body)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
        s.sendall(request)
        chunks = []
        while True:
            b = s.recv(1 << 20)
            if not b:
                break
            chunks.append(b)
    finally:
        s.close()
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def post(path, route, payload):
    body = json.dumps(payload).encode()
    req = (f"POST {route} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
           f"application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    return unix_http(path, req)


# ----------------------------------------------------------------------------- item 4: exit


@pytest.mark.parametrize("during", ["eval", "query"])
def test_harden_exit_during_running_request(cli, small, during):
    """The script ends while an eval (or a long query) runs in the agent: the process exits
    within 2 s of the script's last line, with status 0, no SIGABRT, 20 times in a row."""
    for rep in range(20):
        p = small(PROBING_EVAL_TIMEOUT="60", PROBING_QUERY_TIMEOUT="60")
        marker = p.workdir / "eval-running"
        if during == "eval":
            code = f"open({str(marker)!r}, 'w').close()\nimport time\ntime.sleep(60)"
            client = subprocess.Popen([cli.binary, str(p.pid), "eval", code], env=cli.env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            poll("the eval to start", marker.exists)
        else:
            baseline = p.cpu_s()
            client = subprocess.Popen([cli.binary, str(p.pid), "query", LONG_QUERY], env=cli.env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wait_busy(p, baseline)
        p.release_file.touch()
        try:
            rc = p.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"repetition {rep}: no exit within 60 s\n{p.describe()}")
        exited = time.monotonic()
        client.communicate(timeout=60)
        end = [line for line in p.out().splitlines() if line.startswith("END ")]
        assert rc == 0, f"repetition {rep}: exit status {rc}\n{p.describe()}"
        assert "terminate called" not in p.err(), p.describe()
        assert end, p.describe()
        took = exited - float(end[0].split()[1])
        assert took < 2.0, f"repetition {rep}: exit took {took:.2f} s after the script ended"
        assert not p.socket_path.exists(), "the socket file is left behind"
        p.kill()


# ------------------------------------------------------------------ item 3: directory trust




# An impostor agent: listens on <dir>/<own pid>.sock, answers every request with a forged
# /api/info, and writes each request line it receives to a log file.
IMPOSTOR = r"""
import json, os, socket, sys
sock_dir, log = sys.argv[1], sys.argv[2]
os.makedirs(sock_dir, mode=0o755, exist_ok=True)
os.chmod(sock_dir, 0o755)
path = os.path.join(sock_dir, "%d.sock" % os.getpid())
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chmod(path, 0o777)
s.listen(16)
print("LISTENING", path, flush=True)
body = json.dumps({"pid": os.getpid(), "cmdline": "forged", "python": "3", "torch": "forged",
                   "uptime_s": 1, "endpoint": path}).encode()
while True:
    c, _ = s.accept()
    try:
        data = c.recv(65536)
        if data:
            with open(log, "a") as f:
                f.write(data.decode(errors="replace").split("\r\n")[0] + "\n")
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    except OSError:
        pass
    c.close()
"""


def python_for(user):
    """A Python the other user may run (the test's own may sit in a directory only root reads)."""
    for candidate in (PYTHON, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            r = subprocess.run([candidate, "-c", "pass"], user=user.pw_uid, group=user.pw_gid,
                               cwd="/", capture_output=True, timeout=60)
        except OSError:
            continue
        if r.returncode == 0:
            return candidate
    pytest.skip("no Python that the second user may run")


class Impostor:
    def __init__(self, user, sock_dir, workdir):
        self.log = Path(workdir) / f"impostor-{uuid.uuid4().hex[:6]}.log"
        self.log.touch()
        os.chown(self.log, user.pw_uid, user.pw_gid)
        self.proc = subprocess.Popen([python_for(user), "-c", IMPOSTOR, str(sock_dir), str(self.log)],
                                     user=user.pw_uid, group=user.pw_gid, cwd="/",
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("LISTENING"), line
        self.pid = self.proc.pid
        self.path = Path(line.split()[1])

    def requests(self):
        return self.log.read_text()

    def stop(self):
        self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def planted_dir(other_user, env):
    """/tmp/pbharden-<random>/d: made by the other user, mode 0755, with a live impostor."""
    top = Path(tempfile.mkdtemp(prefix=f"pb{LANE}-", dir="/tmp"))
    os.chmod(top, 0o777)  # the other user creates d inside
    work = top / "w"
    work.mkdir()
    os.chmod(work, 0o777)
    imp = None
    try:
        imp = Impostor(other_user, top / "d", work)
        yield top / "d", imp, dict(env, PROBING_DIR=str(top / "d"))
    finally:
        if imp:
            imp.stop()
        shutil.rmtree(top, ignore_errors=True)


def not_yours(d, user):
    return (f"probing: the socket directory {d} belongs to uid {user.pw_uid}, not to you (uid 0): "
            f"another user may have made it to pose as your processes; remove it (rm -r {d}) or "
            f"set PROBING_DIR to a directory of your own")


def test_harden_list_refuses_a_directory_of_another_user(cli, planted_dir, other_user):
    d, imp, e = planted_dir
    r = cli("list", check=False, env=e)
    assert r.returncode == 1 and r.stdout == "", r
    assert r.stderr.strip() == not_yours(d, other_user), r.stderr
    assert imp.requests() == ""


def test_harden_eval_refuses_a_directory_of_another_user(cli, planted_dir, other_user):
    d, imp, e = planted_dir
    r = cli(imp.pid, "eval", "print('secret')", check=False, env=e)
    assert r.returncode == 1 and r.stdout == "", r
    assert r.stderr.strip() == not_yours(d, other_user), r.stderr
    assert imp.requests() == "", "the eval code reached the impostor"


def test_harden_eval_refuses_a_socket_planted_by_another_user(cli, other_user, socket_dir,
                                                              session_dir):
    """Our own directory (0700), but a socket in it whose listener runs as another uid (planted
    while the directory was open, or moved in): SO_PEERCRED refuses it before anything is
    sent."""
    top = Path(tempfile.mkdtemp(prefix=f"pb{LANE}-", dir="/tmp"))
    os.chmod(top, 0o777)
    imp = None
    cleanup = []
    try:
        imp = Impostor(other_user, top / "d", top)
        planted = socket_dir / f"{imp.pid}.sock"
        os.rename(imp.path, planted)
        cleanup.append(planted)
        r = cli(imp.pid, "eval", "print('secret')", check=False)
        assert r.returncode == 1 and r.stdout == "", r
        assert r.stderr.strip() == (
            f"probing: refusing to talk to {planted}: the process listening there (pid "
            f"{imp.pid}) runs as uid {other_user.pw_uid}, not as you (uid 0), so it is not your "
            f"probing agent; nothing was sent. Remove the socket if you did not expect it"), r.stderr
        r = cli("list", "-f", "json", check=False)
        rows = [x for x in json.loads(r.stdout) if x.get("pid") == imp.pid]
        assert rows and "refusing to talk to" in rows[0]["error"], (r.stdout, r.stderr)
        assert "cmdline" not in rows[0], "list showed the impostor's forged info"
        assert imp.requests() == "", "a request reached the impostor"
    finally:
        for f in cleanup:
            f.unlink(missing_ok=True)
        if imp:
            imp.stop()
        shutil.rmtree(top, ignore_errors=True)


def test_harden_pid_mismatch_is_refused(cli, socket_dir, session_dir):
    """A socket named after one process but served by another (this test): refused, nothing
    sent. Needs no second user."""
    sleeper = subprocess.Popen(["sleep", "600"])
    path = socket_dir / f"{sleeper.pid}.sock"
    srv = socket.socket(socket.AF_UNIX)
    got = []
    try:
        srv.bind(str(path))
        srv.listen(4)

        def accept():
            try:
                c, _ = srv.accept()
                c.settimeout(5)
                got.append(c.recv(100))
                c.close()
            except OSError:
                pass

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        r = cli(sleeper.pid, "eval", "print(1)", check=False)
        assert r.returncode == 1, r
        assert r.stderr.strip() == (
            f"probing: refusing to talk to {path}: the process listening there is pid "
            f"{os.getpid()}, not process {sleeper.pid}; nothing was sent. The socket was made by "
            f"another process (remove it if the process it names has exited)"), r.stderr
        t.join(timeout=10)
        assert got in ([], [b""]), f"bytes reached the impostor: {got}"
    finally:
        srv.close()
        path.unlink(missing_ok=True)
        sleeper.kill()
        sleeper.wait()


def test_harden_symlinked_directory_is_refused(cli, env, session_dir, socket_dir):
    link = session_dir / f"{LANE}-link"
    link.symlink_to(socket_dir)
    try:
        r = cli("list", check=False, env=dict(env, PROBING_DIR=str(link)))
        assert r.returncode == 1, r
        assert r.stderr.strip() == (
            f"probing: the socket directory {link} is a symbolic link, which anyone who made it "
            f"could point elsewhere; remove it (rm {link}) or set PROBING_DIR to a directory of "
            f"your own"), r.stderr
    finally:
        link.unlink()


def test_harden_agent_refuses_a_group_writable_directory(env, session_dir):
    d = session_dir / f"{LANE}-open"
    d.mkdir(mode=0o700)
    os.chmod(d, 0o770)
    e = dict(env, PROBING="1", PROBING_DIR=str(d))
    r = subprocess.run([PYTHON, "-c", "print('ran')"], env=e, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout == "ran\n", r
    assert list(d.iterdir()) == [], "the agent listened in a group-writable directory"
    assert (f"probing: not starting: the socket directory {d} is writable by its group (mode "
            f"0770): others could plant sockets in it; run chmod 700 {d}") in r.stderr, r.stderr
    d.rmdir()


# -------------------------------------------------------------- item 5: one result budget


def test_harden_results_in_flight_have_one_budget(small):
    """32 clients ask at once for about 20 MB each; with PROBING_RESULTS_MB=64 the agent's peak
    RSS grows by less than the budget plus 64 MB of slack (without it: 32 x 20 MB), and every
    answer is the result or a clear busy message."""
    p = small(PROBING_RESULTS_MB="64")
    rss_before = p.status("VmRSS")
    sql = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 200000) "
           "SELECT x, printf('%080d', x) AS pad FROM c")
    answers = []

    def client():
        try:
            answers.append(post(p.socket_path, "/api/query", {"sql": sql}))
        except Exception as e:  # noqa: BLE001 - reported below
            answers.append((0, {"error": repr(e)}))

    threads = [threading.Thread(target=client) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    peak_growth_mb = (p.status("VmHWM") - rss_before) / 1024
    ok = [a for a in answers if a[0] == 200]
    busy = [a for a in answers if a[0] == 503]
    assert len(answers) == 32 and len(ok) + len(busy) == 32, answers[:3]
    assert ok and all(a[1]["row_count"] == 200000 for a in ok)
    for _, body in busy:
        assert body["error"].startswith("busy: ") and "PROBING_RESULTS_MB" in body["error"] \
            or body["error"].startswith("busy: ") and "PROBING_QUERY_THREADS" in body["error"], body
    if os.environ.get("PROBING_SANITIZED"):
        # ASan keeps freed blocks in its quarantine (256 MB by default): RSS then measures the
        # sanitizer, not probing. The answers above are still checked.
        return
    assert peak_growth_mb < 64 + 64, f"agent RSS grew by {peak_growth_mb:.0f} MB"


def get(path, route):
    return unix_http(path, f"GET {route} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())


def test_harden_eval_and_tables_answers_share_the_budget(cli, small):
    """Eval answers and the table list are counted in the same result budget: while a query
    holds all of a 1 MB budget, an eval is refused with the busy message and its code does not
    run, and the table list is refused too; once the query is gone both are served, and an eval
    whose answer is larger than the budget gets all of its output (counted, never dropped)."""
    p = small(PROBING_RESULTS_MB="1", PROBING_QUERY_TIMEOUT="120")
    baseline = p.cpu_s()
    client = subprocess.Popen([cli.binary, str(p.pid), "query", LONG_QUERY], env=cli.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_busy(p, baseline)  # the query runs, holding the whole budget (its cap is cut to 1 MB)
        ran = p.workdir / "eval-ran"
        status, body = post(p.socket_path, "/api/eval",
                            {"code": f"open({str(ran)!r}, 'w').close()"})
        assert (status, body) == (503, {"error": (
            "busy: 1 MB of results in flight (the limit is 1 MB, PROBING_RESULTS_MB); try again "
            "in a moment (the code was not run)")})
        status, body = get(p.socket_path, "/api/tables")
        assert (status, body) == (503, {"error": (
            "busy: 1 MB of results in flight (the limit is 1 MB, PROBING_RESULTS_MB); try again "
            "in a moment")})
    finally:
        client.kill()
        client.wait()
    poll("the query's connection to end", lambda: connection_threads(p.pid) == 0, 60)
    assert not ran.exists(), "the refused eval ran its code"
    status, body = post(p.socket_path, "/api/eval",
                         {"code": f"open({str(ran)!r}, 'w').close()\nprint('x' * (3 << 20))"})
    assert status == 200 and body["ok"] is True, (status, str(body)[:300])
    assert body["stdout"] == "x" * (3 << 20) + "\n" and ran.exists()
    status, body = get(p.socket_path, "/api/tables")
    assert status == 200 and body, (status, str(body)[:300])
    # Everything was given back: a query gets its answer again.
    assert cli(p.pid, "query", "SELECT 6 * 7 AS n").returncode == 0


def test_harden_waiting_evals_hold_no_budget(small):
    """Evals run one at a time, and those waiting for the running one hold nothing of the result
    budget: with a 99 MB budget, a running eval and four waiting ones, a query and the table
    list are still served (when each eval reserved its ceiling as it arrived, three evals spent
    the whole budget and the query got 503 busy); then each waiting eval runs in turn."""
    p = small(PROBING_RESULTS_MB="99", PROBING_MAX_RESULT_MB="1")
    marker, release = p.workdir / "eval-running", p.workdir / "eval-release"
    first = (f"import os, time\nopen({str(marker)!r}, 'w').close()\n"
             f"while not os.path.exists({str(release)!r}):\n    time.sleep(0.01)\nprint('first')")
    answers = {}

    def ask(key, code):
        try:
            answers[key] = post(p.socket_path, "/api/eval", {"code": code, "timeout_s": 300})
        except Exception as e:  # noqa: BLE001 - reported below
            answers[key] = (0, {"error": repr(e)})

    threads = [threading.Thread(target=ask, args=("first", first))]
    threads[0].start()
    try:
        poll("the first eval to run", marker.exists)
        for i in range(4):
            threads.append(threading.Thread(target=ask, args=(i, f"print({i} * 11)")))
            threads[-1].start()
        poll("five eval connections", lambda: connection_threads(p.pid) == 5)
        status, body = post(p.socket_path, "/api/query", {"sql": "SELECT 6 * 7 AS n"})
        assert status == 200 and body["rows"] == [[42]], (status, body)
        status, body = get(p.socket_path, "/api/tables")
        assert status == 200 and body, (status, str(body)[:300])
    finally:
        release.touch()
        for t in threads:
            t.join(timeout=600)
    assert answers.pop("first") == (200, {"ok": True, "stdout": "first\n", "stderr": ""})
    assert answers == {i: (200, {"ok": True, "stdout": f"{i * 11}\n", "stderr": ""})
                       for i in range(4)}, answers


def test_harden_eval_answer_is_bounded_as_escaped_json(cli, small):
    """An eval's stdout is kept up to 16 MB as it is escaped in the answer (a control
    character counts six bytes), so output of control characters cannot make the answer
    larger than its reservation (it kept 16 MB raw, a 96 MB answer); a traceback keeps its
    last megabyte, an expression's repr is cut like any output."""
    p = small()
    status, body = post(p.socket_path, "/api/eval", {"code": (
        "import sys\nfor _ in range(16):\n    sys.stdout.write('\\x01' * (1 << 20))")})
    assert status == 200 and body["ok"] is True, (status, str(body)[:300])
    # each 1 MB write escapes to 6 MB: two fit under 16 MB, the third and later are dropped
    assert body["stdout"] == "\x01" * (2 << 20), len(body["stdout"])
    assert body["message"] == ("output was cut: stdout and stderr are each kept up to 16 MB as "
                               "escaped in this answer (a control character counts 6 bytes)")
    status, body = post(p.socket_path, "/api/eval", {"code": "raise ValueError('y' * (5 << 20))"})
    assert status == 200 and body["ok"] is False, (status, str(body)[:300])
    err = body["error"]
    assert err.startswith("[the traceback was longer than 1 MB; its end:]\n") and \
        err.endswith("y\n") and len(err) < 1 << 20, (len(err), err[:200])
    status, body = post(p.socket_path, "/api/eval", {"code": "'z' * (20 << 20)"})
    assert status == 200 and body["ok"] is True and body["stdout"] == "", (status, str(body)[:300])
    assert body["message"].startswith("output was cut: "), body
    # the CLI says so after the output, and the exit status stays the code's
    r = cli(p.pid, "eval", "print('kept'); print('\\x01' * (17 << 20))", check=False)
    # print() writes the string and its newline apart: the string is dropped whole, not the newline
    assert r.returncode == 0 and r.stdout == "kept\n\n", (r.returncode, r.stdout[:200])
    assert r.stderr == ("probing: output was cut: stdout and stderr are each kept up to 16 MB as "
                        "escaped in this answer (a control character counts 6 bytes)\n"), r.stderr
    # the agent still answers in full below the limit
    status, body = post(p.socket_path, "/api/eval", {"code": "'z' * 5"})
    assert (status, body) == (200, {"ok": True, "stdout": "'zzzzz'\n", "stderr": ""})


# ------------------------------------------------------------ a client that leaves (kill -9)


def test_harden_killed_client_interrupts_its_query(cli, small):
    p = small(PROBING_QUERY_TIMEOUT="120")
    baseline = p.cpu_s()
    client = subprocess.Popen([cli.binary, str(p.pid), "query", LONG_QUERY], env=cli.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_busy(p, baseline)
    assert connection_threads(p.pid) == 1
    client.kill()
    client.wait()
    # The query stops, so its connection (and thread) ends; without the cancel it runs on for
    # the 120 s of PROBING_QUERY_TIMEOUT.
    poll("the query's connection to end", lambda: connection_threads(p.pid) == 0, 30)


def test_harden_killed_client_interrupts_its_eval(cli, small):
    p = small(PROBING_EVAL_TIMEOUT="120")
    marker = p.workdir / "eval-running"
    caught = p.workdir / "eval-caught"
    code = (f"open({str(marker)!r}, 'w').close()\nimport time\ntry:\n    while True:\n"
            f"        time.sleep(0.01)\nexcept BaseException as e:\n"
            f"    open({str(caught)!r}, 'w').write(type(e).__name__)\n    raise\n")
    client = subprocess.Popen([cli.binary, str(p.pid), "eval", code], env=cli.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    poll("the eval to start", marker.exists)
    client.kill()
    client.wait()
    poll("the eval to be interrupted", lambda: caught.exists() and caught.read_text(), 30)
    assert caught.read_text() == "KeyboardInterrupt"
    # the agent still serves evals
    assert cli(p.pid, "eval", "print(6 * 7)").stdout == "42\n"


# ---------------------------------------------------------------------- slow clients


def test_harden_slow_request_is_cut_at_its_deadline(small):
    """A client that sends its request a byte at a time never finishes it: the connection is
    closed once PROBING_REQUEST_DEADLINE (2 s here) has passed, long before the request ends."""
    p = small(PROBING_REQUEST_DEADLINE="2")
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(p.socket_path))
    request = b"GET /api/info HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 400 + b"\r\n\r\n"
    closed_after = None
    start = time.monotonic()
    try:
        for i in range(len(request)):
            try:
                s.send(request[i:i + 1])
            except (BrokenPipeError, ConnectionResetError):
                closed_after = i
                break
            s.settimeout(0.1)
            try:
                if s.recv(1) == b"":
                    closed_after = i
                    break
            except socket.timeout:
                pass
            except ConnectionResetError:
                closed_after = i
                break
    finally:
        s.close()
    assert closed_after is not None and closed_after < len(request) - 1, \
        f"the whole slow request was read ({time.monotonic() - start:.1f} s)"


def test_harden_tcp_connections_per_peer_are_capped(small):
    port = free_tcp_port()
    p = small(PROBING_LISTEN=f"127.0.0.1:{port}")
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
    try:
        extra = socket.create_connection(("127.0.0.1", port))
        extra.settimeout(30)
        try:
            extra.sendall(b"GET /api/info HTTP/1.1\r\nHost: x\r\n\r\n")
            data = extra.recv(100)
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        assert data == b"", f"a 9th connection from one address was served: {data!r}"
        extra.close()
    finally:
        for h in held:
            h.close()


# ----------------------------------------------------------- files left after SIGTERM


def test_harden_sigterm_removes_socket_and_token(small, socket_dir):
    port = free_tcp_port()
    p = small(PROBING_LISTEN=f"127.0.0.1:{port}")
    token = socket_dir / f"{p.pid}.token"
    assert token.exists()
    p.proc.send_signal(signal.SIGTERM)
    rc = p.proc.wait(timeout=60)
    assert rc == -signal.SIGTERM, f"the exit status changed: {rc}"
    assert not p.socket_path.exists() and not token.exists(), list(socket_dir.iterdir())


def test_harden_cli_says_when_the_agent_is_saturated(cli, small):
    """72 connections held open (64 served + 8 answered 503): the next one is closed unanswered,
    and the CLI says the agent is saturated instead of asking whether the process exited."""
    p = small(PROBING_REQUEST_DEADLINE="120")
    held = []
    try:
        for _ in range(72):
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(p.socket_path))
            held.append(s)
        poll("72 connection threads", lambda: connection_threads(p.pid) >= 72, 60)
        r = cli(p.pid, "query", "SELECT 1", check=False)
        assert r.returncode == 1, r
        assert r.stderr.strip() == (
            f"probing: process {p.pid} is running but its agent closed the connection without "
            f"answering: it is saturated (it serves a bounded number of connections at once and "
            f"closes the rest); try again later"), r.stderr
    finally:
        for s in held:
            s.close()
    poll("the agent to serve again", lambda: cli(p.pid, "query", "SELECT 1", check=False)
         .returncode == 0, 60, interval=0.5)
