"""Query latency benchmark: the seed queries over a full python.torch_trace, through the real CLI.

    python bench/query_latency.py [--rows 1000000,10000000] [--reps 5] [--no-write]

For each target row count N, a child process (PROBING_RING_ROWS = N rounded up to a power of
two) imports probing, builds nn.Sequential of 1,000 no-op modules and runs forward under
torch.no_grad() until it has written >= N rows (1,001 rows per forward: 1,000 inner modules +
the Sequential root), prints READY and waits until its stdin closes. The child's VmRSS is read
from /proc/self/status just before filling and just after, giving RSS added per row.

Then, interleaved in a shuffled order for each of --reps repetitions, the parent times each
query end to end as the wall time of a `probing <pid> query SQL -f json` subprocess
(time.perf_counter_ns around subprocess.run): seed queries 01 and 02 from
/work/shared/acceptance/seed-queries (verbatim), `SELECT MAX(step)` and `SELECT COUNT(*)`.
The table shows min / median / max in ms. The in-agent time alone is not measured: this is what a
user waits for, process start of the CLI included.

Agent footprint: VmRSS of a process that imports probing and torch with PROBING=0 (no agent),
vs the same with the agent started with default settings and no rows recorded (median of 3 each).

Results are written to bench/RESULTS.md (the section between the BEGIN/END query markers is
replaced).
"""
import argparse
import datetime
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from _results import machine, write_section

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEED_DIR = "/work/shared/acceptance/seed-queries"
SEEDS = {"01 overall profile": "01-overall-profile.sql", "02 per-step breakdown": "02-per-step-breakdown.sql"}
EXTRA = {"MAX(step)": "SELECT MAX(step) FROM python.torch_trace",
         "COUNT(*)": "SELECT COUNT(*) FROM python.torch_trace"}
ROWS_PER_FORWARD = 1001
TARGET_MS = 100.0  # issue target: seed query 01 over 1M rows in <= 100 ms


def find_cli():
    for c in (os.path.join(os.path.dirname(sys.executable), "probing"),
              os.path.join(ROOT, ".venv", "bin", "probing"), shutil.which("probing")):
        if c and os.path.exists(c):
            return c
    raise SystemExit("probing CLI not found (run scripts/setup.sh)")


def vmrss_kb(pid="self"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# ---------------------------------------------------------------- child side

def child_fill(n):
    import probing  # noqa: F401  starts the agent
    import torch
    from torch import nn

    class Noop(nn.Module):
        def forward(self, x):
            return x

    torch.set_num_threads(1)
    model = nn.Sequential(*(Noop() for _ in range(1000)))
    x = torch.randn(4)
    rss_before = vmrss_kb()
    forwards = -(-n // ROWS_PER_FORWARD)
    t0 = time.perf_counter()
    with torch.no_grad():
        for _ in range(forwards):
            model(x)
    fill_s = time.perf_counter() - t0
    rss_after = vmrss_kb()
    print(json.dumps({"rows_written": forwards * ROWS_PER_FORWARD, "rss_before_kb": rss_before,
                      "rss_after_kb": rss_after, "fill_s": fill_s}), flush=True)
    print("READY", flush=True)
    sys.stdin.read()  # until the parent closes our stdin


def child_footprint():
    import probing  # noqa: F401  (agent only if PROBING is not 0)
    import torch  # noqa: F401
    time.sleep(0.3)  # let the agent's threads settle
    print(json.dumps({"rss_kb": vmrss_kb(), "agent": probing.endpoint() is not None}), flush=True)


# ---------------------------------------------------------------- parent side

def footprint(sockdir):
    res = {}
    for label, probing_env in (("plain", "0"), ("agent", None)):
        vals = []
        for _ in range(3):
            env = dict(os.environ, PROBING_DIR=sockdir)
            env.pop("PROBING", None)
            env.pop("PROBING_RING_ROWS", None)
            if probing_env is not None:
                env["PROBING"] = probing_env
            out = subprocess.run([sys.executable, __file__, "--child-footprint"], env=env,
                                 capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                raise SystemExit(f"footprint child failed:\n{out.stderr}")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            if r["agent"] != (label == "agent"):
                raise SystemExit(f"footprint child {label}: agent running = {r['agent']}")
            vals.append(r["rss_kb"])
        res[label] = statistics.median(vals)
    return res


def run_query(cli, pid, sql, sockdir):
    env = dict(os.environ, PROBING_DIR=sockdir)
    t0 = time.perf_counter_ns()
    out = subprocess.run([cli, str(pid), "query", sql, "-f", "json"], capture_output=True,
                         text=True, timeout=300, env=env)
    dt = time.perf_counter_ns() - t0
    if out.returncode != 0:
        raise SystemExit(f"query failed (rc {out.returncode}): {sql}\n{out.stderr}")
    return dt, json.loads(out.stdout)


def bench_rows(cli, n, reps, sockdir, rng):
    ring = 1 << max(0, (n - 1).bit_length())
    # every forward in detail: the rows are the point here (docs/tables.md, detail steps)
    env = dict(os.environ, PROBING_DIR=sockdir, PROBING_RING_ROWS=str(ring), PROBING_DETAIL_EVERY="1")
    env.pop("PROBING", None)
    proc = subprocess.Popen([sys.executable, __file__, "--child-fill", str(n)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        if proc.stdout.readline().strip() != "READY":
            raise SystemExit("fill child did not report READY")
        _, rows = run_query(cli, proc.pid, EXTRA["COUNT(*)"], sockdir)
        count = list(rows[0].values())[0]
        _, rows = run_query(cli, proc.pid, EXTRA["MAX(step)"], sockdir)
        max_step = list(rows[0].values())[0]
        print(f"N={n}: ring {ring}, wrote {info['rows_written']} rows in {info['fill_s']:.1f} s, "
              f"COUNT(*) = {count}, MAX(step) = {max_step}", flush=True)
        if count < n:
            print(f"WARNING: COUNT(*) = {count} < target {n}", flush=True)
        queries = {k: open(os.path.join(SEED_DIR, f)).read() for k, f in SEEDS.items()}
        queries.update(EXTRA)
        samples = {k: [] for k in queries}
        result_rows = {}
        for rep in range(reps):
            order = list(queries)
            rng.shuffle(order)
            for k in order:
                dt, rows = run_query(cli, proc.pid, queries[k], sockdir)
                samples[k].append(dt)
                result_rows[k] = len(rows)
                print(f"  rep {rep + 1}/{reps} {k:22s} {dt / 1e6:9.1f} ms", flush=True)
        agent_rss_kb = vmrss_kb(proc.pid)
    finally:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=60)
    return {"n": n, "ring": ring, "count": count, "max_step": max_step, "info": info,
            "samples": samples, "result_rows": result_rows, "agent_rss_after_queries_kb": agent_rss_kb}


def fmt(ns_list):
    ms = [v / 1e6 for v in ns_list]
    return f"{min(ms):.1f} / {statistics.median(ms):.1f} / {max(ms):.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1000000,10000000")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    ap.add_argument("--child-fill", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--child-footprint", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_fill:
        return child_fill(args.child_fill)
    if args.child_footprint:
        return child_footprint()

    cli = find_cli()
    sockdir = tempfile.mkdtemp(prefix="pbq.", dir="/tmp")
    rng = random.Random(0)
    try:
        fp = footprint(sockdir)
        print(f"footprint: plain {fp['plain'] / 1024:.1f} MiB, agent idle {fp['agent'] / 1024:.1f} MiB",
              flush=True)
        results = [bench_rows(cli, int(n), args.reps, sockdir, rng) for n in args.rows.split(",")]
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)

    names = list(SEEDS) + list(EXTRA)
    lines = []
    lines.append(f"## Query latency through the CLI — {datetime.date.today().isoformat()}")
    lines.append("")
    lines.append(machine())
    lines.append(f"Method: `python bench/query_latency.py --rows {args.rows} --reps {args.reps}`. "
                 "A child fills python.torch_trace with forwards of 1,000 no-op modules under no_grad "
                 "(1,001 rows per forward; PROBING_RING_ROWS = N rounded up to a power of two; PROBING_DETAIL_EVERY=1), then "
                 "idles; each query is timed as the wall time of one `probing <pid> query SQL -f json` "
                 "process (CLI start, connect, run, JSON out), queries shuffled within each repetition. "
                 "Seed queries 01 and 02 verbatim from the acceptance set. Each root forward counts as "
                 "one step here (MAX(step) ~ N / 1,001), so 01 aggregates the last 10 steps "
                 "(~10k rows) and 02 the last 5, after a MAX(step) pass over the whole table.")
    lines.append("")
    lines.append("| rows (COUNT(*)) | MAX(step) | " + " | ".join(f"{k} ms (min / med / max)" for k in names) + " |")
    lines.append("|---|---|" + "---|" * len(names))
    for r in results:
        lines.append(f"| {r['count']:,} | {r['max_step']} | " +
                     " | ".join(fmt(r["samples"][k]) for k in names) + " |")
    lines.append("")
    lines.append("Footprint (VmRSS):")
    lines.append("")
    lines.append(f"- import probing + torch with PROBING=0 (no agent): {fp['plain'] / 1024:.1f} MiB; "
                 f"with the agent started, default settings, no rows: {fp['agent'] / 1024:.1f} MiB "
                 f"(agent baseline +{(fp['agent'] - fp['plain']) / 1024:.1f} MiB, median of 3 each).")
    for r in results:
        i = r["info"]
        added = (i["rss_after_kb"] - i["rss_before_kb"]) * 1024
        lines.append(f"- {r['n']:,} rows (ring {r['ring']:,}): RSS {i['rss_before_kb'] / 1024:.1f} MiB "
                     f"before filling -> {i['rss_after_kb'] / 1024:.1f} MiB after "
                     f"({added / i['rows_written']:.1f} bytes per row; filled in {i['fill_s']:.1f} s); "
                     f"{r['agent_rss_after_queries_kb'] / 1024:.1f} MiB after the queries.")
    lines.append("")
    one_m = next((r for r in results if r["n"] == 1000000), None)
    if one_m:
        med = statistics.median(one_m["samples"]["01 overall profile"]) / 1e6
        verdict = "met" if med <= TARGET_MS else "not met"
        lines.append(f"Target (seed query 01 over 1M rows in <= {TARGET_MS:.0f} ms): **{verdict}** — "
                     f"median {med:.1f} ms end to end through the CLI over {one_m['count']:,} rows.")
        lines.append("")
    body = "\n".join(lines)
    print()
    print(body)
    if not args.no_write:
        write_section("query", body)


if __name__ == "__main__":
    main()
