"""Time from `probing <pid> inject` to the first recorded row, on a training run started without probing.

    python bench/inject_latency.py [--reps 10] [--no-write]

Each repetition starts tests/workloads/detach_train.py (a small MLP over a DataLoader, CPU) with
no probing in its environment, waits until it printed "step 20", then measures:
  inject     wall time of the `probing <pid> inject` process (ptrace, queue, wait for the agent)
  first row  from the start of inject until `SELECT count(*) FROM python.torch_trace` > 0
             (polled through the CLI every 5 ms, so it includes one query's latency)
  full step  until a step with forward, backward and optimizer rows is recorded
and kills the run. min / median / max over the repetitions go to bench/RESULTS.md (the section
between the BEGIN/END inject markers is replaced).
"""
import argparse
import datetime
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from _results import machine, write_section

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOAD = os.path.join(ROOT, "tests", "workloads", "detach_train.py")


def find_cli():
    for c in (os.environ.get("PROBING_BIN"), os.path.join(os.path.dirname(sys.executable), "probing"),
              os.path.join(ROOT, ".venv", "bin", "probing"), shutil.which("probing"),
              os.path.join(ROOT, "build", "src", "cli", "probing")):
        if c and os.path.exists(c):
            return c
    raise SystemExit("probing CLI not found (run scripts/setup.sh)")


def bare_env(socket_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROBING")}
    env.pop("PYTHONPATH", None)
    env["PROBING_DIR"] = socket_dir
    env["PYTHONUNBUFFERED"] = "1"
    return env


def scalar(cli, env, pid, sql):
    r = subprocess.run([cli, str(pid), "query", sql, "-f", "csv"], env=env, capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        return None
    lines = r.stdout.strip().splitlines()
    return int(lines[1]) if len(lines) > 1 and lines[1] else 0


def one(cli, python, env, workdir):
    out_path = os.path.join(workdir, "train.out")
    with open(out_path, "w") as out:
        proc = subprocess.Popen([python, "-u", WORKLOAD, "--print-every", "10", "--steps",
                                 "100000"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not re.search(r"^step 20\b", open(out_path).read(), re.M):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the workload did not reach step 20:\n" + open(out_path).read())
            time.sleep(0.05)
        t0 = time.perf_counter()
        r = subprocess.run([cli, str(proc.pid), "inject"], env=env, capture_output=True,
                           text=True, timeout=120)
        t_inject = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit("inject failed: " + r.stderr)
        t_first = t_full = None
        while t_full is None and time.perf_counter() - t0 < 60:
            if t_first is None and (scalar(cli, env, proc.pid,
                                           "SELECT count(*) FROM python.torch_trace") or 0) > 0:
                t_first = time.perf_counter() - t0
            if t_first is not None and (scalar(
                    cli, env, proc.pid, "SELECT count(*) FROM python.torch_trace WHERE stage = "
                    "'step'") or 0) > 0:
                t_full = time.perf_counter() - t0
            time.sleep(0.005)
        return t_inject, t_first, t_full
    finally:
        proc.kill()
        proc.wait()


def fmt(values):
    ms = [v * 1000 for v in values]
    return f"{min(ms):.0f} / {statistics.median(ms):.0f} / {max(ms):.0f}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    cli = find_cli()
    python = sys.executable
    results = []
    with tempfile.TemporaryDirectory(prefix="pbinj", dir="/tmp") as d:
        sockets = os.path.join(d, "s")
        os.mkdir(sockets, 0o700)
        env = bare_env(sockets)
        for i in range(args.reps):
            results.append(one(cli, python, env, d))
            print(f"rep {i + 1}: inject {results[-1][0] * 1000:.0f} ms, first row "
                  f"{results[-1][1] * 1000:.0f} ms, first full step {results[-1][2] * 1000:.0f} ms",
                  flush=True)
    text = (f"## Time from `inject` to the first recorded row — {datetime.date.today()}\n\n"
            f"{machine()} Method: `python "
            f"bench/inject_latency.py --reps {args.reps}`: tests/workloads/detach_train.py "
            "(small MLP, DataLoader, CPU) started without probing, inject at step "
            "20; times from the start of the `probing <pid> inject` process. The first-row and "
            "full-step times are polled through the CLI (one query each time, a few ms).\n\n"
            "| measure | ms (min / median / max) |\n|---|---|\n"
            f"| `probing <pid> inject` returns (agent started) | {fmt([r[0] for r in results])} |\n"
            f"| first row in python.torch_trace | {fmt([r[1] for r in results])} |\n"
            f"| first complete step (forward, backward, optimizer rows) | "
            f"{fmt([r[2] for r in results])} |\n")
    print(text)
    if not args.no_write:
        write_section("inject", text)


if __name__ == "__main__":
    main()
