"""`probing <pid> record -o FILE`: a recording started on a process that is already training,
without `run -o`. The agent's own recorder does it, so the file holds what the rings still held
when it started and everything after, flushed as under `run -o` (at exit, on SIGTERM, and what
was flushed survives SIGKILL). Real training processes, the real binary, real files."""
import hashlib
import json
import os
import signal
import sqlite3
import subprocess

import pytest

from conftest import PYTHON, WORKLOADS, check_killed_recording, example_file, free_tcp_port

# cookbook queries (examples/queries) that have rows on any training run
EXAMPLES = ["overall-profile.sql", "step-breakdown.sql", "slowest-modules.sql", "throughput.sql"]
TCP_REFUSED = ("record is refused over TCP: the agent would write a file on its own machine "
               "that a network client names; run probing on that machine")


def started_line(target, path, sigterm=True, every="1 s"):
    flushed = f"every {every}, at exit and on SIGTERM" if sigterm else f"every {every} and at exit"
    return (f"recording {target} to {path} (rows still in the rings are included); flushed "
            f"{flushed}. Stop: probing {target} record --stop\n")


def record(cli, t, path, *extra):
    r = cli(t.target(), "record", "-o", path, *extra)
    assert r.stderr == ""
    return r


def steps_in(cli, path):
    """The steps of python.steps in the file, in order ([] while it has no flush yet)."""
    if not os.path.exists(path):
        return []
    r = cli(path, "query", "SELECT step FROM python.steps ORDER BY step", "-f", "json",
            check=False)
    return [row["step"] for row in json.loads(r.stdout)] if r.returncode == 0 else []


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def python_rows(cli, target):
    tables = json.loads(cli(target, "tables", "-f", "json").stdout)["tables"]
    return {f"{x['schema']}.{x['name']}": (x["rows"], x["rows_dropped"]) for x in tables
            if x["schema"] == "python"}


def test_record_mid_run_holds_the_steps_before_it_and_answers_like_the_live_process(
        cli, launcher, tmp_path):
    steps = 150
    path = tmp_path / "live.db"
    t = launcher.traced("resnet_inplace.py", "--steps", steps, "--print-every", 1)
    t.wait_steps(20)
    r = record(cli, t, path)
    assert r.stdout == started_line(t.pid, path)
    t.wait_holding()
    live = {n: cli.query(t.target(), example_file(n)) for n in EXAMPLES}
    live_rows = python_rows(cli, t.target())
    t.finish()
    for n in EXAMPLES:
        assert cli.query(path, example_file(n)) == live[n], n
    assert all(live[n] for n in EXAMPLES)  # the comparison compared something
    # Every step is there, the ones before the record command included: the rings held them.
    assert steps_in(cli, path) == list(range(steps))
    started_at = cli.scalar(path, "SELECT started_step FROM probe.run")
    assert 20 <= started_at < steps - 1, "the recording did not start mid-run"
    assert python_rows(cli, path) == live_rows  # same rows per table, none dropped
    assert "probing:" not in t.stderr()


def test_rows_the_rings_had_overwritten_are_counted_as_dropped(cli, launcher, env, tmp_path):
    path = tmp_path / "small-ring.db"
    t = launcher.traced("resnet_inplace.py", "--steps", 40, "--print-every", 0,
                        env=dict(env, PROBING_RING_ROWS="1024", PROBING_DETAIL_EVERY="1"))
    t.wait_holding()
    live = python_rows(cli, t.target())
    rows, dropped = live["python.torch_trace"]
    assert rows == 1024 and dropped > 0
    r = record(cli, t, path)
    lines = r.stdout.splitlines(keepends=True)
    assert lines[0] == started_line(t.pid, path)
    assert lines[1:] == [f"{dropped} older rows had been overwritten in the rings before now and "
                         "are not in the file (counted in its tables.rows_dropped)\n"]
    stopped = cli(t.target(), "record", "--stop").stdout
    table = {line.split()[0]: line.split()[1:] for line in stopped.splitlines()[1:-1]}
    assert table["python.torch_trace"] == [str(rows), str(dropped)], stopped
    # The file holds what the ring held, from its oldest row, and says how much came before.
    assert python_rows(cli, path) == live
    first = "SELECT MIN(step) FROM python.torch_trace"
    assert cli.scalar(path, first) == cli.scalar(t.target(), first) > 0
    t.finish()


def test_sigkill_during_a_recording_leaves_what_was_flushed(cli, launcher, env, tmp_path):
    path = tmp_path / "killed.db"
    t = launcher.traced("resnet_inplace.py", "--steps", 100000, "--print-every", 1, hold=False,
                        env=dict(env, PROBING_RECORD_FLUSH_MS="100"))
    t.wait_steps(5)
    record(cli, t, path)
    t._poll("20 steps in the recording", lambda: len(steps_in(cli, path)) >= 20, 120)
    os.killpg(t.pid, signal.SIGKILL)
    t.proc.wait(timeout=30)
    check_killed_recording(cli, path, t.steps_done(), 20)


def test_stop_closes_the_file_and_training_goes_on_unchanged(cli, launcher, tmp_path):
    args = ("resnet_inplace.py", "--steps", 150, "--print-every", 1)
    path = tmp_path / "stopped.db"
    t = launcher.traced(*args)
    t.wait_steps(10)
    record(cli, t, path)
    again = cli(t.target(), "record", "-o", tmp_path / "second.db", check=False)
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr == (f"probing: already recording to {path}; stop it first: probing "
                            f"{t.pid} record --stop\n")
    assert not (tmp_path / "second.db").exists()
    t._poll("steps in the recording", lambda: len(steps_in(cli, path)) >= 5, 120)
    r = cli(t.target(), "record", "--stop")
    assert r.stdout.startswith(f"stopped recording {t.pid} to {path}: ")
    assert r.stdout.endswith(f"Read it: probing {path} report\n")
    assert r.stderr == ""
    kept = steps_in(cli, path)
    after_stop = digest(path)
    t.wait_holding()
    assert 10 <= len(kept) < 150  # it trained on after the stop...
    assert digest(path) == after_stop  # ...and the file did not change
    assert kept == list(range(len(kept)))
    r = cli(t.target(), "record", "--stop", check=False)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (f"probing: not recording: the last recording went to {path}; start a "
                        f"recording with: probing {t.pid} record -o FILE.db\n")
    r = cli(t.target(), "record")
    assert r.stdout.startswith(f"{t.pid} is not recording; its last recording went to {path}: ")
    t.finish()
    assert digest(path) == after_stop
    plain = launcher.plain(*args)
    plain.proc.wait(timeout=240)
    assert plain.final_loss() == t.final_loss()


def test_sigterm_flushes_a_recording_started_live(cli, launcher, env, tmp_path):
    path = tmp_path / "term.db"
    t = launcher.traced("resnet_inplace.py", "--steps", 6, "--print-every", 1,
                        env=dict(env, PROBING_RECORD_FLUSH_MS="600000"))
    t.wait_holding()
    assert record(cli, t, path).stdout == started_line(t.pid, path, every="600 s")
    live = cli.scalar(t.target(), "SELECT COUNT(*) FROM python.torch_trace")
    os.kill(t.pid, signal.SIGTERM)
    assert t.proc.wait(timeout=60) == -signal.SIGTERM  # ends as SIGTERM would end it
    assert cli.scalar(path, "SELECT COUNT(*) FROM python.torch_trace") == live
    assert steps_in(cli, path) == list(range(6))


def test_detach_flushes_and_sigterm_then_works_as_without_probing(cli, launcher, env, tmp_path):
    path = tmp_path / "detached.db"
    t = launcher.traced("resnet_inplace.py", "--steps", 6, "--print-every", 1,
                        env=dict(env, PROBING_RECORD_FLUSH_MS="600000"))
    t.wait_holding()
    record(cli, t, path)
    live = cli.scalar(t.target(), "SELECT COUNT(*) FROM python.torch_trace")
    cli(t.target(), "detach")
    assert cli.scalar(path, "SELECT COUNT(*) FROM python.torch_trace") == live
    # The recorder's SIGTERM handler went with it: SIGTERM ends the process at once.
    os.kill(t.pid, signal.SIGTERM)
    assert t.proc.wait(timeout=60) == -signal.SIGTERM


FORK_ON_FILE = """
import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
child = os.fork()
if child == 0:
    time.sleep(600)
    os._exit(0)
print("forked", child, flush=True)
while True:
    time.sleep(0.1)
"""


def test_a_child_forked_while_recording_does_not_hold_the_file(cli, launcher, tmp_path):
    """A child forked during a recording (a DataLoader worker) keeps no hold on the recording:
    once stopped, the same path can be recorded into again while the child lives. The child's
    copy of the recording's descriptor used to keep its lock: 'process N is recording into it'."""
    go, path = tmp_path / "fork-now", tmp_path / "forked.db"
    t = launcher.command([cli.binary, "run", "--", PYTHON, "-u", "-c", FORK_ON_FILE, str(go)],
                         name="fork")
    record(cli, t, path)
    go.touch()
    t._poll("the fork", lambda: "forked" in t.stdout(), 60)
    child = int(t.stdout().split("forked", 1)[1].split()[0])
    try:
        cli(t.target(), "record", "--stop")
        r = record(cli, t, path, "--force")
        assert r.stdout == started_line(t.target(), path)
        cli(t.target(), "record", "--stop")
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_program_with_its_own_sigterm_handler_keeps_it(cli, launcher, tmp_path):
    """record installs no handler over the program's; the start line does not promise a
    SIGTERM flush."""
    path = tmp_path / "own.db"
    t = launcher.command([cli.binary, "run", "--", PYTHON, "-u", "-c",
                          "import signal, time\n"
                          "signal.signal(signal.SIGTERM, lambda *a: print('own handler', "
                          "flush=True))\n"
                          "print('HOLDING', flush=True)\n"
                          "time.sleep(300)\n"], name="own")
    t.wait_holding()
    assert record(cli, t, path).stdout == started_line(t.pid, path, sigterm=False)
    os.kill(t.pid, signal.SIGTERM)
    t._poll("the program's handler", lambda: "own handler" in t.stdout(), 30)
    assert t.alive()
    cli(t.target(), "record", "--stop")
    os.kill(t.pid, signal.SIGTERM)  # still the program's after the stop
    t._poll("the program's handler again", lambda: t.stdout().count("own handler") == 2, 30)
    assert t.alive()


def test_a_run_o_recording_shows_and_stops_like_one_started_live(cli, launcher, tmp_path):
    path = tmp_path / "run-o.db"
    hold = tmp_path / "run-o.release"
    t = launcher.command([cli.binary, "run", "-o", path, "--", PYTHON, "-u",
                          WORKLOADS / "resnet_inplace.py", "--steps", 3, "--print-every", 0,
                          "--hold-file", hold], name="run-o")
    t.hold_file = hold
    t.wait_holding()
    t._poll("the steps in the recording", lambda: steps_in(cli, path) == [0, 1, 2], 60)
    r = cli(t.target(), "record")
    assert r.stdout.startswith(f"recording {t.pid} to {path} for ")
    assert r.stdout.endswith(f"Stop: probing {t.pid} record --stop\n")
    assert "python.steps" in r.stdout
    cli(t.target(), "record", "--stop")
    after_stop = digest(path)
    t.finish()
    assert digest(path) == after_stop
    assert steps_in(cli, path) == [0, 1, 2]


# ----------------------------------------------------------------------------- bad inputs


@pytest.fixture(scope="module")
def idle(session_launcher):
    t = session_launcher.traced("resnet_inplace.py", "--steps", 2, "--print-every", 0)
    t.wait_holding()
    yield t
    t.kill()


def refused(cli, t, *args, code=1, cwd=None):
    r = subprocess.run([cli.binary, t.target() if hasattr(t, "target") else t, "record",
                        *map(str, args)], env=cli.env, capture_output=True, text=True,
                       timeout=120, cwd=cwd)
    assert (r.returncode, r.stdout) == (code, ""), r
    return r.stderr


def test_an_existing_file_is_kept_unless_forced(cli, idle, tmp_path):
    other = tmp_path / "other.db"
    other.write_bytes(b"not yours to replace\n")
    for force in ([], ["--force"]):  # not a recording: never replaced, even with --force
        assert refused(cli, idle, "-o", other, *force) == (
            f"probing: cannot record to {other}: it exists and is not a probing recording (no "
            "SQLite header); probing never replaces it: choose another path or remove it "
            "yourself\n"), force
    assert other.read_bytes() == b"not yours to replace\n"
    path = tmp_path / "exists.db"
    sqlite3.connect(path).executescript("CREATE TABLE older(x); INSERT INTO older VALUES (1);")
    assert refused(cli, idle, "-o", path) == \
        f"probing: {path} exists; pass --force to replace it\n"
    assert sqlite3.connect(path).execute("SELECT x FROM older").fetchall() == [(1,)]
    assert record(cli, idle, path, "--force").stdout == started_line(idle.pid, path)
    cli(idle.target(), "record", "--stop")
    assert cli.scalar(path, "SELECT COUNT(*) FROM python.steps") == 2


def test_a_path_that_cannot_be_created_changes_nothing(cli, idle, tmp_path):
    missing = tmp_path / "no-such-dir" / "run.db"
    assert refused(cli, idle, "-o", missing) == (
        f"probing: cannot record to {missing}: No such file or directory (its directory must "
        "exist: create it or choose another path)\n")
    assert not missing.parent.exists()
    bad = "/proc/version/run.db"  # under a file: cannot be created, even by root
    assert refused(cli, idle, "-o", bad, "--force") == (
        f"probing: cannot record to {bad}: Not a directory (choose a path "
        f"that process {idle.pid} can write)\n")
    for force in ([], ["--force"]):  # a directory is not offered for --force, nor removed
        assert refused(cli, idle, "-o", tmp_path, *force) == (
            f"probing: cannot record to {tmp_path}: it is a directory; name a file in it: "
            f"probing {idle.pid} record -o {tmp_path}/run.db\n"), force
        assert tmp_path.is_dir()
    r = cli(idle.target(), "record")
    assert "is not recording" in r.stdout and "no-such-dir" not in r.stdout


def test_a_relative_path_is_the_callers(cli, idle, tmp_path):
    (tmp_path / "sub").mkdir()
    r = subprocess.run([cli.binary, idle.target(), "record", "-o", "sub/../rel.db"], env=cli.env,
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (0, started_line(idle.pid, tmp_path / "rel.db"),
                                                  "")
    cli(idle.target(), "record", "--stop")
    assert cli.scalar(tmp_path / "rel.db", "SELECT COUNT(*) FROM python.steps") == 2


def test_stop_and_status_without_a_recording(cli, launcher):
    t = launcher.traced("resnet_inplace.py", "--steps", 1, "--print-every", 0)
    t.wait_holding()
    r = cli(t.target(), "record")
    assert r.stdout == f"{t.pid} is not recording. Start: probing {t.pid} record -o FILE.db\n"
    assert refused(cli, t, "--stop") == (f"probing: not recording; start a recording with: "
                                         f"probing {t.pid} record -o FILE.db\n")
    t.finish()


@pytest.mark.parametrize("args, message", [
    (["--force"], "--force goes with -o FILE: probing {t} record -o FILE.db --force"),
    (["--stop", "-o", "x.db"], "record takes -o FILE to start or --stop to stop, not both"),
    (["-o", "-"], "record -o wants the path of a file for the process to write, not '-': "
                  "probing {t} record -o run.db"),
    (["-o", "runs/"], "record -o wants the path of a file for the process to write, not "
                      "'runs/': probing {t} record -o run.db"),
    (["now"], "record takes no arguments (got 'now'); see 'probing record --help'"),
])
def test_usage_errors(cli, idle, args, message):
    assert refused(cli, idle, *args, code=2) == f"probing: {message.format(t=idle.pid)}\n"


def test_a_recording_is_not_a_target(cli, tmp_path):
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t(x)")
    con.commit()
    con.close()
    assert refused(cli, str(path), "-o", tmp_path / "new.db", code=2) == (
        f"probing: {path} is a recording already; record needs a live process (a pid): "
        f"probing <pid> record -o FILE.db. Read this one with 'probing {path} query|report|"
        "timeline'\n")
    assert not (tmp_path / "new.db").exists()


def test_refused_over_tcp(cli, launcher, env, tmp_path):
    port = free_tcp_port()
    t = launcher.traced("inference.py", "--steps", 1,
                        env=dict(env, PROBING_LISTEN=f"127.0.0.1:{port}"))
    t.wait_holding()
    hostport = f"127.0.0.1:{port}"
    path = tmp_path / "tcp.db"
    for args in (["-o", path], [], ["--stop"]):
        assert refused(cli, hostport, *args) == f"probing: {TCP_REFUSED}\n", args
    assert not path.exists()
    # the Unix socket still records
    assert record(cli, t, path).stdout == started_line(t.pid, path)
    cli(t.target(), "record", "--stop")
    t.finish()
