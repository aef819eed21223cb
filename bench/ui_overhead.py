"""The web view's cost (`probing <target> ui`, docs/ui.md), two measurements in one run:

1. Step time of a live training job with one page open vs none, side by side. One job
   (tests/workloads/transformer.py under `probing run`) trains for the whole run; one headless
   Chromium stays started throughout and, phase by phase, either shows the overview page (which
   re-reads the job every second) or about:blank. Phases alternate closed/open/open/closed... so
   a drift of this VM's speed falls on both alike; each phase's steps are read from the job's
   python.steps at its end. The figure per pair of phases is median(open) / median(closed) - 1;
   the noise is the same figure between two closed phases next to each other. The browser runs
   on the same machine as the job, so its drawing is counted too (the worst case: on a cluster
   the page is usually on a laptop).

2. Page load of a 100,000-step recording in headless Chromium: milliseconds from navigation
   start until the overview chart is drawn (bucketed: at most 1,500 points), until the report's
   findings are shown, and until each other page is first drawn (ui.js records them in
   probingUI.timings). The recording is a real one (planted.py, 40 steps) whose steps, memory and
   module rows are repeated with shifted step numbers up to 100,000 steps, with module rows on
   detail windows of 8 steps every 512 (what the agent keeps by default on small models).

    python3 bench/ui_overhead.py [--rounds 8] [--phase-s 4]

Needs chromium, chromedriver and selenium (scripts/setup-extras.sh). Writes the section
`ui` of bench/RESULTS.md.
"""
import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from _results import machine, write_section

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORKLOADS = os.path.join(REPO, "tests", "workloads")


def probing_bin():
    for c in (os.environ.get("PROBING_BIN"), shutil.which("probing"),
              os.path.join(REPO, "build", "src", "cli", "probing")):
        if c and os.access(c, os.X_OK):
            return c
    sys.exit("bench: no probing binary (pip install . or make build)")


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    o = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,1000"):
        o.add_argument(a)
    d = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=o)
    d.set_script_timeout(120)
    return d


def wait_js(d, js, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        v = d.execute_script("return " + js)
        if v:
            return v
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {js}")
        time.sleep(0.05)


class UI:
    def __init__(self, binary, target, env):
        self.proc = subprocess.Popen([binary, str(target), "ui"], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.url = self.proc.stdout.readline().strip()
        if not self.url:
            raise RuntimeError("probing ui printed no URL")

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=30)


def query(binary, env, target, sql):
    r = subprocess.run([binary, str(target), "query", sql, "-f", "json"], env=env,
                       capture_output=True, text=True, check=True, timeout=120)
    return json.loads(r.stdout)


def last_step(binary, env, pid):
    return query(binary, env, pid, "SELECT max(step) AS s FROM python.steps")[0]["s"]


def overhead(binary, env, rounds, phase_s, d):
    job = subprocess.Popen([binary, "run", "--", sys.executable, "-u",
                            os.path.join(WORKLOADS, "transformer.py"), "--steps", "100000000",
                            "--print-every", "1000000"], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        sock = os.path.join(env["PROBING_DIR"], f"{job.pid}.sock")
        deadline = time.monotonic() + 300
        while not os.path.exists(sock):
            if time.monotonic() > deadline or job.poll() is not None:
                raise RuntimeError("the training job did not start")
            time.sleep(0.2)
        while (last_step(binary, env, job.pid) or 0) < 50:
            time.sleep(0.5)
        ui = UI(binary, job.pid, env)
        phases = []
        order = []
        for r in range(rounds):
            order += ["closed", "open", "open", "closed"] if r % 2 else ["closed", "open", "closed", "open"]
        try:
            for kind in order:
                if kind == "open":
                    d.get(ui.url)
                    wait_js(d, "window.probingUI && probingUI.overviewPoints > 0")
                else:
                    d.get("about:blank")
                first = last_step(binary, env, job.pid) + 1
                time.sleep(phase_s)
                last = last_step(binary, env, job.pid)
                walls = [r["wall"] for r in query(
                    binary, env, job.pid,
                    f"SELECT wall FROM python.steps WHERE step BETWEEN {first} AND {last} "
                    f"AND detail = 0")]
                phases.append((kind, statistics.median(walls), len(walls), os.getloadavg()[0]))
        finally:
            d.get("about:blank")
            ui.stop()
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    effect, noise = [], []
    for a, b in zip(phases, phases[1:]):
        if {a[0], b[0]} == {"open", "closed"}:
            o, c = (a, b) if a[0] == "open" else (b, a)
            effect.append(o[1] / c[1] - 1)
    closed = [p for p in phases if p[0] == "closed"]
    for a, b in zip(closed, closed[1:]):
        noise.append(abs(b[1] / a[1] - 1))
    return phases, effect, noise


def make_recording(binary, env, workdir, steps):
    """A real 40-step recording, extended to `steps` steps (see the module doc)."""
    small = os.path.join(workdir, "small.db")
    subprocess.run([binary, "run", "-o", small, "--", sys.executable, "-u",
                    os.path.join(WORKLOADS, "planted.py"), "--case", "healthy", "--steps", "40",
                    "--print-every", "40"], env=env, check=True, stdout=subprocess.DEVNULL,
                   timeout=600)
    big = os.path.join(workdir, f"steps{steps}.db")
    shutil.copy(small, big)
    c = sqlite3.connect(big)
    src_steps = c.execute("SELECT * FROM steps WHERE step >= 8 ORDER BY step").fetchall()
    src_mem = c.execute("SELECT * FROM memory WHERE step >= 8 ORDER BY step").fetchall()
    window = c.execute("SELECT * FROM torch_trace WHERE step BETWEEN 0 AND 7").fetchall()
    step_cols = [r[1] for r in c.execute("PRAGMA table_info(steps)")]
    mem_cols = [r[1] for r in c.execute("PRAGMA table_info(memory)")]
    tt_cols = [r[1] for r in c.execute("PRAGMA table_info(torch_trace)")]
    detail_i = step_cols.index("detail")
    have = c.execute("SELECT max(step) FROM steps").fetchone()[0] + 1
    rows, mem = [], []
    for s in range(have, steps):
        r = list(src_steps[(s - have) % len(src_steps)])
        r[0] = s
        r[detail_i] = 1 if s % 512 < 8 else 0
        rows.append(r)
        mm = list(src_mem[(s - have) % len(src_mem)])
        mm[0] = s
        mem.append(mm)
    c.executemany(f"INSERT INTO steps VALUES ({','.join('?' * len(step_cols))})", rows)
    c.executemany(f"INSERT INTO memory VALUES ({','.join('?' * len(mem_cols))})", mem)
    tt = []
    for base in range(512, steps, 512):
        for r in window:
            r = list(r)
            r[0] = base + r[0]
            tt.append(r)
    c.executemany(f"INSERT INTO torch_trace VALUES ({','.join('?' * len(tt_cols))})", tt)
    c.commit()
    c.close()
    return big


def page_load(binary, env, path, d, reps):
    ui = UI(binary, path, env)
    out = []
    try:
        for _ in range(reps):
            d.get("about:blank")
            d.get(ui.url)
            wait_js(d, "window.probingUI && probingUI.timings.overview && probingUI.timings.report")
            t = d.execute_script("return probingUI.timings")
            pts = d.execute_script("return probingUI.overviewPoints")
            for page in ("modules", "memory", "ranks", "sql"):
                start = d.execute_script("return performance.now()")
                d.execute_script(f"location.hash = '#{page}'")
                done = wait_js(d, f"probingUI.timings['{page}']")
                t[page] = done - start
            out.append((t, pts))
    finally:
        ui.stop()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)   # 4 phases each
    ap.add_argument("--phase-s", type=float, default=4.0)
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--load-reps", type=int, default=3)
    args = ap.parse_args()
    binary = probing_bin()
    work = tempfile.mkdtemp(prefix="pb-bench-ui-")
    env = dict(os.environ, PROBING_DIR=os.path.join(work, "s"))
    os.mkdir(env["PROBING_DIR"], 0o700)
    d = browser()
    try:
        big = make_recording(binary, env, work, args.steps)
        loads = page_load(binary, env, big, d, args.load_reps)
        phases, effect, noise = overhead(binary, env, args.rounds, args.phase_s, d)
    finally:
        d.quit()
        shutil.rmtree(work, ignore_errors=True)

    def mmm(v, scale=1.0, fmt="{:.1f}"):
        v = sorted(x * scale for x in v)
        return " / ".join(fmt.format(x) for x in (v[0], statistics.median(v), v[-1]))
    lines = [f"## Web view (`probing <target> ui`) — {time.strftime('%Y-%m-%d')}", "",
             machine(), "",
             f"Step time of tests/workloads/transformer.py (CPU, summary steps) with the overview "
             f"page open (live, re-read every second) vs no page, {len(phases)} phases of "
             f"{args.phase_s:.0f} s alternating, headless Chromium on the same machine:", "",
             "| phase | median step (ms) | steps | load average (1 min) at its end |",
             "|---|---|---|---|"]
    lines += [f"| {k} | {m * 1e3:.2f} | {n} | {la:.1f} |" for k, m, n, la in phases]
    lines += ["", f"Page open vs closed, per adjacent pair (min / median / max): "
              f"{mmm(effect, 100, '{:+.1f}')} %. Noise, closed vs the next closed phase: "
              f"{mmm(noise, 100, '{:.1f}')} %. The page's effect counts only where it is "
              f"larger than that noise; a load average above the {os.cpu_count()} cores means "
              f"other processes shared the machine during the run.", "",
              f"Page load of a {args.steps:,}-step recording (ms from navigation start; other "
              f"pages: from the click; min / median / max of {len(loads)} loads):", "",
              "| what | ms |", "|---|---|"]
    for key, label in (("overview", f"overview chart drawn ({loads[0][1]} points)"),
                       ("report", "report findings shown (runs `probing report` on the file)"),
                       ("modules", "modules page (flame graph + table)"),
                       ("memory", "memory page"), ("ranks", "ranks page"), ("sql", "SQL page")):
        lines.append(f"| {label} | {mmm([t[key] for t, _ in loads], 1, '{:.0f}')} |")
    write_section("ui", "\n".join(lines))


if __name__ == "__main__":
    main()
