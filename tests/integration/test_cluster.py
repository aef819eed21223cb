"""The whole job from one command (docs/cluster.md), tested as two real nodes.

Two Linux network namespaces (pb-cluster-a, pb-cluster-b) joined by a veth pair are two
"nodes", each with its own socket directory and host name (PROBING_HOST); a 4-rank gloo job
(tests/workloads/cluster_job.py, no torchrun) runs 2 ranks on each, its c10d store on node A.
The job's token is in a token file (PROBING_TOKEN_FILE), so every rank also listens on TCP.
From node A, with node A's socket directory:
  - `ranks` lists 4 ranks on 2 hosts (node B's through TCP, node A's through their sockets);
  - `query --ranks all` gives every rank's rows with rank and host columns (also -f csv), and
    `--ranks 1,3` just those;
  - a rank of node B that sleeps inside its step (in load_batch) is named by `hang` as the rank
    the others wait for in all_reduce, with its Python stack (read by its own agent: it is on
    another host);
  - without the token, node B's ranks are listed with what to do;
  - a rank of node B stopped (SIGSTOP): `query --ranks all --deadline 2` prints the others'
    rows after the deadline and names it; a rank of node B killed: `query --ranks all
    --deadline 3` prints the others' rows, names it on stderr and exits 3;
  - `timeline --ranks all` is one trace with a process per rank and each rank's clock offset;
  - `report` names a slowed node (ranks 2 and 3 sleep 30 ms more per step) once, as the node,
    and its arrival_order finding names it as the late node; `probing exporter` on each node
    gives its own ranks' arrival lag (node B's ~30 ms behind the first rank);
  - after the job, its per-rank recordings (`run -o rec-%r.db`) answer `query --ranks` as
    one job.
Skipped, with the reason, where `ip netns` cannot be used (needs root and iproute2). Only
traffic between the two namespaces.

Without namespaces: the job commands on a process outside any job, and their usage errors.
"""
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PYTHON, STEP_TIMEOUT_S, WORKLOADS

NODES = [  # (namespace, veth, address, host name)
    ("pb-cluster-a", "pbcluster-va", "10.231.67.1", "node-a"),
    ("pb-cluster-b", "pbcluster-vb", "10.231.67.2", "node-b"),
]
MASTER_PORT = 29561  # inside node A's fresh namespace: nothing else listens there
TOKEN = "pbcluster-token-0123456789abcdef"


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _teardown_netns(nodes=NODES):
    for ns, veth, _, _ in nodes:
        _ip("netns", "del", ns, check=False)
    _ip("link", "del", nodes[0][1], check=False)


def netns_unavailable():
    """The reason two namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces (ip netns)"
    if not shutil.which("ip"):
        return "needs iproute2 (the ip command)"
    r = _ip("netns", "add", "pb-cluster-check", check=False)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    _ip("netns", "del", "pb-cluster-check", check=False)
    return None


def _setup_netns(nodes=NODES):
    _teardown_netns(nodes)
    (ns_a, veth_a, addr_a, _), (ns_b, veth_b, addr_b, _) = nodes
    _ip("netns", "add", ns_a)
    _ip("netns", "add", ns_b)
    _ip("link", "add", veth_a, "type", "veth", "peer", "name", veth_b)
    _ip("link", "set", veth_a, "netns", ns_a)
    _ip("link", "set", veth_b, "netns", ns_b)
    for ns, veth, addr, _ in nodes:
        _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", veth)
        _ip("-n", ns, "link", "set", veth, "up")
        _ip("-n", ns, "link", "set", "lo", "up")


class Job:
    """A gloo job on the two nodes, per_node ranks each (ranks 0..per_node-1 on the first):
    cluster_job.py with args, or the workload argv (a list, after `python -u`) when given."""

    def __init__(self, cli, env, work, nodes=NODES, args=(), per_node=2, argv=None):
        self.cli, self.work, self.nodes, self.args = cli, work, nodes, [str(a) for a in args]
        self.per_node, self.world = per_node, per_node * len(nodes)
        self.control = work / "control"
        self.argv = ([str(a) for a in argv] if argv is not None else
                     [str(WORKLOADS / "cluster_job.py"), str(self.control), *self.args])
        self.token_file = work / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.token_file.chmod(0o600)
        self.procs, self.outs = {}, {}
        self.node_env = []
        for i, (ns, veth, addr, host) in enumerate(nodes):
            d = work / f"sockets-{host}"
            d.mkdir(mode=0o700)
            e = dict(env)
            e.update(PROBING_DIR=str(d), PROBING_HOST=host, PROBING_TOKEN_FILE=str(self.token_file),
                     MASTER_ADDR=nodes[0][2], MASTER_PORT=str(MASTER_PORT),
                     WORLD_SIZE=str(self.world), GROUP_RANK=str(i), GLOO_SOCKET_IFNAME=veth)
            e.pop("PROBING_TOKEN", None)
            self.node_env.append(e)

    def node_of(self, rank):
        return rank // self.per_node

    def start(self):
        for rank in range(self.world):
            node = self.node_of(rank)
            e = dict(self.node_env[node], RANK=str(rank), LOCAL_RANK=str(rank % self.per_node))
            out = open(self.work / f"rank{rank}.out", "w+")
            self.outs[rank] = out
            self.procs[rank] = subprocess.Popen(
                ["ip", "netns", "exec", self.nodes[node][0], self.cli.binary, "run", "-o",
                 self.work / "rec-%r.db", "--", PYTHON, "-u", *self.argv],
                env=e, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STEP_TIMEOUT_S * (self.world // 4)
        while time.monotonic() < deadline:
            text = "".join((self.work / f"rank{r}.out").read_text() for r in range(self.world))
            if all(f"READY {r}" in text for r in range(self.world)):
                return
            dead = [r for r, p in self.procs.items() if p.poll() is not None]
            if dead:
                break
            time.sleep(0.5)
        logs = "\n".join(f"--- rank {r}\n{(self.work / f'rank{r}.out').read_text()[-3000:]}"
                         for r in range(self.world))
        pytest.fail(f"the {self.world}-rank job did not reach its READY step on every rank:\n{logs}")

    def run_cli(self, *args, node=0, env=None, timeout=120):
        """`probing ARGS` inside node's namespace with node's socket directory and token."""
        e = dict(env or self.node_env[node])
        cmd = ["ip", "netns", "exec", self.nodes[node][0], self.cli.binary, *[str(a) for a in args]]
        return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        for f in self.outs.values():
            f.close()


@pytest.fixture(scope="module")
def job(cli, env, session_dir):
    reason = netns_unavailable()
    if reason:
        pytest.skip(f"two-node cluster tests skipped: {reason}")
    work = session_dir / "cluster"
    work.mkdir()
    _setup_netns()
    j = Job(cli, env, work)
    try:
        j.start()
        yield j
    finally:
        j.stop()
        _teardown_netns()


def rank0(job):
    return str(job.procs[0].pid)


def test_cluster_ranks_lists_four_ranks_on_two_hosts(job):
    r = job.run_cli(rank0(job), "ranks", "-f", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [row["rank"] for row in rows] == [0, 1, 2, 3]
    assert {row["host"] for row in rows} == {"node-a", "node-b"}
    assert [row["host"] for row in rows] == ["node-a", "node-a", "node-b", "node-b"]
    assert [row["node_rank"] for row in rows] == [0, 0, 1, 1]
    assert [row["pid"] for row in rows] == [job.procs[i].pid for i in range(4)]
    for row in rows:
        assert row["state"] == "training" or row["state"].startswith("in a collective: all_reduce #"), row
        assert row["step"] >= 3, row


def test_cluster_query_all_ranks_has_rank_and_host_columns(job):
    r = job.run_cli(rank0(job), "query", "--ranks", "all", "-f", "json",
                    "SELECT count(*) AS n, max(rank) AS r FROM python.nccl_trace")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [list(row) for row in rows] == [["rank", "host", "n", "r"]] * 4
    assert [(row["rank"], row["host"]) for row in rows] == [
        (0, "node-a"), (1, "node-a"), (2, "node-b"), (3, "node-b")]
    for row in rows:
        assert row["n"] > 0 and row["r"] == row["rank"], row  # each rank's own table
    r = job.run_cli(rank0(job), "query", "--ranks", "1,3", "-f", "csv", "SELECT 7 AS x")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["rank,host,x", "1,node-a,7", "3,node-b,7"]


def test_cluster_timeline_one_trace_with_a_process_per_rank(job):
    out = job.work / "job.json"
    r = job.run_cli(rank0(job), "timeline", "--ranks", "all", "-o", out)
    assert r.returncode == 0, r.stderr
    trace = json.loads(out.read_text())
    clocks = trace["otherData"]["ranks"]
    assert [(c["rank"], c["host"]) for c in clocks] == [
        (0, "node-a"), (1, "node-a"), (2, "node-b"), (3, "node-b")]
    for c in clocks:
        # One kernel clock for both namespaces: every rank read its clock between the request
        # and the answer, so the interval holds 0, and the smallest correction is none.
        assert c["uncertainty_ms"] >= 0 and c["offset_ms"] == 0, c
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names == {0: "rank 0 (node-a)", 1: "rank 1 (node-a)", 2: "rank 2 (node-b)",
                     3: "rank 3 (node-b)"}
    steps = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "step":
            steps.setdefault(e["args"]["step"], {})[e["pid"]] = e["ts"]
    common = [s for s, by_rank in steps.items() if len(by_rank) == 4]
    assert common, "no step of every rank in the trace"
    colls = {e["pid"] for e in trace["traceEvents"] if e.get("cat") == "collective"}
    assert colls == {0, 1, 2, 3}
    assert min(e["ts"] for e in trace["traceEvents"] if e["ph"] == "X") == 0


def test_cluster_report_names_the_slow_node_once(job):
    slow = [Path(f"{job.control}.slow.{r}") for r in (2, 3)]
    for f in slow:
        f.touch()
    try:
        deadline = time.monotonic() + 120
        finding = None
        while time.monotonic() < deadline:
            time.sleep(2)  # 30 steps of the slowed job: what --last 20 reads
            r = job.run_cli(rank0(job), "report", "--json", "--last", "20")
            assert r.returncode == 0, r.stderr
            doc = json.loads(r.stdout)
            found = [f for f in doc["findings"] if f["id"] == "stragglers"]
            # settles on the part slowed (other host time); while --last 20 still holds steps
            # from before, the claim can open with a few ms of step time (seen once in CI)
            if found and found[0]["severity"] == "warning" and \
                    "node node-b is slow in other host time: its ranks 2,3 take " in found[0]["claim"]:
                finding = found[0]
                break
        assert finding, found
        claim = finding["claim"]
        assert "rank 2" not in claim and "rank 3" not in claim and "node-a" not in claim, claim
        nums = finding["numbers"]
        assert sorted(nums["per_node"]) == ["node-a", "node-b"]
        assert [p["rank"] for p in nums["per_rank"]] == [0, 1, 2, 3]
        assert any("FROM python.steps" in q for q in finding["sql"]), finding["sql"]
        # the order in which the ranks enter the collectives says it too (arrival_order, from
        # every rank's /api/arrivals over TCP): node-b's two ranks are the last ones
        deadline, order = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            r = job.run_cli(rank0(job), "report", "--json", "--last", "20")
            assert r.returncode == 0, r.stderr
            order = next((f for f in json.loads(r.stdout)["findings"]
                          if f["id"] == "arrival_order"), None)
            if order and order["numbers"]["late_host"] == "node-b":
                break
            time.sleep(2)
        assert order and order["numbers"]["late_host"] == "node-b", order
        assert order["severity"] in ("warning", "critical"), order
        assert order["claim"].startswith("node node-b is late: its ranks enter collectives last "
                                         "in "), order["claim"]
        assert order["numbers"]["ranks_reached"] == 4, order["numbers"]
    finally:
        for f in slow:
            f.unlink()


def test_cluster_exporters_give_each_node_its_ranks_arrival_lag(job):
    """`probing exporter` on each node, node-b slowed: each asks every rank of the job for its
    arrivals (node B's over TCP from node A, and the reverse) and writes the lag series of its
    own node's ranks only; node-b's ranks enter the collectives ~30 ms after the first rank."""
    from test_exporter import parse, series
    slow = [Path(f"{job.control}.slow.{r}") for r in (2, 3)]
    exporters = []

    def scrape(node, url):
        r = subprocess.run(["ip", "netns", "exec", NODES[node][0], "curl", "-sS",
                            "--fail-with-body", url], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        lag = {}
        for labels, v in series(parse(r.stdout), "probing_collective_arrival_lag_seconds"):
            lag[int(labels["rank"])] = max(v, lag.get(int(labels["rank"]), 0.0))
        return lag

    for f in slow:
        f.touch()
    try:
        urls = []
        for node in (0, 1):
            p = subprocess.Popen(["ip", "netns", "exec", NODES[node][0], job.cli.binary,
                                  "exporter", "--listen", "127.0.0.1:0", "--timeout", "20"],
                                 env=job.node_env[node], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, start_new_session=True)
            exporters.append(p)
            line = p.stdout.readline()
            assert "serving http://" in line, line
            urls.append(line.split("serving ")[1].split()[0])
        deadline, a, b = time.monotonic() + 120, {}, {}
        while time.monotonic() < deadline:
            a, b = scrape(0, urls[0]), scrape(1, urls[1])
            if sorted(a) == [0, 1] and sorted(b) == [2, 3] and min(b.values()) >= 0.015:
                break
            time.sleep(2)
        assert sorted(a) == [0, 1] and sorted(b) == [2, 3], (a, b)
        assert min(b.values()) >= 0.015 and max(a.values()) < min(b.values()) / 2, (a, b)
    finally:
        for f in slow:
            f.unlink()
        for p in exporters:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=30)
            p.stdout.close()


def test_cluster_without_token_names_what_to_do(job):
    e = dict(job.node_env[0])
    e.pop("PROBING_TOKEN_FILE")
    r = job.run_cli(rank0(job), "ranks", "-f", "json", env=e)
    assert r.returncode == 3, r.stderr
    rows = json.loads(r.stdout)
    assert rows[0]["state"] != "" and not rows[0]["state"].startswith("unreachable")
    for row in rows[2:]:
        assert row["state"].startswith(f"unreachable: no token for {NODES[1][2]}:"), row
        assert "set PROBING_TOKEN (or PROBING_TOKEN_FILE, or --token) to the job's token" in row["state"]
    assert "probing: 2 of 4 ranks did not answer (see their state)" in r.stderr


def test_cluster_hang_names_the_sleeping_rank_with_its_stack(job):
    sleep_file = Path(f"{job.control}.sleep.3")
    sleep_file.touch()
    try:
        deadline = time.monotonic() + 120
        out = ""
        while time.monotonic() < deadline:
            r = job.run_cli(rank0(job), "hang")
            out = r.stdout
            if "all ranks but 3 are in all_reduce #" in out:
                break
            time.sleep(0.5)
        assert "all ranks but 3 are in all_reduce #" in out, out + r.stderr
        assert "on group WORLD, waiting" in out and "rank 3 has not entered it" in out, out
        lines = out.splitlines()
        odd = [l for l in lines if l.startswith(f"rank 3 (node-b, pid {job.procs[3].pid}) is in ")]
        assert odd and odd[0].endswith(" load_batch") and "cluster_job.py:" in odd[0], out
        assert any(l.startswith("waiting ranks 0-2 are in ") for l in lines), out
    finally:
        sleep_file.unlink()


def test_cluster_capture_on_every_rank_of_two_nodes(job):
    """`capture --ranks all -o DIR` from node A: node B's ranks through TCP, one trace each."""
    out = job.work / "captures"
    r = job.run_cli(rank0(job), "capture", "--ranks", "all", "--steps", 2, "-o", out,
                    timeout=STEP_TIMEOUT_S)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(os.listdir(out)) == [f"rank{i}.json" for i in range(4)]
    for rank in range(4):
        host = NODES[rank // 2][3]
        assert any(line.startswith(f"rank {rank} ({host}): capture ")
                   for line in r.stdout.splitlines()), r.stdout
        info = json.loads((out / f"rank{rank}.json").read_text())["distributedInfo"]
        assert (info["rank"], info["world_size"]) == (rank, 4)


def test_cluster_ui_shows_every_rank_and_the_hang_with_stacks(job):
    """`probing <rank 0> ui` on node A takes the 4 ranks from the job's roster (node B's over
    TCP); with rank 3 asleep in load_batch the hang route says the others wait for it and its
    stack (read by its own agent on node B) ends in load_batch."""
    ui = subprocess.Popen(["ip", "netns", "exec", NODES[0][0], job.cli.binary, rank0(job), "ui"],
                          env=job.node_env[0], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True)
    sleep_file = Path(f"{job.control}.sleep.3")

    def get(path):
        """The body of GET path from inside node A (the view listens on its 127.0.0.1)."""
        r = subprocess.run(["ip", "netns", "exec", NODES[0][0], "curl", "-sS", "--fail-with-body",
                            f"{base}{path}{'&' if '?' in path else '?'}token={token}"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    try:
        url = ui.stdout.readline().strip()
        assert "/?token=" in url, ui.stderr.read()
        base, token = url.split("/?token=")
        targets = json.loads(get("/ui/targets"))
        assert [(t["rank"], t["host"], t["node_rank"], t["pid"]) for t in targets["targets"]] == \
            [(i, NODES[i // 2][3], i // 2, job.procs[i].pid) for i in range(4)]
        assert targets["missing"] == []
        # node B's rank answers its own queries through the view
        rank3 = next(t["index"] for t in targets["targets"] if t["rank"] == 3)
        info = json.loads(get(f"/ui/info?t={rank3}"))
        assert (info["rank"], info["pid"]) == (3, job.procs[3].pid)
        sleep_file.touch()
        deadline, hang = time.monotonic() + 120, ""
        while time.monotonic() < deadline and "all ranks but 3 are in all_reduce #" not in hang:
            time.sleep(0.5)
            hang = get("/ui/hang")
        assert "rank 3 has not entered it" in hang, hang
        stack = json.loads(get(f"/ui/stack?t={rank3}"))
        main = next(th for th in stack["threads"] if th["main"])
        functions = [f["function"] for f in main["frames"]]
        assert "load_batch" in functions[:3] and functions[-1] == "<module>", functions
    finally:
        if sleep_file.exists():
            sleep_file.unlink()
        ui.send_signal(signal.SIGINT)
        try:
            ui.wait(timeout=30)
        except subprocess.TimeoutExpired:
            ui.kill()
            ui.wait()
        err = ui.stderr.read()
        ui.stdout.close()
        ui.stderr.close()
    assert "3 of the 3 other ranks found in the job's roster (1 on this machine)" in err, err


def test_cluster_stopped_rank_is_named_at_the_deadline(job):
    """Rank 2 (node B) stopped (SIGSTOP): its agent cannot answer; the others' rows come back
    once the deadline passes, and it is named with the deadline. The deadline is generous (a
    loaded machine must not make a live rank miss it); only the stopped rank can miss it."""
    os.kill(job.procs[2].pid, signal.SIGSTOP)
    try:
        r = job.run_cli(rank0(job), "query", "--ranks", "all", "--deadline", "15", "-f", "csv",
                        "SELECT 1 AS one")
    finally:
        os.kill(job.procs[2].pid, signal.SIGCONT)
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["rank,host,one", "0,node-a,1", "1,node-a,1", "3,node-b,1"]
    assert r.stderr == ("probing: rank 2 (node-b) is missing: did not answer within 15.0 s "
                        "(stopped, overloaded or its node unreachable?)\n"), r.stderr


def test_cluster_killed_rank_gives_partial_results(job):
    job.procs[3].send_signal(signal.SIGKILL)
    job.procs[3].wait(timeout=30)
    r = job.run_cli(rank0(job), "query", "--ranks", "all", "--deadline", "3", "-f", "json",
                    "SELECT 1 AS one")
    assert r.returncode == 3, r.stdout + r.stderr
    rows = json.loads(r.stdout)
    assert {"rank": 0, "host": "node-a", "one": 1} in rows
    assert 3 not in [row["rank"] for row in rows]
    assert "probing: rank 3 (node-b) is missing: " in r.stderr, r.stderr


def test_cluster_recordings_open_as_one_job(job):
    """Each rank ran under `probing run -o rec-%r.db` (rec-0.db ... rec-3.db): after the job is gone, any one of
    the files is the job (the recordings beside it with the same job and world size)."""
    job.stop()
    rec0 = job.work / "rec-0.db"
    r = job.cli(rec0, "query", "--ranks", "all", "-f", "json",
                "SELECT count(*) > 0 AS has_collectives FROM python.nccl_trace")
    rows = json.loads(r.stdout)
    assert rows == [{"rank": 0, "host": "node-a", "has_collectives": 1},
                    {"rank": 1, "host": "node-a", "has_collectives": 1},
                    {"rank": 2, "host": "node-b", "has_collectives": 1},
                    {"rank": 3, "host": "node-b", "has_collectives": 1}], rows
    r = job.cli(rec0, "query", "--ranks", "2-3", "SELECT 1 AS one", "-f", "csv")
    assert r.stdout.splitlines() == ["rank,host,one", "2,node-b,1", "3,node-b,1"]


# ---------------------------------------------------------------- one process, no namespaces


@pytest.fixture(scope="module")
def lone(session_dir, env, cli):
    from conftest import Launcher
    work = session_dir / "cluster-lone"
    work.mkdir()
    launcher = Launcher(cli, env, work, env["PROBING_DIR"])
    t = launcher.command([cli.binary, "run", "--", PYTHON, "-c",
                              "import time\nwhile True: time.sleep(0.1)"], name="lone")
    yield t
    launcher.cleanup()


def test_cluster_ranks_outside_a_job_lists_the_process_itself(cli, lone):
    r = cli(lone.pid, "ranks", "-f", "json")
    rows = json.loads(r.stdout)
    assert len(rows) == 1 and rows[0]["rank"] == 0 and rows[0]["pid"] == lone.pid, rows
    assert rows[0]["state"] == "running (no step yet)" and rows[0]["step"] == 0
    r = cli(lone.pid, "query", "--ranks", "all", "SELECT 5 AS five", "-f", "csv")
    assert r.stdout.splitlines()[0] == "rank,host,five"
    # a statement that selects rank itself keeps its own column, not a second one (issue 50)
    r = cli(lone.pid, "query", "--ranks", "all", "SELECT 0 AS rank, 5 AS five", "-f", "csv")
    lines = r.stdout.splitlines()
    assert lines[0] == "host,rank,five" and lines[1].endswith(",0,5") and len(lines) == 2, lines
    r = cli(lone.pid, "hang")
    assert r.stdout == "no rank is waiting in a collective (1 of 1 ranks answered)\n"


def test_cluster_rank_on_another_host_without_a_token(cli, env, session_dir):
    """Two lightweight ranks (no torch, a store of files), rank 1 under another host name and no
    token anywhere: it cannot listen on TCP, so it is listed with what to do, and the rows of
    rank 0 still come back."""
    from conftest import Launcher
    work = session_dir / "cluster-notoken"
    work.mkdir()
    store = work / "store"
    store.mkdir()
    launcher = Launcher(cli, env, work, env["PROBING_DIR"])
    ranks = []
    try:
        for rank, host in ((0, "here"), (1, "elsewhere")):
            e = dict(env, PROBING_HOST=host, WORLD_SIZE="2")
            t = launcher.command([cli.binary, "run", "--", PYTHON, WORKLOADS / "job_agent.py", store,
                                  rank, 2], env=e, name=f"agent{rank}")
            t._poll("READY", lambda: "READY" in t.stdout(), 60)
            ranks.append(t)
        cli_env = dict(env, PROBING_HOST="here")
        r = cli(ranks[0].pid, "ranks", "-f", "json", env=cli_env, check=False)
        assert r.returncode == 3, r.stderr
        rows = json.loads(r.stdout)
        assert [(x["rank"], x["host"]) for x in rows] == [(0, "here"), (1, "elsewhere")]
        assert rows[0]["state"] == "running (no step yet)"
        assert rows[1]["state"] == "unreachable: no TCP endpoint: set PROBING_TOKEN for the job"
        r = cli(ranks[0].pid, "query", "--ranks", "all", "SELECT 2 AS two", "-f", "csv",
                env=cli_env, check=False)
        assert r.returncode == 3
        assert r.stdout.splitlines() == ["rank,host,two", "0,here,2"]
        assert r.stderr == ("probing: rank 1 (elsewhere) is missing: no TCP endpoint: set "
                            "PROBING_TOKEN for the job\n")
    finally:
        launcher.cleanup()


def test_cluster_usage_errors(cli, lone):
    r = cli(lone.pid, "query", "--ranks", "0-x", "SELECT 1", check=False)
    assert r.returncode == 2
    assert r.stderr == ("probing: --ranks wants 'all' or a list of ranks and ranges such as 0,2-5, "
                        "not '0-x'\n")
    r = cli(lone.pid, "query", "--ranks", "0,4", "SELECT 1", check=False)
    assert r.returncode == 2 and r.stderr == "probing: --ranks 0,4: the job has ranks 0 to 0\n"
    r = cli(lone.pid, "query", "--deadline", "2", "SELECT 1", check=False)
    assert r.returncode == 2
    assert r.stderr == "probing: --deadline goes with --ranks (the time to wait for every rank)\n"
    r = cli(lone.pid, "ranks", "--deadline", "0", check=False)
    assert r.returncode == 2
    assert r.stderr == "probing: --deadline wants a number of seconds above 0 (up to 3600), not '0'\n"
