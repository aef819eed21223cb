"""`probing <target> detach`: the agent leaves a training run, which goes on exactly as before.

The workload (tests/workloads/detach_train.py) prints, after training, what probing changes in
a process: Module.__call__, the wrapped torch methods, torch's global hook registries and
sys.meta_path. The run probing detached from must print exactly what a run that never saw
probing prints, and reach the same final loss bit for bit.
"""
import os
import re

import pytest

from conftest import START_TIMEOUT_S

SCRIPT = "detach_train.py"


def state_lines(text):
    return [line for line in text.splitlines() if line.startswith("state ")]


def test_detach_during_training(cli, launcher):
    t = launcher.traced(SCRIPT, "--print-every", "10")
    t.wait_steps(20)
    assert cli.scalar(t.target(), "SELECT count(*) > 0 FROM python.torch_trace") == 1
    socket_path = t.socket_path

    r = cli(t.target(), "detach")
    assert r.stdout == (f"detached from process {t.pid}: hooks removed, agent stopped, socket "
                        "removed\n")
    assert r.stderr == ""
    assert not os.path.exists(socket_path)

    r = cli(t.pid, "query", "SELECT 1", check=False)
    assert r.returncode == 1
    assert re.fullmatch(rf"probing: process {t.pid} \(.*\) is not traced by probing: no agent "
                        rf"socket at {re.escape(str(socket_path))}\. Load the agent into it now, "
                        rf"without restarting it: probing {t.pid} inject \(or start it with "
                        r"'probing run -- <command>' or PROBING=1\)\.\n", r.stderr), r.stderr

    detached = t.finish()
    plain = launcher.plain(SCRIPT, "--print-every", "0")
    plain.proc.wait(timeout=START_TIMEOUT_S * 2)
    assert plain.proc.returncode == 0, plain.describe()

    assert state_lines(detached) == state_lines(plain.stdout())
    assert "state call_is_torchs: True" in state_lines(detached)
    assert "state _global_optimizer_pre_hooks: 0" in state_lines(detached)
    assert "state _global_forward_hooks: 0" in state_lines(detached)
    assert "state probing_finders: 0" in state_lines(detached)
    assert t.final_loss() == plain.final_loss()
    assert "probing:" not in t.stderr()


def test_detach_of_a_process_that_is_not_traced(cli, launcher):
    t = launcher.plain("stack_deadlock.py")
    t._poll("DEADLOCKED", lambda: "DEADLOCKED" in t.stdout(), 60)
    r = cli(t.pid, "detach", check=False)
    assert r.returncode == 1
    assert re.fullmatch(rf"probing: process {t.pid} \(.*\) is not traced by probing: no agent "
                        rf"socket at {re.escape(str(t.socket_path))}\. Load the agent into it now, "
                        rf"without restarting it: probing {t.pid} inject \(or start it with "
                        r"'probing run -- <command>' or PROBING=1\)\.\n", r.stderr), r.stderr
    assert t.alive()
