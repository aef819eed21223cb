"""Exporter benchmark: what a Prometheus scrape every second costs a training job.

    python bench/exporter_cost.py [--window 5] [--rounds 8] [--no-write]

Runs tests/workloads/transformer.py (4 blocks, 60 modules, Adam, CPU, one thread) under
`probing run`, and `probing exporter` beside it. Alternates windows of --window seconds
without scrapes and with one GET /metrics per second (what a Prometheus with
scrape_interval: 1s does), --rounds times each, in the same process, so both conditions see
the same machine. Per condition: the median step wall time of the steps completed in its
windows (python.steps, the agent's own step times), and the median and largest time of one
scrape and the size of the exposition; and the spread of the per-window medians, which says how
much of a difference the machine's own noise makes. Results go to bench/RESULTS.md between the
BEGIN/END exporter markers.

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
import threading
import time
import urllib.request
from pathlib import Path

from _results import machine, write_section

REPO = Path(__file__).resolve().parent.parent
PROBING = REPO / "build" / "src" / "cli" / "probing"
WORKLOAD = REPO / "tests" / "workloads" / "transformer.py"


def query(env, pid, sql):
    r = subprocess.run([str(PROBING), str(pid), "query", sql, "-f", "json"], env=env,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"query failed: {r.stderr}")
    return json.loads(r.stdout)


def max_step(env, pid):
    return query(env, pid, "SELECT MAX(step) AS s FROM python.steps")[0]["s"] or 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pb-bench-exporter-"))
    sockets = work / "s"
    sockets.mkdir(mode=0o700)
    env = dict(os.environ, PROBING_DIR=str(sockets), PYTHONUNBUFFERED="1")
    if (REPO / "build" / "python").exists():
        env["PROBING_PYTHONPATH"] = str(REPO / "build" / "python")
    job = subprocess.Popen([str(PROBING), "run", "--", sys.executable, str(WORKLOAD), "--steps",
                            "100000000", "--print-every", "0"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = open(work / "exporter.out", "w+")
    exporter = subprocess.Popen([str(PROBING), "exporter", "--listen", "127.0.0.1:0"], env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (sockets / f"{job.pid}.sock").exists() or max_step(env, job.pid) < 20:
            if time.monotonic() > deadline or job.poll() is not None:
                raise SystemExit("the workload did not start stepping")
            time.sleep(0.5)
        url = None
        while url is None:
            out.seek(0)
            m = re.search(r"serving (http://127\.0\.0\.1:\d+)/metrics", out.read())
            url = m and m.group(1) + "/metrics"
            time.sleep(0.1)
        walls = {"none": [], "1 s": []}
        window_medians = {"none": [], "1 s": []}
        scrapes, sizes = [], []
        for _ in range(args.rounds):
            for condition in ("none", "1 s"):
                first = max_step(env, job.pid)
                stop = threading.Event()

                def scraper():
                    while not stop.wait(1.0):
                        t0 = time.monotonic()
                        with urllib.request.urlopen(url, timeout=30) as r:
                            body = r.read()
                        scrapes.append(time.monotonic() - t0)
                        sizes.append(len(body))

                thread = threading.Thread(target=scraper) if condition == "1 s" else None
                if thread:
                    thread.start()
                time.sleep(args.window)
                stop.set()
                if thread:
                    thread.join()
                last = max_step(env, job.pid)
                rows = query(env, job.pid, f"SELECT wall FROM python.steps WHERE step > {first} "
                                           f"AND step <= {last}")
                walls[condition] += [r["wall"] for r in rows]
                if rows:
                    window_medians[condition].append(statistics.median(r["wall"] for r in rows))
    finally:
        exporter.terminate()
        job.terminate()
        exporter.wait(timeout=60)
        job.wait(timeout=60)
    none, scraped = statistics.median(walls["none"]), statistics.median(walls["1 s"])
    body = (
        "## Exporter: a scrape every second vs none (bench/exporter_cost.py)\n\n"
        f"{machine()}\n\n"
        f"transformer.py under `probing run`, `probing exporter` beside it; {args.rounds} "
        f"interleaved windows of {args.window:g} s per condition in one process.\n\n"
        "| scrapes | steps | median step wall | vs none | window medians (min-max) |\n"
        "|---|---|---|---|---|\n"
        f"| none | {len(walls['none'])} | {none * 1e3:.2f} ms | | "
        f"{min(window_medians['none']) * 1e3:.1f}-{max(window_medians['none']) * 1e3:.1f} ms |\n"
        f"| every 1 s | {len(walls['1 s'])} | {scraped * 1e3:.2f} ms | "
        f"{(scraped - none) / none * 100:+.1f} % | "
        f"{min(window_medians['1 s']) * 1e3:.1f}-{max(window_medians['1 s']) * 1e3:.1f} ms |\n\n"
        f"One scrape (the exporter asking the agent for its info, the new steps, collectives, "
        f"memory, AMP, dropped rows, and every 30 s the report's findings): median "
        f"{statistics.median(scrapes) * 1e3:.1f} ms, largest {max(scrapes) * 1e3:.1f} ms, "
        f"{len(scrapes)} scrapes; exposition {statistics.median(sizes) / 1024:.1f} KiB.\n\n"
        + ("The median with scrapes lies within the spread of the windows without them (the "
           "machine's own noise): no cost of the scrapes is measurable here.\n"
           if min(window_medians["none"]) <= scraped <= max(window_medians["none"]) else
           "The median with scrapes lies outside the spread of the windows without them.\n"))
    print(body)
    if not args.no_write:
        write_section("exporter", body)


if __name__ == "__main__":
    main()
