"""The security model of docs/security.md, against real agents: who may connect, the TCP token,
eval over TCP, and SQL that can neither write nor touch files.

Every refusal is checked with the exact message a user reads."""
import os
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import PYTHON, free_tcp_port

NOBODY = 65534

UNAUTHORIZED = ("unauthorized: this agent's TCP endpoint needs proof of its token: the probing "
                "CLI signs each request with it (--token, PROBING_TOKEN, PROBING_TOKEN_FILE or the "
                "token file in the agent's socket directory when it may read it); curl may send "
                "'Authorization: Bearer <token>'")
WRONG_TOKEN = ("unauthorized: the request is not signed with this agent's token (the token given "
               "to probing is not the one this process was started with)")
EVAL_OFF = ("eval over TCP is off: it runs code in the process; use the Unix socket (probing "
            "<pid> eval ...), or start the process with PROBING_TCP_EVAL=1 to allow it")


def raw_http(connect, request, timeout=30):
    """Sends request bytes on a fresh socket (connect(sock) opens it); returns all bytes read."""
    s = connect()
    s.settimeout(timeout)
    try:
        s.sendall(request)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        s.close()


def tcp(port):
    return lambda: socket.create_connection(("127.0.0.1", port))


def status_of(raw):
    return int(raw.split(b" ", 2)[1])


@pytest.fixture(scope="module")
def listening(session_launcher, env):
    """An inference run serving TCP with a generated token."""
    port = free_tcp_port()
    t = session_launcher.traced("inference.py", "--steps", 3,
                                env=dict(env, PROBING_LISTEN=f"127.0.0.1:{port}"))
    t.wait_holding()
    t.port = port
    t.hostport = f"127.0.0.1:{port}"
    yield t
    t.kill()


# ----------------------------------------------------------------------------- Unix socket


CONNECT_AS_NOBODY = r"""
import os, socket, sys
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect:", e.strerror); sys.exit(0)
s.sendall(b"GET /api/info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
data = b""
while True:
    b = s.recv(65536)
    if not b: break
    data += b
sys.stdout.write(data.decode())
"""


def as_nobody(socket_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to another uid (the tests run as an ordinary user)")
    r = subprocess.run([PYTHON, "-c", CONNECT_AS_NOBODY, str(socket_path)], capture_output=True,
                       text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_socket_and_directory_are_owner_only(listening, socket_dir):
    assert stat.S_IMODE(os.stat(listening.socket_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(socket_dir).st_mode) & 0o077 == 0


def test_other_uid_cannot_reach_the_socket(listening):
    """File permissions: another user cannot even connect."""
    assert as_nobody(listening.socket_path) == "connect: Permission denied\n"


def test_other_uid_is_refused_by_peer_credentials(launcher, env):
    """Even when the file permissions are opened up by mistake, SO_PEERCRED refuses the peer."""
    d = Path(tempfile.mkdtemp(prefix="pbu", dir="/tmp"))
    try:
        t = launcher.traced("inference.py", "--steps", 1, env=dict(env, PROBING_DIR=str(d)),
                            expect_socket=False)
        t.wait_holding()
        sock = d / f"{t.pid}.sock"
        assert sock.exists(), t.describe()
        os.chmod(d, 0o755)
        os.chmod(sock, 0o666)
        out = as_nobody(sock)
        assert out.startswith("HTTP/1.1 403 "), out
        assert ('{"error":"permission denied: this agent serves uid 0 (and root) only; the '
                'connecting process runs as uid 65534"}') in out, out
        t.finish()
    finally:
        for p in d.iterdir():
            p.unlink()
        d.rmdir()


# ----------------------------------------------------------------------------- TCP token


def test_token_file(listening, socket_dir):
    path = socket_dir / f"{listening.pid}.token"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    token, port_line = path.read_text().splitlines()
    assert len(token) == 64 and all(c in "0123456789abcdef" for c in token), token
    assert port_line == f"port {listening.port}"


def test_tcp_without_token_is_401(listening):
    raw = raw_http(tcp(listening.port), b"GET /api/info HTTP/1.1\r\nHost: x\r\n"
                   b"Connection: close\r\n\r\n")
    assert status_of(raw) == 401, raw
    assert raw.endswith(b'{"error":"' + UNAUTHORIZED.encode() + b'"}'), raw


def test_tcp_with_wrong_token_is_401(cli, listening):
    r = cli(listening.hostport, "query", "SELECT 1", "--token", "0" * 64, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", f"probing: {WRONG_TOKEN}\n")
    env = dict(cli.env, PROBING_TOKEN="f" * 64)
    r = cli(listening.hostport, "info", check=False, env=env)
    assert (r.returncode, r.stderr) == (1, f"probing: {WRONG_TOKEN}\n")


def test_cli_without_readable_token_file_is_401(cli, listening, session_dir):
    """No --token, no PROBING_TOKEN and no token file in our socket directory: 401, and the
    message says how to pass the token."""
    elsewhere = session_dir / "empty-dir"
    elsewhere.mkdir(mode=0o700, exist_ok=True)
    env = dict(cli.env, PROBING_DIR=str(elsewhere))
    r = cli(listening.hostport, "query", "SELECT 1", check=False, env=env)
    assert (r.returncode, r.stderr) == (1, f"probing: {UNAUTHORIZED}\n")


def test_cli_reads_the_token_file(cli, listening):
    assert cli.scalar(listening.hostport, "SELECT COUNT(*) > 0 FROM python.torch_trace") == 1


def test_cli_token_option_and_env(cli, listening, socket_dir):
    token = (socket_dir / f"{listening.pid}.token").read_text().split()[0]
    elsewhere = dict(cli.env, PROBING_DIR="/nonexistent")
    r = cli("--token", token, listening.hostport, "query", "SELECT 7 AS x", "-f", "csv",
            env=elsewhere)
    assert r.stdout == "x\n7\n"
    r = cli(listening.hostport, "query", "SELECT 8 AS x", "-f", "csv", f"--token={token}",
            env=elsewhere)
    assert r.stdout == "x\n8\n"
    r = cli(listening.hostport, "query", "SELECT 9 AS x", "-f", "csv",
            env=dict(elsewhere, PROBING_TOKEN=token))
    assert r.stdout == "x\n9\n"


def test_eval_over_tcp_is_refused(cli, listening):
    r = cli(listening.hostport, "eval", "print(1)", check=False)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", f"probing: {EVAL_OFF}\n")
    # the Unix socket still evaluates
    assert cli.eval(listening.target(), "print(6 * 7)") == "42\n"


def test_user_token_and_tcp_eval(cli, launcher, env, socket_dir):
    port = free_tcp_port()
    token = "my-own-token-0123456789"
    t = launcher.traced("inference.py", "--steps", 1, env=dict(
        env, PROBING_LISTEN=f"127.0.0.1:{port}", PROBING_TOKEN=token, PROBING_TCP_EVAL="1"))
    t.wait_holding()
    assert not (socket_dir / f"{t.pid}.token").exists(), "a given token is not written down"
    hostport = f"127.0.0.1:{port}"
    assert cli.eval(hostport, "print(6 * 7)", env=dict(cli.env, PROBING_TOKEN=token)) == "42\n"
    # the token never shows in query results
    rows = cli.query(t.target(), "SELECT value FROM probe.config WHERE name = 'PROBING_TOKEN'")
    assert rows == [{"value": "(set)"}]
    t.finish()


def test_token_file_removed_at_exit(launcher, env, socket_dir):
    port = free_tcp_port()
    t = launcher.traced("inference.py", "--steps", 1,
                        env=dict(env, PROBING_LISTEN=f"127.0.0.1:{port}"))
    t.wait_holding()
    path = socket_dir / f"{t.pid}.token"
    assert path.exists()
    t.finish()
    assert not path.exists()
    assert not t.socket_path.exists()


def test_bad_user_token_turns_the_agent_off(launcher, env, socket_dir):
    port = free_tcp_port()
    t = launcher.traced("inference.py", "--steps", 2, hold=False, expect_socket=False, env=dict(
        env, PROBING_LISTEN=f"127.0.0.1:{port}", PROBING_TOKEN="short"))
    assert t.proc.wait(timeout=240) == 0, t.describe()
    sock = socket_dir / f"{t.pid}.sock"
    warning = (f"probing: not starting: cannot listen on {sock} / 127.0.0.1:{port}: "
               "PROBING_TOKEN must be 16 to 256 characters without whitespace")
    assert [line for line in t.stderr().splitlines() if line.startswith("probing:")] == [warning]
    assert "final" in t.stdout()


# ----------------------------------------------------------------------------- read-only SQL


def ro(what):
    return f"probing: SQL error: not authorized: probing's SQL is read-only ({what} is not allowed)"


ALLOWED_PRAGMAS = ("allowed: table_info, table_xinfo, table_list, function_list, module_list, "
                   "database_list")


def pragma(name):
    return ("probing: SQL error: not authorized: probing's SQL is read-only "
            f"(PRAGMA {name} is not allowed; {ALLOWED_PRAGMAS})")


@pytest.mark.parametrize("sql, message", [
    ("ATTACH DATABASE '{dir}/attached.db' AS other", ro("ATTACH")),
    ("DETACH python", ro("DETACH")),
    ("SELECT load_extension('{dir}/evil.so')", ro("function load_extension()")),
    # not compiled into the system SQLite; would be refused by name if it were
    ("SELECT readfile('/etc/passwd')",
     "probing: SQL error near offset 7: no such function: readfile"),
    ("SELECT writefile('{dir}/written', 'x')",
     "probing: SQL error near offset 7: no such function: writefile"),
    ("VACUUM INTO '{dir}/vacuum.db'", ro("VACUUM")),
    ("CREATE TEMP TABLE t(x)", ro("CREATE TEMP TABLE")),
    ("CREATE TEMP VIEW v AS SELECT 1", ro("CREATE TEMP VIEW")),
    # every table is virtual, and SQLite refuses triggers on them before asking the authorizer
    ("CREATE TEMP TRIGGER tr AFTER INSERT ON python.torch_trace BEGIN SELECT 1; END",
     "probing: SQL error: cannot create triggers on virtual tables"),
    ("PRAGMA writable_schema = 1", pragma("writable_schema")),
    ("PRAGMA temp_store_directory = '{dir}'", pragma("temp_store_directory")),
    ("PRAGMA journal_mode = WAL", pragma("journal_mode")),
])
def test_sql_cannot_write_or_touch_files(cli, listening, session_dir, sql, message):
    files_before = set(os.listdir(session_dir))
    r = cli(listening.target(), "query", sql.format(dir=session_dir), check=False)
    assert r.returncode == 1 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.splitlines()[0] == message, r.stderr
    assert set(os.listdir(session_dir)) == files_before
