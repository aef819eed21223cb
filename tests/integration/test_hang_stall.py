"""A job stalled with no rank inside a collective, on one machine, with a real 3-rank gloo job
(tests/workloads/stall_job.py: all ranks stop after the same all_reduce, ranks 0 and 1 in
load_batch, rank 2 in wait_for_lock):

  - while the job trains, `hang` never calls it stalled;
  - once no step finishes on any rank for long (10 x the median step, at least 5 s), `hang`
    says so with the numbers, groups the identical stacks of ranks 0 and 1 into one entry and
    names rank 2 as the odd one with its stack; `report` has the same as its "Hang" section and
    its --json "hang" key (odd_ranks "2", no collective groups);
  - once the job trains again, `hang` says no rank is waiting and the report has no Hang section.

Every wait polls a condition with a generous timeout; the processes are killed in teardown.
"""
import json
import re
import time

import pytest

from conftest import PYTHON, STEP_TIMEOUT_S, WORKLOADS, Launcher, free_port, poll_cli

STALLED = "the job is stalled outside collectives: "


@pytest.fixture
def stall_job(cli, env, session_dir):
    work = session_dir / f"hang-stall-{time.monotonic_ns()}"
    work.mkdir()
    control = work / "control"
    launcher = Launcher(cli, env, work, env["PROBING_DIR"])
    port = free_port()
    ranks = []
    try:
        for rank in range(3):
            e = dict(env, RANK=str(rank), WORLD_SIZE="3", LOCAL_RANK=str(rank),
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            ranks.append(launcher.command([cli.binary, "run", "--", PYTHON, "-u",
                                           WORKLOADS / "stall_job.py", control],
                                          env=e, name=f"stallrank{rank}"))
        for r, t in enumerate(ranks):
            t._poll(f"READY {r}", lambda t=t, r=r: f"READY {r}" in t.stdout(), STEP_TIMEOUT_S)
        yield ranks, control
    finally:
        launcher.cleanup()


def test_hang_names_a_stall_outside_collectives(cli, stall_job):
    ranks, control = stall_job
    rank0 = ranks[0]

    # Training: never called stalled (a few answers, at least one that sees no rank waiting).
    seen = []
    def training(r):
        assert STALLED not in r.stdout, r.stdout
        seen.append(r.stdout)
        return len(seen) >= 3 and any(
            s == "no rank is waiting in a collective (3 of 3 ranks answered)\n" for s in seen)
    poll_cli(cli, rank0.pid, ["hang"], training, "hang on a training job", ranks)

    (control.parent / f"{control.name}.stall").touch()
    r = poll_cli(cli, rank0.pid, ["hang"], lambda r: r.stdout.startswith(STALLED),
                   "the stall named by hang", ranks)
    lines = r.stdout.splitlines()
    m = re.fullmatch(r"the job is stalled outside collectives: no step finished on any rank for "
                     r"(\d+) s while the median step is ([0-9.e-]+) s; no rank is in a collective "
                     r"\(3 of 3 ranks answered\)", lines[0])
    assert m, r.stdout
    no_step, median = int(m.group(1)), float(m.group(2))
    assert no_step >= 5 and 0 < median and no_step >= 10 * median, r.stdout
    # ranks 0 and 1: one entry; rank 2: the odd one, with its pid and stack
    assert re.fullmatch(r"ranks 0-1 are in stall_job\.py:\d+ load_batch", lines[1]), r.stdout
    odd = [l for l in lines if l.startswith("rank 2 (")]
    assert len(odd) == 1 and re.fullmatch(
        rf"rank 2 \([^,]+, pid {ranks[2].pid}\) is the odd one: it is in stall_job\.py:\d+ "
        r"wait_for_lock", odd[0]), r.stdout
    assert lines[lines.index(odd[0]) + 1].strip().endswith("wait_for_lock"), r.stdout
    assert r.returncode == 0, r.stderr

    doc = json.loads(cli(rank0.pid, "report", "--json").stdout)
    h = doc["hang"]
    assert h["stalled"] is True and h["groups"] == [] and h["not_answered"] == [], h
    assert h["odd_ranks"] == "2" and h["no_step_for_s"] >= 5 and h["median_step_s"] > 0, h
    assert h["text"][0].startswith(STALLED), h
    text = cli(rank0.pid, "report").stdout
    section = text.split("\nHang: the job is stalled")[1].split("\n\n")[0].splitlines()[1:]
    assert section[0].startswith("  " + STALLED), section
    assert any(l.startswith("  rank 2 (") and "is the odd one" in l for l in section), section

    # Trains again: not stalled, no Hang section.
    (control.parent / f"{control.name}.stall").unlink()
    poll_cli(cli, rank0.pid, ["report", "--json"],
               lambda r: r.returncode == 0 and "hang" not in json.loads(r.stdout),
               "the report without a hang once the job trains again", ranks)
    r = poll_cli(cli, rank0.pid, ["hang"], lambda r: STALLED not in r.stdout,
                   "hang without the stall once the job trains again", ranks)
