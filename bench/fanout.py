"""Fan-out of the job commands: latency of `probing <rank 0> ranks` and of
`probing <rank 0> query --ranks all "SQL"`, and the CLI's peak memory, for N = 1, 8, 32, 128
agents of one job.

The agents are lightweight: tests/workloads/job_agent.py under `probing run`, without torch,
joining one job through probing._agent._register_job with a store of files (the same registry
code as a torch.distributed rank, with a store the bench can make without torch:
set/get/check/delete_key over a directory). Where `ip netns` can be used (root, iproute2), half
of the agents run in a second network namespace under another host name, listening on TCP with
the job's token, so half the requests cross a veth pair as between two nodes; elsewhere all are
local (Unix sockets) and the section says so.

    python bench/fanout.py [--runs 20] [--sizes 1,8,32,128]

Writes the "fanout" section of bench/RESULTS.md.
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, write_section  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "pbcluster-bench-token-0123456789"
NS = [("pb-clbench-a", "pbclbench-va", "10.231.68.1", "bench-a"),
      ("pb-clbench-b", "pbclbench-vb", "10.231.68.2", "bench-b")]

AGENT = os.path.join(REPO, "tests", "workloads", "job_agent.py")


def find_probing():
    for p in (os.environ.get("PROBING_BIN"), os.path.join(REPO, "build/src/cli/probing"), shutil.which("probing")):
        if p and os.path.exists(p):
            return p
    sys.exit("fanout: the probing binary was not found (make, or set PROBING_BIN)")


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def netns_setup():
    if os.geteuid() != 0 or not shutil.which("ip"):
        return False
    netns_teardown()
    try:
        ip("netns", "add", NS[0][0])
        ip("netns", "add", NS[1][0])
        ip("link", "add", NS[0][1], "type", "veth", "peer", "name", NS[1][1])
        for ns, veth, addr, _ in NS:
            ip("link", "set", veth, "netns", ns)
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", veth)
            ip("-n", ns, "link", "set", veth, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        return True
    except subprocess.CalledProcessError:
        netns_teardown()
        return False


def netns_teardown():
    for ns, veth, _, _ in NS:
        ip("netns", "del", ns, check=False)
    ip("link", "del", NS[0][1], check=False)


def start_agents(probing, n, work, netns):
    store = os.path.join(work, f"store-{n}")
    os.mkdir(store)
    procs = []
    for r in range(n):
        node = 1 if netns and r >= (n + 1) // 2 else 0
        d = os.path.join(work, f"sockets-{node}")
        os.makedirs(d, mode=0o700, exist_ok=True)
        env = dict(os.environ, PROBING_DIR=d, PROBING_HOST=NS[node][3], WORLD_SIZE=str(max(n, 2)),
                   PROBING_TOKEN=TOKEN, PROBING_TORCH="0")
        if not netns:
            env["PROBING_LISTEN"] = ""
        cmd = [probing, "run", "--", sys.executable, AGENT, store, str(r), str(n)]
        if netns:
            cmd = ["ip", "netns", "exec", NS[node][0], *cmd]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    for p in procs:
        line = p.stdout.readline()
        if "READY" not in line:
            sys.exit(f"fanout: an agent did not start (got {line!r})")
    return procs


def timed(cmd, env):
    """(seconds, the child's peak RSS in KiB) of one CLI run that must succeed."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"fanout: {' '.join(cmd[-4:])} failed: {p.stderr.read().decode()[:500]}")
    p.stderr.close()
    return dt, usage.ru_maxrss


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--sizes", default="1,8,32,128")
    args = ap.parse_args()
    probing = find_probing()
    if not os.environ.get("PROBING_PYTHONPATH") and os.path.isdir(os.path.join(REPO, "build/python")):
        os.environ["PROBING_PYTHONPATH"] = os.path.join(REPO, "build/python")
    netns = netns_setup()
    work = tempfile.mkdtemp(prefix="pbcl-bench-")
    rows = []
    try:
        for n in [int(s) for s in args.sizes.split(",")]:
            procs = start_agents(probing, n, work, netns)
            try:
                env = dict(os.environ, PROBING_DIR=os.path.join(work, "sockets-0"),
                           PROBING_HOST=NS[0][3], PROBING_TOKEN=TOKEN)
                # nsenter: into node A's network namespace without ip netns exec's remounts
                pre = ["nsenter", f"--net=/var/run/netns/{NS[0][0]}"] if netns else []
                target = str(procs[0].pid)
                result = {}
                for name, cmd in (("ranks", [probing, target, "ranks"]),
                                  ("query --ranks all", [probing, target, "query", "--ranks", "all",
                                                         "SELECT count(*) AS n FROM python.torch_trace"])):
                    timed(pre + cmd, env)  # warm-up
                    samples = [timed(pre + cmd, env) for _ in range(args.runs)]
                    lat = [s[0] * 1000 for s in samples]
                    result[name] = (statistics.median(lat), pct(lat, 0.99), max(s[1] for s in samples))
                rows.append((n, result))
                print(n, result, flush=True)
            finally:
                for p in procs:
                    p.kill()
                for p in procs:
                    p.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if netns:
            netns_teardown()
    where = ("half of the agents in a second network namespace (another host name, reached over TCP "
             "through a veth pair with the job's token), half local (Unix sockets)" if netns else
             "every agent local (Unix sockets): network namespaces were not available")
    lines = [machine(), "",
             f"`probing <rank 0> ranks` and `probing <rank 0> query --ranks all \"SELECT count(*) AS n "
             f"FROM python.torch_trace\"` against N lightweight agents of one job ({where}); the "
             f"roster is read from the job's store on each run. {args.runs} runs after one warm-up; "
             "wall time of the whole CLI process; memory is the CLI's peak RSS.", "",
             "| N | ranks p50 | ranks p99 | query p50 | query p99 | CLI peak RSS |",
             "|---:|---:|---:|---:|---:|---:|"]
    for n, r in rows:
        a, q = r["ranks"], r["query --ranks all"]
        lines.append(f"| {n} | {a[0]:.1f} ms | {a[1]:.1f} ms | {q[0]:.1f} ms | {q[1]:.1f} ms | "
                     f"{max(a[2], q[2]) / 1024:.1f} MiB |")
    write_section("fanout", "## Fan-out: ranks and query --ranks (bench/fanout.py)\n\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
