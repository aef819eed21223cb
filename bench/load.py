"""Load benchmark: the job's median step time with the agent idle and under 16 unthrottled
clients, side by side in one run, for the agent as shipped and for the agent with its load
protection turned off.

    python bench/load.py [--seconds 15] [--clients 16] [--no-write]

A child process trains a small MLP on CPU (torch.set_num_threads(1), a fixed batch: the same
work every step) under the agent (PROBING=1) and prints the monotonic time and duration of each
step. The child (and so the agent's threads) is pinned to the last CPU, the clients to the
others: what slows the job is then the agent's work on the job's CPU, not the clients' own.
For each configuration the parent alternates, --rounds times, on the same child:

  idle      --seconds with no client
  loaded    --seconds with --clients client processes, each sending requests back to back over
            the agent's Unix socket with no pause (a query over python.torch_trace, the
            system tables and /api/info, in turn)

and takes the median step time over the idle phases and over the loaded phases (steps that
start and end inside one). Alternating keeps other load on the machine from landing on one
side only. Configurations:

  protected    the defaults: server threads at nice +19 (PROBING_SERVER_NICE), two queries
               at a time (PROBING_QUERY_THREADS)
  unprotected  PROBING_SERVER_NICE=0, PROBING_QUERY_THREADS=64: every client's query runs at
               once at the job's priority, as before this protection existed

The figure is the slowdown of the loaded median over the idle median of the same child. Also
shown: the CPU the agent's threads (every thread of the child but the training thread) used
while loaded, in percent of one CPU, and the requests answered per second (the price of the
protection is paid by the clients). Results go to bench/RESULTS.md (section "load").
"""
import argparse
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from _results import machine, write_section

CHILD = r"""
import sys, time
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                            torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 256)
y = torch.randint(0, 10, (256,))
loss_fn = torch.nn.CrossEntropyLoss()
print("READY", flush=True)
while True:
    t0 = time.monotonic()
    for _ in range(4):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    t1 = time.monotonic()
    print("STEP %.6f %.6f" % (t1, t1 - t0), flush=True)
"""

REQUESTS = [
    ("POST", "/api/query", {"sql": "SELECT module, count(*), avg(duration) FROM "
                                   "python.torch_trace GROUP BY module"}),
    ("POST", "/api/query", {"sql": "SELECT * FROM system.process ORDER BY ts DESC LIMIT 100"}),
    ("GET", "/api/info", None),
]


def request_bytes(method, path, payload):
    body = json.dumps(payload).encode() if payload is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    if payload is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


def client(sock_path, stop_at, counter, cpus):
    os.sched_setaffinity(0, cpus)
    reqs = [request_bytes(*r) for r in REQUESTS]
    done = 0
    i = 0
    while time.monotonic() < stop_at:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.settimeout(30)
            s.connect(sock_path)
            s.sendall(reqs[i % len(reqs)])
            while s.recv(1 << 16):
                pass
            done += 1
        except OSError:
            pass
        finally:
            s.close()
        i += 1
    with counter.get_lock():
        counter.value += done


def cpu_s(pid, tid=None):
    """CPU seconds (user + system) of a process, or of one of its threads."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def agent_cpu_s(pid):
    """CPU seconds of every thread of the child but its main (training) thread."""
    return cpu_s(pid) - cpu_s(pid, pid)


def run_config(name, extra_env, seconds, rounds, clients, python, child_cpus, client_cpus):
    sock_dir = tempfile.mkdtemp(prefix="pbload")
    env = dict(os.environ, PROBING="1", PROBING_DIR=sock_dir, **extra_env)
    child = subprocess.Popen([python, "-u", "-c", CHILD], env=env, stdout=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, text=True,
                             preexec_fn=lambda: os.sched_setaffinity(0, child_cpus))
    sock_path = os.path.join(sock_dir, f"{child.pid}.sock")
    steps = []
    try:
        line = child.stdout.readline()
        assert line.strip() == "READY", line
        deadline = time.monotonic() + 60
        while not os.path.exists(sock_path):
            assert time.monotonic() < deadline, "the agent did not start"
            time.sleep(0.05)

        def read_until(t):
            while True:
                line = child.stdout.readline()
                if not line:
                    raise RuntimeError("the child exited")
                _, end, dur = line.split()
                steps.append((float(end), float(dur)))
                if float(end) >= t:
                    return

        read_until(time.monotonic() + 3)  # warm-up
        idle, loaded = [], []
        counter = multiprocessing.Value("l", 0)
        loaded_s = 0.0
        agent_loaded = 0.0
        for _ in range(rounds):
            idle.append((time.monotonic(), time.monotonic() + seconds))
            read_until(idle[-1][1])
            start = time.monotonic()
            agent_before = agent_cpu_s(child.pid)
            procs = [multiprocessing.Process(target=client, args=(sock_path, start + seconds, counter,
                                                                  client_cpus))
                     for _ in range(clients)]
            for p in procs:
                p.start()
            loaded.append((start, start + seconds))
            read_until(loaded[-1][1])
            agent_loaded += agent_cpu_s(child.pid) - agent_before
            for p in procs:
                p.join()
            loaded_s += time.monotonic() - start
        served = counter.value / loaded_s
    finally:
        child.kill()
        child.wait()
        for f in os.listdir(sock_dir):
            os.unlink(os.path.join(sock_dir, f))
        os.rmdir(sock_dir)

    def median_in(phases):
        ds = [d for end, d in steps for a, b in phases if a <= end - d and end <= b]
        return statistics.median(ds) * 1000, len(ds)

    idle_ms, idle_n = median_in(idle)
    loaded_ms, loaded_n = median_in(loaded)
    return {"name": name, "idle_ms": idle_ms, "idle_n": idle_n, "loaded_ms": loaded_ms,
            "loaded_n": loaded_n, "slowdown_pct": (loaded_ms / idle_ms - 1) * 100,
            "served_per_s": served, "agent_cpu_pct": agent_loaded / loaded_s * 100}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5, help="length of each phase")
    ap.add_argument("--rounds", type=int, default=4, help="idle/loaded alternations")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    configs = [("protected (defaults)", {}),
               ("unprotected (PROBING_SERVER_NICE=0, PROBING_QUERY_THREADS=64)",
                {"PROBING_SERVER_NICE": "0", "PROBING_QUERY_THREADS": "64"})]
    cpus = sorted(os.sched_getaffinity(0))
    child_cpus = {cpus[-1]}
    client_cpus = set(cpus[:-1]) or set(cpus)
    results = [run_config(n, e, a.seconds, a.rounds, a.clients, sys.executable, child_cpus,
                          client_cpus) for n, e in configs]
    lines = [machine(), "",
             f"`python bench/load.py --seconds {a.seconds:g} --rounds {a.rounds} --clients "
             f"{a.clients}`: median step time of one training child (pinned to CPU "
             f"{sorted(child_cpus)}, the agent's threads with it) over {a.rounds} alternations of "
             f"{a.seconds:g} s idle and {a.seconds:g} s under {a.clients} client processes "
             f"(pinned to CPUs {sorted(client_cpus)}) sending requests back to back, per "
             f"configuration.",
             "",
             "| configuration | idle median (steps) | loaded median (steps) | slowdown | agent CPU while loaded | requests/s served |",
             "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['name']} | {r['idle_ms']:.1f} ms ({r['idle_n']}) | "
                     f"{r['loaded_ms']:.1f} ms ({r['loaded_n']}) | {r['slowdown_pct']:+.1f} % | "
                     f"{r['agent_cpu_pct']:.0f} % of a CPU | {r['served_per_s']:.0f} |")
    text = "## Load: the job's step time under 16 clients\n\n" + "\n".join(lines) + "\n"
    print(text)
    if not a.no_write:
        write_section("load", text)


if __name__ == "__main__":
    main()
