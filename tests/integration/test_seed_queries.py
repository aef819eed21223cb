"""The seed's query examples (../shared/acceptance/seed-queries/*.sql) run verbatim through the
real `probing` binary against live, finished-but-holding training runs of 250 steps, and their
rows mean what the seed says they mean: with detail windows (module rows on detail steps only,
docs/tables.md; the resnet run), with the default (every step in detail but 8 summary steps per
period; the transformer run) and with every step in detail (PROBING_DETAIL_EVERY=1)."""
import json
import math

import pytest

from conftest import LONG_STEPS, SEED_QUERIES, needs_seeds, seed_file

pytestmark = needs_seeds

SQL_FILES = ["01-overall-profile.sql", "02-per-step-breakdown.sql", "03-memory-bandwidth.sql",
             "04-nccl-operation-times.sql", "05-attention-modules.sql", "06-slowest-modules.sql",
             "07-before-window.sql", "08-after-window.sql"]


@pytest.fixture(params=["resnet", "transformer", "transformer_full"])
def run(request):
    return request.getfixturevalue(f"{request.param}_run")


def detail_steps(cli, run, low, high):
    """Steps in [low, high] whose module executions are recorded (python.steps.detail)."""
    return [r["step"] for r in cli.query(run.target(), f"SELECT step FROM python.steps WHERE detail = 1 "
                                                      f"AND step BETWEEN {low} AND {high} ORDER BY step")]


def is_full(run):
    """Every step in detail (the agent's /api/info says period 1)."""
    return json.loads(run.cli(run.target(), "info", "-f", "json").stdout)["detail"]["every"] == 1


def detail_mode(run):
    """What applies now: "every step", "windows" or "fixed" (/api/info detail.mode)."""
    return json.loads(run.cli(run.target(), "info", "-f", "json").stdout)["detail"]["mode"]


def known_names(run):
    """Names a row's module may carry: the model's modules, the loss module's class and the
    optimizer's class."""
    return set(run.modules()) | run.other_roots() | {run.optimizer_name()}


def test_seed_files_present():
    found = sorted(p.name for p in SEED_QUERIES.glob("*.sql"))
    assert found == SQL_FILES, f"expected the 8 seed queries in {SEED_QUERIES}, got {found}"


@pytest.mark.parametrize("name", SQL_FILES)
def test_runs_verbatim_in_every_format(cli, run, name):
    """`probing <pid> query "$(cat file)"` works as typed, in the default table format too."""
    sql = seed_file(name)
    r = cli(run.target(), "query", sql)
    assert r.stderr == "", r.stderr
    first_line = r.stdout.splitlines()[0] if r.stdout else ""
    # The header names the query's columns (04 returns no rows, but still has a header).
    last_select_column = {
        "01-overall-profile.sql": "pct_time", "02-per-step-breakdown.sql": "optimizer_time",
        "03-memory-bandwidth.sql": "memory_bandwidth_mb_per_sec",
        "04-nccl-operation-times.sql": "max_time_ms", "05-attention-modules.sql": "avg_memory",
        "06-slowest-modules.sql": "avg_time", "07-before-window.sql": "before_avg",
        "08-after-window.sql": "after_avg"}[name]
    assert last_select_column in first_line, r.stdout[:500]
    csv = cli(run.target(), "query", sql, "-f", "csv")
    assert csv.stdout.splitlines()[0].split(",")[-1] == last_select_column, csv.stdout[:500]
    cli.query(run.target(), sql)  # and as JSON


def test_01_overall_profile(cli, run):
    rows = cli.query(run.target(), seed_file("01-overall-profile.sql"))
    assert 1 <= len(rows) <= 15
    names = known_names(run)
    for r in rows:
        assert r["module"] in names, f"{r['module']!r} is not one of named_modules()"
        assert r["stage"] in ("forward", "backward", "step")
        assert r["executions"] >= 1
        assert r["avg_time_sec"] > 0
        assert math.isclose(r["total_time_sec"], r["avg_time_sec"] * r["executions"],
                            rel_tol=1e-6)
    totals = [r["total_time_sec"] for r in rows]
    assert totals == sorted(totals, reverse=True)
    # pct_time is each group's share of all groups of the last 10 steps (LIMIT cuts the list
    # after the shares are computed): check it against the total, and that the shares sum to 100.
    window = "WHERE step > (SELECT MAX(step) - 10 FROM python.torch_trace)"
    total = cli.scalar(run.target(), f"SELECT SUM(duration) FROM python.torch_trace {window}")
    for r in rows:
        assert math.isclose(r["pct_time"], r["total_time_sec"] * 100 / total, rel_tol=1e-6)
    every = cli.query(run.target(), seed_file("01-overall-profile.sql").replace("LIMIT 15", ""))
    assert math.isclose(sum(r["pct_time"] for r in every), 100.0, rel_tol=1e-6)
    # The last 10 steps of torch_trace: a module called once per forward ran once per step that
    # has module rows: all 10 with PROBING_DETAIL_EVERY=1, all but at most one with the default's
    # every step (one summary step in 16 or fewer), the last detail window's with windows.
    last = cli.scalar(run.target(), "SELECT MAX(step) FROM python.torch_trace")
    recorded = cli.scalar(run.target(), f"SELECT COUNT(DISTINCT step) FROM python.torch_trace {window}")
    steps_row = cli.scalar(run.target(), "SELECT MAX(step) FROM python.steps")
    expected = detail_steps(cli, run, last - 9, last)
    if last > steps_row:  # the step in progress has rows and no python.steps row yet
        expected.append(last)
    assert recorded == len(expected)
    if is_full(run):
        assert recorded == 10
    elif detail_mode(run) == "every step":
        assert recorded >= 9, "every step but one in 16 or fewer: at most one summary step in 10"
    else:
        assert 1 <= recorded <= 8
    optimizer = run.optimizer_name()
    by_key = {(r["module"], r["stage"]): r for r in every}
    assert by_key[(optimizer, "step")]["executions"] == len([s for s in expected if s <= steps_row])
    root = run.root_name()
    assert by_key[(root, "forward")]["executions"] == recorded


def test_02_per_step_breakdown(cli, run):
    rows = cli.query(run.target(), seed_file("02-per-step-breakdown.sql"))
    steps = [r["step"] for r in rows]
    last = cli.scalar(run.target(), "SELECT MAX(step) FROM python.torch_trace")
    # The last 5 step numbers of torch_trace: all of them with every step in detail; otherwise
    # the detail steps among them (a run may end inside a detail window, leaving fewer than 5).
    expected = detail_steps(cli, run, last - 4, last)
    if last > cli.scalar(run.target(), "SELECT MAX(step) FROM python.steps"):
        expected.append(last)  # the step in progress has rows and no python.steps row yet
    assert steps == expected, rows
    assert len(rows) >= 1
    if is_full(run):
        assert steps == list(range(last - 4, last + 1))
    # The step's wall time, from its own rows: every row lies inside [step start, end].
    walls = {r["step"]: r["wall"] for r in cli.query(
        run.target(), "SELECT step, MAX(time_offset + duration) AS wall FROM python.torch_trace "
                      "WHERE step > (SELECT MAX(step) - 5 FROM python.torch_trace) GROUP BY step")}
    for r in rows:
        assert r["forward_time"] > 0 and r["backward_time"] > 0 and r["optimizer_time"] > 0, r
        busy = r["forward_time"] + r["backward_time"] + r["optimizer_time"]
        assert busy <= walls[r["step"]] * 1.01 + 1e-4, (
            f"step {r['step']}: forward+backward+optimizer = {busy:.6f} s does not fit in the "
            f"step's wall time {walls[r['step']]:.6f} s")


def test_03_memory_bandwidth(cli, run):
    rows = cli.query(run.target(), seed_file("03-memory-bandwidth.sql"))
    assert 1 <= len(rows) <= 10
    names = known_names(run)
    for r in rows:
        assert r["module"] in names
        assert r["avg_time_sec"] > 0.001  # the query keeps rows slower than 1 ms
        # On CPU `allocated` is the process RSS in MB: a torch process has tens of MB at least.
        assert 10 < r["avg_memory_mb"] < 1_000_000, r
        assert math.isclose(r["memory_bandwidth_mb_per_sec"],
                            r["avg_memory_mb"] / r["avg_time_sec"], rel_tol=1e-6)
    bw = [r["memory_bandwidth_mb_per_sec"] for r in rows]
    assert bw == sorted(bw, reverse=True)


def test_04_nccl_operation_times_empty_without_distributed(cli, run):
    r = cli(run.target(), "query", seed_file("04-nccl-operation-times.sql"), "-f", "json")
    assert r.stderr == ""
    assert json.loads(r.stdout) == []


def test_05_attention_modules(cli, transformer_run, resnet_run):
    rows = cli.query(transformer_run.target(), seed_file("05-attention-modules.sql"))
    expected = {n for n in transformer_run.modules() if "attn" in n or "attention" in n}
    assert {r["module"] for r in rows} == expected
    assert any(r["module"] == "layers.0.attn" for r in rows)
    times = [r["avg_time"] for r in rows]
    assert times == sorted(times, reverse=True) and all(t > 0 for t in times)
    assert all(r["avg_memory"] > 0 for r in rows)
    # the ResNet has no attention
    assert cli.query(resnet_run.target(), seed_file("05-attention-modules.sql")) == []


def test_06_slowest_modules(cli, run):
    rows = cli.query(run.target(), seed_file("06-slowest-modules.sql"))
    assert len(rows) == 5
    times = [r["avg_time"] for r in rows]
    assert times == sorted(times, reverse=True) and times[-1] > 0
    names = known_names(run)
    assert all(r["module"] in names for r in rows), rows
    # It really is the top 5 of all modules.
    slowest_other = cli.scalar(
        run.target(), "SELECT MAX(a) FROM (SELECT AVG(duration) AS a FROM python.torch_trace "
                      "GROUP BY module ORDER BY a DESC LIMIT -1 OFFSET 5)")
    assert slowest_other <= times[-1]


@pytest.mark.parametrize("name,column,low,high", [
    ("07-before-window.sql", "before_avg", 100, 110),
    ("08-after-window.sql", "after_avg", 200, 210)])
def test_07_08_step_windows(cli, run, name, column, low, high):
    assert LONG_STEPS > 200
    rows = cli.query(run.target(), seed_file(name))
    assert len(rows) == 1 and set(rows[0]) == {column}
    value = rows[0][column]
    # The average is over exactly the rows of the window's steps that have module rows: all 11
    # with every step in detail; otherwise the detail steps among them, and NULL
    # (no module execution recorded there) when there is none.
    check = cli.query(run.target(), f"SELECT COUNT(DISTINCT step) AS steps, "
                                     f"SUM(duration) / COUNT(*) AS avg FROM python.torch_trace "
                                     f"WHERE step BETWEEN {low} AND {high}")[0]
    detail = detail_steps(cli, run, low, high)
    assert check["steps"] == len(detail)
    if is_full(run):
        assert check["steps"] == 11
    if detail:
        assert value is not None and value > 0
        assert math.isclose(value, check["avg"], rel_tol=1e-9)
    else:
        assert value is None
