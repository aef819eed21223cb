"""Stress: 8 concurrent clients hammer the agent of a real training job with a mix of queries,
table listings, evals, malformed HTTP and abrupt disconnects. Afterwards the job's losses are
bit-identical to an unprobed run, no request waited past its limit, the agent's RSS stayed
bounded and nothing crashed.

The request count is PROBING_STRESS_REQUESTS (default 400 in all, for CI time; the issue's
10,000 is a local run: PROBING_STRESS_REQUESTS=10000, result in docs/security.md)."""
import json
import os
import re
import socket
import threading
import time

import pytest

CLIENTS = 8
REQUESTS = int(os.environ.get("PROBING_STRESS_REQUESTS", "400"))
QUERY_TIMEOUT_S = 5     # PROBING_QUERY_TIMEOUT of the agent under test
EVAL_TIMEOUT_S = 5
WAIT_LIMIT_S = 30       # no request may wait longer than this for its answer
RSS_GROWTH_LIMIT_KB = 64 * 1024      # during the second half of the requests
RSS_OVER_PLAIN_LIMIT_KB = 256 * 1024  # agent (rings, SQLite, threads) over the unprobed run

TRAINING = ("edge_cases.py", "--steps", 30)


def loss_lines(stdout):
    return [line for line in stdout.splitlines()
            if re.match(r"^(step \d+ |final loss: )", line)]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def request_bytes(method, path, body=None):
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    if body is None:
        return (head + "\r\n").encode()
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (head + f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
            ).encode() + data


# (name, request bytes, expected status or None for "any answer or a close", abrupt?)
MIX = [
    ("query", request_bytes("POST", "/api/query",
                            {"sql": "SELECT step, COUNT(*) FROM python.torch_trace GROUP BY step"}),
     200, False),
    ("query-heavy", request_bytes("POST", "/api/query", {"sql": (
        "SELECT module, stage, COUNT(*), MAX(step) FROM python.torch_trace "
        "GROUP BY module, stage ORDER BY 3 DESC LIMIT 20")}), 200, False),
    ("tables", request_bytes("GET", "/api/tables"), 200, False),
    ("info", request_bytes("GET", "/api/info"), 200, False),
    ("eval", request_bytes("POST", "/api/eval",
                           {"code": "_stress = len(globals())", "timeout_s": EVAL_TIMEOUT_S}),
     200, False),
    ("sql-error", request_bytes("POST", "/api/query", {"sql": "SELEC 1"}), 400, False),
    ("write", request_bytes("POST", "/api/query", {"sql": "DELETE FROM python.torch_trace"}),
     400, False),
    ("bad-json", request_bytes("POST", "/api/query", b"{\"sql\": "), 400, False),
    ("bad-method", request_bytes("PUT", "/api/query", b"{}"), 405, False),
    ("garbage", b"\xff\x13 not http at all\r\n\r\n", 400, False),
    ("bad-length", b"POST /api/query HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", None,
     False),
    ("half-request", b"POST /api/query HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"s",
     None, True),
    ("connect-close", b"", None, True),
]


def one(socket_path, req, expected, abrupt):
    """Sends one request; returns (status or None, seconds waited)."""
    start = time.monotonic()
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(WAIT_LIMIT_S)
    try:
        s.connect(socket_path)
        if req:
            s.sendall(req)
        if abrupt:
            return None, time.monotonic() - start
        data = b""
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
        except ConnectionResetError:
            pass
    finally:
        s.close()
    waited = time.monotonic() - start
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else None
    if expected is not None:
        assert status == expected, (req[:80], data[:300])
    return status, waited


def hammer(socket_path, total):
    results, errors = [], []

    def client(k):
        try:
            for n in range(k, total, CLIENTS):
                name, req, expected, abrupt = MIX[n % len(MIX)]
                status, waited = one(socket_path, req, expected, abrupt)
                results.append((name, status, waited))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"{name}: {e!r}")

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


@pytest.mark.parametrize("ring_rows", [None, "1"], ids=["default-ring", "one-row-ring"])
def test_stress_while_training(launcher, env, ring_rows):
    e = dict(env, PROBING_QUERY_TIMEOUT=str(QUERY_TIMEOUT_S), PROBING_EVAL_TIMEOUT=str(EVAL_TIMEOUT_S))
    if ring_rows:
        e["PROBING_RING_ROWS"] = ring_rows
    traced = launcher.traced(*TRAINING, env=e)       # holds after its last step
    plain = launcher.plain(*TRAINING, hold=True)
    # first half while the job trains, second half once it holds: RSS must not grow with the
    # number of requests, and stays within a bound of the unprobed twin's
    results, errors = hammer(str(traced.socket_path), REQUESTS // 2)
    traced.wait_holding()
    plain.wait_holding()
    rss_before = rss_kb(traced.pid)
    more, more_errors = hammer(str(traced.socket_path), REQUESTS - REQUESTS // 2)
    rss_after = rss_kb(traced.pid)
    results += more
    errors += more_errors
    rss_plain = rss_kb(plain.pid)
    assert errors == [], errors[:5]
    assert len(results) == REQUESTS
    slowest = max(waited for _, _, waited in results)
    assert slowest < WAIT_LIMIT_S
    assert traced.alive(), traced.describe()
    assert rss_after - rss_before < RSS_GROWTH_LIMIT_KB, (rss_before, rss_after)
    assert rss_after - rss_plain < RSS_OVER_PLAIN_LIMIT_KB, (rss_plain, rss_after)

    if ring_rows:
        rows = traced.cli.query(traced.target(), "SELECT capacity, rows_dropped > 0 AS dropped "
                                "FROM probe.tables WHERE name = 'torch_trace'")
        assert rows == [{"capacity": 1, "dropped": 1}], rows
        assert traced.cli.scalar(traced.target(),
                                 "SELECT COUNT(*) <= 1 FROM python.torch_trace") == 1

    with_probing = traced.finish()
    without = plain.finish()
    assert re.search(r"^final loss: \S+$", without, re.M), without
    assert loss_lines(with_probing) == loss_lines(without)
    assert "probing: " not in traced.stderr(), traced.stderr()
    print(f"\n{REQUESTS} requests, slowest {slowest:.2f} s, RSS {rss_before} -> {rss_after} kB "
          f"(unprobed {rss_plain} kB)")


def test_request_starting_with_nul_is_closed_after_the_idle_timeout(traced):
    """libmicrohttpd takes a request line starting with NUL for an empty line and waits for
    more; the agent's 10 s idle timeout closes it (it used to hold a thread for 120 s)."""
    t = traced("inference.py", "--steps", 1)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    try:
        s.connect(str(t.socket_path))
        s.sendall(b"\x00\xff\x13 not http at all\r\n\r\n")
        assert s.recv(65536) == b""   # closed by the agent, no answer, well before 60 s
    finally:
        s.close()
    assert t.cli.scalar(t.target(), "SELECT 1") == 1
