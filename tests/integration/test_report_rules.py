"""The report's rules on training loops with the common causes of lost time planted the way
training scripts have them (tests/workloads/loop_causes.py), each against the healthy twin of
the same loop, which must stay clean. docs/report.md lists the rules and their thresholds.

One run per case (a few seconds of training each); ASan runs (PROBING_SANITIZED) check that
the report runs, not diagnoses that depend on relative times.
"""
import json
import os
from collections import Counter

import pytest

PROBLEMS = ("critical", "warning")
SANITIZED = bool(os.environ.get("PROBING_SANITIZED"))


def run_report(cli, traced, case, steps, *extra):
    t = traced("loop_causes.py", "--case", case, "--steps", steps, "--print-every", 0, *extra)
    t.wait_holding()
    r = cli(t.target(), "report", "--json")
    assert r.stderr == "", r.stderr
    doc = json.loads(r.stdout)
    if SANITIZED:
        pytest.skip("timing-dependent diagnosis is not asserted under ASan (PROBING_SANITIZED)")
    return t, doc


def problems(doc):
    return {f["id"]: f for f in doc["findings"] if f["severity"] in PROBLEMS}


def every(doc):
    return {f["id"]: f for f in doc["findings"]}


def dump(doc):
    return json.dumps({k: doc[k] for k in ("primary", "bottleneck", "findings")}, indent=1)


def test_healthy_twin_stays_clean(cli, traced):
    t, doc = run_report(cli, traced, "healthy", 60)
    assert doc["primary"] is None and problems(doc) == {}, dump(doc)
    assert doc["bottleneck"]["type"] == "compute"
    assert doc["component"]["dataloader_seen"] is True
    # On the CPU the host-sync check does not apply, and says so instead of "[OK] 0 syncs".
    syncs = every(doc)["host_syncs"]
    assert syncs["severity"] == "skipped", syncs
    assert syncs["claim"].startswith("host-device synchronisations: does not apply (the model "
                                     "runs on the CPU")
    # throughput from python.steps.samples: 64 per step
    assert doc["baseline"]["batch_size"] == 64
    assert doc["baseline"]["batch_size_source"] == "python.steps samples"
    gil = every(doc)["gil_contention"]
    assert gil["severity"] == "ok" and gil["numbers"]["samples"] > 0, gil
    out = cli(t.target(), "report").stdout
    assert "seed 00" not in out and "GPU" not in out.split("\nMemory")[0], out
    assert out.splitlines()[1] == "primary finding: none - no problem found in the recorded data"


def test_python_generator_input_is_host_time(cli, traced):
    t, doc = run_report(cli, traced, "generator", 40)
    assert doc["primary"] == "unaccounted_time", dump(doc)
    assert doc["bottleneck"]["type"] == "data_likely", doc["bottleneck"]
    f = problems(doc)["unaccounted_time"]
    assert "no DataLoader fed the loop" in f["claim"], f["claim"]
    assert f["numbers"]["dataloader_seen"] is False
    assert "capture --stack" in f["recommendation"]
    assert doc["component"]["shares"]["data"] is None  # unknown, not 0
    # the agent's signal: no DataLoader batch in any step
    rows = cli.query(t.target(), "SELECT MAX(batches) AS b, MAX(data_wait) AS w FROM python.steps")
    assert rows == [{"b": 0, "w": 0.0}], rows
    out = cli(t.target(), "report").stdout
    assert out.splitlines()[1].startswith("primary finding: host time:"), out


def test_per_step_logging_is_host_time(cli, traced):
    _, doc = run_report(cli, traced, "logging", 40)
    assert doc["primary"] == "unaccounted_time", dump(doc)
    assert doc["bottleneck"]["type"] == "host", doc["bottleneck"]
    f = problems(doc)["unaccounted_time"]
    assert "outside data wait, forward, backward, optimizer and gradient sync" in f["claim"]
    assert f["numbers"]["dataloader_seen"] is True


def test_slow_leak_is_projected(cli, traced):
    t, doc = run_report(cli, traced, "leak", 250)
    f = every(doc)["memory_growth"]
    assert f["severity"] in PROBLEMS, dump(doc)
    n = f["numbers"]
    # The loop keeps 64 x 512 float32 features a step: 0.125 MiB. On the CPU the slope is the
    # RSS's, and glibc's heap keeps the holes between the kept blocks, so RSS grows faster than
    # the data: 0.158 MiB a step measured on the plain loop (VmRSS after 100 and 300 steps),
    # 0.18-0.21 under probing (seen in its reports; why it is higher was not measured).
    assert 0.1 < n["slope_mb_per_step"] < 0.3, n
    assert n["r2"] >= 0.9 and n["limit_mb"] > 0 and n["hours_to_limit"] >= 0, n
    assert "GB per hour at this pace; out of memory in ~" in f["claim"], f["claim"]
    limit = cli.query(t.target(), "SELECT MAX(limit_mb) AS m FROM python.memory")[0]["m"]
    assert limit == pytest.approx(n["limit_mb"], rel=1e-5)


def skip_if_noisy(cli, t, doc, f, every_n, periodic_ok):
    """The periodic cases plant one slow step every every_n steps in a loop whose steps take
    a few milliseconds, so on a loaded machine a preemption makes an ordinary step "slow" too
    (over 1.8x the median). When the report's periodic answer is right (periodic_ok) nothing is
    skipped, noise or not. When it is not, the recording is checked: if some step the report
    counted as slow (its own SQL, in its steady window, detail steps apart as it keeps them)
    lies off the planted period's phase, the test is skipped naming those steps (the noise was
    measured, not assumed); on a clean recording the caller's assertions run and fail."""
    if periodic_ok:
        return
    b = doc["baseline"]
    rows = [r for r in cli.query(t.target(), f"SELECT step, detail FROM ({f['sql'][0]})")
            if r["step"] >= b["first_step"] + b["warmup_steps"]  # the steady window
            and not (r["detail"] and b["detail_steps_left_out"])]  # compared apart
    phase = Counter(r["step"] % every_n for r in rows).most_common(1)[0][0]
    strays = [r["step"] for r in rows if r["step"] % every_n != phase]
    if strays:
        pytest.skip(f"a loaded machine: {len(strays)} step(s) off the {every_n}-step period "
                    f"took over 1.8x the median (steps {strays[:10]}) and the report's period "
                    f"was not found; the period is asserted on a clean recording")


def skip_if_unplanted(cli, t, doc, every_n):
    """No slow steps found at all: on a loaded machine every step slows, and the planted ones
    (step % every_n == 0) may no longer take 1.8x the median. The recording says whether they
    did: if their median is under 1.8x the others', the test is skipped with both figures; if
    they stood out, the caller's assertion fails (the report missed them)."""
    b = doc["baseline"]
    rows = cli.query(t.target(), "SELECT step, wall FROM python.steps WHERE step >= "
                                 f"{b['first_step'] + b['warmup_steps']}")
    planted = sorted(r["wall"] for r in rows if r["step"] % every_n == 0)
    others = sorted(r["wall"] for r in rows if r["step"] % every_n != 0)
    if not planted or not others:
        return
    ratio = planted[len(planted) // 2] / others[len(others) // 2]
    if ratio < 1.8:
        pytest.skip(f"a loaded machine: the planted steps' median took {ratio:.2f}x the others' "
                    f"(under the 1.8x a slow step needs), so none stood out to find")


def test_eval_pass_every_n_steps_is_the_headline(cli, traced):
    t, doc = run_report(cli, traced, "eval", 100, "--every", 10)
    f = every(doc)["outlier_steps"]
    skip_if_noisy(cli, t, doc, f, 10,
                  doc["primary"] == "outlier_steps" and f["numbers"].get("period_steps") == 10
                  and f["numbers"].get("grew") == "forward" and "an evaluation pass" in f["claim"])
    assert f["severity"] in PROBLEMS and f["numbers"]["slow_steps"] >= 3, dump(doc)
    assert doc["primary"] == "outlier_steps", dump(doc)
    assert f["numbers"]["period_steps"] == 10, f
    assert f["numbers"]["grew"] == "forward", f
    assert "an evaluation pass" in f["claim"]


def test_checkpoint_every_n_steps_has_a_period(cli, traced):
    # a wider model: its checkpoint (model and momentum, 10 MB) stands out of a busy machine's
    # noise as a real one does
    t, doc = run_report(cli, traced, "checkpoint", 100, "--every", 10, "--hidden", 1024)
    f = every(doc).get("outlier_steps")
    if f is None:
        skip_if_unplanted(cli, t, doc, 10)
    assert f is not None, dump(doc)
    assert f["numbers"]["slow_steps"] >= 3, dump(doc)
    skip_if_noisy(cli, t, doc, f, 10,
                  f["numbers"].get("period_steps") == 10 and f["numbers"].get("grew") == "other"
                  and "torch.save" in f["claim"])
    assert f["numbers"]["period_steps"] == 10, dump(doc)
    assert f["numbers"]["grew"] == "other", f
    assert "torch.save" in f["claim"]


def test_background_thread_holding_the_gil_is_named(cli, traced):
    t, doc = run_report(cli, traced, "gil_thread", 40)
    f = problems(doc).get("gil_contention")
    assert f is not None, dump(doc)
    assert f["numbers"]["thread"] == "metrics-aggregator", f
    assert f["numbers"]["share"] >= 0.2, f
    assert "thread 'metrics-aggregator' holds the GIL" in f["claim"], f["claim"]
    assert any(n["command"] == f"probing {t.target()} backtrace" for n in doc["next"]), doc["next"]
    rows = cli.query(t.target(), "SELECT DISTINCT thread_name, training FROM python.gil "
                                 "ORDER BY thread_name")
    assert {"thread_name": "MainThread", "training": 1} in rows, rows
    # every step with samples has the training thread's row, even one where only the aggregator
    # held the GIL when sampled (a step's samples are never dropped for want of a holder)
    orphans = cli.query(t.target(), "SELECT step FROM python.gil GROUP BY step "
                                    "HAVING SUM(training) <> 1")
    assert orphans == [], orphans


def test_extra_arguments_need_a_recording(cli, traced):
    t = traced("loop_causes.py", "--case", "healthy", "--steps", 3, "--print-every", 0)
    t.wait_holding()
    r = cli(t.target(), "report", "other.db", check=False)
    assert r.returncode == 2 and r.stderr == (
        "probing: report takes other recordings only when the target is a recording (got "
        "'other.db' after report; a live rank's other ranks are found by themselves)\n"), r.stderr


def test_a_short_runs_leak_is_never_ok(cli, traced):
    """36 steps keeping 180x512 float features each (0.35 MB a step): under the 16 MB a long
    run's leak needs, yet never "[OK] no steady memory growth" beside its own slope and time to
    the limit (issue 28): a warning with the pace, or too few steps to tell."""
    t, doc = run_report(cli, traced, "leak", 36, "--batch-size", 180)
    f = every(doc)["memory_growth"]
    assert f["severity"] in ("warning", "critical", "info"), dump(doc)
    if f["severity"] == "info" and f["numbers"]["slowing"]:
        # what is measured is RSS, not the leak: over 36 steps its climb may slow in the last
        # third (a CI run: +0.57 MB/step in all, +0.148 over the last third, the leak 0.35).
        # Said as it is: not steady yet, no projection, never "ok".
        assert "but the climb is slowing" in f["claim"] and "no projection" in f["claim"], f
        assert f["numbers"]["tail_slope_mb_per_step"] < 0.5 * f["numbers"]["slope_mb_per_step"], f
    elif f["severity"] == "info":
        assert f["claim"].startswith("too few steps to tell: memory climbs steadily"), f
    else:
        assert "MB/step" in f["claim"] and "out of memory in ~" in f["claim"], f
    assert f["numbers"]["slope_mb_per_step"] > 0.3, f
    assert "[OK] no steady memory growth" not in cli(t.target(), "report").stdout
