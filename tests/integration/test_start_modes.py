"""The three ways to start the agent (`probing run`, PROBING=1, `probing.init()`), what
`probing list` and `probing info` show, and that without any of them nothing is started."""
import json
import os
import platform
import subprocess
import textwrap

import pytest

from conftest import PYTHON, WORKLOADS


def torch_version():
    import importlib.metadata
    return importlib.metadata.version("torch").split("+")[0]


def test_probing_run_execs_the_command(cli, traced, socket_dir):
    t = traced("inference.py", "--steps", 3)
    t.wait_holding()
    # execvp: the pid we started is the Python process itself, and it serves
    assert t.socket_path == socket_dir / f"{t.pid}.sock"
    exe = os.path.realpath(f"/proc/{t.pid}/exe")
    assert "python" in os.path.basename(exe), exe
    environ = open(f"/proc/{t.pid}/environ", "rb").read().split(b"\0")
    assert b"PROBING=1" in environ
    assert cli.scalar(t.target(), "SELECT COUNT(DISTINCT step) FROM python.torch_trace") == 3
    # the socket is owner-only
    assert (t.socket_path.stat().st_mode & 0o077) == 0
    t.finish()
    assert not t.socket_path.exists(), "a clean exit removes the socket"


def test_info(cli, traced):
    t = traced("inference.py", "--steps", 1)
    t.wait_holding()
    out = cli(t.target(), "info").stdout
    assert str(t.pid) in out
    assert "inference.py" in out
    assert platform.python_version() in out
    assert torch_version() in out
    assert str(t.socket_path) in out
    info = json.loads(cli(t.target(), "info", "-f", "json").stdout)
    assert info["pid"] == t.pid
    assert info["cmdline"] == " ".join(t.cmd[3:])  # what `probing run --` executed
    assert info["endpoint"] == str(t.socket_path)
    assert info["rank"] == 0
    assert 0 <= info["uptime_s"] < 600


def test_probing_list_shows_traced_processes(cli, launcher):
    traced = launcher.traced("inference.py", "--steps", 1)
    plain = launcher.plain("inference.py", "--steps", 1, hold=True)
    traced.wait_holding()
    plain.wait_holding()
    out = cli("list").stdout
    line = next((l for l in out.splitlines() if str(traced.pid) in l.split()), None)
    assert line, f"pid {traced.pid} not in:\n{out}"
    assert str(plain.pid) not in out.split()
    assert platform.python_version() in line
    assert torch_version() in line
    assert str(traced.socket_path) in line
    # the table cuts long command lines; -f json has them whole
    agents = {a["pid"]: a for a in json.loads(cli("list", "-f", "json").stdout)}
    assert plain.pid not in agents
    agent = agents[traced.pid]
    assert agent["cmdline"].split()[-5:] == [
        str(WORKLOADS / "inference.py"), "--hold-file", str(traced.hold_file), "--steps", "1"]
    assert agent["endpoint"] == str(traced.socket_path)
    assert agent["python"] == platform.python_version()
    assert agent["torch"].split("+")[0] == torch_version()
    # a finished process leaves the list
    traced.finish()
    assert str(traced.pid) not in cli("list").stdout.split()


def test_without_probing_nothing_starts(cli, launcher, socket_dir):
    """Plain python with the package importable and PROBING unset: no agent, no socket."""
    t = launcher.plain("inference.py", "--steps", 2, hold=True)
    t.wait_holding()
    assert not (socket_dir / f"{t.pid}.sock").exists()
    r = cli(t.pid, "query", "SELECT 1", check=False)
    assert r.returncode == 1 and "is not traced by probing" in r.stderr
    assert str(t.pid) not in cli("list").stdout.split()
    t.finish()


def test_probing_env_var_starts_the_agent(cli, launcher, env):
    e = dict(env, PROBING="1")
    probe = subprocess.run([PYTHON, "-c", "import sys; print('probing' in sys.modules)"],
                           env=e, capture_output=True, text=True, timeout=120)
    if probe.stdout.strip() != "True":
        pytest.skip("PROBING=1 needs the package's .pth bootstrap, which only a pip install "
                    "provides; here probing is only on PYTHONPATH")
    name = "envvar"
    hold = launcher.workdir / f"{name}.release"
    t = launcher.command([PYTHON, "-u", WORKLOADS / "inference.py", "--steps", 3,
                          "--hold-file", hold], env=e, name=name)
    t.hold_file = hold
    t.wait_holding()
    assert cli.scalar(t.target(), "SELECT COUNT(DISTINCT step) FROM python.torch_trace") == 3
    t.finish()


INIT_SCRIPT = textwrap.dedent("""\
    import os, sys, time
    order, hold = sys.argv[1], sys.argv[2]
    if order == "probing-first":
        import probing
        endpoint = probing.init()
        import torch
    else:
        import torch
        import probing
        endpoint = probing.init()
    assert probing.init() == endpoint  # idempotent
    print("endpoint", endpoint, flush=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 6):
        optimizer.zero_grad()
        model(torch.randn(16, 4)).pow(2).mean().backward()
        optimizer.step()
        print(f"step {step}", flush=True)
    print("HOLDING", flush=True)
    while not os.path.exists(hold):
        time.sleep(0.05)
""")


@pytest.mark.parametrize("order", ["probing-first", "torch-first"])
def test_init_from_python(cli, launcher, order):
    script = launcher.workdir / "init_script.py"
    script.write_text(INIT_SCRIPT)
    name = f"init-{order}"
    hold = launcher.workdir / f"{name}.release"
    t = launcher.command([PYTHON, "-u", script, order, hold], name=name)
    t.hold_file = hold
    t.wait_holding()
    assert f"endpoint {t.socket_path}\n" in t.stdout()
    rows = cli.query(t.target(), "SELECT module, stage, COUNT(*) AS n FROM python.torch_trace "
                                 "GROUP BY module, stage")
    counts = {(r["module"], r["stage"]): r["n"] for r in rows}
    for module in ("Sequential", "0", "1", "2"):
        assert counts.get((module, "forward")) == 5, counts
    assert counts.get(("SGD", "step")) == 5, counts
    t.finish()
