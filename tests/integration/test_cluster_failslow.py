"""Fail-slows on two real nodes, while the job trains: the link between them turns slow, or one
node's CPUs are throttled. `stragglers` and `report` must tell them apart: a slow link is the
collectives slowing with every rank on time (a communication slowdown, not a rank), a
throttled node is its ranks entering the collectives last (a late node).

The two network-namespace nodes of test_cluster.py (their own namespaces here, pb-comm-a and
pb-comm-b), the same 4-rank gloo job (tests/workloads/cluster_job.py, 2 ranks a node) with a
512 KB gradient all-reduce each step (--grad-kb 512) and two 512-wide layers (--width 512: a
few ms of CPU a step, so a throttled node falls behind). In order, on one job:
  - healthy, 100 complete collectives: nothing named, the collectives not slowed (the twin);
  - node B's side of the link limited to 40 Mbit/s with a token bucket (`tc qdisc ... tbf`: a
    link that fell back to a lower speed): every rank still enters each all-reduce at the
    same time, the all-reduce takes longer once all are in. Then the limit is lifted;
  - node B's two ranks put in a CPU cgroup with a quota of 20 % of one CPU between them (a
    node throttled by its cgroup or its thermals): node B is named as the late node.
Skipped, with the reason, where `ip netns`, `tc`'s tbf or a CPU cgroup cannot be used. The
kernel here has no netem, so a delay or loss (rather than a rate limit) is not tested.
"""
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import STEP_TIMEOUT_S
from test_cluster import Job, _ip, _setup_netns, _teardown_netns, netns_unavailable

NODES = [  # (namespace, veth, address, host name)
    ("pb-comm-a", "pbcomm-va", "10.231.68.1", "node-a"),
    ("pb-comm-b", "pbcomm-vb", "10.231.68.2", "node-b"),
]
GRAD_KB = 512
WIDTH = 512  # a few ms of CPU a step (cluster_job.py), so a throttled node falls behind


def tbf_unavailable():
    """Why node B's link cannot be rate-limited here, or None (tried on a throwaway veth)."""
    if not shutil.which("tc"):
        return "needs tc (iproute2)"
    _ip("link", "del", "pbcommtc0", check=False)
    r = _ip("link", "add", "pbcommtc0", "type", "veth", "peer", "name", "pbcommtc1", check=False)
    if r.returncode:
        return f"cannot make a veth pair: {r.stderr.strip()}"
    try:
        r = subprocess.run(["tc", "qdisc", "add", "dev", "pbcommtc0", "root", "tbf", "rate",
                            "40mbit", "burst", "32kbit", "latency", "400ms"],
                           capture_output=True, text=True)
        return f"tc tbf: {r.stderr.strip()}" if r.returncode else None
    finally:
        _ip("link", "del", "pbcommtc0", check=False)


@pytest.fixture(scope="module")
def job(cli, env, session_dir):
    reason = netns_unavailable() or tbf_unavailable()
    if reason:
        pytest.skip(f"two-node communication test skipped: {reason}")
    work = session_dir / "cluster-comm"
    work.mkdir()
    _setup_netns(NODES)
    j = Job(cli, env, work, nodes=NODES, args=("--grad-kb", GRAD_KB, "--width", WIDTH))
    try:
        j.start()
        yield j
    finally:
        j.stop()
        _teardown_netns(NODES)


def stragglers(job, on_node=0):
    r = job.run_cli(str(job.procs[2 * on_node].pid), "stragglers", "--json", node=on_node)
    return json.loads(r.stdout) if r.returncode == 0 else None


def poll(job, predicate, what):
    deadline = time.monotonic() + 2 * STEP_TIMEOUT_S
    last = None
    while time.monotonic() < deadline:
        last = stragglers(job)
        if last and predicate(last):
            return last
        assert all(p.poll() is None for p in job.procs.values()), "a rank exited"
        time.sleep(1)
    pytest.fail(f"waited for {what}; last answer: {json.dumps(last)[:3000]}")


def grad_kind(a):
    return next((k for k in a["communication"]["kinds"]
                 if k["op"] == "all_reduce" and k["bytes"] == GRAD_KB * 1024), None)


def test_a_link_that_slows_is_named_as_communication_not_a_rank(job):
    # The healthy twin: the same job before the link slows.
    a = poll(job, lambda a: a["collectives"] >= 100, "100 complete collectives")
    assert a["culprit"] is None and a["late_host"] is None, a
    assert a["communication"]["slow"] is False, a["communication"]
    before = grad_kind(a)
    assert before and before["n"] >= 40, a["communication"]
    limit = ["tc", "qdisc", "add", "dev", NODES[1][1], "root", "tbf", "rate", "40mbit",
             "burst", "32kbit", "latency", "400ms"]
    r = subprocess.run(["ip", "netns", "exec", NODES[1][0], *limit], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    try:
        a = poll(job, lambda a: a["communication"]["slow"], "the collectives to be called slowed")
        assert a["culprit"] is None and a["late_host"] is None, a
        k = a["communication"]["kinds"][0]
        assert (k["op"], k["bytes"]) == ("all_reduce", GRAD_KB * 1024), a["communication"]
        # 2 x 3/4 x 512 KB across the link each way at 40 Mbit/s: about 80 ms more.
        assert k["recent_ms"] >= 2 * k["early_ms"] and k["recent_ms"] - k["early_ms"] >= 20, k
        assert a["communication"]["arrival_spread_ms"] < k["recent_ms"] / 2, a["communication"]
        # The text: the verdict line, from the other node.
        r = job.run_cli(str(job.procs[3].pid), "stragglers", node=1)
        first = r.stdout.splitlines()[0]
        assert first.startswith("no straggler, but the collectives slowed, not a rank: "
                                "all_reduce of 512 KB on group"), r.stdout
        assert "a communication slowdown" in first, r.stdout
        # The report of a rank of node A.
        r = job.run_cli(str(job.procs[1].pid), "report", "--json")
        doc = json.loads(r.stdout)
        f = next(f for f in doc["findings"] if f["id"] == "arrival_order")
        assert f["severity"] == "warning" and "the collectives slowed, not a rank" in f["claim"], f
    finally:
        subprocess.run(["ip", "netns", "exec", NODES[1][0], "tc", "qdisc", "del", "dev",
                        NODES[1][1], "root"], capture_output=True)


def cpu_cgroup():
    """(make, add, remove) for a CPU-quota cgroup named pb-slow-node (cgroup v1's cpu
    controller or v2's cpu.max), or a string saying why there is none."""
    v2_controllers = "/sys/fs/cgroup/cgroup.subtree_control"
    if os.path.exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
        root = "/sys/fs/cgroup/cpu"

        def quota(d, pct):  # microseconds of each 100 ms period
            with open(f"{d}/cpu.cfs_quota_us", "w") as f:
                f.write(str(int(1000 * pct)))
    elif os.path.exists(v2_controllers) and "cpu" in open(v2_controllers).read().split():
        root = "/sys/fs/cgroup"

        def quota(d, pct):
            with open(f"{d}/cpu.max", "w") as f:
                f.write(f"{int(1000 * pct)} 100000")
    else:
        return "no CPU cgroup controller (cgroup v1 cpu or v2 cpu.max) to throttle a node with"
    d = f"{root}/pb-slow-node"

    def make(pct):
        os.makedirs(d, exist_ok=True)
        quota(d, pct)

    def add(pid):
        with open(f"{d}/cgroup.procs", "w") as f:
            f.write(str(pid))

    def remove(pids):
        for pid in pids:
            try:
                with open(f"{root}/cgroup.procs", "w") as f:
                    f.write(str(pid))
            except OSError:
                pass  # exited
        try:
            os.rmdir(d)
        except OSError:
            pass
    return make, add, remove


def test_a_throttled_node_is_named_as_the_late_node(job):
    cg = cpu_cgroup()
    if isinstance(cg, str):
        pytest.skip(cg)
    make, add, remove = cg
    node_b = [job.procs[2].pid, job.procs[3].pid]
    make(20)
    try:
        for pid in node_b:
            add(pid)
        # While the window still holds the healthy steps, the verdict may come and go: wait
        # for it in three answers in a row.
        named = []
        a = poll(job, lambda a: named.append(a["late_host"]) or named[-3:] == ["node-b"] * 3
                 or (a["late_host"] not in (None, "node-b")), "node-b named three times in a row")
        assert a["late_host"] == "node-b", a
        # One of its ranks stands as the culprit (the most often last of them).
        hosts = {x["rank"]: x["host"] for x in a["ranks"]}
        assert hosts.get(a["culprit"]) == "node-b", a
        assert a["communication"]["slow"] is False, a["communication"]
        r = job.run_cli(str(job.procs[0].pid), "stragglers", node=0)
        assert r.stdout.startswith("node node-b is late: its ranks enter last in "), r.stdout
    finally:
        remove(node_b)
