"""The real fan-out of `stragglers` and `query --ranks all` on a real gloo job of 2 x PER_NODE
ranks over two network-namespace nodes (tests/workloads/cluster_job.py, PER_NODE ranks a node,
every rank under `probing run` with the job's token), timed from a rank of node A as the wall
time of the whole `ip netns exec ... probing ...` process, 10 runs each after 30 s of training.

    sudo env PROBING_BIN=build/src/cli/probing PROBING_PYTHONPATH=build/python \\
        .venv/bin/python bench/fanout_ranks.py 8

Needs root (`ip netns`); the namespaces are pb-fan-a and pb-fan-b, removed at the end. Prints
what bench/RESULTS.md ("The real fan-out on two namespace nodes") tabulates. The job's setup is
tests/integration/test_cluster.py's Job, the one the two-node tests use.
"""
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
from test_cluster import Job, _setup_netns, _teardown_netns  # noqa: E402

NODES = [("pb-fan-a", "pbfan-va", "10.231.71.1", "node-a"),
         ("pb-fan-b", "pbfan-vb", "10.231.71.2", "node-b")]
RUNS = 10


class Cli:
    binary = os.environ["PROBING_BIN"]


def timed(job, *args):
    ts, r = [], None
    for _ in range(RUNS):
        t = time.monotonic()
        r = job.run_cli(str(job.procs[0].pid), *args, node=0)
        ts.append(time.monotonic() - t)
        if r.returncode != 0:
            sys.exit(f"probing {' '.join(args)}: exit {r.returncode}: {r.stderr[-500:]}")
    return r, f"median {statistics.median(ts):.3f} min {min(ts):.3f} max {max(ts):.3f} s"


def main():
    per = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    work = Path(f"/tmp/probing-fanout-{time.time_ns()}")
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=os.environ["PROBING_PYTHONPATH"])
    _setup_netns(NODES)
    job = Job(Cli, env, work, nodes=NODES, per_node=per, args=("--grad-kb", 64, "--width", 64))
    try:
        t0 = time.monotonic()
        job.start()
        print(f"{2 * per} ranks started in {time.monotonic() - t0:.1f} s", flush=True)
        time.sleep(30)
        r, t = timed(job, "stragglers", "--json")
        a = json.loads(r.stdout)
        print(f"stragglers: {t}; {len(a['ranks'])} ranks, {a['collectives']} collectives, "
              f"culprit {a['culprit']}, late node {a['late_host']}", flush=True)
        r, t = timed(job, "query", "--ranks", "all", "SELECT COUNT(*) AS n FROM python.steps",
                     "-f", "json")
        print(f"query --ranks all: {t}; {len(json.loads(r.stdout))} rows", flush=True)
        print(subprocess.run(["free", "-m"], capture_output=True, text=True).stdout)
    finally:
        job.stop()
        _teardown_netns(NODES)


if __name__ == "__main__":
    main()
