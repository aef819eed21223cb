"""`probing exporter`: Prometheus metrics of every agent on the node (docs/exporter.md).

A 2-rank gloo job (tests/workloads/ddp_gloo.py under torchrun, held at the end) is scraped by
the exporter directly, by `promtool check metrics` and by a real Prometheus server (Debian's
`prometheus` package; scripts/setup-extras.sh installs it) that finds the exporter through the
exporter's own --sd file. The numbers must be the ones `probing query` gives for each rank.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import STEP_TIMEOUT_S, free_port, start_torchrun_job

STEPS = 8
HOST = socket.gethostname()
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def outside_env():
    """The environment for programs that are not probing's (prometheus, promtool): without the
    sanitizer runtimes scripts/sanitize.sh preloads into probing's processes."""
    return {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS",
                                                             "UBSAN_OPTIONS")}



def poll(what, predicate, timeout=STEP_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


def parse(text):
    """[(name, {label: value}, float)] of an exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = dict(LABEL.findall(m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def series(samples, name, **labels):
    return [(l, v) for n, l, v in samples if n == name
            and all(l.get(k) == str(x) for k, x in labels.items())]


def values(cli, pid, sql):
    """The first row of a query, as a list of values in column order."""
    return list(cli.query(pid, sql)[0].values())


def http_get(url, headers=None, timeout=60):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def job(cli, env, session_dir):
    """A 2-rank torchrun job of ddp_gloo.py held at the end: (job label, {rank: pid})."""
    proc, ranks, release = start_torchrun_job(cli, env, session_dir, "exporter-job", STEPS)
    try:
        assert sorted(ranks) == [0, 1], ranks
        agents = {str(a["pid"]): a for a in json.loads(cli("list", "-f", "json").stdout)}
        yield agents[ranks[0]]["job"], ranks
    finally:
        release()


class Exporter:
    def __init__(self, cli, env, workdir, *args):
        self.cli = cli
        self.sd = workdir / "probing-export-sd.json"
        self.out = open(workdir / "exporter.out", "w+")
        self.proc = subprocess.Popen([str(cli.binary), "exporter", "--listen", "127.0.0.1:0",
                                      "--sd", str(self.sd), *args], env=env,
                                     stdout=self.out, stderr=subprocess.STDOUT)
        text = poll("the exporter's address", self._address, 60)
        self.url = f"http://{text}"

    def _address(self):
        self.out.seek(0)
        m = re.search(r"serving http://(127\.0\.0\.1:\d+)/metrics", self.out.read())
        if not m and self.proc.poll() is not None:
            self.out.seek(0)
            pytest.fail(f"the exporter exited: {self.out.read()}")
        return m and m.group(1)

    def metrics(self, **kw):
        status, body = http_get(self.url + "/metrics", **kw)
        assert status == 200, body
        return body

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        self.out.close()


@pytest.fixture(scope="module")
def exporter(cli, env, session_dir, job):
    work = session_dir / "exporter"
    work.mkdir()
    # A generous deadline: the machine may be loaded (or sanitized); the stuck-agent test
    # announces a short one the way Prometheus does.
    e = Exporter(cli, env, work, "--timeout", "20")
    yield e
    e.stop()
    assert e.proc.returncode == 0
    assert not e.sd.exists(), "the file_sd file must be removed when the exporter stops"


def test_both_ranks_agree_with_probing_query(exporter, job, cli):
    job_label, ranks = job
    samples = parse(exporter.metrics())
    for rank, pid in ranks.items():
        want = dict(job=job_label, rank=rank, local_rank=rank, node_rank=0, host=HOST, pid=pid)
        [(labels, up)] = series(samples, "probing_up", **want)
        assert up == 1
        count, total = values(cli, pid, "SELECT COUNT(*), SUM(wall) FROM python.steps")
        [(_, n)] = series(samples, "probing_step_duration_seconds_count", **want)
        [(_, s)] = series(samples, "probing_step_duration_seconds_sum", **want)
        [(_, steps_total)] = series(samples, "probing_steps_total", **want)
        assert n == count == steps_total
        assert s == pytest.approx(total, rel=1e-9)
        [(_, inf)] = series(samples, "probing_step_duration_seconds_bucket", le="+Inf", **want)
        assert inf == count
        phases = {l["phase"]: v for l, v in series(samples, "probing_step_phase_seconds_total",
                                                   **want)}
        forward, backward = values(cli, pid, "SELECT SUM(forward), SUM(backward) FROM python.steps")
        assert phases["forward"] == pytest.approx(forward, rel=1e-9)
        assert phases["backward"] == pytest.approx(backward, rel=1e-9)
        assert set(phases) == {"data_wait", "forward", "backward", "optimizer", "collectives",
                               "grad_sync", "other"}
        ops = {row["op"]: row["n"] for row in cli.query(
            pid, "SELECT operation_type AS op, COUNT(*) AS n FROM python.nccl_trace WHERE step <= "
                 "(SELECT MAX(step) FROM python.steps) GROUP BY 1")}
        got = {l["op"]: v for l, v in series(samples, "probing_collectives_total", **want)}
        assert got == ops and "all_reduce" in got
        kinds = {l["kind"] for l, _ in series(samples, "probing_memory_bytes", **want)}
        assert {"rss", "parameters", "gradients", "optimizer_state"} <= kinds
        findings = series(samples, "probing_finding", **want)
        assert findings and all(l["severity"] in ("critical", "warning", "info", "ok")
                                for l, _ in findings)
        # Counters only grow: a second scrape after no new step gives the same counts.
    again = parse(exporter.metrics())
    for rank, pid in ranks.items():
        [(_, n)] = series(again, "probing_steps_total", rank=rank, pid=pid)
        assert n == cli.scalar(pid, "SELECT COUNT(*) FROM python.steps")


def test_promtool_accepts_the_exposition(exporter, tmp_path):
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool is not installed (Debian package prometheus; "
                    "scripts/setup-extras.sh installs it)")
    body = exporter.metrics()
    r = subprocess.run([promtool, "check", "metrics"], input=body, text=True,
                       capture_output=True, timeout=60, env=outside_env())
    assert r.returncode == 0, r.stdout + r.stderr


def test_healthy_and_unknown_pages(exporter):
    assert http_get(exporter.url + "/-/healthy") == (200, "probing exporter is healthy\n")
    assert http_get(exporter.url + "/nope") == (
        404, "no such page; the metrics are at /metrics, health at /-/healthy\n")


def test_sd_file_names_the_exporter(exporter):
    groups = json.loads(exporter.sd.read_text())
    assert groups == [{"targets": [exporter.url[len("http://"):]], "labels": {"host": HOST}}]


def test_prometheus_scrapes_both_ranks(exporter, job, cli, tmp_path):
    binary = shutil.which("prometheus")
    if not binary:
        pytest.skip("prometheus is not installed (Debian package prometheus; "
                    "scripts/setup-extras.sh installs it)")
    job_label, ranks = job
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 5s\n  scrape_timeout: 5s\n"
        "scrape_configs:\n"
        "  - job_name: probing\n    honor_labels: true\n"
        f"    file_sd_configs:\n      - files: ['{exporter.sd}']\n        refresh_interval: 1s\n")
    log = open(tmp_path / "prometheus.log", "w")
    prom = subprocess.Popen([binary, f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT, env=outside_env())
    try:
        # This job's ranks only: the exporter also serves the session's other traced processes.
        query = urllib.parse.quote(f'probing_step_duration_seconds_count{{job="{job_label}"}}')

        def result():
            try:
                status, body = http_get(f"http://127.0.0.1:{port}/api/v1/query?query={query}",
                                        timeout=10)
            except OSError:
                return None
            if prom.poll() is not None:
                pytest.fail(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()}")
            found = json.loads(body)["data"]["result"] if status == 200 else []
            return found if len(found) == 2 else None

        found = poll("Prometheus to hold the step-duration series of both ranks", result)
        # Every PromQL of docs/exporter.md and of the Grafana dashboard is valid and, for those
        # over step series, gives an answer for this job.
        for expr in documented_promql():
            status, body = http_get(f"http://127.0.0.1:{port}/api/v1/query?query="
                                    + urllib.parse.quote(expr), timeout=30)
            assert status == 200 and json.loads(body)["status"] == "success", (expr, body)
        by_rank = {int(r["metric"]["rank"]): r for r in found}
        assert sorted(by_rank) == [0, 1]
        for rank, pid in ranks.items():
            metric = by_rank[rank]["metric"]
            assert metric["job"] == job_label   # honor_labels: the training job, not "probing"
            assert metric["pid"] == pid and metric["host"] == HOST
            assert metric["local_rank"] == str(rank) and metric["node_rank"] == "0"
            count = cli.scalar(pid, "SELECT COUNT(*) FROM python.steps")
            assert float(by_rank[rank]["value"][1]) == count
    finally:
        prom.terminate()
        prom.wait(timeout=60)
        log.close()


def documented_promql():
    """The PromQL blocks of docs/exporter.md and the expressions of docs/grafana/probing.json,
    with the dashboard's variables filled in."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    exprs = re.findall(r"```promql\n(.*?)```", (docs / "exporter.md").read_text(), re.S)
    assert len(exprs) >= 5
    dashboard = json.loads((docs / "grafana" / "probing.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            exprs.append(target["expr"].replace("$job", ".*").replace("$__rate_interval", "1m"))
    return exprs


def test_stuck_agent_scrape_answers_by_its_deadline(exporter, job):
    """Rank 1 stopped (SIGSTOP): its socket accepts but never answers. The scrape still
    answers, rank 1 is probing_up 0 with no other series, rank 0 is reported in full."""
    _, ranks = job
    os.kill(int(ranks[1]), signal.SIGSTOP)
    try:
        # Prometheus announces its scrape timeout; the exporter answers half a second before.
        t0 = time.monotonic()
        body = exporter.metrics(headers={"X-Prometheus-Scrape-Timeout-Seconds": "2"}, timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        os.kill(int(ranks[1]), signal.SIGCONT)
    samples = parse(body)
    assert series(samples, "probing_up", rank=1, pid=ranks[1])[0][1] == 0
    assert series(samples, "probing_steps_total", rank=1) == []
    assert series(samples, "probing_up", rank=0, pid=ranks[0])[0][1] == 1
    assert series(samples, "probing_steps_total", rank=0, pid=ranks[0])
    # Bounded, not fast: without the deadline this would wait for the client's 120 s timeout.
    assert elapsed < 30, elapsed


def test_scrape_waiting_for_another_answers_by_its_own_deadline(exporter, job):
    """Scrapes run one at a time. While one is held by a stopped rank (the exporter's --timeout,
    20 s), a scrape that announces a 2 s timeout does not wait its turn past it: it answers 503
    and says why, before the slow scrape ends; the slow one is then answered in full."""
    import threading
    _, ranks = job
    done = []  # (which, status, body) in the order the answers came
    lock = threading.Lock()

    def scrape(which, headers):
        status, body = http_get(exporter.url + "/metrics", headers=headers, timeout=120)
        with lock:
            done.append((which, status, body))

    os.kill(int(ranks[1]), signal.SIGSTOP)
    try:
        slow = threading.Thread(target=scrape, args=("slow", {}))
        slow.start()
        time.sleep(3)  # the slow scrape holds the lock, waiting for rank 1
        quick = threading.Thread(target=scrape, args=(
            "quick", {"X-Prometheus-Scrape-Timeout-Seconds": "2"}))
        quick.start()
        quick.join(120)
        slow.join(120)
    finally:
        os.kill(int(ranks[1]), signal.SIGCONT)
    assert [d[0] for d in done] == ["quick", "slow"], done
    assert done[0][1:] == (503, "busy: the previous scrape still runs (an agent is slow to "
                                "answer); this scrape's 1.5 s ran out waiting for it\n")
    assert done[1][1] == 200
    samples = parse(done[1][2])
    assert series(samples, "probing_up", rank=1, pid=ranks[1])[0][1] == 0
    assert series(samples, "probing_up", rank=0, pid=ranks[0])[0][1] == 1


def test_bad_listen_address(cli):
    r = cli("exporter", "--listen", "localhost", check=False)
    assert r.returncode == 2
    assert r.stderr == ("probing: --listen wants ADDR:PORT, [ADDR]:PORT or :PORT (port 0 to "
                        "65535), not 'localhost'\n")


def test_port_in_use(cli):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        r = cli("exporter", "--listen", f"127.0.0.1:{port}", check=False)
    finally:
        s.close()
    assert r.returncode == 1
    assert r.stderr == (f"probing: cannot listen on '127.0.0.1:{port}': Address already in use; "
                        "another exporter may run there: choose another port with --listen "
                        ":PORT\n")


def test_scrape_needs_no_gil(exporter, launcher):
    """A process whose main thread holds the GIL in hours of C code (stack_gil.py) is still
    reported: the scrape's requests are answered without the GIL."""
    t = launcher.traced("stack_gil.py", hold=False)
    t._poll("BUSY", lambda: "BUSY" in t.stdout(), 60)

    def holds_gil_in_the_regex():
        r = subprocess.run([exporter.cli.binary, str(t.pid), "backtrace", "-f", "json"],
                           env=exporter.cli.env, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            return False
        return any(th["holds_gil"] and th["frames"] and th["frames"][0]["function"] == "match"
                   for th in json.loads(r.stdout)["threads"])

    poll("the main thread to hold the GIL inside re.match", holds_gil_in_the_regex, 60)
    samples = parse(exporter.metrics())
    [(labels, up)] = series(samples, "probing_up", pid=t.pid)
    assert up == 1
    assert series(samples, "probing_agent_info", pid=t.pid)
    assert t.alive()


def test_sd_file_in_a_missing_directory(cli, tmp_path):
    path = tmp_path / "missing" / "sd.json"
    r = cli("exporter", "--listen", "127.0.0.1:0", "--sd", path, check=False)
    assert r.returncode == 1
    assert r.stderr == (f"probing: cannot write the file_sd targets to {path}: No such file or "
                        "directory; give a writable path with --sd FILE\n")


def test_counters_follow_a_running_job(exporter, cli, launcher):
    """Scraped while it trains and again once it holds: the counters never go back, and at the
    end they equal the whole record (each step counted once across scrapes)."""
    t = launcher.traced("transformer.py", "--steps", 30, "--print-every", 1)
    seen = []

    def scrape_until_holding():
        found = series(parse(exporter.metrics()), "probing_steps_total", pid=t.pid)
        if found:
            seen.append(found[0][1])
        return "HOLDING" in t.stdout()

    poll("the training to finish while being scraped", scrape_until_holding)
    samples = parse(exporter.metrics())
    count, total = values(cli, t.pid, "SELECT COUNT(*), SUM(wall) FROM python.steps")
    [(_, n)] = series(samples, "probing_steps_total", pid=t.pid)
    [(_, s)] = series(samples, "probing_step_duration_seconds_sum", pid=t.pid)
    assert n == count == 30
    assert s == pytest.approx(total, rel=1e-9)
    assert seen == sorted(seen), seen
