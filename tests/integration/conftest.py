"""Fixtures for the integration tests: the real `probing` binary against real training processes.

Where things are found:
  probing binary   $PROBING_BIN, else `probing` on PATH, else build/src/cli/probing
  Python package   $PROBING_PYTHONPATH, else already importable (pip-installed), else build/python
  query cookbook   examples/queries/*.sql and examples/eval/*.py of this repository
  seed examples    $PROBING_SHARED/acceptance/seed-queries, else ../shared/... beside the repo;
                   not part of the repository: when absent, the tests that run them verbatim
                   are skipped (one reason, SEEDS_MISSING), never failed

Every test session gets its own PROBING_DIR (short, under /tmp: a Unix socket path has at most
107 bytes), so tests never see agents of other sessions and `probing list` is predictable.

A traced process is started as `probing run -- python3 -u tests/workloads/<script> --hold-file F`
with its stdout and stderr going to files (no pipe can fill up and stall it) and in a new process
group, so teardown can kill it together with its DataLoader workers. Nothing here sleeps for a
fixed time: it polls for the socket, for "step N" lines, for "HOLDING".
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKLOADS = REPO / "tests" / "workloads"
EXAMPLES = REPO / "examples"
SHARED = Path(os.environ.get("PROBING_SHARED") or REPO.parent / "shared")
SEED_QUERIES = SHARED / "acceptance" / "seed-queries"
SEEDS_MISSING = (f"the seed examples are not in {SEED_QUERIES} (they are not part of the "
                 "repository; set PROBING_SHARED to the folder that holds acceptance/seed-queries "
                 "to run them verbatim); the repository's own examples/ are tested instead")
# Marks a test that runs a seed example verbatim: skipped, with SEEDS_MISSING, without them.
needs_seeds = pytest.mark.skipif(not SEED_QUERIES.is_dir(), reason=SEEDS_MISSING)

PYTHON = os.environ.get("PROBING_TEST_PYTHON") or sys.executable or "python3"

START_TIMEOUT_S = 90      # process start until its socket appears (torch import included)
CLI_TIMEOUT_S = 120       # one CLI call
STEP_TIMEOUT_S = 240      # reaching a given step or HOLDING


def find_probing_bin():
    """The probing executable, or None."""
    candidates = []
    if os.environ.get("PROBING_BIN"):
        candidates.append(Path(os.environ["PROBING_BIN"]))
    on_path = shutil.which("probing")
    if on_path:
        candidates.append(Path(on_path))
    candidates.append(REPO / "build" / "src" / "cli" / "probing")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c.resolve()
    return None


def package_installed():
    """True when `probing` is importable without any PYTHONPATH help (pip-installed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PROBING")}
    r = subprocess.run([PYTHON, "-c", "import importlib.util, sys;"
                        "sys.exit(0 if importlib.util.find_spec('probing') else 1)"],
                       env=env, cwd="/", capture_output=True, timeout=60)
    return r.returncode == 0


def find_pythonpath():
    """The directory to put on PYTHONPATH for `import probing`: $PROBING_PYTHONPATH when set
    (it then wins over an installed package: scripts/sanitize.sh points it at the ASan build),
    else None when the package is installed, else build/python."""
    if os.environ.get("PROBING_PYTHONPATH"):
        return Path(os.environ["PROBING_PYTHONPATH"]).resolve()
    if package_installed():
        return None
    return (REPO / "build" / "python").resolve()


# ----------------------------------------------------------------------------- the CLI


class CLI:
    """Runs the probing binary with the session's environment."""

    def __init__(self, binary, env):
        self.binary = str(binary)
        self.env = env

    def __call__(self, *args, check=True, timeout=CLI_TIMEOUT_S, env=None, input=None):
        cmd = [self.binary, *[str(a) for a in args]]
        r = subprocess.run(cmd, env=env or self.env, capture_output=True, text=True,
                           timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise AssertionError(
                f"{_show(cmd)} exited {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n"
                f"{r.stderr}")
        return r

    def query(self, target, sql, **kw):
        """Rows of a query as a list of dicts (the CLI's -f json output)."""
        r = self(target, "query", sql, "-f", "json", **kw)
        try:
            rows = json.loads(r.stdout)
        except ValueError as e:
            raise AssertionError(f"query output is not JSON ({e}):\n{r.stdout[:2000]}")
        assert isinstance(rows, list), f"-f json must print an array of rows, got {r.stdout[:500]}"
        return rows

    def scalar(self, target, sql):
        rows = self.query(target, sql)
        assert len(rows) == 1 and len(rows[0]) == 1, f"{sql!r} gave {rows}"
        return next(iter(rows[0].values()))

    def eval(self, target, code, **kw):
        """stdout of an eval that must succeed."""
        return self(target, "eval", code, **kw).stdout


def poll_cli(cli, target, args, predicate, what, ranks, timeout=STEP_TIMEOUT_S):
    """Runs `probing <target> <args>` until predicate(result) holds, every half second, while
    every process in `ranks` stays alive; fails naming `what` and the last output after
    `timeout` s. Returns the result that matched."""
    deadline, r = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        for t in ranks:
            assert t.alive(), f"a rank exited: {t.describe()}"
        r = cli(target, *args, check=False)
        if predicate(r):
            return r
        time.sleep(0.5)
    pytest.fail(f"{what}: not seen within {timeout} s; last output:\n"
                f"{r.stdout if r else ''}{r.stderr if r else ''}")


def _show(cmd):
    text = " ".join(cmd)
    return text if len(text) < 300 else text[:300] + "..."


# ----------------------------------------------------------------------------- traced processes


class Traced:
    """One process started by the tests (normally under `probing run`)."""

    def __init__(self, cmd, env, workdir, name, socket_dir, cli, expect_socket=True):
        self.workdir = workdir
        self.hold_file = workdir / f"{name}.release"
        self.stdout_path = workdir / f"{name}.out"
        self.stderr_path = workdir / f"{name}.err"
        self.cmd = [str(c) for c in cmd]
        self.socket_dir = Path(socket_dir)
        self.cli = cli
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(self.cmd, env=env, cwd=REPO, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.proc.pid
        self._models = {}
        if expect_socket:
            self.wait_socket()

    # -- addresses
    @property
    def socket_path(self):
        return self.socket_dir / f"{self.pid}.sock"

    def target(self):
        return str(self.pid)

    # -- output
    def stdout(self):
        return self.stdout_path.read_text(errors="replace")

    def stderr(self):
        return self.stderr_path.read_text(errors="replace")

    def describe(self):
        return (f"{_show(self.cmd)} (pid {self.pid}, returncode {self.proc.poll()})\n"
                f"--- stdout (tail)\n{self.stdout()[-3000:]}\n--- stderr (tail)\n"
                f"{self.stderr()[-3000:]}")

    def alive(self):
        return self.proc.poll() is None

    def _poll(self, what, predicate, timeout):
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            value = predicate()
            if value:
                return value
            if not self.alive():
                value = predicate()
                if value:
                    return value
                raise AssertionError(f"process exited while waiting for {what}:\n"
                                     f"{self.describe()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n"
                                     f"{self.describe()}")
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def wait_socket(self, timeout=START_TIMEOUT_S):
        self._poll(f"the agent socket {self.socket_path}", self.socket_path.exists, timeout)

    def steps_done(self):
        """The highest N of the "step N" lines printed so far (0 when none)."""
        found = re.findall(r"^step (\d+)\b", self.stdout(), flags=re.M)
        return max((int(n) for n in found), default=0)

    def wait_steps(self, n, timeout=STEP_TIMEOUT_S):
        self._poll(f"'step {n}' on stdout", lambda: self.steps_done() >= n, timeout)

    def wait_holding(self, timeout=STEP_TIMEOUT_S):
        self._poll("HOLDING on stdout", lambda: re.search(r"^HOLDING$", self.stdout(), re.M),
                   timeout)

    def release(self):
        self.hold_file.touch()

    def finish(self, timeout=STEP_TIMEOUT_S):
        """Releases the hold, waits for a clean exit and returns stdout."""
        self.release()
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"process did not exit within {timeout} s:\n{self.describe()}")
        assert rc == 0, f"process exited {rc}:\n{self.describe()}"
        return self.stdout()

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        # DataLoader workers and other children live in the same process group.
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def final_loss(self):
        m = re.search(r"^final (?:loss|output): (\S+)$", self.stdout(), re.M)
        assert m, f"no final loss line:\n{self.describe()}"
        return m.group(1)

    # -- what the traced script holds, through eval
    def modules(self):
        """{qualified name: class name} of `model` as the trace names them: named_modules(),
        with the root under its class name. Cached per process."""
        if "modules" not in self._models:
            out = self.cli.eval(self.target(), MODULES_CODE)
            pairs = [line.split("\t") for line in out.splitlines() if line.strip()]
            self._models["modules"] = {name: kind for name, kind in pairs}
        return self._models["modules"]

    def other_roots(self):
        """Class names of the modules called outside `model` (the loss module)."""
        if "other_roots" not in self._models:
            out = self.cli.eval(self.target(), OTHER_ROOTS_CODE)
            self._models["other_roots"] = set(out.split())
        return self._models["other_roots"]

    def root_name(self):
        return self.cli.eval(self.target(), "print(type(model).__name__)").strip()

    def optimizer_name(self):
        return self.cli.eval(self.target(), "print(type(optimizer).__name__)").strip()


MODULES_CODE = (
    "for _n, _m in model.named_modules():\n"
    "    print(f'{_n or type(model).__name__}\\t{type(_m).__name__}')\n"
)

# Modules the training step calls outside the model (nn.CrossEntropyLoss): each is a top-level
# module of its own, recorded under its class name.
OTHER_ROOTS_CODE = (
    "import torch as _t\n"
    "_f = getattr(globals().get('trainer'), 'loss_fn', None)\n"
    "if isinstance(_f, _t.nn.Module):\n"
    "    print(type(_f).__name__)\n"
)


class Launcher:
    """Starts traced (and untraced) processes and cleans them all up."""

    def __init__(self, cli, env, workdir, socket_dir):
        self.cli = cli
        self.env = env
        self.workdir = Path(workdir)
        self.socket_dir = Path(socket_dir)
        self.started = []
        self.counter = 0

    def _name(self, script):
        self.counter += 1
        return f"{Path(script).stem}-{self.counter}"

    def script_cmd(self, script, args, hold):
        path = script if os.path.isabs(str(script)) else WORKLOADS / script
        cmd = [PYTHON, "-u", str(path), *[str(a) for a in args]]
        return cmd

    def traced(self, script, *args, hold=True, env=None, via_run=True, expect_socket=True):
        """`probing run -- python3 -u tests/workloads/<script> [--hold-file F] ARGS`."""
        name = self._name(script)
        extra = ["--hold-file", self.workdir / f"{name}.release"] if hold else []
        cmd = self.script_cmd(script, [*extra, *args], hold)
        if via_run:
            cmd = [self.cli.binary, "run", "--", *cmd]
        return self._start(cmd, name, env, expect_socket)

    def plain(self, script, *args, hold=False, env=None, expect_socket=False):
        """The same script without probing run (and PROBING removed from the environment)."""
        name = self._name(script)
        extra = ["--hold-file", self.workdir / f"{name}.release"] if hold else []
        cmd = self.script_cmd(script, [*extra, *args], hold)
        env = dict(env or self.env)
        env.pop("PROBING", None)
        return self._start(cmd, name, env, expect_socket)

    def command(self, cmd, env=None, expect_socket=True, name="cmd"):
        """Any command line, as given."""
        return self._start(cmd, self._name(name), env, expect_socket)

    def _start(self, cmd, name, env, expect_socket):
        t = Traced(cmd, env or self.env, self.workdir, name, self.socket_dir, self.cli,
                   expect_socket=False)
        self.started.append(t)
        if expect_socket:
            t.wait_socket()
        return t

    def cleanup(self):
        for t in self.started:
            t.release()
            t.kill()
        self.started.clear()


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def probing_bin():
    b = find_probing_bin()
    if b is None:
        pytest.fail("the probing binary was not found: set PROBING_BIN, put `probing` on PATH "
                    f"(pip install .) or build it to {REPO / 'build/src/cli/probing'} (make)",
                    pytrace=False)
    return b


@pytest.fixture(scope="session")
def session_dir():
    d = tempfile.mkdtemp(prefix="pb", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def env(session_dir):
    """Environment for the CLI and every traced process of this session."""
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("PROBING") and k not in ("PROBING_BIN", "PROBING_PYTHONPATH",
                                                  "PROBING_SHARED", "PROBING_TEST_HOLD_S"):
            del e[k]
    sockets = session_dir / "s"
    sockets.mkdir(mode=0o700)
    e["PROBING_DIR"] = str(sockets)
    e["PYTHONUNBUFFERED"] = "1"
    # Held workloads end by themselves after this long (a safety net; teardown kills them). The
    # session-scoped ones serve tests across the whole suite, which takes longer than the
    # workload's own default of 300 s.
    e.setdefault("PROBING_TEST_HOLD_S", "3600")
    pp = find_pythonpath()
    if pp is not None:
        if not (pp / "probing" / "__init__.py").exists():
            pytest.fail(f"the probing Python package is not installed and not built at {pp}: "
                        "pip install . or build it (make), or set PROBING_PYTHONPATH",
                        pytrace=False)
        e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pp), e.get("PYTHONPATH")]))
    return e


@pytest.fixture(scope="session")
def socket_dir(env):
    return Path(env["PROBING_DIR"])


@pytest.fixture(scope="session")
def cli(probing_bin, env):
    """cli(*args, check=True) -> CompletedProcess; cli.query(target, sql) -> rows."""
    return CLI(probing_bin, env)


@pytest.fixture(scope="session")
def session_launcher(cli, env, session_dir, socket_dir):
    work = session_dir / "w"
    work.mkdir()
    launcher = Launcher(cli, env, work, socket_dir)
    yield launcher
    launcher.cleanup()


@pytest.fixture
def launcher(cli, env, session_dir, socket_dir):
    work = Path(tempfile.mkdtemp(prefix="t", dir=session_dir))
    launcher = Launcher(cli, env, work, socket_dir)
    yield launcher
    launcher.cleanup()


@pytest.fixture
def traced(launcher):
    """traced(script, *args, hold=True, env=None) -> Traced (socket already up)."""
    return launcher.traced


LONG_STEPS = 250   # the seed's 07/08 windows need more than 200 steps


@pytest.fixture(scope="session")
def resnet_run(session_launcher, env):
    """resnet_inplace.py, 250 steps, DataLoader with 2 workers, finished and holding; detail
    windows (PROBING_DETAIL_EVERY=windows), so that the seed's queries are checked on windows
    too (the default, every step in detail, is transformer_run's)."""
    t = session_launcher.traced("resnet_inplace.py", "--steps", LONG_STEPS, "--workers", 2,
                                "--print-every", 10, env=dict(env, PROBING_DETAIL_EVERY="windows"))
    t.wait_holding()
    return t


@pytest.fixture(scope="session")
def transformer_run(session_launcher):
    """transformer.py, 250 steps, Adam, finished and holding."""
    t = session_launcher.traced("transformer.py", "--steps", LONG_STEPS, "--print-every", 10)
    t.wait_holding()
    return t


@pytest.fixture(scope="session")
def transformer_full_run(session_launcher, env):
    """transformer.py, 250 steps, every step in detail (PROBING_DETAIL_EVERY=1), holding."""
    t = session_launcher.traced("transformer.py", "--steps", LONG_STEPS, "--print-every", 10,
                                env=dict(env, PROBING_DETAIL_EVERY="1"))
    t.wait_holding()
    return t


def seed_file(name):
    """Text of a seed example, as `$(cat file)` hands it over (trailing newlines removed). Skips
    the test (SEEDS_MISSING) when the seed folder is absent; fails when the folder is there and
    the file is not."""
    if not SEED_QUERIES.is_dir():
        pytest.skip(SEEDS_MISSING)
    path = SEED_QUERIES / name
    if not path.exists():
        pytest.fail(f"seed example {path} not found in {SEED_QUERIES}", pytrace=False)
    return path.read_text().rstrip("\n")


def example_file(name):
    """Text of a cookbook example of this repository (examples/queries/NAME.sql or
    examples/eval/NAME.py), as `$(cat file)` hands it over (trailing newlines removed)."""
    path = EXAMPLES / ("queries" if name.endswith(".sql") else "eval") / name
    if not path.exists():
        pytest.fail(f"example {path} not found", pytrace=False)
    return path.read_text().rstrip("\n")


def api_get(socket_path, path, timeout=30):
    """GET on the agent's Unix socket; returns (status, parsed JSON)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(socket_path))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    finally:
        s.close()
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():
        body = _dechunk(body)
    return status, json.loads(body)



def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (for a job's rendezvous)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_torchrun_job(cli, env, session_dir, name, steps, *extra):
    """A 2-rank `probing run -- torchrun` job of ddp_gloo.py held at the end, in
    session_dir/name: (the launcher's Traced, {rank: pid}, release). The launcher starts no
    agent; each rank has its own. release() lets the ranks exit and cleans up."""
    work = session_dir / name
    work.mkdir()
    launcher = Launcher(cli, env, work, env["PROBING_DIR"])
    hold = work / "hold"
    job = launcher.command([cli.binary, "run", "--", PYTHON, "-m", "torch.distributed.run",
                            "--nproc_per_node", "2", "--master_port", free_port(),
                            WORKLOADS / "ddp_gloo.py", "--steps", steps, "--hold-file", hold,
                            *extra],
                           name=name, expect_socket=False)

    def release():
        for r in (0, 1):
            (work / f"hold.{r}").touch()
        try:
            job.proc.wait(timeout=60)
        finally:
            launcher.cleanup()
    try:
        job._poll("HOLDING from both ranks",
                  lambda: len(re.findall(r"^HOLDING$", job.stdout(), re.M)) == 2, STEP_TIMEOUT_S)
        ranks = {}
        for a in json.loads(cli("list", "-f", "json").stdout):
            if f"hold-file {hold}" in a.get("cmdline", "") and "torch.distributed.run" not in a["cmdline"]:
                status, info = api_get(a["endpoint"], "/api/info")
                assert status == 200
                ranks[info["rank"]] = str(a["pid"])
    except BaseException:
        release()
        raise
    return job, ranks, release

def _dechunk(body):
    out = bytearray()
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2:]
    return bytes(out)


def free_tcp_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def dead_pid():
    """A pid that no process has now."""
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


def check_killed_recording(cli, path, printed, at_least):
    """A recording whose process was killed with SIGKILL holds what was flushed before: steps
    0..n-1 in python.steps (at least `at_least`, at most the `printed` steps the process finished
    plus the one in progress), and every detail step among them (python.steps.detail) with all
    its module rows, as many as step 1 has."""
    steps = [r["step"] for r in cli.query(path, "SELECT step FROM python.steps ORDER BY step")]
    assert len(steps) >= at_least and steps == list(range(len(steps)))
    assert len(steps) <= printed + 1
    counts = cli.query(path, "SELECT step, COUNT(*) AS n FROM python.torch_trace "
                             f"WHERE step < {len(steps)} GROUP BY step ORDER BY step")
    detail = [r["step"] for r in cli.query(path, "SELECT step FROM python.steps WHERE detail = 1 "
                                                 "ORDER BY step")]
    assert detail[:8] == list(range(8))
    assert [c["step"] for c in counts] == detail
    assert len({c["n"] for c in counts[1:]}) == 1


@pytest.fixture
def other_user():
    """A second user of this machine, made for this test and removed after it (its pwd entry).
    Skips, with the reason, where users cannot be made."""
    import pwd
    import uuid
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second user (useradd); the tests run as an "
                    "ordinary user")
    if not shutil.which("useradd"):
        pytest.skip("useradd is not installed")
    name = f"pbu{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", name], check=True,
                   capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)
