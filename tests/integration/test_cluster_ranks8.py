"""Which rank makes everyone wait, at 8 ranks on two real nodes: DDP and FSDP2 training over
gloo between two network namespaces (node-a holds ranks 0-3, node-b ranks 4-7), each rank under
`probing run`, its agent on its node's socket directory and on TCP with the job's token.

The workload is tests/workloads/late_rank.py, the one test_stragglers.py runs on one host: a
small MLP, and on one rank of node-b a delay of 30 ms a step that lands where a real one would:
  - DDP, healthy (the twin): nobody is named, and no node;
  - DDP, rank 5's forward slower (a Python preprocessing step): the others wait for it in the
    gradient all-reduce; rank 5 is named, with its forward;
  - DDP, rank 6's backward slower (an autograd function whose gradient takes longer): rank 6
    is named, with its backward;
  - FSDP2, rank 5's batch preparation slower: the others wait in the first all-gather of the
    forward and enter the rest with it (last in few collectives, by far in one); rank 5 is
    named, with its other host time;
  - node-b's four ranks throttled together (a CPU cgroup at 40 % of one CPU for the four, on
    tests/workloads/cluster_job.py with two 512-wide layers and a 512 KB all-reduce a step, as
    test_cluster_failslow.py's 4-rank check): node-b is named as the late node, one of its
    ranks standing as the culprit, by the kind rule (its ranks the last ones in most of the
    all-reduces after the compute; docs/cli.md, "A late node"), and the collectives are not
    called slowed;
  - node-b's side of the link limited to 40 Mbit/s (`tc qdisc ... tbf`, as
    test_cluster_failslow.py's 4-rank check; this kernel has no netem for a delay or a loss)
    on that same cluster_job.py: every rank still enters each 512 KB all-reduce with the
    others, the all-reduce takes longer once all are in; a communication slowdown is said,
    and no rank nor node is named.
Each verdict is asked of a rank on the other node (node-a), so the answer crosses the link:
that agent asks every rank of the job for its arrivals, aligns their clocks and reduces. What
is asserted is what the agents recorded, not the test's own timings.

The namespaces here are pb-r8-a and pb-r8-b; skipped, with the reason, where `ip netns`
cannot be used.
"""
import contextlib
import json
import subprocess
import time

import pytest

from conftest import STEP_TIMEOUT_S, WORKLOADS
from test_cluster import Job, _setup_netns, _teardown_netns, netns_unavailable
from test_cluster_failslow import cpu_cgroup, tbf_unavailable

NODES = [  # (namespace, veth, address, host name)
    ("pb-r8-a", "pbr8-va", "10.231.69.1", "node-a"),
    ("pb-r8-b", "pbr8-vb", "10.231.69.2", "node-b"),
]
PER_NODE = 4


@pytest.fixture(scope="module")
def netns():
    reason = netns_unavailable()
    if reason:
        pytest.skip(f"8-rank two-node tests skipped: {reason}")
    _setup_netns(NODES)
    try:
        yield NODES
    finally:
        _teardown_netns(NODES)


@contextlib.contextmanager
def job(cli, env, session_dir, *workload_args, script="late_rank.py"):
    work = session_dir / f"ranks8-{time.monotonic_ns()}"
    work.mkdir()
    argv = [WORKLOADS / script, *workload_args]
    if script == "cluster_job.py":
        argv.insert(1, work / "control")
    j = Job(cli, env, work, nodes=NODES, per_node=PER_NODE, argv=argv)
    try:
        j.start()
        yield j
    finally:
        j.stop()


def stragglers(j, rank, text=False, last=None):
    """`probing <rank> stragglers [--json] [--last N]` run on rank's node."""
    args = [str(j.procs[rank].pid), "stragglers"] + ([] if text else ["--json"])
    args += ["--last", str(last)] if last else []
    r = j.run_cli(*args, node=j.node_of(rank))
    if text:
        return r.stdout
    return json.loads(r.stdout) if r.returncode == 0 else None


def settled(j, n, want, what, ask=1, newest=None):
    """The analysis asked of rank `ask` (node-a) once it covers n complete collectives and
    want(analysis) held in three answers in a row (a fresh job's first seconds, 8 ranks
    starting on 2 cores, can hold steps that name nobody or someone else); over the `newest`
    collectives of each group only (stragglers --last) when given."""
    deadline = time.monotonic() + 2 * STEP_TIMEOUT_S
    seen, last = [], None
    while time.monotonic() < deadline:
        last = stragglers(j, ask, last=newest)
        if last and last["collectives"] >= n:
            seen.append(bool(want(last)))
            if seen[-3:] == [True] * 3:
                return last
        assert all(p.poll() is None for p in j.procs.values()), "a rank exited"
        time.sleep(1)
    pytest.fail(f"waited for {what}; last answer: {json.dumps(last)[:3000]}")


def by_rank(a):
    return {x["rank"]: x for x in a["ranks"]}


def test_ddp_healthy_twin_names_nobody(cli, env, session_dir, netns):
    with job(cli, env, session_dir, "--slow-rank", "-1") as j:
        # Nobody named in three answers in a row, over 150 collectives, asked on node-a.
        a = settled(j, 150, lambda a: a["culprit"] is None and a["late_host"] is None,
                    "a healthy verdict")
        assert len(a["ranks"]) == 8, a
        hosts = by_rank(a)
        assert [hosts[r]["host"] for r in range(8)] == ["node-a"] * 4 + ["node-b"] * 4, a
        assert a["communication"]["slow"] is False, a["communication"]
        assert stragglers(j, 6, text=True).startswith("no straggler: ")


def test_ddp_slow_forward_on_node_b_is_named_with_its_forward(cli, env, session_dir, netns):
    with job(cli, env, session_dir, "--slow-rank", "5", "--slow-in", "forward") as j:
        a = settled(j, 150, lambda a: a["culprit"] == 5, "rank 5 named")
        assert a["late_host"] is None and a["phase"] == "forward", a
        # Its lag is about its delay: 30 ms, well over the bar.
        assert by_rank(a)[5]["median_lag_ms"] >= a["bar_ms"], a
        first = stragglers(j, 2, text=True).splitlines()[0]
        assert first.startswith("rank 5 (node-b) makes the others wait"), first
        assert "its forward is" in first, first


def test_ddp_slow_backward_on_node_b_is_named_with_its_backward(cli, env, session_dir, netns):
    with job(cli, env, session_dir, "--slow-rank", "6", "--slow-in", "backward") as j:
        a = settled(j, 150, lambda a: a["culprit"] == 6, "rank 6 named")
        assert a["late_host"] is None and a["phase"] == "backward", a
        first = stragglers(j, 0, text=True).splitlines()[0]
        assert first.startswith("rank 6 (node-b) makes the others wait"), first
        assert "its backward is" in first, first


def test_fsdp2_slow_batch_on_node_b_is_named(cli, env, session_dir, netns):
    with job(cli, env, session_dir, "--wrap", "fsdp2", "--slow-rank", "5",
             "--slow-in", "batch") as j:
        a = settled(j, 300, lambda a: a["culprit"] == 5, "rank 5 named")
        assert a["late_host"] is None and a["phase"] == "other", a
        # The wait rule: rank 5 holds a clear majority of the wait beyond the bar.
        ranks = by_rank(a)
        total = sum(x["wait_ms"] for x in ranks.values())
        assert ranks[5]["wait_ms"] >= 0.6 * total, a



def test_throttled_node_b_is_named_as_the_late_node(cli, env, session_dir, netns):
    cg = cpu_cgroup()
    if isinstance(cg, str):
        pytest.skip(cg)
    make, add, remove = cg
    with job(cli, env, session_dir, "--grad-kb", "512", "--width", "512",
             script="cluster_job.py") as j:
        settled(j, 100, lambda a: a["late_host"] is None, "a healthy verdict before the throttle")
        node_b = [j.procs[r].pid for r in range(4, 8)]
        make(40)
        try:
            for pid in node_b:
                add(pid)
            # Over the whole ring (512 collectives a group) the verdict stays "no straggler"
            # until throttled steps (~0.5 s each here) fill most of it, minutes; `--last 80`
            # asks about the newest 80 only, which the throttle fills in well under one. A
            # wrong node fails at once.
            # While the 80 still hold collectives from before the throttle, its oldest third
            # is faster than its newest and the collectives can read as slowed (seen once):
            # settled means node-b named with the collectives not slowed, three times in a row.
            def named(a):
                assert a["late_host"] in (None, "node-b"), a
                return a["late_host"] == "node-b" and not a["communication"]["slow"]
            a = settled(j, 60, named, "node-b named", ask=0, newest=80)
            assert a["collectives"] <= 80, a
            assert by_rank(a)[a["culprit"]]["host"] == "node-b", a
            # Without --last the analysis covers the whole ring, the healthy collectives
            # before the throttle too.
            whole = stragglers(j, 0)
            assert whole["collectives"] > a["collectives"], whole
            for _ in range(5):  # the sentence, from node-b itself, once its verdict agrees
                first = stragglers(j, 3, text=True, last=80).splitlines()[0]
                if first.startswith("node "):
                    break
                time.sleep(1)
            assert first.startswith("node node-b is late: its ranks enter last in "), first
        finally:
            remove(node_b)


def test_slow_link_to_node_b_is_named_as_communication(cli, env, session_dir, netns):
    reason = tbf_unavailable()
    if reason:
        pytest.skip(f"slow-link test skipped: {reason}")
    with job(cli, env, session_dir, "--grad-kb", "512", "--width", "512",
             script="cluster_job.py") as j:
        a = settled(j, 100, lambda a: a["culprit"] is None and a["late_host"] is None and
                    not a["communication"]["slow"], "a healthy verdict before the link slows")
        ns, veth = NODES[1][0], NODES[1][1]
        limit = ["tc", "qdisc", "add", "dev", veth, "root", "tbf", "rate", "40mbit",
                 "burst", "32kbit", "latency", "400ms"]
        r = subprocess.run(["ip", "netns", "exec", ns, *limit], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        try:
            # The newest third of the window must hold slowed all-reduces before the rule can
            # say so: some tens of steps. A rank or node named on the way fails at once.
            def slowed(a):
                assert a["culprit"] is None and a["late_host"] is None, a
                return a["communication"]["slow"]
            a = settled(j, 100, slowed, "the collectives to be called slowed")
            k = a["communication"]["kinds"][0]
            assert (k["op"], k["bytes"]) == ("all_reduce", 512 * 1024), a["communication"]
            assert k["recent_ms"] >= 2 * k["early_ms"], k
            first = stragglers(j, 6, text=True).splitlines()[0]
            assert first.startswith("no straggler, but the collectives slowed, not a rank: "
                                    "all_reduce of 512 KB on group"), first
        finally:
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", veth,
                            "root"], capture_output=True)
