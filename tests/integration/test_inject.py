"""`probing <pid> inject`: the agent loaded into Python processes that were started without it.

Targets are started with an environment from which every trace of probing is removed (no
PROBING, no PYTHONPATH entry for the package), so only inject can bring the agent in. The main
test trains tests/workloads/detach_train.py, injects at step ~20, checks the trace fills from the
model that was already built, detaches, and compares with a run that never saw probing: same
state lines (torch's registries, Module.__call__, sys.meta_path) and the same final loss.
The ptrace + Py_AddPendingCall path is also run against every other CPython on the machine
(3.9 to 3.13 under pyenv) with a stand-in package, since the agent itself is built for one.
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import PYTHON, START_TIMEOUT_S, WORKLOADS, api_get

SCRIPT = "detach_train.py"


@pytest.fixture
def bare_env(env):
    """The session environment without any way for the target to import probing by itself."""
    e = dict(env)
    e.pop("PROBING", None)
    parts = [p for p in e.get("PYTHONPATH", "").split(os.pathsep)
             if p and not os.path.exists(os.path.join(p, "probing", "__init__.py"))]
    if parts:
        e["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        e.pop("PYTHONPATH", None)
    return e


def own_version():
    return tuple(sys.version_info[:2]) if PYTHON == sys.executable else tuple(int(x) for x in (
        subprocess.run([PYTHON, "-c", "import sys; print(*sys.version_info[:2])"],
                       capture_output=True, text=True, timeout=60).stdout.split()))


def start_inline(launcher, code, env, python=PYTHON, name="inline"):
    return launcher.command([python, "-u", "-c", code], env=env, expect_socket=False, name=name)


def wait_for(predicate, what, timeout=START_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def state_lines(text):
    return [line for line in text.splitlines() if line.startswith("state ")]


def test_inject_into_training_then_detach(cli, launcher, bare_env):
    t = launcher.plain(SCRIPT, "--print-every", "10", hold=True, env=bare_env)
    t.wait_steps(20)
    assert not t.socket_path.exists()

    r = cli(t.pid, "inject")
    m = re.fullmatch(rf"probing agent loaded into process {t.pid} \(Python (\d+\.\d+\.\d+)\) in "
                     rf"(\d+\.\d\d) s; socket {re.escape(str(t.socket_path))}\n"
                     rf"next: probing {t.pid} query \"SELECT \* FROM python\.torch_trace "
                     r"LIMIT 10\"\n", r.stdout)
    assert m, r.stdout
    assert r.stderr == ""
    assert t.socket_path.exists()

    # The model, optimizer and loader existed before the agent: they are recorded from now on.
    def recorded():
        return cli.scalar(t.target(), "SELECT count(DISTINCT step) FROM python.torch_trace "
                                      "WHERE stage = 'forward'") >= 3
    wait_for(recorded, "three recorded steps")
    modules = {row["module"] for row in cli.query(
        t.target(), "SELECT DISTINCT module FROM python.torch_trace WHERE stage = 'forward'")}
    assert {"Sequential", "0", "1", "2"} <= modules, modules
    stages = {row["stage"] for row in cli.query(
        t.target(), "SELECT DISTINCT stage FROM python.torch_trace")}
    assert {"forward", "backward", "step"} <= stages, stages
    assert cli.scalar(t.target(), "SELECT count(*) FROM python.dataloader_trace") > 0

    # The bootstrap left nothing behind in __main__ or on sys.path: as many sys.path entries
    # hold a probing package as in a fresh interpreter with the same environment (0 in a
    # build tree, 1 when probing is pip-installed in the interpreter's environment).
    count = ("import os, sys\nprint(sum(os.path.exists(os.path.join(p or '.', 'probing', "
             "'_boot')) for p in sys.path))\n")
    fresh = subprocess.run([PYTHON, "-c", count], env=bare_env, capture_output=True, text=True,
                           timeout=60, cwd=str(WORKLOADS.parents[1])).stdout.strip()
    out = cli.eval(t.target(), "print(sorted(k for k in ('_done', '_path', '_result', '_page', "
                   "'_size', '_mod', '_ag', '_ep', 'probing') if k in globals()))\n" + count)
    assert out.splitlines() == ["[]", fresh], (out, fresh)
    assert not (t.socket_dir / f"{t.pid}.inject").exists()

    # A second inject changes nothing.
    r = cli(t.pid, "inject")
    assert r.stdout == (f"process {t.pid} is already traced by probing ({t.socket_path}); "
                        "nothing changed\n")

    cli(t.target(), "detach")
    injected = t.finish()
    plain = launcher.plain(SCRIPT, "--print-every", "0", env=bare_env)
    plain.proc.wait(timeout=START_TIMEOUT_S * 2)
    assert plain.proc.returncode == 0, plain.describe()
    assert state_lines(injected) == state_lines(plain.stdout())
    assert t.final_loss() == plain.final_loss()
    assert t.stderr() == "", t.stderr()


ALL_REDUCE_LOOP = """
import time
import torch
import torch.distributed as dist
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
t = torch.ones(4)
print("ready", flush=True)
while True:
    dist.all_reduce(t)
    time.sleep(0.02)
"""


def arrivals(t):
    status, doc = api_get(t.socket_path, "/api/arrivals")
    assert status == 200, doc
    return [a for g in doc["groups"] for a in g["arrivals"]]


def test_inject_again_after_detach_starts_afresh(cli, launcher, bare_env):
    """A second agent injected after a detach keeps nothing of the first one's collective state:
    each group's calls are numbered from 1 again and no arrival from before it started is
    served (GET /api/arrivals, what `stragglers` reads). The first agent's slots used to stay."""
    t = start_inline(launcher, ALL_REDUCE_LOOP, bare_env, name="all_reduce")
    wait_for(lambda: "ready" in t.stdout(), "the process group")
    cli(t.pid, "inject")
    wait_for(lambda: len(arrivals(t)) >= 5, "five recorded all_reduce calls")
    cli(t.target(), "detach")
    wait_for(lambda: not t.socket_path.exists(), "the detach")
    time.sleep(0.5)  # the loop goes on, unrecorded
    injected_unix = time.time()
    r = cli(t.pid, "inject")
    assert r.stdout.startswith(f"probing agent loaded into process {t.pid} "), r.stdout
    wait_for(lambda: len(arrivals(t)) >= 3, "three all_reduce calls recorded again")
    seen = arrivals(t)
    assert [a[0] for a in seen] == list(range(1, len(seen) + 1)), seen
    assert all(a[3] >= injected_unix - 0.05 for a in seen), (injected_unix, seen)
    cli(t.target(), "detach")
    assert t.alive()
    assert "probing:" not in t.stderr(), t.stderr()


# A loop that spends nearly all its time inside the collective, with the GIL let go (gloo
# reduces the 16 MB tensor): a detach lands while the wrapper of all_reduce is in flight.
LONG_ALL_REDUCE_LOOP = """
import torch
import torch.distributed as dist
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
t = torch.ones(4_000_000)
print("ready", flush=True)
n = 0
while True:
    dist.all_reduce(t)
    n += 1
    if n % 50 == 0:
        print("calls", n, flush=True)
"""


def test_detach_while_a_collective_runs_leaves_the_process_running(cli, launcher, bare_env):
    """The wrapper of a collective finished its call after the detach had dropped what it reads
    (torch.distributed's get_world_size and get_backend): the process died of a segmentation
    fault at the first detach. Three inject/detach rounds, then the loop still runs."""
    t = start_inline(launcher, LONG_ALL_REDUCE_LOOP, bare_env, name="long_all_reduce")
    wait_for(lambda: "ready" in t.stdout(), "the process group")
    for _ in range(3):
        r = cli(t.pid, "inject")
        assert r.stdout.startswith(f"probing agent loaded into process {t.pid} "), r.stdout
        wait_for(lambda: len(arrivals(t)) >= 2, "recorded all_reduce calls")
        cli(t.target(), "detach")
        assert not t.socket_path.exists()
        assert t.alive(), t.stderr()
    calls = t.stdout().count("calls")
    wait_for(lambda: t.stdout().count("calls") > calls, "the loop going on after the detaches")
    assert t.alive(), t.stderr()
    assert "probing:" not in t.stderr(), t.stderr()
    assert "Segmentation fault" not in t.stderr(), t.stderr()


def test_inject_python_without_torch(cli, launcher, bare_env):
    t = start_inline(launcher, "import time\nprint('READY')\nwhile True:\n    time.sleep(0.02)\n",
                     bare_env)
    wait_for(lambda: "READY" in t.stdout(), "READY")
    r = cli(t.pid, "inject")
    assert r.stdout.startswith(f"probing agent loaded into process {t.pid} ")
    assert cli.eval(t.target(), "import sys; print('torch' in sys.modules)").strip() == "False"
    wait_for(lambda: cli.scalar(t.target(), "SELECT count(*) FROM system.process") > 0,
             "a system.process row")
    assert cli.scalar(t.target(), "SELECT count(*) FROM python.torch_trace") == 0
    assert t.alive()


def test_inject_waits_for_the_main_thread_then_starts(cli, launcher, bare_env):
    """The main thread is in a 4 s sleep (no bytecode runs): inject queues the agent, says so
    when its timeout passes, and the agent starts once the sleep is over."""
    t = start_inline(launcher, "import time\nprint('SLEEPING', time.time() + 4)\ntime.sleep(4)\n"
                     "print('AWAKE')\nwhile True:\n    time.sleep(0.02)\n", bare_env)
    wait_for(lambda: "SLEEPING" in t.stdout(), "SLEEPING")
    sleep_ends = float(t.stdout().split()[1])
    r = cli(t.pid, "inject", "--timeout", "0.5", check=False)
    assert r.returncode == 124, r  # a timeout (as GNU timeout), not a usage error
    assert r.stderr == (f"probing: the agent is queued in process {t.pid}, but its main thread "
                        "has not run Python code for 0.5 s (blocked in C code, sleeping or "
                        "waiting?); the agent starts when it does: check later with "
                        "'probing list'\n"), r.stderr
    wait_for(t.socket_path.exists, "the socket after the sleep", timeout=60)
    # The agent starts at the first bytecode after the sleep, before print('AWAKE') runs, so
    # the socket may appear before AWAKE does: judge the order by the socket's creation time
    # (file times come from the kernel's coarse clock, a tick behind at most).
    assert t.socket_path.stat().st_mtime >= sleep_ends - 0.05, (t.socket_path.stat(), sleep_ends)
    wait_for(lambda: "AWAKE" in t.stdout(), "AWAKE")
    assert cli.eval(t.target(), "print(6 * 7)").strip() == "42"


def test_inject_while_the_gil_is_held_in_c(cli, launcher, bare_env):
    """A catastrophic regex holds the GIL for hours: the process is not disturbed, inject says
    the agent is queued."""
    t = launcher.command([PYTHON, "-u", str(WORKLOADS / "stack_gil.py")], env=bare_env,
                         expect_socket=False, name="gil")
    wait_for(lambda: "BUSY" in t.stdout(), "BUSY")
    r = cli(t.pid, "inject", "--timeout", "1", check=False)
    assert r.returncode == 124, r  # a timeout (as GNU timeout), not a usage error
    assert "has not run Python code for 1 s" in r.stderr
    assert t.alive()
    # Still inside the regex, as before (read from outside).
    bt = cli(t.pid, "backtrace").stdout
    assert "backtrack (" in bt and t.alive()


def test_inject_process_exits_while_waiting(cli, launcher, bare_env):
    t = start_inline(launcher, "import time\nprint('SLEEPING')\ntime.sleep(120)\n", bare_env)
    wait_for(lambda: "SLEEPING" in t.stdout(), "SLEEPING")
    proc = subprocess.Popen([str(cli.binary), str(t.pid), "inject", "--timeout", "60"],
                            env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    os.kill(t.pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err == f"probing: process {t.pid} exited before the agent started\n", err
    assert out == ""


def test_inject_errors(cli, launcher, bare_env):
    r = cli("999999999", "inject", check=False)
    assert r.returncode == 1 and r.stderr == "probing: no process 999999999\n", r.stderr
    r = cli("notapid", "inject", check=False)
    assert r.returncode == 2 and "needs its pid" in r.stderr

    sleeper = launcher.command(["sleep", "60"], env=bare_env, expect_socket=False, name="sleep")
    r = cli(sleeper.pid, "inject", check=False)
    assert r.returncode == 1
    assert r.stderr == (f"probing: process {sleeper.pid} is not a Python process (no libpython "
                        "or python executable defining Py_AddPendingCall is mapped); nothing was "
                        "changed\n"), r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the CLI as another user")
def test_inject_without_permission(cli, launcher, bare_env, tmp_path):
    t = start_inline(launcher, "import time\nprint('READY')\nwhile True:\n    time.sleep(0.02)\n",
                     bare_env)
    wait_for(lambda: "READY" in t.stdout(), "READY")
    env = dict(cli.env, PROBING_DIR=str(tmp_path / "nobody"))
    os.chmod(tmp_path, 0o755)
    # A copy nobody can run, whatever the mode of the directories above the checkout (a clone
    # in a mktemp -d directory is 0700); the permission check comes before anything else.
    where = tempfile.mkdtemp(prefix="pbnobody", dir="/tmp")
    try:
        os.chmod(where, 0o755)
        binary = os.path.join(where, "probing")
        shutil.copy2(cli.binary, binary)
        os.chmod(binary, 0o755)
        r = subprocess.run([binary, str(t.pid), "inject"], env=env, capture_output=True,
                           text=True, timeout=60, user=65534, cwd="/")
    finally:
        shutil.rmtree(where, ignore_errors=True)
    assert r.returncode == 1
    assert r.stderr.startswith(f"probing: not allowed to read process {t.pid}"), r.stderr
    assert not t.socket_path.exists() and t.alive()


def _other_pythons():
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = {}
    for exe in sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3"))):
        m = re.match(r"3\.(\d+)\.\d+$", os.path.basename(os.path.dirname(os.path.dirname(exe))))
        if m and 9 <= int(m.group(1)):
            found.setdefault(int(m.group(1)), exe)
    mine = own_version()
    return [(minor, exe) for minor, exe in sorted(found.items()) if (3, minor) != mine]


OTHERS = _other_pythons()


@pytest.mark.skipif(not OTHERS, reason="no other CPython under pyenv")
@pytest.mark.parametrize("minor,python", OTHERS, ids=[f"3.{m}" for m, _ in OTHERS])
def test_inject_mechanism_on_other_pythons(cli, launcher, bare_env, tmp_path, minor, python):
    """The agent is built for one CPython; the way in (ptrace, Py_AddPendingCall,
    PyRun_SimpleString, the bootstrap) is the same for all. A stand-in package built 'for' this
    version proves the bootstrap ran inside the target; the real package is refused up front."""
    t = start_inline(launcher, "import time\nprint('READY')\nwhile True:\n    time.sleep(0.02)\n",
                     bare_env, python=python, name=f"py3{minor}")
    wait_for(lambda: "READY" in t.stdout(), "READY")

    r = cli(t.pid, "inject", check=False)
    assert r.returncode == 1
    assert re.match(rf"probing: process {t.pid} runs Python 3\.{minor}, but the probing agent in "
                    r".* is built for Python 3\.\d+ \(_agent\.cpython-3\d+-.*\.so\); install "
                    r"probing into the process's Python", r.stderr), r.stderr

    fake = tmp_path / "pkg"
    (fake / "probing").mkdir(parents=True)
    (fake / "probing" / "__init__.py").write_text(
        "import os, sys, types\n"
        "def _release(addr, size):\n"
        "    os.environ['FAKE_RELEASED'] = '%x %x' % (addr, size)\n"
        "_agent = types.SimpleNamespace(endpoint=lambda: None, _release_inject_page=_release)\n"
        "def init():\n"
        "    print('FAKE INIT', sys.version.split()[0], flush=True)\n"
        "    return 'fake:' + sys.version.split()[0]\n")
    (fake / "probing" / f"_agent.cpython-3{minor}-x86_64-linux-gnu.so").write_bytes(b"")
    env = dict(cli.env, PROBING_PYTHONPATH=str(fake))
    r = subprocess.run([str(cli.binary), str(t.pid), "inject"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert re.match(rf"probing agent loaded into process {t.pid} \(Python 3\.{minor}(\.\d+)?\) "
                    rf"in \S+ s; socket fake:3\.{minor}\.\d+\n", r.stdout), r.stdout
    wait_for(lambda: "FAKE INIT" in t.stdout(), "FAKE INIT")
    assert t.alive() and t.stderr() == "", t.stderr()
