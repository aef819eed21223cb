"""Capture benchmark: what `probing <pid> capture` costs a running job, and what it keeps.

    python bench/capture_cost.py [--steps 3] [--repeat 3] [--no-write]

Runs tests/workloads/transformer.py (4 blocks, 60 modules, Adam, CPU, one thread) under
`probing run` and, --repeat times, `probing <pid> capture --steps N -o trace.json`. Per capture,
from python.steps (the agent's own step times, which the capture does not touch): the median
step wall time of the 20 steps before the capture, of the captured steps, and of the 20 steps
after its rows appeared (the processing thread shares the GIL with training until then; the
steps in between are reported separately). Also the profiler events, the rows kept in
python.torch_ops (88-byte rows), the processing time and the size of the Chrome trace of the
same steps. Results go to bench/RESULTS.md between the BEGIN/END capture markers.

Timings on a shared machine are noisy: compare figures from one run, not across runs.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import write_section

REPO = Path(__file__).resolve().parent.parent
PROBING = REPO / "build" / "src" / "cli" / "probing"
WORKLOAD = REPO / "tests" / "workloads" / "transformer.py"
ROW_BYTES = 88


def cli(env, *args):
    r = subprocess.run([str(PROBING), *[str(a) for a in args]], env=env, capture_output=True,
                       text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"probing {' '.join(map(str, args))} failed:\n{r.stderr}")
    return r.stdout


def query(env, pid, sql):
    return json.loads(cli(env, pid, "query", sql, "-f", "json"))


def median_wall(env, pid, first, last):
    rows = query(env, pid, f"SELECT wall FROM python.steps WHERE step BETWEEN {first} AND {last}")
    return statistics.median(r["wall"] for r in rows) * 1000 if rows else float("nan")


def max_step(env, pid):
    return query(env, pid, "SELECT max(step) AS s FROM python.steps")[0]["s"] or 0


def wait_step(env, pid, step, proc):
    while max_step(env, pid) < step:
        if proc.poll() is not None:
            raise SystemExit("the workload exited")
        time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    results = []
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="pbcap", dir="/tmp") as tmp:
        env = dict(os.environ, PROBING_DIR=str(Path(tmp) / "s"))
        env.pop("PROBING", None)
        proc = subprocess.Popen([str(PROBING), "run", "--", sys.executable, str(WORKLOAD),
                                 "--steps", "1000000", "--print-every", "0"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pid = str(proc.pid)
        try:
            sock = Path(env["PROBING_DIR"]) / f"{pid}.sock"
            while not sock.exists():
                time.sleep(0.1)
            wait_step(env, pid, 40, proc)  # past warm-up
            for _ in range(args.repeat):
                trace = Path(tmp) / "trace.json"
                out = cli(env, pid, "capture", "--steps", args.steps, "-o", trace)
                m = re.search(r"^capture (\d+): \d+ steps? \((\d+)-(\d+)\)", out, re.M)
                capture, first, last = (int(g) for g in m.groups())
                done_at = max_step(env, pid)  # rows are in: processing has ended by now
                wait_step(env, pid, done_at + 21, proc)
                n = query(env, pid, f"SELECT count(*) AS n FROM python.torch_ops WHERE capture = {capture}")[0]["n"]
                events = int(re.search(r"from (\d+) profiler events \(processed in ([\d.]+) s\)", out).group(1))
                processing = float(re.search(r"processed in ([\d.]+) s", out).group(1))
                results.append({
                    "before": median_wall(env, pid, first - 20, first - 1),
                    "captured": median_wall(env, pid, first, last),
                    "between": median_wall(env, pid, last + 1, done_at),
                    "after": median_wall(env, pid, done_at + 1, done_at + 20),
                    "events": events, "rows": n, "processing": processing,
                    "trace": trace.stat().st_size,
                })
                print(results[-1], flush=True)
                trace.unlink()
        finally:
            proc.kill()
            proc.wait()
    loads.append(os.getloadavg()[0])

    def med(key):
        return statistics.median(r[key] for r in results)

    import torch
    lines = [f"## `probing <pid> capture` — {time.strftime('%Y-%m-%d')}", "",
             f"`python bench/capture_cost.py --steps {args.steps} --repeat {args.repeat}` (CPU, "
             f"torch {torch.__version__}, tests/workloads/transformer.py: 60 modules, Adam, one "
             "thread); medians over the captures. Step wall times from python.steps. Load average "
             f"{min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores (other work shared "
             "the machine): differences of a few ms between columns are noise.", "",
             "| step time before | captured steps | until the rows are in | 20 steps after | "
             "profiler events | rows in python.torch_ops | processing | Chrome trace (-o) |",
             "|---|---|---|---|---|---|---|---|",
             f"| {med('before'):.1f} ms | {med('captured'):.1f} ms | {med('between'):.1f} ms | "
             f"{med('after'):.1f} ms | {med('events'):.0f} | {med('rows'):.0f} "
             f"({med('rows') * ROW_BYTES / 1e6:.2f} MB) | {med('processing'):.2f} s | "
             f"{med('trace') / 1e6:.1f} MB |", "",
             "Captured steps pay the profiler and the module ranges; the steps until the rows are "
             "in share the GIL with the processing thread; after that the job is back to its "
             "speed."]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section("capture", text)


if __name__ == "__main__":
    main()
