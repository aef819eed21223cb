"""Detail and summary steps (docs/tables.md): by default every module execution is recorded on
every step while the agent measures that to cost at most PROBING_DETAIL_BUDGET (3 %), with one
summary step in every 16 to 128 to measure it by; when detail costs more, windows of 8 detail
steps whose period the agent picks from the cost. Every step gets its python.steps row. Real
training processes, the real binary."""
import json
import os

import pytest

from conftest import needs_seeds, seed_file

# The agent picks the detail mode from its own measured cost: a timing, which ASan's slowdown
# (scripts/sanitize.sh sets PROBING_SANITIZED) makes uneven; it chose "every step" there once.
timing_under_asan = pytest.mark.skipif(
    bool(os.environ.get("PROBING_SANITIZED")),
    reason="the detail mode follows a measured cost, not asserted under ASan (PROBING_SANITIZED)")


def steps_table(cli, t):
    return cli.query(t.target(), "SELECT step, wall, data_wait, forward, backward, optimizer, "
                                 "collectives, grad_sync, other, detail FROM python.steps ORDER BY step")


def trace_steps(cli, t):
    return {r["step"] for r in cli.query(t.target(), "SELECT DISTINCT step FROM python.torch_trace")}


def info_detail(cli, t):
    return json.loads(cli(t.target(), "info", "-f", "json").stdout)["detail"]


def windows_period(cost, budget):
    """The period windows take for a cost (detail.c windows_period): the smallest power of two
    from 16 to 4096 with 8 x cost / period <= budget."""
    want = 16
    while want < 8 * cost / budget * (1 - 1e-9) and want < 4096:
        want *= 2
    return want


@pytest.fixture(scope="module")
def default_run(session_launcher):
    """many_modules.py (272 tiny modules: the stress model), 400 steps, default settings."""
    t = session_launcher.traced("many_modules.py", "--steps", 400, "--print-every", 50)
    t.wait_holding()
    return t


@pytest.fixture(scope="module")
def every_run(session_launcher, env):
    """transformer.py, 400 steps, a budget no estimate reaches: every step in detail throughout."""
    t = session_launcher.traced("transformer.py", "--steps", 400, "--print-every", 50,
                                env=dict(env, PROBING_DETAIL_BUDGET="50"))
    t.wait_holding()
    return t


@pytest.fixture(scope="module")
def tiny_run(session_launcher, env):
    """many_modules.py with Python-level backward probes (detail costs it 10-30 %, over the 3 %
    budget): the automatic mode falls back to windows. 1,500 steps, so that the windows make
    most of the run whenever the estimates (noisy on a loaded machine) settle."""
    t = session_launcher.traced("many_modules.py", "--steps", 1500, "--print-every", 100,
                                env=dict(env, PROBING_AUTOGRAD_EXT="0"))
    t.wait_holding()
    return t


def windows(steps):
    """Runs of consecutive step numbers, as (first, last)."""
    out = []
    for s in sorted(steps):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return [tuple(w) for w in out]


def test_default_starts_with_every_step_and_follows_its_estimate(cli, default_run):
    rows = steps_table(cli, default_run)
    assert len(rows) >= 399, "every step has its python.steps row"
    detail = {r["step"] for r in rows if r["detail"] == 1}
    assert trace_steps(cli, default_run) == detail, "torch_trace holds exactly the detail steps"
    summary = sorted(r["step"] for r in rows if r["detail"] == 0)
    assert summary[:2] == [15, 31], f"every step in detail from step 0 but one in 16: {summary[:8]}"
    d = info_detail(cli, default_run)
    assert d["every"] == "auto" and d["steps"] == 8 and d["budget_pct"] == 3, d
    assert d["cost"] is not None and d["cost"] >= 0, f"estimated by step 127: {d}"
    p = d["period"]
    assert p & (p - 1) == 0, d
    # Which mode this model lands in depends on this machine (every step in detail costs it
    # ~3-5 % of wall time with the C++ extension); what is fixed is that the mode and period
    # follow the estimate shown.
    if d["mode"] == "every step":
        assert d["cost"] <= 0.03 and 128 <= p <= 1024 and d["window"] == p - 8, d
    else:
        assert d["mode"] == "windows" and d["cost"] > 0.03, d
        assert d["window"] == 8 and p == windows_period(d["cost"], 0.03), d


def test_every_step_settles_to_one_summary_step_in_128(cli, every_run):
    rows = steps_table(cli, every_run)
    summary = [r["step"] for r in rows if r["detail"] == 0]
    # one in 16 (period 128), then one in 32 after the estimate at 127, one in 64 after 255
    assert summary == list(range(15, 128, 16)) + list(range(159, 256, 32)) + [319, 383], summary
    d = info_detail(cli, every_run)
    assert d["mode"] == "every step" and d["period"] == 512 and d["window"] == 504, d
    assert 0 <= d["cost"] <= 0.5, d
    text = cli(every_run.target(), "info").stdout
    assert "every step but 8 of every 512 (auto: a detail step costs" in text, text
    assert "within the 50% budget" in text, text


def test_report_times_every_step_mode_on_all_steps(cli, every_run):
    doc = json.loads(cli(every_run.target(), "report", "--json").stdout)
    b = doc["baseline"]
    assert b["detail_steps_left_out"] is False and b["detail_steps"] > 0.9 * b["steady_steps"], b
    text = cli(every_run.target(), "report").stdout
    assert (f"{b['detail_steps']} of the {b['steady_steps']} steady steps in detail (every module recorded, "
            "python.steps.detail = 1); the figures below include them") in text, text


@timing_under_asan
def test_expensive_detail_falls_back_to_windows(cli, tiny_run):
    rows = steps_table(cli, tiny_run)
    assert len(rows) >= 399, "every step has its python.steps row"
    detail = {r["step"] for r in rows if r["detail"] == 1}
    assert trace_steps(cli, tiny_run) == detail, "torch_trace holds exactly the detail steps"
    d = info_detail(cli, tiny_run)
    assert d["every"] == "auto" and d["mode"] == "windows" and d["window"] == 8 and d["budget_pct"] == 3, d
    assert d["cost"] > 0.03 and d["period"] == windows_period(d["cost"], 0.03), d
    ws = windows(detail)
    # steps 0-14 and 16-30 ... (every step but one in 16, the measurement) until the estimate at
    # step 127; after that the record follows the estimates, which this machine's load makes
    # noisy: every run of detail steps is a window of 8, or the steps between two summary steps
    # one spacing (16 or more) apart, and starts at a multiple of 16
    assert ws[0] == (0, 14) and ws[1] == (16, 30), ws
    for first, last in ws[2:-1]:
        n = last - first + 1
        assert (n == 8 or (n + 1) % 16 == 0) and first % 16 == 0, \
            f"detail runs are windows of 8 or every step between summary steps: {ws}"
    assert len(ws) > 10 and ws[-2][1] - ws[-2][0] == 7, f"windows by the end of 1,500 steps: {ws}, {d}"
    text = cli(tiny_run.target(), "info").stdout
    assert f"8 steps every {d['period']} (auto: a detail step costs" in text and "over the 3% budget" in text, text


def test_windows_only(cli, traced, env):
    """PROBING_DETAIL_EVERY=windows: the windows whatever detail costs (the earlier default)."""
    t = traced("transformer.py", "--steps", 200, "--print-every", 50, env=dict(env, PROBING_DETAIL_EVERY="windows"))
    t.wait_holding()
    detail = {r["step"] for r in steps_table(cli, t) if r["detail"] == 1}
    ws = windows(detail)
    assert ws[0] == (0, 7) and ws[1] == (64, 71), ws
    d = info_detail(cli, t)
    assert d["every"] == "windows" and d["mode"] == "windows" and d["window"] == 8, d


def test_summary_steps_have_their_parts(cli, tiny_run):
    rows = [r for r in steps_table(cli, tiny_run) if r["step"] > 0]
    summary = [r for r in rows if r["detail"] == 0]
    assert len(summary) > 500
    for r in summary:
        assert r["forward"] > 0 and r["backward"] > 0 and r["optimizer"] > 0, r
        parts = (r["data_wait"] + r["forward"] + r["backward"] + r["optimizer"] + r["collectives"]
                 + r["grad_sync"] + r["other"])
        assert abs(parts - r["wall"]) <= 1e-6 + 1e-3 * r["wall"], r
    # Forward, backward and optimizer hold the step: on the median step, not on every one (a
    # step in which the OS ran something else between two phases has a large "other").
    others = sorted(r["other"] / r["wall"] for r in summary)
    assert others[len(others) // 2] < 0.5, f"median share of 'other': {others[len(others) // 2]}"


def test_detail_step_sums_agree_with_the_rows(cli, default_run):
    """On a detail step, python.steps.forward is the sum of forward self times in torch_trace;
    backward (the pass) holds the backward rows' self times."""
    rows = cli.query(default_run.target(), """
        SELECT s.step, s.forward, s.backward, s.optimizer,
               SUM(CASE WHEN t.stage = 'forward' THEN t.duration ELSE 0 END) AS f,
               SUM(CASE WHEN t.stage = 'backward' THEN t.duration ELSE 0 END) AS b,
               SUM(CASE WHEN t.stage = 'step' THEN t.duration ELSE 0 END) AS o
        FROM python.steps s JOIN python.torch_trace t USING (step)
        WHERE s.detail = 1 GROUP BY s.step""")
    assert len(rows) >= 16
    for r in rows:
        assert abs(r["forward"] - r["f"]) <= 1e-5 + 1e-3 * r["f"], r
        assert r["o"] == pytest.approx(r["optimizer"], rel=1e-6, abs=1e-7), r
        assert r["b"] <= r["backward"] * 1.001 + 1e-6, r
        assert r["b"] >= 0.8 * r["backward"], f"module rows cover most of the pass: {r}"


@needs_seeds
@pytest.mark.parametrize("fixture", ["every_run", "tiny_run"])
def test_seed_query_02_reads_the_last_detail_steps(cli, request, fixture):
    run = request.getfixturevalue(fixture)
    rows = cli.query(run.target(), seed_file("02-per-step-breakdown.sql"))
    detail = sorted(r["step"] for r in steps_table(cli, run) if r["detail"] == 1)
    assert [r["step"] for r in rows] == [s for s in detail if s > detail[-1] - 5]
    for r in rows:
        assert r["forward_time"] > 0 and r["backward_time"] > 0 and r["optimizer_time"] > 0


@timing_under_asan
def test_report_times_the_job_on_summary_steps(cli, tiny_run):
    doc = json.loads(cli(tiny_run.target(), "report", "--json").stdout)
    b = doc["baseline"]
    assert b["detail_steps_left_out"] is True and b["detail_steps"] >= 8, b
    assert b["detail_median_s"] > 0 and b["summary_median_s"] > 0, b
    comp = doc["component"]
    assert comp["top_by_self"], "modules are ranked from the detail steps"
    text = cli(tiny_run.target(), "report").stdout
    assert "detail step(s) (every module recorded, python.steps.detail = 1) timed apart" in text


@pytest.mark.parametrize("every,window,expect", [
    ("1", None, lambda s: True),
    ("10", "3", lambda s: s % 10 < 3),
])
def test_fixed_period(cli, traced, every, window, expect, env):
    e = dict(env, PROBING_DETAIL_EVERY=every)
    if window:
        e["PROBING_DETAIL_STEPS"] = window
    t = traced("many_modules.py", "--steps", 40, "--print-every", 10, env=e)
    t.wait_holding()
    rows = steps_table(cli, t)
    assert len(rows) >= 39
    want = {r["step"] for r in rows if expect(r["step"])}
    assert {r["step"] for r in rows if r["detail"]} == want
    assert trace_steps(cli, t) == want
    d = info_detail(cli, t)
    assert d["every"] == int(every) and d["period"] == int(every), d


def test_bad_setting_warns_and_falls_back(cli, traced, env):
    t = traced("many_modules.py", "--steps", 20, "--print-every", 10,
               env=dict(env, PROBING_DETAIL_EVERY="often"))
    t.wait_holding()
    assert ("probing: ignoring PROBING_DETAIL_EVERY=often: not 'auto', 'windows' or a number of steps; "
            "using auto") in t.stderr()
    assert info_detail(cli, t)["every"] == "auto"
    assert trace_steps(cli, t) == set(range(20)) - {15}, "the default: every step in detail but one in 16"


def test_checkpointing_on_summary_steps(cli, traced, env):
    """Activation checkpointing recomputes forwards inside backward: on summary steps that time
    is forward's, the backward pass is still timed, and training is unchanged."""
    t = traced("transformer.py", "--steps", 40, "--checkpointing", "--print-every", 10,
               env=dict(env, PROBING_DETAIL_EVERY="windows"))
    t.wait_holding()
    rows = [r for r in steps_table(cli, t) if r["step"] > 0 and r["detail"] == 0]
    assert rows
    for r in rows:
        assert r["backward"] > 0 and r["forward"] > 0
        assert r["forward"] + r["backward"] + r["optimizer"] <= r["wall"] * 1.001
