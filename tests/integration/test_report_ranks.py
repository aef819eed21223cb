"""Ranks started by torch.multiprocessing.spawn (tests/workloads/spawn_ddp.py, PyTorch's DDP
tutorial's way) are traced like torchrun's, and the report finds a straggler from either rank
live, and offline from the ranks' recordings read together (`probing r0.db report r1.db`).

Rank 1 gets a 6x larger batch: it does 6x the forward and backward work, and rank 0 waits for
it in DDP's gradient all-reduce (python.steps.grad_sync): the step times are equal, the work
and the wait are mirror images.
"""
import json
import os
import re
import time

import pytest

from conftest import PYTHON, STEP_TIMEOUT_S, WORKLOADS, api_get, free_port

SANITIZED = bool(os.environ.get("PROBING_SANITIZED"))
STEPS = 40



@pytest.fixture(scope="module")
def spawn_job(cli, env, session_dir):
    from conftest import Launcher
    work = session_dir / "report-spawn"
    work.mkdir()
    launcher = Launcher(cli, env, work, env["PROBING_DIR"])
    hold = work / "hold"
    job = launcher.command([cli.binary, "run", "--", PYTHON, "-u", WORKLOADS / "spawn_ddp.py",
                            "--steps", STEPS, "--port", free_port(), "--hold-file", hold,
                            "--slow-rank", 1, "--slow-factor", 6, "--print-every", 0],
                           name="spawn")
    job._poll("HOLDING from both ranks",
              lambda: len(re.findall(r"^HOLDING$", job.stdout(), re.M)) == 2, STEP_TIMEOUT_S)
    pids = {int(r): p for r, p in re.findall(r"^rank (\d) pid (\d+)$", job.stdout(), re.M)}
    yield job, pids, work
    for r in (0, 1):
        (work / f"hold.{r}").touch()
    try:
        job.proc.wait(timeout=60)
    finally:
        launcher.cleanup()


def test_spawned_ranks_are_traced(cli, spawn_job):
    job, pids, _ = spawn_job
    assert sorted(pids) == [0, 1], job.stdout()
    agents = {str(a["pid"]): a for a in json.loads(cli("list", "-f", "json").stdout)}
    for rank, pid in pids.items():
        assert pid in agents, (pid, sorted(agents))
        status, info = api_get(agents[pid]["endpoint"], "/api/info")
        assert status == 200 and info["rank"] == rank and info["world_size"] == 2, info
        assert info["job"].startswith("127.0.0.1:"), info
        steps = cli.query(pid, "SELECT COUNT(*) AS n, MAX(grad_sync) AS g FROM python.steps")
        assert steps[0]["n"] >= STEPS - 1, steps


def check_straggler(doc):
    f = next(f for f in doc["findings"] if f["id"] == "load_imbalance")
    assert f["severity"] == "warning", json.dumps(doc["findings"], indent=1)
    n = f["numbers"]
    assert n["slow_rank"] == 1 and n["least_waiting_rank"] == 1, json.dumps(n, indent=1)
    assert n["differs_most"] in ("forward", "backward"), json.dumps(n, indent=1)
    assert "rank 1 is the slow rank" in f["claim"], f["claim"]
    return f


def test_report_names_the_straggler_from_either_rank(cli, spawn_job):
    _, pids, _ = spawn_job
    for rank in (0, 1):
        doc = json.loads(cli(pids[rank], "report", "--json").stdout)
        if SANITIZED:
            continue
        check_straggler(doc)
        comm = [f for f in doc["findings"] if f["id"] == "communication"]
        # rank 0 waits for rank 1 in grad_sync: said, as the wait for the slow rank
        assert all(f["severity"] == "info" and "the wait for rank 1" in f["claim"]
                   for f in comm), comm


def test_report_over_the_ranks_recordings(cli, spawn_job):
    _, pids, work = spawn_job
    files = {}
    for rank, pid in pids.items():
        files[rank] = work / f"report-rank{rank}.db"
        cli(pid, "record", "-o", files[rank])
    deadline = time.monotonic() + STEP_TIMEOUT_S
    for rank, path in files.items():
        while True:
            r = cli(path, "query", "SELECT COUNT(*) AS n FROM python.steps", "-f", "json",
                    check=False)
            if r.returncode == 0 and json.loads(r.stdout)[0]["n"] >= STEPS - 1:
                break
            assert time.monotonic() < deadline, r.stdout + r.stderr
            time.sleep(0.2)
    doc = json.loads(cli(files[0], "report", "--json", files[1]).stdout)
    if not SANITIZED:
        f = check_straggler(doc)
        assert f["numbers"]["ranks_reached"] == 2
    # the same file twice is refused, with the reason
    r = cli(files[0], "report", files[0], check=False)
    assert r.returncode == 2 and r.stderr == (
        f"probing: cannot read '{files[0]}' as another rank of '{files[0]}': it holds the same "
        "rank as the target\n"), r.stderr
