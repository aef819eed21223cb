"""`probing <pid> backtrace`: Python stacks read from outside processes that never loaded probing.

Every CPython on the machine that backtrace covers (3.9 to 3.13: the test's own python and
those under pyenv) runs two stdlib-only workloads: a deadlock (tests/workloads/stack_deadlock.py)
and a main thread holding the GIL in a catastrophic regular expression (stack_gil.py). The tests
assert function names and line numbers of known frames; the lines are found through "# frame:"
markers in the scripts. Older CPythons and non-Python processes get their exact error.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import PYTHON, WORKLOADS

SUPPORTED = {(3, 9), (3, 10), (3, 11), (3, 12), (3, 13)}


def _pythons():
    """{(major, minor): executable} of the CPythons on this machine: the test's own first."""
    found = {}
    r = subprocess.run([PYTHON, "-c", "import sys; print(*sys.version_info[:2])"],
                       capture_output=True, text=True, timeout=60)
    found[tuple(int(x) for x in r.stdout.split())] = PYTHON
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for exe in sorted(glob.glob(os.path.join(root, "versions", "*", "bin", "python3"))):
        m = re.match(r"(\d+)\.(\d+)\.\d+$", os.path.basename(os.path.dirname(os.path.dirname(exe))))
        if m:
            found.setdefault((int(m.group(1)), int(m.group(2))), exe)
    return found


PYTHONS = _pythons()
COVERED = sorted(v for v in PYTHONS if v in SUPPORTED)
TOO_OLD = sorted(v for v in PYTHONS if (3, 7) <= v < (3, 9))  # 3.6 has no _PyRuntime at all


def qual(version, qualname):
    """3.9/3.10 code objects have co_name only: Thread.run shows as run."""
    return qualname if version >= (3, 11) else qualname.split(".")[-1]


def marker_line(script, name):
    for number, line in enumerate((WORKLOADS / script).read_text().splitlines(), 1):
        if line.rstrip().endswith(f"# frame: {name}"):
            return number
    raise AssertionError(f"no '# frame: {name}' in {script}")


def start(launcher, version, script):
    t = launcher.command([PYTHONS[version], "-u", str(WORKLOADS / script)], expect_socket=False,
                         name=script)
    return t


def backtrace_json(cli, pid):
    r = cli(pid, "backtrace", "-f", "json")
    return json.loads(r.stdout)


def frames_of(thread):
    return [(f["function"], os.path.basename(f["file"]), f["line"]) for f in thread["frames"]]


def wait_for_stacks(t, cli, predicate, what):
    """Polls backtrace until predicate(stacks) holds; returns the stacks."""
    return t._poll(what, lambda: predicate(backtrace_json(cli, t.pid)) or None, 60) and \
        backtrace_json(cli, t.pid)


def thread_with(stacks, function):
    for thread in stacks["threads"]:
        if any(f["function"] == function for f in thread["frames"]):
            return thread
    return None


@pytest.mark.parametrize("version", COVERED, ids=lambda v: "%d.%d" % v)
def test_backtrace_of_a_deadlocked_process(cli, launcher, version):
    script = "stack_deadlock.py"
    t = start(launcher, version, script)
    t._poll("DEADLOCKED", lambda: "DEADLOCKED" in t.stdout(), 60)
    left_line, right_line = marker_line(script, "left"), marker_line(script, "right")

    def both_blocked(stacks):
        left, right = thread_with(stacks, "take_first_then_second"), \
            thread_with(stacks, "take_second_then_first")
        return left and right and left["frames"][0]["line"] == left_line and \
            right["frames"][0]["line"] == right_line

    stacks = wait_for_stacks(t, cli, both_blocked, "both threads blocked on their second lock")
    assert stacks["pid"] == t.pid
    # "3.11.7"; before 3.11 (no Py_Version) the version comes from the file name: "3.10"
    assert stacks["python"] == "%d.%d" % version or stacks["python"].startswith("%d.%d." % version)
    assert len(stacks["threads"]) == 3
    left = thread_with(stacks, "take_first_then_second")
    assert frames_of(left)[0] == ("take_first_then_second", script, left_line)
    assert frames_of(left)[1][0] == qual(version, "Thread.run")
    assert frames_of(left)[-1][0] == qual(version, "Thread._bootstrap")
    assert frames_of(thread_with(stacks, "take_second_then_first"))[0] == \
        ("take_second_then_first", script, right_line)
    main = thread_with(stacks, "main")
    assert main["native_id"] == t.pid
    assert frames_of(main)[-2:] == [("main", script, marker_line(script, "join")),
                                    ("<module>", script, marker_line(script, "module"))]
    assert frames_of(main)[-3][0] == qual(version, "Thread.join")
    assert not any(th["truncated"] for th in stacks["threads"])
    # threading's names: read from the Thread objects on 3.11+ (left's from the values kept
    # beside the object, right's from the dict that vars() made), the main thread's from its tid
    assert main["python_name"] == "MainThread"
    if version >= (3, 11):
        assert left["python_name"] == "left"
        assert thread_with(stacks, "take_second_then_first")["python_name"] == "right"
    else:
        assert "python_name" not in left

    # The text form shows the same frames, innermost first.
    text = cli(t.pid, "backtrace").stdout
    assert text.startswith(f"Process {t.pid}: ")
    assert f"\nPython {stacks['python']} (" in text
    assert f"    take_first_then_second ({WORKLOADS / script}:{left_line})\n" in text
    assert (f"    main ({WORKLOADS / script}:{marker_line(script, 'join')})\n"
            f"    <module> ({WORKLOADS / script}:{marker_line(script, 'module')})\n") in text
    assert t.alive()


@pytest.mark.parametrize("version", COVERED, ids=lambda v: "%d.%d" % v)
def test_backtrace_while_the_main_thread_holds_the_gil(cli, launcher, version):
    script = "stack_gil.py"
    t = start(launcher, version, script)
    t._poll("BUSY", lambda: "BUSY" in t.stdout(), 60)

    def in_the_regex(stacks):
        main = thread_with(stacks, "backtrack")
        return main and main["holds_gil"] and main["frames"][0]["function"] == "match"

    stacks = wait_for_stacks(t, cli, in_the_regex, "the main thread inside re.match")
    main = thread_with(stacks, "backtrack")
    assert main["native_id"] == t.pid
    frames = frames_of(main)
    re_file = os.path.join("re", "__init__.py") if version >= (3, 11) else "re.py"
    assert frames[0][0] == "match" and main["frames"][0]["file"].endswith(re_file)
    assert frames[1:] == [("backtrack", script, marker_line(script, "backtrack")),
                          ("main", script, marker_line(script, "main")),
                          ("<module>", script, marker_line(script, "module"))]
    ticker = thread_with(stacks, "tick")
    assert not ticker["holds_gil"]
    assert frames_of(ticker)[0] == ("tick", script, marker_line(script, "tick"))
    assert "(holds the GIL)" in cli(t.pid, "backtrace").stdout
    assert t.alive()


@pytest.mark.parametrize("version", COVERED, ids=lambda v: "%d.%d" % v)
def test_native_frames(cli, launcher, version):
    """--native: each Python thread's C stack beside its Python frames; the GIL holder is inside
    the regex engine called from the eval loop, the ticker waits for the GIL in time.sleep."""
    script = "stack_gil.py"
    t = start(launcher, version, script)
    t._poll("BUSY", lambda: "BUSY" in t.stdout(), 60)

    def ready(stacks):
        main = thread_with(stacks, "backtrack")
        return main and main["frames"][0]["function"] == "match"

    wait_for_stacks(t, cli, ready, "the main thread inside re.match")
    stacks = json.loads(cli(t.pid, "backtrace", "--native", "-f", "json").stdout)
    main = thread_with(stacks, "backtrack")
    symbols = [f["symbol"] or "" for f in main["native"]]
    assert any(s.startswith("sre_") for s in symbols[:4]), symbols
    assert "_PyEval_EvalFrameDefault" in symbols, symbols
    assert any(s in ("Py_BytesMain", "main", "Py_RunMain") for s in symbols), symbols
    assert all(f["object"] for f in main["native"][:3]), main["native"]
    ticker = thread_with(stacks, "tick")
    tsyms = [f["symbol"] or "" for f in ticker["native"]]
    assert "time_sleep" in tsyms or "pysleep" in tsyms, tsyms
    text = cli(t.pid, "backtrace", "--native").stdout
    assert "\n  native:\n    " in text and "_PyEval_EvalFrameDefault+0x" in text
    assert t.alive()
    # The threads were stopped only for their walk: the ticker keeps ticking, main stays busy.
    assert thread_with(backtrace_json(cli, t.pid), "backtrack") is not None


@pytest.mark.parametrize("version", TOO_OLD, ids=lambda v: "%d.%d" % v)
def test_backtrace_of_an_unsupported_python(cli, launcher, version):
    t = start(launcher, version, "stack_deadlock.py")
    t._poll("DEADLOCKED", lambda: "DEADLOCKED" in t.stdout(), 60)
    r = cli(t.pid, "backtrace", check=False)
    assert r.returncode == 1
    assert r.stderr == (f"probing: Python {version[0]}.{version[1]} is not supported by "
                        "backtrace (supported: 3.9 to 3.13)\n")


def test_backtrace_of_a_process_that_is_not_python(cli, launcher):
    t = launcher.command(["sleep", "600"], expect_socket=False, name="sleep")
    t._poll("sleep to start", lambda: os.path.basename(os.readlink(f"/proc/{t.pid}/exe")) ==
            os.path.basename(os.path.realpath(shutil.which("sleep"))), 60)
    r = cli(t.pid, "backtrace", check=False)
    assert r.returncode == 1
    assert r.stderr == (f"probing: process {t.pid} is not a Python process (no libpython or "
                        "python executable with _PyRuntime is mapped)\n")


def test_backtrace_of_no_such_process(cli):
    p = subprocess.Popen(["true"])
    p.wait()
    r = cli(p.pid, "backtrace", check=False)
    assert r.returncode == 1
    assert r.stderr == f"probing: no such process: {p.pid}\n"


def test_backtrace_needs_a_pid(cli):
    r = cli("/tmp/nowhere.sock", "backtrace", check=False)
    assert r.returncode == 2
    assert r.stderr == ("probing: backtrace reads a process from outside and needs a pid, not "
                        "'/tmp/nowhere.sock': probing <pid> backtrace\n")


def test_backtrace_rejects_csv(cli):
    r = cli(os.getpid(), "backtrace", "-f", "csv", check=False)
    assert r.returncode == 2
    assert r.stderr == ("probing: unknown output format 'csv' for backtrace: use table or "
                        "json\n")


def test_backtrace_without_permission(cli, launcher, tmp_path):
    message = ("probing: not allowed to read the memory of process {pid}. Run probing as the "
               "same user as the process with kernel.yama.ptrace_scope=0 (sudo sysctl "
               "kernel.yama.ptrace_scope=0), or as root / with CAP_SYS_PTRACE\n")
    if os.geteuid() != 0:
        r = cli(1, "backtrace", check=False)  # init belongs to root
        assert r.returncode == 1
        assert r.stderr == message.format(pid=1)
        return
    if not shutil.which("setpriv"):
        pytest.skip("setpriv is needed to run probing as another user")
    t = start(launcher, COVERED[0] if COVERED else sorted(PYTHONS)[0], "stack_deadlock.py")
    t._poll("DEADLOCKED", lambda: "DEADLOCKED" in t.stdout(), 60)
    binary = tmp_path / "probing"
    shutil.copy(cli.binary, binary)
    os.chmod(tmp_path, 0o755)
    os.chmod(binary, 0o755)
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        str(binary), str(t.pid), "backtrace"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1, r.stderr
    assert r.stderr == message.format(pid=t.pid)


def test_backtrace_of_a_traced_torch_training(cli, launcher):
    """The test's python runs torch; the agent being there changes nothing for backtrace."""
    t = launcher.traced("detach_train.py", "--steps", "20", "--print-every", "0")
    t.wait_holding()
    sleep_line = next(n for n, line in enumerate(
        (WORKLOADS / "_workload.py").read_text().splitlines(), 1) if "time.sleep(0.05)" in line)
    # hold() spends nearly all its time in time.sleep (a C call: no Python frame above hold), but
    # a sample can land in its os.path.exists check (a frozen stdlib frame on top; seen under
    # ASan, where the stat is slower): sample again until it is asleep, a few times at most
    for _ in range(10):
        stacks = backtrace_json(cli, t.pid)
        main = next(th for th in stacks["threads"] if th["native_id"] == t.pid)
        if frames_of(main) and frames_of(main)[0][0] == "hold":
            break
        time.sleep(0.013)
    assert frames_of(main) == [("hold", "_workload.py", sleep_line),
                               ("main", "detach_train.py", marker_line_in("detach_train.py",
                                                                          "w.hold(")),
                               ("<module>", "detach_train.py",
                                marker_line_in("detach_train.py", "main()"))]


def marker_line_in(script, text):
    """The last line of a workload that starts with text (after indentation)."""
    lines = (WORKLOADS / script).read_text().splitlines()
    return max(n for n, line in enumerate(lines, 1) if line.strip().startswith(text))


def test_backtrace_names_python_threads(cli, launcher):
    """A DataLoader with workers and a thread of the user's own: each thread shows threading's
    name (QueueFeederThread, metrics-uploader) beside its OS name, and whether it is idle."""
    script = "named_threads.py"
    t = launcher.command([PYTHON, "-u", str(WORKLOADS / script)], expect_socket=False,
                         name=script)
    t._poll("READY", lambda: "READY" in t.stdout(), 120)
    uploader_line = marker_line(script, "uploader")

    def named(stacks):
        names = [th.get("python_name") for th in stacks["threads"]]
        return "metrics-uploader" in names and "QueueFeederThread" in names

    stacks = wait_for_stacks(t, cli, named, "the threads' Python names")
    by_name = {}
    for th in stacks["threads"]:
        by_name.setdefault(th.get("python_name"), []).append(th)
    assert [th["native_id"] for th in by_name["MainThread"]] == [t.pid]
    assert len(by_name["QueueFeederThread"]) == 2  # one per worker's index queue
    uploader = by_name["metrics-uploader"][0]
    assert [f[0] for f in frames_of(uploader)[:2]] == ["Condition.wait", "Event.wait"]
    assert ("upload", script, uploader_line) in frames_of(uploader)
    assert uploader["state"] == "idle"
    # threads that threading did not start have no Python name, only the OS one
    for th in by_name.get(None, []):
        assert th["name"] and not any(f["function"] == "Thread._bootstrap"
                                      for f in th["frames"]), th

    text = cli(t.pid, "backtrace").stdout
    assert re.search(r'^Thread %d "[^"]*" metrics-uploader idle$' % uploader["native_id"], text,
                     re.M), text
    assert re.search(r'^Thread %d "[^"]*" MainThread' % t.pid, text, re.M), text
    assert text.count('" QueueFeederThread ') == 2, text
    assert t.alive()
