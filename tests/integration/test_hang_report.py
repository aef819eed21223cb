"""The hang analysis on one machine, with real 2-rank gloo jobs (no namespaces needed):

  - a job whose rank 1 sleeps in load_batch (tests/workloads/cluster_job.py) while rank 0 waits
    in all_reduce: `report` on rank 0 gains a "Hang" section (text, and the "hang" key of
    --json) saying what `hang` says; once rank 1 wakes up and the job trains again, the report
    has no Hang section;
  - a job whose ranks issue different collectives at the same sequence number (rank 0
    all_reduce of 32 bytes, rank 1 broadcast of 16 bytes: tests/workloads/mismatch_job.py):
    `hang` names the mismatch with each rank's op and bytes, and report's "hang" key says so;
  - a rank blocked in work.wait() of an all_reduce(async_op=True) the other rank has not
    entered (tests/workloads/async_job.py) is seen as waiting in it;
  - with PyTorch's flight recorder on (TORCH_FR_BUFFER_SIZE), `hang` compares its sequence
    numbers and says so;
  - a stopped rank (SIGSTOP) is left out of `report`'s queries after one /api/rank round and
    named, and the Hang section comes from that round.

Every wait polls a condition with a generous timeout; the processes are killed in teardown.
"""
import json
import os
import re
import signal
import time

import pytest

from conftest import PYTHON, STEP_TIMEOUT_S, WORKLOADS, Launcher, free_port, poll_cli


def _start_ranks(cli, env, work, script, *args):
    launcher = Launcher(cli, env, work, env["PROBING_DIR"])
    port = free_port()
    ranks = []
    for rank in (0, 1):
        e = dict(env, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        ranks.append(launcher.command([cli.binary, "run", "--", PYTHON, "-u", WORKLOADS / script,
                                       *args], env=e, name=f"hangrank{rank}"))
    return launcher, ranks


@pytest.fixture
def sleeping_job(cli, env, session_dir):
    work = session_dir / f"hang-report-{time.monotonic_ns()}"
    work.mkdir()
    control = work / "control"
    launcher, ranks = _start_ranks(cli, env, work, "cluster_job.py", control)
    try:
        for r, t in enumerate(ranks):
            t._poll(f"READY {r}", lambda t=t, r=r: f"READY {r}" in t.stdout(), STEP_TIMEOUT_S)
        yield ranks, control
    finally:
        launcher.cleanup()


def test_report_of_a_stalled_job_has_the_hang_section(cli, sleeping_job):
    (rank0, rank1), control = sleeping_job
    sleep = control.parent / f"{control.name}.sleep.1"
    sleep.touch()
    hang = poll_cli(cli, rank0.pid, ["hang"],
                     lambda r: "rank 1 has not entered it" in r.stdout, "rank 1 named by hang",
                     (rank0, rank1))
    first = hang.stdout.splitlines()[0]
    assert first.startswith("all ranks but 1 are in all_reduce #") and first.endswith(
        "on group WORLD, waiting " + first.split("waiting ")[1]), hang.stdout
    assert "load_batch" in hang.stdout, hang.stdout

    # report calls it stalled once the wait is longer than 10 healthy steps and 5 s
    r = poll_cli(cli, rank0.pid, ["report"], lambda r: "\nHang:" in r.stdout, "the Hang section",
                  (rank0, rank1))
    text = r.stdout
    assert "\nHang: the job is stalled (as `probing <target> hang` shows it)\n" in text, text
    section = text.split("\nHang: the job is stalled")[1].split("\n\n")[0].splitlines()[1:]
    assert section[0].startswith("  all ranks but 1 are in all_reduce #"), section
    assert "rank 1 has not entered it" in section[0], section
    assert any(l.startswith("  rank 1 (") and "load_batch" in l for l in section), section
    # the Hang section comes before the method's sections
    assert text.index("\nHang:") < text.index("\n2. Bottleneck type\n"), text

    doc = json.loads(cli(rank0.pid, "report", "--json").stdout)
    hang_doc = doc["hang"]
    assert hang_doc["stalled"] is True and hang_doc["not_answered"] == []
    (group,) = hang_doc["groups"]
    assert group["group"] == "WORLD" and group["op"] == "all_reduce", group
    assert group["waiting_ranks"] == "0" and group["not_entered_ranks"] == "1", group
    assert group["mismatch"] is False and group["seq"] >= 3, group
    assert hang_doc["text"][0].startswith("all ranks but 1 are in all_reduce #"), hang_doc

    # The job trains again: no Hang section.
    sleep.unlink()
    r = poll_cli(cli, rank0.pid, ["report", "--json"],
                  lambda r: r.returncode == 0 and "hang" not in json.loads(r.stdout),
                  "the report without a hang once the job runs again", (rank0, rank1))
    assert "\nHang:" not in cli(rank0.pid, "report").stdout


def test_hang_names_mismatched_collectives(cli, env, session_dir):
    work = session_dir / f"hang-mismatch-{time.monotonic_ns()}"
    work.mkdir()
    launcher, (rank0, rank1) = _start_ranks(cli, env, work, "mismatch_job.py")
    try:
        for r, t in enumerate((rank0, rank1)):
            t._poll(f"READY {r}", lambda t=t, r=r: f"READY {r}" in t.stdout(), STEP_TIMEOUT_S)
        r = poll_cli(cli, rank0.pid, ["hang"], lambda r: "mismatch at #" in r.stdout,
                      "the mismatch named by hang", (rank0, rank1))
        m = re.search(r"^mismatch at #(\d+) on group WORLD: (.*)$", r.stdout, re.M)
        assert m and m.group(2) == "rank 0 all_reduce 32 bytes; rank 1 broadcast 16 bytes;", r.stdout
        seq = int(m.group(1))
        assert seq >= 4, r.stdout  # after the three matching all_reduces
        assert r.stdout.startswith(f"ranks 0-1 are in all_reduce #{seq} on group WORLD, waiting "), \
            r.stdout
        r = poll_cli(cli, rank0.pid, ["report", "--json"], lambda r: "hang" in json.loads(r.stdout),
                      "the hang key of report", (rank0, rank1))
        doc = json.loads(r.stdout)
        (group,) = doc["hang"]["groups"]
        assert group["mismatch"] is True and group["seq"] == seq, group
        assert group["waiting_ranks"] == "0-1" and group["not_entered_ranks"] == "", group
    finally:
        launcher.cleanup()


def test_hang_sees_a_rank_blocked_in_an_async_collective(cli, env, session_dir):
    """Rank 0 issues all_reduce(async_op=True) and blocks in work.wait(); rank 1 has not
    entered the all_reduce (tests/workloads/async_job.py). The async call stays "entered" until
    its Work completes, so `hang` names rank 1 as the one rank 0 waits for; once rank 1 enters
    it and the Work completes, no rank is waiting."""
    work = session_dir / f"hang-async-{time.monotonic_ns()}"
    work.mkdir()
    control = work / "control"
    hold = work / "control.hold"
    hold.touch()
    launcher, (rank0, rank1) = _start_ranks(cli, env, work, "async_job.py", control)
    try:
        for r, t in enumerate((rank0, rank1)):
            t._poll(f"READY {r}", lambda t=t, r=r: f"READY {r}" in t.stdout(), STEP_TIMEOUT_S)
        r = poll_cli(cli, rank0.pid, ["hang"], lambda r: "rank 1 has not entered it" in r.stdout,
                      "rank 1 named by hang", (rank0, rank1))
        lines = r.stdout.splitlines()
        assert re.fullmatch(r"all ranks but 1 are in all_reduce #4 on group WORLD, waiting \d+ s; "
                            r"rank 1 has not entered it", lines[0]), r.stdout
        assert "  rank 1: its last on WORLD is all_reduce #3 (completed)" in lines, r.stdout
        assert any(re.fullmatch(r"rank 1 \(.*\) is in async_job\.py:\d+ hold_back", l)
                   for l in lines), r.stdout
        assert any(re.fullmatch(r"waiting rank 0 is in async_job\.py:\d+ main", l)
                   for l in lines), r.stdout
        assert "COMPLETED 0" not in rank0.stdout()

        hold.unlink()
        for r, t in enumerate((rank0, rank1)):
            t._poll(f"COMPLETED {r}", lambda t=t, r=r: f"COMPLETED {r}" in t.stdout(),
                    STEP_TIMEOUT_S)
        r = cli(rank0.pid, "hang")
        assert r.stdout == "no rank is waiting in a collective (2 of 2 ranks answered)\n", r.stdout
    finally:
        launcher.cleanup()


def test_hang_uses_the_flight_recorder_when_the_job_has_it(cli, env, session_dir):
    """The job of the first test with PyTorch's flight recorder on (TORCH_FR_BUFFER_SIZE): gloo
    records into it on CPU, so `hang` takes the collective state from it (each process group's
    last enqueued and last completed collective, the op and sizes of its entry), says so, and
    names rank 1 as the one rank 0 waits for."""
    work = session_dir / f"hang-fr-{time.monotonic_ns()}"
    work.mkdir()
    control = work / "control"
    launcher, (rank0, rank1) = _start_ranks(cli, dict(env, TORCH_FR_BUFFER_SIZE="2000"), work,
                                            "cluster_job.py", control)
    try:
        for r, t in enumerate((rank0, rank1)):
            t._poll(f"READY {r}", lambda t=t, r=r: f"READY {r}" in t.stdout(), STEP_TIMEOUT_S)
        (work / "control.sleep.1").touch()
        r = poll_cli(cli, rank0.pid, ["hang"], lambda r: "rank 1 has not entered it" in r.stdout,
                      "rank 1 named by hang", (rank0, rank1))
        lines = r.stdout.splitlines()
        m = re.fullmatch(r"all ranks but 1 are in all_reduce #(\d+) on group WORLD, waiting \d+ s; "
                         r"rank 1 has not entered it", lines[0])
        assert m, r.stdout
        seq = int(m.group(1))
        # rank 1 has nothing in flight: its agent reads only pg_status, so no op name
        assert f"  rank 1: its last on WORLD is #{seq - 1} (completed)" in lines, r.stdout
        assert any(re.fullmatch(r"rank 1 \(.*\) is in cluster_job\.py:\d+ load_batch", l)
                   for l in lines), r.stdout
        assert lines[-1] == ("source: PyTorch's flight recorder (TORCH_FR_BUFFER_SIZE): each "
                             "process group's last enqueued and last completed collective"), r.stdout
        r = poll_cli(cli, rank0.pid, ["report", "--json"], lambda r: "hang" in json.loads(r.stdout),
                      "the hang key of report", (rank0, rank1))
        doc = json.loads(r.stdout)
        assert doc["hang"]["source"] == "flight_recorder", doc["hang"]
        (group,) = doc["hang"]["groups"]
        assert group["op"] == "all_reduce" and group["not_entered_ranks"] == "1", group
    finally:
        launcher.cleanup()


def test_report_leaves_out_a_rank_that_does_not_answer(cli, sleeping_job):
    """Rank 1 is stopped (SIGSTOP): its agent cannot answer. `report` on rank 0 asks every rank
    once (GET /api/rank, 5 s deadline), leaves rank 1 out of its queries instead of waiting for
    each of them, says so, and its Hang section (from the same round) names rank 1 as not
    answering while rank 0 waits in all_reduce."""
    (rank0, rank1), control = sleeping_job
    os.kill(rank1.pid, signal.SIGSTOP)
    try:
        r = poll_cli(cli, rank0.pid, ["report"],
                      lambda r: r.returncode == 0 and "\nHang:" in r.stdout, "the Hang section",
                      (rank0, rank1))
        text = r.stdout
        assert ("0 of the 1 other ranks reached through the job's roster (its c10d store); left "
                "out, not answering within 5 s: rank 1 (see probing <target> ranks)") in text, text
        section = text.split("\nHang: the job is stalled")[1].split("\n\n")[0].splitlines()[1:]
        assert re.fullmatch(r"  rank 0 is in all_reduce #\d+ on group WORLD, waiting \d+ s; some "
                            r"ranks did not answer \(below\)", section[0]), section
        assert any(l.startswith("  rank 1 (") and "did not answer" in l for l in section), section
    finally:
        os.kill(rank1.pid, signal.SIGCONT)


def test_hang_on_a_running_job_says_nothing_is_stuck(cli, sleeping_job):
    """A healthy job whose rank 1 is 30 ms slower to load each batch: rank 0 waits a few
    milliseconds in every all_reduce. That is not a hang (issue 28): `hang` says nothing is
    stuck, with the longest wait, and never names rank 1 as one the job waits for."""
    (rank0, rank1), control = sleeping_job
    (control.parent / f"{control.name}.slow.1").touch()
    seen = []

    def running(r):
        seen.append(r.stdout)
        return r.returncode == 0 and r.stdout.startswith("nothing is stuck")

    r = poll_cli(cli, rank0.pid, ["hang"], running, "'nothing is stuck' from hang",
                 (rank0, rank1))
    assert re.match(r"nothing is stuck: the job is running \(2 of 2 ranks answered\); the "
                    r"longest wait in a collective is \d+ ms \(rank 0 in all_reduce #\d+ on "
                    r"group WORLD\), under the 5 s that makes a stall", r.stdout), r.stdout
    assert len(r.stdout.splitlines()) == 1, r.stdout
    for out in seen:
        assert "has not entered it" not in out and "not entered:" not in out, out


def test_hang_names_a_stopped_rank_with_its_state_and_stack(cli, sleeping_job):
    """Rank 1 is SIGSTOPped: rank 0 waits in all_reduce. `hang` names rank 1 as the rank the
    job waits for, with its process state (T) and its Python stack read from outside (as
    `backtrace` reads it); `ranks` says it is stopped, not gone (issue 28)."""
    (rank0, rank1), control = sleeping_job
    os.kill(rank1.pid, signal.SIGSTOP)
    try:
        r = poll_cli(cli, rank0.pid, ["hang"],
                     lambda r: "the job waits for it" in r.stdout,
                     "the stopped rank named by hang", (rank0, rank1))
        lines = r.stdout.splitlines()
        (named,) = [i for i, l in enumerate(lines) if l.startswith("rank 1 (")]
        assert f"pid {rank1.pid}) did not answer: " in lines[named], lines
        assert "; the job waits for it; its process is stopped (state T: SIGSTOP" in lines[named], lines
        assert ", in " in lines[named], lines
        stack = lines[named + 1:]
        assert any("cluster_job.py" in l and " main" in l for l in stack), r.stdout
        # the waiting rank's stack is whole: down to the script's own main()
        assert "waiting rank 0 is in " in r.stdout, r.stdout
        waiting = r.stdout.split("waiting rank 0 is in ")[1].splitlines()
        assert any("cluster_job.py" in l and " main" in l for l in waiting), r.stdout

        ranks = cli(rank0.pid, "ranks", "-f", "json", check=False)
        assert ranks.returncode == 3, (ranks.stdout, ranks.stderr)
        rows = {row["rank"]: row for row in json.loads(ranks.stdout)}
        assert rows[1]["state"].startswith("not answering: its process is stopped (state T"), rows
        assert "gone" not in rows[1]["state"], rows
    finally:
        os.kill(rank1.pid, signal.SIGCONT)
