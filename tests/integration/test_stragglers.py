"""`probing <rank> stragglers` on a real 4-rank gloo DDP job on this machine: one rank's forward
is ~30 ms slower each step (tests/workloads/late_rank.py), so the others wait for it in
DDP's gradient all-reduce; the command must name that rank and its forward, and so must
`report` run on another rank (its arrival_order finding). The same job with no slow rank names
nobody, in either. Both read what the agents recorded (GET /api/arrivals), not timings
of the test."""
import contextlib
import json
import time

import pytest

from conftest import PYTHON, STEP_TIMEOUT_S, WORKLOADS, Launcher, free_port, poll_cli
from test_exporter import Exporter, parse, series
from test_mcp import SDK_MISSING, sdk_session, text_of
from test_ui import UIServer, browser_or_skip, console_errors, wait_for


def start_job(cli, env, session_dir, slow_rank, args=()):
    work = session_dir / f"stragglers-{time.monotonic_ns()}"
    work.mkdir()
    launcher = Launcher(cli, env, work, env["PROBING_DIR"])
    port = free_port()
    ranks = []
    for rank in range(4):
        e = dict(env, RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        ranks.append(launcher.command([cli.binary, "run", "--", PYTHON, "-u",
                                       WORKLOADS / "late_rank.py", "--slow-rank",
                                       str(slow_rank), *args], env=e, name=f"sgrank{rank}"))
    for r, t in enumerate(ranks):
        t._poll(f"READY {r}", lambda t=t, r=r: f"READY {r}" in t.stdout(), STEP_TIMEOUT_S)
    return launcher, ranks


@contextlib.contextmanager
def running_job(cli, env, session_dir, **kw):
    """start_job's ranks, cleaned up when the test ends."""
    launcher, ranks = start_job(cli, env, session_dir, **kw)
    try:
        yield ranks
    finally:
        launcher.cleanup()


@pytest.fixture
def slow_job(cli, env, session_dir):
    with running_job(cli, env, session_dir, slow_rank=2) as ranks:
        yield ranks


@pytest.fixture
def healthy_job(cli, env, session_dir):
    with running_job(cli, env, session_dir, slow_rank=-1) as ranks:
        yield ranks


@pytest.fixture
def fsdp_slow_job(cli, env, session_dir):
    with running_job(cli, env, session_dir, slow_rank=1,
                     args=("--wrap", "fsdp2", "--slow-in", "batch")) as ranks:
        yield ranks


@pytest.fixture
def fsdp_healthy_job(cli, env, session_dir):
    with running_job(cli, env, session_dir, slow_rank=-1,
                     args=("--wrap", "fsdp2", "--slow-in", "batch")) as ranks:
        yield ranks


@pytest.fixture
def ddp_buffers_slow_job(cli, env, session_dir):
    with running_job(cli, env, session_dir, slow_rank=3,
                     args=("--slow-in", "batch", "--batch-norm")) as ranks:
        yield ranks


def analysis(r):
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)


def stragglers_after(cli, ranks, n, on=0):
    """`stragglers --json` asked of ranks[on] once the job has n complete collectives: the
    analysis and the answer's text."""
    r = poll_cli(cli, ranks[on].pid, ["stragglers", "--json"],
                 lambda r: (analysis(r) or {}).get("collectives", 0) >= n,
                 f"{n} complete collectives", ranks)
    return analysis(r), r.stdout


def recorded_ops(cli, t):
    """The collective operations t's agent recorded in python.nccl_trace."""
    return cli(t.pid, "query", "--format", "csv",
               "SELECT DISTINCT operation_type FROM python.nccl_trace ORDER BY 1").stdout.split()[1:]


def verdict(cli, t):
    """The first line of `stragglers` (text) asked of t."""
    out = cli(t.pid, "stragglers").stdout
    return out.splitlines()[0] if out else ""


def test_stragglers_names_the_slow_rank_and_its_forward(cli, slow_job):
    ranks = slow_job
    a, out = stragglers_after(cli, ranks, 40)
    assert a["culprit"] == 2, out
    assert a["phase"] == "forward", out
    assert a["late_host"] is None, out
    by_rank = {x["rank"]: x for x in a["ranks"]}
    assert by_rank[2]["times_last"] >= 0.6 * a["collectives"], out
    assert by_rank[2]["median_lag_ms"] >= max(a["floor_ms"], a["bar_ms"]), out
    # The text form: the verdict line first, then the table.
    t = cli(ranks[1].pid, "stragglers")
    lines = t.stdout.splitlines()
    assert lines[0].startswith("rank 2 (") and "makes the others wait" in lines[0], t.stdout
    assert "its forward is" in lines[0], t.stdout
    assert lines[1].split() == ["rank", "host", "times_last", "median_lag_ms", "wait_ms", "phase"], t.stdout
    row2 = [l.split() for l in lines[2:] if l.split() and l.split()[0] == "2"]
    assert row2 and row2[0][-1] == "forward", t.stdout
    # MCP's stragglers tool gives the command's text (one renderer) beside its JSON
    if SDK_MISSING is None:
        async def body(session):
            return await session.call_tool("stragglers", {"target": str(ranks[1].pid)})

        _, res = sdk_session(cli, [], body)
        assert not res.is_error, text_of(res)
        mcp_lines = text_of(res).splitlines()
        assert mcp_lines[0].startswith("rank 2 (") and "its forward is" in mcp_lines[0], mcp_lines
        assert mcp_lines[1] == lines[1], mcp_lines
        assert res.structured_content["culprit"] == 2, res.structured_content


def report_finding(r):
    """The arrival_order finding of a `report --json` answer, or None."""
    if r.returncode != 0:
        return None
    doc = json.loads(r.stdout)
    return next((f for f in doc["findings"] if f["id"] == "arrival_order"), None)


def test_report_names_the_late_rank(cli, slow_job):
    ranks = slow_job
    r = poll_cli(cli, ranks[1].pid, ["report", "--json"],
                 lambda r: ((report_finding(r) or {}).get("numbers") or {}).get("collectives", 0) >= 40,
                 "a report over 40 complete collectives", ranks)
    f = report_finding(r)
    assert f["severity"] in ("warning", "critical"), f
    assert f["numbers"]["culprit"] == 2 and f["numbers"]["phase"] == "forward", f
    assert f["claim"].startswith("rank 2 ("), f
    assert "its forward is" in f["claim"], f
    t = cli(ranks[3].pid, "report")
    assert "rank 2 (" in t.stdout and "makes the others wait" in t.stdout, t.stdout


def lag_and_last(samples):
    """{rank: largest lag over its groups}, {rank: arrived-last count summed over its groups}."""
    lag, last = {}, {}
    for labels, v in series(samples, "probing_collective_arrival_lag_seconds"):
        lag[labels["rank"]] = max(v, lag.get(labels["rank"], 0.0))
    for labels, v in series(samples, "probing_collective_arrived_last_total"):
        last[labels["rank"]] = last.get(labels["rank"], 0.0) + v
    return lag, last


def test_exporter_lag_and_arrived_last(cli, env, session_dir, slow_job):
    """The exporter's arrival series (docs/exporter.md): rank 2 enters ~30 ms after the first
    rank, the others about with it; its counter of collectives entered last leads and only
    grows; the after-time counter is the job's, the same in every rank's series."""
    ranks = slow_job
    stragglers_after(cli, ranks, 40)
    work = session_dir / f"stragglers-exporter-{time.monotonic_ns()}"
    work.mkdir()
    e = Exporter(cli, env, work, "--timeout", "20")
    try:
        body = e.metrics()
        lag, last = lag_and_last(parse(body))
        assert sorted(lag) == ["0", "1", "2", "3"] and sorted(last) == sorted(lag), (lag, last)
        others = [lag[r] for r in ("0", "1", "3")]
        assert lag["2"] >= 0.015 and lag["2"] > 2 * max(others), lag
        assert last["2"] >= 0.6 * sum(last.values()) > 0, last
        # The collectives' own time after the last rank entered, counted over the same
        # collectives for every rank: the same sum in each rank's series, and above 0.
        after = {labels["rank"]: v for labels, v in
                 series(parse(body), "probing_collective_after_seconds_total")}
        assert sorted(after) == ["0", "1", "2", "3"] and len(set(after.values())) == 1, after
        assert after["0"] > 0, after
        before, deadline = dict(last), time.monotonic() + STEP_TIMEOUT_S
        while last["2"] <= before["2"]:  # the job goes on: rank 2's counter must grow
            assert time.monotonic() < deadline, f"rank 2's counter stayed at {before['2']}"
            assert all(t.alive() for t in ranks)
            time.sleep(0.5)
            _, last = lag_and_last(parse(e.metrics()))
            assert all(last[r] >= before[r] for r in before), (before, last)
    finally:
        e.stop()
    assert e.proc.returncode == 0


def test_ui_stragglers_route(cli, slow_job, tmp_path):
    """The web view's /ui/stragglers is `stragglers --json` of the view's job."""
    ranks = slow_job
    stragglers_after(cli, ranks, 40)
    ui = UIServer(cli, ranks[1].pid, tmp_path)
    try:
        status, body, headers = ui.get("/ui/stragglers")
        assert status == 200 and headers["Content-Type"] == "application/json", body
        a = json.loads(body)
        assert a["culprit"] == 2 and a["phase"] == "forward" and a["collectives"] >= 40, a
    finally:
        ui.stop()


def test_ui_ranks_page_names_the_late_rank(cli, request, tmp_path):
    """In a browser: the Ranks page says the verdict above the table, and each rank's count of
    collectives entered last in it."""
    driver = browser_or_skip()
    ui = None
    try:
        ranks = request.getfixturevalue("slow_job")
        stragglers_after(cli, ranks, 40)
        ui = UIServer(cli, ranks[1].pid, tmp_path)
        driver.get(ui.url + "#ranks")
        wait_for(driver, "probingUI.rankCells > 0 && probingUI.arrivalOrder", "the arrival order")
        assert driver.execute_script("return probingUI.arrivalOrder.culprit") == 2
        text = driver.execute_script("return document.getElementById('rk-arrivals-text').textContent")
        assert text.startswith("rank 2 (") and "makes the others wait" in text, text
        assert "its forward is" in text, text
        cells = driver.execute_script(
            "return [...document.querySelectorAll('#rk-table tbody tr')].map("
            "(tr) => [...tr.children].map((td) => td.textContent))")
        row2 = next(c for c in cells if c[1] == "2")
        last, of = row2[7].split(" of ")  # "entered last": N of M collectives
        assert int(last) >= 0.6 * int(of) > 0, cells
        assert console_errors(driver) == []
    finally:
        driver.quit()
        if ui:
            ui.stop()


def test_stragglers_healthy_job_names_nobody(cli, healthy_job):
    ranks = healthy_job
    # 100 collectives (about 3 s of the job after its warm-up): on this 2-core machine the
    # seconds after start (the previous test's job exiting beside this one) can keep one rank
    # a little behind for a while.
    a, out = stragglers_after(cli, ranks, 100, on=3)
    assert a["culprit"] is None and a["late_host"] is None, out
    assert verdict(cli, ranks[0]).startswith("no straggler: ")
    r = poll_cli(cli, ranks[2].pid, ["report", "--json"],
                 lambda r: ((report_finding(r) or {}).get("numbers") or {}).get("collectives", 0) >= 40,
                 "a report over 40 complete collectives", ranks)
    f = report_finding(r)
    assert f["severity"] == "ok" and f["numbers"]["culprit"] is None, f
    assert json.loads(r.stdout)["primary"] != "arrival_order", r.stdout


def test_stragglers_fsdp2_names_the_rank_its_batch_delays(cli, fsdp_slow_job):
    """FSDP2: rank 1 prepares its batch 30 ms longer; the others wait for it in the first
    all-gather of each forward and enter the step's other all-gathers and reduce-scatters
    together with it, so it is last in few collectives, by far in one (the wait rule)."""
    ranks = fsdp_slow_job
    a, out = stragglers_after(cli, ranks, 150)
    ops = recorded_ops(cli, ranks[2])
    # FSDP2's all-gathers and reduce-scatters are recorded (torch 2.13: the *_single calls).
    assert any(o.startswith("all_gather") for o in ops), ops
    assert any(o.startswith("reduce_scatter") for o in ops), ops
    assert a["culprit"] == 1 and a["phase"] == "other" and a["late_host"] is None, out
    by_rank = {x["rank"]: x for x in a["ranks"]}
    others = sum(x["wait_ms"] for k, x in by_rank.items() if k != 1)
    assert by_rank[1]["wait_ms"] >= 0.6 * (by_rank[1]["wait_ms"] + others), out
    first = verdict(cli, ranks[3])
    assert first.startswith("rank 1 (") and "makes the others wait" in first, first
    assert "its other host time is" in first, first


def test_stragglers_fsdp2_healthy_job_names_nobody(cli, fsdp_healthy_job):
    ranks = fsdp_healthy_job
    a, out = stragglers_after(cli, ranks, 150, on=2)
    assert a["culprit"] is None and a["late_host"] is None, out


def test_stragglers_ddp_delay_that_lands_in_the_buffer_broadcast(cli, ddp_buffers_slow_job):
    """DDP with a BatchNorm: rank 3 prepares its batch 30 ms longer, and DDP broadcasts the
    buffers at the start of every forward, so the others wait for it there and enter the
    gradient all-reduce together with it. The broadcast (torch.distributed._broadcast_coalesced,
    called from DDP's Python) is recorded, so rank 3 is named, with its other host time."""
    ranks = ddp_buffers_slow_job
    a, out = stragglers_after(cli, ranks, 60)
    ops = recorded_ops(cli, ranks[1])
    assert "broadcast_coalesced" in ops and "all_reduce" in ops, ops
    assert a["culprit"] == 3 and a["phase"] == "other", out
    first = verdict(cli, ranks[2])
    assert first.startswith("rank 3 (") and "its other host time is" in first, first
