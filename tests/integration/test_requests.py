"""A model server (issue 44): each request served by the standard library's http.server, or by a
FastAPI application under uvicorn, is a row of python.requests with its time in the model
against outside it; its forwards end no step; the report of the server speaks of requests
(requests/s, latency, in flight; no training words), and names a slow tokeniser on the request's
thread, or a lock that lets one request at a time into the model, as its primary finding.

tests/workloads/serve_job.py: a tiny random-weight model decoded greedily (a forward per token)
behind ThreadingHTTPServer with four keep-alive clients on loopback; cases healthy, tokeniser
and lock, each traced and holding, and healthy once more without probing (answers bit for bit).
Then the same behind FastAPI and uvicorn with a tiny GPT-2 under generate(), skipped with the
reason when fastapi, uvicorn or transformers is missing (scripts/setup-extras.sh installs them)."""
import importlib.util
import json
import os
import re
import tempfile
from pathlib import Path

import pytest

from conftest import Launcher

REQUESTS, CLIENTS, NEW, MISSING_EVERY = 32, 4, 8, 9
ARGS = ("--requests", REQUESTS, "--clients", CLIENTS, "--new-tokens", NEW,
        "--missing-every", MISSING_EVERY)
MISSING = len([i for i in range(REQUESTS) if i % MISSING_EVERY == MISSING_EVERY - 1])
# scripts/sanitize.sh runs this file with the agent and the CLI under ASan: the verdicts that
# depend on timing (a healthy server is clean, the tokeniser dominates) are not asserted there
SANITIZED = bool(os.environ.get("PROBING_SANITIZED"))
TRAINING_WORDS = ("optimizer", "backward to match", "training thread", "samples/s")
ROWS = ("SELECT id, server, method, path, status, wall, model, outside, first_forward, forwards, "
        "generations, tokens, cpu, in_flight, model_concurrency, thread_id FROM python.requests "
        "ORDER BY id")


@pytest.fixture(scope="module")
def runs(cli, env, session_dir, socket_dir):
    launcher = Launcher(cli, env, Path(tempfile.mkdtemp(prefix="req", dir=session_dir)), socket_dir)
    healthy = launcher.traced("serve_job.py", *ARGS)
    tokeniser = launcher.traced("serve_job.py", "--case", "tokeniser", "--tokeniser-rounds", 400,
                                "--new-tokens", 4, *ARGS[:4], "--missing-every", 0)
    lock = launcher.traced("serve_job.py", "--case", "lock", *ARGS)
    plain = launcher.plain("serve_job.py", *ARGS)
    for run in (healthy, tokeniser, lock):
        run.wait_holding()
    yield {"healthy": healthy, "tokeniser": tokeniser, "lock": lock, "plain": plain}
    launcher.cleanup()


def test_one_row_per_request_with_its_split(cli, runs):
    rows = cli.query(runs["healthy"].target(), ROWS)
    assert len(rows) == REQUESTS, rows
    assert [r["id"] for r in rows] == list(range(1, REQUESTS + 1)), rows
    missing = [r for r in rows if r["path"] == "/missing"]
    served = [r for r in rows if r["path"] == "/generate"]
    assert len(missing) == MISSING and all(r["status"] == 404 for r in missing), missing
    assert len(served) == REQUESTS - MISSING and all(r["status"] == 200 for r in served), served
    for r in rows:
        assert r["server"] == "http.server" and r["method"] == "POST", r
        assert 1 <= r["in_flight"] <= CLIENTS and r["cpu"] is not None, r
        assert 0 <= r["model"] <= r["wall"], r
        assert abs(r["model"] + r["outside"] - r["wall"]) < 1e-6, r
        assert r["generations"] == 0 and r["tokens"] is None, r
    for r in served:  # a forward per new token, all of them the request's
        assert r["forwards"] == NEW and r["model"] > 0, r
        assert 0 <= r["first_forward"] < r["wall"] and 1 <= r["model_concurrency"] <= CLIENTS, r
    for r in missing:
        assert r["forwards"] == 0 and r["model"] == 0 and r["first_forward"] is None, r
        assert r["model_concurrency"] == 0, r
    # four clients at once: some request arrived with others in flight, some met another in
    # the model (no lock in the healthy case)
    assert max(r["in_flight"] for r in rows) >= 2, rows
    if not SANITIZED:
        assert max(r["model_concurrency"] for r in rows) >= 2, rows


def test_request_forwards_end_no_step(cli, runs):
    t = runs["healthy"].target()
    # the warm-up generation before serving, a forward per token, is the only stepping: its
    # forwards end a step each but its last (the first request's forward ends none)
    assert cli.scalar(t, "SELECT COUNT(*) FROM python.steps") == NEW - 1
    assert cli.scalar(t, "SELECT SUM(forwards) FROM python.requests") == NEW * (REQUESTS - MISSING)


def test_report_of_a_healthy_server(cli, runs):
    t = runs["healthy"].target()
    out = cli(t, "report").stdout
    assert SANITIZED or "primary finding: none" in out, out
    assert re.search(rf"{REQUESTS} requests to http.server \({REQUESTS - MISSING} answered 2xx/3xx, "
                     rf"{MISSING} 4xx, 0 5xx, 0 without a status\) in [\d.]+ s: [\d.]+ requests/s", out), out
    assert re.search(r"latency \(ms\): p50 [\d.]+  p95 [\d.]+  p99 [\d.]+", out), out
    assert re.search(rf"in flight: max [2-{CLIENTS}], mean [\d.]+; in the model at once: at most \d",
                     out), out
    if not SANITIZED:
        assert "in the model at once: at most 1\n" not in out, out
        assert "[WARNING]" not in out and "[CRITICAL]" not in out, out
    for word in TRAINING_WORDS:
        assert word not in out, (word, out)
    doc = json.loads(cli(t, "report", "--json").stdout)
    assert doc["workload"] == "inference" and doc["baseline"] is None and doc["inference"] is None, doc
    s = doc["requests"]
    assert s["requests"] == REQUESTS and s["model_requests"] == REQUESTS - MISSING, s
    assert s["requests_per_s"] > 0 and 0 < s["latency_p50_s"] <= s["latency_p95_s"] <= s["latency_p99_s"], s
    assert s["model_share"] > 0.5 and s["in_flight_mean"] > 1, s


def test_slow_tokeniser_is_the_finding(cli, runs):
    if SANITIZED:
        pytest.skip("timing-dependent diagnosis is not asserted under ASan (PROBING_SANITIZED)")
    t = runs["tokeniser"].target()
    out = cli(t, "report").stdout
    m = re.search(r"^primary finding: ([\d.]+) ms of each request outside the model, on the "
                  r"request's thread \(p50: (\d+)% of its [\d.]+ ms, against [\d.]+ ms in the model\); "
                  r"([\d.]+) ms of it before the first forward", out, re.M)
    assert m, out
    # the tokeniser runs before the model: most of the time outside is before the first forward
    assert float(m.group(3)) > 0.5 * float(m.group(1)), out
    rows = cli.query(t, "SELECT outside, first_forward, wall FROM python.requests")
    assert len(rows) == REQUESTS and all(r["first_forward"] > 0 for r in rows), rows


def test_lock_around_the_model_is_the_finding(cli, runs):
    t = runs["lock"].target()
    assert cli.scalar(t, "SELECT MAX(model_concurrency) FROM python.requests") == 1
    out = cli(t, "report").stdout
    assert re.search(r"^primary finding: requests are served one at a time: up to [2-4] in flight "
                     r"\([\d.]+ on average\), never more than one in the model at once", out, re.M), out
    assert "before its first forward: a lock, a queue or a single worker in front of the model" in out, out
    for word in TRAINING_WORDS:
        assert word not in out, (word, out)


def test_answers_bit_identical_with_and_without_probing(runs):
    def answers(run, stdout):
        m = re.search(r"^final tokens: (\w+)$", stdout, re.M)
        assert m, run.describe()
        return m.group(1)

    plain = runs["plain"]
    assert answers(plain, plain.finish()) == answers(runs["healthy"], runs["healthy"].finish())
    assert "probing: " not in runs["healthy"].stderr(), runs["healthy"].stderr()


ASGI_MISSING = [m for m in ("fastapi", "uvicorn", "transformers") if importlib.util.find_spec(m) is None]


@pytest.fixture(scope="module")
def asgi(cli, env, session_dir, socket_dir):
    if ASGI_MISSING:
        pytest.skip(f"{', '.join(ASGI_MISSING)} not installed (scripts/setup-extras.sh installs them)")
    launcher = Launcher(cli, env, Path(tempfile.mkdtemp(prefix="asgi", dir=session_dir)), socket_dir)
    run = launcher.traced("serve_job.py", "--server", "asgi", "--model", "gpt2", *ARGS)
    run.wait_holding()
    yield run
    launcher.cleanup()


def test_fastapi_under_uvicorn(cli, asgi):
    t = asgi.target()
    rows = cli.query(t, ROWS)
    assert len(rows) == REQUESTS, rows
    served = [r for r in rows if r["status"] == 200]
    assert len(served) == REQUESTS - MISSING, rows
    assert all(r["status"] == 404 and r["forwards"] == 0 for r in rows if r["path"] == "/missing"), rows
    for r in rows:
        assert r["server"] == "asgi" and r["method"] == "POST" and r["cpu"] is None, r
    # the sync endpoint runs in a worker thread in the request's context: its generate() call
    # and the forwards inside it are the request's
    for r in served:
        assert r["path"] == "/generate" and r["generations"] == 1 and r["tokens"] == NEW, r
        assert r["forwards"] == NEW and 0 < r["model"] <= r["wall"], r
    gens = cli.query(t, "SELECT request, thread_id FROM python.generations WHERE request IS NOT NULL "
                        "ORDER BY request")
    assert sorted(g["request"] for g in gens) == sorted(r["id"] for r in served), gens
    loop_threads = {r["thread_id"] for r in rows}
    assert len(loop_threads) == 1 and not loop_threads & {g["thread_id"] for g in gens}, (rows, gens)
    out = cli(t, "report").stdout
    assert re.search(rf"{REQUESTS} requests to asgi \({REQUESTS - MISSING} answered", out), out
    assert re.search(rf"{NEW * (REQUESTS - MISSING)} tokens generated for them", out), out
    assert "transformers" not in asgi.stderr() and "probing: " not in asgi.stderr(), asgi.stderr()
