"""A recording says how the job ended (the file's probe.run row; `info` on the recording shows
it): the exit status, an uncaught exception's type, message and stack, SIGTERM, or nothing when
the process was killed. Probing never changes the exit status or what the program printed.
A recording on a full disk stops with a "stopped: disk full at step N" marker that is readable
offline, and `record` on the live job says so."""
import os
import re
import signal
import subprocess

import pytest

from conftest import PYTHON, WORKLOADS, poll_cli

RAISES = "def train():\n    raise ValueError('loss is nan at step 150')\ntrain()\n"


def run_recorded(cli, path, code):
    return cli("run", "-o", path, "--", PYTHON, "-c", code, check=False, timeout=240)


def ended(cli, path):
    return [line for line in cli(path, "info").stdout.splitlines() if line.startswith("ended:")]


def test_an_uncaught_exception_is_kept_and_the_exit_is_unchanged(cli, tmp_path):
    path = tmp_path / "crash.db"
    r = run_recorded(cli, path, RAISES)
    plain = subprocess.run([PYTHON, "-c", RAISES], capture_output=True, text=True, timeout=120,
                           env={k: v for k, v in cli.env.items() if k != "PROBING"})
    assert (r.returncode, r.stdout, r.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert r.returncode == 1
    assert ended(cli, path) == [
        "ended:     exception ValueError: loss is nan at step 150 (exit status 1); stack: "
        "probing FILE.db query \"SELECT stack FROM probe.run\""]
    row = cli.query(path, "SELECT state, status, exception_type, message, stack FROM probe.run")
    assert row == [{"state": "exception", "status": 1, "exception_type": "ValueError",
                    "message": "loss is nan at step 150", "stack": plain.stderr}]


@pytest.mark.parametrize("code, status, line", [
    ("import sys; sys.exit(3)", 3, "ended:     exited (exit status 3)"),
    ("pass", 0, "ended:     exited (exit status 0)"),
])
def test_the_exit_status_is_kept(cli, tmp_path, code, status, line):
    path = tmp_path / "exit.db"
    r = run_recorded(cli, path, code)
    assert r.returncode == status
    assert ended(cli, path) == [line]
    assert cli.query(path, "SELECT state, status FROM probe.run") == [
        {"state": "exited", "status": status}]


def test_a_killed_job_has_no_end(cli, tmp_path):
    path = tmp_path / "killed.db"
    r = run_recorded(cli, path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert r.returncode == -signal.SIGKILL
    assert ended(cli, path) == [
        "ended:     no end recorded: the process was killed (SIGKILL, crash) or still runs"]


def test_sigterm_is_named(cli, tmp_path):
    path = tmp_path / "term.db"
    r = run_recorded(cli, path, "import os, signal, time; os.kill(os.getpid(), signal.SIGTERM); "
                     "time.sleep(60)")
    assert r.returncode == -signal.SIGTERM
    assert ended(cli, path) == ["ended:     terminated by SIGTERM"]


@pytest.fixture
def small_tmpfs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "full-cli-lane"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs-cli-lane", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_full_disk_leaves_a_marker(cli, launcher, small_tmpfs):
    path = small_tmpfs / "run.db"
    hold = launcher.workdir / "full.release"
    t = launcher.command([cli.binary, "run", "-o", path, "--", PYTHON, "-u",
                          WORKLOADS / "resnet_inplace.py", "--hold-file", hold, "--steps", 40,
                          "--print-every", 0], name="full")
    t.hold_file = hold
    t.wait_holding()
    # The recorder flushes once a second: the flush that fills the disk may come after the
    # hold under load, so wait for the recording to say it stopped.
    r = poll_cli(cli, t.target(), ["record"], lambda r: r.returncode != 0, "the disk-full stop",
                 [t])
    m = re.search(r"probing: the recording to (\S+) stopped writing: disk full "
                  r"(at step \d+|before the first step); the file holds what was flushed before\n",
                  r.stderr)
    assert r.returncode == 1 and m and m.group(1) == str(path), (r, t.stderr())
    info = cli(t.target(), "info").stdout.splitlines()
    assert f"recording: {path} (stopped: disk full {m.group(2)})" in info, info
    t.finish()
    assert [line for line in t.stderr().splitlines() if "recording" in line] == [
        f"probing: recording to {path} stopped: disk full: database or disk is full; training "
        "goes on"]
    note = f"stopped: disk full {m.group(2)}"
    assert ended(cli, path) == [f"ended:     recording failed: {note} (exit status 0)" +
                                (f" after step {m.group(2).split()[-1]}"
                                 if m.group(2).startswith("at") else "")]
    assert cli.query(path, "SELECT state, status, note FROM probe.run") == [
        {"state": "recording failed", "status": 0, "note": note}]


def test_a_failed_replacement_leaves_the_old_recording(cli, small_tmpfs):
    """--force writes the new recording beside the old one and renames it over: when that
    fails (here the disk is too full for the new file), the old file is intact."""
    import sqlite3
    old = small_tmpfs / "old.db"
    con = sqlite3.connect(old)
    con.executescript("CREATE TABLE kept(x); INSERT INTO kept VALUES (zeroblob(100000));")
    con.close()
    r = cli("run", "-o", old, "--force", "--", PYTHON, "-c", "print('ran')", check=False)
    assert (r.returncode, r.stdout) == (0, "ran\n")
    assert r.stderr == (f"probing: recording to {old} is off: database or disk is full; "
                        "training goes on\n")
    assert os.listdir(small_tmpfs) == ["old.db"]
    assert sqlite3.connect(old).execute("SELECT length(x) FROM kept").fetchall() == [(100000,)]
