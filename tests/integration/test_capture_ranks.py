"""`probing <target> capture --ranks all -o DIR`: one capture on every rank of a training 2-rank
gloo job at once, one trace per rank named by rank, and the ranks that did not answer named.

One job trains for the whole module (ddp_gloo.py with a step count it never reaches); every
test asks one of its ranks.
"""
import json
import os
import re
import signal
import subprocess

import pytest

from conftest import PYTHON, STEP_TIMEOUT_S, WORKLOADS, free_port


@pytest.fixture(scope="module")
def job(cli, env, session_dir):
    """{rank: (pid, socket)} of a 2-rank job that is training."""
    from conftest import Launcher
    work = session_dir / "capture-ranks-job"
    work.mkdir()
    launcher = Launcher(cli, env, work, env["PROBING_DIR"])
    ranks, proc = {}, None
    try:
        proc = launcher.command([cli.binary, "run", "--", PYTHON, "-m", "torch.distributed.run",
                                 "--nproc_per_node", "2", "--master_port", free_port(),
                                 WORKLOADS / "ddp_gloo.py", "--steps", 1_000_000],
                                name="capture-ranks-job", expect_socket=False)
        proc._poll("step lines", lambda: re.search(r"^step 10\b", proc.stdout(), re.M),
                   STEP_TIMEOUT_S)

        def both_listed():
            # an agent slow to answer `list` (1 s each; a loaded or sanitized run) is listed
            # without its cmdline: ask again
            for a in json.loads(cli("list", "-f", "json").stdout):
                if "ddp_gloo.py --steps 1000000" in a.get("cmdline", "") and \
                        "torch.distributed.run" not in a["cmdline"]:
                    ranks[a["rank"]] = (str(a["pid"]), a["endpoint"])
            return sorted(ranks) == [0, 1]
        proc._poll("both ranks in probing list", both_listed, STEP_TIMEOUT_S)
        yield ranks
    finally:
        # torchrun starts its workers in sessions of their own: kill them by pid, also when the
        # fixture failed before it found them
        workers = descendants(proc.pid) if proc else set()
        launcher.cleanup()
        for pid in workers | {int(pid) for pid, _ in ranks.values()}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def descendants(pid):
    """The pids of every process below pid (from /proc/<pid>/task/<tid>/children)."""
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids = {int(k) for k in f.read().split()}
            except OSError:
                continue
            todo.extend(kids - found)
            found |= kids
    return found


def rank_lines(stdout):
    """{rank: (first_step, last_step, rows)} from the per-rank result lines."""
    found = {}
    for m in re.finditer(r"^rank (\d+) \([^)]*\): capture \d+: \d+ steps? \((\d+)-(\d+)\), "
                         r"(\d+) rows in python.torch_ops$", stdout, re.M):
        found[int(m.group(1))] = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
    return found


def test_capture_on_every_rank_writes_one_trace_per_rank(cli, job, tmp_path):
    traces = tmp_path / "traces"  # created by the command
    r = cli(job[1][0], "capture", "--ranks", "all", "--steps", 2, "-o", traces,
            timeout=STEP_TIMEOUT_S)
    assert r.stdout.startswith("capture of 2 steps started on 2 of 2 selected ranks\n"), r.stdout
    results = rank_lines(r.stdout)
    assert sorted(results) == [0, 1], r.stdout
    assert sorted(os.listdir(traces)) == ["rank0.json", "rank1.json"]
    for rank, (first, last, rows) in results.items():
        assert last - first == 1 and rows > 0
        assert f"rank {rank}: wrote {traces}/rank{rank}.json (" in r.stdout
        trace = json.loads((traces / f"rank{rank}.json").read_text())
        info = trace["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", rank, 2)
        marked = sorted(int(e["name"].split("#")[1]) for e in trace["traceEvents"]
                        if e.get("name", "").startswith("ProfilerStep#"))
        assert marked == [first, last]
        # the rows the summary counts are the rank's own, under the capture id it printed
        capture = int(re.search(rf"^rank {rank} \([^)]*\): capture (\d+):", r.stdout,
                                re.M).group(1))
        assert cli.scalar(job[rank][0], "SELECT count(*) FROM python.torch_ops WHERE capture = "
                          f"{capture}") == rows
    assert "probing " + job[1][0] + " query --ranks all \"SELECT name" in r.stdout
    assert r.stderr == ""


def test_capture_on_some_ranks(cli, job, tmp_path):
    r = cli(job[0][0], "capture", "--ranks", "1", "--steps", 1, "-o", tmp_path / "one",
            timeout=STEP_TIMEOUT_S)
    assert r.stdout.startswith("capture of 1 step started on 1 of 1 selected rank\n"), r.stdout
    assert sorted(rank_lines(r.stdout)) == [1]
    assert os.listdir(tmp_path / "one") == ["rank1.json"]


def test_a_rank_that_cannot_be_reached_is_named_and_the_others_captured(cli, job, tmp_path):
    pid1, sock1 = job[1]
    aside = sock1 + ".aside"
    os.rename(sock1, aside)  # rank 1 trains on, but nobody can reach it
    try:
        r = cli(job[0][0], "capture", "--ranks", "all", "--steps", 1, "-o", tmp_path / "t",
                check=False, timeout=STEP_TIMEOUT_S)
    finally:
        os.rename(aside, sock1)
    assert r.returncode == 3, r.stderr
    assert sorted(rank_lines(r.stdout)) == [0], r.stdout
    assert os.listdir(tmp_path / "t") == ["rank0.json"]
    host = re.search(r"^rank 0 \(([^)]*)\)", r.stdout, re.M).group(1)
    assert r.stderr == (f"probing: rank 1 ({host}) has no capture: its socket {sock1} is gone "
                        "(did the process exit?)\n")


@pytest.mark.parametrize("args, message", [
    (["--ranks", "all", "-o", "-"],
     "probing: capture --ranks writes one trace per rank: give -o a directory, not '-'\n"),
    (["--ranks", "0,7"], "probing: --ranks 0,7: the job has ranks 0 to 1\n"),
    (["--deadline", "1"],
     "probing: --deadline goes with --ranks (the time to wait for each rank's answer)\n"),
])
def test_capture_ranks_bad_input(cli, job, args, message):
    r = cli(job[0][0], "capture", *args, check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr == message
    assert r.stdout == ""


def test_capture_ranks_into_a_file_is_refused(cli, job, tmp_path):
    target = tmp_path / "trace.json"
    target.write_text("{}")
    r = cli(job[0][0], "capture", "--ranks", "all", "-o", target, check=False)
    assert r.returncode == 1
    assert r.stderr == (f"probing: capture --ranks writes one trace per rank into a directory, "
                        f"and {target} is a file: give -o a directory (it is created when "
                        "missing)\n")
    assert target.read_text() == "{}"


def test_hta_reads_a_capture_ranks_directory(cli, job, tmp_path):
    """The folder `capture --ranks all -o DIR` writes is an HTA trace directory."""
    pytest.importorskip("hta", reason="HolisticTraceAnalysis is not installed (pip install "
                                      "HolisticTraceAnalysis; scripts/setup-extras.sh installs it)")
    traces = tmp_path / "hta"
    cli(job[0][0], "capture", "--ranks", "all", "--steps", 3, "-o", traces,
        timeout=STEP_TIMEOUT_S)
    script = ("import sys; from hta.trace_analysis import TraceAnalysis; "
              "print(sorted(int(r) for r in TraceAnalysis(trace_dir=sys.argv[1]).t.traces))")
    outside = {k: v for k, v in os.environ.items()
               if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    r = subprocess.run([PYTHON, "-c", script, str(traces)], capture_output=True, text=True,
                       timeout=600, env=outside)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[0, 1]"
