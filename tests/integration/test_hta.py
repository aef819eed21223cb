"""`capture -o` traces are read by Holistic Trace Analysis (PyPI HolisticTraceAnalysis) as
torch.profiler's own: one capture per rank of a running 2-rank gloo job, put in one folder, is an
HTA trace directory with ranks 0 and 1 (distributedInfo) and the captured steps as iterations
(ProfilerStep#N), without HTA's warnings about either.
"""
import json
import os
import re
import signal
import subprocess

import pytest

from conftest import PYTHON, STEP_TIMEOUT_S, WORKLOADS, free_port

pytest.importorskip("hta", reason="HolisticTraceAnalysis is not installed (pip install "
                                  "HolisticTraceAnalysis; scripts/setup-extras.sh installs it)")

HTA_SCRIPT = """
import json, sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
print(json.dumps({"ranks": sorted(int(r) for r in a.t.traces),
                  "iterations": {int(r): [int(i) for i in a.t.get_iterations(r)]
                                 for r in a.t.traces}}))
"""



def test_hta_reads_per_rank_captures_as_one_trace_directory(cli, env, session_dir, tmp_path):
    from conftest import Launcher
    work = session_dir / "hta-job"
    work.mkdir()
    launcher = Launcher(cli, env, work, env["PROBING_DIR"])
    ranks = {}
    try:
        proc = launcher.command([cli.binary, "run", "--", PYTHON, "-m", "torch.distributed.run",
                                 "--nproc_per_node", "2", "--master_port", free_port(),
                                 WORKLOADS / "ddp_gloo.py", "--steps", 1_000_000],
                                name="hta-job", expect_socket=False)  # the launcher starts no agent
        proc._poll("step lines", lambda: re.search(r"^step 20\b", proc.stdout(), re.M),
                   STEP_TIMEOUT_S)
        for a in json.loads(cli("list", "-f", "json").stdout):
            if "ddp_gloo.py --steps 1000000" in a.get("cmdline", "") and \
                    "torch.distributed.run" not in a["cmdline"]:
                ranks[a["rank"]] = str(a["pid"])
        assert sorted(ranks) == [0, 1], ranks
        traces = tmp_path / "traces"
        traces.mkdir()
        steps = {}
        for rank, pid in sorted(ranks.items()):
            r = cli(pid, "capture", "--steps", 3, "-o", traces / f"rank{rank}.json",
                    timeout=STEP_TIMEOUT_S)
            m = re.search(r"^capture \d+: 3 steps \((\d+)-(\d+)\)", r.stdout, re.M)
            assert m, r.stdout
            steps[rank] = list(range(int(m.group(1)), int(m.group(2)) + 1))
            trace = json.loads((traces / f"rank{rank}.json").read_text())
            info = trace["distributedInfo"]
            assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", rank, 2)
            marked = sorted(int(e["name"].split("#")[1]) for e in trace["traceEvents"]
                            if e.get("name", "").startswith("ProfilerStep#"))
            assert marked == steps[rank]
    finally:
        launcher.cleanup()
        for pid in ranks.values():  # torchrun starts its workers in sessions of their own
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    outside = {k: v for k, v in os.environ.items()  # HTA is not probing: no sanitizer runtimes
               if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    r = subprocess.run([PYTHON, "-c", HTA_SCRIPT, str(traces)], capture_output=True, text=True,
                       timeout=600, env=outside)
    assert r.returncode == 0, r.stderr
    assert "distributedInfo" not in r.stderr and "ProfilerStep not found" not in r.stderr, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["ranks"] == [0, 1]
    for rank in (0, 1):
        # HTA leaves out the last step of a trace (it may be cut short); the others are there.
        assert result["iterations"][str(rank)] == steps[rank][:-1]
