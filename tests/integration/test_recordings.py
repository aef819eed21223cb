"""Recordings: `probing run -o run.db -- python ...` keeps the whole record in a SQLite file
that `probing run.db query|report|timeline|tables` reads after the process is gone. Real
training processes, the real binary, a real file; SIGKILL mid-run; an unwritable path."""
import json
import os
import signal
import sqlite3

import pytest

from conftest import (EXAMPLES, PYTHON, SEED_QUERIES, WORKLOADS, check_killed_recording, example_file,
                      seed_file)

STEPS = 12


def recorded(launcher, cli, path, script, *args, hold=True, env=None):
    extra = []
    if hold:
        extra = ["--hold-file", launcher.workdir / f"{path.name}.release"]
    cmd = [cli.binary, "run", "-o", path, "--", PYTHON, "-u", WORKLOADS / script, *extra,
           *[str(a) for a in args]]
    t = launcher.command(cmd, env=env, name=path.stem)
    t.hold_file = launcher.workdir / f"{path.name}.release"
    return t


def cookbook_and_seed_queries():
    """{label: SQL}: every query of examples/queries, and the seed's when their folder is here."""
    queries = {f"examples/{p.name}": example_file(p.name)
               for p in sorted((EXAMPLES / "queries").glob("*.sql"))}
    assert len(queries) >= 12, queries
    if SEED_QUERIES.is_dir():
        names = sorted(p.name for p in SEED_QUERIES.glob("*.sql"))
        assert len(names) == 8
        queries.update({f"seed/{n}": seed_file(n) for n in names})
    return queries


def test_recording_answers_cookbook_and_seed_queries_like_the_live_process(cli, launcher, tmp_path):
    path = tmp_path / "run.db"
    t = recorded(launcher, cli, path, "resnet_inplace.py", "--steps", STEPS, "--print-every", 1)
    t.wait_holding()
    queries = cookbook_and_seed_queries()
    names = list(queries)
    live = {n: cli.query(t.target(), queries[n]) for n in names}
    live_tables = {(x["schema"], x["name"]): x["rows"]
                   for x in json.loads(cli(t.target(), "tables", "-f", "json").stdout)["tables"]}
    t.finish()
    assert path.exists() and not os.path.exists(f"{path}-journal")
    for n in names:
        assert cli.query(path, queries[n]) == live[n], n
    assert all(live[n] for n in names if "overall-profile" in n or "step-breakdown" in n)  # the comparison compared something
    # Every python table holds exactly what the live process held.
    for (schema, name), rows in live_tables.items():
        if schema == "python":
            assert int(cli.scalar(path, f"SELECT COUNT(*) FROM {schema}.{name}")) == rows, name
    steps = [r["step"] for r in cli.query(path, "SELECT step FROM python.steps ORDER BY step")]
    assert steps == list(range(STEPS))
    # The other commands read it too.
    tables = json.loads(cli(path, "tables", "-f", "json").stdout)["tables"]
    assert {(x["schema"], x["name"]) for x in tables} == set(live_tables)
    r = cli(path, "report", "--json")
    doc = json.loads(r.stdout)
    assert doc["baseline"]["warmup_steps"] + doc["baseline"]["steady_steps"] == STEPS
    out = tmp_path / "run.json"
    cli(path, "timeline", "-o", out)
    events = json.load(open(out))["traceEvents"]
    assert sorted(e["name"] for e in events if e["cat"] == "step") == \
        sorted(f"step {s}" for s in steps)
    # The file is plain SQLite: one table per recorded table.
    con = sqlite3.connect(path)
    assert con.execute("SELECT COUNT(*) FROM steps").fetchone()[0] == STEPS
    con.close()


def test_sigkill_leaves_everything_flushed_so_far(cli, launcher, tmp_path):
    path = tmp_path / "killed.db"
    env = dict(cli.env, PROBING_RECORD_FLUSH_MS="100")
    t = recorded(launcher, cli, path, "resnet_inplace.py", "--steps", 100000, "--print-every", 1,
                 hold=False, env=env)

    def flushed_steps():
        if not path.exists():
            return 0
        r = cli(path, "query", "SELECT COUNT(*) AS n FROM python.steps", "-f", "json",
                check=False)
        return json.loads(r.stdout)[0]["n"] if r.returncode == 0 else 0

    t._poll("10 steps in the recording", lambda: flushed_steps() >= 10, 120)
    os.killpg(t.pid, signal.SIGKILL)
    t.proc.wait(timeout=30)
    check_killed_recording(cli, path, t.steps_done(), 10)


def test_sigterm_flushes_before_the_process_ends(cli, launcher, tmp_path):
    path = tmp_path / "term.db"
    env = dict(cli.env, PROBING_RECORD_FLUSH_MS="600000")  # only the SIGTERM flush can save it
    t = recorded(launcher, cli, path, "resnet_inplace.py", "--steps", 6, "--print-every", 1,
                 env=env)
    t.wait_holding()
    live = int(cli.scalar(t.target(), "SELECT COUNT(*) FROM python.torch_trace"))
    os.kill(t.pid, signal.SIGTERM)
    assert t.proc.wait(timeout=60) == -signal.SIGTERM  # ends as SIGTERM would end it
    assert int(cli.scalar(path, "SELECT COUNT(*) FROM python.torch_trace")) == live
    assert int(cli.scalar(path, "SELECT COUNT(*) FROM python.steps")) == 6


def test_unwritable_recording_warns_once_and_training_goes_on(cli, launcher, tmp_path):
    bad = "/proc/version/run.db"  # a path under a file: cannot be created, even by root
    env = dict(cli.env, PROBING_RECORD=bad)
    t = launcher.traced("resnet_inplace.py", "--steps", 3, "--print-every", 1, env=env)
    out = t.finish()
    assert "final loss" in out
    warnings = [line for line in t.stderr().splitlines() if "recording" in line]
    assert warnings == [f"probing: recording to {bad} is off: Not a directory; training "
                        "goes on"], t.stderr()
    plain = launcher.plain("resnet_inplace.py", "--steps", 3, "--print-every", 1)
    plain.proc.wait(timeout=120)
    assert plain.final_loss() == t.final_loss()


def test_run_o_bad_path(cli):
    r = cli("run", "-o", "/nonexistent-dir/run.db", "--", PYTHON, "-c", "pass", check=False)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == "probing: cannot record to /nonexistent-dir/run.db: No such file or " \
                       "directory\n"


@pytest.fixture(scope="module")
def small_recording(session_launcher, cli, tmp_path_factory):
    path = tmp_path_factory.mktemp("rec") / "small.db"
    r = cli("run", "-o", path, "--", PYTHON, WORKLOADS / "resnet_inplace.py", "--steps", 2,
            "--print-every", 0, timeout=240)
    assert "final loss" in r.stdout
    return path


@pytest.mark.parametrize("args, code, message", [
    (["eval", "print(1)"], 1, "probing: a recording cannot run code: eval needs a live "
                              "process\n"),
    (["query", "DELETE FROM python.steps"], 1,
     "probing: SQL error: not authorized: probing's SQL is read-only (DELETE is not allowed)\n"),
    (["query", "ATTACH '/tmp/x.db' AS x"], 1, None),
])
def test_recording_refuses_what_needs_a_process_or_writes(cli, small_recording, args, code,
                                                           message):
    r = cli(small_recording, *args, check=False)
    assert (r.returncode, r.stdout) == (code, "")
    if message:
        assert r.stderr == message
    assert int(cli.scalar(small_recording, "SELECT COUNT(*) FROM python.steps")) == 2


def test_a_sqlite_file_that_is_not_a_recording(cli, tmp_path):
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t(x)")
    con.commit()
    con.close()
    r = cli(path, "query", "SELECT 1", check=False)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == f"probing: cannot read the recording {path}: no such table: probe.tables\n"


def test_info_on_a_recording_shows_the_jobs_last_state(cli, small_recording):
    """`probing run.db info` shows how the job stood at its end (torch imported, the last step,
    the detail policy), not the agent's state at start (issue 28)."""
    lines = {line.split(":", 1)[0]: line.split(":", 1)[1].strip()
             for line in cli(small_recording, "info").stdout.splitlines() if ":" in line}
    assert lines["torch"] not in ("not imported", "-"), lines
    last = int(cli.scalar(small_recording, "SELECT MAX(step) FROM python.steps"))
    assert last == 1
    assert lines["step"] == str(last + 1), lines  # as live: the step counter after steps 0, 1
    assert lines["detail"] != "-", lines
    info = cli.query(small_recording, "SELECT json FROM probe.info")[0]["json"]
    assert json.loads(info)["torch"] is not None
