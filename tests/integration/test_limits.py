"""Limits, each with the answer a client gets when it crosses it: request body, request
headers, query time, result size (test_errors.py), concurrent connections."""
import json
import socket

import pytest

from conftest import PYTHON


@pytest.fixture(scope="module")
def limited(session_launcher, env):
    t = session_launcher.traced("inference.py", "--steps", 2,
                                env=dict(env, PROBING_QUERY_TIMEOUT="1"))
    t.wait_holding()
    yield t
    t.kill()


def unix(t):
    def connect():
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(t.socket_path))
        return s
    return connect


def exchange(connect, request, timeout=30):
    s = connect()
    s.settimeout(timeout)
    try:
        s.sendall(request)
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        return data
    finally:
        s.close()


def post_query(sql):
    body = json.dumps({"sql": sql}).encode()
    return (b"POST /api/query HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
            b"\r\n\r\n" + body)


def test_body_over_4_mb_is_413(limited):
    head = (b"POST /api/query HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Length: 5000000\r\n\r\n")
    raw = exchange(unix(limited), head)
    assert raw.startswith(b"HTTP/1.1 413 "), raw[:200]
    assert raw.endswith(b'{"error":"request body too large: 5000000 bytes, the limit is '
                        b'4194304 bytes"}'), raw


def headers_refused(t, headers):
    """Sends a request with these header lines; returns what came back before the agent closed
    the connection (it may close while we still send: then the answer can be lost)."""
    s = unix(t)()
    s.settimeout(30)
    data = b""
    try:
        try:
            s.sendall(b"GET /api/info HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except ConnectionResetError:
        pass
    finally:
        s.close()
    return data


@pytest.mark.parametrize("headers", [
    b"X-Big: " + b"a" * 70000 + b"\r\n",                           # one 70 KB header
    b"".join(b"X-H%d: v\r\n" % i for i in range(10000)),           # 10,000 small ones
], ids=["one-big-header", "many-headers"])
def test_headers_over_64_kb_are_refused(cli, limited, headers):
    data = headers_refused(limited, headers)
    # libmicrohttpd answers 431 and closes; when it closed before we finished sending, the
    # kernel may have thrown the answer away: then the connection was reset, never left hanging
    assert data == b"" or data.startswith(b"HTTP/1.1 431 "), data[:200]
    assert cli.scalar(limited.target(), "SELECT 1") == 1


def test_query_time_limit(cli, limited):
    sql = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
           "SELECT count(*) FROM c")
    r = cli(limited.target(), "query", sql, check=False)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines()[0] == (
        "probing: SQL error: query interrupted: it ran longer than the 1 s limit "
        "(PROBING_QUERY_TIMEOUT); narrow it with WHERE or LIMIT, or set "
        "PROBING_QUERY_TIMEOUT=<seconds> in the traced process's environment"), r.stderr


def test_connection_over_the_limit_gets_503(cli, limited):
    held = []
    try:
        for _ in range(64):
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(limited.socket_path))
            held.append(s)
        # every held connection is open at the agent once one of them has been answered
        held[0].sendall(b"GET /api/info HTTP/1.1\r\nHost: x\r\n\r\n")
        held[0].settimeout(30)
        assert held[0].recv(65536).startswith(b"HTTP/1.1 200 ")
        r = cli(limited.target(), "query", "SELECT 1", check=False, timeout=60)
        assert (r.returncode, r.stdout, r.stderr) == (1, "", (
            "probing: too many connections: this agent serves at most 64 at once and 64 are "
            "open; try again when some have finished\n"))
    finally:
        for s in held:
            s.close()
    # once they are gone, queries are served again (closing is noticed asynchronously)
    for _ in range(100):
        r = cli(limited.target(), "query", "SELECT 1 AS x", "-f", "csv", check=False)
        if r.returncode == 0:
            break
    assert r.stdout == "x\n1\n", r.stderr
