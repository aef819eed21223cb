"""`probing run` as a user points it at their own environment and their own files:

- the program keeps its own packages: only `probing` becomes importable (a second venv, made
  here, whose fake numpy must win over probing's real one, and which has no torch);
- a Python that cannot load the agent (built for another Python) is told so and runs on;
- a recording path is a regular file or nothing: a device, FIFO, symlink, directory or a file
  that is not a recording is refused before the job starts and left as it was; an existing
  recording needs --force (for `run -o` as for `record -o`); two recorders on one path: the
  second is refused, naming the first;
- per-process names: %p in the path; a torchrun job's ranks record into name.rank<R>.db and the
  launcher records nothing but says where the ranks' files went;
- mistyped commands get a suggestion; `probing help [command]`.
Every message is checked exactly as the user sees it."""
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import time

import pytest

from conftest import PYTHON, START_TIMEOUT_S, WORKLOADS

sys.path.insert(0, os.path.dirname(__file__))
from conftest import free_port  # noqa: E402


def run(cli, *args, env=None, timeout=240):
    return cli(*args, check=False, env=env, timeout=timeout)


def env_without_pythonpath(cli):
    """The session's environment without the PYTHONPATH the fixtures add: `probing run` alone
    must make probing importable."""
    env = dict(cli.env)
    pp = env.pop("PYTHONPATH", None)
    if pp and not env.get("PROBING_PYTHONPATH"):
        env["PROBING_PYTHONPATH"] = pp.split(os.pathsep)[0]
    return env


@pytest.fixture(scope="module")
def second_venv(tmp_path_factory):
    """A venv of its own (no pip, no torch) with a fake numpy that must win."""
    root = tmp_path_factory.mktemp("venv2")
    venv = root / "venv"
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()
    fake = os.path.join(site, "numpy")
    os.makedirs(fake)
    with open(os.path.join(fake, "__init__.py"), "w") as f:
        f.write("WHO = 'the second venv'\n")
    return python


CHECK = ("import importlib.util, numpy, probing; print(numpy.WHO); "
         "print('agent', probing.endpoint() is not None); "
         "print('torch', importlib.util.find_spec('torch'))")


def test_the_program_keeps_its_own_venv(cli, second_venv):
    r = run(cli, "run", "--", second_venv, "-c", CHECK, env=env_without_pythonpath(cli))
    assert r.returncode == 0, r
    assert r.stdout.splitlines() == ["the second venv", "agent True", "torch None"], r


def test_a_python_that_cannot_load_the_agent_is_told_why(cli, second_venv, tmp_path):
    env = env_without_pythonpath(cli)
    probe = run(cli, "run", "--", second_venv, "-c",
                "import os; print(os.environ['PROBING_PACKAGE_DIR'])", env=env)
    parent = probe.stdout.strip()
    assert probe.returncode == 0 and parent, probe
    other = tmp_path / "py39"
    shutil.copytree(os.path.join(parent, "probing"), other / "probing",
                    ignore=shutil.ignore_patterns("*.p", "__pycache__"))
    built = [n for n in os.listdir(other / "probing") if n.startswith("_agent") and
             n.endswith(".so")]
    assert len(built) == 1, built
    os.rename(other / "probing" / built[0],
              other / "probing" / "_agent.cpython-39-x86_64-linux-gnu.so")
    r = run(cli, "run", "--", second_venv, "-c", "print('ran')",
            env=dict(env, PROBING_PYTHONPATH=str(other)))
    version = subprocess.run([str(second_venv), "-c", "import sys, importlib.machinery as m; "
                              "print('%d.%d' % sys.version_info[:2], sys.executable, "
                              "m.EXTENSION_SUFFIXES[0])"], capture_output=True, text=True,
                             timeout=60).stdout.split()
    assert (r.returncode, r.stdout) == (0, "ran\n"), r
    assert r.stderr == (
        f"probing: cannot load the agent into this Python ({version[0]}, {version[1]}): the "
        f"probing package in {other} was built for another Python "
        f"(_agent.cpython-39-x86_64-linux-gnu.so; this one loads *{version[2]}). Install "
        f"probing for this Python ({version[1]} -m pip install probing) and start the job "
        "with that environment's probing command; the program runs without probing.\n")


# ----------------------------------------------------------------------------- the path rules


def refused_by_run(cli, path, *extra):
    marker = f"{path}.ran"
    r = run(cli, "run", "-o", path, *extra, "--", PYTHON, "-c",
            f"open({str(marker)!r}, 'w').close()")
    assert (r.returncode, r.stdout) == (2, ""), r
    assert not os.path.exists(marker), "the job started"
    return r.stderr


NOT_A_FILE = "not a file; probing never replaces it: choose another path\n"


def test_run_o_refuses_what_is_not_a_regular_file(cli, tmp_path):
    st = os.stat("/dev/null")
    for force in ([], ["--force"]):
        assert refused_by_run(cli, "/dev/null", *force) == (
            "probing: cannot record to /dev/null: it is a character device, " + NOT_A_FILE)
    assert os.stat("/dev/null").st_rdev == st.st_rdev and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    assert refused_by_run(cli, fifo, "--force") == (
        f"probing: cannot record to {fifo}: it is a FIFO, " + NOT_A_FILE)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    target = tmp_path / "target.db"
    sqlite3.connect(target).executescript("CREATE TABLE kept(x); INSERT INTO kept VALUES (7);")
    link = tmp_path / "link.db"
    os.symlink(target, link)
    assert refused_by_run(cli, link, "--force") == (
        f"probing: cannot record to {link}: it is a symbolic link; a recording path must be a "
        "regular file or not exist (name the file itself, not a link to it)\n")
    assert os.path.islink(link)
    assert refused_by_run(cli, tmp_path, "--force") == (
        f"probing: cannot record to {tmp_path}: it is a directory; name a file in it, e.g. "
        f"{tmp_path}/run.db\n")
    text = tmp_path / "notes.db"
    text.write_text("my notes\n")
    assert refused_by_run(cli, text, "--force") == (
        f"probing: cannot record to {text}: it exists and is not a probing recording (no SQLite "
        "header); probing never replaces it: choose another path or remove it yourself\n")
    assert text.read_text() == "my notes\n"
    # An existing recording: --force, as for record -o.
    assert refused_by_run(cli, target) == (
        f"probing: cannot record to {target}: it exists; pass --force to replace it\n")
    assert sqlite3.connect(target).execute("SELECT x FROM kept").fetchall() == [(7,)]
    r = run(cli, "run", "-o", target, "--force", "--", PYTHON, "-c", "import os; print(os.getpid())")
    assert r.returncode == 0, r
    assert cli.scalar(target, "SELECT json_extract(json, '$.pid') FROM probe.info") == \
        int(r.stdout)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


@pytest.mark.parametrize("args, message", [
    (["run", "-o", "--", "python3", "x.py"],
     "probing: -o needs a file name before '--': probing run -o FILE ...\n"),
    (["run", "--force", "--", "python3", "x.py"],
     "probing: --force goes with -o FILE.db: probing run -o run.db --force -- python "
     "train.py\n"),
])
def test_run_usage_errors(cli, args, message, tmp_path):
    r = subprocess.run([cli.binary, *args], env=cli.env, capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", message)
    assert os.listdir(tmp_path) == []


def wait_socket(cli, pid, proc):
    sock = os.path.join(cli.env["PROBING_DIR"], f"{pid}.sock")
    deadline = time.monotonic() + START_TIMEOUT_S
    while not os.path.exists(sock):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the agent did not start"
        time.sleep(0.1)


def test_two_recorders_on_one_path(cli, tmp_path):
    path = tmp_path / "same.db"
    release = tmp_path / "release"
    code = (f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.05)\n")
    first = subprocess.Popen([cli.binary, "run", "-o", str(path), "--", PYTHON, "-c", code],
                             env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    other = None
    try:
        wait_socket(cli, first.pid, first)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not path.exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        busy = (f"process {first.pid} is recording into it; stop that recording first "
                f"(probing {first.pid} record --stop) or choose another path\n")
        assert refused_by_run(cli, path, "--force") == f"probing: cannot record to {path}: {busy}"
        # record -o on another live process: refused the same way.
        other = subprocess.Popen([cli.binary, "run", "--", PYTHON, "-c", code], env=cli.env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_socket(cli, other.pid, other)
        r = run(cli, str(other.pid), "record", "-o", path, "--force")
        assert (r.returncode, r.stdout, r.stderr) == (
            1, "", f"probing: cannot record to {path}: {busy}")
        release.touch()
        assert first.wait(timeout=120) == 0
        assert other.wait(timeout=120) == 0
        assert cli.scalar(path, "SELECT json_extract(json, '$.pid') FROM probe.info") == first.pid
    finally:
        release.touch()
        for p in (first, other):
            if p and p.poll() is None:
                p.kill()
                p.wait()


def test_percent_p_names_the_file_by_pid(cli, tmp_path):
    r = run(cli, "run", "-o", tmp_path / "run-%p.db", "--", PYTHON, "-c",
            "import os; print(os.getpid())")
    assert r.returncode == 0, r
    assert os.listdir(tmp_path) == [f"run-{int(r.stdout)}.db"]


def test_torchrun_ranks_record_into_rank_files(cli, tmp_path):
    """Also: `list` shows the ranks with a RANK column, and not the launcher."""
    rec = tmp_path / "rec"
    rec.mkdir()
    path = rec / "job.db"
    hold = tmp_path / "hold"
    out = open(tmp_path / "out", "w+")
    job = subprocess.Popen([cli.binary, "run", "-o", str(path), "--", PYTHON, "-m",
                            "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                            str(free_port()), str(WORKLOADS / "ddp_gloo.py"), "--steps", "2",
                            "--hold-file", str(hold)], env=cli.env, stdout=out,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while len(re.findall(r"^HOLDING$", open(tmp_path / "out").read(), re.M)) < 2:
            assert job.poll() is None and time.monotonic() < deadline, job.stderr.read()
            time.sleep(0.2)
        lines = [line for line in cli("list").stdout.splitlines() if str(hold) in line]
        assert sorted(line.split()[1] for line in lines) == ["0/2", "1/2"], lines
        assert not [line for line in lines if "torch.distributed.run" in line], lines
        assert cli("list").stdout.splitlines()[0].split()[:3] == ["PID", "RANK", "UPTIME"]
    finally:
        for r in (0, 1):
            (tmp_path / f"hold.{r}").touch()
    assert job.wait(timeout=240) == 0
    stderr = job.stderr.read()
    assert sorted(os.listdir(rec)) == ["job.rank0.db", "job.rank1.db"]
    assert (f"probing: the ranks recorded into {rec}/job.rank0.db, {rec}/job.rank1.db "
            f"(read them with: probing {rec}/job.rank0.db report)\n") in stderr
    for rank in (0, 1):
        f = rec / f"job.rank{rank}.db"
        assert cli.scalar(f, "SELECT json_extract(json, '$.rank') FROM probe.info") == rank
        assert cli.scalar(f, "SELECT COUNT(*) FROM python.steps") == 2


# ----------------------------------------------------------------------------- small things


@pytest.mark.parametrize("args, message", [
    (["qurey", "SELECT 1"], "probing: unknown command 'qurey'; did you mean 'query'? (see "
                            "'probing help')\n"),
    (["123", "tabels"], "probing: unknown command 'tabels'; did you mean 'tables'? (see "
                        "'probing help')\n"),
    (["help", "lst"], "probing: unknown command 'lst'; did you mean 'list'? (see "
                      "'probing help')\n"),
    (["frobnicate"], "probing: unknown command 'frobnicate'; see 'probing --help'\n"),
    (["help", "run", "x"], "probing: help takes one command name (got 'x' too): probing help "
                           "run\n"),
])
def test_mistyped_commands(cli, args, message):
    r = run(cli, *args)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", message)


def test_help(cli):
    assert run(cli, "help").stdout == run(cli, "--help").stdout
    r = run(cli, "help", "record")
    assert (r.returncode, r.stdout) == (0, run(cli, "record", "--help").stdout)
    assert r.stdout.startswith("Usage: probing <target> record")


def test_every_setting_is_validated_and_config_shows_what_is_in_effect(cli):
    env = dict(cli.env, PROBING_HOOK_MODE="bogus", PROBING_SYSTEM_SAMPLE_MS="1",
               PROBING_TORCH="yes", PROBING_QUERY_TIMEOUT="1e9", PROBING_DETAIL_STEPS="8")
    sql = ("SELECT name, value FROM probe.config WHERE name IN ('PROBING_HOOK_MODE', "
           "'PROBING_SYSTEM_SAMPLE_MS', 'PROBING_TORCH', 'PROBING_QUERY_TIMEOUT', "
           "'PROBING_DETAIL_STEPS') ORDER BY name")
    code = ("import os, subprocess, sys; print(subprocess.run([sys.argv[1], str(os.getpid()), "
            "'query', sys.argv[2], '-f', 'csv'], capture_output=True, text=True).stdout, end='')")
    r = run(cli, "run", "--", PYTHON, "-c", code, cli.binary, sql, env=env)
    assert r.returncode == 0, r
    assert r.stdout.splitlines() == ["name,value", "PROBING_DETAIL_STEPS,8",
                                     "PROBING_HOOK_MODE,call", "PROBING_QUERY_TIMEOUT,86400",
                                     "PROBING_SYSTEM_SAMPLE_MS,10", "PROBING_TORCH,1"]
    assert sorted(line for line in r.stderr.splitlines() if "PROBING_" in line) == [
        "probing: PROBING_QUERY_TIMEOUT=1e9 is above its maximum 86400; using 86400",
        "probing: PROBING_SYSTEM_SAMPLE_MS=1 is below its minimum 10; using 10",
        "probing: ignoring PROBING_HOOK_MODE=bogus: expected call or hooks; using call",
        "probing: ignoring PROBING_TORCH=yes: expected 0 or 1; using 1",
    ]


SPIN_AND_SLEEP = """
import threading, time
def spin():
    while True:
        pass
def sleeper():
    time.sleep(120)
threading.Thread(target=spin, daemon=True).start()
threading.Thread(target=sleeper, daemon=True).start()
print("READY", flush=True)
time.sleep(120)
"""


def test_backtrace_says_which_threads_are_active_or_idle(cli):
    """Nothing but the spinning thread wants the GIL, so it holds it and runs; the others
    sleep."""
    def thread_headers(out):
        headers = {}
        for block in out.split("\n\n")[1:]:
            lines = block.strip().splitlines()
            for name in ("spin", "sleeper", "<module>"):
                if any(line.strip().startswith(f"{name} (") for line in lines[1:]):
                    headers[name] = lines[0]
        return headers

    proc = subprocess.Popen([PYTHON, "-c", SPIN_AND_SLEEP], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "READY\n"
        # Right after READY the main thread may still hold the GIL, between its print and its
        # sleep (descheduled there on a loaded machine): a backtrace is a snapshot, so read
        # again, a few times, until the main thread has let go of it.
        for _ in range(20):
            out = cli(proc.pid, "backtrace").stdout
            headers = thread_headers(out)
            if "(holds the GIL)" not in headers.get("<module>", ""):
                break
            time.sleep(0.25)
    finally:
        proc.kill()
        proc.wait()
    # the Python thread names (threading's "Thread-N (target)") follow the OS name
    assert re.fullmatch(r'Thread \d+ "\S+" Thread-\d+ \(spin\) \(holds the GIL\) active',
                        headers["spin"]), out
    assert re.fullmatch(r'Thread \d+ "\S+" Thread-\d+ \(sleeper\) idle', headers["sleeper"]), out
    assert re.fullmatch(rf'Thread {proc.pid} "\S+" MainThread idle', headers["<module>"]), out


def test_a_mistyped_table_gets_a_suggestion(cli, tmp_path):
    path = tmp_path / "small.db"
    assert run(cli, "run", "-o", path, "--", PYTHON, "-c", "pass").returncode == 0
    r = run(cli, path, "query", "SELECT * FROM python.stpes")
    assert (r.returncode, r.stdout, r.stderr) == (
        1, "", "probing: SQL error: no such table: python.stpes; did you mean python.steps? "
               "(SELECT schema, name FROM probe.tables lists the tables)\n")
    r = run(cli, path, "query", "SELECT * FROM python.nothing_like_it")
    assert r.stderr == ("probing: SQL error: no such table: python.nothing_like_it; SELECT "
                        "schema, name FROM probe.tables lists the tables\n")
